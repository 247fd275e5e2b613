//! Cache layers on the real kernel: a process started with a runtime's layers writes a shared
//! cache through an overlay of its own; nothing reaches the cache until the layer is committed,
//! and a dropped layer leaves the cache as it was. Mounting needs root (CI is root); as
//! another user the layers refuse to open, which is tested too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rm_runner::caches::layers::Layers;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A runner root under `base` with one cache in it, as an earlier job left it (`seeded`), and
/// its layers; `None` (the test skipped) unless root.
fn as_root_with_a_cache(base: &Path, seeded: bool) -> Option<(Layers, PathBuf, PathBuf)> {
    if !is_root() {
        eprintln!("skipped: mounting a layer needs root (CI runs this as root)");
        return None;
    }
    let (root, lower) = (base.join("runners"), base.join("runners/.caches/ns"));
    fs::create_dir_all(&lower).unwrap();
    if seeded {
        seed(&lower);
    }
    let layers = Layers::open(&root).expect("this host can build layers");
    Some((layers, root, lower))
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
    let t = tempfile::tempdir().unwrap();
    let Some((layers, root, lower)) = as_root_with_a_cache(t.path(), true) else {
        return;
    };
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
    assert!(!root.join(".layers/kept/0").exists(), "the layer is gone");
    // Until the scrub's end it still says the runtime had layers (a retried scrub must not
    // take it for a runner that wrote the caches directly); finishing again does nothing.
    assert!(layers.has("kept") && !layers.written("kept"));
    let again = layers.finish("kept", true).unwrap();
    assert_eq!((again.moved, again.written), (0, false));
    assert_eq!(fs::read_to_string(lower.join("c")).unwrap().trim(), "c");
    layers.forget("kept").unwrap();
    assert!(!root.join(".layers/kept").exists() && !layers.has("kept"));
}

#[test]
fn a_dropped_layer_leaves_the_cache_as_it_was() {
    let t = tempfile::tempdir().unwrap();
    let Some((layers, root, lower)) = as_root_with_a_cache(t.path(), true) else {
        return;
    };
    run_job(&layers, "dropped", &lower, &t.path().join("read-back"));
    let done = layers.finish("dropped", false).unwrap();
    assert!(done.written && done.moved == 0);
    assert_untouched(&lower);
    assert!(!root.join(".layers/dropped/0").exists());

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
    let t = tempfile::tempdir().unwrap();
    let Some((layers, root, lower)) = as_root_with_a_cache(t.path(), false) else {
        return;
    };
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

/// The per-user service's layers: mounted by `unshare`/`mount` inside a user namespace (the
/// sandbox's, pasta's; here one of the test's own, made the same way), as an ordinary user.
#[test]
fn as_an_ordinary_user_writes_go_to_the_layer_through_a_user_namespace() {
    const DIR_ENV: &str = "RM_LAYERS_USER_TEST_DIR";
    if is_root() {
        // Run this test again as an unprivileged user (this test binary, through setpriv).
        let t = tempfile::tempdir().unwrap();
        std::os::unix::fs::chown(t.path(), Some(65534), Some(65534)).unwrap();
        let me = std::env::current_exe().unwrap();
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(me)
            .args([
                "--exact",
                "as_an_ordinary_user_writes_go_to_the_layer_through_a_user_namespace",
                "--nocapture",
            ])
            .env(DIR_ENV, t.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("committed as an ordinary user"), "{text}");
        return;
    }
    let Some(base) = std::env::var_os(DIR_ENV) else {
        eprintln!("skipped: run as root, this test runs itself again as an ordinary user");
        return;
    };
    let base = Path::new(&base);
    let (root, lower) = (base.join("runners"), base.join("runners/.caches/ns"));
    fs::create_dir_all(&lower).unwrap();
    seed(&lower);
    let layers = Layers::open(&root).expect("an ordinary user can build layers here");
    assert!(
        !layers.without_sandbox(),
        "mounted inside the sandbox's namespace"
    );
    let mounts = layers
        .prepare("mine", std::slice::from_ref(&lower))
        .unwrap();
    assert!(mounts.in_chain());
    let out = base.join("read-back");
    let status = Command::new("unshare")
        .args(["--user", "--map-root-user", "--"])
        .args(mounts.chain_args())
        .args(["/bin/sh", "-c", JOB, "job"])
        .arg(&lower)
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    assert_eq!(fs::read_to_string(&out).unwrap().trim(), "new a");
    assert_untouched(&lower);
    assert!(layers.written("mine"));
    layers.finish("mine", true).unwrap();
    assert!(!lower.join("b").exists() && !lower.join("d/old").exists());
    assert_eq!(fs::read_to_string(lower.join("d/y")).unwrap().trim(), "y");
    assert_eq!(fs::read_to_string(lower.join("c")).unwrap().trim(), "c");
    println!("committed as an ordinary user");

    // A layer that cannot be mounted (its upper directory gone) ends the chain before what
    // follows it: the runner never starts without its layers.
    let mounts = layers
        .prepare("broken", std::slice::from_ref(&lower))
        .unwrap();
    fs::remove_dir(root.join(".layers/broken/0/upper")).unwrap();
    let ran = base.join("ran");
    let status = Command::new("unshare")
        .args(["--user", "--map-root-user", "--"])
        .args(mounts.chain_args())
        .args(["/bin/sh", "-c", "touch \"$1\"", "job"])
        .arg(&ran)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(125), "{status}");
    assert!(
        !ran.exists(),
        "the program after the layers ran without them"
    );
}
