//! Paths of the local API and the routing table both ends share.
//!
//! Targets in paths: `/v1/targets/repo/{owner}/{repo}` and `/v1/targets/org/{org}`. GitHub
//! owner, organization and repository names consist of ASCII letters, digits, `.`, `_` and `-`
//! only, so segments are used literally and never percent-encoded; the `/` of `owner/repo`
//! stays a real path separator and the kind segment says how many name segments follow. A
//! segment with any other character (including `%`) is refused with `400 bad_request`.

use crate::error::{ApiError, ErrorCode};
use crate::status::TargetKind;
use crate::version::API_VERSION;
use std::fmt;
use thiserror::Error;

pub const VERSION: &str = "/v1/version";
pub const STATUS: &str = "/v1/status";
pub const WATCH: &str = "/v1/watch";
pub const CREDENTIAL: &str = "/v1/credential";
pub const TARGETS: &str = "/v1/targets";
/// Prefix of one target's path: `/v1/targets/{kind}/{name...}`.
pub const TARGET_PREFIX: &str = "/v1/targets/";
pub const HOST_CAPACITY: &str = "/v1/host/capacity";
/// The host's memory admission and workstation rules, changed at run time.
pub const HOST_ADMISSION: &str = "/v1/host/admission";
/// The host's runner environment (variables given to every runner).
pub const HOST_ENV: &str = "/v1/host/env";
/// The host's cache settings (size cap, tool cache).
pub const HOST_CACHES: &str = "/v1/host/caches";
/// What is cached (`GET`).
pub const CACHES: &str = "/v1/caches";
/// Remove caches (`POST`, operators).
pub const CACHES_CLEAR: &str = "/v1/caches/clear";
/// The host checks, run now (`runner-manager host doctor`).
pub const HOST_DOCTOR: &str = "/v1/host/doctor";
/// Why queued jobs have no runner (see [`crate::why`]).
pub const WHY: &str = "/v1/why";
pub const PAUSE: &str = "/v1/pause";
pub const RESUME: &str = "/v1/resume";
/// The service's device-flow sign-in (see [`crate::signin`]).
pub const SIGN_IN: &str = "/v1/sign-in";
/// The service's updater (see [`crate::update`]).
pub const UPDATE: &str = "/v1/update";
/// The pool of hosts this host serves in (`GET`, `PUT` to join, `DELETE` to leave).
pub const POOL: &str = "/v1/pool";

/// One target as named in a path; a profile other than the default one is named by the
/// query `?profile=NAME` (`PATCH` and `DELETE` of a target).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TargetRef {
    pub kind: TargetKind,
    /// `owner/repo` for a repository, `org` for an organization.
    pub name: String,
    /// The profile meant (`None`: the default one, or the only one).
    pub profile: Option<String>,
}

/// Why a target text or path was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TargetRefError {
    #[error("target is empty: give 'owner/repo' for a repository or 'org' for an organization")]
    Empty,
    #[error(
        "target '{0}' has the wrong number of '/': give 'owner/repo' for a repository or 'org' \
         for an organization"
    )]
    Shape(String),
    #[error(
        "target name part '{0}' may contain only ASCII letters, digits, '.', '_' and '-' \
         (GitHub's rules; nothing is percent-encoded)"
    )]
    Segment(String),
    #[error("target kind '{0}' is unknown: use 'repo' or 'org'")]
    Kind(String),
    #[error(
        "query '{0}' is not understood: a target takes only `profile=NAME` (lowercase a-z, 0-9 \
         and '-')"
    )]
    Query(String),
}

impl TargetRef {
    /// `owner/repo` is a repository, `org` an organization.
    pub fn parse(text: &str) -> Result<Self, TargetRefError> {
        if text.is_empty() {
            return Err(TargetRefError::Empty);
        }
        let parts: Vec<&str> = text.split('/').collect();
        let kind = match parts.len() {
            1 => TargetKind::Org,
            2 => TargetKind::Repo,
            _ => return Err(TargetRefError::Shape(text.to_owned())),
        };
        for part in &parts {
            check_segment(part)?;
        }
        Ok(TargetRef {
            kind,
            name: text.to_owned(),
            profile: None,
        })
    }

    /// The same target, meaning `profile` (`default` means the default one: no query).
    pub fn with_profile(mut self, profile: &str) -> Self {
        self.profile = (profile != "default").then(|| profile.to_owned());
        self
    }

    /// Whether `t` is this target and profile (names compare case-insensitively, as GitHub's).
    pub fn matches(&self, t: &crate::status::TargetStatus) -> bool {
        t.kind == self.kind
            && t.target.eq_ignore_ascii_case(&self.name)
            && t.profile == self.profile.as_deref().unwrap_or("default")
    }

    /// Reads the query of a target's path (`profile=NAME`, or nothing).
    pub fn with_query(mut self, query: Option<&str>) -> Result<Self, TargetRefError> {
        let Some(query) = query.filter(|q| !q.is_empty()) else {
            return Ok(self);
        };
        let bad = || TargetRefError::Query(query.to_owned());
        let name = query.strip_prefix("profile=").ok_or_else(bad)?;
        let slug = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !slug {
            return Err(bad());
        }
        self.profile = (name != "default").then(|| name.to_owned());
        Ok(self)
    }

    /// From the segments after [`TARGET_PREFIX`]: `repo/owner/name` or `org/name`.
    pub fn from_path_tail(tail: &str) -> Result<Self, TargetRefError> {
        let (kind_text, name) = tail.split_once('/').unwrap_or((tail, ""));
        let kind = match kind_text {
            "repo" => TargetKind::Repo,
            "org" => TargetKind::Org,
            other => return Err(TargetRefError::Kind(other.to_owned())),
        };
        let parsed = TargetRef::parse(name)?;
        if parsed.kind != kind {
            return Err(TargetRefError::Shape(name.to_owned()));
        }
        Ok(parsed)
    }

    /// `/v1/targets/repo/owner/repo` or `/v1/targets/org/org`, with `?profile=NAME` when
    /// a profile other than the default one is meant.
    pub fn path(&self) -> String {
        let base = format!("{TARGET_PREFIX}{}/{}", self.kind.as_str(), self.name);
        match &self.profile {
            Some(p) => format!("{base}?profile={p}"),
            None => base,
        }
    }
}

impl fmt::Display for TargetRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

fn check_segment(s: &str) -> Result<(), TargetRefError> {
    let ok_chars = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if s.is_empty() || !ok_chars || s == "." || s == ".." {
        return Err(TargetRefError::Segment(s.to_owned()));
    }
    Ok(())
}

/// An endpoint, resolved from a method and a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Version,
    Status,
    Watch,
    PutCredential,
    DeleteCredential,
    Targets,
    AddTarget,
    UpdateTarget(TargetRef),
    RemoveTarget(TargetRef),
    SetHostCapacity,
    SetHostAdmission,
    HostEnv,
    ChangeHostEnv,
    Caches,
    ClearCaches,
    SetHostCaches,
    HostDoctor,
    Why,
    Pause,
    Resume,
    StartSignIn,
    SignInStatus,
    CancelSignIn,
    UpdateStatus,
    Update,
    Pool,
    JoinPool,
    LeavePool,
}

impl Route {
    /// Resolves `method path` (the path without its query). Errors are ready to send:
    /// `404 not_found`, `405 method_not_allowed` (naming the allowed methods),
    /// `400 unsupported_version` for another API version's path, `400 bad_request` for a
    /// malformed target.
    pub fn resolve(method: &str, path: &str) -> Result<Route, ApiError> {
        let allowed: &[&str] = match path {
            VERSION => &["GET"],
            STATUS => &["GET"],
            WATCH => &["GET"],
            CREDENTIAL => &["POST", "DELETE"],
            TARGETS => &["GET", "POST"],
            HOST_CAPACITY => &["PUT"],
            HOST_ADMISSION => &["PATCH"],
            HOST_ENV => &["GET", "PATCH"],
            HOST_CACHES => &["PATCH"],
            CACHES => &["GET"],
            CACHES_CLEAR => &["POST"],
            HOST_DOCTOR => &["GET"],
            WHY => &["GET"],
            PAUSE | RESUME => &["POST"],
            SIGN_IN => &["GET", "POST", "DELETE"],
            UPDATE => &["GET", "POST"],
            POOL => &["GET", "PUT", "DELETE"],
            _ => match path.strip_prefix(TARGET_PREFIX) {
                Some(tail) => {
                    let target = TargetRef::from_path_tail(tail)
                        .map_err(|e| ApiError::bad_request(e.to_string()))?;
                    return match method {
                        "PATCH" => Ok(Route::UpdateTarget(target)),
                        "DELETE" => Ok(Route::RemoveTarget(target)),
                        _ => Err(method_not_allowed(method, path, &["PATCH", "DELETE"])),
                    };
                }
                None => return Err(not_found(path)),
            },
        };
        let route = match (path, method) {
            (VERSION, "GET") => Route::Version,
            (STATUS, "GET") => Route::Status,
            (WATCH, "GET") => Route::Watch,
            (CREDENTIAL, "POST") => Route::PutCredential,
            (CREDENTIAL, "DELETE") => Route::DeleteCredential,
            (TARGETS, "GET") => Route::Targets,
            (TARGETS, "POST") => Route::AddTarget,
            (HOST_CAPACITY, "PUT") => Route::SetHostCapacity,
            (HOST_ADMISSION, "PATCH") => Route::SetHostAdmission,
            (HOST_ENV, "GET") => Route::HostEnv,
            (HOST_ENV, "PATCH") => Route::ChangeHostEnv,
            (HOST_CACHES, "PATCH") => Route::SetHostCaches,
            (CACHES, "GET") => Route::Caches,
            (CACHES_CLEAR, "POST") => Route::ClearCaches,
            (HOST_DOCTOR, "GET") => Route::HostDoctor,
            (WHY, "GET") => Route::Why,
            (PAUSE, "POST") => Route::Pause,
            (RESUME, "POST") => Route::Resume,
            (SIGN_IN, "POST") => Route::StartSignIn,
            (SIGN_IN, "GET") => Route::SignInStatus,
            (SIGN_IN, "DELETE") => Route::CancelSignIn,
            (UPDATE, "GET") => Route::UpdateStatus,
            (UPDATE, "POST") => Route::Update,
            (POOL, "GET") => Route::Pool,
            (POOL, "PUT") => Route::JoinPool,
            (POOL, "DELETE") => Route::LeavePool,
            _ => return Err(method_not_allowed(method, path, allowed)),
        };
        Ok(route)
    }

    /// Read-only endpoints: they change nothing, so an access policy may open them wider.
    pub fn is_read_only(&self) -> bool {
        matches!(
            self,
            Route::Version
                | Route::Status
                | Route::Watch
                | Route::Targets
                | Route::UpdateStatus
                | Route::Why
                | Route::Caches
                | Route::Pool
                // Values are answered to operators only (the handler withholds them).
                | Route::HostEnv
        )
    }

    /// Whether the request carries a JSON body the server must parse.
    pub fn takes_body(&self) -> bool {
        matches!(
            self,
            Route::PutCredential
                | Route::AddTarget
                | Route::UpdateTarget(_)
                | Route::SetHostCapacity
                | Route::SetHostAdmission
                | Route::ChangeHostEnv
                | Route::SetHostCaches
                | Route::ClearCaches
                | Route::Pause
                | Route::Resume
                | Route::StartSignIn
                | Route::Update
                | Route::JoinPool
        )
    }
}

fn not_found(path: &str) -> ApiError {
    if let Some(rest) = path.strip_prefix("/v") {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if let Ok(n) = digits.parse::<u32>() {
            if n != API_VERSION && rest[digits.len()..].starts_with('/') {
                return ApiError::new(
                    ErrorCode::UnsupportedVersion,
                    format!(
                        "this service speaks API {API_VERSION}, not {n}: update runner-manager \
                         (the service) or use a client for API {API_VERSION}"
                    ),
                );
            }
        }
    }
    ApiError::not_found(format!(
        "no endpoint at {path}: see the runner-manager local API (paths start with /v{API_VERSION}/)"
    ))
}

fn method_not_allowed(method: &str, path: &str, allowed: &[&str]) -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        format!(
            "{path} does not take {method}: use {}",
            allowed.join(" or ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_travels_in_the_query() {
        let t = TargetRef::parse("octo/hello").unwrap().with_profile("wide");
        assert_eq!(t.path(), "/v1/targets/repo/octo/hello?profile=wide");
        let (path, query) = t
            .path()
            .split_once('?')
            .map(|(p, q)| (p.to_owned(), q.to_owned()))
            .unwrap();
        let back = TargetRef::from_path_tail(path.strip_prefix(TARGET_PREFIX).unwrap())
            .unwrap()
            .with_query(Some(&query))
            .unwrap();
        assert_eq!(back, t);
        let default = TargetRef::parse("octo/hello")
            .unwrap()
            .with_profile("default");
        assert_eq!(default.path(), "/v1/targets/repo/octo/hello");
        for bad in [
            "profile=",
            "profile=Wide",
            "profile=a%20b",
            "other=1",
            "profile",
        ] {
            assert!(
                matches!(
                    default.clone().with_query(Some(bad)),
                    Err(TargetRefError::Query(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn target_paths_round_trip() {
        let repo = TargetRef::parse("octo-org/my.repo_1").unwrap();
        assert_eq!(repo.kind, TargetKind::Repo);
        assert_eq!(repo.path(), "/v1/targets/repo/octo-org/my.repo_1");
        let org = TargetRef::parse("octo-org").unwrap();
        assert_eq!(org.path(), "/v1/targets/org/octo-org");
        for t in [&repo, &org] {
            let p = t.path();
            let tail = p.strip_prefix(TARGET_PREFIX).unwrap();
            assert_eq!(&TargetRef::from_path_tail(tail).unwrap(), t);
        }
    }

    #[test]
    fn malformed_target_paths_are_refused() {
        for tail in [
            "repo/only-owner",
            "org/a/b",
            "team/x",
            "repo/a%2Fb",
            "repo/a/..",
            "org/",
            "repo/a/b/",
        ] {
            assert!(TargetRef::from_path_tail(tail).is_err(), "{tail}");
        }
    }

    #[test]
    fn routes_resolve_and_refuse() {
        assert_eq!(Route::resolve("GET", STATUS).unwrap(), Route::Status);
        assert_eq!(Route::resolve("POST", SIGN_IN).unwrap(), Route::StartSignIn);
        assert_eq!(Route::resolve("GET", SIGN_IN).unwrap(), Route::SignInStatus);
        assert_eq!(
            Route::resolve("DELETE", SIGN_IN).unwrap(),
            Route::CancelSignIn
        );
        assert_eq!(Route::resolve("GET", UPDATE).unwrap(), Route::UpdateStatus);
        assert_eq!(Route::resolve("POST", UPDATE).unwrap(), Route::Update);
        assert!(Route::UpdateStatus.is_read_only() && !Route::Update.is_read_only());
        // Sign-in shows a user code another local user could enter first: operators only.
        assert!(!Route::SignInStatus.is_read_only());
        // The doctor may ask GitHub and reads the host's directories: operators only.
        assert_eq!(
            Route::resolve("GET", HOST_DOCTOR).unwrap(),
            Route::HostDoctor
        );
        assert!(!Route::HostDoctor.is_read_only());
        assert!(!Route::HostDoctor.takes_body());
        // Changing admission is an operator's change with a body.
        assert_eq!(
            Route::resolve("PATCH", HOST_ADMISSION).unwrap(),
            Route::SetHostAdmission
        );
        assert!(!Route::SetHostAdmission.is_read_only() && Route::SetHostAdmission.takes_body());
        // The runner environment: read by readers (names only), changed by operators.
        assert_eq!(Route::resolve("GET", HOST_ENV).unwrap(), Route::HostEnv);
        assert_eq!(Route::resolve("GET", CACHES).unwrap(), Route::Caches);
        assert!(Route::Caches.is_read_only() && !Route::Caches.takes_body());
        let clear = Route::resolve("POST", CACHES_CLEAR).unwrap();
        assert!(!clear.is_read_only() && clear.takes_body());
        let cap = Route::resolve("PATCH", HOST_CACHES).unwrap();
        assert_eq!(cap, Route::SetHostCaches);
        assert!(!cap.is_read_only() && cap.takes_body());
        assert!(Route::resolve("DELETE", CACHES).is_err());
        assert_eq!(
            Route::resolve("PATCH", HOST_ENV).unwrap(),
            Route::ChangeHostEnv
        );
        assert!(Route::HostEnv.is_read_only() && !Route::HostEnv.takes_body());
        assert!(!Route::ChangeHostEnv.is_read_only() && Route::ChangeHostEnv.takes_body());
        assert_eq!(
            Route::resolve("PUT", HOST_ADMISSION).unwrap_err().code,
            ErrorCode::MethodNotAllowed
        );
        assert_eq!(
            Route::resolve("POST", HOST_DOCTOR).unwrap_err().code,
            ErrorCode::MethodNotAllowed
        );
        assert_eq!(
            Route::resolve("DELETE", "/v1/targets/org/acme").unwrap(),
            Route::RemoveTarget(TargetRef::parse("acme").unwrap())
        );
        let e = Route::resolve("POST", STATUS).unwrap_err();
        assert_eq!(e.code, ErrorCode::MethodNotAllowed);
        assert!(e.message.contains("use GET"));
        assert_eq!(
            Route::resolve("GET", "/v1/nope").unwrap_err().code,
            ErrorCode::NotFound
        );
        assert_eq!(
            Route::resolve("GET", "/v2/status").unwrap_err().code,
            ErrorCode::UnsupportedVersion
        );
        assert_eq!(
            Route::resolve("PUT", "/v1/targets/org/acme")
                .unwrap_err()
                .code,
            ErrorCode::MethodNotAllowed
        );
        assert_eq!(
            Route::resolve("PATCH", "/v1/targets/org/a%20b")
                .unwrap_err()
                .code,
            ErrorCode::BadRequest
        );
    }
}
