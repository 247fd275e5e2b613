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

#[derive(Clone, Debug, Default)]
struct Window {
    hour: i64,
    endpoints: BTreeMap<&'static str, Counts>,
    polls: u64,
    poll_charged: u64,
    poll_requests: u64,
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
    rate: Option<RateLimit>,
    minute: i64,
    minute_points: BTreeMap<&'static str, u64>,
}

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
        self.with(Utc::now(), |g| {
            g.current.endpoints.entry(endpoint).or_default().add(charge);
            *g.minute_points.entry(endpoint).or_default() += points(method);
            if let Some(rate) = rate {
                g.rate = Some(rate);
            }
        });
    }

    /// Records one demand poll of one target and what it cost.
    pub fn record_poll(&self, charged: u64, requests: u64) {
        self.with(Utc::now(), |g| {
            g.current.polls += 1;
            g.current.poll_charged += charged;
            g.current.poll_requests += requests;
        });
    }

    /// A consistent copy for `status` and for the planner.
    pub fn snapshot(&self) -> BudgetSnapshot {
        self.with(Utc::now(), |g| {
            let mut polls = g.current.polls;
            let mut charged = g.current.poll_charged;
            let mut requests = g.current.poll_requests;
            if let Some(p) = &g.previous {
                polls += p.polls;
                charged += p.poll_charged;
                requests += p.poll_requests;
            }
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
                    .unwrap_or_else(Utc::now),
                totals: g.current.totals(),
                previous_window: g.previous.as_ref().map(Window::totals),
                endpoints,
                polls: g.current.polls,
                charged_per_poll: smoothed(charged, polls, PRIOR_CHARGED_PER_POLL),
                requests_per_poll: smoothed(requests, polls, PRIOR_REQUESTS_PER_POLL)
                    .max(MIN_REQUESTS_PER_POLL),
                rate: g.rate.clone(),
            }
        })
    }
}

/// Before anything is measured, assume a poll lists both run lists, charged.
const PRIOR_CHARGED_PER_POLL: f64 = 2.0;
const PRIOR_REQUESTS_PER_POLL: f64 = 2.0;
/// An idle poll is still two GETs (queued and in_progress runs).
const MIN_REQUESTS_PER_POLL: f64 = 2.0;
/// Weight of the prior, in polls: a handful of real polls outweigh it.
const PRIOR_WEIGHT: f64 = 4.0;

fn smoothed(sum: u64, n: u64, prior: f64) -> f64 {
    (sum as f64 + prior * PRIOR_WEIGHT) / (n as f64 + PRIOR_WEIGHT)
}

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

/// What `status` shows about the budget.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BudgetSnapshot {
    /// Start of the current hour window (UTC, aligned to the hour).
    pub window_start: DateTime<Utc>,
    /// Totals this window.
    pub totals: Counts,
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
    /// What GitHub last reported.
    pub rate: Option<RateLimit>,
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
        }
    }
}

/// A poll interval and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PollPlan {
    /// Interval between two polls of the same target.
    pub interval: Duration,
    /// Charged requests per hour this plan expects (all targets).
    pub charged_per_hour: f64,
    /// Secondary points per minute this plan expects (all targets, GETs).
    pub points_per_minute: f64,
    /// False when even the ceiling interval exceeds the budget (too many targets).
    pub within_budget: bool,
}

impl Planner {
    /// A planner using measured per-poll costs.
    pub fn from_snapshot(s: &BudgetSnapshot) -> Self {
        Self {
            charged_per_poll: s.charged_per_poll,
            requests_per_poll: s.requests_per_poll,
            ..Self::default()
        }
    }

    /// The interval for polling each of `targets` targets under an hourly `limit`.
    pub fn poll_interval(&self, targets: usize, limit: u64) -> Duration {
        self.plan(targets, limit).interval
    }

    /// The interval and the figures behind it.
    pub fn plan(&self, targets: usize, limit: u64) -> PollPlan {
        let n = targets.max(1) as f64;
        let budget_per_hour = (limit as f64 * self.primary_share).max(1.0);
        // n * charged * 3600 / t <= budget  =>  t >= n * charged * 3600 / budget
        let primary = n * self.charged_per_poll.max(0.0) * 3600.0 / budget_per_hour;
        // n * requests * 60 / t <= points   =>  t >= n * requests * 60 / points
        let secondary =
            n * self.requests_per_poll.max(1.0) * 60.0 / self.secondary_points_per_minute.max(1.0);
        let wanted = primary.max(secondary);
        let secs = wanted.clamp(self.floor.as_secs_f64(), self.ceiling.as_secs_f64());
        let within_budget = wanted <= self.ceiling.as_secs_f64();
        PollPlan {
            interval: Duration::from_millis((secs * 1000.0).ceil() as u64),
            charged_per_hour: n * self.charged_per_poll * 3600.0 / secs,
            points_per_minute: n * self.requests_per_poll * 60.0 / secs,
            within_budget,
        }
    }
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
                        p.charged_per_hour <= 2500.0 + 1e-6,
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
        m.record_poll(1, 2);
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
        // smoothed towards the prior of 2.0 but below it
        assert!(s.charged_per_poll < 2.0 && s.charged_per_poll > 1.0);
    }
}
