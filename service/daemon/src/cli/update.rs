//! `runner-manager update [--check]`: asks the service's updater (the service is the one that
//! updates; this prints what it does and waits for the new version to answer).

use std::path::Path;
use std::time::{Duration, Instant};

use rm_proto::{Client, Event, UpdateRequest, UpdateState, UpdateStatus, WatchMessage};

use super::backend_api::{client_failure, ApiBackend};
use crate::exit::{ExitCode, Failure};

/// How long `update` waits for the service to come back with the new version (running jobs
/// finish first, so this can take a while; the update goes on after the CLI gave up waiting).
const WAIT: Duration = Duration::from_secs(30 * 60);

fn print_status(s: &UpdateStatus) {
    println!(
        "runner-manager {} ({} install, updates: {})",
        s.current_version,
        s.install_kind.as_str(),
        s.mode.as_str()
    );
    let line = match s.state {
        UpdateState::UpToDate => "up to date".to_owned(),
        UpdateState::Available => format!(
            "runner-manager {} is available",
            s.available_version.as_deref().unwrap_or("?")
        ),
        UpdateState::Applying => format!(
            "applying runner-manager {}",
            s.available_version.as_deref().unwrap_or("?")
        ),
        UpdateState::Updated => format!(
            "updated from {}",
            s.previous_version.as_deref().unwrap_or("?")
        ),
        UpdateState::Failed => "the last update failed".to_owned(),
        UpdateState::Idle => "not checked yet".to_owned(),
        other => format!("{other:?}").to_lowercase(),
    };
    println!("{line}");
    if let Some(m) = &s.message {
        println!("  {m}");
    }
    if let Some(f) = &s.fix {
        println!("  fix: {f}");
    }
}

/// `update --trusted-keys`: the keys a release must be signed with, as this binary sees them
/// (what a release build embeds is the key `scripts/release.sh` signed it with).
pub fn trusted_keys(data_dir: &Path) -> Result<(), Failure> {
    use crate::update::verify::{key_line, BUILT_IN_KEY, LEARNT_KEY_FILE};
    let built_in = key_line(BUILT_IN_KEY).ok_or_else(|| {
        Failure::internal("this build embeds no release key: rebuild it with scripts/release.sh")
    })?;
    println!("built in: {built_in}");
    let learnt = data_dir.join(LEARNT_KEY_FILE);
    match std::fs::read_to_string(&learnt) {
        Ok(text) => match key_line(&text) {
            Some(key) => println!(
                "learnt from a release that rotated the key: {key} ({})",
                learnt.display()
            ),
            None => println!(
                "{} holds no key: the next release that rotates the key writes it again",
                learnt.display()
            ),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        // Not an operator of this data directory: the built-in key is still the answer.
        Err(e) => println!(
            "a key learnt from a release that rotated the key would be in {}, unreadable here \
             ({e}): run this as the service's user to see it",
            learnt.display()
        ),
    }
    Ok(())
}

pub fn run(socket: &Path, check: bool, no_wait: bool) -> Result<(), Failure> {
    let api = ApiBackend::connect(socket)?;
    if check {
        let s = api
            .block_on(api.client().update(&UpdateRequest { apply: false }))
            .map_err(client_failure)?;
        print_status(&s);
        return Ok(());
    }
    let s = api.block_on(apply_with_progress(api.client()))?;
    print_status(&s);
    match s.state {
        UpdateState::Applying => {}
        UpdateState::Failed => {
            return Err(Failure::new(
                ExitCode::Internal,
                format!(
                    "{}; {}",
                    s.message.unwrap_or_else(|| "the update failed".into()),
                    s.fix.unwrap_or_default()
                ),
            ))
        }
        UpdateState::Available => {
            return Err(Failure::new(
                ExitCode::Unsupported,
                s.message
                    .unwrap_or_else(|| "this install cannot be updated by the service".into()),
            ))
        }
        _ => return Ok(()),
    }
    let new = s.available_version.unwrap_or_default();
    if no_wait {
        println!("the service applies it once running jobs finish");
        return Ok(());
    }
    println!("waiting for running jobs to finish and runner-manager {new} to answer…");
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        let answer = api.block_on(async {
            let c = Client::connect(socket).await.ok()?;
            let v = c.version().await.ok()?;
            let u = c.update_status().await.ok();
            Some((v.service_version, u))
        });
        match answer {
            Some((v, _)) if v == new => {
                println!("updated to {new}");
                return Ok(());
            }
            Some((_, Some(u))) if u.state == UpdateState::Failed => {
                return Err(Failure::new(
                    ExitCode::Internal,
                    format!(
                        "the update to {new} failed: {}",
                        u.message.unwrap_or_default()
                    ),
                ));
            }
            _ => std::thread::sleep(Duration::from_millis(500)),
        }
    }
    Err(Failure::new(
        ExitCode::Internal,
        format!(
            "runner-manager {new} did not answer within {} min (jobs may still be running); \
             see `runner-manager update --check`",
            WAIT.as_secs() / 60
        ),
    ))
}

/// `POST /v1/update {"apply": true}`, printing the download progress the service publishes
/// meanwhile.
async fn apply_with_progress(client: &Client) -> Result<UpdateStatus, Failure> {
    let mut watch = client.watch().await.ok();
    let request = client.update(&UpdateRequest { apply: true });
    tokio::pin!(request);
    let mut last_pct = None;
    loop {
        tokio::select! {
            r = &mut request => return r.map_err(client_failure),
            Some(Ok(m)) = async {
                match watch.as_mut() {
                    Some(w) => w.next().await,
                    None => std::future::pending().await,
                }
            } => {
                if let WatchMessage::Event { event: Event::UpdateProgress { downloaded, total: Some(t), new_version, .. } } = m {
                    let pct = (downloaded * 100).checked_div(t).unwrap_or(0);
                    if last_pct != Some(pct / 10) {
                        last_pct = Some(pct / 10);
                        eprintln!("downloading runner-manager {new_version}: {pct} %");
                    }
                }
            }
        }
    }
}
