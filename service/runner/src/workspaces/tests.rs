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

/// What a job leaves in `_work`: a checkout with persisted credentials, build output, the
/// job's temp files, and a runner credential file a job copied in.
fn run_job(rt: &Runtime) {
    let repo = rt.path.join("_work/hello/hello");
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
    fs::create_dir_all(rt.path.join("_work/_temp")).unwrap();
    fs::write(rt.path.join("_work/_temp/git-credentials.config"), "secret").unwrap();
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
fn a_saved_workspace_keeps_the_work_and_loses_every_credential() {
    let r = root();
    let first = r.runtime("a1");
    let taken = r.ws.take(&first, PolicyId::new(7), PKG).unwrap();
    assert_eq!((taken.index, taken.restored), (0, false));
    run_job(&first);
    let back = r.ws.give_back(&first.name, &first.path, true).unwrap();
    // `_temp`, `.credentials` and two git configs.
    assert_eq!(back, GivenBack::Saved { cleaned: 4 });
    assert!(!first.path.join("_work").exists(), "moved into the slot");
    assert_eq!(r.ws.saved(PolicyId::new(7)), 1);
    let slot = r.dir.path().join(WORKSPACES_DIR);
    for needle in ["c2VjcmV0", "ghs_tok", "extraheader", "jit", "secret"] {
        assert_eq!(
            grep(&slot, needle),
            Vec::<PathBuf>::new(),
            "{needle} survived"
        );
    }

    let second = r.runtime("a2");
    let taken = r.ws.take(&second, PolicyId::new(7), PKG).unwrap();
    assert_eq!((taken.index, taken.restored), (0, true));
    let repo = second.path.join("_work/hello/hello");
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
    assert!(!second.path.join("_work/_temp").exists());
    assert!(!repo.join(".credentials").exists());
}

#[test]
fn concurrent_runners_get_their_own_slots_and_a_freed_one_is_reused() {
    let r = root();
    let (a, b) = (r.runtime("b1"), r.runtime("b2"));
    assert_eq!(r.ws.take(&a, PolicyId::new(1), PKG).unwrap().index, 0);
    assert_eq!(r.ws.take(&b, PolicyId::new(1), PKG).unwrap().index, 1);
    // Another target's slots are its own.
    let other = r.runtime("b3");
    assert_eq!(r.ws.take(&other, PolicyId::new(2), PKG).unwrap().index, 0);
    fs::create_dir_all(b.path.join("_work/x")).unwrap();
    r.ws.give_back(&b.name, &b.path, true).unwrap();
    let c = r.runtime("b4");
    let taken = r.ws.take(&c, PolicyId::new(1), PKG).unwrap();
    assert_eq!((taken.index, taken.restored), (1, true));
    assert!(c.path.join("_work/x").is_dir());
}

#[test]
fn a_failed_runner_a_package_change_and_a_reset_each_empty_the_slot() {
    let r = root();
    let a = r.runtime("c1");
    r.ws.take(&a, PolicyId::new(3), PKG).unwrap();
    run_job(&a);
    assert_eq!(
        r.ws.give_back(&a.name, &a.path, false).unwrap(),
        GivenBack::Reset
    );
    assert_eq!(r.ws.saved(PolicyId::new(3)), 0);

    let b = r.runtime("c2");
    assert!(!r.ws.take(&b, PolicyId::new(3), PKG).unwrap().restored);
    run_job(&b);
    assert!(matches!(
        r.ws.give_back(&b.name, &b.path, true).unwrap(),
        GivenBack::Saved { .. }
    ));
    let c = r.runtime("c3");
    let taken =
        r.ws.take(&c, PolicyId::new(3), "2.331.0-linux-x64")
            .unwrap();
    assert!(taken.reset_for_package && !taken.restored);
    assert!(!c.path.join("_work").exists());

    // Reset while a runner holds the slot: it saves nothing when it ends.
    run_job(&c);
    assert!(r.ws.reset_policy(PolicyId::new(3)).unwrap());
    assert_eq!(
        r.ws.give_back(&c.name, &c.path, true).unwrap(),
        GivenBack::NoSlot
    );
    assert_eq!(r.ws.saved(PolicyId::new(3)), 0);
}

#[test]
fn a_lease_of_a_runtime_that_is_gone_is_taken_over() {
    let r = root();
    let a = r.runtime("d1");
    r.ws.take(&a, PolicyId::new(4), PKG).unwrap();
    // The service died and the runtime was scrubbed without a give-back.
    fs::remove_dir_all(&a.path).unwrap();
    let b = r.runtime("d2");
    assert_eq!(r.ws.take(&b, PolicyId::new(4), PKG).unwrap().index, 0);
    assert_eq!(
        r.ws.give_back(&a.name, &a.path, true).unwrap(),
        GivenBack::NoSlot
    );
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
    r.ws.take(&a, PolicyId::new(5), PKG).unwrap();
    let work = a.path.join("_work");
    fs::create_dir_all(work.join("repo/.git")).unwrap();
    std::os::unix::fs::symlink(outside.path(), work.join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("config"), work.join("repo/.git/config"))
        .unwrap();
    std::os::unix::fs::symlink(outside.path(), work.join("repo/.git/outside")).unwrap();
    r.ws.give_back(&a.name, &a.path, true).unwrap();
    assert_eq!(
        fs::read_to_string(outside.path().join(".credentials")).unwrap(),
        "keep me"
    );
    assert!(fs::read_to_string(outside.path().join("config"))
        .unwrap()
        .contains("extraheader"));
}
