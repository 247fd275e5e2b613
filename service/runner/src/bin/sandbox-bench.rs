//! What the job sandbox costs (BENCHMARKS.md, "The job sandbox"):
//! - startup: from the spawn to the job's first instruction (a `date` inside prints the time),
//!   plainly vs inside the walls (pasta + bwrap, as a runner starts), and the whole run of
//!   `/bin/true` including the namespaces' teardown (which follows the job, off the pickup
//!   path); median and p90 over N runs each, interleaved so machine noise hits both alike;
//! - cache layers: what one layer over a shared cache adds to that start, as root (mounted
//!   between fork and exec) or, run as an ordinary user, inside the sandbox's user namespace;
//!   `RM_BENCH_LAYERS_ONLY=1` stops after it;
//! - network: download throughput and connection latency with curl outside vs inside, from
//!   a loopback server (its port forwarded into the job's namespace: the one host port a job
//!   reaches) and, as root, from a server on a benchmarking address through pasta's tap path
//!   (the internet's path), unpaced and paced at 1, 2.5 and 10 Gbit/s links;
//!   `RM_BENCH_NETWORK_ONLY=1` runs only these rows.
//!
//! - priority: a foreground loop's wake-up lateness (1 ms sleeps, p50/p99) idle, beside a
//!   CPU + memory hog (one busy process per core, each touching 256 MiB) at normal priority,
//!   and beside the same hog at `nice 19` in the idle I/O class, as runners start.
//!
//! `cargo run --release -p rm-runner --bin sandbox-bench -- [RUNS] [MIB]` (defaults 40, 256).
//! As root it runs everything as `nobody` (pasta refuses root), as runners do.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: a broken setup may panic

use rm_runner::sandbox::{wrap, SandboxConfig, Tools, Walls};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;

fn identity() -> Option<(u32, u32)> {
    nix::unistd::geteuid().is_root().then_some((NOBODY, NOBODY))
}

fn command(program: &Path, args: &[&str], sandbox: Option<&SandboxConfig>) -> Command {
    let id = identity();
    let mut cmd = match sandbox {
        Some(config) => {
            let tools = Tools::find().expect("bwrap and pasta installed");
            let (uid, gid) = id.unwrap_or((
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            ));
            let walls = Walls {
                config,
                runtime: None,
                shared: &[],
                uid,
                gid,
                docker: None,
                resolv_conf: None,
                layers: None,
            };
            let (p, a) = wrap(&tools, &walls, program, args);
            let mut c = Command::new(p);
            c.args(a);
            c
        }
        None => {
            let mut c = Command::new(program);
            c.args(args);
            c
        }
    };
    if let Some((uid, gid)) = id {
        cmd.uid(uid).gid(gid);
    }
    cmd.current_dir("/").stdin(Stdio::null());
    cmd
}

fn run_timed(mut cmd: Command) -> (Duration, Vec<u8>) {
    let start = Instant::now();
    let out = cmd.stderr(Stdio::null()).output().expect("runs");
    let took = start.elapsed();
    assert!(out.status.success(), "{cmd:?} failed: {:?}", out.status);
    (took, out.stdout)
}

/// Milliseconds from the spawn to the moment the command inside printed the wall clock.
fn until_first_instruction(sandbox: Option<&SandboxConfig>) -> f64 {
    first_instruction_ms(command(Path::new("/bin/date"), &["+%s%N"], sandbox))
}

/// Milliseconds from the spawn of `cmd` (which prints `date +%s%N`) to its print.
fn first_instruction_ms(mut cmd: Command) -> f64 {
    let start_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let out = cmd.stderr(Stdio::null()).output().expect("runs");
    assert!(out.status.success(), "{cmd:?} failed");
    let inside_ns: u128 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    (inside_ns.saturating_sub(start_ns)) as f64 / 1e6
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

/// An HTTP server on `addr` that answers every request with `bytes` zero bytes, at most
/// `rate` bytes per second when given (a link of that speed, paced by the sender as a
/// server behind it would be).
fn serve(addr: &str, bytes: usize, rate: Option<f64>) -> u16 {
    let listener = TcpListener::bind((addr, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let chunk = vec![0u8; if rate.is_some() { 64 << 10 } else { 1 << 20 }];
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn({
                let chunk = chunk.clone();
                move || {
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf);
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {bytes}\r\nConnection: close\r\n\r\n"
                    );
                    if s.write_all(head.as_bytes()).is_err() {
                        return;
                    }
                    let (start, mut left) = (Instant::now(), bytes);
                    while left > 0 {
                        let n = left.min(chunk.len());
                        if s.write_all(&chunk[..n]).is_err() {
                            return;
                        }
                        left -= n;
                        if let Some(rate) = rate {
                            let due = Duration::from_secs_f64((bytes - left) as f64 / rate);
                            if let Some(wait) = due.checked_sub(start.elapsed()) {
                                std::thread::sleep(wait);
                            }
                        }
                    }
                }
            });
        }
    });
    port
}

/// An address of this host that is neither loopback nor the outbound interface's, so a
/// sandboxed job reaches it the way it reaches the internet: through pasta's tap path (its
/// own TCP stack and a host socket), not the loopback port relay. 198.18.0.0/15 is set aside
/// for benchmarks (RFC 2544). Added to `lo` as a /32 for the run and removed after; needs root.
struct TapAddress;

impl TapAddress {
    const ADDR: &'static str = "198.18.7.1";

    fn add() -> Option<TapAddress> {
        if !nix::unistd::geteuid().is_root() {
            return None;
        }
        let ip = |verb: &str| {
            Command::new("ip")
                .args(["addr", verb, &format!("{}/32", Self::ADDR), "dev", "lo"])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        ip("add").then_some(TapAddress)
    }
}

impl Drop for TapAddress {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["addr", "del", &format!("{}/32", Self::ADDR), "dev", "lo"])
            .status();
    }
}

/// Downloads of `mib` MiB from `url` outside and inside the walls, interleaved, median of
/// `rounds`; prints one line.
fn download(what: &str, url: &str, config: &SandboxConfig, mib: usize, rounds: usize) {
    let (mut out_bps, mut in_bps, mut out_conn, mut in_conn) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (b, c) = curl(url, None);
        out_bps.push(b);
        out_conn.push(c * 1e3);
        let (b, c) = curl(url, Some(config));
        in_bps.push(b);
        in_conn.push(c * 1e3);
    }
    let (ob, ib) = (percentile(&mut out_bps, 0.5), percentile(&mut in_bps, 0.5));
    let (oc, ic) = (
        percentile(&mut out_conn, 0.5),
        percentile(&mut in_conn, 0.5),
    );
    println!(
        "download of {mib} MiB, {what}, median of {rounds}: outside {:.0} MiB/s, inside {:.0} MiB/s ({:.0} % of the host's); connect outside {oc:.2} ms, inside {ic:.2} ms",
        ob / 1048576.0,
        ib / 1048576.0,
        ib / ob * 100.0
    );
}

/// The network rows: the loopback relay (the one host port a job reaches: the GitHub URL
/// when GitHub is on this host), then, as root, the tap path every other address takes, from
/// an unpaced server (the stack's ceiling) and from servers paced at a workstation's link
/// speeds (what the wall costs on such a link).
fn network(mib: usize) {
    let rounds = 5;
    let port = serve("127.0.0.1", mib << 20, None);
    let relay = SandboxConfig {
        forward_tcp: vec![port],
        ..SandboxConfig::default()
    };
    download(
        "loopback port relay",
        &format!("http://127.0.0.1:{port}/"),
        &relay,
        mib,
        rounds,
    );
    let Some(_address) = TapAddress::add() else {
        println!(
            "tap path: not measured (run as root: it adds {} to lo for the run)",
            TapAddress::ADDR
        );
        return;
    };
    let config = SandboxConfig::default();
    for (what, rate) in [
        ("tap path, unpaced", None),
        ("tap path, a 1 Gbit/s link", Some(1e9 / 8.0)),
        ("tap path, a 2.5 Gbit/s link", Some(2.5e9 / 8.0)),
        ("tap path, a 10 Gbit/s link", Some(10e9 / 8.0)),
    ] {
        let port = serve(TapAddress::ADDR, mib << 20, rate);
        let url = format!("http://{}:{port}/", TapAddress::ADDR);
        download(what, &url, &config, mib, rounds);
    }
}

/// curl's own figures: (bytes per second, seconds to connect).
fn curl(url: &str, sandbox: Option<&SandboxConfig>) -> (f64, f64) {
    let (_, out) = run_timed(command(
        Path::new("/usr/bin/curl"),
        &[
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{speed_download} %{time_connect}",
            url,
        ],
        sandbox,
    ));
    let text = String::from_utf8_lossy(&out);
    let mut parts = text.split_whitespace().map(|s| s.parse::<f64>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

/// Lateness of 2,000 sleeps of 1 ms, in microseconds: (p50, p99).
fn wakeup_lateness() -> (f64, f64) {
    let mut late = Vec::with_capacity(2000);
    for _ in 0..2000 {
        let t = Instant::now();
        std::thread::sleep(Duration::from_millis(1));
        late.push((t.elapsed().as_secs_f64() - 0.001) * 1e6);
    }
    (percentile(&mut late, 0.5), percentile(&mut late, 0.99))
}

/// One busy process per core, each writing over 256 MiB again and again, optionally as a
/// runner is started (nice 19, idle I/O class); killed when dropped.
struct Hog(Vec<std::process::Child>);

impl Hog {
    fn start(as_runner: bool) -> Hog {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let script = "python3 -c 'b = bytearray(256 << 20)\nwhile True:\n    for i in range(0, len(b), 4096): b[i] = (b[i] + 1) & 255'";
        let children = (0..cores)
            .map(|_| {
                let mut c = if as_runner {
                    let mut c = Command::new("nice");
                    c.args(["-n", "19", "ionice", "-c", "3", "sh", "-c", script]);
                    c
                } else {
                    let mut c = Command::new("sh");
                    c.args(["-c", script]);
                    c
                };
                c.process_group(0).spawn().expect("hog starts")
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        Hog(children)
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = c.wait();
        }
    }
}

/// What one cache layer adds to the start: as root, mounted between fork and exec (plain
/// `date` against `date` with the layer); as an ordinary user, inside the sandbox's user
/// namespace (the sandboxed chain against the chain with the layer). Run the bench both ways
/// for both figures.
fn layers_startup(runs: usize, config: &SandboxConfig) {
    use rm_runner::caches::layers::Layers;
    let dir = std::env::temp_dir().join(format!("rm-layers-bench-{}", std::process::id()));
    let (root, lower) = (dir.join("runners"), dir.join("runners/.caches/ns"));
    std::fs::create_dir_all(&lower).unwrap();
    let layers = Layers::open(&root).expect("this host can build cache layers");
    let as_root = nix::unistd::geteuid().is_root();
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let name = format!("bench-{i}");
        let mounts = layers.prepare(&name, std::slice::from_ref(&lower)).unwrap();
        if as_root {
            without.push(first_instruction_ms(command(
                Path::new("/bin/date"),
                &["+%s%N"],
                None,
            )));
            let mut cmd = Command::new("/bin/date");
            cmd.arg("+%s%N").stdin(Stdio::null());
            mounts.apply_to(&mut cmd);
            with.push(first_instruction_ms(cmd));
        } else {
            without.push(until_first_instruction(Some(config)));
            let tools = Tools::find().expect("bwrap and pasta installed");
            let shared = [lower.clone()];
            let walls = Walls {
                config,
                runtime: None,
                shared: &shared,
                uid: nix::unistd::geteuid().as_raw(),
                gid: nix::unistd::getegid().as_raw(),
                docker: None,
                resolv_conf: None,
                layers: Some(&mounts),
            };
            let (p, a) = wrap(&tools, &walls, Path::new("/bin/date"), &["+%s%N"]);
            let mut cmd = Command::new(p);
            cmd.args(a).current_dir("/").stdin(Stdio::null());
            with.push(first_instruction_ms(cmd));
        }
        layers.finish(&name, false).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
    let (w50, l50) = (percentile(&mut without, 0.5), percentile(&mut with, 0.5));
    let (w90, l90) = (percentile(&mut without, 0.9), percentile(&mut with, 0.9));
    let how = if as_root {
        "as root, between fork and exec, against no layer"
    } else {
        "as you, inside the sandbox's user namespace, against the sandbox alone"
    };
    println!("one cache layer ({how}) over {runs} runs each (ms): without p50 {w50:.1} p90 {w90:.1}; with p50 {l50:.1} p90 {l90:.1}; added p50 {:.1}", l50 - w50);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let runs: usize = args.next().map_or(40, |a| a.parse().expect("RUNS"));
    let mib: usize = args.next().map_or(256, |a| a.parse().expect("MIB"));

    if std::env::var_os("RM_BENCH_NETWORK_ONLY").is_some() {
        network(mib);
        return;
    }
    let config = SandboxConfig::default();
    let (mut plain, mut walled) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        plain.push(until_first_instruction(None));
        walled.push(until_first_instruction(Some(&config)));
    }
    let (p50, s50) = (percentile(&mut plain, 0.5), percentile(&mut walled, 0.5));
    let (p90, s90) = (percentile(&mut plain, 0.9), percentile(&mut walled, 0.9));
    println!("spawn -> job's first instruction over {runs} runs each (ms): plain p50 {p50:.1} p90 {p90:.1}; sandboxed p50 {s50:.1} p90 {s90:.1}; added p50 {:.1}", s50 - p50);
    layers_startup(runs, &config);
    if std::env::var_os("RM_BENCH_LAYERS_ONLY").is_some() {
        return;
    }

    let (mut plain, mut walled) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        plain.push(
            run_timed(command(Path::new("/bin/true"), &[], None))
                .0
                .as_secs_f64()
                * 1e3,
        );
        walled.push(
            run_timed(command(Path::new("/bin/true"), &[], Some(&config)))
                .0
                .as_secs_f64()
                * 1e3,
        );
    }
    let (p50, s50) = (percentile(&mut plain, 0.5), percentile(&mut walled, 0.5));
    let (p90, s90) = (percentile(&mut plain, 0.9), percentile(&mut walled, 0.9));
    println!("whole run of /bin/true, teardown included, over {runs} runs each (ms): plain p50 {p50:.1} p90 {p90:.1}; sandboxed p50 {s50:.1} p90 {s90:.1}; added p50 {:.1}", s50 - p50);

    network(mib);

    let idle = wakeup_lateness();
    let plain = {
        let _hog = Hog::start(false);
        wakeup_lateness()
    };
    let niced = {
        let _hog = Hog::start(true);
        wakeup_lateness()
    };
    println!(
        "foreground 1 ms wake-up lateness (us) p50/p99: idle {:.0}/{:.0}; beside a hog at normal priority {:.0}/{:.0} (p99 {:.1}x idle); beside the hog as a runner (nice 19, idle I/O) {:.0}/{:.0} (p99 {:.1}x idle)",
        idle.0, idle.1, plain.0, plain.1, plain.1 / idle.1, niced.0, niced.1, niced.1 / idle.1
    );
}
