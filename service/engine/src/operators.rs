//! The operators group: members of `runner-manager` (the `.deb` creates it and adds the
//! installing user) may operate a root service from their tray or CLI.
//!
//! Membership is read from the user and group databases at every request, not from the
//! caller's process credentials: a user added with `usermod -aG` while the service runs is
//! admitted from their next request (their open sessions only gain the group's file access
//! after logging in again), and a user removed from the group is refused at once.

use nix::unistd::{Gid, Group, Uid, User};

/// The operators group's name.
pub const OPERATORS_GROUP: &str = "runner-manager";

/// `rm_proto::GroupMembership` over the system's databases (NSS).
pub struct UnixGroup {
    pub name: String,
}

impl UnixGroup {
    fn lookup(&self) -> Option<Group> {
        Group::from_name(&self.name).ok().flatten()
    }
}

impl rm_proto::GroupMembership for UnixGroup {
    fn group(&self) -> &str {
        &self.name
    }

    fn is_member(&self, uid: u32) -> bool {
        let (Some(user), Some(group)) = (
            User::from_uid(Uid::from_raw(uid)).ok().flatten(),
            self.lookup(),
        ) else {
            return false;
        };
        user.gid == group.gid || group.mem.contains(&user.name)
    }

    fn refusal_hint(&self, uid: u32) -> String {
        let user = User::from_uid(Uid::from_raw(uid))
            .ok()
            .flatten()
            .map(|u| u.name)
            .unwrap_or_else(|| uid.to_string());
        let create = if self.lookup().is_none() {
            format!("sudo groupadd --system {} && ", self.name)
        } else {
            String::new()
        };
        format!(
            "ask an administrator to add you to the operators group: `{create}sudo usermod -aG {} {user}`, then log in again",
            self.name
        )
    }
}

/// The gid of the group, when it exists (for logs).
pub fn gid(name: &str) -> Option<Gid> {
    Group::from_name(name).ok().flatten().map(|g| g.gid)
}
