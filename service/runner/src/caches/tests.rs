//! The caches' layout on a real filesystem, runners as the service's own user (the
//! separation by uid and group is checked end to end, as root, in `tests/tests/caches.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::runtime::{RunnerRoot, RuntimeName};
use crate::ResolvedRunAs;
use std::fs;
use std::os::unix::fs::PermissionsExt;

struct World {
    _dir: tempfile::TempDir,
    root: RunnerRoot,
    caches: Caches,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let root = RunnerRoot::prepare(dir.path().join("runners"), ResolvedRunAs::ServiceUser).unwrap();
    let caches = Caches::open(
        root.path(),
        CacheOwners::Single { runner: None },
        "linux-x64",
    )
    .unwrap();
    World {
        _dir: dir,
        root,
        caches,
    }
}

fn plan(repo: &str, access: CacheAccess) -> CachePlan {
    let ns = Namespace::of_target(&rm_core::Target::parse(repo).unwrap());
    CachePlan {
        namespace: Some(ns.clone()),
        access,
        tool_cache: true,
        tool_namespace: Some(ns),
    }
}

fn ns(repo: &str) -> Namespace {
    Namespace::of_target(&rm_core::Target::parse(repo).unwrap())
}

fn var<'a>(p: &'a PreparedCaches, name: &str) -> &'a str {
    p.env
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("{name} not set: {:?}", p.env))
}

impl World {
    fn runtime(&self, name: &str) -> Runtime {
        self.root
            .create_runtime(&RuntimeName::new(name).unwrap())
            .unwrap()
    }
    fn end(&self, rt: &Runtime) {
        crate::scrub::scrub(&rt.path).unwrap();
        self.caches.release(rt.name.as_str()).unwrap();
    }
}

#[test]
fn writers_share_a_repositorys_cache_and_a_fork_job_gets_a_copy() {
    let w = world();
    let a = w.runtime("a");
    let pa = w
        .caches
        .prepare(&a, &plan("octo/hello", CacheAccess::ReadWrite))
        .unwrap();
    let npm = PathBuf::from(var(&pa, "npm_config_cache"));
    assert!(npm.starts_with(w.caches.root()), "{}", npm.display());
    fs::write(npm.join("first"), "1").unwrap();
    // Go's two variables point inside its one cache, made with it.
    assert!(Path::new(var(&pa, "GOMODCACHE")).is_dir() && Path::new(var(&pa, "GOCACHE")).is_dir());
    // cargo: a home of the job's own whose registry and git are the shared ones.
    let cargo = PathBuf::from(var(&pa, "CARGO_HOME"));
    assert!(cargo.starts_with(&a.path), "{}", cargo.display());
    assert!(fs::symlink_metadata(cargo.join("registry"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(
        !cargo.join("bin").exists(),
        "cargo's programs are not shared"
    );
    // Maven: its local repository under the job's HOME is the shared one.
    let m2 = a.path.join(crate::process::HOME_DIR).join(".m2/repository");
    assert!(fs::symlink_metadata(&m2).unwrap().file_type().is_symlink());

    // A second writer at once shares what is safe to share…
    let b = w.runtime("b");
    let pb = w
        .caches
        .prepare(&b, &plan("octo/hello", CacheAccess::ReadWrite))
        .unwrap();
    assert_eq!(var(&pb, "npm_config_cache"), npm.display().to_string());
    // …but not yarn's, whose lease the first holds: its own directory for this job.
    assert_ne!(var(&pb, "YARN_CACHE_FOLDER"), var(&pa, "YARN_CACHE_FOLDER"));
    assert!(Path::new(var(&pb, "YARN_CACHE_FOLDER")).starts_with(&b.path));

    // A runner that may take a fork's job reads a copy and writes nothing shared.
    let f = w.runtime("f");
    let pf = w
        .caches
        .prepare(&f, &plan("octo/hello", CacheAccess::ReadOnly))
        .unwrap();
    let fork_npm = PathBuf::from(var(&pf, "npm_config_cache"));
    assert!(fork_npm.starts_with(&f.path));
    assert_eq!(fs::read_to_string(fork_npm.join("first")).unwrap(), "1");
    fs::write(fork_npm.join("first"), "poisoned").unwrap();
    assert_eq!(fs::read_to_string(npm.join("first")).unwrap(), "1");

    // Another repository never sees this one's cache.
    let o = w.runtime("o");
    let po = w
        .caches
        .prepare(&o, &plan("octo/other", CacheAccess::ReadWrite))
        .unwrap();
    assert_ne!(var(&po, "npm_config_cache"), var(&pa, "npm_config_cache"));

    // The lease ends with its runtime: the next writer gets the shared yarn cache.
    w.end(&a);
    let c = w.runtime("c");
    let pc = w
        .caches
        .prepare(&c, &plan("octo/hello", CacheAccess::ReadWrite))
        .unwrap();
    assert_eq!(var(&pc, "YARN_CACHE_FOLDER"), var(&pa, "YARN_CACHE_FOLDER"));
    // Scrubbing runtimes removed no cache.
    assert_eq!(fs::read_to_string(npm.join("first")).unwrap(), "1");
    let hits = w.caches.entries().unwrap();
    let npm_entry = hits
        .iter()
        .find(|e| {
            e.tool == "npm"
                && e.namespace
                    .as_ref()
                    .is_some_and(|n| n.to_string() == "octo/hello")
        })
        .unwrap();
    assert!(npm_entry.hits >= 2, "{npm_entry:?}");
    assert!(npm_entry.in_use, "runner c has it");
}

#[test]
fn one_tool_cache_writer_at_a_time_and_a_half_written_tool_is_never_used() {
    let w = world();
    let a = w.runtime("a");
    let pa = w
        .caches
        .prepare(&a, &plan("octo/hello", CacheAccess::ReadWrite))
        .unwrap();
    let shared = PathBuf::from(var(&pa, "RUNNER_TOOL_CACHE"));
    assert_eq!(shared, w.caches.tool_cache_dir(&ns("octo/hello")));
    assert_eq!(
        var(&pa, "AGENT_TOOLSDIRECTORY"),
        var(&pa, "RUNNER_TOOL_CACHE")
    );
    // The holder installs one tool completely and leaves another half-written.
    let done = shared.join("node/20.1.0/x64");
    fs::create_dir_all(done.join("bin")).unwrap();
    fs::write(done.join("bin/node"), "#!/bin/sh\n").unwrap();
    fs::write(shared.join("node/20.1.0/x64.complete"), "").unwrap();
    fs::create_dir_all(shared.join("python/3.12.1/x64")).unwrap();

    // A second runner meanwhile: its own tool cache, with the finished tools linked in.
    let b = w.runtime("b");
    let pb = w
        .caches
        .prepare(&b, &plan("octo/hello", CacheAccess::ReadWrite))
        .unwrap();
    let own = PathBuf::from(var(&pb, "RUNNER_TOOL_CACHE"));
    assert!(own.starts_with(&b.path));
    assert!(own.join("node/20.1.0/x64/bin/node").is_file());
    assert!(own.join("node/20.1.0/x64.complete").exists());
    assert!(
        !own.join("python").exists(),
        "a half-written tool is not offered"
    );

    // The holder ends: the next writer finds the finished tool sealed and the other gone.
    w.end(&a);
    let c = w.runtime("c");
    let pc = w
        .caches
        .prepare(&c, &plan("octo/hello", CacheAccess::ReadWrite))
        .unwrap();
    assert_eq!(PathBuf::from(var(&pc, "RUNNER_TOOL_CACHE")), shared);
    assert!(!shared.join("python/3.12.1/x64").exists());
    let mode = fs::metadata(done.join("bin/node"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o222, 0, "sealed read-only: {mode:o}");
    // A fork's runner never writes the tool cache.
    w.end(&c);
    let f = w.runtime("f");
    let pf = w
        .caches
        .prepare(&f, &plan("octo/hello", CacheAccess::ReadOnly))
        .unwrap();
    assert!(Path::new(var(&pf, "RUNNER_TOOL_CACHE")).starts_with(&f.path));
}

#[test]
fn pruning_keeps_the_cap_and_spares_a_cache_in_use_and_clear_names_what_it_left() {
    let w = world();
    let fill = |repo: &str, name: &str, kib: usize| {
        let rt = w.runtime(name);
        let p = w
            .caches
            .prepare(&rt, &plan(repo, CacheAccess::ReadWrite))
            .unwrap();
        fs::write(
            Path::new(var(&p, "npm_config_cache")).join("blob"),
            vec![7u8; kib * 1024],
        )
        .unwrap();
        rt
    };
    let old = fill("octo/old", "a", 512);
    w.end(&old);
    let busy = fill("octo/busy", "b", 512);
    let new = fill("octo/new", "c", 512);
    w.end(&new);
    // Room for about one: the oldest goes first, the busy one stays although older than new.
    let r = w.caches.prune(700 * 1024).unwrap();
    let removed: Vec<String> = r
        .removed
        .iter()
        .map(|e| e.namespace.as_ref().unwrap().to_string())
        .collect();
    assert!(removed.contains(&"octo/old".to_owned()), "{removed:?}");
    assert!(!removed.contains(&"octo/busy".to_owned()), "{removed:?}");
    let left: Vec<EntryInfo> = w
        .caches
        .entries()
        .unwrap()
        .into_iter()
        .filter(|e| e.tool == "npm")
        .collect();
    assert!(
        left.iter()
            .any(|e| e.namespace.as_ref().unwrap().to_string() == "octo/busy"
                && e.bytes >= 512 * 1024)
    );

    // clear: everything not in use goes; what is in use is named.
    let cleared = w.caches.clear(&ClearFilter::default()).unwrap();
    assert!(cleared.in_use.iter().any(|e| e.tool == "npm"));
    assert!(w.caches.entries().unwrap().iter().all(|e| e.in_use));
    w.end(&busy);
    let only = ClearFilter {
        namespace: Some(Namespace::of_target(
            &rm_core::Target::parse("octo/busy").unwrap(),
        )),
        tool: Some("npm".into()),
    };
    let r = w.caches.clear(&only).unwrap();
    assert_eq!(r.removed.len(), 1);
    assert!(r.in_use.is_empty());
}

#[test]
fn a_prune_sees_what_the_last_runner_wrote_into_a_cache_measured_before() {
    let w = world();
    let write = |name: &str, file: &str, kib: usize| {
        let rt = w.runtime(name);
        let p = w
            .caches
            .prepare(&rt, &plan("octo/hello", CacheAccess::ReadWrite))
            .unwrap();
        fs::write(
            Path::new(var(&p, "npm_config_cache")).join(file),
            vec![7u8; kib * 1024],
        )
        .unwrap();
        w.end(&rt);
    };
    write("a", "one", 256);
    // Under the cap: kept, and its size is now remembered.
    assert!(w.caches.prune(1024 * 1024).unwrap().removed.is_empty());
    // A later runner of the namespace makes it larger than the cap: the remembered size no
    // longer holds, and the prune after that runner's end walks it again.
    write("b", "two", 2048);
    let removed = w.caches.prune(1024 * 1024).unwrap().removed;
    assert!(
        removed
            .iter()
            .any(|e| e.tool == "npm" && e.bytes >= 2048 * 1024),
        "{removed:?}"
    );
}

#[test]
fn a_purge_removes_one_namespace_and_a_prune_never_the_tool_cache() {
    let w = world();
    for (repo, name) in [("octo/fork-target", "a"), ("octo/kept", "b")] {
        let rt = w.runtime(name);
        let p = w
            .caches
            .prepare(&rt, &plan(repo, CacheAccess::ReadWrite))
            .unwrap();
        fs::write(
            Path::new(var(&p, "npm_config_cache")).join("blob"),
            vec![7u8; 64 * 1024],
        )
        .unwrap();
        w.end(&rt);
    }
    let tool = w.caches.tool_cache_dir(&ns("octo/kept")).join("mytool");
    fs::create_dir_all(&tool).unwrap();
    fs::write(tool.join("big"), vec![1u8; 256 * 1024]).unwrap();

    let purged = w.caches.purge(&ns("octo/fork-target")).unwrap();
    assert!(!purged.removed.is_empty());
    assert!(purged
        .removed
        .iter()
        .all(|e| e.namespace == Some(ns("octo/fork-target"))));
    let left = w.caches.entries().unwrap();
    assert!(left
        .iter()
        .all(|e| e.namespace != Some(ns("octo/fork-target"))));
    assert!(left.iter().any(|e| e.namespace == Some(ns("octo/kept"))));

    // A cap of nothing: every dependency cache goes, the tool cache stays whole.
    let is_tool = |e: &EntryInfo| e.tool.starts_with("tool-cache/");
    let pruned = w.caches.prune(0).unwrap();
    assert!(pruned.removed.iter().all(|e| !is_tool(e)));
    assert!(tool.join("big").exists());
    let left = w.caches.entries().unwrap();
    assert!(!left.is_empty() && left.iter().all(is_tool), "{left:?}");
}

#[test]
fn a_tool_one_repository_installed_is_never_offered_to_another() {
    let w = world();
    let a = w.runtime("a");
    let pa = w
        .caches
        .prepare(&a, &plan("octo/hello", CacheAccess::ReadWrite))
        .unwrap();
    let shared = PathBuf::from(var(&pa, "RUNNER_TOOL_CACHE"));
    let planted = shared.join("node/20.1.0/x64");
    fs::create_dir_all(&planted).unwrap();
    fs::write(planted.join("node"), "#!/bin/sh\necho planted\n").unwrap();
    fs::write(shared.join("node/20.1.0/x64.complete"), "").unwrap();
    w.end(&a);

    // The same repository's next runner finds it (sealed, linked or shared).
    let b = w.runtime("b");
    let pb = w
        .caches
        .prepare(&b, &plan("octo/hello", CacheAccess::ReadWrite))
        .unwrap();
    let tc = PathBuf::from(var(&pb, "RUNNER_TOOL_CACHE"));
    assert!(tc.join("node/20.1.0/x64/node").exists());
    w.end(&b);

    // Another repository's runner: a tool cache without it, outside the first one's.
    let c = w.runtime("c");
    let pc = w
        .caches
        .prepare(&c, &plan("octo/other", CacheAccess::ReadWrite))
        .unwrap();
    let tc = PathBuf::from(var(&pc, "RUNNER_TOOL_CACHE"));
    assert!(!tc.join("node").exists(), "repository B sees A's tool");
    assert!(!tc.starts_with(w.caches.tool_cache_dir(&ns("octo/hello"))));
    assert!(pc
        .shared
        .iter()
        .all(|d| !d.starts_with(w.caches.tool_cache_dir(&ns("octo/hello")))));

    // An organization's runner (its job's repository unknown when it starts): a tool cache
    // of its own, shared with no one.
    let d = w.runtime("d");
    let pd = w
        .caches
        .prepare(
            &d,
            &CachePlan {
                namespace: None,
                access: CacheAccess::ReadWrite,
                tool_cache: true,
                tool_namespace: None,
            },
        )
        .unwrap();
    let tc = PathBuf::from(var(&pd, "RUNNER_TOOL_CACHE"));
    assert!(tc.starts_with(&d.path), "{}", tc.display());
    assert!(!tc.join("node").exists());
    assert!(pd.shared.is_empty());
}

#[test]
fn a_setup_failure_becomes_a_problem_once_it_repeats_and_goes_with_a_success() {
    let settings = CacheSettings::default();
    settings.note_workspace_setup(Err("disk full".into()));
    assert_eq!(
        settings.setup_problem(),
        None,
        "one failure may be a hiccup"
    );
    settings.note_workspace_setup(Err("disk still full".into()));
    let p = settings.setup_problem().unwrap();
    assert_eq!(
        (p.what, p.failures, p.detail.as_str()),
        ("workspace", 2, "disk still full")
    );
    settings.note_caches_setup(Err("a".into()));
    settings.note_caches_setup(Err("b".into()));
    assert_eq!(settings.setup_problem().unwrap().what, "caches");
    settings.note_caches_setup(Ok(()));
    settings.note_workspace_setup(Ok(()));
    assert_eq!(settings.setup_problem(), None);
}

#[test]
fn what_a_runner_could_write_is_known_from_its_record_until_it_is_released() {
    let w = world();
    let writer = w.runtime("w");
    w.caches
        .prepare(&writer, &plan("octo/hello", CacheAccess::ReadWrite))
        .unwrap();
    let reader = w.runtime("r");
    w.caches
        .prepare(&reader, &plan("octo/hello", CacheAccess::ReadOnly))
        .unwrap();
    // The writer shared the namespace's caches and held its tool cache's lease.
    assert_eq!(w.caches.written_by("w"), vec![ns("octo/hello")]);
    // A reader worked on copies: nothing of the namespace to remove for it.
    assert!(w.caches.written_by("r").is_empty());
    // Nothing changed yet; a job starts well after its caches were prepared.
    assert!(!w.caches.changed_since_prepare("w"));
    std::thread::sleep(std::time::Duration::from_millis(50));
    let npm = w
        .caches
        .deps_dir()
        .join(ns("octo/hello").rel_dir())
        .join("npm");
    fs::create_dir_all(npm.join("a/b")).unwrap();
    assert!(w.caches.changed_since_prepare("w"), "a new directory");
    assert!(
        !w.caches.changed_since_prepare("r"),
        "a reader could change nothing shared"
    );
    // A fresh `Caches` (a restarted service) reads the same from disk.
    let again = Caches::open(
        w.root.path(),
        CacheOwners::Single { runner: None },
        "linux-x64",
    )
    .unwrap();
    assert_eq!(again.written_by("w"), vec![ns("octo/hello")]);
    assert!(again.changed_since_prepare("w"));
    w.end(&writer);
    assert!(w.caches.written_by("w").is_empty(), "released");
    w.end(&reader);
}

#[test]
fn a_change_deep_in_a_shared_cache_or_to_a_files_content_is_seen() {
    let w = world();
    let writer = w.runtime("w");
    w.caches
        .prepare(&writer, &plan("octo/hello", CacheAccess::ReadWrite))
        .unwrap();
    let npm = w
        .caches
        .deps_dir()
        .join(ns("octo/hello").rel_dir())
        .join("npm");
    fs::create_dir_all(npm.join("deep/er")).unwrap();
    fs::write(npm.join("deep/er/file"), "1").unwrap();
    // A later runner's view: prepared after those were made.
    w.end(&writer);
    std::thread::sleep(std::time::Duration::from_millis(50));
    let next = w.runtime("n");
    w.caches
        .prepare(&next, &plan("octo/hello", CacheAccess::ReadWrite))
        .unwrap();
    assert!(!w.caches.changed_since_prepare("n"));
    std::thread::sleep(std::time::Duration::from_millis(50));
    // Rewriting a file's content in place changes no directory, only the file.
    fs::write(npm.join("deep/er/file"), "2").unwrap();
    assert!(w.caches.changed_since_prepare("n"));
    w.end(&next);
}
