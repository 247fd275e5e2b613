//! The engine's use cases, one method each: what the local API's handler calls (and, for
//! the target rules, what `--offline` will call). A change is validated, written to the
//! journal, then the loops are woken and the status published; the loops' next pass carries
//! it out.

mod auth;
mod caches;
mod host;
mod targets;

use crate::changes::Changed;
use crate::engine::Engine;
use crate::status;
use crate::wire::journal_error;
use crate::MAX_CAPACITY;
use rm_core::Policy;
use rm_proto::{ApiError, DoctorReport, PauseState, Peer, Status, TargetStatus, WatchStart};

pub(crate) fn bad(what: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(what.to_string())
}

pub(crate) fn check_capacity(n: u32, field: &str, min: u32) -> Result<(), ApiError> {
    if n < min || n > MAX_CAPACITY {
        return Err(bad(format!(
            "{field} {n} is out of range: give {min}..={MAX_CAPACITY}"
        )));
    }
    Ok(())
}

impl Engine {
    pub(crate) async fn host(&self) -> Result<rm_core::Host, ApiError> {
        self.daemon
            .journal
            .with(|j| j.get_host())
            .await
            .map_err(journal_error)?
            .map(|r| r.host)
            .ok_or_else(|| {
                ApiError::service_unavailable("the host row is missing: restart the service")
            })
    }

    pub(crate) async fn policies(&self) -> Result<Vec<Policy>, ApiError> {
        self.daemon
            .journal
            .with(|j| j.list_policies())
            .await
            .map_err(journal_error)
    }

    pub async fn status(&self) -> Result<Status, ApiError> {
        status::build(&self.daemon).await
    }

    pub async fn watch(&self) -> Result<WatchStart, ApiError> {
        // Subscribe first: a change between the two is seen twice rather than missed.
        let events = self.daemon.watchers.subscribe();
        let snapshot = status::build(&self.daemon).await?;
        Ok(WatchStart { snapshot, events })
    }

    pub async fn targets(&self) -> Result<Vec<TargetStatus>, ApiError> {
        Ok(status::build(&self.daemon).await?.targets)
    }

    pub async fn host_doctor(&self) -> Result<DoctorReport, ApiError> {
        let report = self
            .daemon
            .doctor
            .run(&self.daemon.client, &self.daemon.journal)
            .await;
        self.daemon.after(Changed::Shown).await;
        Ok(report)
    }

    pub async fn pool(&self) -> Result<rm_proto::PoolStatus, ApiError> {
        self.daemon.pool.status().ok_or_else(|| {
            ApiError::not_found("this host is in no pool (`runner-manager pool join` joins one)")
        })
    }

    pub async fn join_pool(
        &self,
        join: rm_proto::PoolJoin,
    ) -> Result<rm_proto::PoolStatus, ApiError> {
        // The pool hears this host's room at once: joining is its first heartbeat.
        let room = crate::pool_tasks::room(&self.daemon).await;
        let joined = self
            .daemon
            .pool
            .join(&self.daemon.journal, join, room)
            .await?;
        self.daemon.after(Changed::Loops).await;
        Ok(joined)
    }

    pub async fn leave_pool(&self) -> Result<(), ApiError> {
        self.daemon.pool.leave(&self.daemon.journal).await?;
        self.daemon.after(Changed::Loops).await;
        Ok(())
    }

    pub async fn why(&self) -> Result<rm_proto::WhyReport, ApiError> {
        let Some(fleet) = self.daemon.fleet.get() else {
            return Err(ApiError::service_unavailable(
                "the service is still starting: ask again in a few seconds",
            ));
        };
        let passes = fleet
            .loops()
            .iter()
            .map(|l| (l.target().clone(), l.policies(), l.last_pass()))
            .collect();
        let now = rm_core::Timestamp::from_millis(chrono::Utc::now().timestamp_millis());
        Ok(crate::why::report(&self.daemon, passes, now))
    }

    pub async fn pause(&self, peer: Peer) -> Result<PauseState, ApiError> {
        self.set_paused(peer, true).await
    }

    pub async fn resume(&self, peer: Peer) -> Result<PauseState, ApiError> {
        self.set_paused(peer, false).await
    }

    pub(crate) async fn set_paused(
        &self,
        peer: Peer,
        paused: bool,
    ) -> Result<PauseState, ApiError> {
        self.daemon
            .paused
            .change(&self.daemon.journal, paused)
            .await?;
        tracing::info!(
            uid = peer.uid,
            paused,
            "launching {}",
            if paused { "paused" } else { "resumed" }
        );
        self.daemon.after(Changed::Loops).await;
        Ok(PauseState { paused })
    }
}
