//! What a sign-in session tells the user: the state each device-flow outcome leads to, what
//! happened in words, and the fix. The device code is never part of any of it.

use super::GitHubSide;
use rm_github::{DeviceFlowError, GitHubError};
use rm_proto::SignInState;

const START_AGAIN: &str =
    "start sign-in again (`runner-manager auth login`, or Sign in in the tray)";

/// The final state, message and fix for a flow that ended without a credential.
pub(super) fn refusal(
    e: &DeviceFlowError,
    gh: GitHubSide<'_>,
) -> (SignInState, String, Option<String>) {
    let config = gh.config_file.display();
    let other_app = format!(
        "point the service at the right App: set `client_id` (and, for another GitHub, \
         `web_base` and `api_base`) in {config}, then restart the service"
    );
    match e {
        DeviceFlowError::Expired => (
            SignInState::Expired,
            "the code expired before it was entered: start sign-in again for a new code".to_owned(),
            None,
        ),
        DeviceFlowError::Denied => (
            SignInState::Denied,
            "the request was cancelled in the browser: start sign-in again to retry".to_owned(),
            None,
        ),
        DeviceFlowError::Cancelled => (
            SignInState::Cancelled,
            "sign-in was cancelled: start it again to sign in".to_owned(),
            None,
        ),
        DeviceFlowError::Disabled => (
            SignInState::Failed,
            format!(
                "device flow is not enabled for the GitHub App {}",
                gh.client_id
            ),
            Some(format!(
                "enable it in the App's settings (Developer settings → GitHub Apps → the App → \
                 Enable Device Flow), or {other_app}"
            )),
        ),
        DeviceFlowError::UnauthorizedClient => (
            SignInState::Failed,
            format!(
                "{} refused device flow for the GitHub App {} (unauthorized_client)",
                gh.web, gh.client_id
            ),
            Some(format!(
                "ask the server's administrator to enable device flow for the App, or {other_app}"
            )),
        ),
        DeviceFlowError::UnknownClient { client_id } => (
            SignInState::Failed,
            format!(
                "{} does not know the GitHub App client id {client_id}",
                gh.web
            ),
            Some(other_app),
        ),
        DeviceFlowError::IncorrectDeviceCode => (
            SignInState::Failed,
            "GitHub no longer accepts this sign-in's code (already used or invalid)".to_owned(),
            Some(START_AGAIN.to_owned()),
        ),
        DeviceFlowError::Other { code, description } => (
            SignInState::Failed,
            format!("GitHub refused the sign-in ({code}: {description})"),
            Some(format!(
                "update runner-manager; if a proxy stands between this machine and {}, check \
                 that it passes sign-in requests unchanged",
                gh.web
            )),
        ),
        DeviceFlowError::GitHub(e) if e.is_retryable() => (
            SignInState::Failed,
            format!("{} could not be reached to start sign-in: {e}", gh.web),
            Some(format!(
                "check this machine's connection to {}, then {START_AGAIN}",
                gh.web
            )),
        ),
        DeviceFlowError::GitHub(e) => (
            SignInState::Failed,
            format!("sign-in could not start: {e}"),
            Some(format!("check the service's GitHub settings ({config})")),
        ),
    }
}

/// The message and fix of a `retrying` session.
pub(super) fn retrying(e: &GitHubError, gh: &GitHubSide<'_>) -> (String, String) {
    let what = match e {
        GitHubError::RateLimited { .. } => "GitHub rate-limited the sign-in poll".to_owned(),
        _ => format!("GitHub did not answer the sign-in poll ({e})"),
    };
    (
        what,
        format!(
            "nothing if it passes: the service asks again at next_try until the code expires; \
             if it persists, check this machine's connection to {}",
            gh.web
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn side() -> GitHubSide<'static> {
        GitHubSide {
            web: "https://ghe.example",
            client_id: "Iv1.app",
            config_file: Path::new("/var/lib/runner-manager/config.json"),
        }
    }

    #[test]
    fn each_outcome_has_its_state_and_names_the_fix() {
        let cases = [
            (
                DeviceFlowError::Expired,
                SignInState::Expired,
                "start sign-in again",
            ),
            (
                DeviceFlowError::Denied,
                SignInState::Denied,
                "cancelled in the browser",
            ),
            (DeviceFlowError::Disabled, SignInState::Failed, "Iv1.app"),
            (
                DeviceFlowError::UnknownClient {
                    client_id: "Iv1.app".into(),
                },
                SignInState::Failed,
                "Iv1.app",
            ),
            (
                DeviceFlowError::Other {
                    code: "unsupported_grant_type".into(),
                    description: "The grant type is not supported.".into(),
                },
                SignInState::Failed,
                "unsupported_grant_type",
            ),
        ];
        for (e, state, says) in cases {
            let (s, message, fix) = refusal(&e, side());
            assert_eq!(s, state, "{e}");
            assert!(message.contains(says), "{e}: {message}");
            if s == SignInState::Failed {
                assert!(fix.is_some_and(|f| !f.is_empty()), "{e}: no fix");
            }
        }
        let (_, _, fix) = refusal(&DeviceFlowError::Disabled, side());
        let fix = fix.unwrap_or_default();
        assert!(fix.contains("Enable Device Flow"), "{fix}");
        assert!(
            fix.contains("/var/lib/runner-manager/config.json"),
            "names the config file: {fix}"
        );
    }
}
