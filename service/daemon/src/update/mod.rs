//! The service's updater: one updater, in the service (it may replace root-owned files; the
//! tray only presents what it publishes).
//!
//! - [`feed`]: the release feed (GitHub's releases API on a configurable base), conditional;
//! - [`verify`]: detached minisign signatures and `SHA256SUMS`, before anything is replaced;
//! - [`install`]: how this copy was installed (deb / portable / unmanaged), detected;
//! - [`stage`]: download, verify, unpack into the data directory;
//! - [`swap`], [`record`]: the swap, the restart in place, the watchdog and the rollback.
//!
//! [`Updater`] checks every [`CHECK_EVERY`] (± 10 % jitter, first check a few minutes after
//! start), quietly when the feed cannot be reached. In `auto` mode a newer, verified release is
//! handed to the service's ending (`run.rs`): it stops launching, waits without a
//! deadline for running jobs, stops serving, and calls [`swap::swap_and_exec`].

pub mod feed;
pub mod install;
pub mod record;
pub mod stage;
pub mod swap;
pub mod verify;

use feed::{Feed, FeedAnswer, Release};
use install::Installed;
use rm_proto::{Event, UnixMillis, UpdateMode, UpdateState, UpdateStatus, WatchMessage};
use semver::Version;
use stage::Staged;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, mpsc};
use verify::TrustedKey;

/// How often the feed is asked.
pub const CHECK_EVERY: Duration = Duration::from_secs(6 * 3600);

/// What the updater is told.
#[derive(Debug, Clone)]
pub struct UpdaterOptions {
    pub mode: UpdateMode,
    pub api_base: String,
    pub repo: String,
    pub check_every: Duration,
    /// The first check after start.
    pub first_check: Duration,
    /// A test-only key file (see [`verify`]); `None`: the built-in key.
    pub trust_key: Option<PathBuf>,
}

impl UpdaterOptions {
    /// The default schedule: every 6 h, the first one 1–5 minutes after start (so a fleet
    /// restarted together does not ask at once).
    pub fn schedule(mode: UpdateMode, api_base: String, repo: String) -> UpdaterOptions {
        UpdaterOptions {
            mode,
            api_base,
            repo,
            check_every: CHECK_EVERY,
            first_check: Duration::from_secs(60 + rand::random_range(0..240)),
            trust_key: None,
        }
    }
}

fn now() -> UnixMillis {
    UnixMillis(chrono::Utc::now().timestamp_millis())
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The running service's updater.
pub struct Updater {
    options: UpdaterOptions,
    feed: Feed,
    key: Result<TrustedKey, String>,
    installed: Installed,
    current: Version,
    data_dir: PathBuf,
    status: Mutex<UpdateStatus>,
    /// The feed's last `ETag` and the release it described.
    cache: Mutex<(Option<String>, Option<Release>)>,
    /// A version that was refused or rolled back, and why: not applied again unless asked.
    refused: Mutex<Option<(Version, String)>>,
    announced: Mutex<Option<Version>>,
    watch: broadcast::Sender<WatchMessage>,
    apply: mpsc::Sender<Staged>,
    /// One check or apply at a time.
    busy: tokio::sync::Mutex<()>,
}

impl Updater {
    /// `note` is what [`swap::on_start`] found.
    pub fn new(
        options: UpdaterOptions,
        data_dir: PathBuf,
        installed: Installed,
        note: &swap::StartNote,
        watch: broadcast::Sender<WatchMessage>,
        apply: mpsc::Sender<Staged>,
    ) -> Updater {
        let key = match &options.trust_key {
            Some(p) => TrustedKey::from_file(p),
            None => TrustedKey::built_in(),
        };
        let current = Version::parse(crate::VERSION).unwrap_or_else(|_| Version::new(0, 0, 0));
        let feed = Feed::new(&options.api_base, &options.repo);
        let mut status = UpdateStatus {
            current_version: crate::VERSION.to_owned(),
            mode: options.mode,
            install_kind: installed.kind(),
            state: UpdateState::Idle,
            feed: feed.url(),
            ..UpdateStatus::default()
        };
        let mut refused = None;
        match note {
            swap::StartNote::Updated { from } => {
                status.state = UpdateState::Updated;
                status.previous_version = Some(from.clone());
                status.message = Some(format!("updated from {from} to {}", crate::VERSION));
            }
            swap::StartNote::RolledBack { version, message } => {
                status.state = UpdateState::Failed;
                status.available_version = Some(version.clone());
                status.message = Some(message.clone());
                status.fix = Some(
                    "it is not applied again by itself; retry with `runner-manager update`, or \
                     report it with the service log (journalctl -u runner-manager)"
                        .into(),
                );
                refused = Version::parse(version).ok().map(|v| (v, message.clone()));
            }
            swap::StartNote::Trial(r) => {
                status.state = UpdateState::Updated;
                status.previous_version = Some(r.from.clone());
                status.message = Some(format!("updated from {} to {}", r.from, crate::VERSION));
            }
            swap::StartNote::None => {}
        }
        if let Err(e) = &key {
            status.state = UpdateState::Failed;
            status.message = Some(e.clone());
        }
        Updater {
            options,
            feed,
            key,
            installed,
            current,
            data_dir,
            status: Mutex::new(status),
            cache: Mutex::new((None, None)),
            refused: Mutex::new(refused),
            announced: Mutex::new(None),
            watch,
            apply,
            busy: tokio::sync::Mutex::new(()),
        }
    }

    pub fn status(&self) -> UpdateStatus {
        locked(&self.status).clone()
    }

    pub fn installed(&self) -> &Installed {
        &self.installed
    }

    fn publish(&self, event: Event) {
        let _ = self.watch.send(WatchMessage::Event { event });
    }

    fn set(&self, f: impl FnOnce(&mut UpdateStatus)) {
        f(&mut locked(&self.status));
    }

    fn fail(&self, version: Option<&Version>, reason: String, fix: String) {
        tracing::warn!(version = ?version.map(ToString::to_string), %reason, "update failed");
        self.set(|s| {
            s.state = UpdateState::Failed;
            s.message = Some(reason.clone());
            s.fix = Some(fix.clone());
            s.downloaded = None;
            s.total = None;
        });
        self.publish(Event::UpdateFailed {
            at: now(),
            new_version: version.map(ToString::to_string),
            reason,
            fix,
        });
    }

    /// The periodic checks (until the service stops).
    pub async fn run(self: Arc<Self>) {
        if self.options.mode == UpdateMode::Off {
            tracing::info!("update checks are off");
            return;
        }
        let mut wait = self.options.first_check;
        loop {
            let next = now().0 + wait.as_millis() as i64;
            self.set(|s| s.next_check = Some(UnixMillis(next)));
            tokio::time::sleep(wait).await;
            self.periodic_check().await;
            let every = self.options.check_every.as_millis() as u64;
            let jitter = every / 10;
            let ms = every - jitter + rand::random_range(0..=2 * jitter);
            wait = Duration::from_millis(ms.max(1));
        }
    }

    /// An asked-for check (the local API): waits for a check under way, then checks;
    /// `apply`: apply a newer release whatever the mode.
    pub async fn check(self: &Arc<Self>, apply: bool) -> UpdateStatus {
        let _busy = self.busy.lock().await;
        self.check_now(apply).await
    }

    /// The periodic check: skipped when another one is under way.
    async fn periodic_check(self: &Arc<Self>) {
        if let Ok(_busy) = self.busy.try_lock() {
            self.check_now(false).await;
        }
    }

    /// One check; the caller holds `busy`.
    async fn check_now(self: &Arc<Self>, apply: bool) -> UpdateStatus {
        if self.status().state == UpdateState::Applying {
            // Verified and handed to the service's ending: nothing more to ask.
            return self.status();
        }
        if let Err(e) = &self.key {
            let e = e.clone();
            self.fail(None, e, "fix or remove `--update-trust-key`".into());
            return self.status();
        }
        let previous = self.status().state;
        // `checking` is shown for an asked-for check (its caller waits for it) and before
        // anything is known; a periodic check leaves an outcome on screen instead of making
        // the tray and `update --check` flicker through `checking` every few hours.
        if apply || previous == UpdateState::Idle {
            self.set(|s| s.state = UpdateState::Checking);
        }
        let etag = locked(&self.cache).0.clone();
        let feed = self.feed.clone();
        let started = Instant::now();
        let answer = tokio::task::spawn_blocking(move || feed.latest(etag.as_deref())).await;
        let checked = now();
        self.set(|s| s.last_check = Some(checked));
        let answer = match answer {
            Ok(Ok(a)) => a,
            Ok(Err(e)) if e.is_offline() => {
                // Quiet: no event; asked again at the next check.
                tracing::debug!(error = %e, "release feed not reachable");
                self.set(|s| {
                    s.state = keep(previous);
                    s.message = Some(format!("{e}; asked again at the next check"));
                });
                return self.status();
            }
            Ok(Err(e)) => {
                tracing::info!(error = %e, "release feed refused the check");
                self.set(|s| {
                    s.state = keep(previous);
                    s.message = Some(format!("{e}; asked again at the next check"));
                });
                return self.status();
            }
            Err(e) => {
                self.set(|s| s.state = keep(previous));
                tracing::warn!(error = %e, "update check task failed");
                return self.status();
            }
        };
        let release = match answer {
            FeedAnswer::Unchanged => {
                tracing::debug!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "release feed unchanged (304)"
                );
                locked(&self.cache).1.clone()
            }
            FeedAnswer::Latest { release, etag } => {
                *locked(&self.cache) = (etag, release.clone());
                release
            }
        };
        let Some(release) = release.filter(|r| r.version > self.current) else {
            self.set(|s| {
                // An `updated`/`failed` outcome stays visible until something newer appears.
                s.state = match previous {
                    UpdateState::Updated | UpdateState::Failed if !apply => previous,
                    _ => UpdateState::UpToDate,
                };
                if s.state == UpdateState::UpToDate {
                    s.message = None;
                    s.fix = None;
                    s.available_version = None;
                }
            });
            if apply {
                self.set(|s| {
                    s.message = Some(format!(
                        "runner-manager {} is the latest release",
                        crate::VERSION
                    ))
                });
            }
            return self.status();
        };
        let version = release.version.clone();
        let automatic = self.options.mode == UpdateMode::Auto
            && !matches!(self.installed, Installed::Unmanaged { .. })
            && locked(&self.refused).as_ref().map(|r| &r.0) != Some(&version);
        // A release refused or rolled back stays `failed` until asked again or replaced by a
        // newer one: it never passes through `available` on the way.
        let refused = locked(&self.refused).clone().filter(|r| r.0 == version);
        if let (Some((_, why)), false) = (refused, apply) {
            self.set(|s| {
                s.state = UpdateState::Failed;
                s.available_version = Some(version.to_string());
                s.message = Some(why);
                s.fix = Some(
                    "it is not applied again by itself: retry with `runner-manager update`".into(),
                );
            });
            return self.status();
        }
        self.set(|s| {
            s.state = UpdateState::Available;
            s.available_version = Some(version.to_string());
            s.message = None;
            s.fix = None;
        });
        if locked(&self.announced).as_ref() != Some(&version) {
            *locked(&self.announced) = Some(version.clone());
            tracing::info!(%version, automatic, "a newer runner-manager was released");
            self.publish(Event::UpdateAvailable {
                at: now(),
                current_version: crate::VERSION.to_owned(),
                new_version: version.to_string(),
                automatic,
            });
        }
        if let Installed::Unmanaged { why, .. } = &self.installed {
            self.set(|s| {
                s.message = Some(why.clone());
                s.fix = Some("install the new release's package (see README, Install)".into());
            });
            return self.status();
        }
        if !(apply || automatic) {
            self.set(|s| {
                s.fix = Some("apply it with `runner-manager update` (or from the tray)".into())
            });
            return self.status();
        }
        self.stage_and_hand_over(release).await;
        self.status()
    }

    async fn stage_and_hand_over(self: &Arc<Self>, release: Release) {
        let version = release.version.clone();
        self.set(|s| {
            s.state = UpdateState::Downloading;
            s.downloaded = Some(0);
            s.total = None;
        });
        let me = Arc::clone(self);
        let staged = tokio::task::spawn_blocking(move || {
            let Ok(key) = &me.key else {
                return Err(stage::StageError::Refused("no trusted key".to_owned()));
            };
            // The built-in key, and one an earlier release introduced (a rotation).
            let learnt = TrustedKey::learnt(&me.data_dir);
            let keys: Vec<&TrustedKey> = std::iter::once(key).chain(learnt.as_ref()).collect();
            let mut last = Instant::now() - Duration::from_secs(1);
            let v = release.version.to_string();
            let mut progress = |done: u64, total: Option<u64>| {
                me.set(|s| {
                    s.downloaded = Some(done);
                    s.total = total;
                });
                if last.elapsed() >= Duration::from_millis(250) || total == Some(done) {
                    last = Instant::now();
                    me.publish(Event::UpdateProgress {
                        at: now(),
                        new_version: v.clone(),
                        downloaded: done,
                        total,
                    });
                }
            };
            // A transient failure (no answer, a 5xx, the disk) is tried again here, a few
            // times with a growing wait; it is never recorded as a refused release.
            let mut tries = 0;
            loop {
                tries += 1;
                match stage::stage(
                    &me.feed,
                    &keys,
                    &release,
                    &me.installed,
                    &me.current,
                    &me.data_dir,
                    &mut progress,
                ) {
                    Err(stage::StageError::Transient(detail)) if tries < STAGE_TRIES => {
                        let wait = STAGE_RETRY_FIRST * 3u32.pow(tries - 1);
                        tracing::warn!(%detail, tries, wait_secs = wait.as_secs(), "staging the update failed; trying again");
                        std::thread::sleep(wait);
                    }
                    other => return other,
                }
            }
        })
        .await
        .unwrap_or_else(|e| {
            Err(stage::StageError::Transient(format!(
                "the download task failed: {e}"
            )))
        });
        let staged = match staged {
            Ok(s) => s,
            Err(stage::StageError::Transient(detail)) => {
                let _ = std::fs::remove_dir_all(
                    self.data_dir
                        .join(record::UPDATES_DIR)
                        .join(version.to_string()),
                );
                tracing::warn!(%version, %detail, "the update could not be staged; tried again at the next check");
                self.set(|s| {
                    s.state = UpdateState::Available;
                    s.message = Some(format!(
                        "runner-manager {version} could not be downloaded ({detail}); tried again \
                         at the next check"
                    ));
                    s.fix = Some(
                        "check this machine's network and free disk space, or retry now with \
                         `runner-manager update`"
                            .into(),
                    );
                });
                return;
            }
            Err(stage::StageError::Refused(reason)) => {
                // Nothing refused is kept.
                let _ = std::fs::remove_dir_all(
                    self.data_dir
                        .join(record::UPDATES_DIR)
                        .join(version.to_string()),
                );
                *locked(&self.refused) = Some((version.clone(), reason.clone()));
                self.fail(
                    Some(&version),
                    reason,
                    "nothing was changed; the release is not tried again by itself: check the \
                     release, then retry with `runner-manager update`"
                        .into(),
                );
                return;
            }
        };
        tracing::info!(%version, "update verified: no new runners; applying once running jobs finish");
        self.set(|s| {
            s.state = UpdateState::Applying;
            s.message = Some("no new runners start; running jobs finish first".into());
            s.fix = None;
        });
        self.publish(Event::UpdateApplying {
            at: now(),
            new_version: version.to_string(),
        });
        if self.apply.send(staged).await.is_err() {
            self.fail(
                Some(&version),
                "the service is stopping".into(),
                "nothing to do".into(),
            );
        }
    }
}

/// Tries of one staging when it fails transiently, and the first wait (tripled each time).
const STAGE_TRIES: u32 = 3;
const STAGE_RETRY_FIRST: Duration = Duration::from_secs(2);

fn keep(previous: UpdateState) -> UpdateState {
    match previous {
        UpdateState::Checking => UpdateState::Idle,
        other => other,
    }
}
