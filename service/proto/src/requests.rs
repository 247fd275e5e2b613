//! Request bodies (and the small answers that go with them). Requests refuse unknown fields:
//! a misspelt `max_capacty` must be an error, not a silently ignored change.

use crate::error::ApiError;
use crate::secret::SecretString;
use crate::status::{LoadAverage, TargetStatus};
use crate::time::UnixMillis;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// `POST /v1/credential`: hand the service a GitHub App user credential from the device flow.
/// The service stores its own copy and renews it from then on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialPut {
    pub access_token: SecretString,
    pub expires_at: UnixMillis,
    pub refresh_token: SecretString,
    pub refresh_expires_at: UnixMillis,
    /// The GitHub login the token belongs to, if the client already asked GitHub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
}

/// `POST /v1/targets`: serve a repository (`owner/repo`) or an organization (`org`).
/// Omitted fields take the service's defaults (default profile, monitor only unless
/// `up_to_host`, enabled).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetAdd {
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_capacity: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_capacity: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Without `max_capacity`: up to the host's capacity (the CLI's and the tray's default)
    /// rather than monitor only. The service fills it in, so that the client need not ask.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub up_to_host: bool,
    /// Also register with the label of the pool this host joined (refused when it is in
    /// none): jobs asking for it may run on any host of the pool.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pool: bool,
}

/// `PATCH /v1/targets/{kind}/{name}`: change a target if it is still at `revision`
/// (compare-and-set: a stale revision is `409 conflict`, re-read and retry). Omitted fields are
/// unchanged. `max_capacity` sets a limit; `monitor_only: true` removes it (the two together
/// are refused).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetUpdate {
    pub revision: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_capacity: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_capacity: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitor_only: Option<bool>,
    /// `true`: a target in `repair_required` (launches kept failing) is tried again: the host
    /// checks run first (a failed required one refuses the retry with its fix, `409
    /// conflict`), then the target goes back to `pending` with its failure count reset. A
    /// target not in `repair_required` refuses it (`409 conflict`, naming its state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<bool>,
    /// The target's own memory admission settings, replacing what it had (a `null` field
    /// follows the host's setting; all `null` clears them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<crate::status::TargetAdmission>,
    /// The target's own cache settings, replacing what it had (all `null`: the defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<crate::caches::TargetCache>,
    /// Keep the work folder between jobs (`persistent`) or not (`ephemeral`: the saved
    /// workspaces are deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<crate::status::Workspace>,
    /// The target's sandbox choices; an omitted field is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<TargetSandboxChange>,
}

/// A change of a target's sandbox choices (`repo set --sandbox on|off --docker on|off`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSandboxChange {
    /// `false`: its runners start without the sandbox (the operator's explicit opt-out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub walls: Option<bool>,
    /// `true`: its jobs can use the host's Docker daemon (root-equivalent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker: Option<bool>,
    /// The most memory one of its jobs may hold, in MiB; `0`: back to the host's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max_mb: Option<u32>,
}

impl TargetUpdate {
    /// Refuses contradictory fields. The server runs this before the handler.
    pub fn check(&self) -> Result<(), ApiError> {
        if self.workspace == Some(crate::status::Workspace::Unknown) {
            return Err(ApiError::bad_request(
                "workspace must be \"persistent\" or \"ephemeral\"",
            ));
        }
        if self.monitor_only == Some(true) && self.max_capacity.is_some() {
            return Err(ApiError::bad_request(
                "monitor_only: true removes max_capacity, so the two cannot be sent together: \
                 send only one of them",
            ));
        }
        if let Some(mb) = self.sandbox.as_ref().and_then(|s| s.memory_max_mb) {
            if mb != 0 && mb < MIN_JOB_MEMORY_MB {
                return Err(ApiError::bad_request(format!(
                    "memory_max_mb {mb} is below {MIN_JOB_MEMORY_MB} MiB, less than a runner alone needs: give at least {MIN_JOB_MEMORY_MB}, or 0 for the host's default"
                )));
            }
        }
        Ok(())
    }
}

/// The smallest per-job memory cap a target may set: the runner alone needs about 200 MiB.
pub const MIN_JOB_MEMORY_MB: u32 = 256;

/// `PUT /v1/host/capacity`: how many runners may run at once on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostCapacity {
    pub capacity: u32,
}

/// `PATCH /v1/host/admission`: change the host's memory admission and workstation rules at
/// run time (operators only). Omitted fields are unchanged; `null` turns `max_load` or
/// `quiet_hours` off. The service applies the change at once and answers the settings now in
/// force ([`HostAdmission`](crate::HostAdmission)); a refused value changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostAdmissionChange {
    /// Memory admission on or off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_admission: Option<bool>,
    /// A runner's expected peak before its target has any history, in MiB (≥ 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_memory_mb: Option<u64>,
    /// Memory kept free for the user's own work, in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_headroom_mb: Option<u64>,
    /// New runners wait while the machine runs on battery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_on_battery: Option<bool>,
    /// New runners wait while the 1-minute load is above this; `null`: no limit.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub max_load: Option<Option<LoadAverage>>,
    /// `HH:MM-HH:MM` in the host's local time (e.g. `22:00-07:00`); `null`: none.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub quiet_hours: Option<Option<String>>,
    /// New runners wait while the user is active at the session (only idle time is used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_only: Option<bool>,
}

impl HostAdmissionChange {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == HostAdmissionChange::default()
    }
}

/// `PATCH /v1/host/env`: change the host's runner environment (operators only): set these
/// variables, remove those. Checked whole before anything is stored (`rm_core::runner_env`'s
/// rules); a refused change changes nothing. Applied to runners started after it. Its `Debug`
/// shows names only: values may hold a proxy password.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostEnvChange {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unset: Vec<String>,
}

impl HostEnvChange {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.unset.is_empty()
    }
}

impl fmt::Debug for HostEnvChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostEnvChange")
            .field("set", &self.set.keys().collect::<Vec<_>>())
            .field("unset", &self.unset)
            .finish()
    }
}

/// `GET /v1/host/env` (and the answer to `PATCH`): the host's runner environment, by name.
/// Values go to operators only (`values_shown`); other readers get the names.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HostEnv {
    pub variables: Vec<EnvVar>,
    /// `false`: the caller is not an operator and every `value` was withheld.
    pub values_shown: bool,
}

/// One variable of the runner environment.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    pub name: String,
    /// Absent when withheld from a reader who is not an operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

impl fmt::Debug for HostEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostEnv")
            .field("variables", &self.variables)
            .field("values_shown", &self.values_shown)
            .finish()
    }
}

impl fmt::Debug for EnvVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = self.value.as_ref().map(|_| "[withheld from Debug]");
        f.debug_struct("EnvVar")
            .field("name", &self.name)
            .field("value", &value)
            .finish()
    }
}

/// A field that is present: `null` is `Some(None)`, absent stays `None` (through `default`).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// The answer to `POST /v1/pause` and `POST /v1/resume`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseState {
    pub paused: bool,
}

/// `GET /v1/targets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetList {
    pub targets: Vec<TargetStatus>,
}

/// The body of requests that take none (pause, resume): empty, or `{}`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoBody {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_debug_redacts_the_tokens() {
        let c = CredentialPut {
            access_token: SecretString::new("ghu_access_value"),
            expires_at: UnixMillis(1),
            refresh_token: SecretString::new("ghr_refresh_value"),
            refresh_expires_at: UnixMillis(2),
            login: Some("octocat".into()),
        };
        let debug = format!("{c:?}");
        assert!(!debug.contains("ghu_access_value"), "{debug}");
        assert!(!debug.contains("ghr_refresh_value"), "{debug}");
        assert!(debug.contains("[redacted]"));
        let wire = serde_json::to_string(&c).unwrap();
        assert!(wire.contains("ghu_access_value"));
    }

    #[test]
    fn requests_refuse_unknown_fields() {
        let e =
            serde_json::from_str::<TargetUpdate>(r#"{"revision":1,"max_capacty":2}"#).unwrap_err();
        assert!(e.to_string().contains("max_capacty"), "{e}");
    }

    #[test]
    fn an_admission_change_tells_absent_from_null() {
        let c: HostAdmissionChange =
            serde_json::from_str(r#"{"max_load":null,"quiet_hours":"22:00-07:00"}"#).unwrap();
        assert_eq!(c.max_load, Some(None), "null: turned off");
        assert_eq!(c.quiet_hours, Some(Some("22:00-07:00".into())));
        assert_eq!(c.idle_only, None, "absent: unchanged");
        let wire = serde_json::to_string(&c).unwrap();
        assert_eq!(wire, r#"{"max_load":null,"quiet_hours":"22:00-07:00"}"#);
        let c: HostAdmissionChange = serde_json::from_str(r#"{"max_load":4.5}"#).unwrap();
        assert_eq!(c.max_load, Some(Some(LoadAverage(4.5))));
        assert!(HostAdmissionChange::default().is_empty() && !c.is_empty());
        let e = serde_json::from_str::<HostAdmissionChange>(r#"{"idle":true}"#).unwrap_err();
        assert!(e.to_string().contains("idle"), "{e}");
    }

    #[test]
    fn an_env_change_shows_no_value_in_debug_and_refuses_unknown_fields() {
        let c: HostEnvChange =
            serde_json::from_str(r#"{"set":{"HTTPS_PROXY":"http://u:pw@p:3128"},"unset":["A"]}"#)
                .unwrap();
        assert_eq!(c.set["HTTPS_PROXY"], "http://u:pw@p:3128");
        let debug = format!("{c:?}");
        assert!(
            debug.contains("HTTPS_PROXY") && !debug.contains("pw@"),
            "{debug}"
        );
        assert!(HostEnvChange::default().is_empty() && !c.is_empty());
        assert!(serde_json::from_str::<HostEnvChange>(r#"{"sett":{}}"#).is_err());
        let env = HostEnv {
            variables: vec![EnvVar {
                name: "HTTPS_PROXY".into(),
                value: Some("http://u:pw@p:3128".into()),
            }],
            values_shown: true,
        };
        assert!(!format!("{env:?}").contains("pw@"));
        let names_only = HostEnv {
            variables: vec![EnvVar {
                name: "A".into(),
                value: None,
            }],
            values_shown: false,
        };
        assert_eq!(
            serde_json::to_string(&names_only).unwrap(),
            r#"{"variables":[{"name":"A"}],"values_shown":false}"#
        );
    }

    #[test]
    fn monitor_only_with_a_limit_is_contradictory() {
        let u = TargetUpdate {
            revision: 1,
            max_capacity: Some(2),
            monitor_only: Some(true),
            ..TargetUpdate::default()
        };
        assert!(u.check().is_err());
        let ok = TargetUpdate {
            revision: 1,
            monitor_only: Some(true),
            ..TargetUpdate::default()
        };
        assert!(ok.check().is_ok());
    }

    #[test]
    fn a_job_memory_cap_below_what_a_runner_needs_is_refused_with_the_fix() {
        let cap = |mb| TargetUpdate {
            revision: 1,
            sandbox: Some(TargetSandboxChange {
                memory_max_mb: Some(mb),
                ..TargetSandboxChange::default()
            }),
            ..TargetUpdate::default()
        };
        let err = cap(100).check().unwrap_err();
        assert!(err.message.contains("at least 256"), "{}", err.message);
        assert!(cap(256).check().is_ok());
        assert!(cap(0).check().is_ok(), "0: back to the host's default");
    }
}

/// `PUT /v1/pool`: join a pool of hosts (operators only). The password travels here, never in
/// the URL (which would land in shell histories and process lists); the service keeps it in
/// its credential store. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolJoin {
    /// `postgres://USER@HOST[:PORT]/DATABASE`, without a password.
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<SecretString>,
    /// The label jobs ask for to run on any host of the pool.
    pub label: String,
    /// This host's name in the pool (default: the machine's name); unique among its hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

impl fmt::Debug for PoolJoin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolJoin")
            .field("url", &self.url)
            .field("password", &self.password.as_ref().map(|_| "[redacted]"))
            .field("label", &self.label)
            .field("host", &self.host)
            .finish()
    }
}
