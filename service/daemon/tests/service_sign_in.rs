//! Sign-in run by the service (`/v1/sign-in`): the real `runner-manager daemon run` on a real
//! socket runs GitHub's device flow against the fake GitHub, polls in the background, and
//! stores the credential itself. Every transition reaches the watch stream in order; the device
//! code appears nowhere outside the service.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod service_support;

use rm_proto::{
    AuthState, Client, ClientError, ErrorCode, Event, SignInSession, SignInStart, SignInState,
    WatchMessage, WatchStream,
};
use rm_testkit::{EndpointMatch, Fault, FaultRule};
use service_support::*;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Fake GitHub polls allowed every second; codes live 15 minutes unless a test says otherwise.
async fn world() -> World {
    World::with_device_flow(Duration::from_secs(1), Duration::from_secs(900)).await
}

/// A watch that remembers every line it read (to look for leaks) and the sign-in states it saw.
struct Watch {
    stream: WatchStream,
    lines: Vec<String>,
    states: Vec<(String, SignInState)>,
}

impl Watch {
    async fn open(client: &Client) -> Watch {
        let mut stream = client.watch().await.unwrap();
        // The snapshot first: from here on every event is seen.
        match stream.next().await {
            Some(Ok(m @ WatchMessage::Snapshot { .. })) => Watch {
                lines: vec![serde_json::to_string(&m).unwrap()],
                stream,
                states: Vec::new(),
            },
            other => panic!("the watch did not start with a snapshot: {other:?}"),
        }
    }

    /// Reads until session `id` reaches `state`; fails after `limit`.
    async fn until(&mut self, id: &str, state: SignInState, limit: Duration) -> SignInSession {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let next = tokio::time::timeout(left, self.stream.next())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "no sign_in_progress {state:?} for {id} within {limit:?}; saw {:?}",
                        self.states
                    )
                });
            let message = match next {
                Some(Ok(m)) => m,
                other => panic!("the watch ended ({other:?}); saw {:?}", self.states),
            };
            self.lines.push(serde_json::to_string(&message).unwrap());
            if let WatchMessage::Event {
                event: Event::SignInProgress { session },
            } = message
            {
                self.states.push((session.id.clone(), session.state));
                if session.id == id && session.state == state {
                    return session;
                }
            }
        }
    }

    /// The states session `id` went through, repeats folded (a retry publishes each new
    /// `next_try`).
    fn path_of(&self, id: &str) -> Vec<SignInState> {
        let mut path: Vec<SignInState> = Vec::new();
        for (_, s) in self.states.iter().filter(|(i, _)| i == id) {
            if path.last() != Some(s) {
                path.push(*s);
            }
        }
        path
    }
}

async fn start(client: &Client, restart: bool) -> SignInSession {
    client
        .start_sign_in(&SignInStart { restart })
        .await
        .unwrap()
}

/// Asks `GET /v1/sign-in` until `check` holds.
async fn sign_in_until(
    client: &Client,
    d: &Daemon,
    limit: Duration,
    what: &str,
    check: impl Fn(&SignInSession) -> bool,
) -> SignInSession {
    let deadline = Instant::now() + limit;
    loop {
        let s = client.sign_in_status().await.unwrap();
        if check(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for: {what}; last: {s:#?}\n{}",
            d.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every device code the fake issued is absent from the daemon's log, the given answers and
/// every file of the data directory (journal, WAL, credential store, config).
fn assert_no_device_code(w: &World, d: &Daemon, answers: &[String]) {
    let codes = w.gh.issued_device_codes();
    assert!(!codes.is_empty(), "the fake issued no device code");
    let log = d.log_text();
    let files = files_under(&w.data_dir());
    assert!(!files.is_empty(), "the data directory is empty");
    for code in &codes {
        assert!(!log.contains(code.as_str()), "device code in the log");
        for a in answers {
            assert!(!a.contains(code.as_str()), "device code in an answer: {a}");
        }
        for (path, bytes) in &files {
            assert!(!contains(bytes, code), "device code in {}", path.display());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_signs_the_service_in_and_a_target_then_runs_jobs() {
    let w = world().await;
    let mut d = w.spawn_daemon(&[]);
    let client = d.client().await;
    let mut watch = Watch::open(&client).await;

    let s = start(&client, false).await;
    assert_eq!(s.state, SignInState::Waiting);
    assert_eq!(
        s.verification_uri,
        format!("{}/login/device", w.gh.origin())
    );
    assert_eq!(s.interval_secs, 1);
    assert_eq!(s.user_code.len(), 9, "{s:?}");
    let left = s.expires_at.0 - chrono::Utc::now().timestamp_millis();
    assert!((880_000..=900_000).contains(&left), "expires in {left} ms");
    watch
        .until(&s.id, SignInState::Waiting, Duration::from_secs(5))
        .await;

    w.gh.approve_device(&s.user_code, "octo").unwrap();
    let approved = watch
        .until(&s.id, SignInState::Approved, Duration::from_secs(15))
        .await;
    assert_eq!(approved.login.as_deref(), Some("octo"));
    assert_eq!(
        watch.path_of(&s.id),
        [SignInState::Waiting, SignInState::Approved]
    );
    // `auth` follows: the status says who, as GitHub told the service (`GET /user`).
    let status = client.status().await.unwrap();
    match &status.auth {
        AuthState::SignedIn { login, .. } => assert_eq!(login, "octo"),
        other => panic!("not signed in: {other:?}"),
    }
    assert!(w.gh.counters().endpoint("user").requests >= 1);
    let last = client.sign_in_status().await.unwrap();
    assert_eq!(last.state, SignInState::Approved);
    // The session is over: a DELETE changes nothing.
    assert_eq!(
        client.cancel_sign_in().await.unwrap().state,
        SignInState::Approved
    );

    // The stored credential works: a target polls and runs a job.
    let label = add_repo(&client, 1).await;
    let job = w.queue(&label, 1, Duration::from_millis(200));
    eventually(Duration::from_secs(30), "the job ran on our runner", || {
        w.completed_by_us(job[0])
    })
    .await;

    let mut answers = watch.lines.clone();
    answers.push(serde_json::to_string(&client.status().await.unwrap()).unwrap());
    answers.push(serde_json::to_string(&last).unwrap());
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
    assert_no_device_code(&w, &d, &answers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_code_ends_denied_and_a_second_start_joins_the_waiting_one() {
    let w = world().await;
    let mut d = w.spawn_daemon(&[]);
    let client = d.client().await;
    let mut watch = Watch::open(&client).await;

    let first = start(&client, false).await;
    let joined = start(&client, false).await;
    assert_eq!(
        joined.id, first.id,
        "a second start joins the waiting session"
    );
    assert_eq!(joined.user_code, first.user_code);
    assert_eq!(w.gh.issued_device_codes().len(), 1, "one flow at GitHub");

    // `restart` replaces it: the old one ends cancelled, a new code is shown.
    let second = start(&client, true).await;
    assert_ne!(second.id, first.id);
    assert_ne!(second.user_code, first.user_code);
    let replaced = watch
        .until(&first.id, SignInState::Cancelled, Duration::from_secs(5))
        .await;
    assert!(
        replaced
            .message
            .as_deref()
            .unwrap_or("")
            .contains("replaced"),
        "{replaced:?}"
    );

    w.gh.deny_device(&second.user_code).unwrap();
    let denied = watch
        .until(&second.id, SignInState::Denied, Duration::from_secs(15))
        .await;
    let message = denied.message.unwrap_or_default();
    assert!(message.contains("cancelled in the browser"), "{message}");
    assert!(message.contains("start sign-in again"), "{message}");
    assert_eq!(
        watch.path_of(&second.id),
        [SignInState::Waiting, SignInState::Denied]
    );
    let status = client.status().await.unwrap();
    assert_eq!(status.auth, AuthState::SignedOut);

    // Once it ended, a start begins a new flow.
    let third = start(&client, false).await;
    assert_ne!(third.id, second.id);
    assert_eq!(third.state, SignInState::Waiting);
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
    assert_no_device_code(&w, &d, &watch.lines);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_code_ends_expired_and_a_restart_gives_a_new_code() {
    let w = World::with_device_flow(Duration::from_secs(1), Duration::from_secs(3)).await;
    let mut d = w.spawn_daemon(&[]);
    let client = d.client().await;
    let mut watch = Watch::open(&client).await;
    let s = start(&client, false).await;
    let expired = watch
        .until(&s.id, SignInState::Expired, Duration::from_secs(15))
        .await;
    let message = expired.message.unwrap_or_default();
    assert!(
        message.contains("start sign-in again for a new code"),
        "{message}"
    );
    let polls = w.gh.counters().endpoint("access_token").requests;
    assert!(polls <= 4, "{polls} polls in a 3 s code at a 1 s interval");

    let again = start(&client, true).await;
    assert_eq!(again.state, SignInState::Waiting);
    assert_ne!(again.user_code, s.user_code, "a new code");
    assert_ne!(again.id, s.id);
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
}

/// POSTs a form to the fake GitHub over a plain TCP connection; returns the body.
async fn post_form(origin: &str, path: &str, form: &str) -> String {
    let addr = origin.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{form}",
        form.len()
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_down_raises_the_interval() {
    let w = world().await;
    let mut d = w.spawn_daemon(&[]);
    let client = d.client().await;
    let s = start(&client, false).await;
    // Another poller of the same code (as a second device would be) polls twice at once: GitHub
    // answers the second with `slow_down` and raises the code's interval to 6 s, so the
    // service's next poll (due within 1 s) is too soon and gets `slow_down` too.
    let code = w.gh.issued_device_codes().pop().unwrap();
    let form = format!(
        "client_id={}&device_code={code}&grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code",
        w.gh.client_id()
    );
    let path = "/login/oauth/access_token";
    post_form(&w.gh.origin(), path, &form).await;
    let body = post_form(&w.gh.origin(), path, &form).await;
    assert!(body.contains("slow_down"), "{body}");
    let slowed = sign_in_until(
        &client,
        &d,
        Duration::from_secs(10),
        "a raised interval",
        |x| x.interval_secs > 1,
    )
    .await;
    assert_eq!(slowed.id, s.id);
    assert!(
        slowed.interval_secs >= 6,
        "GitHub's new interval: {slowed:?}"
    );
    assert_eq!(slowed.state, SignInState::Waiting, "slow_down is no error");

    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_the_session_and_stops_polling() {
    let w = world().await;
    let mut d = w.spawn_daemon(&[]);
    let client = d.client().await;
    let s = start(&client, false).await;
    // Polling runs (at 1 s) until the cancel.
    eventually(Duration::from_secs(10), "a first poll", || {
        w.gh.counters().endpoint("access_token").requests >= 1
    })
    .await;
    let cancelled = client.cancel_sign_in().await.unwrap();
    assert_eq!(cancelled.id, s.id);
    assert_eq!(cancelled.state, SignInState::Cancelled);
    assert_eq!(
        client.sign_in_status().await.unwrap().state,
        SignInState::Cancelled
    );
    // The code stays valid at GitHub, but nothing polls it any more.
    let polls = w.gh.counters().endpoint("access_token").requests;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        w.gh.counters().endpoint("access_token").requests,
        polls,
        "polled after the cancel"
    );
    assert_eq!(client.status().await.unwrap().auth, AuthState::SignedOut);
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_storm_while_polling_is_retried_then_approved() {
    let w = world().await;
    let mut d = w.spawn_daemon(&[]);
    let client = d.client().await;
    let mut watch = Watch::open(&client).await;
    let s = start(&client, false).await;
    w.gh.inject_fault(FaultRule::times(
        EndpointMatch::name("access_token"),
        Fault::Status5xx {
            status: 503,
            rate: 1.0,
        },
        3,
    ));
    let retrying = watch
        .until(&s.id, SignInState::Retrying, Duration::from_secs(10))
        .await;
    let next_try = retrying.next_try.expect("retrying names next_try");
    assert!(next_try.0 > chrono::Utc::now().timestamp_millis() - 1_000);
    assert!(next_try.0 <= retrying.expires_at.0);
    assert!(
        retrying.message.as_deref().unwrap_or("").contains("503"),
        "{retrying:?}"
    );
    assert!(retrying.fix.is_some(), "{retrying:?}");
    // The storm passes: the next good answer puts it back to waiting; then the user approves.
    let back = watch
        .until(&s.id, SignInState::Waiting, Duration::from_secs(30))
        .await;
    assert_eq!(back.next_try, None);
    w.gh.approve_device(&s.user_code, "octo").unwrap();
    watch
        .until(&s.id, SignInState::Approved, Duration::from_secs(15))
        .await;
    assert_eq!(
        watch.path_of(&s.id),
        [
            SignInState::Waiting,
            SignInState::Retrying,
            SignInState::Waiting,
            SignInState::Approved
        ]
    );
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_device_flow_fails_naming_the_fix() {
    let w = world().await;
    let mut d = w.spawn_daemon(&[]);
    let client = d.client().await;
    w.gh.set_device_flow_enabled(false);
    let s = start(&client, false).await;
    assert_eq!(s.state, SignInState::Failed, "{s:?}");
    let message = s.message.clone().unwrap_or_default();
    let fix = s.fix.clone().unwrap_or_default();
    assert!(message.contains("device flow is not enabled"), "{message}");
    assert!(message.contains(&w.gh.client_id()), "{message}");
    assert!(fix.contains("Enable Device Flow"), "{fix}");
    assert!(
        fix.contains(&w.data_dir().join("config.json").display().to_string()),
        "{fix}"
    );
    assert_eq!(client.sign_in_status().await.unwrap(), s);

    // Turned off while a session waits: its next poll ends it the same way.
    w.gh.set_device_flow_enabled(true);
    let waiting = start(&client, false).await;
    assert_eq!(waiting.state, SignInState::Waiting);
    w.gh.set_device_flow_enabled(false);
    let failed = sign_in_until(&client, &d, Duration::from_secs(10), "failed", |x| {
        x.state.is_final()
    })
    .await;
    assert_eq!(failed.state, SignInState::Failed, "{failed:?}");
    assert!(failed
        .fix
        .unwrap_or_default()
        .contains("Enable Device Flow"));
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_service_cancels_the_session() {
    let w = world().await;
    let mut d = w.spawn_daemon(&[]);
    let client = d.client().await;
    let mut watch = Watch::open(&client).await;
    // Nothing started yet: 404 naming how to start one.
    match client.sign_in_status().await {
        Err(ClientError::Api {
            code: ErrorCode::NotFound,
            message,
            ..
        }) => assert!(message.contains("auth login"), "{message}"),
        other => panic!("expected 404, got {other:?}"),
    }
    let s = start(&client, false).await;
    d.signal(nix::sys::signal::Signal::SIGTERM);
    let cancelled = watch
        .until(&s.id, SignInState::Cancelled, Duration::from_secs(15))
        .await;
    assert!(
        cancelled
            .message
            .as_deref()
            .unwrap_or("")
            .contains("service stopped"),
        "{cancelled:?}"
    );
    // Then the stream ends cleanly: the service is stopping.
    let end = tokio::time::timeout(Duration::from_secs(10), watch.stream.next())
        .await
        .expect("the watch ends within 10 s of the stop");
    assert!(end.is_none(), "{end:?}");
    let st = d.wait_exit(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_operator_cannot_start_or_see_a_sign_in() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: running a client as another uid needs root (setpriv)");
        return;
    }
    let w = world().await;
    let mut d = w.spawn_daemon(&[]);
    let client = d.client().await;
    let waiting = start(&client, false).await;
    let as_nobody = |args: &[&str]| {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_runner-manager"))
            .arg("--socket")
            .arg(w.socket())
            .arg("--data-dir")
            .arg(w.dir.path().join("nobody"))
            .args(args);
        c.output().unwrap()
    };
    let o = as_nobody(&["auth", "login"]);
    assert_eq!(o.status.code(), Some(4), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !out.contains(&waiting.user_code),
        "a user code shown: {out}"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not allowed"), "{err}");
    // Still the operator's session, untouched.
    let s = client.sign_in_status().await.unwrap();
    assert_eq!(
        (s.id.as_str(), s.state),
        (waiting.id.as_str(), SignInState::Waiting)
    );
    assert_eq!(w.gh.issued_device_codes().len(), 1);
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
}
