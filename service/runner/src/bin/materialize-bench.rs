//! Measures how fast a runtime is materialized from a package the size of the real runner
//! (≈9,000 files, ≈200 MB): clone (where the filesystem supports it), parallel copy and
//! single-threaded copy, each into fresh runtimes N times. Prints median and p90.
//!
//! Usage: materialize-bench [--runs N] [--threads T] [--dir PATH] [--files N] [--mb N]
//!        [--only clone|parallel|serial]

use anyhow::{bail, Context, Result};
use rm_runner::{materialize, scrub, CopyMethod, MaterializeOptions};
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

struct Args {
    runs: usize,
    threads: usize,
    dir: PathBuf,
    files: usize,
    bytes: u64,
    /// Measure one method only (quicker when comparing builds).
    only: Option<CopyMethod>,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        runs: 5,
        threads: MaterializeOptions::default().threads,
        dir: std::env::temp_dir().join("rm-materialize-bench"),
        files: 9_000,
        bytes: 200 * 1024 * 1024,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--runs" => args.runs = value.parse().context("--runs")?,
            "--threads" => args.threads = value.parse().context("--threads")?,
            "--dir" => args.dir = PathBuf::from(value),
            "--files" => args.files = value.parse().context("--files")?,
            "--mb" => args.bytes = value.parse::<u64>().context("--mb")? * 1024 * 1024,
            "--only" => {
                args.only = Some(match value.as_str() {
                    "clone" => CopyMethod::Clone,
                    "parallel" => CopyMethod::ParallelCopy,
                    "serial" => CopyMethod::SerialCopy,
                    other => bail!("--only {other}: use clone, parallel or serial"),
                })
            }
            other => {
                bail!("unknown flag {other}; use --runs, --threads, --dir, --files, --mb, --only")
            }
        }
    }
    if args.runs == 0 || args.files == 0 {
        bail!("--runs and --files must be at least 1");
    }
    Ok(args)
}

/// A deterministic tree: many small files and a few large ones, spread over nested
/// directories, every 10th file executable, a few relative symlinks.
fn generate(root: &Path, files: usize, bytes: u64) -> Result<()> {
    let weights: Vec<u64> = (0..files as u64)
        .map(|i| {
            let w = (i.wrapping_mul(7919) % 1000) + 1;
            w * w * w / 1000 + 1
        })
        .collect();
    let total: u64 = weights.iter().sum();
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut written = 0u64;
    for (i, w) in weights.iter().enumerate() {
        let size = if i + 1 == files {
            bytes.saturating_sub(written)
        } else {
            bytes * w / total
        };
        let dir = root.join(format!("d{:02}/s{:02}", i % 40, (i / 40) % 8));
        fs::create_dir_all(&dir)?;
        let path = dir.join(format!("f{i:05}.dll"));
        let mut out = std::io::BufWriter::new(fs::File::create(&path)?);
        let mut left = size;
        let mut block = [0u8; 8192];
        while left > 0 {
            for chunk in block.chunks_mut(8) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
            }
            let n = left.min(block.len() as u64) as usize;
            out.write_all(&block[..n])?;
            left -= n as u64;
        }
        out.flush()?;
        if i % 10 == 0 {
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
        }
        written += size;
        if i % 1000 == 0 {
            std::os::unix::fs::symlink(format!("f{i:05}.dll"), dir.join(format!("l{i:05}")))?;
        }
    }
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let pkg = args.dir.join("package");
    let runtimes = args.dir.join("runtimes");
    let complete = args.dir.join("package.complete");
    if !complete.exists() {
        scrub(&pkg).context("clearing an old package tree")?;
        eprintln!(
            "generating {} files / {} MB in {}",
            args.files,
            args.bytes / 1024 / 1024,
            pkg.display()
        );
        generate(&pkg, args.files, args.bytes)?;
        fs::write(&complete, b"")?;
    }
    fs::create_dir_all(&runtimes)?;

    let methods = [
        ("clone", CopyMethod::Clone),
        ("parallel copy", CopyMethod::ParallelCopy),
        ("single-thread copy", CopyMethod::SerialCopy),
    ];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); methods.len()];
    let mut scrubs: Vec<Vec<Duration>> = vec![Vec::new(); methods.len()];
    let mut unsupported: Vec<Option<String>> = vec![None; methods.len()];
    // Rounds interleave the methods so background noise hits them alike; round 0 is an
    // untimed warm-up (hot page cache for the source). Dirty pages are flushed, untimed,
    // after every run so one run's writeback does not slow the next.
    for round in 0..=args.runs {
        for (m, (_, method)) in methods.iter().enumerate() {
            if unsupported[m].is_some() || args.only.is_some_and(|o| o != *method) {
                continue;
            }
            let opts = MaterializeOptions {
                method: *method,
                threads: args.threads,
                owner: None,
            };
            let rt = runtimes.join(format!("r{round}-{m}"));
            scrub(&rt)?;
            fs::create_dir(&rt)?;
            match materialize(&pkg, &rt, &opts) {
                Ok(report) if round > 0 => times[m].push(report.elapsed),
                Ok(_) => {}
                Err(e) => unsupported[m] = Some(e.to_string()),
            }
            let s = scrub(&rt)?;
            if round > 0 {
                scrubs[m].push(s.elapsed);
            }
            nix::unistd::sync();
        }
    }
    let mut medians = Vec::new();
    for (m, (label, method)) in methods.iter().enumerate() {
        if args.only.is_some_and(|o| o != *method) {
            continue;
        }
        if let Some(why) = &unsupported[m] {
            println!("{label:>20}: not supported here ({why})");
            continue;
        }
        times[m].sort();
        scrubs[m].sort();
        let median = percentile(&times[m], 0.5);
        println!(
            "{label:>20}: median {:>7.1} ms  p90 {:>7.1} ms  (scrub median {:>6.1} ms, {} runs, {} threads)",
            median.as_secs_f64() * 1e3,
            percentile(&times[m], 0.9).as_secs_f64() * 1e3,
            percentile(&scrubs[m], 0.5).as_secs_f64() * 1e3,
            times[m].len(),
            if *method == CopyMethod::SerialCopy { 1 } else { args.threads },
        );
        medians.push((*label, median));
    }
    if let (Some((_, parallel)), Some((_, serial))) = (
        medians.iter().find(|(l, _)| *l == "parallel copy"),
        medians.iter().find(|(l, _)| *l == "single-thread copy"),
    ) {
        println!(
            "single-thread / parallel copy = {:.2}x",
            serial.as_secs_f64() / parallel.as_secs_f64().max(1e-9)
        );
    }
    Ok(())
}
