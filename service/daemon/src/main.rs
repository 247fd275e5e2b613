//! The `runner-manager` binary: parse the command line, run, exit with a typed code.

fn main() -> std::process::ExitCode {
    rm_daemon::cli::main()
}
