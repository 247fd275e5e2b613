//! Registrations GitHub refused to delete for runners that ended (it still counts them busy
//! for minutes after a crash). The agent retries each DELETE with back-off and then gives up;
//! this keeps what it said for `status`, so a registration left at GitHub is never silent.

use rm_agent::{AgentEvent, EventKind};
use rm_proto::{LeftRegistration, UnixMillis};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A given-up entry is shown this long (GitHub removes the registration itself by then).
const SHOW_GIVEN_UP_MS: i64 = 60 * 60 * 1000;

#[derive(Default)]
pub struct LeftRegistrations {
    by_runner: Mutex<BTreeMap<String, LeftRegistration>>,
}

impl LeftRegistrations {
    fn entries(&self) -> MutexGuard<'_, BTreeMap<String, LeftRegistration>> {
        self.by_runner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Learns from one agent event; true when the list changed.
    pub fn on_event(&self, event: &AgentEvent) -> bool {
        let at = event.at.as_millis();
        let mut entries = self.entries();
        entries.retain(|_, e| e.next_try_at.is_some() || at - e.since.0 < SHOW_GIVEN_UP_MS);
        match &event.kind {
            EventKind::DeregisterRefused {
                attempt,
                retry_in,
                refusals,
            } => {
                let name = attempt.runner_name();
                let since = entries.get(&name).map_or(UnixMillis(at), |e| e.since);
                let next_try_at = retry_in.map(|d| {
                    UnixMillis(at.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
                });
                entries.insert(
                    name.clone(),
                    LeftRegistration {
                        target: event.target.to_string(),
                        runner_name: name,
                        refusals: *refusals,
                        next_try_at,
                        since,
                    },
                );
                true
            }
            EventKind::DeregisteredLate { attempt } => {
                entries.remove(&attempt.runner_name()).is_some()
            }
            _ => false,
        }
    }

    pub fn list(&self) -> Vec<LeftRegistration> {
        self.entries().values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rm_core::{AttemptId, Target, Timestamp};
    use std::time::Duration;

    fn event(at: i64, kind: EventKind) -> AgentEvent {
        AgentEvent {
            at: Timestamp::from_millis(at),
            target: "octo/app".parse::<Target>().unwrap(),
            kind,
        }
    }

    #[test]
    fn a_refused_removal_is_shown_until_it_is_done_or_given_up_for_an_hour() {
        let left = LeftRegistrations::default();
        let attempt = AttemptId::new("crashed001").unwrap();
        let refused = |at, retry_in, refusals| {
            event(
                at,
                EventKind::DeregisterRefused {
                    attempt: attempt.clone(),
                    retry_in,
                    refusals,
                },
            )
        };
        assert!(left.on_event(&refused(1_000, Some(Duration::from_secs(60)), 1)));
        let shown = left.list();
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0].runner_name, attempt.runner_name());
        assert_eq!(shown[0].next_try_at, Some(UnixMillis(61_000)));
        assert!(left.on_event(&refused(61_000, None, 2)));
        let shown = left.list();
        assert_eq!((shown[0].refusals, shown[0].next_try_at), (2, None));
        assert_eq!(shown[0].since, UnixMillis(1_000), "since the first refusal");
        // An hour after the first refusal, any event drops the given-up entry.
        left.on_event(&event(
            1_000 + SHOW_GIVEN_UP_MS,
            EventKind::Cleaned {
                attempt: AttemptId::new("another01").unwrap(),
            },
        ));
        assert!(left.list().is_empty());
        // A late success removes it at once.
        left.on_event(&refused(2, Some(Duration::from_secs(60)), 1));
        assert!(left.on_event(&event(
            3,
            EventKind::DeregisteredLate {
                attempt: attempt.clone()
            }
        )));
        assert!(left.list().is_empty());
    }
}
