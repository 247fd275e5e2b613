//! GITHUB.md §2: installation discovery lists what the user *and* the installation can both
//! reach, whoever owns the installation's account.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken expectations

mod common;

use common::{get, world};
use rm_testkit::InstallationRepos;
use serde_json::Value;

fn account_logins(installations: &Value) -> Vec<String> {
    installations["installations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["account"]["login"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn installations_reached_through_collaboration_are_listed() {
    let w = world().await;
    let addr = w.gh.addr();
    // carol's installation covers carol/shared, where octo collaborates (not an admin).
    w.gh.create_user("carol").unwrap();
    w.gh.create_repo("carol/shared").unwrap();
    w.gh.create_repo("carol/private").unwrap();
    w.gh.add_collaborator("carol/shared", "octo", false)
        .unwrap();
    let carol =
        w.gh.create_installation(
            "carol",
            InstallationRepos::Selected(vec!["carol/shared".into()]),
        )
        .unwrap();
    // eve's installation covers only eve/y; octo collaborates on eve/x: no common ground.
    w.gh.create_user("eve").unwrap();
    w.gh.create_repo("eve/x").unwrap();
    w.gh.create_repo("eve/y").unwrap();
    w.gh.add_collaborator("eve/x", "octo", true).unwrap();
    w.gh.create_installation("eve", InstallationRepos::Selected(vec!["eve/y".into()]))
        .unwrap();
    // dave's installation covers everything of dave's, none of which octo can see.
    w.gh.create_user("dave").unwrap();
    w.gh.create_repo("dave/solo").unwrap();
    let dave =
        w.gh.create_installation("dave", InstallationRepos::All)
            .unwrap();

    let r = get(addr, "/user/installations", &w.token).await;
    assert_eq!(r.status, 200);
    let mut logins = account_logins(&r.json());
    logins.sort();
    assert_eq!(logins, ["acme", "carol", "octo"]);
    assert_eq!(r.json()["total_count"], 3);

    // Only the intersection is listed, with octo's own (non-admin) permission.
    let r = get(
        addr,
        &format!("/user/installations/{carol}/repositories"),
        &w.token,
    )
    .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["total_count"], 1);
    assert_eq!(v["repository_selection"], "selected");
    assert_eq!(v["repositories"][0]["full_name"], "carol/shared");
    assert_eq!(v["repositories"][0]["permissions"]["admin"], false);

    // An installation the user cannot reach is private: 404, not 403.
    let r = get(
        addr,
        &format!("/user/installations/{dave}/repositories"),
        &w.token,
    )
    .await;
    assert_eq!(r.status, 404);

    // The collaboration is what makes carol's installation visible.
    let bob = {
        w.gh.create_user("bob").unwrap();
        w.gh.issue_token("bob").unwrap().access_token
    };
    let r = get(addr, "/user/installations", &bob).await;
    assert!(account_logins(&r.json()).is_empty());
    w.gh.add_collaborator("carol/shared", "bob", false).unwrap();
    let r = get(addr, "/user/installations", &bob).await;
    assert_eq!(account_logins(&r.json()), ["carol"]);
}
