//! One loop's life under the lifecycle: like `TargetLoop::run`, except that startup recovery is
//! skipped when the lifecycle already ran it for every target before any launch (a loop is
//! never recovered twice), and the poll interval is the lifecycle's planned one.

use rm_agent::{
    AgentConfig, Clock, DrainReport, GitHubPort, JournalPort, PollInterval, RunnerHostPort,
    TargetLoop,
};
use std::sync::Arc;
use tokio::sync::watch;

/// Recovery (unless `recovered`), passes at the poll interval or when woken, until `shutdown`;
/// then the drain with the agent's deadline. A retired loop supervises until its target owns
/// nothing and returns without a deadline (a shutdown meanwhile applies the deadline).
pub(crate) async fn drive<J, G, H, C>(
    lp: Arc<TargetLoop<J, G, H, C>>,
    mut shutdown: watch::Receiver<bool>,
    poll: Arc<dyn PollInterval>,
    agent: AgentConfig,
    recovered: bool,
) -> DrainReport
where
    J: JournalPort,
    G: GitHubPort,
    H: RunnerHostPort,
    C: Clock,
{
    if !recovered {
        lp.recover().await;
    }
    let wake = lp.exit_notifier();
    loop {
        if *shutdown.borrow() {
            break;
        }
        if lp.is_retiring() {
            return drain_retired(&lp, shutdown, &agent).await;
        }
        lp.pass().await;
        tokio::select! {
            () = tokio::time::sleep(poll.next_interval()) => {}
            () = wake.notified() => {}
            changed = shutdown.changed() => {
                if changed.is_err() {
                    break;
                }
            }
        }
    }
    lp.run_until_drained(agent.drain_deadline).await
}

/// Passes every `drain_poll` (or when woken) until the retired target owns no active runner;
/// the final `run_until_drained` then reports (and emits) the drain.
async fn drain_retired<J, G, H, C>(
    lp: &TargetLoop<J, G, H, C>,
    mut shutdown: watch::Receiver<bool>,
    agent: &AgentConfig,
) -> DrainReport
where
    J: JournalPort,
    G: GitHubPort,
    H: RunnerHostPort,
    C: Clock,
{
    let wake = lp.exit_notifier();
    loop {
        if *shutdown.borrow() {
            break;
        }
        if lp.pass().await.active_owned == 0 {
            // Nothing left: the drain below ends after one pass, without a deadline.
            return lp.run_until_drained(None).await;
        }
        tokio::select! {
            () = tokio::time::sleep(agent.drain_poll) => {}
            () = wake.notified() => {}
            changed = shutdown.changed() => {
                if changed.is_err() {
                    break;
                }
            }
        }
    }
    lp.run_until_drained(agent.drain_deadline).await
}
