use super::*;

const PKG: &str = "2.330.0-linux-x64";

struct Root {
    dir: tempfile::TempDir,
    ws: Workspaces,
}

fn root() -> Root {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspaces::open(dir.path()).unwrap();
    Root { dir, ws }
}

fn p(id: i64) -> PolicyId {
    PolicyId::new(id)
}

impl Root {
    fn runtime(&self, name: &str) -> Runtime {
        let path = self.dir.path().join(name);
        fs::create_dir(&path).unwrap();
        Runtime {
            name: RuntimeName::new(name).unwrap(),
            path,
            owner: None,
        }
    }
}

/// What a job leaves in its work folder: a checkout with persisted credentials, build output,
/// the job's temp files, and a runner credential file a job copied in.
fn run_job(work: &Path) {
    let repo = work.join("hello/hello");
    fs::create_dir_all(repo.join(".git/modules/lib")).unwrap();
    fs::write(
        repo.join(".git/config"),
        "[core]\n\tbare = false\n[http \"https://github.com/\"]\n\textraheader = AUTHORIZATION: basic c2VjcmV0\n",
    )
    .unwrap();
    fs::write(
        repo.join(".git/modules/lib/config"),
        "[remote \"origin\"]\n\turl = https://x-access-token:ghs_tok@github.com/o/lib\n",
    )
    .unwrap();
    fs::create_dir_all(repo.join("target")).unwrap();
    fs::write(repo.join("target/app.o"), "object").unwrap();
    fs::create_dir_all(work.join("_temp")).unwrap();
    fs::write(work.join("_temp/git-credentials.config"), "secret").unwrap();
    fs::write(repo.join(".credentials"), "{\"token\":\"jit\"}").unwrap();
}

fn grep(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file()
                && fs::read_to_string(e.path())
                    .unwrap_or_default()
                    .contains(needle)
            {
                hits.push(e.path());
            }
        }
    }
    hits
}

#[test]
fn a_kept_workspace_keeps_the_work_at_the_same_path_and_loses_every_credential() {
    let r = root();
    let first = r.runtime("a1");
    let slot = r.ws.claim(&first, p(7), PKG).unwrap();
    assert_eq!((slot.index, slot.restored, slot.reset), (0, false, false));
    assert!(slot.work_folder.is_absolute() && slot.work_folder.is_dir());
    run_job(&slot.work_folder);
    let back = r.ws.give_back(&first.name, true).unwrap();
    // `_temp`, `.credentials` and two git configs.
    assert_eq!(back, GivenBack::Saved { cleaned: 4 });
    assert_eq!(r.ws.saved(p(7)), 1);
    let all = r.dir.path().join(WORKSPACES_DIR);
    for needle in ["c2VjcmV0", "ghs_tok", "extraheader", "jit", "secret"] {
        assert_eq!(
            grep(&all, needle),
            Vec::<PathBuf>::new(),
            "{needle} survived"
        );
    }

    let second = r.runtime("a2");
    let again = r.ws.claim(&second, p(7), PKG).unwrap();
    assert_eq!((again.index, again.restored), (0, true));
    assert_eq!(
        again.work_folder, slot.work_folder,
        "the same path: paths jobs wrote stay valid"
    );
    let repo = again.work_folder.join("hello/hello");
    assert_eq!(
        fs::read_to_string(repo.join("target/app.o")).unwrap(),
        "object"
    );
    let config = fs::read_to_string(repo.join(".git/config")).unwrap();
    assert!(
        config.contains("bare = false") && !config.contains("extraheader"),
        "{config}"
    );
    let sub = fs::read_to_string(repo.join(".git/modules/lib/config")).unwrap();
    assert!(sub.contains("url = https://github.com/o/lib"), "{sub}");
    assert!(!again.work_folder.join("_temp").exists());
    assert!(!repo.join(".credentials").exists());
}

#[test]
fn concurrent_runners_get_their_own_slots_and_a_freed_one_is_reused() {
    let r = root();
    let (a, b) = (r.runtime("b1"), r.runtime("b2"));
    assert_eq!(r.ws.claim(&a, p(1), PKG).unwrap().index, 0);
    let sb = r.ws.claim(&b, p(1), PKG).unwrap();
    assert_eq!(sb.index, 1);
    // Another target's slots are its own.
    let other = r.runtime("b3");
    assert_eq!(r.ws.claim(&other, p(2), PKG).unwrap().index, 0);
    fs::create_dir_all(sb.work_folder.join("x")).unwrap();
    r.ws.give_back(&b.name, true).unwrap();
    let c = r.runtime("b4");
    let sc = r.ws.claim(&c, p(1), PKG).unwrap();
    assert_eq!((sc.index, sc.restored), (1, true));
    assert!(sc.work_folder.join("x").is_dir());
}

#[test]
fn a_failed_runner_and_a_package_change_empty_the_slot() {
    let r = root();
    let a = r.runtime("c1");
    let s = r.ws.claim(&a, p(3), PKG).unwrap();
    run_job(&s.work_folder);
    assert_eq!(r.ws.give_back(&a.name, false).unwrap(), GivenBack::Reset);
    assert_eq!(r.ws.saved(p(3)), 0);

    let b = r.runtime("c2");
    let s = r.ws.claim(&b, p(3), PKG).unwrap();
    assert!(!s.restored);
    run_job(&s.work_folder);
    assert!(matches!(
        r.ws.give_back(&b.name, true).unwrap(),
        GivenBack::Saved { .. }
    ));
    let c = r.runtime("c3");
    let s = r.ws.claim(&c, p(3), "2.331.0-linux-x64").unwrap();
    assert!(s.reset && !s.restored);
    assert_eq!(fs::read_dir(&s.work_folder).unwrap().count(), 0);
}

#[test]
fn a_reset_deletes_idle_slots_at_once_and_a_used_one_when_given_back() {
    let r = root();
    let (a, b) = (r.runtime("f1"), r.runtime("f2"));
    let sa = r.ws.claim(&a, p(6), PKG).unwrap();
    let sb = r.ws.claim(&b, p(6), PKG).unwrap();
    run_job(&sa.work_folder);
    run_job(&sb.work_folder);
    r.ws.give_back(&a.name, true).unwrap();
    assert!(r.ws.reset_policy(p(6)).unwrap());
    assert!(!sa.work_folder.exists(), "an idle slot goes at once");
    assert!(
        sb.work_folder.join("hello/hello/target/app.o").exists(),
        "a running job keeps its files"
    );
    assert_eq!(r.ws.give_back(&b.name, true).unwrap(), GivenBack::Reset);
    assert_eq!(r.ws.saved(p(6)), 0);
    // Nothing left: the next runner starts empty, in slot 0.
    let c = r.runtime("f3");
    let sc = r.ws.claim(&c, p(6), PKG).unwrap();
    assert_eq!((sc.index, sc.restored), (0, false));
    assert!(!r.ws.reset_policy(p(99)).unwrap());
}

#[test]
fn a_slot_left_by_a_runtime_that_is_gone_is_reset_and_reused() {
    let r = root();
    let a = r.runtime("d1");
    let s = r.ws.claim(&a, p(4), PKG).unwrap();
    run_job(&s.work_folder);
    // The service died and the runtime was removed without a give-back: never cleaned.
    fs::remove_dir_all(&a.path).unwrap();
    let b = r.runtime("d2");
    let s = r.ws.claim(&b, p(4), PKG).unwrap();
    assert_eq!((s.index, s.reset, s.restored), (0, true, false));
    assert_eq!(r.ws.give_back(&a.name, true).unwrap(), GivenBack::NoSlot);
}

#[test]
fn links_out_of_the_workspace_are_never_followed() {
    let r = root();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join(".credentials"), "keep me").unwrap();
    fs::write(
        outside.path().join("config"),
        "[http]\n\textraheader = keep\n",
    )
    .unwrap();
    let a = r.runtime("e1");
    let work = r.ws.claim(&a, p(5), PKG).unwrap().work_folder;
    fs::create_dir_all(work.join("repo/.git")).unwrap();
    std::os::unix::fs::symlink(outside.path(), work.join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("config"), work.join("repo/.git/config"))
        .unwrap();
    std::os::unix::fs::symlink(outside.path(), work.join("repo/.git/outside")).unwrap();
    r.ws.give_back(&a.name, true).unwrap();
    assert_eq!(
        fs::read_to_string(outside.path().join(".credentials")).unwrap(),
        "keep me"
    );
    assert!(fs::read_to_string(outside.path().join("config"))
        .unwrap()
        .contains("extraheader"));
}
