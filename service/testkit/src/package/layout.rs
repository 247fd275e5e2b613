//! What goes into the archive: the real package's scripts and directory layout (GITHUB.md §6.1)
//! around the listener, filler files, and the optional benchmark padding.

use std::io::{self, Write};

use super::{PackageOptions, Padding, ENTRY_MTIME};

const RUN_SH: &str = r#"#!/bin/bash
# Fake actions-runner run.sh (rm-testkit): starts bin/Runner.Listener like the real script.
user_id=$(id -u)
if [ "$user_id" -eq 0 ] && [ -z "$RUNNER_ALLOW_RUNASROOT" ]; then
    echo "Must not run with sudo"
    exit 1
fi

SOURCE="${BASH_SOURCE[0]}"
DIR="$(cd "$(dirname "$SOURCE")" && pwd)"

# Listener exit codes (GITHUB.md 6.3): 2 means "restart me"; anything else ends the runner and,
# like the real run.sh, this script then exits 0 unless RUNNER_MANUALLY_TRAP_SIG is set.
while true; do
    if [ -n "$RUNNER_MANUALLY_TRAP_SIG" ]; then
        "$DIR/bin/Runner.Listener" run "$@" &
        PID=$!
        trap 'kill -INT "$PID" 2>/dev/null' INT TERM
        while true; do
            wait "$PID"
            returnCode=$?
            # A trapped signal interrupts `wait`; wait again for the listener's own code.
            kill -0 "$PID" 2>/dev/null || break
        done
        trap - INT TERM
    else
        "$DIR/bin/Runner.Listener" run "$@"
        returnCode=$?
    fi
    if [ "$returnCode" -eq 2 ]; then
        echo "Restarting runner..."
        sleep 1
        continue
    fi
    if [ -n "$RUNNER_MANUALLY_TRAP_SIG" ]; then
        exit "$returnCode"
    fi
    exit 0
done
"#;

const CONFIG_SH: &str = r#"#!/bin/bash
# Fake actions-runner config.sh (rm-testkit). The fake supports only JIT configuration
# (run.sh --jitconfig / ACTIONS_RUNNER_INPUT_JITCONFIG); registration-token configuration fails.
user_id=$(id -u)
if [ "$user_id" -eq 0 ] && [ -z "$RUNNER_ALLOW_RUNASROOT" ]; then
    echo "Must not run with sudo"
    exit 1
fi

SOURCE="${BASH_SOURCE[0]}"
DIR="$(cd "$(dirname "$SOURCE")" && pwd)"
if [ "$1" = "remove" ]; then
    shift
    exec "$DIR/bin/Runner.Listener" remove "$@"
fi
exec "$DIR/bin/Runner.Listener" configure "$@"
"#;

const RUN_HELPER_SH: &str = r#"#!/bin/bash
# Fake actions-runner run-helper.sh (rm-testkit): one listener run, exit code mapped as the
# real helper maps it (GITHUB.md 6.3): 0,1,5 -> 0; 2 -> 2; others -> 0.
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$DIR/bin/Runner.Listener" run "$@"
returnCode=$?
case "$returnCode" in
    2) echo "Runner listener exit with retryable error, re-launch runner in 5 seconds."; exit 2 ;;
    7) if [ "$ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE" = "1" ]; then exit 7; fi; exit 0 ;;
    *) exit 0 ;;
esac
"#;

const ENV_SH: &str = r#"#!/bin/bash
# Fake actions-runner env.sh (rm-testkit): records PATH and a few variables in .path/.env.
varCheckList=('LANG' 'JAVA_HOME' 'ANT_HOME' 'M2_HOME' 'ANDROID_HOME' 'GRADLE_HOME' 'NVM_BIN'
              'NVM_PATH' 'LD_LIBRARY_PATH' 'PERL5LIB')
envContents=""
if [ -f ".env" ]; then
    envContents=$(cat .env)
else
    touch .env
fi
for var_name in "${varCheckList[@]}"; do
    if [ -n "${!var_name}" ] && ! grep -q "^${var_name}=" .env; then
        echo "${var_name}=${!var_name}" >> .env
    fi
done
echo "$PATH" > .path
: "$envContents"
"#;

const SAFE_SLEEP_SH: &str = r#"#!/bin/bash
# Fake actions-runner safe_sleep.sh (rm-testkit)
sleep "$1"
"#;

const WORKER_SH: &str = r#"#!/bin/sh
# Fake Runner.Worker (rm-testkit): the fake Runner.Listener runs jobs itself.
echo "Runner.Worker is started by Runner.Listener only." >&2
exit 1
"#;

const NODE_SH: &str = r#"#!/bin/sh
# Fake node (rm-testkit)
if [ "$1" = "--version" ]; then echo "v20.19.0"; exit 0; fi
echo "This fake runner package carries no real node." >&2
exit 1
"#;

/// Small filler files with the real package's names, (path, size).
const FILLER: &[(&str, usize)] = &[
    ("bin/Runner.Listener.dll", 48 * 1024),
    ("bin/Runner.Worker.dll", 96 * 1024),
    ("bin/Runner.Common.dll", 64 * 1024),
    ("bin/Runner.Sdk.dll", 16 * 1024),
    ("bin/Runner.PluginHost.dll", 8 * 1024),
    ("bin/Sdk.dll", 32 * 1024),
    ("bin/System.Private.CoreLib.dll", 64 * 1024),
    ("bin/libcoreclr.so", 64 * 1024),
    ("bin/libclrjit.so", 32 * 1024),
    ("bin/libhostfxr.so", 8 * 1024),
    ("externals/node20/LICENSE", 4 * 1024),
    (
        "externals/node20/lib/node_modules/npm/package.json",
        2 * 1024,
    ),
];

type TarOut<W> = tar::Builder<W>;

pub(super) fn write_layout<W: Write>(
    tar: &mut TarOut<W>,
    options: &PackageOptions,
    listener: &[u8],
) -> io::Result<()> {
    for dir in [
        "bin",
        "externals",
        "externals/node20",
        "externals/node20/bin",
    ] {
        add_dir(tar, dir)?;
    }
    add_file(tar, "run.sh", 0o755, RUN_SH.as_bytes())?;
    add_file(tar, "config.sh", 0o755, CONFIG_SH.as_bytes())?;
    add_file(tar, "run-helper.sh", 0o755, RUN_HELPER_SH.as_bytes())?;
    add_file(tar, "env.sh", 0o755, ENV_SH.as_bytes())?;
    add_file(tar, "safe_sleep.sh", 0o755, SAFE_SLEEP_SH.as_bytes())?;
    add_file(tar, "bin/Runner.Listener", 0o755, listener)?;
    add_file(tar, "bin/Runner.Worker", 0o755, WORKER_SH.as_bytes())?;
    add_file(
        tar,
        "bin/fake-runner.version",
        0o644,
        format!("{}\n", options.version).as_bytes(),
    )?;
    add_file(tar, "externals/node20/bin/node", 0o755, NODE_SH.as_bytes())?;
    let mut buf = Vec::new();
    let mut created = std::collections::HashSet::new();
    for (i, (path, size)) in FILLER.iter().enumerate() {
        ensure_parents(tar, path, &mut created)?;
        fill(&mut buf, *size, i as u64 + 1);
        add_file(tar, path, 0o644, &buf)?;
    }
    if let Some(padding) = options.padding {
        write_padding(tar, padding, &mut buf, &mut created)?;
    }
    Ok(())
}

/// Padding files per directory, like the real package's many small assemblies and modules.
const PAD_FILES_PER_DIR: usize = 100;

/// Padding file `index` of `files`: half under `bin/`, half under `externals/node20/`, 100 per
/// directory, two levels deep.
fn padding_path(index: usize, files: usize) -> String {
    let in_bin = index < files.div_ceil(2);
    let local = if in_bin {
        index
    } else {
        index - files.div_ceil(2)
    };
    let dir = local / PAD_FILES_PER_DIR;
    if in_bin {
        format!("bin/pad{:02}/d{dir:03}/lib{local:05}.dll", dir % 10)
    } else {
        format!(
            "externals/node20/lib/node_modules/pad{:02}/d{dir:03}/m{local:05}.js",
            dir % 10
        )
    }
}

fn write_padding<W: Write>(
    tar: &mut TarOut<W>,
    padding: Padding,
    buf: &mut Vec<u8>,
    created: &mut std::collections::HashSet<String>,
) -> io::Result<()> {
    if padding.files == 0 {
        return Ok(());
    }
    let files = padding.files as u64;
    let per_file = padding.bytes / files;
    let extra = padding.bytes % files;
    for i in 0..padding.files {
        let size = per_file + u64::from((i as u64) < extra);
        let path = padding_path(i, padding.files);
        ensure_parents(tar, &path, created)?;
        let size = usize::try_from(size)
            .map_err(|_| io::Error::other("padding file larger than memory"))?;
        fill(buf, size, 0x9e37_79b9_7f4a_7c15 ^ i as u64);
        add_file(tar, &path, 0o644, buf)?;
    }
    Ok(())
}

fn ensure_parents<W: Write>(
    tar: &mut TarOut<W>,
    path: &str,
    created: &mut std::collections::HashSet<String>,
) -> io::Result<()> {
    let mut prefix = String::new();
    let parts: Vec<&str> = path.split('/').collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(part);
        if created.insert(prefix.clone()) {
            add_dir(tar, &prefix)?;
        }
    }
    Ok(())
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(ENTRY_MTIME);
    h.set_uid(1001);
    h.set_gid(1001);
    h
}

fn add_dir<W: Write>(tar: &mut TarOut<W>, path: &str) -> io::Result<()> {
    let mut h = header(tar::EntryType::Directory, 0o755, 0);
    tar.append_data(&mut h, format!("{path}/"), io::empty())
}

fn add_file<W: Write>(tar: &mut TarOut<W>, path: &str, mode: u32, data: &[u8]) -> io::Result<()> {
    let mut h = header(tar::EntryType::Regular, mode, data.len() as u64);
    tar.append_data(&mut h, path, data)
}

/// Fills `buf` with `len` pseudo-random bytes from a 16-letter alphabet: cheap to make, and
/// compressing to about half like real binaries rather than to nothing like zeros.
fn fill(buf: &mut Vec<u8>, len: usize, seed: u64) {
    buf.clear();
    buf.reserve(len);
    let mut state = seed.wrapping_add(0x632b_e59b_d9b4_e019);
    while buf.len() < len {
        // splitmix64
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        for byte in z.to_le_bytes() {
            if buf.len() == len {
                break;
            }
            buf.push(b'a' + (byte & 0x0f));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_paths_are_unique_and_nested() {
        let paths: std::collections::HashSet<_> =
            (0..9_000).map(|i| padding_path(i, 9_000)).collect();
        assert_eq!(paths.len(), 9_000);
        assert!(paths.iter().all(|p| p.split('/').count() >= 4));
    }
}
