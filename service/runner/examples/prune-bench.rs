//! What the prune between jobs costs: after every runner's end the service brings the
//! dependency caches under their cap. This builds `--repos` repositories' npm caches of
//! `--files` small files each (real files in a temporary directory), then runs `--jobs`
//! jobs round-robin over the repositories, each writing one new file into its repository's
//! cache, and times the prune after each job's end. For comparison it times the same number of
//! full walks (`Caches::entries`, what every prune did before sizes were remembered).
//!
//! Usage: prune-bench [--repos N] [--files N] [--jobs N] [--dir PATH]
//! (`--dir`: where the caches go, default the system's temporary directory; its filesystem
//! and page cache decide the absolute figures.)

use anyhow::{bail, Context, Result};
use rm_core::caches::{CacheAccess, Namespace};
use rm_runner::{CacheOwners, CachePlan, Caches, ResolvedRunAs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

struct Args {
    repos: usize,
    files: usize,
    jobs: usize,
    dir: Option<PathBuf>,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        repos: 20,
        files: 5_000,
        jobs: 40,
        dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--repos" => args.repos = value.parse()?,
            "--files" => args.files = value.parse()?,
            "--jobs" => args.jobs = value.parse()?,
            "--dir" => args.dir = Some(PathBuf::from(value)),
            _ => bail!("unknown argument {flag}"),
        }
    }
    if args.repos == 0 || args.jobs == 0 {
        bail!("--repos and --jobs must be at least 1");
    }
    Ok(args)
}

fn plan(repo: &str) -> Result<CachePlan> {
    let target = rm_core::Target::parse(repo).with_context(|| format!("target {repo}"))?;
    Ok(CachePlan {
        namespace: Some(Namespace::of_target(&target)),
        access: CacheAccess::ReadWrite,
        tool_cache: false,
        tool_namespace: None,
    })
}

fn npm_dir(prepared: &rm_runner::PreparedCaches) -> Result<PathBuf> {
    prepared
        .env
        .iter()
        .find(|(k, _)| k == "npm_config_cache")
        .map(|(_, v)| PathBuf::from(v))
        .context("npm_config_cache not set")
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let tmp = match &args.dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let root = rm_runner::runtime::RunnerRoot::prepare(
        tmp.path().join("runners"),
        ResolvedRunAs::ServiceUser,
    )?;
    let caches = Caches::open(
        root.path(),
        CacheOwners::Single { runner: None },
        "linux-x64",
    )?;
    let repos: Vec<String> = (0..args.repos).map(|i| format!("octo/repo{i}")).collect();
    let mut n = 0usize;
    // One job of each repository fills its cache.
    let mut run_job = |repo: &str, files: usize| -> Result<()> {
        n += 1;
        let name = rm_runner::runtime::RuntimeName::new(format!("r{n}"))?;
        let rt = root.create_runtime(&name)?;
        let prepared = caches.prepare(&rt, &plan(repo)?)?;
        let npm = npm_dir(&prepared)?;
        for f in 0..files {
            let sub = npm.join(format!("{:02x}", f % 256));
            std::fs::create_dir_all(&sub)?;
            std::fs::write(sub.join(format!("{n}-{f}")), b"cached package bytes")?;
        }
        rm_runner::scrub::scrub(&rt.path)?;
        caches.release(name.as_str())?;
        Ok(())
    };
    let start = Instant::now();
    for repo in &repos {
        run_job(repo, args.files)?;
    }
    let files_total = args.repos * args.files;
    println!(
        "{} caches, {} files, made in {:.1} s",
        args.repos,
        files_total,
        start.elapsed().as_secs_f64()
    );
    let cap = u64::MAX;
    // The first prune measures every cache (as after a restart).
    let t = Instant::now();
    caches.prune(cap)?;
    let first = t.elapsed();
    let mut after_job = Vec::with_capacity(args.jobs);
    let mut full_walk = Vec::with_capacity(args.jobs);
    for j in 0..args.jobs {
        run_job(&repos[j % repos.len()], 1)?;
        let t = Instant::now();
        let removed = caches.prune(cap)?;
        after_job.push(t.elapsed());
        if !removed.removed.is_empty() {
            bail!("nothing should be pruned under an unlimited cap");
        }
        let t = Instant::now();
        let entries = caches.entries()?;
        full_walk.push(t.elapsed());
        if entries.len() < args.repos {
            bail!("{} caches listed, {} made", entries.len(), args.repos);
        }
    }
    let (a, w) = (median(after_job), median(full_walk));
    println!("first prune (every cache measured): {}", ms(first));
    println!(
        "prune after a job's end, median of {}: {}",
        args.jobs,
        ms(a)
    );
    println!(
        "full walk of every cache, median of {}: {}",
        args.jobs,
        ms(w)
    );
    println!(
        "full walk ÷ prune after a job: {:.1}×",
        w.as_secs_f64() / a.as_secs_f64().max(1e-9)
    );
    Ok(())
}
