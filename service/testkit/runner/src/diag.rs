//! `_diag/` logs and console timestamps in the formats the real runner uses, so that the
//! product's log collection and tests see the same file names and line shapes.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use chrono::Utc;

/// `yyyy-MM-dd HH:mm:ssZ`, the runner's console time format.
pub fn console_time() -> String {
    Utc::now().format("%Y-%m-%d %H:%M:%SZ").to_string()
}

/// Prints a console line and flushes it at once (the supervisor reads it live).
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // A closed stdout must not kill the runner; the diag log still has the story.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// One `_diag/<Kind>_<yyyyMMdd-HHmmss>-utc.log` file. Writes are best effort: a full disk
/// must not change the job's outcome.
pub struct DiagLog {
    path: PathBuf,
    file: File,
    component: &'static str,
}

impl DiagLog {
    /// Creates `_diag/` under `root` and opens `<kind>_<UTC>-utc.log` for appending.
    pub fn open(root: &Path, kind: &str, component: &'static str) -> std::io::Result<Self> {
        let dir = root.join("_diag");
        std::fs::create_dir_all(&dir)?;
        let name = format!("{kind}_{}-utc.log", Utc::now().format("%Y%m%d-%H%M%S"));
        let path = dir.join(name);
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(Self {
            path,
            file,
            component,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `[<time> INFO <component>] <msg>`. Callers never pass secrets.
    pub fn info(&mut self, msg: &str) {
        self.write("INFO", msg);
    }

    pub fn error(&mut self, msg: &str) {
        self.write("ERR ", msg);
    }

    fn write(&mut self, level: &str, msg: &str) {
        let time = Utc::now().format("%Y-%m-%d %H:%M:%S%.3fZ");
        let _ = writeln!(self.file, "[{time} {level} {}] {msg}", self.component);
        let _ = self.file.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_file_name_and_lines_have_the_runner_shape() {
        let root = std::env::temp_dir().join(format!("rm-fake-runner-diag-{}", std::process::id()));
        let mut log = DiagLog::open(&root, "Runner", "Listener").unwrap();
        log.info("hello");
        let name = log.path().file_name().unwrap().to_str().unwrap().to_owned();
        assert!(
            name.starts_with("Runner_") && name.ends_with("-utc.log"),
            "{name}"
        );
        assert_eq!(name.len(), "Runner_20260101-000000-utc.log".len());
        let text = std::fs::read_to_string(log.path()).unwrap();
        assert!(text.contains(" INFO Listener] hello"), "{text}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn console_time_format() {
        let t = console_time();
        assert_eq!(t.len(), "2026-01-01 00:00:00Z".len());
        assert!(t.ends_with('Z'));
    }
}
