//! The port the cache downloads through. The GitHub adapter implements it against
//! `actions/runners/downloads` or the releases API; tests serve files from a directory.

use super::{PackageId, PackageInfo};
use crate::platform::Platform;
use sha2::{Digest, Sha256};
use std::future::Future;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

/// Why a source could not answer. `retryable` tells the caller whether trying again later
/// can help (network, 5xx) or not (403, no such asset).
#[derive(Debug, thiserror::Error)]
#[error("runner package source: {message}")]
pub struct SourceError {
    pub message: String,
    pub retryable: bool,
}

impl SourceError {
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: true,
        }
    }

    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
        }
    }
}

/// Where runner packages come from.
pub trait PackageSource: Send + Sync {
    /// The newest package for a platform, with its checksum if the source publishes one.
    fn latest(
        &self,
        platform: Platform,
    ) -> impl Future<Output = Result<PackageInfo, SourceError>> + Send;

    /// Streams the file at `url` into `sink` (call [`DownloadSink::set_total`] when the size
    /// is known, then [`DownloadSink::write`] per chunk).
    fn download(
        &self,
        url: &str,
        sink: &mut DownloadSink,
    ) -> impl Future<Output = Result<(), SourceError>> + Send;
}

/// One progress event: bytes written so far and the total when the source said it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownloadProgress {
    pub package: PackageId,
    pub done: u64,
    pub total: Option<u64>,
}

/// A progress callback. Called from the downloading task, once per chunk: keep it cheap
/// (send on a channel, update an atomic).
pub type ProgressFn = Arc<dyn Fn(&DownloadProgress) + Send + Sync>;

/// The writing end of a download: a temp file in the cache, a running sha256 and progress.
pub struct DownloadSink {
    file: tokio::fs::File,
    hasher: Sha256,
    progress: DownloadProgress,
    on_progress: Option<ProgressFn>,
}

impl DownloadSink {
    pub(crate) fn new(
        file: tokio::fs::File,
        package: PackageId,
        on_progress: Option<ProgressFn>,
    ) -> Self {
        Self {
            file,
            hasher: Sha256::new(),
            progress: DownloadProgress {
                package,
                done: 0,
                total: None,
            },
            on_progress,
        }
    }

    /// Records the expected size (e.g. from `Content-Length`).
    pub fn set_total(&mut self, total: u64) {
        self.progress.total = Some(total);
    }

    /// Appends a chunk, updates the checksum and reports progress.
    pub async fn write(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        self.file.write_all(chunk).await?;
        self.hasher.update(chunk);
        self.progress.done += chunk.len() as u64;
        if let Some(f) = &self.on_progress {
            f(&self.progress);
        }
        Ok(())
    }

    /// Bytes written so far.
    pub fn bytes_done(&self) -> u64 {
        self.progress.done
    }

    /// Flushes and returns the hex sha256 of everything written.
    pub(crate) async fn finish(mut self) -> std::io::Result<(String, u64)> {
        self.file.flush().await?;
        self.file.sync_all().await?;
        Ok((hex::encode(self.hasher.finalize()), self.progress.done))
    }
}
