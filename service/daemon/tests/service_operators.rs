//! The operators group, for real: a throwaway system group and user (root only), the real
//! service run with `--operator-group`, and the real CLI run as that user through `setpriv`
//! with no supplementary groups, so only the service's reading of the group database can admit
//! it. Adding the user while the service runs admits the next request; removing refuses it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod service_support;

use service_support::*;
use std::process::{Command, Output};

struct Account {
    user: String,
    group: String,
}

impl Drop for Account {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.user).output();
        let _ = Command::new("groupdel").arg(&self.group).output();
    }
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {out:?}");
    out
}

fn cli_as(account: &Account, socket: &std::path::Path) -> Output {
    let uid = nix::unistd::User::from_name(&account.user)
        .unwrap()
        .unwrap();
    Command::new("setpriv")
        .arg(format!("--reuid={}", uid.uid))
        .arg(format!("--regid={}", uid.gid))
        .arg("--clear-groups")
        .arg(env!("CARGO_BIN_EXE_runner-manager"))
        .arg("--socket")
        .arg(socket)
        .arg("status")
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_of_the_operators_group_may_operate_and_the_refusal_names_usermod() {
    if !nix::unistd::geteuid().is_root() || Command::new("setpriv").arg("-V").output().is_err() {
        eprintln!("SKIPPED: needs root and setpriv (a throwaway user and group are created)");
        return;
    }
    let n = std::process::id();
    let account = Account {
        user: format!("rmop{n}"),
        group: format!("rmops{n}"),
    };
    run(Command::new("groupadd").args(["--system", &account.group]));
    run(Command::new("useradd").args([
        "--system",
        "--no-create-home",
        "--shell",
        "/usr/sbin/nologin",
        &account.user,
    ]));
    let w = World::start().await;
    let mut d = w.spawn_daemon(&["--operator-group", &account.group]);
    let _ = d.client().await;

    let refused = cli_as(&account, &w.socket());
    assert_eq!(refused.status.code(), Some(4), "{refused:?}");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains(&format!(
            "sudo usermod -aG {} {}",
            account.group, account.user
        )) && err.contains("log in again"),
        "{err}"
    );

    // Added while the service runs: the next request is admitted.
    run(Command::new("usermod").args(["-aG", &account.group, &account.user]));
    let admitted = cli_as(&account, &w.socket());
    assert!(admitted.status.success(), "{admitted:?}");
    assert!(String::from_utf8_lossy(&admitted.stdout).contains("host"));

    // Removed: refused again at once.
    run(Command::new("gpasswd").args(["-d", &account.user, &account.group]));
    assert_eq!(cli_as(&account, &w.socket()).status.code(), Some(4));
    d.terminate(std::time::Duration::from_secs(20));
}
