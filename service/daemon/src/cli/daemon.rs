//! `runner-manager daemon run`: its flags, and the hand-off to [`crate::run::run`].
//! The socket is the global `--socket` (the CLI's commands use the same default).

use std::path::Path;
use std::time::Duration;

use clap::Args;

use crate::exit::Failure;
use crate::paths::StartMode;
use crate::run::{Options, QuietHours, StoreKind};
use rm_engine::host_settings::{self, MAX_MEMORY_MB};

/// The flags of `daemon run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// How the service was started (decides the credential store)
    /// [default: boot for root, login otherwise].
    #[arg(long, value_enum)]
    pub start_at: Option<StartMode>,
    /// Where the service keeps its GitHub credential [default: by start mode].
    #[arg(long, value_enum, default_value = "auto")]
    pub credential_store: StoreKind,
    /// GitHub's REST base, e.g. https://HOST/api/v3 for GitHub Enterprise Server
    /// [default: config.json in the data directory, else github.com].
    #[arg(long, value_name = "URL", requires = "web_base")]
    pub api_base: Option<String>,
    /// GitHub's web base (sign-in), e.g. https://HOST.
    #[arg(long, value_name = "URL", requires = "api_base")]
    pub web_base: Option<String>,
    /// The GitHub App's client id (device flow and renewal) [default: built in].
    #[arg(long, value_name = "ID")]
    pub client_id: Option<String>,
    /// A user (name or uid) allowed to change the service besides root (repeatable).
    #[arg(long = "operator", value_name = "USER")]
    pub operators: Vec<String>,
    /// Members of this group may operate the service too (root service only).
    #[arg(long, value_name = "GROUP", default_value = rm_engine::operators::OPERATORS_GROUP)]
    pub operator_group: String,
    /// On SIGTERM/SIGINT, stop waiting for running jobs after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub drain_deadline: u64,
    /// How often to look for an upgraded binary, in milliseconds.
    #[arg(long, hide = true, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(10..))]
    pub upgrade_poll_ms: u64,
    /// A fixed poll interval in ms instead of GitHub's budget planner (tests).
    #[arg(long, hide = true, value_parser = clap::value_parser!(u64).range(50..))]
    pub poll_ms: Option<u64>,
    /// How often ended runners are looked for (while runners are live) and a pending removal
    /// is settled, in ms.
    #[arg(long, hide = true, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(50..))]
    pub tick_ms: u64,
    /// How long a pool host's heartbeat keeps its claims, in seconds (tests shorten it).
    #[arg(long, hide = true, default_value_t = 30, value_parser = clap::value_parser!(u64).range(3..=3600))]
    pub pool_lease_secs: u64,
    /// Renew the access token this many seconds before it expires (tests).
    #[arg(long, hide = true)]
    pub renew_margin_secs: Option<u64>,
    #[arg(long, hide = true)]
    pub registration_timeout_secs: Option<u64>,
    #[arg(long, hide = true)]
    pub idle_timeout_secs: Option<u64>,
    #[arg(long, hide = true)]
    pub stop_grace_ms: Option<u64>,
    /// The waits between DELETEs GitHub refuses for an ended runner, in ms, comma-separated
    /// (tests: GitHub's ten busy minutes in seconds).
    #[arg(long, hide = true, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..))]
    pub removal_retry_ms: Option<Vec<u64>>,
    /// The launch back-off's first wait, in ms (tests: minutes of back-off in seconds).
    #[arg(long, hide = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub launch_backoff_ms: Option<u64>,
    /// The launch back-off's longest wait, in ms.
    #[arg(long, hide = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub launch_backoff_max_ms: Option<u64>,
    /// Start a runner only when the memory available covers its expected peak (its target's
    /// typical peak, else --runner-memory-mb) beside what running jobs still need and the
    /// headroom. Running jobs are never stopped by it. Each admission flag, when given, is
    /// stored as the host's setting (as `runner-manager host set-admission` / `host set-rules`
    /// do, which change them while the service runs); one not given keeps the stored setting
    /// [default: the stored setting, else on].
    #[arg(long, value_enum, value_name = "on|off")]
    pub memory_admission: Option<OnOff>,
    /// A runner's expected peak memory before its target has any history, in MiB
    /// [default: the stored setting, else 2048].
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(1..=MAX_MEMORY_MB))]
    pub runner_memory_mb: Option<u64>,
    /// Memory kept free for your own work when admitting runners, in MiB
    /// [default: the stored setting, else 1024].
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(0..=MAX_MEMORY_MB))]
    pub memory_headroom_mb: Option<u64>,
    /// New runners wait while this machine runs on battery (`wait`), or start anyway (`run`)
    /// [default: the stored setting, else run].
    #[arg(long, value_enum)]
    pub on_battery: Option<OnBattery>,
    /// New runners wait while the 1-minute load average is above this; `off`: no limit
    /// [default: the stored setting, else off].
    #[arg(long, value_name = "N|off", allow_negative_numbers = true, value_parser = max_load_arg)]
    pub max_load: Option<OrOff<f64>>,
    /// New runners wait in these local hours, e.g. 22:00-07:00 (running jobs go on); `off`:
    /// none [default: the stored setting, else off].
    #[arg(long, value_name = "HH:MM-HH:MM|off", value_parser = quiet_hours_arg)]
    pub quiet_hours: Option<OrOff<QuietHours>>,
    /// Only use idle time: new runners wait while someone is active at the session (logind's
    /// idle hint) [default: the stored setting, else off].
    #[arg(long, value_enum, value_name = "on|off")]
    pub idle_only: Option<OnOff>,
    /// What to do when a newer release is published: auto (download, verify and apply it;
    /// running jobs finish first), notify (tell, apply when asked), off
    /// [default: config.json's `update`, else auto].
    #[arg(long, value_enum, value_name = "MODE")]
    pub update: Option<UpdateModeArg>,
    /// The release feed's REST base [default: config.json's `update_api_base`, else
    /// https://api.github.com].
    #[arg(long, value_name = "URL")]
    pub update_api_base: Option<String>,
    /// The repository runner-manager's releases come from (`owner/name`).
    #[arg(long, value_name = "OWNER/NAME")]
    pub update_repo: Option<String>,
    /// Check the feed this often, in seconds, starting right away (tests, benchmarks).
    #[arg(long, hide = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub update_check_secs: Option<u64>,
    /// Trust this minisign public key for updates instead of the built-in one. Tests only:
    /// refused by release builds.
    #[arg(long, hide = true, value_name = "FILE")]
    pub update_trust_key: Option<std::path::PathBuf>,
    /// Start every runner inside the job sandbox (`on`), or, accepting that jobs can then read
    /// your files, other processes and the services on this machine's loopback, without it
    /// (`off`) [default: config.json's `sandbox`, else on].
    #[arg(long, value_enum, value_name = "on|off")]
    pub sandbox: Option<OnOff>,
    /// A directory every job may write through the sandbox. Tests only.
    #[arg(long, hide = true, value_name = "DIR")]
    pub sandbox_test_share: Option<std::path::PathBuf>,
}

/// `--on-battery`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnBattery {
    Wait,
    Run,
}

impl OnBattery {
    pub fn waits(self) -> bool {
        self == OnBattery::Wait
    }
}

impl OnOff {
    pub fn on(self) -> bool {
        self == OnOff::On
    }
}

/// A setting's value, or `off` (`None`). (A plain `Option<Option<T>>` would tell clap that
/// the flag's value may be left out.)
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OrOff<T>(pub Option<T>);

pub fn max_load_arg(text: &str) -> Result<OrOff<f64>, String> {
    host_settings::parse_max_load(text).map(OrOff)
}

pub fn quiet_hours_arg(text: &str) -> Result<OrOff<QuietHours>, String> {
    host_settings::parse_quiet_hours(text).map(OrOff)
}

/// The admission flags of `daemon run` or `host set-admission`/`set-rules` as a change of the
/// stored settings (absent: unchanged).
#[allow(clippy::too_many_arguments)]
pub fn admission_change(
    memory_admission: Option<OnOff>,
    runner_memory_mb: Option<u64>,
    memory_headroom_mb: Option<u64>,
    on_battery: Option<OnBattery>,
    max_load: Option<OrOff<f64>>,
    quiet_hours: Option<OrOff<QuietHours>>,
    idle_only: Option<OnOff>,
) -> rm_proto::HostAdmissionChange {
    rm_proto::HostAdmissionChange {
        memory_admission: memory_admission.map(OnOff::on),
        runner_memory_mb,
        memory_headroom_mb,
        wait_on_battery: on_battery.map(OnBattery::waits),
        max_load: max_load.map(|l| l.0.map(rm_proto::LoadAverage)),
        quiet_hours: quiet_hours.map(|q| q.0.map(|q| q.wire())),
        idle_only: idle_only.map(OnOff::on),
    }
}

/// A setting that is on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// `--update`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UpdateModeArg {
    Auto,
    Notify,
    Off,
}

impl From<UpdateModeArg> for rm_proto::UpdateMode {
    fn from(m: UpdateModeArg) -> Self {
        match m {
            UpdateModeArg::Auto => rm_proto::UpdateMode::Auto,
            UpdateModeArg::Notify => rm_proto::UpdateMode::Notify,
            UpdateModeArg::Off => rm_proto::UpdateMode::Off,
        }
    }
}

fn resolve_operator(text: &str) -> Result<u32, Failure> {
    if let Ok(uid) = text.parse::<u32>() {
        return Ok(uid);
    }
    #[cfg(unix)]
    {
        match nix::unistd::User::from_name(text) {
            Ok(Some(user)) => Ok(user.uid.as_raw()),
            Ok(None) => Err(Failure::usage(format!(
                "no local user '{text}': fix `--operator {text}` (a user name or uid)"
            ))),
            Err(e) => Err(Failure::internal(format!(
                "cannot look up user '{text}': {e}"
            ))),
        }
    }
    #[cfg(not(unix))]
    {
        Err(Failure::usage(format!("`--operator {text}`: give a uid")))
    }
}

pub(super) fn run(data_dir: &Path, socket: &Path, args: RunArgs) -> Result<(), Failure> {
    init_logging();
    let operators = args
        .operators
        .iter()
        .map(|o| resolve_operator(o))
        .collect::<Result<Vec<_>, _>>()?;
    let secs = Duration::from_secs;
    let options = Options {
        data_dir: data_dir.to_path_buf(),
        mode: args.start_at.unwrap_or_else(StartMode::for_current_user),
        credential_store: args.credential_store,
        api_base: args.api_base,
        web_base: args.web_base,
        client_id: args.client_id,
        socket: socket.to_path_buf(),
        operators,
        operator_group: args.operator_group,
        drain_deadline: secs(args.drain_deadline),
        upgrade_poll: Duration::from_millis(args.upgrade_poll_ms),
        poll: args.poll_ms.map(Duration::from_millis),
        tick: Duration::from_millis(args.tick_ms),
        pool_lease: secs(args.pool_lease_secs),
        renew_margin: args.renew_margin_secs.map(secs),
        registration_timeout: args.registration_timeout_secs.map(secs),
        idle_timeout: args.idle_timeout_secs.map(secs),
        stop_grace: args.stop_grace_ms.map(Duration::from_millis),
        removal_retry: args
            .removal_retry_ms
            .map(|waits| waits.into_iter().map(Duration::from_millis).collect()),
        update_mode: args.update.map(Into::into),
        update_api_base: args.update_api_base,
        update_repo: args.update_repo,
        update_check_every: args.update_check_secs.map(secs),
        update_trust_key: args.update_trust_key,
        launch_backoff: args.launch_backoff_ms.map(Duration::from_millis),
        launch_backoff_max: args.launch_backoff_max_ms.map(Duration::from_millis),
        admission: admission_change(
            args.memory_admission,
            args.runner_memory_mb,
            args.memory_headroom_mb,
            args.on_battery,
            args.max_load,
            args.quiet_hours,
            args.idle_only,
        ),
        sandbox_off: args.sandbox.map(|s| s == OnOff::Off),
        sandbox_test_share: args.sandbox_test_share,
    };
    if let Some(key) = &options.update_trust_key {
        // Refused here already in release builds, with the fix.
        crate::update::verify::TrustedKey::from_file(key).map_err(Failure::usage)?;
    }
    crate::run::run(options)
}

pub(super) fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // journald and log files get plain text; colours only on a terminal.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
