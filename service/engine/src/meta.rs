//! The journal meta keys the service owns, all in one place (never secrets: the credential
//! and the pool's password live in the credential store).

/// The GitHub login the credential belongs to: GitHub's answer to `GET /user`, or the
/// signing-in client's word until GitHub has been asked (see `LOGIN_VERIFIED`).
pub const LOGIN: &str = "daemon_github_login";
/// `1` once `LOGIN` came from GitHub itself. A host without targets stays off the network, so
/// it keeps the client's word until its first target exists.
pub const LOGIN_VERIFIED: &str = "daemon_github_login_verified";
/// When the refresh token runs out (ms since the epoch).
pub const SIGN_IN_EXPIRES_MS: &str = "daemon_sign_in_expires_ms";
/// `1` while the operator paused launching.
pub const PAUSED: &str = "daemon_paused";
/// Targets being removed (their runners still finishing), as JSON.
pub const PENDING_REMOVALS: &str = "daemon_pending_removals";
/// Why targets are not launching (back-off, repair), as JSON, so a restart keeps it.
pub const LAUNCH_PROBLEMS: &str = "daemon_launch_problems";
/// The pool this host joined: its URL without the password, the label, this host's name.
pub const POOL_URL: &str = "daemon_pool_url";
pub const POOL_LABEL: &str = "daemon_pool_label";
pub const POOL_HOST: &str = "daemon_pool_host";
/// When this host last reached GitHub (the journal's own key: the offline CLI reads it too).
pub use rm_journal::meta_keys::LAST_GITHUB_CONTACT_MS;
