//! The Windows named pipe's rules, as pure functions so they are unit-tested on every platform:
//! its name, its security descriptor, what a client asks for when it opens it, who counts as an
//! administrator, and whether the process serving it is the real service.
//!
//! Only `win32.rs` (compiled on Windows) calls the OS; it gathers the facts and these
//! functions decide.

use crate::sid::Sid;
use std::fmt::Write as _;
use std::path::Path;
use thiserror::Error;

/// Every runner-manager pipe name starts with this; [`pipe_name`] adds the instance part.
pub const PIPE_PREFIX: &str = r"\\.\pipe\runner-manager-";

/// Win32 error codes the transport tells apart (`ERROR_FILE_NOT_FOUND`: no such pipe).
pub const ERROR_FILE_NOT_FOUND: i32 = 2;
/// `ERROR_ACCESS_DENIED`: the DACL refused us, or (creating) the pipe exists already.
pub const ERROR_ACCESS_DENIED: i32 = 5;
/// `ERROR_PIPE_BUSY`: every instance is connected; retry shortly.
pub const ERROR_PIPE_BUSY: i32 = 231;

/// `FILE_GENERIC_READ` (includes `READ_CONTROL`, so the client can read the pipe's owner).
const FILE_GENERIC_READ: u32 = 0x0012_0089;
/// `FILE_WRITE_DATA`.
const FILE_WRITE_DATA: u32 = 0x0000_0002;
/// `FILE_CREATE_PIPE_INSTANCE` (same bit as `FILE_APPEND_DATA`): whoever holds it on the pipe
/// can create a server instance of it and so receive the next client. Never granted to users.
pub const FILE_CREATE_PIPE_INSTANCE: u32 = 0x0000_0004;

/// What a client asks for when it opens the pipe, and what the DACL grants authenticated users:
/// read, write data, read the security descriptor. Deliberately not `GENERIC_WRITE` (which
/// maps to `FILE_GENERIC_WRITE` and so includes [`FILE_CREATE_PIPE_INSTANCE`]).
pub const CLIENT_ACCESS: u32 = FILE_GENERIC_READ | FILE_WRITE_DATA;

/// `SE_GROUP_ENABLED`: the group counts for access checks.
pub const SE_GROUP_ENABLED: u32 = 0x0000_0004;
/// `SE_GROUP_USE_FOR_DENY_ONLY`: the group only matches deny entries (an administrator's
/// UAC-filtered, non-elevated token has Administrators this way).
pub const SE_GROUP_USE_FOR_DENY_ONLY: u32 = 0x0000_0010;

/// The pipe of the service whose data directory is `data_dir`:
/// `\\.\pipe\runner-manager-<16 hex digits>`, the digits a 64-bit FNV-1a hash of the directory
/// after normalisation (ASCII `/` → `\`, lower case, no trailing `\`, no `\\?\` prefix), since
/// Windows paths ignore case and both separators. Each installation (data directory) gets its
/// own pipe, and the service and its clients find the same name from the same directory.
/// The hash is fixed here (not std's `DefaultHasher`, which may change between Rust releases).
pub fn pipe_name(data_dir: &Path) -> String {
    let text = data_dir.to_string_lossy();
    let text = text.strip_prefix(r"\\?\").unwrap_or(&text);
    let normalised: String = text.replace('/', "\\").to_lowercase();
    let normalised = normalised.trim_end_matches('\\');
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in normalised.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{PIPE_PREFIX}{hash:016x}")
}

/// The pipe's security descriptor in SDDL: a protected DACL (nothing inherited) that denies
/// network logons, gives LocalSystem, Administrators and the service's own account full
/// control (the service must be able to create further instances), and lets authenticated
/// local users connect with [`CLIENT_ACCESS`] only. Windows' default pipe DACL would give
/// Everyone read access only, so operators could not send requests.
pub fn pipe_sddl(service_user: &Sid) -> String {
    let mut sddl = String::from("D:P(D;;GA;;;NU)(A;;GA;;;SY)(A;;GA;;;BA)");
    if *service_user != Sid::LOCAL_SYSTEM {
        let _ = write!(sddl, "(A;;GA;;;{service_user})");
    }
    let _ = write!(sddl, "(A;;0x{CLIENT_ACCESS:08x};;;AU)");
    sddl
}

/// Whether a token with these groups (SID, `SE_GROUP_*` attributes) acts as an administrator:
/// it holds Administrators enabled, not deny-only. A non-elevated administrator is not one
/// (as on Unix, where a sudoer is not root until they use sudo).
pub fn is_admin_by_groups(groups: impl IntoIterator<Item = (Sid, u32)>) -> bool {
    groups.into_iter().any(|(sid, attributes)| {
        sid == Sid::ADMINISTRATORS
            && attributes & SE_GROUP_ENABLED != 0
            && attributes & SE_GROUP_USE_FOR_DENY_ONLY == 0
    })
}

/// What a client learnt about the process serving the pipe it opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerEvidence {
    /// `GetNamedPipeServerProcessId`.
    pub pid: u32,
    /// The user of that process's token; `None` when this client may not read it (an ordinary
    /// user may not open a LocalSystem process's token).
    pub process_user: Option<Sid>,
    /// The owner of the pipe object; `None` when it could not be read.
    pub pipe_owner: Option<Sid>,
}

/// The pipe is served by a process that is not the runner-manager service.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "the pipe is served by process {pid} running as {user}, pipe owned by {owner}, which is \
     neither LocalSystem nor you: it is not the runner-manager service (another program may \
     have taken its pipe name). Nothing was sent. Find that program with `Get-Process -Id \
     {pid}`, stop it, then restart the service: `sc.exe stop runner-manager` and `sc.exe \
     start runner-manager`"
)]
pub struct UntrustedServer {
    pub pid: u32,
    pub user: String,
    pub owner: String,
}

/// Whether the pipe's server is the real service, seen from a client running as `me`.
///
/// Trusted when its process runs as LocalSystem or as `me` (a per-user service), or when the
/// pipe object is owned by LocalSystem, Administrators or `me`: an ordinary user can only
/// create objects owned by themselves, so a squatter's pipe fails both tests (unless the
/// squatter is `me`, who gains nothing). The owner test covers the usual case where an
/// ordinary operator may not read the LocalSystem process's token.
pub fn verify_server(evidence: &ServerEvidence, me: &Sid) -> Result<(), UntrustedServer> {
    let by_process = evidence
        .process_user
        .is_some_and(|u| u == Sid::LOCAL_SYSTEM || u == *me);
    let by_owner = evidence
        .pipe_owner
        .is_some_and(|o| o == Sid::LOCAL_SYSTEM || o == Sid::ADMINISTRATORS || o == *me);
    if by_process || by_owner {
        return Ok(());
    }
    let show =
        |sid: Option<Sid>, unknown: &str| sid.map_or_else(|| unknown.to_owned(), |s| s.to_string());
    Err(UntrustedServer {
        pid: evidence.pid,
        user: show(
            evidence.process_user,
            "an account this user may not inspect",
        ),
        owner: show(evidence.pipe_owner, "an unreadable owner"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn sid(text: &str) -> Sid {
        text.parse().unwrap()
    }

    const ME: &str = "S-1-5-21-1-2-3-1001";
    const OTHER: &str = "S-1-5-21-1-2-3-1002";

    #[test]
    fn pipe_name_is_stable_per_data_dir_and_ignores_case_and_separators() {
        let a = pipe_name(Path::new(r"C:\ProgramData\runner-manager"));
        assert!(a.starts_with(PIPE_PREFIX), "{a}");
        assert_eq!(a.len(), PIPE_PREFIX.len() + 16);
        assert!(a[PIPE_PREFIX.len()..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit()));
        // The same directory written differently is the same pipe.
        for same in [
            r"c:\programdata\RUNNER-MANAGER",
            "C:/ProgramData/runner-manager/",
            r"\\?\C:\ProgramData\runner-manager",
        ] {
            assert_eq!(pipe_name(&PathBuf::from(same)), a, "{same}");
        }
        // Another installation gets another pipe; the value is pinned so that a change of the
        // hash (which would strand clients of a running service) fails this test.
        assert_ne!(pipe_name(Path::new(r"D:\rm")), a);
        assert_eq!(
            pipe_name(Path::new("")),
            format!("{PIPE_PREFIX}cbf29ce484222325")
        );
        assert_eq!(
            pipe_name(Path::new("a")),
            format!("{PIPE_PREFIX}af63dc4c8601ec8c")
        );
        // A pipe name may hold any character but `\` after the prefix.
        assert!(!a[r"\\.\pipe\".len()..].contains('\\'));
    }

    #[test]
    fn sddl_lets_users_connect_but_never_create_instances() {
        let system = pipe_sddl(&Sid::LOCAL_SYSTEM);
        assert_eq!(
            system,
            "D:P(D;;GA;;;NU)(A;;GA;;;SY)(A;;GA;;;BA)(A;;0x0012008b;;;AU)"
        );
        assert_eq!(CLIENT_ACCESS & FILE_CREATE_PIPE_INSTANCE, 0);
        // READ_CONTROL lets a client check the pipe's owner.
        assert_ne!(CLIENT_ACCESS & 0x0002_0000, 0);
        let per_user = pipe_sddl(&sid(ME));
        assert!(per_user.contains(&format!("(A;;GA;;;{ME})")), "{per_user}");
        assert!(
            per_user.starts_with("D:P(D;;GA;;;NU)"),
            "deny first: {per_user}"
        );
    }

    #[test]
    fn only_an_enabled_administrators_group_makes_an_administrator() {
        let users = sid("S-1-5-32-545");
        assert!(is_admin_by_groups([
            (users, SE_GROUP_ENABLED),
            (Sid::ADMINISTRATORS, SE_GROUP_ENABLED | 0x3),
        ]));
        // UAC-filtered token of a non-elevated administrator.
        assert!(!is_admin_by_groups([(
            Sid::ADMINISTRATORS,
            SE_GROUP_USE_FOR_DENY_ONLY
        )]));
        assert!(!is_admin_by_groups([(
            Sid::ADMINISTRATORS,
            SE_GROUP_ENABLED | SE_GROUP_USE_FOR_DENY_ONLY
        )]));
        assert!(!is_admin_by_groups([(users, SE_GROUP_ENABLED)]));
        assert!(!is_admin_by_groups([]));
    }

    #[test]
    fn server_is_trusted_as_system_or_as_the_client_and_a_squatter_is_not() {
        let me = sid(ME);
        let ev = |user: Option<Sid>, owner: Option<Sid>| ServerEvidence {
            pid: 4242,
            process_user: user,
            pipe_owner: owner,
        };
        assert!(verify_server(&ev(Some(Sid::LOCAL_SYSTEM), None), &me).is_ok());
        assert!(verify_server(&ev(Some(me), Some(me)), &me).is_ok());
        // An operator may not read LocalSystem's token: the owner decides.
        assert!(verify_server(&ev(None, Some(Sid::LOCAL_SYSTEM)), &me).is_ok());
        assert!(verify_server(&ev(None, Some(Sid::ADMINISTRATORS)), &me).is_ok());
        // Another user's pipe.
        let e = verify_server(&ev(Some(sid(OTHER)), Some(sid(OTHER))), &me).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("process 4242") && text.contains(OTHER),
            "{text}"
        );
        assert!(text.contains("Get-Process -Id 4242"), "{text}");
        let e = verify_server(&ev(None, None), &me).unwrap_err();
        assert!(e.to_string().contains("may not inspect"), "{e}");
        assert!(verify_server(&ev(None, Some(sid(OTHER))), &me).is_err());
    }
}
