//! The caches' settings: a target's own round-trip, clear and go with their policy; an
//! unknown policy or a non-shared namespace is refused and changes nothing; the host's size
//! cap has a default, round-trips and refuses a cap below the minimum; a damaged row is a
//! typed error.

// Helpers outside #[test] fns unwrap too: a panic there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rm_core::caches::{CacheSetting, Namespace, DEFAULT_CAP_BYTES};
use rm_core::{LabelSet, PolicyId, PolicySpec, Target};
use rm_journal::{HostCacheSettings, Journal, JournalError};
use rusqlite::Connection;

fn open_with_policy() -> (tempfile::TempDir, Journal, PolicyId) {
    let dir = tempfile::tempdir().unwrap();
    let mut journal = Journal::open(dir.path().join("journal.sqlite3")).unwrap();
    let spec = PolicySpec::new(
        Target::parse("me/app").unwrap(),
        LabelSet::parse(["rm-home-linux-x64"]).unwrap(),
    );
    let id = journal.insert_policy(&spec).unwrap().id();
    (dir, journal, id)
}

#[test]
fn a_targets_cache_settings_round_trip_clear_and_go_with_their_policy() {
    let (_dir, mut journal, id) = open_with_policy();
    assert!(journal.policy_caches().unwrap().is_empty());
    let own = CacheSetting {
        enabled: Some(true),
        namespace: Some(Namespace::shared("team-a").unwrap()),
    };
    journal.put_policy_cache(id, &own).unwrap();
    assert_eq!(journal.policy_caches().unwrap(), vec![(id, own.clone())]);
    let off = CacheSetting {
        enabled: Some(false),
        namespace: None,
    };
    journal.put_policy_cache(id, &off).unwrap();
    assert_eq!(journal.policy_caches().unwrap(), vec![(id, off)]);
    journal
        .put_policy_cache(id, &CacheSetting::default())
        .unwrap();
    assert!(journal.policy_caches().unwrap().is_empty(), "cleared");

    journal.put_policy_cache(id, &own).unwrap();
    journal.delete_policy(id).unwrap();
    assert!(
        journal.policy_caches().unwrap().is_empty(),
        "gone with the policy"
    );
}

#[test]
fn refused_cache_settings_change_nothing() {
    let (_dir, mut journal, id) = open_with_policy();
    let own = CacheSetting {
        enabled: Some(false),
        namespace: None,
    };
    journal.put_policy_cache(id, &own).unwrap();
    let repo_ns = CacheSetting {
        enabled: None,
        namespace: Some(Namespace::of_target(&Target::parse("me/app").unwrap())),
    };
    assert!(matches!(
        journal.put_policy_cache(id, &repo_ns),
        Err(JournalError::InvalidInput { .. })
    ));
    assert!(matches!(
        journal.put_policy_cache(PolicyId::new(999), &own),
        Err(JournalError::NotFound { .. })
    ));
    assert_eq!(journal.policy_caches().unwrap(), vec![(id, own)]);
}

#[test]
fn the_hosts_cache_size_has_a_default_round_trips_and_refuses_too_small() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite3");
    let mut journal = Journal::open(&path).unwrap();
    assert_eq!(
        journal.host_cache_settings().unwrap(),
        HostCacheSettings {
            cap_bytes: DEFAULT_CAP_BYTES,
            tool_cache: true
        }
    );
    let set = HostCacheSettings {
        cap_bytes: 1 << 30,
        tool_cache: false,
    };
    journal.put_host_cache_settings(set, 1).unwrap();
    assert_eq!(journal.host_cache_settings().unwrap(), set);
    assert!(matches!(
        journal.put_host_cache_settings(
            HostCacheSettings {
                cap_bytes: 1,
                tool_cache: true
            },
            2
        ),
        Err(JournalError::InvalidInput { .. })
    ));
    assert_eq!(journal.host_cache_settings().unwrap(), set, "unchanged");

    // A namespace that breaks the rules, written behind the journal's back, reads as an error
    // naming the row.
    let (_d, mut j2, id) = open_with_policy();
    j2.put_policy_cache(
        id,
        &CacheSetting {
            enabled: None,
            namespace: Some(Namespace::shared("ok").unwrap()),
        },
    )
    .unwrap();
    let p2 = _d.path().join("journal.sqlite3");
    Connection::open(&p2)
        .unwrap()
        .execute("UPDATE policy_cache SET namespace = '../etc'", [])
        .unwrap();
    let e = j2.policy_caches().unwrap_err();
    assert!(e.to_string().contains("policy_cache"), "{e}");
}
