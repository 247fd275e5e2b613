//! A desktop session for the tray tests: `dbus-run-session` running `tests/tray/session.py`
//! (Xvfb, a fake StatusNotifierWatcher, a fake notification server, optionally gnome-keyring),
//! driven over its stdin/stdout, and the tray app started inside it with its own HOME and XDG
//! directories.
//!
//! The watcher and the notification server are fakes because a real tray host and a real
//! notification daemon need a full desktop; the tray talks to them over the same D-Bus
//! interfaces it uses on a desktop.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::bin;

/// Options for [`Session::start`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionOptions {
    /// Leave out the StatusNotifierWatcher (a desktop without a tray host).
    pub no_watcher: bool,
    /// Start gnome-keyring (the Secret Service) in the session.
    pub keyring: bool,
    /// Run the whole session (and so the tray) as user `nobody` (needs root).
    pub as_nobody: bool,
}

/// One session; dropped = torn down.
pub struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    pub display: String,
    pub bus: String,
    as_nobody: bool,
    /// The log of the last tray started (shown when a wait times out).
    tray_log: std::sync::Mutex<Option<PathBuf>>,
    /// HOME, XDG_CONFIG_HOME, XDG_DATA_HOME, XDG_CACHE_HOME and XDG_RUNTIME_DIR of the tray live here.
    pub home: tempfile::TempDir,
}

/// What a tray test needs from the machine; `Err` names what is missing.
pub fn missing_pieces() -> Result<(), String> {
    let mut missing = Vec::new();
    for tool in ["dbus-run-session", "Xvfb", "xdotool"] {
        if !on_path(tool) {
            missing.push(tool.to_owned());
        }
    }
    let py = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import dbus, gi, Xlib"])
        .output();
    if !py.map(|o| o.status.success()).unwrap_or(false) {
        missing.push(
            "/usr/bin/python3 with dbus, gi and Xlib (python3-dbus python3-gi python3-xlib)"
                .to_owned(),
        );
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing.join(", "))
    }
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// Starts a session, or says loudly why the test is skipped (`None`).
pub async fn session_or_skip(test: &str, options: SessionOptions) -> Option<Session> {
    if let Err(missing) = missing_pieces() {
        eprintln!(
            "SKIPPED {test}: the tray tests need {missing} (scripts/test.sh installs them; see \
             scripts/lib.sh)"
        );
        return None;
    }
    Some(Session::start(options).await)
}

/// The next JSON object line. Services the session bus activates (e.g. the accessibility
/// registry) inherit the session's stdout and may print on it: their lines are skipped.
async fn next_json(lines: &mut Lines<BufReader<ChildStdout>>) -> Value {
    loop {
        let line = lines
            .next_line()
            .await
            .expect("read from the session")
            .expect("the session ended");
        if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(&line) {
            return v;
        }
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tray/session.py")
}

impl Session {
    pub async fn start(options: SessionOptions) -> Session {
        let home = tempfile::Builder::new()
            .prefix("rm-tray-home")
            .tempdir()
            .expect("temp HOME");
        for d in ["config", "data", "cache", "run", "keyring"] {
            std::fs::create_dir_all(home.path().join(d)).expect("xdg dir");
        }
        set_mode(&home.path().join("run"), 0o700);
        let mut cmd = if options.as_nobody {
            // The session and its files belong to nobody.
            let chown = std::process::Command::new("chown")
                .args(["-R", "65534:65534"])
                .arg(home.path())
                .status()
                .expect("chown");
            assert!(chown.success());
            set_mode(home.path(), 0o755);
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "dbus-run-session",
            ]);
            c
        } else {
            Command::new("dbus-run-session")
        };
        cmd.arg("--").arg("/usr/bin/python3").arg(script());
        if options.no_watcher {
            cmd.arg("--no-watcher");
        }
        if options.keyring {
            cmd.arg("--keyring");
        }
        let mut child = cmd
            .env("RM_SESSION_KEYRING_DIR", home.path().join("keyring"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(home.path().join("session.log")).expect("log"))
            // Not killed on drop: closing its stdin ends the script, which stops Xvfb, and
            // dbus-run-session then ends the bus (a kill would leave the bus daemon behind).
            .spawn()
            .expect("dbus-run-session starts");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let ready = tokio::time::timeout(Duration::from_secs(30), next_json(&mut stdout))
            .await
            .expect("the session is ready within 30 s");
        Session {
            child,
            stdin,
            stdout,
            display: ready["display"].as_str().expect("display").to_owned(),
            bus: ready["bus"].as_str().expect("bus").to_owned(),
            as_nobody: options.as_nobody,
            tray_log: std::sync::Mutex::new(None),
            home,
        }
    }

    /// Sends one command; returns its answer.
    pub async fn cmd(&mut self, command: Value) -> Value {
        let mut line = command.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.expect("write");
        tokio::time::timeout(Duration::from_secs(30), next_json(&mut self.stdout))
            .await
            .expect("the session answers within 30 s")
    }

    /// The environment of a program of this session (display, bus, isolated HOME and XDG).
    pub fn env(&self) -> Vec<(String, String)> {
        let h = self.home.path();
        let p = |d: &str| h.join(d).display().to_string();
        vec![
            ("DISPLAY".into(), self.display.clone()),
            ("DBUS_SESSION_BUS_ADDRESS".into(), self.bus.clone()),
            ("HOME".into(), h.display().to_string()),
            ("XDG_CONFIG_HOME".into(), p("config")),
            ("XDG_DATA_HOME".into(), p("data")),
            ("XDG_CACHE_HOME".into(), p("cache")),
            ("XDG_RUNTIME_DIR".into(), p("run")),
            // WebKit without GPU under Xvfb.
            ("WEBKIT_DISABLE_COMPOSITING_MODE".into(), "1".into()),
            ("LIBGL_ALWAYS_SOFTWARE".into(), "1".into()),
            ("NO_AT_BRIDGE".into(), "1".into()),
        ]
    }

    /// The tray app (the built binary unless `exe` names a copy) with this session's
    /// environment, its log in `log`.
    pub fn tray(&self, exe: Option<&Path>, args: &[&str], log: &Path) -> Command {
        let exe = exe
            .map(Path::to_owned)
            .unwrap_or_else(|| bin("runner-manager-tray"));
        *self.tray_log.lock().unwrap() = Some(log.to_owned());
        let mut c = if self.as_nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(exe);
            c
        } else {
            Command::new(exe)
        };
        c.args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("RUST_LOG", "info")
            .envs(self.env())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(log).expect("tray log"))
            .stderr(
                std::fs::File::options()
                    .append(true)
                    .open(log)
                    .expect("tray log"),
            )
            .kill_on_drop(true);
        c
    }

    /// The registered tray item's properties, if one registered.
    pub async fn item(&mut self) -> Option<Value> {
        let v = self.cmd(json!({"cmd": "item"})).await;
        v.get("item").filter(|i| !i.is_null()).cloned()
    }

    /// The tray menu (dbusmenu layout), if an item registered.
    pub async fn layout(&mut self) -> Option<Value> {
        let v = self.cmd(json!({"cmd": "layout"})).await;
        v.get("layout").filter(|l| !l.is_null()).cloned()
    }

    /// Waits until the menu satisfies `check`; fails naming `what` and the last menu seen.
    pub async fn until_menu(&mut self, what: &str, check: impl Fn(&Menu) -> bool) -> Menu {
        let start = Instant::now();
        let mut last = None;
        loop {
            if let Some(layout) = self.layout().await {
                let menu = Menu(layout);
                if check(&menu) {
                    return menu;
                }
                last = Some(menu);
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "timed out after 30 s waiting for the tray menu to show {what}; last menu:\n{}\ntray log:\n{}",
                last.map(|m| m.render())
                    .unwrap_or_else(|| "(no tray item)".into()),
                self.tray_log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The last tray's log so far.
    pub fn tray_log_text(&self) -> String {
        let path = self.tray_log.lock().unwrap().clone();
        path.and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }

    /// Clicks the menu item whose label starts with `label`. A menu rebuilt between reading
    /// it and clicking (new ids) is read again.
    pub async fn click(&mut self, label: &str) {
        let start = Instant::now();
        loop {
            let menu = self
                .until_menu(&format!("an item {label:?}"), |m| m.find(label).is_some())
                .await;
            let id = menu.find(label).map(|n| n["id"].clone()).expect("item");
            let r = self.cmd(json!({"cmd": "click", "id": id})).await;
            match r.get("error").and_then(Value::as_str) {
                None => return,
                Some(e) if e.contains("does not refer to a menu item") => {
                    assert!(
                        start.elapsed() < Duration::from_secs(30),
                        "click {label}: {e}"
                    );
                }
                Some(e) => panic!("click {label}: {e}"),
            }
        }
    }

    /// Every Notify call so far.
    pub async fn notifications(&mut self) -> Vec<Value> {
        let v = self.cmd(json!({"cmd": "notifications"})).await;
        v["notifications"].as_array().cloned().unwrap_or_default()
    }

    /// Visible X windows' names.
    pub async fn windows(&mut self) -> Vec<String> {
        let v = self.cmd(json!({"cmd": "windows"})).await;
        v["windows"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|w| w.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A PNG of the screen, or of the window named `window`.
    pub async fn screenshot(&mut self, path: &Path, window: Option<&str>) {
        let r = self
            .cmd(json!({"cmd": "screenshot", "path": path.display().to_string(), "window": window}))
            .await;
        assert!(r.get("error").is_none(), "screenshot: {r}");
    }

    pub async fn quit(mut self) {
        let _ = self.cmd(json!({"cmd": "quit"})).await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}

/// A dbusmenu layout, with lookups by label.
#[derive(Debug, Clone)]
pub struct Menu(pub Value);

impl Menu {
    /// Every item, depth first, with its depth.
    pub fn items(&self) -> Vec<(usize, Value)> {
        fn walk(v: &Value, depth: usize, out: &mut Vec<(usize, Value)>) {
            for c in v["children"].as_array().into_iter().flatten() {
                out.push((depth, c.clone()));
                walk(c, depth + 1, out);
            }
        }
        let mut out = Vec::new();
        walk(&self.0, 0, &mut out);
        out
    }

    /// Labels of the visible items, as GTK shows them (mnemonic underscores removed).
    pub fn labels(&self) -> Vec<String> {
        self.items()
            .into_iter()
            .filter(|(_, n)| n["visible"].as_bool().unwrap_or(true))
            .map(|(_, n)| label(&n))
            .collect()
    }

    pub fn has(&self, text: &str) -> bool {
        self.labels().iter().any(|l| l.contains(text))
    }

    /// The first item whose label starts with `prefix`.
    pub fn find(&self, prefix: &str) -> Option<Value> {
        self.items()
            .into_iter()
            .map(|(_, n)| n)
            .find(|n| label(n).starts_with(prefix))
    }

    /// The header (first item).
    pub fn header(&self) -> String {
        self.labels().first().cloned().unwrap_or_default()
    }

    /// Whether the check item starting with `prefix` is checked.
    pub fn checked(&self, prefix: &str) -> Option<bool> {
        self.find(prefix)
            .map(|n| n["toggle_state"].as_i64() == Some(1))
    }

    /// Text drawing of the menu (for failures, and the screenshot of the menu).
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (depth, n) in self.items() {
            if !n["visible"].as_bool().unwrap_or(true) {
                continue;
            }
            let pad = "    ".repeat(depth);
            let l = label(&n);
            let line = if n["type"] == "separator" {
                "────────────────".to_owned()
            } else if n["toggle_type"] == "checkmark" {
                let mark = if n["toggle_state"].as_i64() == Some(1) {
                    "☑"
                } else {
                    "☐"
                };
                format!("{mark} {l}")
            } else if n["children_display"] == "submenu" {
                format!("{l}  ▸")
            } else if n["enabled"].as_bool() == Some(false) {
                format!("{l}  (not clickable)")
            } else {
                l
            };
            out.push_str(&format!("{pad}{line}\n"));
        }
        out
    }
}

fn label(n: &Value) -> String {
    // GTK mnemonics: "_x" marks an accelerator, "__" is a literal underscore.
    let raw = n["label"].as_str().unwrap_or_default();
    let mut out = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '_' {
            if chars.peek() == Some(&'_') {
                chars.next();
                out.push('_');
            }
            continue;
        }
        out.push(c);
    }
    out
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
}
