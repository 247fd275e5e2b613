//! User tokens (issue, revoke, refresh rotation) and device-flow codes.

use super::*;

impl World {
    pub fn issue_token(&mut self, login: &str) -> Result<IssuedToken, FakeError> {
        let acc = self
            .account(login)
            .ok_or_else(|| FakeError::UnknownAccount(login.to_string()))?;
        let login = acc.login.clone();
        let now = Utc::now();
        let access = format!("ghu_{}", random_string(36));
        let refresh = format!("ghr_{}", random_string(76));
        let expires_at = later(now, self.access_lifetime);
        let refresh_expires_at = later(now, self.refresh_lifetime);
        self.tokens.insert(
            access.clone(),
            AccessToken {
                login: login.clone(),
                expires_at,
                revoked: false,
            },
        );
        self.refresh.insert(
            refresh.clone(),
            RefreshToken {
                login,
                access: access.clone(),
                expires_at: refresh_expires_at,
                used: false,
            },
        );
        Ok(IssuedToken {
            access_token: access,
            refresh_token: Some(refresh),
            expires_at,
            refresh_expires_at: Some(refresh_expires_at),
        })
    }

    /// Revokes an access or refresh token (and its partner). Returns whether it existed.
    pub fn revoke_token(&mut self, token: &str) -> bool {
        if let Some(t) = self.tokens.get_mut(token) {
            t.revoked = true;
            for r in self.refresh.values_mut() {
                if r.access == token {
                    r.used = true;
                }
            }
            return true;
        }
        if let Some(r) = self.refresh.get_mut(token) {
            r.used = true;
            let access = r.access.clone();
            if let Some(t) = self.tokens.get_mut(&access) {
                t.revoked = true;
            }
            return true;
        }
        false
    }

    /// The login a live access token belongs to.
    pub fn token_login(&self, token: &str) -> Option<String> {
        let t = self.tokens.get(token)?;
        (!t.revoked && t.expires_at > Utc::now()).then(|| t.login.clone())
    }

    /// Rotates a refresh token: a new pair, the old pair dead. None = bad_refresh_token.
    pub fn refresh_token(&mut self, refresh: &str) -> Option<IssuedToken> {
        let r = self.refresh.get_mut(refresh)?;
        if r.used || r.expires_at <= Utc::now() {
            return None;
        }
        r.used = true;
        let (login, access) = (r.login.clone(), r.access.clone());
        if let Some(t) = self.tokens.get_mut(&access) {
            t.revoked = true;
        }
        self.issue_token(&login).ok()
    }

    pub fn new_device(&mut self) -> (String, String) {
        let mut rng = rand::rng();
        let device_code: String = (0..40)
            .map(|_| char::from(b"0123456789abcdef"[rng.random_range(0..16)]))
            .collect();
        let alphabet = b"BCDFGHJKLMNPQRSTVWXZ";
        let mut user_code: String = (0..8)
            .map(|_| char::from(alphabet[rng.random_range(0..alphabet.len())]))
            .collect();
        user_code.insert(4, '-');
        self.devices.insert(
            device_code.clone(),
            Device {
                user_code: user_code.clone(),
                // Saturating like token lifetimes: an absurd lifetime means "never expires".
                expires_at: Instant::now()
                    .checked_add(self.device_expires_in)
                    .unwrap_or_else(|| Instant::now() + Duration::from_secs(100 * 365 * 86_400)),
                interval_secs: self.device_interval.as_secs(),
                last_poll: None,
                state: DeviceState::Pending,
            },
        );
        (device_code, user_code)
    }

    fn device_by_user_code(&mut self, user_code: &str) -> Option<&mut Device> {
        let wanted = user_code.trim().to_ascii_uppercase().replace(' ', "");
        self.devices.values_mut().find(|d| {
            d.user_code == wanted
                && d.state == DeviceState::Pending
                && d.expires_at > Instant::now()
        })
    }

    pub fn approve_device(&mut self, user_code: &str, login: &str) -> Result<(), FakeError> {
        let acc = self
            .account(login)
            .ok_or_else(|| FakeError::UnknownAccount(login.to_string()))?;
        let login = acc.login.clone();
        let d = self
            .device_by_user_code(user_code)
            .ok_or_else(|| FakeError::UnknownUserCode(user_code.to_string()))?;
        d.state = DeviceState::Approved(login);
        Ok(())
    }

    pub fn deny_device(&mut self, user_code: &str) -> Result<(), FakeError> {
        let d = self
            .device_by_user_code(user_code)
            .ok_or_else(|| FakeError::UnknownUserCode(user_code.to_string()))?;
        d.state = DeviceState::Denied;
        Ok(())
    }
}
