//! `runner-manager pool join|leave|status`: this host in a pool of hosts serving one label.
//! The service holds the connection; the CLI asks it. The password is read from standard input
//! (never argv: process lists and shell histories keep argv).

use super::backend_api::{client_failure, ApiBackend};
use super::PoolCommand;
use crate::exit::Failure;
use rm_proto::{PoolJoin, PoolStatus, SecretString};
use std::io::BufRead;
use std::path::Path;

pub fn run(socket: &Path, cmd: PoolCommand) -> Result<(), Failure> {
    match cmd {
        PoolCommand::Join {
            url,
            label,
            host,
            password_stdin,
        } => {
            let password = password_stdin.then(read_password).transpose()?;
            let api = ApiBackend::connect(socket)?;
            let join = PoolJoin {
                url,
                password,
                label,
                host,
            };
            let status = api
                .block_on(api.client().join_pool(&join))
                .map_err(client_failure)?;
            println!(
                "Joined the pool '{}' at {} as {}.",
                status.label, status.address, status.host_id
            );
            println!(
                "Give a target the pool's label to place its jobs through the pool: \
                 `runner-manager repo set OWNER/REPO --label {}` (jobs ask for it with \
                 `runs-on: [{}]`).",
                status.label, status.label
            );
            Ok(())
        }
        PoolCommand::Leave => {
            let api = ApiBackend::connect(socket)?;
            api.block_on(api.client().leave_pool())
                .map_err(client_failure)?;
            println!("Left the pool: this host serves alone.");
            Ok(())
        }
        PoolCommand::Status { json } => {
            let api = ApiBackend::connect(socket)?;
            let status = api.block_on(api.client().pool()).map_err(client_failure)?;
            if json {
                let text = serde_json::to_string_pretty(&status).map_err(|e| {
                    Failure::internal(format!("cannot encode the answer as JSON: {e}"))
                })?;
                println!("{text}");
            } else {
                print!("{}", render(&status));
            }
            Ok(())
        }
    }
}

/// One line of standard input, without its line end.
fn read_password() -> Result<SecretString, Failure> {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).map_err(|e| {
        Failure::usage(format!("cannot read the password from standard input: {e}"))
    })?;
    let password = line.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        return Err(Failure::usage(
            "no password on standard input: pipe it in (`… --password-stdin < file`), or drop \
             `--password-stdin` when the database needs none",
        ));
    }
    Ok(SecretString::new(password))
}

/// The pool as text.
pub fn render(s: &PoolStatus) -> String {
    let mut out = format!(
        "Pool '{}' at {} · this host: {} · {}\n",
        s.label,
        s.address,
        s.host_id,
        match s.state.as_str() {
            "connected" => "connected",
            "connecting" => "connecting",
            _ => "pool database unreachable",
        }
    );
    if let Some(m) = &s.message {
        out.push_str(&format!("  {m}\n"));
    }
    if !s.hosts.is_empty() {
        out.push_str("Hosts:\n");
        for h in &s.hosts {
            out.push_str(&format!(
                "  {}{}: {} of {} free, starting {}{}\n",
                h.host_id,
                if h.host_id == s.host_id {
                    " (this host)"
                } else {
                    ""
                },
                h.free,
                h.capacity,
                h.claims,
                if h.alive {
                    ""
                } else {
                    " · silent (its jobs go to the others)"
                }
            ));
        }
    }
    if !s.claims.is_empty() {
        out.push_str("Runners starting for queued jobs:\n");
        for c in &s.claims {
            out.push_str(&format!(
                "  job {} of {} → {} on {}\n",
                c.job_id, c.target, c.runner, c.host_id
            ));
        }
    }
    out
}
