//! A target's own choices about the job sandbox (the walls themselves are `rm_runner::sandbox`).
//! Both leave the default only by the operator's explicit word, and both are shown on the
//! target wherever it is shown (status, `repo list`, the tray).

/// What a target's runners start with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TargetSandbox {
    /// Inside the walls (the default). `false`: the operator's opt-out for this target: its
    /// jobs can read the machine's files, other processes and the loopback services.
    pub walls: bool,
    /// The host's Docker daemon is reachable (its socket is bound into the sandbox, and a
    /// root service gives the runner the socket's group). Docker is root-equivalent: its jobs
    /// have root on this machine.
    pub docker: bool,
    /// The most memory one of its jobs may hold, in MiB (its cgroup's `memory.max`, where the
    /// host gives jobs cgroups); `None`: the host's default, three quarters of its memory.
    pub memory_max_mb: Option<u32>,
}

impl Default for TargetSandbox {
    fn default() -> Self {
        TargetSandbox {
            walls: true,
            docker: false,
            memory_max_mb: None,
        }
    }
}

impl TargetSandbox {
    pub fn is_default(&self) -> bool {
        *self == TargetSandbox::default()
    }

    /// What it means, in plain words, when it is not the default: `None` for the default.
    pub fn warning(&self) -> Option<String> {
        match (self.walls, self.docker) {
            (true, false) => None,
            (false, _) => Some(
                "its jobs run without the sandbox: they can read your files, other processes and \
                 the services on this machine's loopback"
                    .to_owned(),
            ),
            (true, true) => {
                Some("its jobs can use Docker, which gives them root on this machine".to_owned())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_choice_away_from_the_default_warns() {
        assert!(TargetSandbox::default().is_default());
        assert_eq!(TargetSandbox::default().warning(), None);
        let off = TargetSandbox {
            walls: false,
            docker: false,
            memory_max_mb: None,
        };
        assert!(off.warning().unwrap().contains("without the sandbox"));
        let docker = TargetSandbox {
            walls: true,
            docker: true,
            memory_max_mb: None,
        };
        assert!(docker.warning().unwrap().contains("root"));
    }
}
