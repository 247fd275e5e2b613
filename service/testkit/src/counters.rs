//! Request counters, per endpoint name, so tests can assert how many calls a client made and
//! how many were charged against the rate limit.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Counts for one endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointCounters {
    /// Every request that reached the endpoint (including faults and errors).
    pub requests: u64,
    /// Requests charged against the primary rate limit.
    pub charged: u64,
    /// 304 Not Modified answers (never charged).
    pub not_modified: u64,
    /// Answers with status >= 400 or a dropped/stalled connection.
    pub errors: u64,
}

/// Snapshot of all counters. Endpoint names are listed in the crate README.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub endpoints: BTreeMap<String, EndpointCounters>,
    pub total: EndpointCounters,
    /// Every REST and OAuth request's `User-Agent` header lines (in the order sent, joined with `\n`: a
    /// header value cannot hold a newline) → how many requests sent exactly those. A client
    /// that sends two User-Agent lines shows up as `ours\nsomeone-else`; one that sends none
    /// as the empty string.
    #[serde(default)]
    pub user_agents: BTreeMap<String, u64>,
    /// The same for the package download host (`/_downloads/...`).
    #[serde(default)]
    pub download_user_agents: BTreeMap<String, u64>,
}

impl Counters {
    /// Counts for `name` (zeros if never called).
    pub fn endpoint(&self, name: &str) -> EndpointCounters {
        self.endpoints.get(name).copied().unwrap_or_default()
    }

    /// Notes the User-Agent lines of one REST or OAuth request.
    pub(crate) fn record_user_agents<'a>(&mut self, lines: impl Iterator<Item = &'a str>) {
        let key = lines.collect::<Vec<_>>().join("\n");
        *self.user_agents.entry(key).or_default() += 1;
    }

    /// Notes the User-Agent lines of one package download.
    pub(crate) fn record_download_user_agents<'a>(&mut self, lines: impl Iterator<Item = &'a str>) {
        let key = lines.collect::<Vec<_>>().join("\n");
        *self.download_user_agents.entry(key).or_default() += 1;
    }

    pub(crate) fn record(&mut self, name: &str, status: u16, charged: bool) {
        let e = self.endpoints.entry(name.to_string()).or_default();
        for c in [e, &mut self.total] {
            c.requests += 1;
            if charged {
                c.charged += 1;
            }
            if status == 304 {
                c.not_modified += 1;
            }
            if status >= 400 || status == 0 {
                c.errors += 1;
            }
        }
    }
}
