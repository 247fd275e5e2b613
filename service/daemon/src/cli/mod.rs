//! The `runner-manager` command line (clap derive) and its dispatch.
//!
//! `auth`, `repo`, `org`, `host` and `status` talk to the running service through its local
//! API ([`backend_api::ApiBackend`]). `--offline` edits the journal of `--data-dir` directly
//! ([`backend::JournalBackend`]) for a stopped service (setup before the first start, repair);
//! it holds the data directory's lock meanwhile, so it refuses while the service runs.

pub mod auth;
pub mod backend;
pub mod backend_api;
mod cache;
mod daemon;
mod output;
mod pool;
mod update;
mod watch;
mod why;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use rm_core::{Label, ProfileName, Target};

use crate::exit::{ExitCode, Failure};
use crate::lock::{InstanceLock, LockError};
use crate::paths::{self, StartMode};
use crate::service_install::Systemd;
use backend::{AddTarget, Backend, Capacity, JournalBackend, UpdateTarget, MAX_CAPACITY};
use backend_api::ApiBackend;
use rm_engine::host_settings::MAX_MEMORY_MB;

/// Autoscale ephemeral GitHub Actions runners on this machine.
#[derive(Debug, Parser)]
#[command(name = "runner-manager", version, about, propagate_version = true)]
pub struct Cli {
    /// The service's data directory [default: /var/lib/runner-manager for root,
    /// $XDG_DATA_HOME/runner-manager otherwise]
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// The service's local API socket [default: /run/runner-manager/api.sock for root,
    /// $XDG_RUNTIME_DIR/runner-manager/api.sock otherwise]
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// Edit the journal in --data-dir directly instead of asking the running service
    /// (only while the service is stopped; repo/org/host/status only).
    #[arg(long, global = true)]
    pub offline: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
// Parsed once per process: the size of `daemon run`'s flags does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Sign in to GitHub (device flow), show or remove the credential.
    #[command(subcommand)]
    Auth(AuthCommand),
    /// Repositories this host serves (`owner/repo`).
    #[command(subcommand)]
    Repo(TargetCommand),
    /// Organizations this host serves.
    #[command(subcommand)]
    Org(TargetCommand),
    /// This machine: its routing label and capacity.
    #[command(subcommand)]
    Host(HostCommand),
    /// Host, targets and runners at a glance.
    Status {
        /// Machine-readable output.
        #[arg(long, conflicts_with = "watch")]
        json: bool,
        /// Follow the service: a line per change (and per notification the tray would
        /// raise), reconnecting when it restarts, until Ctrl-C.
        #[arg(long)]
        watch: bool,
    },
    /// Why queued jobs have no runner here: each job GitHub shows for this host's targets,
    /// with the reason from the service's last look (labels, capacity, memory, a rule,
    /// paused, rate limit, sign-in…) and the fix.
    Why {
        /// Only this target (`owner/repo` or an organization).
        target: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// The caches runners share: the tool cache (toolchains `setup-*` actions install) and
    /// each repository's dependency caches (npm, pip, cargo, Go…).
    #[command(subcommand)]
    Cache(CacheCommand),
    /// A pool of hosts serving one label, coordinated through a PostgreSQL database you run:
    /// a job asking for the pool's label runs on whichever host has room, with no surplus
    /// runner.
    #[command(subcommand)]
    Pool(PoolCommand),
    /// Run the service in the foreground.
    #[command(subcommand)]
    Daemon(DaemonCommand),
    /// Register the service with the OS service manager.
    #[command(subcommand)]
    Service(ServiceCommand),
    /// Check for a newer runner-manager release and apply it (running jobs finish first).
    Update {
        /// Only check and show what is available; change nothing.
        #[arg(long)]
        check: bool,
        /// Do not wait for the service to come back with the new version.
        #[arg(long)]
        no_wait: bool,
        /// Print the release keys updates are verified with (the one built into this binary,
        /// and one learnt from a release that rotated the key) and ask nothing of the service.
        #[arg(long, conflicts_with_all = ["check", "no_wait"])]
        trusted_keys: bool,
    },
    /// Confirms or undoes an update (started by the service itself; not for people).
    #[command(hide = true)]
    UpdateWatchdog {
        #[arg(long)]
        pid: u32,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Sign in: the service runs GitHub's device flow and keeps the credential; this shows
    /// the code to enter and waits for approval (Ctrl-C cancels).
    Login {
        /// Only sign in if the service uses this GitHub web origin (the service decides: change
        /// it in its config.json).
        #[arg(long, value_name = "URL")]
        web_base: Option<String>,
        /// Only sign in if the service uses this GitHub App client id.
        #[arg(long, value_name = "ID")]
        client_id: Option<String>,
    },
    /// Show whether the service holds a usable credential.
    Status,
    /// Remove the service's credential.
    Logout,
}

#[derive(Debug, Subcommand)]
pub enum TargetCommand {
    /// Serve a target; prints the label to put in `runs-on`.
    Add(AddArgs),
    /// List the targets served.
    List {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Change a served target.
    Set(SetArgs),
    /// Stop serving a target.
    Remove(TargetArg),
}

fn capacity_parser() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(1..=i64::from(MAX_CAPACITY))
}

fn min_capacity_parser() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(0..=i64::from(MAX_CAPACITY))
}

#[derive(Debug, Args)]
pub struct TargetArg {
    /// `owner/repo` for `repo`, the organization's name for `org`.
    pub target: String,
    /// The policy's profile (adds `-<profile>` to the routing label).
    #[arg(long, default_value = "default")]
    pub profile: String,
}

#[derive(Debug, Args)]
pub struct AddArgs {
    #[command(flatten)]
    pub target: TargetArg,
    /// At most this many runners at once [default: the host's capacity].
    #[arg(long, value_name = "N", value_parser = capacity_parser(), allow_negative_numbers = true, conflicts_with = "monitor_only")]
    pub max_runners: Option<u32>,
    /// Keep at least this many runners waiting (needs --max-runners).
    #[arg(long, value_name = "N", value_parser = min_capacity_parser(), allow_negative_numbers = true, default_value_t = 0)]
    pub min_runners: u32,
    /// Watch demand but start no runners.
    #[arg(long)]
    pub monitor_only: bool,
    /// An extra runner label (repeatable); the routing label is always first.
    #[arg(long = "label", value_name = "LABEL")]
    pub labels: Vec<String>,
    /// Also the label of the pool this host joined (`pool join`): the target's jobs that ask
    /// for it run on whichever host of the pool has room.
    #[arg(long)]
    pub pool: bool,
    /// Add it disabled.
    #[arg(long)]
    pub disabled: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("switch").args(["enable", "disable"])))]
pub struct SetArgs {
    #[command(flatten)]
    pub target: TargetArg,
    /// At most this many runners at once.
    #[arg(long, value_name = "N", value_parser = capacity_parser(), allow_negative_numbers = true, conflicts_with = "monitor_only")]
    pub max_runners: Option<u32>,
    /// Keep at least this many runners waiting.
    #[arg(long, value_name = "N", value_parser = min_capacity_parser(), allow_negative_numbers = true)]
    pub min_runners: Option<u32>,
    /// Watch demand but start no runners.
    #[arg(long)]
    pub monitor_only: bool,
    /// Replace the extra labels (repeatable).
    #[arg(long = "label", value_name = "LABEL")]
    pub labels: Vec<String>,
    /// Add the label of the pool this host joined (`pool join`) to the target's extra labels
    /// (kept as they are, or as `--label` gives them).
    #[arg(long)]
    pub pool: bool,
    #[arg(long)]
    pub enable: bool,
    #[arg(long)]
    pub disable: bool,
    /// Memory admission for this target's runners: on, off, or host (follow the host's
    /// `host set-admission --memory`).
    #[arg(long, value_name = "on|off|host", value_parser = parse_own_switch)]
    pub memory_admission: Option<Own<bool>>,
    /// This target's runner's expected memory peak before it has any history, in MiB, or
    /// host.
    #[arg(long, value_name = "MB|host", value_parser = parse_own_runner_mb, allow_negative_numbers = true)]
    pub runner_memory_mb: Option<Own<u64>>,
    /// Memory kept free for you when one of this target's runners starts, in MiB, or host.
    #[arg(long, value_name = "MB|host", value_parser = parse_own_headroom_mb, allow_negative_numbers = true)]
    pub memory_headroom_mb: Option<Own<u64>>,
    /// This target's dependency caches: on, off, or default (on for a repository, off for an
    /// organization).
    #[arg(long, value_name = "on|off|default", value_parser = parse_cache_switch)]
    pub cache: Option<Own<bool>>,
    /// Share the dependency caches with every target given the same NAME (e.g. repositories
    /// of one monorepo family), or `own` for the target's own.
    #[arg(long, value_name = "NAME|own", value_parser = parse_cache_namespace)]
    pub cache_namespace: Option<Own<String>>,
    /// Keep each runner's work folder between jobs (persistent: a checkout becomes an
    /// incremental fetch, build outputs survive; credentials are removed between jobs), or
    /// not (ephemeral, the default: the saved workspaces are deleted).
    #[arg(long, value_name = "persistent|ephemeral", value_parser = parse_workspace)]
    pub workspace: Option<rm_proto::Workspace>,
    /// Start this target's runners inside the job sandbox (on, the default), or without it
    /// (off: its jobs can then read your files, other processes and the services on this
    /// machine's loopback; status and the tray say so).
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    pub sandbox: Option<bool>,
    /// Let this target's jobs use this machine's Docker daemon (on), or not (off, the
    /// default). Docker is root-equivalent: its jobs then have root on this machine.
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    pub docker: Option<bool>,
    /// The most memory one of this target's jobs may hold, in MiB (its cgroup's memory.max,
    /// throttled above three quarters of it), or `default`: three quarters of this machine's
    /// memory. Applies where the service runs each job in a cgroup of its own (`host doctor`).
    #[arg(long, value_name = "MIB|default", value_parser = parse_job_memory)]
    pub memory_max_mb: Option<u32>,
    /// Try a target that stopped (`repair_required`, launches kept failing) again, once what
    /// `runner-manager status` names is fixed; the host checks run first.
    #[arg(long)]
    pub retry: bool,
}

/// A target's own setting, or `host`: follow the host's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Own<T> {
    Host,
    Value(T),
}

impl<T> Own<T> {
    fn into_option(self) -> Option<T> {
        match self {
            Own::Host => None,
            Own::Value(v) => Some(v),
        }
    }
}

fn parse_own_switch(text: &str) -> Result<Own<bool>, String> {
    match text {
        "on" => Ok(Own::Value(true)),
        "off" => Ok(Own::Value(false)),
        "host" => Ok(Own::Host),
        other => Err(format!("'{other}' is not on, off or host")),
    }
}

fn parse_cache_switch(text: &str) -> Result<Own<bool>, String> {
    match text {
        "on" => Ok(Own::Value(true)),
        "off" => Ok(Own::Value(false)),
        "default" => Ok(Own::Host),
        other => Err(format!("'{other}' is not on, off or default")),
    }
}

fn parse_on_off(text: &str) -> Result<bool, String> {
    match text {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("'{other}' is not on or off")),
    }
}

fn parse_job_memory(text: &str) -> Result<u32, String> {
    let min = rm_proto::MIN_JOB_MEMORY_MB;
    match text {
        "default" => Ok(0),
        n => match n.parse::<u32>() {
            Ok(mb) if mb >= min => Ok(mb),
            Ok(mb) => Err(format!(
                "{mb} MiB is less than a runner alone needs: give at least {min}, or `default`"
            )),
            Err(_) => Err(format!(
                "'{n}' is not a number of MiB (at least {min}) or `default`"
            )),
        },
    }
}

fn parse_workspace(text: &str) -> Result<rm_proto::Workspace, String> {
    match text {
        "persistent" => Ok(rm_proto::Workspace::Persistent),
        "ephemeral" => Ok(rm_proto::Workspace::Ephemeral),
        other => Err(format!("'{other}' is not persistent or ephemeral")),
    }
}

fn parse_cache_namespace(text: &str) -> Result<Own<String>, String> {
    if text == "own" {
        return Ok(Own::Host);
    }
    rm_core::caches::Namespace::shared(text)
        .map(|_| Own::Value(text.to_owned()))
        .map_err(|e| e.to_string())
}

/// The target's own cache settings after `s`'s flags (`None`: no such flag given).
fn own_cache_change(
    s: &SetArgs,
    current: Option<rm_proto::TargetCache>,
) -> Option<rm_proto::TargetCache> {
    if s.cache.is_none() && s.cache_namespace.is_none() {
        return None;
    }
    let mut next = current.unwrap_or_default();
    if let Some(v) = s.cache {
        next.enabled = v.into_option();
    }
    if let Some(v) = &s.cache_namespace {
        next.namespace = v.clone().into_option();
    }
    Some(next)
}

/// The most MiB a target's admission numbers may name (1 TiB: catches a unit mistake).
const MAX_OWN_MB: u64 = 1 << 20;

fn parse_own_mb(text: &str, min: u64) -> Result<Own<u64>, String> {
    if text == "host" {
        return Ok(Own::Host);
    }
    match text.parse::<u64>() {
        Ok(n) if (min..=MAX_OWN_MB).contains(&n) => Ok(Own::Value(n)),
        _ => Err(format!(
            "'{text}' is not a number of MiB from {min} to {MAX_OWN_MB}, or host"
        )),
    }
}

fn parse_own_runner_mb(text: &str) -> Result<Own<u64>, String> {
    parse_own_mb(text, 1)
}

fn parse_own_headroom_mb(text: &str) -> Result<Own<u64>, String> {
    parse_own_mb(text, 0)
}

/// The target's own admission settings after `s`'s flags (`None`: no such flag given).
fn own_admission_change(
    s: &SetArgs,
    current: Option<rm_proto::TargetAdmission>,
) -> Option<rm_proto::TargetAdmission> {
    if s.memory_admission.is_none()
        && s.runner_memory_mb.is_none()
        && s.memory_headroom_mb.is_none()
    {
        return None;
    }
    let mut next = current.unwrap_or_default();
    if let Some(v) = s.memory_admission {
        next.memory_admission = v.into_option();
    }
    if let Some(v) = s.runner_memory_mb {
        next.runner_memory_mb = v.into_option();
    }
    if let Some(v) = s.memory_headroom_mb {
        next.memory_headroom_mb = v.into_option();
    }
    Some(next)
}

#[derive(Debug, Subcommand)]
pub enum HostCommand {
    /// Show this host.
    Show {
        #[arg(long)]
        json: bool,
    },
    /// Check this host can run runners: the runner account reaches the runner root, the
    /// package runs, disk space, capacity, GitHub and the credential. Exits non-zero when a
    /// required check fails.
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// How many runners may run at once on this machine, over all targets.
    SetCapacity {
        #[arg(value_name = "N", value_parser = capacity_parser(), allow_negative_numbers = true)]
        capacity: u32,
    },
    /// Memory admission: a runner starts only when the memory available now covers its
    /// expected peak beside what running jobs still need and the headroom. Applied at once
    /// (no restart); running jobs are never stopped by it.
    SetAdmission {
        /// Memory admission on or off.
        #[arg(long, value_enum, value_name = "on|off")]
        memory: Option<daemon::OnOff>,
        /// A runner's expected peak before its target has any history, in MiB.
        #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(1..=MAX_MEMORY_MB))]
        runner_memory_mb: Option<u64>,
        /// Memory kept free for your own work, in MiB.
        #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(0..=MAX_MEMORY_MB))]
        headroom_mb: Option<u64>,
    },
    /// Workstation rules: when new runners wait on this machine. Applied at once (no
    /// restart); a rule only delays new runners, running jobs go on.
    SetRules {
        /// Wait while this machine runs on battery, or run anyway.
        #[arg(long, value_enum)]
        on_battery: Option<daemon::OnBattery>,
        /// Wait while the 1-minute load average is above N; `off`: no limit.
        #[arg(long, value_name = "N|off", allow_negative_numbers = true, value_parser = daemon::max_load_arg)]
        max_load: Option<daemon::OrOff<f64>>,
        /// Wait in these local hours, e.g. 22:00-07:00; `off`: none.
        #[arg(long, value_name = "HH:MM-HH:MM|off", value_parser = daemon::quiet_hours_arg)]
        quiet_hours: Option<daemon::OrOff<crate::run::QuietHours>>,
        /// Only use idle time: wait while someone is active at the session.
        #[arg(long, value_enum, value_name = "on|off")]
        idle_only: Option<daemon::OnOff>,
    },
    /// How much disk the dependency caches may use (e.g. 10GiB, 512MiB; least recently used
    /// caches are removed between jobs beyond it).
    SetCacheSize {
        #[arg(value_name = "SIZE")]
        size: String,
    },
    /// The runner environment: variables given to every runner of this host (proxy
    /// settings, PATH additions). Applied to runners started after a change (no restart).
    /// Secrets belong in GitHub's secrets, not here.
    #[command(subcommand)]
    Env(EnvCommand),
}

#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// What is cached: size per target and tool, hits, what running jobs use.
    Show {
        /// Only this target's (`owner/repo` or an organization).
        target: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Remove caches (those running jobs use are left, and named).
    Clear {
        /// Only this target's (`owner/repo` or an organization).
        target: Option<String>,
        /// Only this tool's (npm, pip, cargo, go…; `tool-cache` for the tool cache).
        #[arg(long, value_name = "TOOL")]
        tool: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Join a pool. Then give a target the pool's label (`repo add|set … --pool`):
    /// its jobs that ask for the label run on any host of the pool.
    Join {
        /// `postgres://USER@HOST[:PORT]/DATABASE`, without the password.
        url: String,
        /// The label jobs ask for (`runs-on: [LABEL]`) to run on any host of the pool.
        #[arg(long)]
        label: String,
        /// This host's name in the pool [default: the machine's name].
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        /// Read the database password from standard input (one line). Kept in the
        /// service's credential store, never in config, logs or status.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Leave the pool: this host's claims are placed on the others at once.
    Leave,
    /// The pool's hosts, their free room and the runners starting for queued jobs.
    Status {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum EnvCommand {
    /// Set variables. A `PATH` value replaces the runners' PATH: include the system
    /// directories (e.g. `PATH=/opt/tool/bin:/usr/local/bin:/usr/bin:/bin`).
    Set {
        #[arg(value_name = "NAME=VALUE", required = true)]
        vars: Vec<String>,
    },
    /// Remove variables.
    Unset {
        #[arg(value_name = "NAME", required = true)]
        names: Vec<String>,
    },
    /// Print the variables as NAME=VALUE lines (values only for the service's operators).
    Show {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum DaemonCommand {
    /// Run the service in the foreground until SIGTERM/SIGINT.
    Run(daemon::RunArgs),
}

#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// Install, enable and start the service.
    Install {
        /// boot: a system service run as root; login: a per-user service
        /// [default: boot for root, login otherwise].
        #[arg(long, value_enum)]
        start_at: Option<StartMode>,
    },
    /// Show the service manager's view and whether the installed binary path is stale.
    Status,
    /// Stop, disable and remove the service (the data directory is kept).
    Uninstall,
    /// Stop starting runners and wait, without a deadline, until the running ones finished
    /// (the package's removal runs this before stopping the service).
    Drain,
    /// Stop starting new runners (running jobs go on) until `service resume`.
    Pause,
    /// Start runners again after `service pause` or `service drain`.
    Resume,
}

/// Parse the process arguments, run, and turn the outcome into an exit code.
pub fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                ExitCode::Usage
            } else {
                ExitCode::Ok // --help, --version
            };
            let _ = e.print();
            return code.into();
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::Ok.into(),
        Err(f) => {
            eprintln!("error: {}", f.message);
            f.code.into()
        }
    }
}

/// Run one parsed command.
pub fn run(cli: Cli) -> Result<(), Failure> {
    let data_dir = cli.data_dir.unwrap_or_else(paths::default_data_dir);
    // Absolute, so messages, the lock holder and service definitions name one place.
    let data_dir = std::path::absolute(&data_dir).unwrap_or(data_dir);
    let socket_given = cli.socket.is_some();
    // `daemon run` binds where its start mode says; client commands find the service as the
    // tray does (their user's own service, else the boot service).
    let socket = match (&cli.socket, &cli.command) {
        (Some(s), _) => s.clone(),
        (None, Command::Daemon(_)) => backend_api::default_socket_path(&data_dir),
        (None, _) => backend_api::client_socket_path(&data_dir),
    };
    let offline = cli.offline;
    match cli.command {
        Command::Auth(_) if offline => Err(Failure::usage(
            "`auth` needs the running service (it keeps the credential): drop `--offline` and \
             start the service with `runner-manager daemon run`",
        )),
        Command::Auth(cmd) => {
            let api = ApiBackend::connect(&socket)?;
            match cmd {
                AuthCommand::Login {
                    web_base,
                    client_id,
                } => auth::login(
                    &api,
                    &auth::LoginOptions {
                        web_base,
                        client_id,
                        data_dir: data_dir.clone(),
                    },
                ),
                AuthCommand::Status => auth::status(&api),
                AuthCommand::Logout => auth::logout(&api),
            }
        }
        Command::Repo(cmd) if offline => offline_target_command(&data_dir, cmd, false),
        Command::Org(cmd) if offline => offline_target_command(&data_dir, cmd, true),
        Command::Repo(cmd) => api_target_command(&socket, cmd, false),
        Command::Org(cmd) => api_target_command(&socket, cmd, true),
        Command::Host(HostCommand::Show { json }) if offline => {
            let host = open_offline(&data_dir)?.1.host()?;
            output::print_host(&host, json)
        }
        Command::Host(HostCommand::Show { json }) => {
            let status = ApiBackend::connect(&socket)?.status()?;
            output::print_api_host(&status, json)
        }
        Command::Host(HostCommand::Doctor { json }) if offline => {
            let report = open_offline(&data_dir)?.1.doctor()?;
            output::print_doctor(&report, json)
        }
        Command::Host(HostCommand::Doctor { json }) => {
            let report = ApiBackend::connect(&socket)?.host_doctor()?;
            output::print_doctor(&report, json)
        }
        Command::Host(HostCommand::SetCapacity { capacity }) => {
            let capacity = if offline {
                open_offline(&data_dir)?
                    .1
                    .set_host_capacity(capacity)?
                    .capacity
            } else {
                ApiBackend::connect(&socket)?
                    .set_host_capacity(capacity)?
                    .capacity
            };
            println!("host capacity set to {capacity} runner(s) at once");
            Ok(())
        }
        Command::Host(HostCommand::SetAdmission {
            memory,
            runner_memory_mb,
            headroom_mb,
        }) => {
            let change = daemon::admission_change(
                memory,
                runner_memory_mb,
                headroom_mb,
                None,
                None,
                None,
                None,
            );
            set_admission(&data_dir, &socket, offline, &change, "set-admission")
        }
        Command::Host(HostCommand::SetRules {
            on_battery,
            max_load,
            quiet_hours,
            idle_only,
        }) => {
            let change = daemon::admission_change(
                None,
                None,
                None,
                on_battery,
                max_load,
                quiet_hours,
                idle_only,
            );
            set_admission(&data_dir, &socket, offline, &change, "set-rules")
        }
        Command::Host(HostCommand::Env(cmd)) => env_command(&data_dir, &socket, offline, cmd),
        Command::Host(HostCommand::SetCacheSize { .. }) if offline => Err(Failure::usage(
            "`host set-cache-size` asks the running service (it owns the caches): drop `--offline`",
        )),
        Command::Host(HostCommand::SetCacheSize { size }) => cache::set_size(&socket, &size),
        Command::Status { watch: true, .. } if offline => Err(Failure::usage(
            "`status --watch` follows the running service: drop `--offline`",
        )),
        Command::Status { watch: true, .. } => {
            let sockets = if socket_given {
                vec![socket]
            } else {
                backend_api::client_sockets(&data_dir)
            };
            watch::run(sockets)
        }
        Command::Status { json, .. } if offline => {
            let status = open_offline(&data_dir)?.1.status()?;
            output::print_status(&status, json)
        }
        Command::Status { json, .. } => {
            let status = ApiBackend::connect(&socket)?.status()?;
            output::print_api_status(&status, json)
        }
        Command::Why { .. } if offline => Err(Failure::usage(
            "`why` asks the running service (its loops decide): drop `--offline`",
        )),
        Command::Why { target, json } => why::run(&socket, target.as_deref(), json),
        Command::Cache(_) if offline => Err(Failure::usage(
            "`cache` asks the running service (it owns the caches): drop `--offline`",
        )),
        Command::Cache(CacheCommand::Show { target, json }) => {
            cache::show(&socket, target.as_deref(), json)
        }
        Command::Cache(CacheCommand::Clear { target, tool }) => {
            cache::clear(&socket, target.as_deref(), tool.as_deref())
        }
        Command::Pool(_) if offline => Err(Failure::usage(
            "`pool` asks the running service (it holds the pool's connection): drop `--offline`",
        )),
        Command::Pool(cmd) => pool::run(&socket, cmd),
        Command::Daemon(DaemonCommand::Run(args)) => daemon::run(&data_dir, &socket, args),
        Command::Update {
            trusted_keys: true, ..
        } => update::trusted_keys(&data_dir),
        Command::Update { .. } if offline => Err(Failure::usage(
            "`update` asks the running service (it is the one that updates): drop `--offline`",
        )),
        Command::Update { check, no_wait, .. } => update::run(&socket, check, no_wait),
        Command::UpdateWatchdog { pid } => {
            daemon::init_logging();
            crate::update::swap::watchdog(&data_dir, pid).map_err(Failure::internal)
        }
        Command::Service(cmd) => service_command(&data_dir, &socket, cmd),
    }
}

/// `host set-admission` / `host set-rules`: through the running service (applied at once), or
/// `--offline` in the journal (read by the service when it starts).
fn set_admission(
    data_dir: &std::path::Path,
    socket: &std::path::Path,
    offline: bool,
    change: &rm_proto::HostAdmissionChange,
    command: &str,
) -> Result<(), Failure> {
    if change.is_empty() {
        let flags = if command == "set-admission" {
            "--memory, --runner-memory-mb, --headroom-mb"
        } else {
            "--on-battery, --max-load, --quiet-hours, --idle-only"
        };
        return Err(Failure::usage(format!(
            "nothing to change: give at least one of {flags} (see `runner-manager host \
             {command} --help`)"
        )));
    }
    let now = if offline {
        open_offline(data_dir)?.1.set_host_admission(change)?
    } else {
        ApiBackend::connect(socket)?.set_host_admission(change)?
    };
    output::print_admission(&now);
    if offline {
        println!("stored: the service applies it when it starts");
    }
    Ok(())
}

/// `NAME=VALUE` arguments, checked by the rules the service applies (so a refusal comes
/// before anything is sent). Errors name the argument's position or its name, never a value.
fn parse_env_args(args: &[String]) -> Result<std::collections::BTreeMap<String, String>, Failure> {
    let mut set = std::collections::BTreeMap::new();
    for (i, arg) in args.iter().enumerate() {
        let Some((name, value)) = arg.split_once('=') else {
            // Not echoed: a pasted token would land in the terminal's scrollback and logs.
            return Err(Failure::usage(format!(
                "argument {} has no '=': give NAME=VALUE, e.g. HTTPS_PROXY=http://proxy:3128 \
                 (nothing was changed)",
                i + 1
            )));
        };
        rm_core::runner_env::check_var(name, value)
            .map_err(|e| Failure::usage(format!("{e} (nothing was changed)")))?;
        if set.insert(name.to_owned(), value.to_owned()).is_some() {
            return Err(Failure::usage(format!(
                "{name} is given twice: give it once (nothing was changed)"
            )));
        }
    }
    Ok(set)
}

/// `host env set | unset | show`: through the running service (applied to runners started
/// after it), or `--offline` in the journal (read by the service when it starts).
fn env_command(
    data_dir: &std::path::Path,
    socket: &std::path::Path,
    offline: bool,
    cmd: EnvCommand,
) -> Result<(), Failure> {
    let answer = |vars: std::collections::BTreeMap<String, String>| rm_proto::HostEnv {
        variables: vars
            .into_iter()
            .map(|(name, value)| rm_proto::EnvVar {
                name,
                value: Some(value),
            })
            .collect(),
        values_shown: true,
    };
    let (change, verb) = match cmd {
        EnvCommand::Show { json } => {
            let env = if offline {
                answer(open_offline(data_dir)?.1.runner_env()?)
            } else {
                ApiBackend::connect(socket)?.host_env()?
            };
            return output::print_host_env(&env, json);
        }
        EnvCommand::Set { vars } => (
            rm_proto::HostEnvChange {
                set: parse_env_args(&vars)?,
                unset: Vec::new(),
            },
            "set",
        ),
        EnvCommand::Unset { names } => {
            for name in &names {
                if let Err(e @ rm_core::runner_env::EnvVarError::BadName(_)) =
                    rm_core::runner_env::check_name(name)
                {
                    return Err(Failure::usage(format!("{e} (nothing was changed)")));
                }
            }
            (
                rm_proto::HostEnvChange {
                    set: Default::default(),
                    unset: names,
                },
                "unset",
            )
        }
    };
    let now = if offline {
        answer(
            open_offline(data_dir)?
                .1
                .change_runner_env(&change.set, &change.unset)?,
        )
    } else {
        ApiBackend::connect(socket)?.change_host_env(&change)?
    };
    let names: Vec<&str> = change
        .set
        .keys()
        .map(String::as_str)
        .chain(change.unset.iter().map(String::as_str))
        .collect();
    println!("{verb} {}", names.join(", "));
    let all: Vec<String> = now.variables.iter().map(|v| v.name.clone()).collect();
    println!("runner env: {}", output::env_names_text(&all));
    if offline {
        println!("stored: the service gives it to runners after it starts");
    } else {
        println!("runners started from now on get it (running ones keep theirs)");
    }
    Ok(())
}

/// The journal, with the data directory's lock held so a running service is never edited
/// behind its back.
fn open_offline(data_dir: &std::path::Path) -> Result<(InstanceLock, JournalBackend), Failure> {
    crate::paths::restrict_umask();
    crate::paths::create_data_dir(data_dir).map_err(|e| {
        Failure::internal(format!(
            "cannot create the data directory {}: {e}; choose another with `--data-dir`",
            data_dir.display()
        ))
    })?;
    let lock = InstanceLock::acquire(data_dir).map_err(|e| match e {
        LockError::Held { .. } => Failure::new(
            ExitCode::Conflict,
            format!("{e}; the service is running: drop `--offline` to ask it instead"),
        ),
        other => Failure::new(other.exit_code(), other.to_string()),
    })?;
    Ok((lock, JournalBackend::open(data_dir)?))
}

fn parse_target(text: &str, org: bool) -> Result<Target, Failure> {
    let target = Target::parse(text).map_err(|e| Failure::usage(e.to_string()))?;
    match (org, target.is_organization()) {
        (false, true) => Err(Failure::usage(format!(
            "'{text}' is not a repository (give `owner/repo`); to serve a whole organization use \
             `runner-manager org add {text}`"
        ))),
        (true, false) => Err(Failure::usage(format!(
            "'{text}' is a repository, not an organization: use `runner-manager repo add {text}`"
        ))),
        _ => Ok(target),
    }
}

fn parse_profile(text: &str) -> Result<ProfileName, Failure> {
    ProfileName::new(text).map_err(|e| Failure::usage(format!("{e}: fix `--profile`")))
}

fn parse_labels(texts: &[String]) -> Result<Vec<Label>, Failure> {
    texts
        .iter()
        .map(|t| Label::new(t).map_err(|e| Failure::usage(format!("{e}: fix `--label {t}`"))))
        .collect()
}

fn offline_target_command(
    data_dir: &std::path::Path,
    cmd: TargetCommand,
    org: bool,
) -> Result<(), Failure> {
    let noun = if org { "org" } else { "repo" };
    // Everything is validated before the journal is opened, so bad input changes nothing.
    match cmd {
        TargetCommand::Add(a) => {
            let req = AddTarget {
                target: parse_target(&a.target.target, org)?,
                profile: parse_profile(&a.target.profile)?,
                enabled: !a.disabled,
                capacity: match (a.monitor_only, a.max_runners) {
                    (true, _) => Capacity::MonitorOnly,
                    (false, Some(n)) => Capacity::Max(n),
                    (false, None) => Capacity::HostDefault,
                },
                min_capacity: a.min_runners,
                extra_labels: parse_labels(&a.labels)?,
            };
            let added = open_offline(data_dir)?.1.add_target(&req)?;
            output::print_added(&added);
            Ok(())
        }
        TargetCommand::List { json } => {
            let all = open_offline(data_dir)?.1.list_targets()?;
            let kind = if org { "organization" } else { "repository" };
            let mine: Vec<_> = all.into_iter().filter(|t| t.kind == kind).collect();
            output::print_targets(&mine, json, noun)
        }
        TargetCommand::Set(s) => {
            let target = parse_target(&s.target.target, org)?;
            let profile = parse_profile(&s.target.profile)?;
            let change = UpdateTarget {
                capacity: match (s.monitor_only, s.max_runners) {
                    (true, _) => Some(Capacity::MonitorOnly),
                    (false, Some(n)) => Some(Capacity::Max(n)),
                    (false, None) => None,
                },
                min_capacity: s.min_runners,
                enabled: match (s.enable, s.disable) {
                    (true, _) => Some(true),
                    (_, true) => Some(false),
                    _ => None,
                },
                extra_labels: if s.labels.is_empty() {
                    None
                } else {
                    Some(parse_labels(&s.labels)?)
                },
                retry: s.retry,
            };
            if own_admission_change(&s, None).is_some() {
                return Err(Failure::usage(
                    "a target's admission settings change through the running service (it \
                     applies them at once): drop `--offline`",
                ));
            }
            if own_cache_change(&s, None).is_some() {
                return Err(Failure::usage(
                    "a target's cache settings change through the running service (it owns the \
                     caches): drop `--offline`",
                ));
            }
            if s.workspace.is_some() {
                return Err(Failure::usage(
                    "a target's workspace mode changes through the running service (it owns the \
                     saved workspaces): drop `--offline`",
                ));
            }
            if s.sandbox.is_some() || s.docker.is_some() || s.memory_max_mb.is_some() {
                return Err(Failure::usage(
                    "a target's sandbox choices change through the running service (it starts \
                     the runners): drop `--offline`",
                ));
            }
            if change.capacity.is_none()
                && change.min_capacity.is_none()
                && change.enabled.is_none()
                && change.extra_labels.is_none()
                && !change.retry
            {
                return Err(Failure::usage(format!(
                    "nothing to change: give at least one of --max-runners, --min-runners, \
                     --monitor-only, --label, --enable, --disable, --retry (see `runner-manager {noun} set --help`)"
                )));
            }
            let updated = open_offline(data_dir)?
                .1
                .update_target(&target, &profile, &change)?;
            println!("updated {}", output::target_line(&updated));
            Ok(())
        }
        TargetCommand::Remove(t) => {
            let target = parse_target(&t.target, org)?;
            let profile = parse_profile(&t.profile)?;
            let removed = open_offline(data_dir)?.1.remove_target(&target, &profile)?;
            println!(
                "removed {}; runners it started finish their current job and are cleaned up",
                removed.target
            );
            Ok(())
        }
    }
}

fn target_ref(text: &str, org: bool) -> Result<rm_proto::TargetRef, Failure> {
    // The domain's parser gives the better messages (and the repo/org mix-up hint).
    parse_target(text, org)?;
    rm_proto::TargetRef::parse(text).map_err(|e| Failure::usage(e.to_string()))
}

/// Adds the label of the pool this host joined to `labels` (once); answers it.
fn with_pool_label(labels: &mut Vec<String>, api: &ApiBackend) -> Result<String, Failure> {
    let Some(pool) = api.status()?.pool else {
        return Err(Failure::usage(
            "this host is in no pool: join one first (`runner-manager pool join \
             postgres://USER@HOST/DATABASE --label LABEL --password-stdin`), or give the pool's \
             label with `--label LABEL`",
        ));
    };
    if !labels.contains(&pool.label) {
        labels.push(pool.label.clone());
    }
    Ok(pool.label)
}

fn label_texts(texts: &[String]) -> Result<Option<Vec<String>>, Failure> {
    parse_labels(texts)?;
    Ok((!texts.is_empty()).then(|| texts.to_vec()))
}

/// `repo|org add|list|set|remove` through the running service.
fn api_target_command(
    socket: &std::path::Path,
    cmd: TargetCommand,
    org: bool,
) -> Result<(), Failure> {
    let noun = if org { "org" } else { "repo" };
    let kind = if org {
        rm_proto::TargetKind::Org
    } else {
        rm_proto::TargetKind::Repo
    };
    // Everything is validated before connecting, so bad input changes nothing.
    match cmd {
        TargetCommand::Add(a) => {
            let target = target_ref(&a.target.target, org)?;
            let profile = parse_profile(&a.target.profile)?;
            // One round trip: the service fills in the default maximum and the pool's label.
            let req = rm_proto::TargetAdd {
                target: target.name.clone(),
                profile: (profile.as_str() != "default").then(|| profile.as_str().to_owned()),
                max_capacity: a.max_runners,
                min_capacity: (a.min_runners > 0).then_some(a.min_runners),
                labels: label_texts(&a.labels)?,
                enabled: Some(!a.disabled),
                up_to_host: !a.monitor_only,
                pool: a.pool,
            };
            let added = ApiBackend::connect(socket)?.add_target(&req)?;
            match (&added.pool_label, added.labels.first()) {
                // Jobs for the pool ask for its label: any host of the pool may take them.
                (Some(label), _) if a.pool => output::print_api_added_to_pool(&added, label),
                // The service lists the routing label first.
                (_, Some(routing)) => output::print_api_added(&added, routing),
                (_, None) => output::print_api_added(&added, "(none)"),
            }
            // A per-target maximum above the host's ceiling is a surprise later ("why only one
            // runner?"): say it now, with the fix.
            if let Some(note) = &added.capacity_note {
                println!("note: {note}");
            }
            Ok(())
        }
        TargetCommand::List { json } => {
            let all = ApiBackend::connect(socket)?.targets()?;
            let mine: Vec<_> = all.into_iter().filter(|t| t.kind == kind).collect();
            output::print_api_targets(&mine, json, noun)
        }
        TargetCommand::Set(s) => {
            let profile = parse_profile(&s.target.profile)?;
            let target = target_ref(&s.target.target, org)?.with_profile(profile.as_str());
            let api = ApiBackend::connect(socket)?;
            let admission = match own_admission_change(&s, None) {
                // Merged over what the target has now (a flag not given keeps its value).
                Some(_) => own_admission_change(&s, api.target(&target)?.admission),
                None => None,
            };
            let cache = match own_cache_change(&s, None) {
                Some(_) => own_cache_change(&s, api.target(&target)?.cache),
                None => None,
            };
            let mut labels = label_texts(&s.labels)?;
            if s.pool {
                // The extra labels it has now (the routing label is listed first), unless
                // `--label` replaces them.
                let mut extra = match labels.take() {
                    Some(given) => given,
                    None => api.target(&target)?.labels.into_iter().skip(1).collect(),
                };
                with_pool_label(&mut extra, &api)?;
                labels = Some(extra);
            }
            let change = rm_proto::TargetUpdate {
                revision: 0,
                max_capacity: s.max_runners,
                min_capacity: s.min_runners,
                enabled: match (s.enable, s.disable) {
                    (true, _) => Some(true),
                    (_, true) => Some(false),
                    _ => None,
                },
                labels,
                monitor_only: s.monitor_only.then_some(true),
                retry: s.retry.then_some(true),
                admission,
                cache,
                workspace: s.workspace,
                sandbox: (s.sandbox.is_some() || s.docker.is_some() || s.memory_max_mb.is_some())
                    .then_some(rm_proto::TargetSandboxChange {
                        walls: s.sandbox,
                        docker: s.docker,
                        memory_max_mb: s.memory_max_mb,
                    }),
            };
            if change == (rm_proto::TargetUpdate::default()) {
                return Err(Failure::usage(format!(
                    "nothing to change: give at least one of --max-runners, --min-runners, \
                     --monitor-only, --label, --pool, --enable, --disable, --retry, --memory-admission, \
                     --runner-memory-mb, --memory-headroom-mb, --cache, --cache-namespace, --workspace, --sandbox, --docker, --memory-max-mb (see `runner-manager {noun} set --help`)"
                )));
            }
            let updated = api.update_target(&target, &change)?;
            println!("updated {}", output::api_target_line(&updated));
            if let Some(warning) = &updated.sandbox.warning {
                println!("warning: {}: {warning}", updated.target);
            }
            Ok(())
        }
        TargetCommand::Remove(t) => {
            let profile = parse_profile(&t.profile)?;
            let target = target_ref(&t.target, org)?.with_profile(profile.as_str());
            ApiBackend::connect(socket)?.remove_target(&target)?;
            println!(
                "removed {target}; runners it started finish their current job and are cleaned up"
            );
            Ok(())
        }
    }
}

/// `service drain`: pause launching, then wait until no runner is left.
fn drain(socket: &std::path::Path) -> Result<(), Failure> {
    let api = ApiBackend::connect(socket)?;
    api.block_on(api.client().pause())
        .map_err(backend_api::client_failure)?;
    let mut last = usize::MAX;
    loop {
        let n = api.status()?.runners.len();
        if n == 0 {
            println!("no runner left: the service may stop");
            return Ok(());
        }
        if n != last {
            println!("waiting for {n} runner(s) to finish their job");
            last = n;
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// `service pause` / `service resume`.
fn set_launching(socket: &std::path::Path, pause: bool) -> Result<(), Failure> {
    let api = ApiBackend::connect(socket)?;
    let state = if pause {
        api.block_on(api.client().pause())
    } else {
        api.block_on(api.client().resume())
    }
    .map_err(backend_api::client_failure)?;
    println!(
        "{}",
        if state.paused {
            "launching paused: running jobs go on, no new runner starts \
             (`runner-manager service resume` starts them again)"
        } else {
            "launching resumed"
        }
    );
    Ok(())
}

fn service_command(
    data_dir: &std::path::Path,
    socket: &std::path::Path,
    cmd: ServiceCommand,
) -> Result<(), Failure> {
    // These ask the running service: no service manager needed.
    match cmd {
        ServiceCommand::Drain => return drain(socket),
        ServiceCommand::Pause => return set_launching(socket, true),
        ServiceCommand::Resume => return set_launching(socket, false),
        _ => {}
    }
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| Failure::internal(format!("cannot find this program's own path: {e}")))?;
    if !cfg!(target_os = "linux") {
        return Err(Failure::new(
            ExitCode::Unsupported,
            "`runner-manager service` manages systemd only in this build; on macOS and Windows \
             register `runner-manager daemon run` with launchd or the SCM by hand (definitions \
             are in installer/)",
        ));
    }
    let systemd = Systemd::default();
    match cmd {
        ServiceCommand::Install { start_at } => {
            let mode = start_at.unwrap_or_else(StartMode::for_current_user);
            let done = systemd.install(mode, data_dir, &exe)?;
            println!("{done}");
            Ok(())
        }
        ServiceCommand::Status => {
            let status = systemd.status(data_dir, &exe)?;
            print!("{}", status.render());
            if !status.systemd_running {
                // Printed above already; the distinct code lets scripts branch.
                return Err(Failure::new(
                    ExitCode::Unsupported,
                    "systemd is not running",
                ));
            }
            Ok(())
        }
        ServiceCommand::Uninstall => {
            let done = systemd.uninstall(data_dir)?;
            println!("{done}");
            Ok(())
        }
        ServiceCommand::Drain => drain(socket),
        ServiceCommand::Pause => set_launching(socket, true),
        ServiceCommand::Resume => set_launching(socket, false),
    }
}
