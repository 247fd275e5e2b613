//! This machine, as the allocator and the routing labels see it.

use crate::ids::HostId;
use crate::labels::{routing_label, Arch, HostLabel, Label, Os, ProfileName, RoutingPrefix};

/// This machine. `capacity` is the ceiling on concurrently active runners over all policies
/// (0 = start nothing). The runner root directory is an IO concern and lives with the runner
/// adapter, not here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub id: HostId,
    pub os: Os,
    pub arch: Arch,
    pub label: HostLabel,
    pub capacity: u32,
}

impl Host {
    /// The routing label of a policy with `profile` on this host.
    pub fn routing_label(&self, prefix: &RoutingPrefix, profile: &ProfileName) -> Label {
        routing_label(prefix, &self.label, self.os, self.arch, profile)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_label_uses_the_host_parts() {
        let host = Host {
            id: HostId::new("h1").unwrap(),
            os: Os::Linux,
            arch: Arch::Arm64,
            label: HostLabel::from_machine_name("Build Box"),
            capacity: 2,
        };
        let label = host.routing_label(&RoutingPrefix::default(), &ProfileName::default());
        assert_eq!(label.as_str(), "rm-build-box-linux-arm64");
    }
}
