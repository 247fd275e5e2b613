//! Per-user primary rate-limit windows.

use super::*;

impl World {
    pub fn rate_state(&mut self, user_id: u64) -> RateState {
        let now = Utc::now().timestamp();
        let initial = self
            .initial_remaining
            .map(|r| self.rate_limit.saturating_sub(r))
            .unwrap_or(0);
        let st = self.rate.entry(user_id).or_insert(RateState {
            used: initial,
            reset: now + 3600,
        });
        if st.reset <= now {
            *st = RateState {
                used: 0,
                reset: now + 3600,
            };
        }
        *st
    }

    pub fn charge(&mut self, user_id: u64) -> RateState {
        self.rate_state(user_id);
        let st = self
            .rate
            .entry(user_id)
            .or_insert(RateState { used: 0, reset: 0 });
        st.used += 1;
        *st
    }

    pub fn set_remaining(&mut self, remaining: u64) {
        let used = self.rate_limit.saturating_sub(remaining);
        self.initial_remaining = Some(remaining);
        for st in self.rate.values_mut() {
            st.used = used;
        }
    }
}
