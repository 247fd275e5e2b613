//! `fake-runner-listener`: a stand-in for actions/runner's `bin/Runner.Listener`, packed by
//! rm-testkit into its fake runner package. It speaks the fake GitHub's broker protocol
//! (FAKE_PROTOCOL.md) and behaves like the real listener as seen from outside: the files it
//! writes, the console lines it prints, its exit codes and its reaction to signals.

mod broker;
mod config;
mod diag;
mod listener;
mod memory;
mod step;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use config::{RunnerConfig, Secret};
use diag::DiagLog;
use listener::{Listener, EXIT_OK, EXIT_TERMINATED};

/// Used when the package carries no `bin/fake-runner.version` file.
const DEFAULT_VERSION: &str = "2.336.0";
/// The package builder writes the version it packed here, next to the binary.
const VERSION_FILE: &str = "fake-runner.version";
const JITCONFIG_ENV: &str = "ACTIONS_RUNNER_INPUT_JITCONFIG";

fn main() {
    std::process::exit(real_main());
}

fn real_main() -> i32 {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let command = args.first().map(|a| a.to_string_lossy().into_owned());
    match command.as_deref() {
        None | Some("run") => run_command(args.get(1..).unwrap_or_default()),
        Some("--version") => {
            diag::say(&runner_version());
            EXIT_OK
        }
        Some("--commit") => {
            diag::say("fake-runner");
            EXIT_OK
        }
        Some("--help" | "-h" | "help") => {
            diag::say(
                "Fake Runner.Listener (rm-fake-runner)\n\
                 Commands:\n  run [--jitconfig <blob>]   connect and take one job \
                 (or set ACTIONS_RUNNER_INPUT_JITCONFIG)\n  --version\n  --commit",
            );
            EXIT_OK
        }
        // A child holding a job's memory (see `memory`).
        Some("hold-memory") => memory::hold(args.get(1).and_then(|a| a.to_str())),
        Some("configure" | "remove") => {
            eprintln!(
                "This fake runner supports only JIT configuration: \
                 use `run --jitconfig <blob>` or ACTIONS_RUNNER_INPUT_JITCONFIG."
            );
            EXIT_TERMINATED
        }
        Some(other) => {
            eprintln!("Unrecognized command '{other}'. Try `Runner.Listener --help`.");
            EXIT_TERMINATED
        }
    }
}

fn run_command(args: &[OsString]) -> i32 {
    let stop = Arc::new(AtomicBool::new(false));
    if let Err(e) = register_signals(&stop) {
        eprintln!("Cannot install signal handlers: {e}");
        return EXIT_TERMINATED;
    }
    let blob = match jit_blob(args) {
        Ok(blob) => blob,
        Err(msg) => {
            eprintln!("{msg}");
            return EXIT_TERMINATED;
        }
    };
    let root = match runner_root() {
        Ok(root) => root,
        Err(msg) => {
            eprintln!("{msg}");
            return EXIT_TERMINATED;
        }
    };
    let mut log = match DiagLog::open(&root, "Runner", "Listener") {
        Ok(log) => log,
        Err(e) => {
            eprintln!(
                "Cannot write {}/_diag: {e}. The runner root must be writable.",
                root.display()
            );
            return EXIT_TERMINATED;
        }
    };
    let version = runner_version();
    log.info(&format!(
        "Runner.Listener (fake) version {version}, root {}",
        root.display()
    ));

    let from_blob = blob.is_some();
    let config = match blob {
        Some(blob) => RunnerConfig::from_jit_blob(&blob),
        None => RunnerConfig::load(&root),
    };
    let config = match config {
        Ok(config) => config,
        Err(e) => {
            log.error(&e.to_string());
            eprintln!("{e}");
            return EXIT_TERMINATED;
        }
    };
    if from_blob {
        if let Err(e) = config.write(&root) {
            log.error(&e.to_string());
            eprintln!("{e}");
            return EXIT_TERMINATED;
        }
        log.info("Wrote .runner, .credentials and .credentials_rsaparams from the JIT config");
    }
    Listener {
        root,
        config,
        version,
        log,
        stop,
    }
    .run()
}

/// SIGTERM/SIGINT set `stop`; a second one ends the process at once (exit 1), so a stuck
/// runner can still be interrupted.
fn register_signals(stop: &Arc<AtomicBool>) -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    use signal_hook::flag;
    for sig in [SIGTERM, SIGINT] {
        flag::register_conditional_shutdown(sig, EXIT_TERMINATED, Arc::clone(stop))?;
        flag::register(sig, Arc::clone(stop))?;
    }
    Ok(())
}

/// `--jitconfig <blob>` / `--jitconfig=<blob>`, else the environment variable whose name
/// matches `ACTIONS_RUNNER_INPUT_JITCONFIG` case-insensitively (as actions/runner reads it).
fn jit_blob(args: &[OsString]) -> Result<Option<Secret>, String> {
    let mut from_args = None;
    let mut it = args.iter().map(|a| a.to_string_lossy());
    while let Some(arg) = it.next() {
        if arg.eq_ignore_ascii_case("--jitconfig") {
            let value = it
                .next()
                .ok_or("--jitconfig needs a value: `run --jitconfig <blob>`")?;
            from_args = Some(Secret::new(value.into_owned()));
        } else if let Some(value) = arg
            .get(..12)
            .filter(|p| p.eq_ignore_ascii_case("--jitconfig="))
            .and_then(|_| arg.get(12..))
        {
            from_args = Some(Secret::new(value));
        } else if arg.eq_ignore_ascii_case("--startuptype") {
            it.next();
        } else if arg.starts_with("--") {
            // Flags the real listener knows (--once, --check, ...) do not matter here. The value
            // is not echoed: it might be a misplaced secret.
            eprintln!("Ignoring an unsupported argument.");
        }
    }
    if from_args.is_some() {
        return Ok(from_args);
    }
    Ok(std::env::vars_os()
        .find(|(k, _)| k.to_string_lossy().eq_ignore_ascii_case(JITCONFIG_ENV))
        .map(|(_, v)| v.to_string_lossy().into_owned())
        .filter(|v| !v.trim().is_empty())
        .map(Secret::new))
}

/// The parent of the `bin/` directory holding this executable; `RUNNER_ROOT` overrides it.
fn runner_root() -> Result<PathBuf, String> {
    if let Some(root) = std::env::var_os("RUNNER_ROOT").filter(|r| !r.is_empty()) {
        return Ok(PathBuf::from(root));
    }
    let exe = std::env::current_exe()
        .map_err(|e| format!("Cannot locate the runner executable: {e}. Set RUNNER_ROOT."))?;
    exe.parent()
        .and_then(|bin| bin.parent())
        .map(PathBuf::from)
        .ok_or_else(|| "The runner executable has no parent directory; set RUNNER_ROOT.".into())
}

fn runner_version() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|bin| bin.join(VERSION_FILE)))
        .and_then(|path| std::fs::read_to_string(path).ok())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_VERSION.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn jitconfig_from_args_in_both_spellings() {
        let blob = jit_blob(&os(&["--jitconfig", "abc"])).unwrap().unwrap();
        assert_eq!(blob.expose(), "abc");
        let blob = jit_blob(&os(&["--once", "--JitConfig=xyz"]))
            .unwrap()
            .unwrap();
        assert_eq!(blob.expose(), "xyz");
        assert!(jit_blob(&os(&["--jitconfig"])).is_err());
    }
}
