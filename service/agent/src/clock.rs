//! Time as the agent sees it: a port, so tests drive timeouts and retry backoffs with a
//! [`FakeClock`] instead of waiting.

use rm_core::Timestamp;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

/// Reads the time and sleeps. `now` feeds the domain (`rm_core` never reads a clock); `sleep`
/// paces retries and poll intervals.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send;
}

impl<C: Clock> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        (**self).sleep(duration)
    }
}

/// The wall clock and tokio's timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Timestamp::from_millis(millis)
    }

    async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}

/// A clock for tests. Manual by default: time moves only through [`FakeClock::advance`], which
/// wakes every sleeper whose deadline has passed. With [`FakeClock::set_auto_advance`] a sleep
/// moves the time forward by its own duration and returns at once, so retry backoffs take no
/// real time but still show in the timestamps.
#[derive(Debug, Clone)]
pub struct FakeClock {
    inner: Arc<Mutex<FakeState>>,
}

#[derive(Debug)]
struct FakeState {
    now: Timestamp,
    auto_advance: bool,
    sleepers: Vec<(Timestamp, oneshot::Sender<()>)>,
    slept: Vec<Duration>,
}

impl FakeClock {
    pub fn new(start: Timestamp) -> Self {
        FakeClock {
            inner: Arc::new(Mutex::new(FakeState {
                now: start,
                auto_advance: false,
                sleepers: Vec::new(),
                slept: Vec::new(),
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, FakeState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn set_auto_advance(&self, on: bool) {
        self.state().auto_advance = on;
    }

    /// Moves the time forward and wakes the sleepers that are due.
    pub fn advance(&self, by: Duration) {
        let mut st = self.state();
        st.now = st.now + by;
        let now = st.now;
        let (due, waiting): (Vec<_>, Vec<_>) =
            st.sleepers.drain(..).partition(|(at, _)| *at <= now);
        st.sleepers = waiting;
        drop(st);
        for (_, tx) in due {
            let _ = tx.send(());
        }
    }

    /// Every duration passed to `sleep`, in order (to assert backoffs).
    pub fn slept(&self) -> Vec<Duration> {
        self.state().slept.clone()
    }

    /// How many sleeps are waiting for the time to move.
    pub fn sleepers(&self) -> usize {
        self.state()
            .sleepers
            .iter()
            .filter(|(_, tx)| !tx.is_closed())
            .count()
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Timestamp {
        self.state().now
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        let rx = {
            let mut st = self.state();
            st.slept.push(duration);
            if st.auto_advance || duration.is_zero() {
                st.now = st.now + duration;
                None
            } else {
                let (tx, rx) = oneshot::channel();
                let at = st.now + duration;
                st.sleepers.push((at, tx));
                Some(rx)
            }
        };
        async move {
            if let Some(rx) = rx {
                // A dropped sender (clock gone) ends the sleep rather than hanging forever.
                let _ = rx.await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_sleep_waits_for_advance() {
        let clock = FakeClock::new(Timestamp::from_millis(1_000));
        let c2 = clock.clone();
        let task = tokio::spawn(async move { c2.sleep(Duration::from_secs(5)).await });
        while clock.sleepers() == 0 {
            tokio::task::yield_now().await;
        }
        clock.advance(Duration::from_secs(4));
        assert!(!task.is_finished());
        clock.advance(Duration::from_secs(1));
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(clock.now(), Timestamp::from_millis(6_000));
    }

    #[tokio::test]
    async fn auto_advance_moves_time_without_waiting() {
        let clock = FakeClock::new(Timestamp::from_millis(0));
        clock.set_auto_advance(true);
        clock.sleep(Duration::from_secs(30)).await;
        assert_eq!(clock.now(), Timestamp::from_millis(30_000));
        assert_eq!(clock.slept(), vec![Duration::from_secs(30)]);
    }
}
