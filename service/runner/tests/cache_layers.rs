//! Cache layers on the real kernel: a process started with a runtime's layers writes a shared
//! cache through an overlay of its own; nothing reaches the cache until the layer is committed,
//! and a dropped layer leaves the cache as it was. Mounting needs root (CI is root); as
//! another user the layers refuse to open, which is tested too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rm_runner::caches::layers::{Layers, Unavailable};
use std::fs;
use std::path::Path;
use std::process::Command;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A cache as an earlier job left it.
fn seed(lower: &Path) {
    fs::create_dir_all(lower.join("d")).unwrap();
    fs::write(lower.join("a"), "old a").unwrap();
    fs::write(lower.join("b"), "b").unwrap();
    fs::write(lower.join("d/old"), "old").unwrap();
}

/// What a job does to the cache: change, add, remove, replace a directory, add a link.
const JOB: &str = r#"set -e
c="$1"
echo "new a" > "$c/a"
echo c > "$c/c"
rm "$c/b"
rm -r "$c/d"; mkdir "$c/d"; echo y > "$c/d/y"
mkdir -p "$c/e/f"; echo z > "$c/e/f/z"
ln -s /etc "$c/link"
cat "$c/a" > "$2""#;

/// Runs [`JOB`] on `lower` with `runtime`'s layers over it; answers what the job read back.
fn run_job(layers: &Layers, runtime: &str, lower: &Path, out: &Path) {
    let mounts = layers
        .prepare(runtime, &[lower.to_path_buf()])
        .expect("layers prepared");
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", JOB, "job"]).arg(lower).arg(out);
    mounts.apply_to(&mut cmd);
    let status = cmd.status().unwrap();
    assert!(status.success(), "the job ran: {status}");
}

fn assert_untouched(lower: &Path) {
    assert_eq!(fs::read_to_string(lower.join("a")).unwrap(), "old a");
    assert!(lower.join("b").exists());
    assert!(lower.join("d/old").exists());
    for gone in ["c", "e", "link", "d/y"] {
        assert!(
            fs::symlink_metadata(lower.join(gone)).is_err(),
            "{gone} reached the cache"
        );
    }
}

#[test]
fn writes_go_to_the_layer_and_reach_the_cache_only_when_committed() {
    if !is_root() {
        eprintln!("skipped: mounting a layer needs root (CI runs this as root)");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (root, lower) = (
        t.path().join("runners"),
        t.path().join("runners/.caches/ns"),
    );
    fs::create_dir_all(&lower).unwrap();
    seed(&lower);
    let layers = Layers::open(&root).expect("this host can build layers");
    let out = t.path().join("read-back");

    run_job(&layers, "kept", &lower, &out);
    assert_eq!(
        fs::read_to_string(&out).unwrap().trim(),
        "new a",
        "the job sees its own writes"
    );
    assert_untouched(&lower);
    assert!(layers.has("kept") && layers.written("kept"));

    let done = layers.finish("kept", true).unwrap();
    assert!(done.written);
    assert_eq!(fs::read_to_string(lower.join("a")).unwrap().trim(), "new a");
    assert_eq!(fs::read_to_string(lower.join("c")).unwrap().trim(), "c");
    assert!(!lower.join("b").exists(), "the job's removal is kept");
    assert!(
        !lower.join("d/old").exists(),
        "the directory it made again replaced the old"
    );
    assert_eq!(fs::read_to_string(lower.join("d/y")).unwrap().trim(), "y");
    assert_eq!(fs::read_to_string(lower.join("e/f/z")).unwrap().trim(), "z");
    assert!(fs::symlink_metadata(lower.join("link"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(!root.join(".layers/kept").exists(), "the layer is gone");
    assert!(!layers.has("kept"));
}

#[test]
fn a_dropped_layer_leaves_the_cache_as_it_was() {
    if !is_root() {
        eprintln!("skipped: mounting a layer needs root (CI runs this as root)");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (root, lower) = (
        t.path().join("runners"),
        t.path().join("runners/.caches/ns"),
    );
    fs::create_dir_all(&lower).unwrap();
    seed(&lower);
    let layers = Layers::open(&root).unwrap();
    run_job(&layers, "dropped", &lower, &t.path().join("read-back"));
    let done = layers.finish("dropped", false).unwrap();
    assert!(done.written && done.moved == 0);
    assert_untouched(&lower);
    assert!(!root.join(".layers/dropped").exists());

    // Outside the wall: the same job on the cache itself changes it (the check can fail).
    let status = Command::new("/bin/sh")
        .args(["-c", JOB, "job"])
        .arg(&lower)
        .arg(t.path().join("read-back"))
        .status()
        .unwrap();
    assert!(status.success());
    assert!(std::panic::catch_unwind(|| assert_untouched(&lower)).is_err());
}

#[test]
fn an_untouched_layer_is_not_written_and_leftovers_are_swept() {
    if !is_root() {
        eprintln!("skipped: mounting a layer needs root (CI runs this as root)");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (root, lower) = (
        t.path().join("runners"),
        t.path().join("runners/.caches/ns"),
    );
    fs::create_dir_all(&lower).unwrap();
    let layers = Layers::open(&root).unwrap();
    layers
        .prepare("idle", std::slice::from_ref(&lower))
        .unwrap();
    layers
        .prepare("left", std::slice::from_ref(&lower))
        .unwrap();
    assert!(
        !layers.written("idle"),
        "nothing written, no verdict needed"
    );
    let dropped = layers.sweep(|name| name == "idle");
    assert_eq!(dropped, vec!["left".to_owned()]);
    assert!(layers.has("idle") && !layers.has("left"));
    // The layers' directory is the service's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(root.join(".layers"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
}

#[test]
fn without_root_the_layers_refuse_to_open_with_the_fix() {
    if is_root() {
        // Run the refusal as an unprivileged user instead (this test binary, again).
        let me = std::env::current_exe().unwrap();
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(me)
            .args([
                "--exact",
                "without_root_the_layers_refuse_to_open_with_the_fix",
                "--nocapture",
            ])
            .env("RM_LAYERS_REFUSAL_DIR", std::env::temp_dir())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}");
        assert!(
            text.contains("refused: the service does not run as root"),
            "{text}"
        );
        return;
    }
    let base =
        std::env::var_os("RM_LAYERS_REFUSAL_DIR").map_or_else(std::env::temp_dir, Into::into);
    let e = Layers::open(&base.join("no-layers-here")).unwrap_err();
    assert_eq!(e, Unavailable::NotRoot);
    assert!(e.fix().contains("--start-at boot"), "{}", e.fix());
    println!("refused: {e}");
}
