#!/usr/bin/env bash
# Installs a runner-manager .deb into a throwaway Debian 12 root (a chroot made by mmdebstrap
# from Debian's archive; cached as a tarball in /var/tmp) and checks it as a user would meet it:
#
#   scripts/check-deb.sh path/to/runner-manager_VERSION_ARCH.deb
#
# - the files and their modes, the systemd unit (`systemd-analyze verify`), the maintainer
#   scripts' work (runner account, operators group, the installing user added to it, the
#   message where systemd does not run);
# - the installed service started there answers `status` (as root and as the operators-group
#   member), and reports the package's version;
# - remove keeps the data directory and journal, purge deletes them, and afterwards nothing is
#   left that was not there before (besides dpkg's own records and the system accounts).
#
# Needs root. Cleans up after itself (mounts, processes, the root).
set -euo pipefail
deb=$(readlink -f "${1:?usage: scripts/check-deb.sh DEB}")
[[ $(id -u) -eq 0 ]] || { echo "check-deb.sh: needs root (chroot, mounts)" >&2; exit 1; }
command -v mmdebstrap >/dev/null || {
    echo "check-deb.sh: mmdebstrap is missing: apt-get install mmdebstrap" >&2; exit 1; }

version=$(dpkg-deb --field "$deb" Version)
# The packages the .deb depends on (the tray's GTK/WebKit libraries included) are in the base,
# so the check runs offline once it is made: one cached base per dependency list.
depends=$(dpkg-deb --field "$deb" Depends | tr ',' '\n' | sed -e 's/|.*//' -e 's/(.*)//' -e 's/[[:space:]]//g' | grep -v '^$' | sort -u | paste -sd, -)
include="libdbus-1-3,ca-certificates,systemd,util-linux${depends:+,$depends}"
base=/var/tmp/runner-manager-debroot-bookworm-$(printf %s "$include" | sha256sum | cut -c1-12).tar
if [[ ! -s $base ]]; then
    echo "== making a Debian 12 root with the package's dependencies (once; cached in $base)"
    # mmdebstrap picks the output format from the name: keep `.tar` at the end.
    mmdebstrap --quiet --variant=minbase --include="$include" bookworm "${base%.tar}.part.tar"
    mv "${base%.tar}.part.tar" "$base"
fi

t=$(mktemp -d)
root="$t/root"
daemon_pid=""
cleanup() {
    if [[ -n $daemon_pid ]]; then kill "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null; fi
    for m in "$root/proc" "$root/dev"; do mountpoint -q "$m" && umount -l "$m"; done
    rm -rf "$t"
}
trap cleanup EXIT
mkdir "$root"
tar -C "$root" -xf "$base"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
in_root() { chroot "$root" "$@"; }
fail() { echo "check-deb.sh: FAILED: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

snapshot() { # every path in the root, except the pseudo file systems
    (cd "$root" && find . -xdev \( -path ./proc -o -path ./dev -o -path ./tmp \) -prune -o -print | sort)
}
in_root useradd --create-home --shell /bin/bash tester
snapshot > "$t/before"

echo "== install $deb"
cp "$deb" "$root/tmp/rm.deb"
SUDO_USER=tester in_root dpkg --install /tmp/rm.deb | tee "$t/install.log"

# Files and modes.
check_mode() { # path mode owner
    local got
    got=$(in_root stat -c '%a %U:%G' "$1") || fail "$1 is missing"
    [[ $got == "$2 $3" ]] || fail "$1 is $got, expected $2 $3"
}
check_mode /usr/bin/runner-manager 755 root:root
check_mode /lib/systemd/system/runner-manager.service 644 root:root
check_mode /var/lib/runner-manager 755 root:root
in_root dpkg --listfiles runner-manager | grep -qx /usr/bin/runner-manager || fail "dpkg does not own the binary"
# (grep reads all of the listing: `grep -q` would end dpkg-deb early, which pipefail reports.)
if dpkg-deb --contents "$deb" | grep -c usr/bin/runner-manager-tray >/dev/null; then
    check_mode /usr/bin/runner-manager-tray 755 root:root
    check_mode /usr/bin/runner-manager-window 755 root:root
    check_mode /usr/share/applications/runner-manager.desktop 644 root:root
    in_root ls /usr/share/icons/hicolor | grep -q x || fail "no hicolor icons"
    # Its libraries all resolve from the package's dependencies (nothing it needs is missing
    # from the Depends line).
    for b in runner-manager-tray runner-manager-window; do
        if in_root ldd "/usr/bin/$b" | grep 'not found'; then
            fail "$b needs libraries its package does not depend on"
        fi
    done
    # The resident tray links no web engine (the windows' process does).
    if in_root ldd /usr/bin/runner-manager-tray | grep -c -e webkit -e javascriptcore >/dev/null; then
        fail "runner-manager-tray links a web engine: it stays resident and must stay small"
    fi
    # The tray icon's library is loaded at run time, so ldd cannot vouch for it.
    in_root sh -c 'ls /usr/lib/*/libayatana-appindicator3.so.1 /usr/lib/*/libappindicator3.so.1 2>/dev/null' |
        grep -q . || fail "no StatusNotifierItem library (libayatana-appindicator3-1) installed with the tray"
    ok "tray, .desktop entry and icons installed; its libraries resolve"
fi
ok "files and modes"
in_root systemd-analyze verify /lib/systemd/system/runner-manager.service 2>&1 | tee "$t/verify.log"
[[ ! -s $t/verify.log ]] || fail "systemd-analyze verify complained"
ok "systemd-analyze verify"

# Maintainer scripts.
in_root getent group runner-manager >/dev/null || fail "no runner-manager group"
in_root getent passwd runner-manager-runner >/dev/null || fail "no runner-manager-runner account"
in_root id -nG tester | tr ' ' '\n' | grep -qx runner-manager || fail "tester not added to the group"
grep -q "added tester to the runner-manager group; log out and in again" "$t/install.log" ||
    fail "postinst did not tell the user to log in again"
grep -q "systemd is not running here" "$t/install.log" || fail "postinst did not say how to start without systemd"
ok "postinst: accounts, operators group, messages"

# The installed service, started there.
# No network here: the release feed is a closed loopback port (the updater stays quiet).
# `exec`: $! is the service itself (chroot execs it), not a shell around it.
(exec chroot "$root" /usr/bin/runner-manager daemon run --credential-store file \
    --update-api-base http://127.0.0.1:9 > "$t/daemon.log" 2>&1) &
daemon_pid=$!
for _ in $(seq 300); do
    in_root runner-manager status >/dev/null 2>&1 && break
    kill -0 "$daemon_pid" 2>/dev/null || { cat "$t/daemon.log"; fail "the service exited"; }
    sleep 0.1
done
# Whole into a file first: `head` closing the pipe early would end the script (pipefail).
in_root runner-manager status > "$t/status.txt"
head -n 12 "$t/status.txt"
in_root runner-manager --version | grep -qx "runner-manager $version" || fail "wrong --version"
uid=$(in_root id -u tester)
in_root setpriv --reuid="$uid" --regid="$uid" --clear-groups runner-manager status >/dev/null ||
    fail "the operators-group member was refused"
in_root runner-manager update --check | tee "$t/update.txt"
grep -q "deb install" "$t/update.txt" || fail "the updater did not detect the .deb install"
ok "the installed service answers status (root and operators-group member), version $version, deb install detected"
if [[ ${RM_CHECK_RELEASE_BUILD:-0} == 1 ]]; then
    # A published build trusts only the built-in key: the test-only override is refused.
    if in_root runner-manager --data-dir /tmp/x daemon run --update-trust-key /dev/null 2>"$t/key.err"; then
        fail "a release build accepted --update-trust-key"
    fi
    grep -q "refused by release builds" "$t/key.err" || fail "no refusal message: $(cat "$t/key.err")"
    ok "the release build refuses a test trust key"
fi

echo "== remove (the service still runs: prerm drains it)"
in_root dpkg --remove runner-manager | tee "$t/remove.log"
grep -q "no runner left" "$t/remove.log" || fail "prerm did not drain the running service"
kill "$daemon_pid"
wait "$daemon_pid" || true
daemon_pid=""
in_root test ! -e /run/runner-manager/api.sock || fail "the service left its socket"
in_root test ! -e /usr/bin/runner-manager || fail "the binary survived remove"
in_root test -e /var/lib/runner-manager/journal.sqlite3 || fail "remove deleted the journal"
ok "remove keeps the data directory and journal"
echo "== purge"
in_root dpkg --purge runner-manager
in_root test ! -e /var/lib/runner-manager || fail "purge left /var/lib/runner-manager"
snapshot > "$t/after"
# What may differ: dpkg's and the shadow tools' own records (the system accounts stay, as
# Debian keeps them), logs.
left=$(comm -13 "$t/before" "$t/after" |
    grep -Ev '^\./(var/lib/dpkg/|var/log/|var/cache/|etc/(passwd|group|shadow|gshadow|subuid|subgid)-?$|run/)' || true)
[[ -z $left ]] || fail "left behind after purge:
$left"
ok "purge leaves nothing behind"
echo "check-deb.sh: all checks passed for $(basename "$deb")"
