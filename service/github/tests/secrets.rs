//! No token, refresh token, device code or JIT config reaches error text or
//! any log line (the per-request debug lines included).
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns; a panic is a failed test

mod common;

use common::*;
use rm_github::{DeviceFlow, ExposeSecret, JitRequest};
use rm_testkit::{EndpointMatch, FakeConfig, Fault, FaultRule};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test]
async fn secrets_never_reach_logs_or_errors() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(capture.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let w = world_with(FakeConfig {
        device_interval: Duration::ZERO,
        ..FakeConfig::default()
    })
    .await;
    let t = target("alice/app");
    let mut secrets: Vec<String> = vec![
        w.token.access_token.clone(),
        w.token.refresh_token.clone().unwrap(),
    ];
    let mut errors: Vec<String> = Vec::new();

    // Device flow.
    let flow = DeviceFlow::new(config(&w.fake)).unwrap();
    let code = flow.start().await.unwrap();
    secrets.push(code.device_code.expose_secret().to_string());
    errors.push(format!("{code:?}"));
    w.fake.approve_device(&code.user_code, "alice").unwrap();
    let cred = flow.poll_until(&code, |_| async { true }).await.unwrap();
    secrets.push(cred.access_token.expose_secret().to_string());
    secrets.push(
        cred.refresh_token
            .as_ref()
            .unwrap()
            .expose_secret()
            .to_string(),
    );
    errors.push(format!("{cred:?}"));
    errors.push(format!("{:?}", flow.poll_once(&code).await.unwrap_err()));

    // JIT config.
    let jit = w
        .client
        .generate_jit_config(
            &t,
            &JitRequest {
                name: "rm-secret-1".into(),
                runner_group_id: 1,
                labels: vec!["x".into()],
                work_folder: None,
            },
        )
        .await
        .unwrap();
    secrets.push(jit.encoded_jit_config.expose_secret().to_string());
    errors.push(format!("{jit:?}"));

    // A refresh after a 401, then faults of every kind.
    w.fake
        .inject_fault(FaultRule::times(EndpointMatch::Any, Fault::Unauthorized, 1));
    w.client.list_runners(&t, None).await.unwrap();
    let renewed = w.store.load_now();
    secrets.push(renewed.0);
    secrets.push(renewed.1);
    for fault in [
        Fault::Status5xx {
            status: 500,
            rate: 1.0,
        },
        Fault::MalformedJson,
        Fault::DropConnection,
        Fault::RateLimited {
            status: 429,
            retry_after: Some(0),
            secondary: true,
        },
    ] {
        w.fake
            .inject_fault(FaultRule::times(EndpointMatch::Any, fault, 3));
        if let Err(e) = w.client.list_runners(&t, None).await {
            errors.push(e.to_string());
            errors.push(format!("{e:?}"));
        }
        w.fake.clear_faults();
    }
    // Let the rate-limit gate (retry-after, at least 1 s) open again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // Revoked: sign-in required.
    w.fake.revoke_token(&secrets[secrets.len() - 2]);
    let e = w.client.list_runners(&t, None).await.unwrap_err();
    errors.push(e.to_string());
    errors.push(format!("{e:?}"));
    errors.push(format!("{:?}", w.client.auth_state()));

    let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("GitHub access token renewed"),
        "logging was captured"
    );
    assert!(
        logs.contains("GitHub answered"),
        "the per-request debug lines were captured too"
    );
    for s in &secrets {
        assert!(s.len() > 10);
        assert!(!logs.contains(s.as_str()), "secret in logs");
        for e in &errors {
            assert!(!e.contains(s.as_str()), "secret in error: {e}");
        }
    }
}

trait LoadNow {
    fn load_now(&self) -> (String, String);
}

impl LoadNow for rm_github::MemoryCredentialStore {
    fn load_now(&self) -> (String, String) {
        use rm_github::CredentialStore;
        let c = self.load().unwrap().unwrap();
        (
            c.access_token.expose_secret().to_string(),
            c.refresh_token.unwrap().expose_secret().to_string(),
        )
    }
}
