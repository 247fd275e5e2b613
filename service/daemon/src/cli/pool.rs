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
                 `runner-manager repo set OWNER/REPO --pool` (jobs ask for it with \
                 `runs-on: [{}]`).",
                status.label
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
            "refused" => "the pool database refuses this host",
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
            for r in &h.running {
                let job = match (r.job_id, &r.job_name) {
                    (Some(id), Some(name)) => format!("job {id} ({name})"),
                    (Some(id), None) => format!("job {id}"),
                    _ => "no job yet".to_owned(),
                };
                out.push_str(&format!("    {}: {job} on {}\n", r.target, r.runner));
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use rm_proto::{PoolHostStatus, PoolRunnerStatus};

    #[test]
    fn each_host_is_shown_with_what_its_runners_run() {
        let runner = |name: &str, job: Option<(u64, &str)>| PoolRunnerStatus {
            runner: name.into(),
            target: "octo/hello".into(),
            job_id: job.map(|j| j.0),
            job_name: job.map(|j| j.1.to_owned()),
        };
        let status = PoolStatus {
            label: "rm-pool".into(),
            address: "db:5432".into(),
            host_id: "h1".into(),
            state: "connected".into(),
            message: None,
            since: None,
            hosts: vec![
                PoolHostStatus {
                    host_id: "h1".into(),
                    capacity: 3,
                    free: 1,
                    alive: true,
                    claims: 1,
                    running: vec![runner("rm-a", Some((42, "build"))), runner("rm-b", None)],
                },
                PoolHostStatus {
                    host_id: "h2".into(),
                    capacity: 2,
                    free: 2,
                    alive: false,
                    claims: 0,
                    running: vec![],
                },
            ],
            claims: vec![],
        };
        let text = render(&status);
        assert_eq!(
            text,
            "Pool 'rm-pool' at db:5432 · this host: h1 · connected\n\
             Hosts:\n\
             \x20 h1 (this host): 1 of 3 free, starting 1\n\
             \x20   octo/hello: job 42 (build) on rm-a\n\
             \x20   octo/hello: no job yet on rm-b\n\
             \x20 h2: 2 of 2 free, starting 0 · silent (its jobs go to the others)\n"
        );
    }
}
