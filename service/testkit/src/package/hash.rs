//! SHA-256 of packages: while writing one (its advertised checksum) and of a file on disk (to
//! check a download against it).

use std::io::{self, Read, Write};
use std::path::Path;

use sha2::{Digest as _, Sha256};

use super::{io_err, PackageError};

/// Hashes and counts what passes through to the file.
pub(super) struct HashingWriter {
    inner: std::fs::File,
    hasher: Sha256,
    written: u64,
}

impl HashingWriter {
    pub(super) fn new(inner: std::fs::File) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            written: 0,
        }
    }

    pub(super) fn finish(self) -> (std::fs::File, String, u64) {
        (
            self.inner,
            hex::encode(self.hasher.finalize()),
            self.written,
        )
    }
}

impl Write for HashingWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(data)?;
        self.hasher.update(&data[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// SHA-256 (hex) of a file, for checking a package against its advertised checksum.
pub fn sha256_file(path: &Path) -> Result<String, PackageError> {
    let mut file =
        std::fs::File::open(path).map_err(io_err(format!("opening {}", path.display())))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(io_err(format!("reading {}", path.display())))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}
