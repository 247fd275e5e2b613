//! `auth login|status|logout`: sign-in through the service, and the service's credential.
//!
//! The service runs GitHub's device flow itself (`POST /v1/sign-in`), against its own GitHub
//! and App, and stores the credential it receives: the device code never leaves it, and the
//! only process that renews the credential is the one that stores it. `login` starts (or joins)
//! the service's sign-in, prints the user code and the verification page, follows the session
//! on the watch stream (or, if the watch is cut, by asking at the session's interval) and
//! prints who signed in. Ctrl-C cancels the session.

use chrono::{DateTime, Utc};
use rm_proto::{
    AuthState, Client, ClientError, ErrorCode, Event, GitHubEndpoints, SignInSession, SignInStart,
    SignInState, WatchMessage, WatchStream,
};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use super::backend_api::{client_failure, ApiBackend};
use crate::exit::{ExitCode, Failure};

/// What `auth login` was told. The service decides where to sign in; the flags only make
/// sure it is where the caller expects.
#[derive(Debug, Clone, Default)]
pub struct LoginOptions {
    /// The web/OAuth origin the caller expects, e.g. `https://github.com`.
    pub web_base: Option<String>,
    /// The GitHub App client id the caller expects.
    pub client_id: Option<String>,
    /// The data directory, to name the service's `config.json` in messages.
    pub data_dir: PathBuf,
}

fn same_origin(a: &str, b: &str) -> bool {
    a.trim_end_matches('/')
        .eq_ignore_ascii_case(b.trim_end_matches('/'))
}

/// Refuses flags that contradict the GitHub the service signs in to, naming how to change it.
fn check_flags(options: &LoginOptions, service: Option<&GitHubEndpoints>) -> Result<(), Failure> {
    let Some(service) = service else {
        // A service too old to say where it signs in: it cannot run sign-in either, and
        // starting says so.
        return Ok(());
    };
    let config = options.data_dir.join(crate::run::CONFIG_FILE);
    let change = |what: &str, wanted: &str, actual: &str| {
        Failure::usage(format!(
            "{what} {wanted} differs from the service's ({actual}): the service signs in \
             against its own GitHub. To change it, set `web_base`, `api_base` and `client_id` \
             in the service's config.json ({}) and restart the service; or drop {what}",
            config.display()
        ))
    };
    if let Some(web) = &options.web_base {
        if !same_origin(web, &service.web_base) {
            return Err(change("--web-base", web, &service.web_base));
        }
    }
    if let Some(id) = &options.client_id {
        if id != &service.client_id {
            return Err(change("--client-id", id, &service.client_id));
        }
    }
    Ok(())
}

/// Signs in through the service.
pub fn login(api: &ApiBackend, options: &LoginOptions) -> Result<(), Failure> {
    check_flags(options, api.status()?.github.as_ref())?;
    let client = api.client();
    let ended = api.block_on(async {
        // Ctrl-C is caught from here on (the listener registers at its first poll): one
        // pressed as soon as the code shows cancels the session instead of killing the CLI.
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        tokio::select! {
            biased;
            _ = &mut ctrl_c => return Err(Failure::new(
                ExitCode::SignInRequired,
                "interrupted before sign-in started: run `runner-manager auth login` again",
            )),
            () = std::future::ready(()) => {}
        }
        // Subscribed before starting, so no transition is missed; without a watch the
        // session is asked for instead.
        let watch = client.watch().await.ok();
        let session = client
            .start_sign_in(&SignInStart::default())
            .await
            .map_err(start_failure)?;
        if !session.state.is_final() {
            show(&session);
        }
        follow(client, session, watch, ctrl_c).await
    })?;
    report(&ended)
}

fn show(session: &SignInSession) {
    println!(
        "To sign in, open {} and enter the code: {}",
        session.verification_uri, session.user_code
    );
    let left_ms = session
        .expires_at
        .0
        .saturating_sub(Utc::now().timestamp_millis());
    println!(
        "Waiting for approval (the code is valid for {} minutes; Ctrl-C cancels)…",
        (left_ms.max(0) as u64).div_ceil(60_000)
    );
    let _ = std::io::stdout().flush();
}

/// Follows `session` until it ends; Ctrl-C cancels it.
async fn follow(
    client: &Client,
    mut session: SignInSession,
    mut watch: Option<WatchStream>,
    mut ctrl_c: std::pin::Pin<&mut impl std::future::Future<Output = std::io::Result<()>>>,
) -> Result<SignInSession, Failure> {
    let mut interrupted = false;
    while !session.state.is_final() {
        let next = tokio::select! {
            _ = ctrl_c.as_mut(), if !interrupted => {
                interrupted = true;
                // Answers the cancelled session, or (GitHub already approved and the service
                // is storing the credential) the session as it is: then follow it to its end.
                client.cancel_sign_in().await.map_err(client_failure)?
            }
            next = next_update(client, &session, &mut watch) => next?,
        };
        if next.state == SignInState::Retrying && session.state != SignInState::Retrying {
            eprintln!(
                "{}; {}",
                next.message.as_deref().unwrap_or("GitHub did not answer"),
                next.fix.as_deref().unwrap_or("the service keeps trying")
            );
        }
        session = next;
    }
    Ok(session)
}

/// The session's next state: from the watch stream, or (once it is cut) by asking after the
/// session's interval.
async fn next_update(
    client: &Client,
    session: &SignInSession,
    watch: &mut Option<WatchStream>,
) -> Result<SignInSession, Failure> {
    if let Some(stream) = watch.as_mut() {
        loop {
            match stream.next().await {
                Some(Ok(WatchMessage::Event {
                    event: Event::SignInProgress { session: s },
                })) if s.id == session.id => return Ok(s),
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "watch cut; asking for the sign-in instead");
                    break;
                }
                None => break,
            }
        }
        *watch = None;
    }
    tokio::time::sleep(Duration::from_secs(u64::from(session.interval_secs.max(1)))).await;
    let s = client.sign_in_status().await.map_err(client_failure)?;
    if s.id != session.id {
        // Replaced by a sign-in started elsewhere: ours ended.
        return Ok(SignInSession {
            state: SignInState::Cancelled,
            message: Some("replaced by a new sign-in".to_owned()),
            ..session.clone()
        });
    }
    Ok(s)
}

/// What a failed start means; a service without `/v1/sign-in` is named as the one to update.
fn start_failure(e: ClientError) -> Failure {
    match e {
        ClientError::Api {
            code: ErrorCode::NotFound,
            message,
            ..
        } => Failure::new(
            ExitCode::Unsupported,
            format!(
                "the running service cannot sign in itself ({message}): update runner-manager \
                 where the service runs and restart the service, then run `runner-manager auth \
                 login` again"
            ),
        ),
        e => client_failure(e),
    }
}

/// Prints how the session ended; anything but approval is a failure with its fix.
fn report(session: &SignInSession) -> Result<(), Failure> {
    let message = session.message.as_deref().unwrap_or("");
    match session.state {
        SignInState::Approved => {
            match &session.login {
                Some(login) => println!(
                    "Signed in as {login}: the service holds the credential and renews it itself"
                ),
                None => println!(
                    "Signed in (GitHub did not say as whom yet): the service holds the \
                     credential and renews it itself"
                ),
            }
            Ok(())
        }
        SignInState::Denied | SignInState::Expired | SignInState::Cancelled => Err(Failure::new(
            ExitCode::SignInRequired,
            format!("sign-in did not complete: {message} (`runner-manager auth login`)"),
        )),
        SignInState::Failed => Err(Failure::new(
            ExitCode::GitHub,
            format!(
                "sign-in failed: {message}; fix: {}",
                session.fix.as_deref().unwrap_or("see the service's log")
            ),
        )),
        SignInState::Waiting | SignInState::Retrying | SignInState::Unknown => Err(Failure::new(
            ExitCode::Unsupported,
            "the service reports a sign-in state this CLI does not know: update runner-manager",
        )),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_that_contradict_the_service_name_its_config_file() {
        let service = GitHubEndpoints {
            web_base: "https://ghe.example".into(),
            api_base: "https://ghe.example/api/v3".into(),
            client_id: "Iv1.ghes".into(),
        };
        let options = |web: Option<&str>, id: Option<&str>| LoginOptions {
            web_base: web.map(str::to_owned),
            client_id: id.map(str::to_owned),
            data_dir: PathBuf::from("/var/lib/runner-manager"),
        };
        assert!(check_flags(&options(None, None), Some(&service)).is_ok());
        assert!(check_flags(
            &options(Some("https://GHE.example/"), Some("Iv1.ghes")),
            Some(&service)
        )
        .is_ok());
        for wrong in [
            options(Some("https://github.com"), None),
            options(None, Some("Iv1.other")),
        ] {
            let e = check_flags(&wrong, Some(&service)).unwrap_err();
            assert_eq!(e.code, ExitCode::Usage);
            assert!(
                e.message.contains("/var/lib/runner-manager/config.json"),
                "{}",
                e.message
            );
        }
        // A service too old to name its GitHub: starting tells.
        assert!(check_flags(&options(Some("https://x.example"), None), None).is_ok());
    }

    #[test]
    fn each_ending_has_its_exit_code() {
        let session = |state, message: &str| SignInSession {
            id: "s".into(),
            user_code: "ABCD-EFGH".into(),
            verification_uri: "https://github.com/login/device".into(),
            expires_at: rm_proto::UnixMillis(0),
            interval_secs: 5,
            state,
            login: Some("octo".into()),
            message: Some(message.into()),
            fix: Some("enable it".into()),
            next_try: None,
        };
        assert!(report(&session(SignInState::Approved, "")).is_ok());
        for state in [
            SignInState::Denied,
            SignInState::Expired,
            SignInState::Cancelled,
        ] {
            let e = report(&session(state, "why")).unwrap_err();
            assert_eq!(e.code, ExitCode::SignInRequired, "{state:?}");
            assert!(
                e.message.contains("runner-manager auth login"),
                "{}",
                e.message
            );
        }
        let e = report(&session(SignInState::Failed, "disabled")).unwrap_err();
        assert_eq!(e.code, ExitCode::GitHub);
        assert!(e.message.contains("enable it"), "{}", e.message);
        let old = start_failure(ClientError::Api {
            status: 404,
            code: ErrorCode::NotFound,
            message: "update runner-manager (the service)".into(),
        });
        assert_eq!(old.code, ExitCode::Unsupported);
        assert!(
            old.message.contains("restart the service"),
            "{}",
            old.message
        );
    }
}
