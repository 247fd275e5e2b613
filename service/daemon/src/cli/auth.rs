//! `auth login|status|logout`: the terminal's device flow, and the service's credential.
//!
//! The CLI only signs in; the service stores, renews and uses the credential. So `login`
//! connects to the service first (no point in signing in if nothing can take the credential),
//! runs the device flow against the web origin, then hands the pair over with
//! `POST /v1/credential`. The device code is a secret and is never printed.

use std::io::Write;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rm_github::{ClientConfig, Credential, DeviceFlow, DeviceFlowError, Endpoints, ExposeSecret};
use rm_proto::{AuthState, CredentialPut, SecretString, UnixMillis};

use super::backend_api::ApiBackend;
use crate::exit::{ExitCode, Failure};

/// Where and as which App to sign in.
#[derive(Debug, Clone)]
pub struct LoginOptions {
    /// The web/OAuth origin, e.g. `https://github.com` (a GHES host or the fake GitHub).
    pub web_base: String,
    /// The GitHub App's client id; `None` = the built-in one.
    pub client_id: Option<String>,
}

fn endpoints(web_base: &str) -> Result<Endpoints, Failure> {
    let web = web_base.trim_end_matches('/');
    let result = if web == "https://github.com" {
        Ok(Endpoints::github_com())
    } else {
        Endpoints::custom(web, &format!("{web}/api/v3"))
    };
    result.map_err(|e| Failure::usage(format!("{e}: fix `--web-base` (e.g. https://github.com)")))
}

/// Runs the device flow in this terminal and gives the credential to the service.
pub fn login(api: &ApiBackend, options: &LoginOptions) -> Result<(), Failure> {
    let mut config = ClientConfig::new(endpoints(&options.web_base)?);
    if let Some(id) = &options.client_id {
        config.client_id = id.clone();
    }
    let flow = {
        // octocrab spawns its request buffer at construction: it needs the runtime's context.
        let _context = api.enter();
        DeviceFlow::new(config)
    }
    .map_err(|e| {
        Failure::new(
            ExitCode::GitHub,
            format!("cannot prepare sign-in: {e} (check `--web-base`)"),
        )
    })?;
    let code = api
        .block_on(flow.start())
        .map_err(|e| device_failure(e, &options.web_base))?;
    println!(
        "To sign in, open {} and enter the code: {}",
        code.verification_uri, code.user_code
    );
    println!(
        "Waiting for approval (the code is valid for {} minutes; Ctrl-C cancels)…",
        code.expires_in.as_secs().div_ceil(60)
    );
    let _ = std::io::stdout().flush();
    let credential = api
        .block_on(flow.poll_until(&code, |wait: Duration| async move {
            tokio::select! {
                _ = tokio::time::sleep(wait) => true,
                _ = tokio::signal::ctrl_c() => false,
            }
        }))
        .map_err(|e| device_failure(e, &options.web_base))?;
    api.put_credential(&to_wire(&credential)?)?;
    println!("Signed in: the service now holds the credential and renews it itself.");
    Ok(())
}

/// Shows the service's view of the credential; not signed in is exit code 8.
pub fn status(api: &ApiBackend) -> Result<(), Failure> {
    match api.status()?.auth {
        AuthState::SignedIn { login, expires_at } => {
            let login = if login.is_empty() {
                "a GitHub user".to_owned()
            } else {
                login
            };
            match expires_at.and_then(|t| DateTime::<Utc>::from_timestamp_millis(t.as_millis())) {
                Some(t) => println!(
                    "signed in as {login} (access token valid until {}; the service renews it)",
                    t.format("%Y-%m-%d %H:%M UTC")
                ),
                None => println!("signed in as {login}"),
            }
            Ok(())
        }
        AuthState::SignedOut => Err(Failure::new(
            ExitCode::SignInRequired,
            "signed out: sign in with `runner-manager auth login`",
        )),
        AuthState::SignInRequired { reason } => Err(Failure::new(
            ExitCode::SignInRequired,
            format!("sign-in required ({reason}): run `runner-manager auth login`"),
        )),
        AuthState::Unknown => Err(Failure::new(
            ExitCode::Unsupported,
            "the service reports a sign-in state this CLI does not know: update runner-manager",
        )),
    }
}

/// Asks the service to forget its credential.
pub fn logout(api: &ApiBackend) -> Result<(), Failure> {
    api.delete_credential()?;
    println!(
        "signed out: the service starts no new runners until `runner-manager auth login`; \
         running jobs finish"
    );
    Ok(())
}

fn millis(t: DateTime<Utc>) -> UnixMillis {
    UnixMillis::from_millis(t.timestamp_millis())
}

fn to_wire(c: &Credential) -> Result<CredentialPut, Failure> {
    let Some(refresh) = &c.refresh_token else {
        return Err(Failure::new(
            ExitCode::GitHub,
            "GitHub issued a token without a refresh token (token expiration is off for this \
             App): enable \"Expire user authorization tokens\" in the App's settings, then run \
             `runner-manager auth login` again",
        ));
    };
    let far = DateTime::<Utc>::MAX_UTC;
    Ok(CredentialPut {
        access_token: SecretString::new(c.access_token.expose_secret()),
        expires_at: millis(c.expires_at.unwrap_or(far)),
        refresh_token: SecretString::new(refresh.expose_secret()),
        refresh_expires_at: millis(c.refresh_expires_at.unwrap_or(far)),
        login: None,
    })
}

fn device_failure(e: DeviceFlowError, web_base: &str) -> Failure {
    let code = match e {
        DeviceFlowError::Expired
        | DeviceFlowError::Denied
        | DeviceFlowError::IncorrectDeviceCode
        | DeviceFlowError::Cancelled => ExitCode::SignInRequired,
        DeviceFlowError::UnknownClient { .. } => ExitCode::Usage,
        _ => ExitCode::GitHub,
    };
    let fix = match code {
        ExitCode::SignInRequired => " (`runner-manager auth login`)".to_owned(),
        ExitCode::Usage => " (pass the App's id with `--client-id`)".to_owned(),
        _ => format!(" (is {web_base} reachable? choose another with `--web-base`)"),
    };
    Failure::new(code, format!("sign-in failed: {e}{fix}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_credential_keeps_the_tokens_and_expiry() {
        let c = Credential {
            access_token: rm_github::SecretString::from("ghu_a".to_owned()),
            expires_at: DateTime::<Utc>::from_timestamp_millis(1_000),
            refresh_token: Some(rm_github::SecretString::from("ghr_b".to_owned())),
            refresh_expires_at: DateTime::<Utc>::from_timestamp_millis(2_000),
        };
        let w = to_wire(&c).unwrap();
        assert_eq!(w.expires_at, UnixMillis::from_millis(1_000));
        assert_eq!(w.refresh_expires_at, UnixMillis::from_millis(2_000));
        assert!(!format!("{w:?}").contains("ghu_a"));
        assert!(serde_json::to_string(&w).unwrap().contains("ghr_b"));
        let none = Credential::non_expiring(rm_github::SecretString::from("x".to_owned()));
        assert_eq!(to_wire(&none).unwrap_err().code, ExitCode::GitHub);
    }

    #[test]
    fn refusals_say_to_sign_in_again() {
        let f = device_failure(DeviceFlowError::Denied, "http://x");
        assert_eq!(f.code, ExitCode::SignInRequired);
        assert!(
            f.message.contains("runner-manager auth login"),
            "{}",
            f.message
        );
        assert!(endpoints("not a url").is_err());
        assert_eq!(
            endpoints("https://github.com/").unwrap().web(),
            Endpoints::github_com().web()
        );
    }
}
