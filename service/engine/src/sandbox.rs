//! The job sandbox's settings from the service's own: what to hide (the data directory, the
//! socket's directory, the runner root, the package cache) and which loopback ports a job may
//! still reach (a GitHub on this host: GitHub Enterprise Server on localhost, the test suite's
//! fake). The walls themselves are `rm_runner::sandbox`.

use rm_runner::sandbox::{SandboxConfig, SandboxMode};
use std::path::{Path, PathBuf};

/// What the service knows that the sandbox needs.
pub struct SandboxInputs<'a> {
    pub off: bool,
    pub data_dir: &'a Path,
    pub socket: &'a Path,
    pub runner_root: &'a Path,
    pub cache_dir: &'a Path,
    /// GitHub's web and API bases.
    pub github: &'a [&'a str],
    pub test_share: Option<PathBuf>,
}

pub fn sandbox_config(inputs: &SandboxInputs<'_>) -> SandboxConfig {
    let mut hidden = vec![
        inputs.data_dir.to_path_buf(),
        inputs.runner_root.to_path_buf(),
        inputs.cache_dir.to_path_buf(),
    ];
    if let Some(dir) = inputs.socket.parent().filter(|d| *d != Path::new("/")) {
        hidden.push(dir.to_path_buf());
    }
    SandboxConfig {
        mode: if inputs.off {
            SandboxMode::Off
        } else {
            SandboxMode::Required
        },
        hidden,
        test_share: inputs.test_share.clone(),
        ..SandboxConfig::reaching(inputs.github)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_services_own_places_are_hidden() {
        let config = sandbox_config(&SandboxInputs {
            off: false,
            data_dir: Path::new("/var/lib/runner-manager"),
            socket: Path::new("/run/runner-manager/api.sock"),
            runner_root: Path::new("/var/lib/runner-manager/runners"),
            cache_dir: Path::new("/var/lib/runner-manager/cache"),
            github: &["http://127.0.0.1:4000", "http://127.0.0.1:4000/api/v3"],
            test_share: None,
        });
        assert_eq!(config.mode, SandboxMode::Required);
        assert!(config
            .hidden
            .contains(&PathBuf::from("/run/runner-manager")));
        assert!(config
            .hidden
            .contains(&PathBuf::from("/var/lib/runner-manager")));
        assert_eq!(config.forward_tcp, vec![4000]);
    }
}
