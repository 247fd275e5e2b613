//! Rate-limit budget: what this host has spent (per hour window and per
//! endpoint), what GitHub says is left, and how often targets may be polled so
//! planned use stays under half the hourly quota and well under the secondary
//! per-minute limit.

use chrono::{DateTime, TimeZone, Utc};
use http::HeaderMap;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// How one response counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Charge {
    /// A 2xx: counts against the primary limit.
    Charged,
    /// A 304: free against the primary limit.
    Free,
    /// Any other status or a transport failure.
    Error,
}

/// Counts for one endpoint in one window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// 2xx answers.
    pub charged: u64,
    /// 304 answers.
    pub free: u64,
    /// Errors (non-2xx/304 statuses, timeouts, dropped connections).
    pub errors: u64,
}

impl Counts {
    fn add(&mut self, c: Charge) {
        match c {
            Charge::Charged => self.charged += 1,
            Charge::Free => self.free += 1,
            Charge::Error => self.errors += 1,
        }
    }
    fn total(&self) -> u64 {
        self.charged + self.free + self.errors
    }
}

/// The last `x-ratelimit-*` headers seen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RateLimit {
    /// `x-ratelimit-limit`.
    pub limit: u64,
    /// `x-ratelimit-remaining`.
    pub remaining: u64,
    /// `x-ratelimit-used`.
    pub used: u64,
    /// `x-ratelimit-reset`.
    pub reset: DateTime<Utc>,
    /// `x-ratelimit-resource` (`core` for everything here).
    pub resource: Option<String>,
}

impl RateLimit {
    /// Parses the headers; `None` unless limit, remaining and reset are present.
    pub fn from_headers(h: &HeaderMap) -> Option<Self> {
        let num = |n: &str| -> Option<u64> { h.get(n)?.to_str().ok()?.trim().parse().ok() };
        let limit = num("x-ratelimit-limit")?;
        let remaining = num("x-ratelimit-remaining")?;
        let reset = Utc
            .timestamp_opt(i64::try_from(num("x-ratelimit-reset")?).ok()?, 0)
            .single()?;
        Some(Self {
            limit,
            remaining,
            used: num("x-ratelimit-used").unwrap_or(limit.saturating_sub(remaining)),
            reset,
            resource: h
                .get("x-ratelimit-resource")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        })
    }
}

/// Demand polls of one target and what they cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PollCost {
    polls: u64,
    charged: u64,
}

#[derive(Clone, Debug, Default)]
struct Window {
    hour: i64,
    endpoints: BTreeMap<&'static str, Counts>,
    polls: u64,
    poll_charged: u64,
    poll_requests: u64,
    /// Per target (`owner/repo` or `org`).
    targets: BTreeMap<String, PollCost>,
    /// Seconds of fast-poll windows opened in this hour (each counted in full when opened).
    fast_secs: u64,
}

impl Window {
    fn totals(&self) -> Counts {
        self.endpoints.values().fold(Counts::default(), |mut a, c| {
            a.charged += c.charged;
            a.free += c.free;
            a.errors += c.errors;
            a
        })
    }
}

#[derive(Default)]
struct MeterInner {
    current: Window,
    previous: Option<Window>,
    /// Counts per minute (minute number since the epoch), the last [`MINUTES_KEPT`]: the
    /// rolling "last hour" `status` shows (the windows above are clock hours, for planning).
    minutes: std::collections::VecDeque<(i64, Counts)>,
    rate: Option<RateLimit>,
    minute: i64,
    minute_points: BTreeMap<&'static str, u64>,
    /// End of the fast-poll window opened by the last demand seen.
    fast_until: Option<DateTime<Utc>>,
}

/// Minutes of per-minute counts kept for the rolling hour.
const MINUTES_KEPT: i64 = 60;

/// Counts every request by hour window and endpoint. Cheap; shared by clones
/// of the client through an `Arc`.
#[derive(Default)]
pub struct BudgetMeter {
    inner: Mutex<MeterInner>,
}

/// Points a request costs against the secondary limit (GET 1, mutations 5).
pub(crate) fn points(method: &http::Method) -> u64 {
    if matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    ) {
        1
    } else {
        5
    }
}

impl BudgetMeter {
    fn with<R>(&self, now: DateTime<Utc>, f: impl FnOnce(&mut MeterInner) -> R) -> R {
        let mut g = match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let hour = now.timestamp().div_euclid(3600);
        if g.current.hour != hour {
            let old = std::mem::take(&mut g.current);
            if old.hour == hour - 1 {
                g.previous = Some(old);
            } else if old.hour != 0 {
                g.previous = None;
            }
            g.current.hour = hour;
            // A window reaching into the new hour is charged to it too, so no hour ever holds
            // more than `FAST_SECS_PER_HOUR` of fast polling.
            if let Some(until) = g.fast_until {
                let left = until.timestamp() - hour * 3600;
                g.current.fast_secs = u64::try_from(left).unwrap_or(0).min(FAST_WINDOW.as_secs());
            }
        }
        let minute = now.timestamp().div_euclid(60);
        if g.minute != minute {
            g.minute = minute;
            g.minute_points.clear();
        }
        f(&mut g)
    }

    /// Records one response (or failure) of `endpoint`.
    pub fn record(
        &self,
        endpoint: &'static str,
        method: &http::Method,
        charge: Charge,
        headers: Option<&HeaderMap>,
    ) {
        let rate = headers.and_then(RateLimit::from_headers);
        self.record_at(Utc::now(), endpoint, method, charge, rate);
    }

    fn record_at(
        &self,
        now: DateTime<Utc>,
        endpoint: &'static str,
        method: &http::Method,
        charge: Charge,
        rate: Option<RateLimit>,
    ) {
        let minute = now.timestamp().div_euclid(60);
        self.with(now, |g| {
            g.current.endpoints.entry(endpoint).or_default().add(charge);
            match g.minutes.back_mut() {
                Some((m, counts)) if *m == minute => counts.add(charge),
                _ => {
                    let mut counts = Counts::default();
                    counts.add(charge);
                    g.minutes.push_back((minute, counts));
                }
            }
            while g
                .minutes
                .front()
                .is_some_and(|(m, _)| *m <= minute - MINUTES_KEPT)
            {
                g.minutes.pop_front();
            }
            *g.minute_points.entry(endpoint).or_default() += points(method);
            if let Some(rate) = rate {
                g.rate = Some(rate);
            }
        });
    }

    /// Records that a poll saw queued jobs: opens (or extends) a fast-poll window of
    /// `FAST_WINDOW` from `now`, as long as this hour's fast-poll allowance is not used up.
    /// The extension is counted against the allowance when granted, used or not.
    pub fn record_demand_at(&self, now: DateTime<Utc>) {
        self.with(now, |g| {
            let window = chrono::Duration::seconds(FAST_WINDOW.as_secs() as i64);
            let wanted_end = now + window;
            let open_from = match g.fast_until {
                Some(until) if until > now => until,
                _ => now,
            };
            let wanted = (wanted_end - open_from).num_seconds().max(0) as u64;
            let left = FAST_SECS_PER_HOUR
                .as_secs()
                .saturating_sub(g.current.fast_secs);
            let granted = wanted.min(left);
            if granted > 0 {
                g.current.fast_secs += granted;
                g.fast_until = Some(open_from + chrono::Duration::seconds(granted as i64));
            }
        });
    }

    /// Records one demand poll of `target` and what it cost.
    pub fn record_poll(&self, target: &str, charged: u64, requests: u64) {
        self.with(Utc::now(), |g| {
            g.current.polls += 1;
            g.current.poll_charged += charged;
            g.current.poll_requests += requests;
            let t = g.current.targets.entry(target.to_string()).or_default();
            t.polls += 1;
            t.charged += charged;
        });
    }

    /// A consistent copy for `status` and for the planner.
    pub fn snapshot(&self) -> BudgetSnapshot {
        self.snapshot_at(Utc::now())
    }

    /// [`Self::snapshot`] as of `now`.
    pub fn snapshot_at(&self, now: DateTime<Utc>) -> BudgetSnapshot {
        self.with(now, |g| {
            let mut polls = g.current.polls;
            let mut charged = g.current.poll_charged;
            let mut requests = g.current.poll_requests;
            if let Some(p) = &g.previous {
                polls += p.polls;
                charged += p.poll_charged;
                requests += p.poll_requests;
            }
            let mut per_target: BTreeMap<String, PollCost> = g.current.targets.clone();
            if let Some(p) = &g.previous {
                for (t, c) in &p.targets {
                    let e = per_target.entry(t.clone()).or_default();
                    e.polls += c.polls;
                    e.charged += c.charged;
                }
            }
            let overall = smoothed(charged, polls, PRIOR_CHARGED_PER_POLL);
            let targets = per_target
                .into_iter()
                .map(|(target, c)| TargetPollCost {
                    target,
                    polls: c.polls,
                    // A target's own polls, with the host's average as the prior.
                    charged_per_poll: smoothed(c.charged, c.polls, overall),
                })
                .collect();
            let minute = now.timestamp().div_euclid(60);
            let last_hour = g
                .minutes
                .iter()
                .filter(|(m, _)| *m > minute - MINUTES_KEPT && *m <= minute)
                .fold(Counts::default(), |mut a, (_, c)| {
                    a.charged += c.charged;
                    a.free += c.free;
                    a.errors += c.errors;
                    a
                });
            let endpoints = g
                .current
                .endpoints
                .iter()
                .map(|(name, c)| EndpointUsage {
                    endpoint: (*name).to_string(),
                    counts: *c,
                    points_this_minute: g.minute_points.get(name).copied().unwrap_or(0),
                })
                .collect();
            BudgetSnapshot {
                window_start: Utc
                    .timestamp_opt(g.current.hour * 3600, 0)
                    .single()
                    .unwrap_or(now),
                totals: g.current.totals(),
                last_hour,
                previous_window: g.previous.as_ref().map(Window::totals),
                endpoints,
                polls: g.current.polls,
                charged_per_poll: overall,
                targets,
                requests_per_poll: smoothed(requests, polls, PRIOR_REQUESTS_PER_POLL)
                    .max(MIN_REQUESTS_PER_POLL),
                rate: g.rate.clone(),
                fast_poll: g.fast_until.is_some_and(|until| until > now),
                fast_secs_this_hour: g.current.fast_secs,
            }
        })
    }
}

/// Before anything is measured, assume a busy target: measured, a poll of a target with a
/// stream of jobs costs ~1.5 charged requests (an idle one ~0: its polls are 304s).
const PRIOR_CHARGED_PER_POLL: f64 = 1.5;
const PRIOR_REQUESTS_PER_POLL: f64 = 2.0;
/// An idle poll is still two GETs (queued and in_progress runs).
const MIN_REQUESTS_PER_POLL: f64 = 2.0;
/// Weight of the prior, in polls: a handful of real polls outweigh it.
const PRIOR_WEIGHT: f64 = 4.0;

fn smoothed(sum: u64, n: u64, prior: f64) -> f64 {
    (sum as f64 + prior * PRIOR_WEIGHT) / (n as f64 + PRIOR_WEIGHT)
}

/// How long polling stays at the fast interval after a poll saw queued jobs: the next jobs of
/// a burst (matrix runs, a push starting several workflows, follow-up jobs) are picked up fast.
pub const FAST_WINDOW: Duration = Duration::from_secs(30);
/// Fast-poll windows are bounded to this much per hour (less when the budget's fast share
/// pays for less); the planned interval is lengthened so that even these windows at
/// worst-case cost keep the hour under its budget.
pub const FAST_SECS_PER_HOUR: Duration = Duration::from_secs(300);
/// Share of the hourly budget reserved for fast-poll windows.
const FAST_BUDGET_SHARE: f64 = 0.25;

/// Usage of one endpoint in the current window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EndpointUsage {
    /// Endpoint name, e.g. `runs.list`.
    pub endpoint: String,
    /// Counts this hour.
    pub counts: Counts,
    /// Secondary-limit points spent this minute.
    pub points_this_minute: u64,
}

/// What one target's demand polls cost (this and the last clock hour).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TargetPollCost {
    /// `owner/repo` or `org`.
    pub target: String,
    pub polls: u64,
    /// Charged requests per poll, smoothed towards the host's average.
    pub charged_per_poll: f64,
}

/// What `status` shows about the budget.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BudgetSnapshot {
    /// Start of the current hour window (UTC, aligned to the hour).
    pub window_start: DateTime<Utc>,
    /// Totals this window.
    pub totals: Counts,
    /// Totals of the last 60 minutes (rolling, by the minute).
    pub last_hour: Counts,
    /// Totals of the previous hour, if it was observed.
    pub previous_window: Option<Counts>,
    /// Per endpoint, this window.
    pub endpoints: Vec<EndpointUsage>,
    /// Demand polls this window.
    pub polls: u64,
    /// Measured charged requests per poll (smoothed, over this and the last window).
    pub charged_per_poll: f64,
    /// Measured requests (charged or not) per poll.
    pub requests_per_poll: f64,
    /// Per target polled (this and the last window).
    pub targets: Vec<TargetPollCost>,
    /// What GitHub last reported.
    pub rate: Option<RateLimit>,
    /// A fast-poll window is open (queued jobs were seen less than `FAST_WINDOW` ago).
    pub fast_poll: bool,
    /// Seconds of fast-poll windows granted this hour (at most `FAST_SECS_PER_HOUR`).
    pub fast_secs_this_hour: u64,
}

impl BudgetSnapshot {
    /// Requests of any kind this window.
    pub fn requests(&self) -> u64 {
        self.totals.total()
    }
}

/// Chooses how often each target is polled.
#[derive(Clone, Debug, PartialEq)]
pub struct Planner {
    /// Never poll a target more often than this.
    pub floor: Duration,
    /// Never poll a target less often than this (demand must still be seen).
    pub ceiling: Duration,
    /// Share of the primary hourly limit that planned polling may use.
    pub primary_share: f64,
    /// Secondary-limit points per minute planned polling may use (GitHub allows 900 per endpoint).
    pub secondary_points_per_minute: f64,
    /// Measured charged requests per poll.
    pub charged_per_poll: f64,
    /// Measured requests per poll (304s included: they still count for secondary limits).
    pub requests_per_poll: f64,
    /// At most this much fast-poll time per hour (zero: no fast polling). The plan may allow
    /// less: the time a quarter of the budget pays for at the worst-case cost.
    pub fast_secs_per_hour: Duration,
    /// Fast-poll window time already granted this hour (the open window counted in full).
    pub fast_secs_used: u64,
    /// A fast-poll window is open now: poll at the fast interval if the budget has room.
    pub fast_poll: bool,
}

impl Default for Planner {
    fn default() -> Self {
        Self {
            // Idle polls are free 304s against the hourly limit; what bounds a short interval is
            // the secondary limit, which `plan` keeps under `secondary_points_per_minute` by
            // lengthening the interval as targets are added. 1 s keeps pickup p50 under 1.5 s.
            floor: Duration::from_secs(1),
            ceiling: Duration::from_secs(300),
            primary_share: 0.5,
            secondary_points_per_minute: 600.0,
            charged_per_poll: PRIOR_CHARGED_PER_POLL,
            requests_per_poll: PRIOR_REQUESTS_PER_POLL,
            fast_secs_per_hour: FAST_SECS_PER_HOUR,
            fast_secs_used: 0,
            fast_poll: false,
        }
    }
}

/// A poll interval and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PollPlan {
    /// Interval between two polls of the same target (the fast one while a fast-poll window
    /// is open).
    pub interval: Duration,
    /// The interval outside fast-poll windows, which `charged_per_hour` is planned at.
    pub planned_interval: Duration,
    /// Charged requests per hour this plan expects (all targets).
    pub charged_per_hour: f64,
    /// Secondary points per minute this plan expects (all targets, GETs).
    pub points_per_minute: f64,
    /// False when even the ceiling interval exceeds the budget (too many targets).
    pub within_budget: bool,
    /// The interval while a fast-poll window is open (`None`: the budget has no room for one).
    pub fast_interval: Option<Duration>,
    /// Fast-poll time per hour the reserve pays for.
    pub fast_secs_allowed: f64,
    /// The budget set aside for fast-poll windows (charged per hour, all targets, worst case).
    pub fast_reserve_per_hour: f64,
}

impl Planner {
    /// A planner using measured per-poll costs.
    pub fn from_snapshot(s: &BudgetSnapshot) -> Self {
        Self {
            charged_per_poll: s.charged_per_poll,
            requests_per_poll: s.requests_per_poll,
            fast_poll: s.fast_poll,
            fast_secs_used: s.fast_secs_this_hour,
            ..Self::default()
        }
    }

    /// What each of `targets` is planned to cost per hour (charged requests) at the planned
    /// interval for that many targets: its own measured cost per poll (the host's average
    /// for a target not polled yet) times the polls of an hour. Fast-poll windows come on top,
    /// within the share of the budget reserved for them.
    pub fn planned_per_target(
        &self,
        targets: &[String],
        costs: &[TargetPollCost],
        limit: u64,
    ) -> Vec<(String, f64)> {
        let plan = self.plan(targets.len(), limit);
        let polls_per_hour = 3600.0 / plan.planned_interval.as_secs_f64().max(0.001);
        targets
            .iter()
            .map(|t| {
                let per_poll = costs
                    .iter()
                    .find(|c| &c.target == t)
                    .map_or(self.charged_per_poll, |c| c.charged_per_poll);
                (t.clone(), per_poll.max(0.0) * polls_per_hour)
            })
            .collect()
    }

    /// The interval for polling each of `targets` targets under an hourly `limit`.
    pub fn poll_interval(&self, targets: usize, limit: u64) -> Duration {
        self.plan(targets, limit).interval
    }

    /// The interval and the figures behind it.
    ///
    /// The hour's budget is split: a quarter is reserved for fast-poll windows (at the fastest
    /// interval the secondary limit allows, every request of every poll assumed charged; the
    /// window time it pays for, at most `fast_secs_per_hour`, is the hour's allowance, and once
    /// the windows granted this hour exceed it there is no more fast polling), and the planned
    /// interval is computed from the measured cost per poll against the rest — over the whole
    /// hour, although fast windows replace planned polls. Both parts together therefore stay
    /// within `primary_share` of the limit. When the allowance is under one fast window, or
    /// the planned interval is the fast one already, there is no fast polling.
    pub fn plan(&self, targets: usize, limit: u64) -> PollPlan {
        let n = targets.max(1) as f64;
        let budget_per_hour = (limit as f64 * self.primary_share).max(1.0);
        let floor = self.floor.as_secs_f64();
        let ceiling = self.ceiling.as_secs_f64();
        let requests = self.requests_per_poll.max(1.0);
        let charged = self.charged_per_poll.max(0.0);
        // n * requests * 60 / t <= points   =>  t >= n * requests * 60 / points
        let secondary = n * requests * 60.0 / self.secondary_points_per_minute.max(1.0);
        let fast = secondary.max(floor);
        let fast_cost_per_sec = n * requests.max(charged) / fast;
        let fast_secs_allowed = (budget_per_hour * FAST_BUDGET_SHARE / fast_cost_per_sec)
            .min(self.fast_secs_per_hour.as_secs_f64())
            .floor();
        let fast_fits = fast_secs_allowed >= FAST_WINDOW.as_secs_f64();
        let fast_reserve = fast_cost_per_sec * fast_secs_allowed;
        let planned_budget = if fast_fits {
            budget_per_hour - fast_reserve
        } else {
            budget_per_hour
        };
        // n * charged * 3600 / t <= budget  =>  t >= n * charged * 3600 / budget
        let primary = n * charged * 3600.0 / planned_budget;
        let wanted = primary.max(secondary);
        let secs = wanted.clamp(floor, ceiling);
        let within_budget = wanted <= ceiling;
        let fast_interval = (fast_fits && fast < secs).then(|| millis(fast));
        let allowance_left = (self.fast_secs_used as f64) <= fast_secs_allowed;
        let interval = match fast_interval {
            Some(fast) if self.fast_poll && allowance_left => fast,
            _ => millis(secs),
        };
        PollPlan {
            interval,
            planned_interval: millis(secs),
            charged_per_hour: n * charged * 3600.0 / secs,
            points_per_minute: n * requests * 60.0 / secs,
            within_budget,
            fast_interval,
            fast_secs_allowed: if fast_fits { fast_secs_allowed } else { 0.0 },
            fast_reserve_per_hour: if fast_fits { fast_reserve } else { 0.0 },
        }
    }
}

fn millis(secs: f64) -> Duration {
    Duration::from_millis((secs * 1000.0).ceil() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planner(charged: f64) -> Planner {
        Planner {
            charged_per_poll: charged,
            requests_per_poll: 2.0,
            ..Planner::default()
        }
    }

    #[test]
    fn idle_targets_poll_at_the_floor() {
        assert_eq!(planner(0.0).poll_interval(1, 5000), Duration::from_secs(1));
        // The floor is only reached while the secondary budget allows it: 1 idle target at 1 s
        // is 120 points/min; 5 targets are exactly the planned 600; 6 must poll slower.
        let one = planner(0.0).plan(1, 5000);
        assert!((one.points_per_minute - 120.0).abs() < 1e-6, "{one:?}");
        assert_eq!(planner(0.0).poll_interval(5, 5000), Duration::from_secs(1));
        let six = planner(0.0).plan(6, 5000);
        assert!(six.interval > Duration::from_secs(1), "{six:?}");
        assert!(six.points_per_minute <= 600.0 + 1e-6, "{six:?}");
    }

    #[test]
    fn many_targets_stay_under_half_the_primary_and_the_secondary_limit() {
        for targets in [1usize, 10, 100, 150] {
            for charged in [0.0, 0.1, 0.5, 2.0] {
                let p = planner(charged).plan(targets, 5000);
                if p.within_budget {
                    assert!(
                        p.charged_per_hour + p.fast_reserve_per_hour <= 2500.0 + 1e-6,
                        "{targets} {charged} {p:?}"
                    );
                    assert!(p.points_per_minute <= 600.0 + 1e-6, "{p:?}");
                }
            }
        }
        // 100 idle targets: secondary bound 100*2*60/600 = 20 s.
        assert_eq!(
            planner(0.0).poll_interval(100, 5000),
            Duration::from_secs(20)
        );
    }

    #[test]
    fn busier_polls_lengthen_the_interval_and_cap_at_ceiling() {
        let idle = planner(0.0).poll_interval(50, 5000);
        let busy = planner(2.0).poll_interval(50, 5000);
        assert!(busy > idle);
        let p = planner(10.0).plan(1000, 5000);
        assert_eq!(p.interval, Duration::from_secs(300));
        assert!(!p.within_budget);
    }

    #[test]
    fn a_fast_window_polls_one_busy_target_at_the_floor() {
        let mut p = planner(1.5);
        let planned = p.plan(1, 5000);
        // 2500/h budget, 600 reserved for 300 s of fast polls (2 requests/s, all charged):
        // planned 1.5 * 3600 / 1900 = 2.84 s.
        assert_eq!(planned.interval, Duration::from_millis(2843));
        assert_eq!(planned.fast_interval, Some(Duration::from_secs(1)));
        assert!((planned.fast_reserve_per_hour - 600.0).abs() < 1e-6);
        p.fast_poll = true;
        assert_eq!(p.poll_interval(1, 5000), Duration::from_secs(1));
        // Used up: back to the planned interval.
        p.fast_secs_used = 301;
        assert_eq!(p.poll_interval(1, 5000), planned.interval);
        // Many targets: the secondary limit sets the fast interval (100 targets: 20 s), and
        // the allowance shrinks (a quarter of 2,500 at 10 charged/s: 62 s).
        let hundred = planner(1.5).plan(100, 5000);
        assert_eq!(hundred.fast_interval, Some(Duration::from_secs(20)));
        assert_eq!(hundred.fast_secs_allowed, 62.0);
        assert!(hundred.charged_per_hour + hundred.fast_reserve_per_hour <= 2500.0);
    }

    /// An hour with a job queued every 2 s on one target: polls follow the plan (fast while a
    /// window is open), every poll is charged at the worst case of both lists while fast and at
    /// the measured 1.5 otherwise. The hour stays under half the 5,000 limit.
    #[test]
    fn fast_windows_keep_a_continuously_busy_hour_under_half_the_limit() {
        let cases = [
            (5000u64, 1usize, 2.0),
            (5000, 1, 3.0),
            (5000, 2, 2.0),
            (15000, 1, 2.0),
        ];
        for (limit, targets, requests) in cases {
            let meter = BudgetMeter::default();
            let start = Utc.timestamp_opt(1_900_000_000 / 3600 * 3600, 0).unwrap();
            let mut t = start;
            let end = start + chrono::Duration::hours(1);
            let (mut charged, mut fast_polls) = (0.0f64, 0u64);
            while t < end {
                let snap = meter.snapshot_at(t);
                let p = Planner {
                    charged_per_poll: 1.5,
                    requests_per_poll: requests,
                    fast_poll: snap.fast_poll,
                    fast_secs_used: snap.fast_secs_this_hour,
                    ..Planner::default()
                };
                let plan = p.plan(targets, limit);
                // The fast interval is shorter than the planned one whenever there is one.
                let fast = plan.fast_interval == Some(plan.interval);
                // Each poll is counted at the end of the interval it was planned with (one
                // hour holds 3600 / interval of them).
                t += chrono::Duration::milliseconds(plan.interval.as_millis() as i64);
                if t >= end {
                    break;
                }
                charged += targets as f64 * if fast { requests } else { 1.5 };
                fast_polls += u64::from(fast);
                meter.record_demand_at(t);
            }
            let budget = limit as f64 / 2.0;
            assert!(charged <= budget, "{limit} {targets}: {charged} > {budget}");
            let plan = Planner {
                charged_per_poll: 1.5,
                requests_per_poll: requests,
                ..Planner::default()
            }
            .plan(targets, limit);
            let room = plan.fast_interval.is_some();
            assert_eq!(fast_polls > 0, room, "{limit} {targets}: fast iff room");
            // Fast polls only within the hour's allowance (one per second at the 1 s floor).
            assert!(
                fast_polls as f64 <= plan.fast_secs_allowed + 1.0,
                "{plan:?}"
            );
            // One target under 15,000/h polls at the floor already: a fast window adds nothing.
            assert_eq!(room, (limit, targets) != (15000, 1), "{limit} {targets}");
            let snap = meter.snapshot_at(end - chrono::Duration::seconds(1));
            assert!(snap.fast_secs_this_hour <= FAST_SECS_PER_HOUR.as_secs());
        }
    }

    #[test]
    fn fast_windows_are_bounded_per_hour_and_end_after_the_window() {
        let meter = BudgetMeter::default();
        let start = Utc.timestamp_opt(1_900_000_000 / 3600 * 3600, 0).unwrap();
        meter.record_demand_at(start);
        assert!(
            meter
                .snapshot_at(start + chrono::Duration::seconds(29))
                .fast_poll
        );
        assert!(
            !meter
                .snapshot_at(start + chrono::Duration::seconds(31))
                .fast_poll
        );
        // Demand every 10 s for 20 minutes: only 300 s of windows are granted.
        for i in 0..120 {
            meter.record_demand_at(start + chrono::Duration::seconds(60 + i * 10));
        }
        let at = start + chrono::Duration::seconds(60 + 119 * 10);
        let snap = meter.snapshot_at(at);
        assert_eq!(snap.fast_secs_this_hour, 300);
        assert!(!snap.fast_poll);
        // The next hour has a fresh allowance.
        let next = start + chrono::Duration::hours(1) + chrono::Duration::seconds(5);
        meter.record_demand_at(next);
        assert!(meter.snapshot_at(next).fast_poll);
    }

    #[test]
    fn meter_counts_charged_free_and_errors_per_endpoint() {
        let m = BudgetMeter::default();
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-limit", "5000".parse().unwrap());
        h.insert("x-ratelimit-remaining", "4990".parse().unwrap());
        h.insert("x-ratelimit-used", "10".parse().unwrap());
        h.insert("x-ratelimit-reset", "1900000000".parse().unwrap());
        m.record("runs.list", &http::Method::GET, Charge::Charged, Some(&h));
        m.record("runs.list", &http::Method::GET, Charge::Free, None);
        m.record("jit", &http::Method::POST, Charge::Error, None);
        m.record_poll("o/r", 1, 2);
        let s = m.snapshot();
        assert_eq!(
            s.totals,
            Counts {
                charged: 1,
                free: 1,
                errors: 1
            }
        );
        let runs = s
            .endpoints
            .iter()
            .find(|e| e.endpoint == "runs.list")
            .unwrap();
        assert_eq!(runs.counts.free, 1);
        assert_eq!(runs.points_this_minute, 2);
        let jit = s.endpoints.iter().find(|e| e.endpoint == "jit").unwrap();
        assert_eq!(jit.points_this_minute, 5);
        let rate = s.rate.unwrap();
        assert_eq!((rate.limit, rate.remaining, rate.used), (5000, 4990, 10));
        assert_eq!(s.polls, 1);
        // smoothed towards the prior of 1.5 but below it
        assert!(s.charged_per_poll < 1.5 && s.charged_per_poll > 1.0);
        assert_eq!(s.last_hour, s.totals);
        assert_eq!(s.targets.len(), 1);
        assert_eq!(
            (s.targets[0].target.as_str(), s.targets[0].polls),
            ("o/r", 1)
        );
    }

    #[test]
    fn the_last_hour_rolls_by_the_minute_across_clock_hours() {
        let m = BudgetMeter::default();
        let hour = Utc.timestamp_opt(1_900_000_000 / 3600 * 3600, 0).unwrap();
        let at = |mins: i64| hour + chrono::Duration::minutes(mins);
        let get = http::Method::GET;
        m.record_at(at(-50), "runs.list", &get, Charge::Charged, None);
        m.record_at(at(-10), "runs.list", &get, Charge::Free, None);
        m.record_at(at(-10), "runs.list", &get, Charge::Free, None);
        m.record_at(at(5), "jit", &http::Method::POST, Charge::Error, None);
        // 5 past the hour: all four are within the last 60 minutes, only one in this window.
        let s = m.snapshot_at(at(5));
        assert_eq!(
            (s.last_hour.charged, s.last_hour.free, s.last_hour.errors),
            (1, 2, 1)
        );
        assert_eq!(s.totals.total(), 1);
        // 15 past: the charged one (at -50) has rolled out.
        let s = m.snapshot_at(at(15));
        assert_eq!(
            (s.last_hour.charged, s.last_hour.free, s.last_hour.errors),
            (0, 2, 1)
        );
        // Long after: nothing.
        assert_eq!(m.snapshot_at(at(200)).last_hour, Counts::default());
    }

    #[test]
    fn planned_spend_per_target_follows_each_targets_own_cost() {
        let m = BudgetMeter::default();
        for _ in 0..40 {
            m.record_poll("octo/app", 0, 2);
            m.record_poll("acme", 2, 6);
        }
        let s = m.snapshot();
        let planner = Planner::from_snapshot(&s);
        let names = vec![
            "octo/app".to_string(),
            "acme".to_string(),
            "new/one".to_string(),
        ];
        let spend = planner.planned_per_target(&names, &s.targets, 5000);
        let plan = planner.plan(3, 5000);
        let per_hour = 3600.0 / plan.planned_interval.as_secs_f64();
        let of = |n: &str| spend.iter().find(|(t, _)| t == n).unwrap().1;
        assert!(of("octo/app") < of("acme"), "{spend:?}");
        // Each target's own smoothed cost per poll times the polls of an hour.
        let acme = s.targets.iter().find(|t| t.target == "acme").unwrap();
        assert!((of("acme") - acme.charged_per_poll * per_hour).abs() < 1e-6);
        // A target not polled yet is planned at the host's average.
        assert!((of("new/one") - s.charged_per_poll * per_hour).abs() < 1e-6);
        // Together: what the plan expects for all targets, within rounding of the average.
        let sum: f64 = spend.iter().map(|(_, v)| v).sum();
        assert!(sum <= 2500.0 + 1e-6, "{sum}");
    }
}
