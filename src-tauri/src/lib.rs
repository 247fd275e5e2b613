//! What the tray's two processes share. `runner-manager-tray` (the icon, its menu and the
//! notifications) stays resident and links no web engine; `runner-manager-window` (Tauri: the
//! dashboard and the sign-in window) runs only while a window is open. Both are clients of the
//! service's local API only (`rm-proto`): neither holds a GitHub token or a device code.
//!
//! Nothing in this library names Tauri or the tray crates, so each binary links only its own
//! (the icon process must not load WebKit: it is most of a Tauri process's memory).

pub mod args;
pub mod autostart;
pub mod link;
pub mod service;
pub mod state;

use std::path::PathBuf;

/// This tray's version (the workspace's: the service's when both come from one release).
pub const TRAY_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The icon process's binary.
pub const TRAY_BIN: &str = "runner-manager-tray";
/// The windows' binary.
pub const WINDOW_BIN: &str = "runner-manager-window";

/// The file name of a binary on this OS.
pub fn exe_name(name: &str) -> String {
    format!("{name}{}", std::env::consts::EXE_SUFFIX)
}

/// `name` in the directory of the running binary (the two are installed side by side).
pub fn sibling(name: &str) -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .ok_or_else(|| std::io::Error::other("the running binary has no directory"))?;
    Ok(dir.join(exe_name(name)))
}

/// Logs to stderr, `RUST_LOG` or `info`.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// GTK's GL (Mesa, ~50 MB resident with its LLVM under software rendering) buys nothing for a
/// tray and two plain pages. Call before any thread starts; a user's own choice wins.
pub fn no_gl() {
    #[cfg(target_os = "linux")]
    if std::env::var_os("GDK_GL").is_none() {
        std::env::set_var("GDK_GL", "disable");
    }
}
