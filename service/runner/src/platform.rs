//! Operating system and architecture names as GitHub's runner downloads spell them
//! (`linux`/`osx`/`win`, `x64`/`arm`/`arm64`), because those names end up in cache paths.

use std::fmt;

/// An operating system a runner package is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Os {
    Linux,
    Osx,
    Win,
}

impl Os {
    /// GitHub's spelling (`linux`, `osx`, `win`).
    pub fn as_str(self) -> &'static str {
        match self {
            Os::Linux => "linux",
            Os::Osx => "osx",
            Os::Win => "win",
        }
    }

    /// Accepts GitHub's spelling and the common aliases (`macos`, `darwin`, `windows`).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "linux" => Some(Os::Linux),
            "osx" | "macos" | "darwin" => Some(Os::Osx),
            "win" | "windows" => Some(Os::Win),
            _ => None,
        }
    }

    /// The OS this binary was built for, if runners exist for it.
    pub fn current() -> Option<Self> {
        Self::parse(std::env::consts::OS)
    }
}

/// A CPU architecture a runner package is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Arch {
    X64,
    Arm,
    Arm64,
}

impl Arch {
    /// GitHub's spelling (`x64`, `arm`, `arm64`).
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::X64 => "x64",
            Arch::Arm => "arm",
            Arch::Arm64 => "arm64",
        }
    }

    /// Accepts GitHub's spelling and Rust's/uname's (`x86_64`, `amd64`, `aarch64`).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "x64" | "x86_64" | "amd64" => Some(Arch::X64),
            "arm" | "armv7" | "armv7l" => Some(Arch::Arm),
            "arm64" | "aarch64" => Some(Arch::Arm64),
            _ => None,
        }
    }

    /// The architecture this binary was built for, if runners exist for it.
    pub fn current() -> Option<Self> {
        Self::parse(std::env::consts::ARCH)
    }
}

/// An (os, arch) pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Platform {
    pub os: Os,
    pub arch: Arch,
}

impl Platform {
    pub fn new(os: Os, arch: Arch) -> Self {
        Self { os, arch }
    }

    /// This machine's platform, or `None` where GitHub ships no runner.
    pub fn current() -> Option<Self> {
        Some(Self::new(Os::current()?, Arch::current()?))
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.os.as_str(), self.arch.as_str())
    }
}

impl From<rm_core::Os> for Os {
    fn from(os: rm_core::Os) -> Self {
        match os {
            rm_core::Os::Linux => Os::Linux,
            rm_core::Os::Macos => Os::Osx,
            rm_core::Os::Windows => Os::Win,
        }
    }
}

impl From<rm_core::Arch> for Arch {
    fn from(arch: rm_core::Arch) -> Self {
        match arch {
            rm_core::Arch::X64 => Arch::X64,
            rm_core::Arch::Arm64 => Arch::Arm64,
            rm_core::Arch::Arm => Arch::Arm,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_from_the_domain_names() {
        assert_eq!(Os::from(rm_core::Os::Macos), Os::Osx);
        assert_eq!(Os::from(rm_core::Os::Windows).as_str(), "win");
        assert_eq!(Arch::from(rm_core::Arch::Arm64), Arch::Arm64);
    }

    #[test]
    fn parses_aliases_and_round_trips() {
        assert_eq!(Os::parse("Darwin"), Some(Os::Osx));
        assert_eq!(Arch::parse("aarch64"), Some(Arch::Arm64));
        assert_eq!(Os::parse("plan9"), None);
        for os in [Os::Linux, Os::Osx, Os::Win] {
            assert_eq!(Os::parse(os.as_str()), Some(os));
        }
        assert_eq!(Platform::new(Os::Linux, Arch::X64).to_string(), "linux-x64");
    }
}
