//! The per-attempt arithmetic over tree samples: no `/proc`, no clock of its own.
//!
//! CPU is the sum of each process's increase of utime + stime between samples, kept per
//! process (pid + start time). A member that exits keeps what it used up to its last sample;
//! the current total of the live members would lose it. The parents' cutime/cstime are not
//! added: when a parent reaps a child, the child's utime + stime move into the parent's
//! cutime/cstime, and that time was already counted from the child's own samples.
//! What a process uses after its last sample (at most one interval's worth) is not seen.

use super::TreeSample;
use crate::process::ProcessIdentity;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The shortest span the busiest-interval rate is taken over: `/proc` counts CPU in clock
/// ticks (10 ms), so a rate between two samples a few milliseconds apart is mostly rounding.
/// Samples closer than this are merged into one interval.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// An attempt's figures so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MeterSummary {
    pub samples: u64,
    /// From the attempt's start to its last sample.
    pub wall: Duration,
    /// CPU used by the tree, exited members included.
    pub cpu: Duration,
    /// The largest resident memory of the whole tree in one sample.
    pub peak_rss_bytes: u64,
    /// `cpu / wall` in thousandths of a core.
    pub average_millicores: u64,
    /// The highest rate over an interval between samples (at least [`MIN_INTERVAL`] long;
    /// until one is complete, the interval so far).
    pub busiest_millicores: u64,
}

/// Accumulates one attempt's samples.
#[derive(Debug, Clone)]
pub struct AttemptMeter {
    started: Instant,
    last_at: Option<Instant>,
    /// The largest utime + stime seen per member; dropped when the member ends.
    seen_cpu: HashMap<ProcessIdentity, Duration>,
    cpu: Duration,
    peak_rss_bytes: u64,
    samples: u64,
    interval_start: Instant,
    interval_cpu: Duration,
    busiest_millicores: Option<u64>,
    /// What the attempt's own cgroup counted (exact: every process of the job, however it
    /// was re-parented, up to the moment of reading), where it has one.
    cgroup_cpu: Duration,
    cgroup_peak_bytes: u64,
}

impl AttemptMeter {
    /// `started`: when the attempt's root was started. CPU the tree used before the first
    /// sample falls into the first interval, from `started`.
    pub fn new(started: Instant) -> AttemptMeter {
        AttemptMeter {
            started,
            last_at: None,
            seen_cpu: HashMap::new(),
            cpu: Duration::ZERO,
            peak_rss_bytes: 0,
            samples: 0,
            interval_start: started,
            interval_cpu: Duration::ZERO,
            busiest_millicores: None,
            cgroup_cpu: Duration::ZERO,
            cgroup_peak_bytes: 0,
        }
    }

    /// Adds what the attempt's cgroup counted so far (`cpu.stat`'s usage, `memory.peak` where
    /// the memory controller is on): the summary takes the larger of it and the tree's
    /// figures, since the tree misses what a process used after its last sample.
    pub fn record_cgroup(&mut self, cpu: Duration, peak_bytes: Option<u64>) {
        self.cgroup_cpu = self.cgroup_cpu.max(cpu);
        self.cgroup_peak_bytes = self.cgroup_peak_bytes.max(peak_bytes.unwrap_or(0));
    }

    /// Adds a sample taken at `at`.
    pub fn record(&mut self, at: Instant, sample: &TreeSample) {
        let used = self.cpu_increase(sample);
        self.cpu += used;
        self.peak_rss_bytes = self.peak_rss_bytes.max(sample.rss_bytes());
        for id in &sample.ended {
            self.seen_cpu.remove(id);
        }
        self.advance_interval(at, used);
        self.last_at = Some(self.last_at.map_or(at, |last| last.max(at)));
        self.samples += 1;
    }

    pub fn summary(&self) -> MeterSummary {
        let wall = self.wall();
        let cpu = self.cpu.max(self.cgroup_cpu);
        MeterSummary {
            samples: self.samples,
            wall,
            cpu,
            peak_rss_bytes: self.peak_rss_bytes.max(self.cgroup_peak_bytes),
            average_millicores: millicores(cpu, wall),
            busiest_millicores: self.busiest_millicores(),
        }
    }

    /// Sums the members' increases since their previous sample; a member seen for the first
    /// time started within the attempt, so all of its time counts.
    fn cpu_increase(&mut self, sample: &TreeSample) -> Duration {
        let mut used = Duration::ZERO;
        for p in &sample.processes {
            let before = self.seen_cpu.entry(p.id).or_insert(Duration::ZERO);
            // Never backwards: a smaller figure (outside input) adds nothing and is not kept,
            // so the same time is not counted twice when it comes back.
            if p.cpu > *before {
                used += p.cpu - *before;
                *before = p.cpu;
            }
        }
        used
    }

    fn advance_interval(&mut self, at: Instant, used: Duration) {
        self.interval_cpu += used;
        let span = at.saturating_duration_since(self.interval_start);
        if span >= MIN_INTERVAL {
            let rate = millicores(self.interval_cpu, span);
            self.busiest_millicores = Some(self.busiest_millicores.map_or(rate, |b| b.max(rate)));
            self.interval_start = at;
            self.interval_cpu = Duration::ZERO;
        }
    }

    fn busiest_millicores(&self) -> u64 {
        self.busiest_millicores.unwrap_or_else(|| {
            let span = self.last_at.map_or(Duration::ZERO, |last| {
                last.saturating_duration_since(self.interval_start)
            });
            millicores(self.interval_cpu, span)
        })
    }

    fn wall(&self) -> Duration {
        self.last_at.map_or(Duration::ZERO, |last| {
            last.saturating_duration_since(self.started)
        })
    }
}

/// `cpu / wall` in thousandths of a core; 0 over no time.
fn millicores(cpu: Duration, wall: Duration) -> u64 {
    if wall.is_zero() {
        return 0;
    }
    u64::try_from(cpu.as_nanos() * 1000 / wall.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::meter::ProcessSample;

    fn id(pid: u32) -> ProcessIdentity {
        ProcessIdentity {
            pid,
            start_time: u64::from(pid) * 10,
        }
    }

    fn proc(pid: u32, cpu_ms: u64, rss: u64) -> ProcessSample {
        ProcessSample {
            id: id(pid),
            cpu: Duration::from_millis(cpu_ms),
            rss_bytes: rss,
        }
    }

    fn sample(processes: &[ProcessSample], ended: &[u32]) -> TreeSample {
        TreeSample {
            processes: processes.to_vec(),
            ended: ended.iter().map(|&p| id(p)).collect(),
        }
    }

    fn secs(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    #[test]
    fn the_cgroups_count_wins_where_it_saw_more() {
        let t0 = Instant::now();
        let mut m = AttemptMeter::new(t0);
        m.record(secs(t0, 2), &sample(&[proc(1, 500, 10 << 20)], &[]));
        // A process that lived between samples: only the cgroup saw it.
        m.record_cgroup(Duration::from_millis(1500), Some(64 << 20));
        let s = m.summary();
        assert_eq!(s.cpu, Duration::from_millis(1500));
        assert_eq!(s.peak_rss_bytes, 64 << 20);
        assert_eq!(s.average_millicores, 750);
        // A smaller reading (outside input, or no memory controller) takes nothing back.
        m.record_cgroup(Duration::from_millis(10), None);
        m.record(secs(t0, 4), &sample(&[proc(1, 3000, 20 << 20)], &[]));
        let s = m.summary();
        assert_eq!(s.cpu, Duration::from_millis(3000));
        assert_eq!(s.peak_rss_bytes, 64 << 20);
    }

    #[test]
    fn nothing_recorded_is_all_zero() {
        let m = AttemptMeter::new(Instant::now());
        assert_eq!(m.summary(), MeterSummary::default());
    }

    #[test]
    fn an_exited_member_keeps_its_cpu() {
        let t0 = Instant::now();
        let mut m = AttemptMeter::new(t0);
        m.record(
            secs(t0, 2),
            &sample(&[proc(1, 100, 0), proc(2, 900, 0)], &[]),
        );
        // 2 exited: the live total drops to 1's 300 ms, the attempt's does not.
        m.record(secs(t0, 4), &sample(&[proc(1, 300, 0)], &[2]));
        let s = m.summary();
        assert_eq!(s.cpu, Duration::from_millis(1200));
        assert_eq!(s.wall, Duration::from_secs(4));
        assert_eq!(s.average_millicores, 300);
        assert_eq!(s.samples, 2);
    }

    #[test]
    fn increases_are_counted_once_per_process() {
        let t0 = Instant::now();
        let mut m = AttemptMeter::new(t0);
        m.record(secs(t0, 1), &sample(&[proc(1, 500, 0)], &[]));
        m.record(secs(t0, 2), &sample(&[proc(1, 500, 0)], &[]));
        m.record(
            secs(t0, 3),
            &sample(&[proc(1, 700, 0), proc(3, 50, 0)], &[]),
        );
        assert_eq!(m.summary().cpu, Duration::from_millis(750));
    }

    #[test]
    fn a_figure_going_backwards_is_not_counted_twice() {
        let t0 = Instant::now();
        let mut m = AttemptMeter::new(t0);
        m.record(secs(t0, 1), &sample(&[proc(1, 500, 0)], &[]));
        m.record(secs(t0, 2), &sample(&[proc(1, 400, 0)], &[]));
        m.record(secs(t0, 3), &sample(&[proc(1, 600, 0)], &[]));
        assert_eq!(m.summary().cpu, Duration::from_millis(600));
    }

    #[test]
    fn a_recycled_pid_is_a_new_process() {
        let t0 = Instant::now();
        let mut m = AttemptMeter::new(t0);
        m.record(secs(t0, 1), &sample(&[proc(1, 500, 0)], &[]));
        let reused = ProcessSample {
            id: ProcessIdentity {
                pid: 1,
                start_time: 99_999,
            },
            cpu: Duration::from_millis(200),
            rss_bytes: 0,
        };
        m.record(secs(t0, 2), &sample(&[reused], &[1]));
        assert_eq!(m.summary().cpu, Duration::from_millis(700));
    }

    #[test]
    fn peak_rss_is_the_largest_tree_total() {
        let t0 = Instant::now();
        let mut m = AttemptMeter::new(t0);
        m.record(secs(t0, 1), &sample(&[proc(1, 0, 10), proc(2, 0, 30)], &[]));
        m.record(secs(t0, 2), &sample(&[proc(1, 0, 35)], &[2]));
        assert_eq!(m.summary().peak_rss_bytes, 40);
    }

    #[test]
    fn busiest_interval_is_the_highest_rate_between_samples() {
        let t0 = Instant::now();
        let mut m = AttemptMeter::new(t0);
        m.record(secs(t0, 2), &sample(&[proc(1, 200, 0)], &[])); // 100 mc
        m.record(secs(t0, 4), &sample(&[proc(1, 3200, 0)], &[])); // 1500 mc
        m.record(secs(t0, 6), &sample(&[proc(1, 3400, 0)], &[])); // 100 mc
        let s = m.summary();
        assert_eq!(s.busiest_millicores, 1500);
        assert_eq!(s.average_millicores, 566);
    }

    #[test]
    fn close_samples_are_merged_into_one_interval() {
        let t0 = Instant::now();
        let mut m = AttemptMeter::new(t0);
        m.record(secs(t0, 2), &sample(&[proc(1, 0, 0)], &[]));
        // 10 ms of CPU 10 ms later would read as a whole core; merged with the next sample
        // it is 60 ms over 1.01 s.
        let close = secs(t0, 2) + Duration::from_millis(10);
        m.record(close, &sample(&[proc(1, 10, 0)], &[]));
        m.record(
            secs(t0, 3) + Duration::from_millis(10),
            &sample(&[proc(1, 60, 0)], &[]),
        );
        assert_eq!(m.summary().busiest_millicores, 59);
    }

    #[test]
    fn a_short_attempt_reports_the_interval_so_far() {
        let t0 = Instant::now();
        let mut m = AttemptMeter::new(t0);
        m.record(
            t0 + Duration::from_millis(500),
            &sample(&[proc(1, 250, 0)], &[]),
        );
        let s = m.summary();
        assert_eq!(s.busiest_millicores, 500);
        assert_eq!(s.average_millicores, 500);
    }

    #[test]
    fn samples_out_of_order_do_not_panic_or_go_back_in_time() {
        let t0 = Instant::now();
        let mut m = AttemptMeter::new(secs(t0, 5));
        m.record(secs(t0, 9), &sample(&[proc(1, 100, 0)], &[]));
        m.record(secs(t0, 1), &sample(&[proc(1, 200, 0)], &[]));
        let s = m.summary();
        assert_eq!(s.wall, Duration::from_secs(4));
        assert_eq!(s.cpu, Duration::from_millis(200));
    }
}
