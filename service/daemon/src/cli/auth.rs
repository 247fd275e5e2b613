//! `auth login|status|logout`: the terminal's device flow, and the service's credential.
//!
//! The CLI only signs in; the service stores, renews and uses the credential. So `login`
//! connects to the service first (no point in signing in if nothing can take the credential),
//! runs the device flow against the GitHub the service uses (its status names the web base and
//! App; `--web-base`/`--client-id` override), then hands the pair over with
//! `POST /v1/credential` and prints the login the service learnt from GitHub. The device code
//! is a secret and is never printed.

use std::io::Write;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rm_github::{
    ClientConfig, Credential, DeviceFlow, DeviceFlowError, Endpoints, ExposeSecret, GitHubClient,
    MemoryCredentialStore,
};
use rm_proto::{AuthState, CredentialPut, GitHubEndpoints, SecretString, UnixMillis};

use super::backend_api::ApiBackend;
use crate::exit::{ExitCode, Failure};

/// Where and as which App to sign in; `None` = as the service does.
#[derive(Debug, Clone, Default)]
pub struct LoginOptions {
    /// The web/OAuth origin, e.g. `https://github.com` (a GHES host or the fake GitHub).
    pub web_base: Option<String>,
    /// The GitHub App's client id.
    pub client_id: Option<String>,
}

/// Where sign-in actually goes: the flags, else what the running service uses (its status
/// names its GitHub), else github.com and the built-in App (a service too old to say).
#[derive(Debug, Clone, PartialEq, Eq)]
struct SignInTarget {
    web_base: String,
    api_base: Option<String>,
    client_id: Option<String>,
}

fn sign_in_target(options: &LoginOptions, service: Option<&GitHubEndpoints>) -> SignInTarget {
    match (&options.web_base, service) {
        (Some(web), _) => SignInTarget {
            web_base: web.clone(),
            // The service's API base only goes with the service's web base.
            api_base: service
                .filter(|s| same_origin(&s.web_base, web))
                .map(|s| s.api_base.clone()),
            client_id: options
                .client_id
                .clone()
                .or_else(|| service.map(|s| s.client_id.clone())),
        },
        (None, Some(s)) => SignInTarget {
            web_base: s.web_base.clone(),
            api_base: Some(s.api_base.clone()),
            client_id: options.client_id.clone().or(Some(s.client_id.clone())),
        },
        (None, None) => SignInTarget {
            web_base: GITHUB_COM.to_owned(),
            api_base: None,
            client_id: options.client_id.clone(),
        },
    }
}

const GITHUB_COM: &str = "https://github.com";

fn same_origin(a: &str, b: &str) -> bool {
    a.trim_end_matches('/')
        .eq_ignore_ascii_case(b.trim_end_matches('/'))
}

fn endpoints(web_base: &str, api_base: Option<&str>) -> Result<Endpoints, Failure> {
    let web = web_base.trim_end_matches('/');
    let result = match api_base {
        _ if web == GITHUB_COM => Ok(Endpoints::github_com()),
        Some(api) => Endpoints::custom(web, api),
        None => Endpoints::custom(web, &format!("{web}/api/v3")),
    };
    result.map_err(|e| Failure::usage(format!("{e}: fix `--web-base` (e.g. https://github.com)")))
}

/// Runs the device flow in this terminal and gives the credential to the service.
pub fn login(api: &ApiBackend, options: &LoginOptions) -> Result<(), Failure> {
    let service = api.status()?.github;
    let target = sign_in_target(options, service.as_ref());
    let web_base = target.web_base.as_str();
    let mut config = ClientConfig::new(endpoints(web_base, target.api_base.as_deref())?);
    if let Some(id) = &target.client_id {
        config.client_id = id.clone();
    }
    let flow = {
        // octocrab spawns its request buffer at construction: it needs the runtime's context.
        let _context = api.enter();
        DeviceFlow::new(config.clone())
    }
    .map_err(|e| {
        Failure::new(
            ExitCode::GitHub,
            format!("cannot prepare sign-in: {e} (check `--web-base`)"),
        )
    })?;
    let code = api
        .block_on(flow.start())
        .map_err(|e| device_failure(e, web_base))?;
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
        .map_err(|e| device_failure(e, web_base))?;
    let mut wire = to_wire(&credential)?;
    wire.login = who_signed_in(api, config, &credential);
    api.put_credential(&wire)?;
    // The service asked GitHub who this is (`GET /user`) before answering, or (a host with no
    // target stays off the network) took our word until it has a target.
    match api.status()?.auth {
        AuthState::SignedIn { login, .. } if !login.is_empty() => println!(
            "signed in as {login}: the service now holds the credential and renews it itself"
        ),
        _ => println!(
            "signed in (GitHub did not say as whom yet): the service now holds the credential \
             and renews it itself"
        ),
    }
    Ok(())
}

/// Asks GitHub whose the new credential is (`GET /user`), as a hint for the service, which
/// checks it itself once it talks to GitHub. Only the access token is used: renewal belongs
/// to the service (a refresh here would spend the refresh token the service is given).
fn who_signed_in(
    api: &ApiBackend,
    config: ClientConfig,
    credential: &Credential,
) -> Option<String> {
    let store = MemoryCredentialStore::new(Some(Credential::non_expiring(
        credential.access_token.clone(),
    )));
    let client = {
        let _context = api.enter();
        GitHubClient::new(config, std::sync::Arc::new(store))
    }
    .ok()?;
    // The timer is made inside the runtime: `block_on` gives the context.
    match api.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), client.current_login()).await
    }) {
        Ok(Ok(login)) => Some(login),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "GitHub did not say who signed in");
            None
        }
        Err(_) => None,
    }
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
                // `expires_at` is when the refresh token runs out: the sign-in itself. The
                // 8-hour access token is renewed by the service long before that.
                Some(t) => println!(
                    "signed in as {login} (until {}, when GitHub asks for a new sign-in; the \
                     service renews its 8-hour access token by itself)",
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
        assert!(endpoints("not a url", None).is_err());
        assert_eq!(
            endpoints("https://github.com/", None).unwrap().web(),
            Endpoints::github_com().web()
        );
    }

    #[test]
    fn sign_in_goes_where_the_service_points_unless_a_flag_says_otherwise() {
        let ghes = GitHubEndpoints {
            web_base: "https://ghe.example".into(),
            api_base: "https://ghe.example/api/v3".into(),
            client_id: "Iv1.ghes".into(),
        };
        let none = LoginOptions::default();
        let t = sign_in_target(&none, Some(&ghes));
        assert_eq!(t.web_base, "https://ghe.example");
        assert_eq!(t.api_base.as_deref(), Some("https://ghe.example/api/v3"));
        assert_eq!(t.client_id.as_deref(), Some("Iv1.ghes"));

        let flag = LoginOptions {
            web_base: Some("https://other.example".into()),
            client_id: Some("Iv1.mine".into()),
        };
        let t = sign_in_target(&flag, Some(&ghes));
        assert_eq!(t.web_base, "https://other.example");
        assert_eq!(
            t.api_base, None,
            "another GitHub's API is not the service's"
        );
        assert_eq!(t.client_id.as_deref(), Some("Iv1.mine"));

        let old_service = sign_in_target(&none, None);
        assert_eq!(old_service.web_base, "https://github.com");
        assert_eq!(old_service.client_id, None, "the built-in App");
    }
}
