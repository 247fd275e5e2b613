//! A job's step: the job message's `command`, run as a real runner runs a `run:` step —
//! `/bin/sh -c <command>` in the job's workspace, with the listener's environment and the
//! variables the runner adds for a job. Its output goes line by line into the Worker log. It is
//! started in a process group of its own, so that a stop (or the end of the step) ends
//! everything it started, as the real runner cleans up a job's orphan processes.

use std::io::{BufRead as _, BufReader, Read};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

const TICK: Duration = Duration::from_millis(50);
/// How long output still in the pipes is read after the step ended.
const DRAIN: Duration = Duration::from_secs(2);
/// A single output line longer than this is cut (the log is a diagnostic, not an archive).
const MAX_LINE: usize = 16 * 1024;
/// Prefix of the step's lines in the Worker log.
pub const LOG_PREFIX: &str = "[step] ";
/// The listener reads its JIT config from `ACTIONS_RUNNER_INPUT_JITCONFIG`; like the real
/// runner, it does not hand `ACTIONS_RUNNER_INPUT_*` variables on to a job's steps.
const INPUT_PREFIX: &str = "ACTIONS_RUNNER_INPUT_";

/// What a job's step sees besides the listener's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepContext {
    /// `GITHUB_JOB`.
    pub job_name: String,
    /// `GITHUB_RUN_ID`.
    pub run_id: u64,
    /// `GITHUB_WORKSPACE` and the current directory (exists).
    pub workspace: PathBuf,
    /// `RUNNER_TEMP` (exists).
    pub temp: PathBuf,
}

impl StepContext {
    /// The variables the runner sets for a job's steps, on top of its own environment.
    pub fn variables(&self) -> Vec<(&'static str, String)> {
        vec![
            ("CI", "true".to_owned()),
            ("GITHUB_ACTIONS", "true".to_owned()),
            ("GITHUB_JOB", self.job_name.clone()),
            ("GITHUB_RUN_ID", self.run_id.to_string()),
            ("GITHUB_WORKSPACE", self.workspace.display().to_string()),
            ("RUNNER_TEMP", self.temp.display().to_string()),
        ]
    }
}

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepOutcome {
    /// Exit code 0.
    Succeeded,
    /// A non-zero exit, a signal, or the shell could not be started.
    Failed,
    /// The listener was told to stop while it ran: its processes were killed.
    Cancelled,
}

/// Runs `command` until it ends or `stop` is set; each output line goes to `log` with
/// [`LOG_PREFIX`].
pub fn run(
    command: &str,
    ctx: &StepContext,
    stop: &AtomicBool,
    log: &mut dyn FnMut(&str),
) -> StepOutcome {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(&ctx.workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group: the whole tree it starts can be ended at once.
        .process_group(0);
    for (name, _) in std::env::vars_os() {
        let is_input = name
            .to_str()
            .and_then(|n| n.get(..INPUT_PREFIX.len()))
            .is_some_and(|p| p.eq_ignore_ascii_case(INPUT_PREFIX));
        if is_input {
            cmd.env_remove(&name);
        }
    }
    cmd.envs(ctx.variables());
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            log(&format!("{LOG_PREFIX}Cannot start the step: {e}"));
            return StepOutcome::Failed;
        }
    };
    log(&format!(
        "{LOG_PREFIX}Started (pid {}) in {}",
        child.id(),
        ctx.workspace.display()
    ));
    let (tx, rx) = mpsc::channel();
    if let Some(out) = child.stdout.take() {
        forward_lines(out, tx.clone());
    }
    if let Some(err) = child.stderr.take() {
        forward_lines(err, tx.clone());
    }
    drop(tx);
    let group = Pid::from_raw(i32::try_from(child.id()).unwrap_or(0));

    let outcome = loop {
        write_lines(&rx, log);
        if stop.load(Ordering::SeqCst) {
            kill_group(group);
            let _ = child.wait();
            log(&format!(
                "{LOG_PREFIX}Stopped: the step's processes were killed"
            ));
            break StepOutcome::Cancelled;
        }
        match child.try_wait() {
            Ok(Some(status)) => {
                // What it left running in the background ends with it.
                kill_group(group);
                log(&format!("{LOG_PREFIX}Finished: {status}"));
                break if status.success() {
                    StepOutcome::Succeeded
                } else {
                    StepOutcome::Failed
                };
            }
            Ok(None) => std::thread::sleep(TICK),
            Err(e) => {
                kill_group(group);
                let _ = child.wait();
                log(&format!("{LOG_PREFIX}Cannot wait for the step: {e}"));
                break StepOutcome::Failed;
            }
        }
    };
    drain(&rx, log);
    outcome
}

/// Ends the step's process group (best effort: it may be gone already).
fn kill_group(group: Pid) {
    if group.as_raw() > 0 {
        let _ = killpg(group, Signal::SIGKILL);
    }
}

fn forward_lines(pipe: impl Read + Send + 'static, tx: Sender<String>) {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(pipe);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                        buf.pop();
                    }
                    buf.truncate(MAX_LINE);
                    if tx.send(String::from_utf8_lossy(&buf).into_owned()).is_err() {
                        return;
                    }
                }
            }
        }
    });
}

fn write_lines(rx: &Receiver<String>, log: &mut dyn FnMut(&str)) {
    while let Ok(line) = rx.try_recv() {
        log(&format!("{LOG_PREFIX}{line}"));
    }
}

/// The last lines, until both pipes closed; bounded, in case something outside the group
/// still holds them.
fn drain(rx: &Receiver<String>, log: &mut dyn FnMut(&str)) {
    let deadline = Instant::now() + DRAIN;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => log(&format!("{LOG_PREFIX}{line}")),
            Err(RecvTimeoutError::Disconnected | RecvTimeoutError::Timeout) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::sync::Arc;

    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            let dir = std::env::temp_dir().join(format!(
                "rm-fake-runner-step-{name}-{}-{nanos}",
                std::process::id()
            ));
            std::fs::create_dir_all(dir.join("ws")).unwrap();
            std::fs::create_dir_all(dir.join("_temp")).unwrap();
            Dir(dir)
        }

        fn ctx(&self) -> StepContext {
            StepContext {
                job_name: "build".into(),
                run_id: 42,
                workspace: self.0.join("ws"),
                temp: self.0.join("_temp"),
            }
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn run_logged(command: &str, ctx: &StepContext, stop: &AtomicBool) -> (StepOutcome, String) {
        let mut lines = Vec::new();
        let outcome = run(command, ctx, stop, &mut |l: &str| lines.push(l.to_owned()));
        (outcome, lines.join("\n"))
    }

    #[test]
    fn output_lines_and_job_variables_in_the_workspace() {
        let dir = Dir::new("vars");
        let ctx = dir.ctx();
        let (outcome, log) = run_logged(
            "echo \"$GITHUB_JOB $GITHUB_RUN_ID\"; echo oops >&2; pwd; \
             test \"$RUNNER_TEMP\" = \"$(dirname \"$PWD\")/_temp\" && echo temp-ok; \
             test \"$GITHUB_WORKSPACE\" = \"$PWD\" && echo ws-ok",
            &ctx,
            &AtomicBool::new(false),
        );
        assert_eq!(outcome, StepOutcome::Succeeded, "{log}");
        for line in [
            "[step] build 42",
            "[step] oops",
            "[step] temp-ok",
            "[step] ws-ok",
        ] {
            assert!(
                log.lines().any(|l| l == line),
                "missing {line:?} in:\n{log}"
            );
        }
        let pwd = ctx.workspace.canonicalize().unwrap();
        assert!(
            log.lines()
                .any(|l| l == format!("[step] {}", pwd.display())),
            "{log}"
        );
    }

    #[test]
    fn a_non_zero_exit_fails_the_step() {
        let dir = Dir::new("fail");
        let (outcome, log) = run_logged("echo before; exit 3", &dir.ctx(), &AtomicBool::new(false));
        assert_eq!(outcome, StepOutcome::Failed);
        assert!(log.contains("[step] before"), "{log}");
    }

    #[test]
    fn a_missing_workspace_fails_the_step() {
        let dir = Dir::new("missing");
        let mut ctx = dir.ctx();
        ctx.workspace = dir.0.join("not-there");
        let (outcome, log) = run_logged("true", &ctx, &AtomicBool::new(false));
        assert_eq!(outcome, StepOutcome::Failed);
        assert!(log.contains("Cannot start"), "{log}");
    }

    #[test]
    fn stop_kills_the_whole_group_and_cancels() {
        let dir = Dir::new("stop");
        let ctx = dir.ctx();
        let pids = ctx.temp.join("pids");
        let stop = Arc::new(AtomicBool::new(false));
        let setter = {
            let stop = Arc::clone(&stop);
            let pids = pids.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(10);
                while !std::fs::read_to_string(&pids).is_ok_and(|t| t.lines().count() >= 2) {
                    assert!(Instant::now() < deadline, "the step never started");
                    std::thread::sleep(Duration::from_millis(20));
                }
                stop.store(true, Ordering::SeqCst);
            })
        };
        let started = Instant::now();
        let (outcome, log) = run_logged(
            "sleep 30 & echo $! > \"$RUNNER_TEMP/bg\"; echo $$ >> \"$RUNNER_TEMP/pids\"; \
             echo $! >> \"$RUNNER_TEMP/pids\"; sleep 30",
            &ctx,
            &stop,
        );
        setter.join().unwrap();
        assert_eq!(outcome, StepOutcome::Cancelled, "{log}");
        assert!(started.elapsed() < Duration::from_secs(10), "{log}");
        let bg: i32 = std::fs::read_to_string(ctx.temp.join("bg"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The background child was in the group: it is gone (or a zombie nobody waits for
        // would show as `Z`; init reaps it).
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{bg}/stat")).unwrap_or_default();
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.trim().chars().next());
            if matches!(state, None | Some('Z') | Some('X')) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "background process {bg} survived"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn background_processes_end_with_the_step() {
        let dir = Dir::new("bg");
        let ctx = dir.ctx();
        let started = Instant::now();
        let (outcome, log) = run_logged(
            "sleep 30 & echo $! > \"$RUNNER_TEMP/bg\"; echo done",
            &ctx,
            &AtomicBool::new(false),
        );
        assert_eq!(outcome, StepOutcome::Succeeded, "{log}");
        assert!(log.contains("[step] done"), "{log}");
        // The background sleep held the pipes; killing the group closed them well before 30 s.
        assert!(started.elapsed() < Duration::from_secs(10), "{log}");
    }
}
