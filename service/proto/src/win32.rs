//! The only unsafe code of rm-proto: the Win32 calls of the named-pipe transport.
//!
//! Why unsafe at all: no safe crate exposes who is on the other end of a named pipe (the
//! client's process token for the server, the server's process token and the pipe's owner for
//! the client), nor creating a pipe with an explicit security descriptor or opening one with
//! exactly the access we want. tokio gives the pipes; these few calls fill the gap. Everything
//! here gathers facts; the decisions are the pure functions of [`crate::pipe`] and
//! [`crate::server::AccessPolicy`], tested on every platform. Handles and OS-allocated memory
//! are released by RAII guards ([`Handle`], [`LocalBox`]).
#![allow(unsafe_code)]
// The client uses the client half, the server the server half; with one feature the other
// half is unused.
#![cfg_attr(
    not(all(feature = "client", feature = "server")),
    allow(dead_code, unused_imports)
)]

use crate::pipe::{self, ServerEvidence};
use crate::sid::Sid;
use std::ffi::{c_void, OsStr};
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::io::{AsRawHandle, RawHandle};
use std::ptr;
use windows_sys::Win32::Foundation::{
    CloseHandle, LocalFree, ERROR_INSUFFICIENT_BUFFER, HANDLE, INVALID_HANDLE_VALUE,
};
use windows_sys::Win32::Security::Authorization::{
    ConvertStringSecurityDescriptorToSecurityDescriptorW, GetSecurityInfo, SDDL_REVISION_1,
    SE_KERNEL_OBJECT,
};
use windows_sys::Win32::Security::{
    GetLengthSid, GetTokenInformation, IsValidSid, TokenGroups, TokenUser,
    OWNER_SECURITY_INFORMATION, PSID, SECURITY_ATTRIBUTES, SID_AND_ATTRIBUTES,
    TOKEN_INFORMATION_CLASS, TOKEN_QUERY, TOKEN_USER,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, FILE_FLAG_OVERLAPPED, OPEN_EXISTING, SECURITY_IDENTIFICATION,
    SECURITY_SQOS_PRESENT,
};
use windows_sys::Win32::System::Pipes::{GetNamedPipeClientProcessId, GetNamedPipeServerProcessId};
use windows_sys::Win32::System::Threading::{
    GetCurrentProcess, OpenProcess, OpenProcessToken, PROCESS_QUERY_LIMITED_INFORMATION,
};

/// An owned kernel handle, closed on drop.
struct Handle(HANDLE);

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle was returned open by the OS, is owned only by this guard and is
        // closed exactly once, here.
        unsafe {
            CloseHandle(self.0);
        }
    }
}

/// Memory the OS allocated with `LocalAlloc` for us (security descriptors), freed on drop.
struct LocalBox(*mut c_void);

impl Drop for LocalBox {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the pointer came from an API documented to allocate with LocalAlloc and
            // to hand ownership to the caller; it is freed exactly once, here.
            unsafe {
                LocalFree(self.0);
            }
        }
    }
}

fn raw(handle: &impl AsRawHandle) -> HANDLE {
    let h: RawHandle = handle.as_raw_handle();
    h as HANDLE
}

fn wide(text: &OsStr) -> Vec<u16> {
    text.encode_wide().chain(std::iter::once(0)).collect()
}

fn invalid(detail: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, detail.into())
}

/// Copies the SID at `psid` into a [`Sid`].
///
/// # Safety
/// `psid` must be null or point at memory that stays valid for this call.
unsafe fn sid_at(psid: PSID) -> io::Result<Sid> {
    if psid.is_null() {
        return Err(invalid("no SID"));
    }
    // SAFETY: `psid` is non-null and valid per this function's contract; IsValidSid only reads.
    if unsafe { IsValidSid(psid) } == 0 {
        return Err(invalid("invalid SID"));
    }
    // SAFETY: the SID was just validated, so GetLengthSid reads its header within bounds.
    let len = unsafe { GetLengthSid(psid) } as usize;
    // SAFETY: a valid SID is exactly `len` readable bytes at `psid`, alive for this call.
    let bytes = unsafe { std::slice::from_raw_parts(psid as *const u8, len) };
    Sid::from_bytes(bytes).map_err(|e| invalid(e.to_string()))
}

/// The token of process `pid`, opened for query.
fn process_token(pid: u32) -> io::Result<Handle> {
    // SAFETY: plain call with no pointers; a null result is checked below.
    let process = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) };
    if process.is_null() {
        return Err(io::Error::last_os_error());
    }
    let process = Handle(process);
    open_token(process.0)
}

fn open_token(process: HANDLE) -> io::Result<Handle> {
    let mut token: HANDLE = ptr::null_mut();
    // SAFETY: `process` is an open process handle (or the current-process pseudo handle) and
    // `token` is a valid out pointer.
    if unsafe { OpenProcessToken(process, TOKEN_QUERY, &mut token) } == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Handle(token))
}

/// One `GetTokenInformation` class, in a buffer aligned for the structures it holds.
fn token_info(token: &Handle, class: TOKEN_INFORMATION_CLASS) -> io::Result<Vec<u64>> {
    let mut needed = 0u32;
    // SAFETY: a null buffer of length 0 asks only for the size, written to `needed`.
    let ok = unsafe { GetTokenInformation(token.0, class, ptr::null_mut(), 0, &mut needed) };
    if ok == 0 {
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(ERROR_INSUFFICIENT_BUFFER as i32) {
            return Err(error);
        }
    }
    let mut buffer = vec![0u64; (needed as usize).div_ceil(8).max(1)];
    let len = u32::try_from(buffer.len() * 8).map_err(|_| invalid("token info too large"))?;
    // SAFETY: `buffer` is writable for `len` bytes and 8-byte aligned, enough for the token
    // structures (pointers and u32s).
    let ok = unsafe {
        GetTokenInformation(token.0, class, buffer.as_mut_ptr().cast(), len, &mut needed)
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(buffer)
}

fn token_user(token: &Handle) -> io::Result<Sid> {
    let buffer = token_info(token, TokenUser)?;
    // SAFETY: GetTokenInformation(TokenUser) filled `buffer` with a TOKEN_USER whose SID
    // pointer points inside `buffer`, which lives until the end of this function.
    unsafe {
        let user = &*(buffer.as_ptr() as *const TOKEN_USER);
        sid_at(user.User.Sid)
    }
}

fn token_groups(token: &Handle) -> io::Result<Vec<(Sid, u32)>> {
    let buffer = token_info(token, TokenGroups)?;
    // SAFETY: GetTokenInformation(TokenGroups) filled `buffer` with a TOKEN_GROUPS header
    // followed by `GroupCount` SID_AND_ATTRIBUTES whose SIDs point inside `buffer`, which
    // lives until the end of this function. The first field is a u32 count.
    unsafe {
        let count = *(buffer.as_ptr() as *const u32) as usize;
        let first = (buffer.as_ptr() as *const u8).add(std::mem::offset_of!(
            windows_sys::Win32::Security::TOKEN_GROUPS,
            Groups
        )) as *const SID_AND_ATTRIBUTES;
        let groups = std::slice::from_raw_parts(first, count);
        groups
            .iter()
            .map(|g| sid_at(g.Sid).map(|sid| (sid, g.Attributes)))
            .collect()
    }
}

/// The user this process runs as.
pub(crate) fn current_user() -> io::Result<Sid> {
    // SAFETY: GetCurrentProcess returns a pseudo handle that needs no closing.
    let me = unsafe { GetCurrentProcess() };
    token_user(&open_token(me)?)
}

/// Who connected to this server end: (pid, user, acts as administrator).
pub(crate) fn pipe_client_identity(pipe: &impl AsRawHandle) -> io::Result<(u32, Sid, bool)> {
    let mut pid = 0u32;
    // SAFETY: `pipe` is an open pipe handle borrowed for this call; `pid` is a valid out
    // pointer.
    if unsafe { GetNamedPipeClientProcessId(raw(pipe), &mut pid) } == 0 {
        return Err(io::Error::last_os_error());
    }
    let token = process_token(pid)?;
    let user = token_user(&token)?;
    let is_admin = pipe::is_admin_by_groups(token_groups(&token)?);
    Ok((pid, user, is_admin))
}

/// What this client end can learn about the process serving the pipe.
pub(crate) fn pipe_server_evidence(pipe: &impl AsRawHandle) -> io::Result<ServerEvidence> {
    let mut pid = 0u32;
    // SAFETY: `pipe` is an open pipe handle borrowed for this call; `pid` is a valid out
    // pointer.
    if unsafe { GetNamedPipeServerProcessId(raw(pipe), &mut pid) } == 0 {
        return Err(io::Error::last_os_error());
    }
    let process_user = process_token(pid).and_then(|t| token_user(&t)).ok();
    let pipe_owner = owner_of(pipe).ok();
    Ok(ServerEvidence {
        pid,
        process_user,
        pipe_owner,
    })
}

/// The owner SID of a kernel object (needs `READ_CONTROL` on the handle).
fn owner_of(object: &impl AsRawHandle) -> io::Result<Sid> {
    let mut owner: PSID = ptr::null_mut();
    let mut descriptor: *mut c_void = ptr::null_mut();
    // SAFETY: the handle is open for this call; the out pointers are valid; on success the
    // descriptor is ours to LocalFree and `owner` points inside it.
    let status = unsafe {
        GetSecurityInfo(
            raw(object),
            SE_KERNEL_OBJECT,
            OWNER_SECURITY_INFORMATION,
            &mut owner,
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            &mut descriptor,
        )
    };
    let descriptor = LocalBox(descriptor);
    if status != 0 {
        return Err(io::Error::from_raw_os_error(status as i32));
    }
    // SAFETY: `owner` points inside `descriptor`, which is alive until the end of this
    // function.
    let sid = unsafe { sid_at(owner) };
    drop(descriptor);
    sid
}

/// Creates one server instance of pipe `name` with the security descriptor `sddl`, refusing
/// remote clients; with `first`, fails if the pipe already exists (anti-squatting).
pub(crate) fn create_pipe_server(
    name: &str,
    first: bool,
    sddl: &str,
) -> io::Result<tokio::net::windows::named_pipe::NamedPipeServer> {
    let mut descriptor: *mut c_void = ptr::null_mut();
    let text = wide(OsStr::new(sddl));
    // SAFETY: `text` is a NUL-terminated UTF-16 string alive for the call; `descriptor` is a
    // valid out pointer; on success the descriptor is ours to LocalFree.
    let ok = unsafe {
        ConvertStringSecurityDescriptorToSecurityDescriptorW(
            text.as_ptr(),
            SDDL_REVISION_1,
            &mut descriptor,
            ptr::null_mut(),
        )
    };
    let descriptor = LocalBox(descriptor);
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    let mut attributes = SECURITY_ATTRIBUTES {
        nLength: std::mem::size_of::<SECURITY_ATTRIBUTES>() as u32,
        lpSecurityDescriptor: descriptor.0,
        bInheritHandle: 0,
    };
    // SAFETY: `attributes` is a valid SECURITY_ATTRIBUTES whose descriptor outlives the call
    // (CreateNamedPipe copies it into the pipe object).
    let server = unsafe {
        tokio::net::windows::named_pipe::ServerOptions::new()
            .first_pipe_instance(first)
            .reject_remote_clients(true)
            .create_with_security_attributes_raw(
                name,
                (&mut attributes as *mut SECURITY_ATTRIBUTES).cast(),
            )
    };
    drop(descriptor);
    server
}

/// Opens the client end of pipe `name` with [`pipe::CLIENT_ACCESS`] only (tokio's
/// `ClientOptions` asks for `GENERIC_WRITE`, which the pipe's DACL rightly refuses users), and
/// lets the server identify but not impersonate this client.
pub(crate) fn open_pipe_client(
    name: &OsStr,
) -> io::Result<tokio::net::windows::named_pipe::NamedPipeClient> {
    let path = wide(name);
    // SAFETY: `path` is a NUL-terminated UTF-16 string alive for the call; no security
    // attributes or template are passed.
    let handle = unsafe {
        CreateFileW(
            path.as_ptr(),
            pipe::CLIENT_ACCESS,
            0,
            ptr::null(),
            OPEN_EXISTING,
            FILE_FLAG_OVERLAPPED | SECURITY_SQOS_PRESENT | SECURITY_IDENTIFICATION,
            ptr::null_mut(),
        )
    };
    if handle == INVALID_HANDLE_VALUE {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `handle` is a freshly opened overlapped pipe handle that nothing else owns;
    // tokio takes ownership (and closes it, also if registration fails).
    unsafe {
        tokio::net::windows::named_pipe::NamedPipeClient::from_raw_handle(handle as RawHandle)
    }
}
