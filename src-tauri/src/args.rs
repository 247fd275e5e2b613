//! Reading the two binaries' command lines: flags, some taking a value, every mistake told
//! with the binary's usage. A handful of flags needs no parser crate in either binary.

use std::ffi::OsString;

use crate::link::Window;

/// A command line being read, flag by flag (the program name skipped).
pub struct Flags<I> {
    args: I,
    usage: &'static str,
}

impl<I: Iterator<Item = OsString>> Flags<I> {
    pub fn new(args: impl IntoIterator<IntoIter = I>, usage: &'static str) -> Self {
        let mut args = args.into_iter();
        args.next();
        Flags { args, usage }
    }

    /// The next argument.
    pub fn next_arg(&mut self) -> Option<OsString> {
        self.args.next()
    }

    /// The value after `flag` (`what` names it in the error).
    pub fn value(&mut self, flag: &str, what: &str) -> Result<OsString, String> {
        self.args
            .next()
            .ok_or_else(|| format!("{flag} needs {what}\n{}", self.usage))
    }

    /// The window after `--show`.
    pub fn window(&mut self) -> Result<Window, String> {
        let v = self.value("--show", "a window")?;
        v.to_str().and_then(Window::parse).ok_or_else(|| {
            format!(
                "--show takes `dashboard` or `sign-in`, not {v:?}\n{}",
                self.usage
            )
        })
    }

    /// The error for an argument neither binary knows.
    pub fn unknown(&self, arg: &OsString) -> String {
        format!(
            "unknown argument {:?}\n{}",
            arg.to_string_lossy(),
            self.usage
        )
    }
}
