//! The CPU cost of metering process trees, measured as this process's own CPU time
//! (getrusage: user + system):
//!
//! 1. one `sample_tree` of a tree of 50 sleeping processes (median and p90 over `--samples`);
//! 2. 8 attempts of 6 processes each, sampled every `--interval-ms` for `--rounds` rounds:
//!    the CPU of one round (8 × `sample_tree` + `AttemptMeter::record`) as a share of one core
//!    over the interval; and the same with one `Snapshot` shared by the 8 attempts.
//!
//! Usage: meter-bench [--samples N] [--rounds N] [--interval-ms MS]

use anyhow::{bail, Context, Result};
use nix::sys::resource::{getrusage, UsageWho};
use rm_runner::{sample_in, sample_tree, AttemptMeter, ProcessIdentity, Snapshot, TreeState};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

struct Args {
    samples: usize,
    rounds: usize,
    interval: Duration,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        samples: 200,
        rounds: 30,
        interval: Duration::from_secs(2),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--samples" => args.samples = value.parse()?,
            "--rounds" => args.rounds = value.parse()?,
            "--interval-ms" => args.interval = Duration::from_millis(value.parse()?),
            _ => bail!("unknown argument {flag}"),
        }
    }
    Ok(args)
}

/// A tree of `size` processes: `sh` and `size - 1` sleeping children, in its own process
/// group, killed on drop.
struct Tree {
    child: Child,
    root: ProcessIdentity,
}

impl Tree {
    fn spawn(size: usize) -> Result<Tree> {
        let script = format!("i=1; while [ $i -lt {size} ]; do sleep 600 & i=$((i+1)); done; wait");
        let child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .process_group(0)
            .spawn()?;
        let root = Snapshot::read()?
            .identity(child.id())
            .context("the tree's root is not in /proc")?;
        let tree = Tree { child, root };
        tree.wait_for(size)?;
        Ok(tree)
    }

    fn wait_for(&self, size: usize) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut state = TreeState::new();
        while sample_tree(self.root, &mut state)?.processes.len() < size {
            if Instant::now() > deadline {
                bail!("the tree did not reach {size} processes");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

fn own_cpu() -> Result<Duration> {
    let usage = getrusage(UsageWho::RUSAGE_SELF)?;
    let micros = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    Ok(micros(usage.user_time()) + micros(usage.system_time()))
}

/// The CPU this process spent in `f`.
fn cpu_of(f: impl FnOnce() -> Result<()>) -> Result<Duration> {
    let before = own_cpu()?;
    f()?;
    Ok(own_cpu()?.saturating_sub(before))
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

fn one_tree(samples: usize) -> Result<()> {
    let tree = Tree::spawn(50)?;
    let mut state = TreeState::new();
    let mut costs = Vec::with_capacity(samples);
    let mut size = 0;
    for _ in 0..samples {
        costs.push(cpu_of(|| {
            size = sample_tree(tree.root, &mut state)?.processes.len();
            Ok(())
        })?);
    }
    costs.sort();
    let machine = Snapshot::read()?.len();
    println!(
        "one sample_tree, tree of {size} processes ({machine} processes on the machine), {samples} samples: median {:.0} µs, p90 {:.0} µs",
        micros(quantile(&costs, 0.5)),
        micros(quantile(&costs, 0.9)),
    );
    Ok(())
}

struct Attempt {
    tree: Tree,
    state: TreeState,
    meter: AttemptMeter,
}

fn attempts(rounds: usize, interval: Duration) -> Result<()> {
    let mut attempts = Vec::new();
    let mut shared = Vec::new();
    for _ in 0..8 {
        for list in [&mut attempts, &mut shared] {
            let tree = Tree::spawn(6)?;
            list.push(Attempt {
                tree,
                state: TreeState::new(),
                meter: AttemptMeter::new(Instant::now()),
            });
        }
    }
    let mut own = Vec::with_capacity(rounds);
    let mut one = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        std::thread::sleep(interval);
        own.push(cpu_of(|| round_own_snapshots(&mut attempts))?);
        one.push(cpu_of(|| round_shared_snapshot(&mut shared))?);
    }
    own.sort();
    one.sort();
    let share = |d: Duration| d.as_secs_f64() / interval.as_secs_f64() * 100.0;
    let (own_median, one_median) = (quantile(&own, 0.5), quantile(&one, 0.5));
    println!(
        "8 attempts x 6 processes every {} ms, {rounds} rounds: one sample_tree each: median {:.0} µs per round = {:.3} % of one core",
        interval.as_millis(),
        micros(own_median),
        share(own_median),
    );
    println!(
        "  one Snapshot shared by the 8 (sample_in): median {:.0} µs per round = {:.3} % of one core",
        micros(one_median),
        share(one_median),
    );
    let peak = attempts
        .first()
        .map_or(0, |a| a.meter.summary().peak_rss_bytes);
    println!("  (one attempt's peak RSS as metered: {} KiB)", peak / 1024);
    Ok(())
}

fn round_own_snapshots(attempts: &mut [Attempt]) -> Result<()> {
    for a in attempts {
        let sample = sample_tree(a.tree.root, &mut a.state)?;
        a.meter.record(Instant::now(), &sample);
    }
    Ok(())
}

fn round_shared_snapshot(attempts: &mut [Attempt]) -> Result<()> {
    let snapshot = Snapshot::read()?;
    for a in attempts {
        let sample = sample_in(&snapshot, a.tree.root, &mut a.state);
        a.meter.record(Instant::now(), &sample);
    }
    Ok(())
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() -> Result<()> {
    let args = parse_args()?;
    one_tree(args.samples)?;
    attempts(args.rounds, args.interval)
}
