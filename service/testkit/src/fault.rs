//! Fault injection: rules that make chosen endpoints misbehave the ways GitHub does.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which requests a fault applies to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndpointMatch {
    /// Every request except the control API.
    Any,
    /// An endpoint name as reported in [`crate::Counters`] (e.g. `repo_runners_list`).
    Name(String),
    /// A method (None = any) and a path pattern without the `/api/v3` prefix, `*` matching one
    /// segment and a trailing `/**` any rest, e.g. `/repos/*/*/actions/runners`.
    Route {
        method: Option<String>,
        path: String,
    },
}

impl EndpointMatch {
    /// Match by endpoint name.
    pub fn name(name: &str) -> EndpointMatch {
        EndpointMatch::Name(name.to_string())
    }

    /// Match by method and path pattern.
    pub fn route(method: &str, path: &str) -> EndpointMatch {
        EndpointMatch::Route {
            method: Some(method.to_ascii_uppercase()),
            path: path.to_string(),
        }
    }

    pub(crate) fn matches(&self, method: &str, path: &str, endpoint: &str) -> bool {
        match self {
            EndpointMatch::Any => true,
            EndpointMatch::Name(n) => n == endpoint,
            EndpointMatch::Route { method: m, path: p } => {
                m.as_deref().is_none_or(|m| m.eq_ignore_ascii_case(method)) && path_matches(p, path)
            }
        }
    }
}

fn path_matches(pattern: &str, path: &str) -> bool {
    let pat: Vec<&str> = pattern.trim_matches('/').split('/').collect();
    let got: Vec<&str> = path.trim_matches('/').split('/').collect();
    for (i, p) in pat.iter().enumerate() {
        if *p == "**" {
            return true;
        }
        match got.get(i) {
            Some(g) if *p == "*" || p == g => {}
            _ => return false,
        }
    }
    pat.len() == got.len()
}

/// How a matched request misbehaves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// Answer `status` (500/502/503/504) with a GitHub error body, with probability `rate`
    /// (0.0–1.0; 1.0 = always).
    Status5xx { status: u16, rate: f64 },
    /// Delay the answer, then answer normally.
    #[serde(with = "ms")]
    Latency(Duration),
    /// Answer 401 "Bad credentials" as if the token had been revoked.
    Unauthorized,
    /// Answer 403 or 429 as a rate limit: primary (`x-ratelimit-remaining: 0`, "API rate limit
    /// exceeded for user ID N.") or secondary ("You have exceeded a secondary rate limit…"),
    /// with `retry-after` when given.
    RateLimited {
        status: u16,
        retry_after: Option<u64>,
        secondary: bool,
    },
    /// Refuse as GitHub does for a permanent reason: `status` (403, 404, 422…) with a GitHub
    /// error body carrying `message` (e.g. 403 "Resource not accessible by integration").
    Refuse { status: u16, message: String },
    /// Answer 200 with a truncated JSON body.
    MalformedJson,
    /// Abort the connection without a complete answer (the body stream fails, so hyper drops
    /// the connection; usually before any byte of the answer is sent).
    DropConnection,
    /// Never answer (until the fake shuts down); clients must time out.
    Stall,
}

/// A fault and where/how often it applies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultRule {
    pub endpoint: EndpointMatch,
    pub fault: Fault,
    /// How many requests it hits before it disarms; None = until `clear_faults`.
    #[serde(default)]
    pub times: Option<u32>,
}

impl FaultRule {
    /// A rule that applies until cleared.
    pub fn always(endpoint: EndpointMatch, fault: Fault) -> FaultRule {
        FaultRule {
            endpoint,
            fault,
            times: None,
        }
    }

    /// A rule that applies to the next `times` matching requests.
    pub fn times(endpoint: EndpointMatch, fault: Fault, times: u32) -> FaultRule {
        FaultRule {
            endpoint,
            fault,
            times: Some(times),
        }
    }

    /// Why this rule cannot do what it says, if it cannot: the control API refuses such rules
    /// rather than injecting something else (a 200 "error", a rule that never or always fires).
    pub fn problem(&self) -> Option<String> {
        if self.times == Some(0) {
            return Some("times must be at least 1 (omit it for a rule that stays armed)".into());
        }
        match &self.fault {
            Fault::Status5xx { status, .. } if !(500..=599).contains(status) => Some(format!(
                "status5xx status {status} is not a 5xx code: use 500, 502, 503 or 504"
            )),
            Fault::Status5xx { rate, .. } if !(0.0..=1.0).contains(rate) => Some(format!(
                "status5xx rate {rate} is outside 0.0-1.0: use a probability (1.0 = always)"
            )),
            Fault::RateLimited { status, .. } if *status != 403 && *status != 429 => Some(format!(
                "rate_limited status {status} is neither 403 nor 429: GitHub answers one of those"
            )),
            _ => None,
        }
    }
}

mod ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_patterns_match_segments() {
        let m = EndpointMatch::route("get", "/repos/*/*/actions/runs");
        assert!(m.matches("GET", "/repos/o/r/actions/runs", "workflow_runs"));
        assert!(!m.matches("POST", "/repos/o/r/actions/runs", "workflow_runs"));
        assert!(!m.matches("GET", "/repos/o/r/actions/runs/1", "workflow_run"));
        let any_below = EndpointMatch::Route {
            method: None,
            path: "/_broker/**".into(),
        };
        assert!(any_below.matches("DELETE", "/_broker/sessions/x", "broker"));
        assert!(!any_below.matches("GET", "/user", "user"));
        assert!(EndpointMatch::name("user").matches("GET", "/anything", "user"));
    }

    #[test]
    fn rules_round_trip_through_json() {
        let rule = FaultRule::times(
            EndpointMatch::Any,
            Fault::RateLimited {
                status: 429,
                retry_after: Some(3),
                secondary: true,
            },
            2,
        );
        let text = serde_json::to_string(&rule).unwrap();
        assert_eq!(serde_json::from_str::<FaultRule>(&text).unwrap(), rule);
        let latency: Fault = serde_json::from_str(r#"{"latency":250}"#).unwrap();
        assert_eq!(latency, Fault::Latency(Duration::from_millis(250)));
    }
}
