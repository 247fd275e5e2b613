//! The `runner-manager` command line (clap derive) and its dispatch.
//!
//! Target and host commands go through [`backend::Backend`]; in this build that is the
//! journal of `--data-dir` used directly ([`backend::JournalBackend`]).

pub mod backend;
mod daemon;
mod output;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use rm_core::{Label, ProfileName, Target};

use crate::exit::{ExitCode, Failure};
use crate::paths::{self, StartMode};
use crate::service_install::Systemd;
use backend::{AddTarget, Backend, Capacity, JournalBackend, UpdateTarget, MAX_CAPACITY};

/// Autoscale ephemeral GitHub Actions runners on this machine.
#[derive(Debug, Parser)]
#[command(name = "runner-manager", version, about, propagate_version = true)]
pub struct Cli {
    /// The service's data directory [default: /var/lib/runner-manager for root,
    /// $XDG_DATA_HOME/runner-manager otherwise]
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
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
        #[arg(long)]
        json: bool,
    },
    /// Run the service in the foreground.
    #[command(subcommand)]
    Daemon(DaemonCommand),
    /// Register the service with the OS service manager.
    #[command(subcommand)]
    Service(ServiceCommand),
}

#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Sign in with GitHub's device flow and hand the credential to the service.
    Login,
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
    #[arg(long)]
    pub enable: bool,
    #[arg(long)]
    pub disable: bool,
}

#[derive(Debug, Subcommand)]
pub enum HostCommand {
    /// Show this host.
    Show {
        #[arg(long)]
        json: bool,
    },
    /// How many runners may run at once on this machine, over all targets.
    SetCapacity {
        #[arg(value_name = "N", value_parser = capacity_parser(), allow_negative_numbers = true)]
        capacity: u32,
    },
}

#[derive(Debug, Subcommand)]
pub enum DaemonCommand {
    /// Run the service in the foreground until SIGTERM/SIGINT.
    Run {
        /// How the service was started (decides the credential store)
        /// [default: boot for root, login otherwise].
        #[arg(long, value_enum)]
        start_at: Option<StartMode>,
        /// How often to look for an upgraded binary, in milliseconds.
        #[arg(long, hide = true, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(10..))]
        upgrade_poll_ms: u64,
    },
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
    match cli.command {
        Command::Auth(_) => Err(not_wired("auth")),
        Command::Repo(cmd) => target_command(&data_dir, cmd, false),
        Command::Org(cmd) => target_command(&data_dir, cmd, true),
        Command::Host(HostCommand::Show { json }) => {
            let host = JournalBackend::open(&data_dir)?.host()?;
            output::print_host(&host, json)
        }
        Command::Host(HostCommand::SetCapacity { capacity }) => {
            let host = JournalBackend::open(&data_dir)?.set_host_capacity(capacity)?;
            println!("host capacity set to {} runner(s) at once", host.capacity);
            Ok(())
        }
        Command::Status { json } => {
            let status = JournalBackend::open(&data_dir)?.status()?;
            output::print_status(&status, json)
        }
        Command::Daemon(DaemonCommand::Run {
            start_at,
            upgrade_poll_ms,
        }) => daemon::run(
            &data_dir,
            start_at.unwrap_or_else(StartMode::for_current_user),
            std::time::Duration::from_millis(upgrade_poll_ms),
        ),
        Command::Service(cmd) => service_command(&data_dir, cmd),
    }
}

fn not_wired(what: &str) -> Failure {
    Failure::new(
        ExitCode::Unsupported,
        format!(
            "`runner-manager {what}` is not wired into this build yet (it needs the service's \
             local API); until then, manage targets with `runner-manager repo|org|host`"
        ),
    )
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

fn target_command(
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
            let added = JournalBackend::open(data_dir)?.add_target(&req)?;
            output::print_added(&added);
            Ok(())
        }
        TargetCommand::List { json } => {
            let all = JournalBackend::open(data_dir)?.list_targets()?;
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
            };
            if change.capacity.is_none()
                && change.min_capacity.is_none()
                && change.enabled.is_none()
                && change.extra_labels.is_none()
            {
                return Err(Failure::usage(format!(
                    "nothing to change: give at least one of --max-runners, --min-runners, \
                     --monitor-only, --label, --enable, --disable (see `runner-manager {noun} set --help`)"
                )));
            }
            let updated =
                JournalBackend::open(data_dir)?.update_target(&target, &profile, &change)?;
            println!("updated {}", output::target_line(&updated));
            Ok(())
        }
        TargetCommand::Remove(t) => {
            let target = parse_target(&t.target, org)?;
            let profile = parse_profile(&t.profile)?;
            let removed = JournalBackend::open(data_dir)?.remove_target(&target, &profile)?;
            println!(
                "removed {}; runners it started finish their current job and are cleaned up",
                removed.target
            );
            Ok(())
        }
    }
}

fn service_command(data_dir: &std::path::Path, cmd: ServiceCommand) -> Result<(), Failure> {
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
    }
}
