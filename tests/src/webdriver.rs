//! A small WebDriver client for the tray's windows: `WebKitWebDriver` (Debian's
//! webkit2gtk-driver) launches the tray app with automation on (`TAURI_WEBVIEW_AUTOMATION`)
//! and drives its webview. Plain HTTP/1.1 over loopback, blocking calls run off the runtime.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::process::{Child, Command};

use crate::tray::Session;

pub struct Driver {
    port: u16,
    session: String,
    _child: Child,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One request; answers the JSON body (WebDriver answers JSON, errors included).
fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> std::io::Result<Value> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let payload = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    serde_json::from_str(payload.trim())
        .map_err(|e| std::io::Error::other(format!("not JSON from the driver ({e}): {text}")))
}

async fn call(port: u16, method: &'static str, path: String, body: Option<Value>) -> Value {
    let shown = path.clone();
    tokio::task::spawn_blocking(move || http(port, method, &path, body.as_ref()))
        .await
        .expect("join")
        .unwrap_or_else(|e| panic!("{method} {shown}: {e}"))
}

/// Whether WebKitWebDriver is installed.
pub fn available() -> bool {
    Path::new("/usr/bin/WebKitWebDriver").is_file()
}

impl Driver {
    /// Starts WebKitWebDriver in `session` and a WebDriver session that launches `app` with
    /// `args` (the first window the app opens is the one driven).
    pub async fn launch(session: &Session, app: &Path, args: &[&str], log: &Path) -> Driver {
        let port = free_port();
        let child = Command::new("/usr/bin/WebKitWebDriver")
            .arg(format!("--port={port}"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("RUST_LOG", "info")
            .env("TAURI_WEBVIEW_AUTOMATION", "true")
            .envs(session.env())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(log).expect("log"))
            .stderr(
                std::fs::File::options()
                    .append(true)
                    .open(log)
                    .expect("log"),
            )
            .kill_on_drop(true)
            .spawn()
            .expect("WebKitWebDriver starts");
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "WebKitWebDriver did not listen"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {"webkitgtk:browserOptions": {
            "binary": app.display().to_string(),
            "args": args,
        }}}});
        let v = call(port, "POST", "/session".into(), Some(caps)).await;
        let session = v["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| {
                panic!(
                    "no WebDriver session: {v}\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                )
            })
            .to_owned();
        Driver {
            port,
            session,
            _child: child,
        }
    }

    async fn cmd(&self, method: &'static str, path: &str, body: Option<Value>) -> Value {
        call(
            self.port,
            method,
            format!("/session/{}{path}", self.session),
            body,
        )
        .await
    }

    /// Runs `script` in the page (`return …` answers a value).
    pub async fn exec(&self, script: &str) -> Value {
        let v = self
            .cmd(
                "POST",
                "/execute/sync",
                Some(json!({"script": script, "args": []})),
            )
            .await;
        v["value"].clone()
    }

    /// The text of the first element matching `css` (empty when there is none).
    pub async fn text(&self, css: &str) -> String {
        let script = format!(
            "const e = document.querySelector({}); return e ? e.innerText : '';",
            serde_json::to_string(css).unwrap_or_default()
        );
        self.exec(&script)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Waits until the text of `css` satisfies `check`; answers it.
    pub async fn until_text(&self, css: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let t = self.text(css).await;
            if check(&t) {
                return t;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "timed out waiting for {what} in {css}; it reads {t:?}; page: {}",
                self.text("body").await
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Clicks the first element matching `css` (through the DOM: no pointer needed), once it
    /// exists and is enabled (a change in flight disables the controls it concerns).
    pub async fn click(&self, css: &str) {
        let script = format!(
            "const e = document.querySelector({}); if (!e || e.disabled) return false; \
             e.click(); return true;",
            serde_json::to_string(css).unwrap_or_default()
        );
        let start = Instant::now();
        while self.exec(&script).await != json!(true) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no enabled {css} to click; page: {}",
                self.text("body").await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Types into an input (sets its value and fires `input`).
    pub async fn fill(&self, css: &str, value: &str) {
        let script = format!(
            "const e = document.querySelector({}); if (!e) return false; e.value = {}; \
             e.dispatchEvent(new Event('input', {{bubbles: true}})); \
             e.dispatchEvent(new Event('change', {{bubbles: true}})); return true;",
            serde_json::to_string(css).unwrap_or_default(),
            serde_json::to_string(value).unwrap_or_default()
        );
        assert_eq!(self.exec(&script).await, json!(true), "no {css} to fill");
    }

    /// Ends the session (the driver stops the app).
    pub async fn quit(self) {
        let _ = self.cmd("DELETE", "", None).await;
    }
}
