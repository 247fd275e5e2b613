//! The tray in a desktop session: start at login (the autostart entry, from an install path
//! with a space, started the way a desktop starts it), a single instance (a second launch
//! exits and the first shows its dashboard), and a desktop without a tray host (the dashboard
//! opens instead of an invisible icon).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rm_e2e::bin;
use rm_e2e::tray::{session_or_skip, Session, SessionOptions};
use serde_json::json;

/// A socket where nothing listens: these tests are about the session, not the service.
fn nowhere(s: &Session) -> String {
    s.home.path().join("no-service.sock").display().to_string()
}

async fn until_windows(s: &mut Session, what: &str, check: impl Fn(&[String]) -> bool) {
    let start = Instant::now();
    loop {
        let w = s.windows().await;
        if check(&w) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}; windows: {w:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The `runner-manager-window` processes whose parent is `parent`.
fn window_processes(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // `pid (comm) state ppid …` (comm may hold spaces and parentheses).
        let ppid = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split(' ').nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
        let named = Path::new(&*String::from_utf8_lossy(argv0))
            .file_name()
            .is_some_and(|n| n == "runner-manager-window");
        if named && ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}

/// The tray's two binaries at a path with a space (hard links when they can be, else copies).
fn installed_with_a_space(root: &Path) -> PathBuf {
    let dir = root.join("Runner Manager");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["runner-manager-tray", "runner-manager-window"] {
        if std::fs::hard_link(bin(name), dir.join(name)).is_err() {
            std::fs::copy(bin(name), dir.join(name)).unwrap();
        }
    }
    dir.join("runner-manager-tray")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_at_login_writes_an_entry_that_starts_the_tray_from_a_path_with_a_space() {
    let Some(mut s) = session_or_skip(
        "start_at_login_writes_an_entry_that_starts_the_tray_from_a_path_with_a_space",
        SessionOptions::default(),
    )
    .await
    else {
        return;
    };
    let exe = installed_with_a_space(s.home.path());
    let log = s.home.path().join("tray.log");
    let sock = nowhere(&s);
    let mut tray = s
        .tray(Some(&exe), &["--socket", &sock], &log)
        .spawn()
        .unwrap();
    let m = s
        .until_menu("service not running", |m| {
            m.header() == "Service not running"
        })
        .await;
    assert_eq!(m.checked("Start at login"), Some(false), "{}", m.render());

    s.click("Start at login").await;
    let entry = s
        .home
        .path()
        .join(".config/autostart/runner-manager-tray.desktop");
    s.until_menu("start at login checked", |m| {
        m.checked("Start at login") == Some(true)
    })
    .await;
    let text = std::fs::read_to_string(&entry).unwrap();
    let exec = text.lines().find(|l| l.starts_with("Exec=")).unwrap();
    assert_eq!(
        exec,
        format!("Exec=\"{}\" --autostart", exe.display()),
        "quoted as the Desktop Entry spec asks:\n{text}"
    );

    // Quit, then start it as the desktop does at login.
    s.click("Quit tray").await;
    let status = tokio::time::timeout(Duration::from_secs(20), tray.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    let before = s.cmd(json!({"cmd": "items"})).await["items"]
        .as_array()
        .unwrap()
        .len();
    let launched = tokio::process::Command::new("gio")
        .arg("launch")
        .arg(&entry)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(s.env())
        // The tray it starts keeps what it inherits open: no pipes to wait on.
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .await
        .unwrap();
    assert!(launched.success(), "gio launch: {launched:?}");
    let start = Instant::now();
    loop {
        let items = s.cmd(json!({"cmd": "items"})).await["items"]
            .as_array()
            .unwrap()
            .len();
        if items > before {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the autostart entry did not start the tray ({exec})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The instance started at login turns it off again: the entry goes.
    let m = s
        .until_menu("the login instance's menu", |m| {
            m.header() == "Service not running"
        })
        .await;
    assert_eq!(m.checked("Start at login"), Some(true));
    s.click("Start at login").await;
    s.until_menu("start at login unchecked", |m| {
        m.checked("Start at login") == Some(false)
    })
    .await;
    assert!(!entry.exists(), "the entry is removed");
    s.click("Quit tray").await;
    s.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_launch_exits_and_the_first_shows_its_dashboard() {
    let Some(mut s) = session_or_skip(
        "a_second_launch_exits_and_the_first_shows_its_dashboard",
        SessionOptions::default(),
    )
    .await
    else {
        return;
    };
    let log = s.home.path().join("tray.log");
    let sock = nowhere(&s);
    let mut first = s.tray(None, &["--socket", &sock], &log).spawn().unwrap();
    s.until_menu("the first instance", |m| {
        m.header() == "Service not running"
    })
    .await;
    assert!(!s.windows().await.iter().any(|w| w == "runner-manager"));
    // The resident tray links no web engine: the windows are another process.
    let tray_pid = first.id().unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{tray_pid}/maps")).unwrap();
    assert!(
        !maps.contains("webkit") && !maps.contains("javascriptcore"),
        "the tray process maps a web engine"
    );
    assert!(maps.contains("libgtk-3"), "the maps were read: {maps:.300}");
    assert!(window_processes(tray_pid).is_empty());
    let log2 = s.home.path().join("tray2.log");
    let second = s
        .tray(None, &["--socket", &sock], &log2)
        .spawn()
        .unwrap()
        .wait_with_output();
    let status = tokio::time::timeout(Duration::from_secs(30), second)
        .await
        .expect("the second launch exits")
        .unwrap()
        .status;
    assert!(
        status.success(),
        "{status:?}: {}",
        std::fs::read_to_string(&log2).unwrap()
    );
    until_windows(&mut s, "the first instance's dashboard", |w| {
        w.iter().any(|n| n == "runner-manager")
    })
    .await;
    assert!(
        first.try_wait().unwrap().is_none(),
        "the first instance runs on"
    );
    assert_eq!(
        window_processes(tray_pid).len(),
        1,
        "the dashboard is the first tray's child process"
    );
    // Closing the last window ends the windows' process; the tray runs on. (A close sent
    // while the window is still being set up can be lost, as a click would: sent again.)
    let start = Instant::now();
    let mut sent = None::<Instant>;
    while !window_processes(tray_pid).is_empty() {
        if sent.is_none_or(|t| t.elapsed() > Duration::from_secs(2)) {
            let closed = s
                .cmd(json!({"cmd": "close", "window": "runner-manager"}))
                .await;
            assert!(closed.get("closed").is_some() || sent.is_some(), "{closed}");
            sent = Some(Instant::now());
        }
        if start.elapsed() > Duration::from_secs(30) {
            panic!(
                "the windows' process did not end with its last window; windows {:?}",
                s.windows().await
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    until_windows(&mut s, "the dashboard closed", |w| {
        !w.iter().any(|n| n == "runner-manager")
    })
    .await;
    assert!(first.try_wait().unwrap().is_none(), "the tray runs on");
    let items = s.cmd(json!({"cmd": "items"})).await;
    assert_eq!(items["items"].as_array().unwrap().len(), 1, "{items}");
    s.click("Quit tray").await;
    s.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_tray_host_the_dashboard_opens_and_says_why() {
    let Some(mut s) = session_or_skip(
        "without_a_tray_host_the_dashboard_opens_and_says_why",
        SessionOptions {
            no_watcher: true,
            ..SessionOptions::default()
        },
    )
    .await
    else {
        return;
    };
    let log = s.home.path().join("tray.log");
    let sock = nowhere(&s);
    let mut tray = s.tray(None, &["--socket", &sock], &log).spawn().unwrap();
    until_windows(&mut s, "the dashboard", |w| {
        w.iter().any(|n| n == "runner-manager")
    })
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("StatusNotifierWatcher"), "{text}");
    assert!(tray.try_wait().unwrap().is_none(), "it runs in its window");
    s.quit().await;
}

/// A portable install under `PREFIX` (as the archive unpacks into `~/.local`): the tray, the
/// service binary beside it and the archive's marker.
fn portable_install(prefix: &Path) -> PathBuf {
    let bin_dir = prefix.join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::fs::create_dir_all(prefix.join("share/runner-manager")).unwrap();
    std::fs::write(
        prefix.join("share/runner-manager/portable.json"),
        r#"{"kind": "portable", "version": "0.0.0", "files": []}"#,
    )
    .unwrap();
    for name in [
        "runner-manager-tray",
        "runner-manager-window",
        "runner-manager",
    ] {
        if std::fs::hard_link(bin(name), bin_dir.join(name)).is_err() {
            std::fs::copy(bin(name), bin_dir.join(name)).unwrap();
        }
    }
    bin_dir.join("runner-manager-tray")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portable_tray_installs_the_service_for_its_user_and_connects_to_it() {
    let Some(mut s) = session_or_skip(
        "a_portable_tray_installs_the_service_for_its_user_and_connects_to_it",
        SessionOptions::default(),
    )
    .await
    else {
        return;
    };
    let prefix = s.home.path().join(".local");
    let exe = portable_install(&prefix);
    let log = s.home.path().join("tray.log");
    // No --socket: the tray looks where a login service listens ($XDG_RUNTIME_DIR), then at
    // the boot service's socket, as it does when installed.
    let login_socket = s.home.path().join("run/runner-manager/api.sock");
    let mut tray = s.tray(Some(&exe), &[], &log).spawn().unwrap();
    let m = s
        .until_menu("the first-run offer", |m| {
            m.header() == "Service not running" && m.has("Install the service for this user")
        })
        .await;
    assert!(
        !m.has("Start it with"),
        "the offer replaces the command: {}",
        m.render()
    );

    // The real command fails here (tests run as root, without systemd): the notification
    // carries the service's own words and where to see the rest.
    s.click("Install the service for this user").await;
    let start = Instant::now();
    let failed = loop {
        let found = s
            .notifications()
            .await
            .into_iter()
            .find(|n| n["summary"].as_str() == Some("The service was not installed"));
        if let Some(n) = found {
            break n;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no failure notification"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let body = failed["body"].as_str().unwrap_or_default().to_owned();
    assert!(
        body.contains("root has no login session") || body.contains("systemd"),
        "the service's reason: {body}"
    );
    assert!(
        body.contains("service install --start-at login"),
        "the command to run by hand: {body}"
    );

    // The success path. systemd cannot run here, so the service binary beside the tray is a
    // stand-in (a mock, on purpose) that records how it was called and, as `systemctl --user
    // enable --now` would, starts the real service on the login socket.
    let gh = rm_e2e::fake_github().await;
    let calls = s.home.path().join("install-calls");
    let pid_file = s.home.path().join("service.pid");
    let stand_in = prefix.join("bin/runner-manager");
    std::fs::remove_file(&stand_in).unwrap();
    std::fs::write(
        &stand_in,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{calls}'\nmkdir -p '{run}'\n\
             '{real}' daemon run --data-dir '{data}' --socket '{socket}' --api-base '{gh}' \
             --web-base '{gh}' --client-id '{client}' --credential-store file \
             >'{data}.log' 2>&1 </dev/null &\necho $! > '{pid}'\necho installed\n",
            calls = calls.display(),
            run = login_socket.parent().unwrap().display(),
            real = bin("runner-manager").display(),
            data = s.home.path().join("service-data").display(),
            socket = login_socket.display(),
            gh = gh.origin(),
            client = gh.client_id(),
            pid = pid_file.display(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &stand_in,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    s.click("Install the service for this user").await;
    let m = s
        .until_menu("connected to the installed service", |m| {
            m.header() == "Signed out"
        })
        .await;
    assert!(
        !m.has("Install the service for this user"),
        "{}",
        m.render()
    );
    assert_eq!(
        std::fs::read_to_string(&calls).unwrap().trim(),
        "service install --start-at login"
    );
    let done = s
        .notifications()
        .await
        .into_iter()
        .any(|n| n["summary"].as_str() == Some("The service is installed for you"));
    assert!(done, "a notification says it is installed");

    s.click("Quit tray").await;
    let _ = tokio::time::timeout(Duration::from_secs(20), tray.wait()).await;
    if let Ok(pid) = std::fs::read_to_string(&pid_file) {
        let _ = std::process::Command::new("kill").arg(pid.trim()).status();
    }
    s.quit().await;
}
