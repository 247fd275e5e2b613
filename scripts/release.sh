#!/usr/bin/env bash
# Builds a whole release from a clean checkout:
#
#   scripts/release.sh VERSION [--out DIR] [--profile release|dev]
#
# Assets (in DIR, default dist/VERSION):
#   runner-manager_VERSION_ARCH.deb                  Debian/Ubuntu package (service, unit; tray,
#                                                    .desktop entry and icons when the tray exists)
#   runner-manager-VERSION-linux-ARCH.tar.gz         portable archive for per-user installs
#   SHA256SUMS                                       sha256 of every asset
#   <asset>.minisig, SHA256SUMS.minisig              detached minisign (ed25519) signatures
#
# The signing key comes from the environment: RUNNER_MANAGER_SIGNING_KEY holds the minisign
# secret key file's text (unencrypted, `minisign -G -W`); RUNNER_MANAGER_SIGNING_KEY_FILE may
# name the file instead. Installed services verify updates with the public key built into
# them: installer/release-key.pub, or the file RUNNER_MANAGER_RELEASE_PUBKEY_FILE names (CI and
# tests make a throwaway pair; the real release names the project's key). The signing key
# must be that public key's secret half: a release that installed services would refuse is
# refused here, before anything is built.
#
# Rotating the release key: build with RUNNER_MANAGER_RELEASE_PUBKEY_FILE naming the new public
# key, sign with the new secret key, and set RUNNER_MANAGER_ENDORSING_KEY_FILE to the previous
# (still trusted) secret key: the release then carries release-key.pub (the new key) and
# release-key.pub.minisig (the previous key's signature over it), which installed services
# check with the key they trust and then trust the new one.
#
# The version is the workspace version: the checkout's files are copied to a scratch directory
# (the committed tree; RM_RELEASE_ALLOW_DIRTY=1 takes the working tree's files instead, for
# tests), `[workspace.package] version` is set to VERSION there, and everything is built from
# that copy, so every binary reports VERSION. The build shares CARGO_TARGET_DIR's compiled
# dependencies; the copy's own artifacts land in the scratch directory.
#
# --profile dev builds debug binaries (cheap; for the update tests only: such binaries accept a
# test trust key and are never published).
#
# The .deb is assembled here and packed by Debian's own `dpkg-deb --build`: no extra packaging
# tool has to be built (cargo-deb, or tauri-cli whose build alone takes many minutes on two
# cores), and the maintainer scripts are plain files in installer/debian/.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

usage() { echo "usage: scripts/release.sh VERSION [--out DIR] [--profile release|dev]" >&2; exit 2; }
[[ $# -ge 1 ]] || usage
version=$1; shift
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || {
    echo "release.sh: '$version' is not a version like 1.2.3" >&2; exit 2; }
out="dist/$version"
profile=release
while [[ $# -gt 0 ]]; do
    case $1 in
        --out) out=$2; shift 2 ;;
        --profile) profile=$2; shift 2 ;;
        *) usage ;;
    esac
done
[[ $profile == release || $profile == dev ]] || usage

for tool in minisign dpkg-deb dpkg-shlibdeps sha256sum; do
    command -v "$tool" >/dev/null || {
        echo "release.sh: $tool is missing: apt-get install minisign dpkg-dev" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
keyfile="$work/signing.key"
if [[ -n ${RUNNER_MANAGER_SIGNING_KEY_FILE:-} ]]; then
    install -m 0600 "$RUNNER_MANAGER_SIGNING_KEY_FILE" "$keyfile"
elif [[ -n ${RUNNER_MANAGER_SIGNING_KEY:-} ]]; then
    (umask 077; printf '%s\n' "$RUNNER_MANAGER_SIGNING_KEY" > "$keyfile")
else
    echo "release.sh: no signing key: set RUNNER_MANAGER_SIGNING_KEY (the minisign secret key's text)" >&2
    exit 1
fi

# The public key the binaries embed (passed to the build as RUNNER_MANAGER_RELEASE_PUBKEY).
pubkey_file=${RUNNER_MANAGER_RELEASE_PUBKEY_FILE:-$repo/installer/release-key.pub}
[[ -r $pubkey_file ]] || {
    echo "release.sh: cannot read the release public key $pubkey_file" >&2; exit 1; }
minisign -R -s "$keyfile" -p "$work/signing.pub" </dev/null >/dev/null 2>&1 || {
    echo "release.sh: the signing key is not an unencrypted minisign secret key (make one with \`minisign -G -W\`)" >&2
    exit 1; }
key_line() { grep -v '^untrusted comment:' "$1" | grep -m1 .; }
if [[ $(key_line "$work/signing.pub") != "$(key_line "$pubkey_file")" ]]; then
    echo "release.sh: the signing key is not the secret half of $pubkey_file, the public key" \
         "the binaries embed: installed services would refuse this release. Sign with that" \
         "key's secret half, or set RUNNER_MANAGER_RELEASE_PUBKEY_FILE to the public half of" \
         "the key you sign with (a throwaway pair for tests)" >&2
    exit 1
fi
RUNNER_MANAGER_RELEASE_PUBKEY=$(cat "$pubkey_file")
export RUNNER_MANAGER_RELEASE_PUBKEY

# 1. The source, with the release's version.
src="$work/src"
mkdir -p "$src"
if [[ ${RM_RELEASE_ALLOW_DIRTY:-0} == 1 ]]; then
    git ls-files -z --cached --others --exclude-standard | tar -C "$repo" --null -T - -cf - | tar -C "$src" -xf -
else
    if [[ -n $(git status --porcelain) ]]; then
        echo "release.sh: the checkout has uncommitted changes: commit them (or RM_RELEASE_ALLOW_DIRTY=1 for tests)" >&2
        exit 1
    fi
    git archive HEAD | tar -C "$src" -xf -
fi
sed -i "/^\[workspace.package\]/,/^\[/ s/^version = \".*\"/version = \"$version\"/" "$src/Cargo.toml"
# The lock file records the workspace members' versions.
(cd "$src" && cargo update --workspace --offline -q)

# 2. Build. Dependencies come from CARGO_TARGET_DIR (compiled once, shared with every other
# build); this copy's binaries go to its own target directory, so the checkout's own build
# outputs are never overwritten by the release's.
export CARGO_BUILD_BUILD_DIR="${CARGO_TARGET_DIR:-/var/tmp/runner-manager-target}"
export CARGO_TARGET_DIR="$work/target"
# The tray (src-tauri: binaries runner-manager-tray and runner-manager-window), once it is a
# workspace member.
tray_pkg=""
if [[ -f $src/src-tauri/Cargo.toml ]] &&
    (cd "$src" && cargo metadata --format-version 1 --no-deps --offline) | grep -q '/src-tauri#'; then
    tray_pkg=$(sed -n '/^\[package\]/,/^\[/ s/^name = "\(.*\)"/\1/p' "$src/src-tauri/Cargo.toml" | head -n1)
fi
if [[ $profile == dev ]]; then
    # The same package set as the test build, so the shared dependencies are reused as built.
    (cd "$src" && cargo build --locked --workspace --bins)
    bindir="$CARGO_TARGET_DIR/debug"
else
    pkgs=(-p rm-daemon)
    [[ -n $tray_pkg ]] && pkgs+=(-p "$tray_pkg")
    (cd "$src" && cargo build --locked --release "${pkgs[@]}")
    # Shipped stripped, as Debian's packages are (debug info is not for users' disks).
    bindir="$work/bin"
    mkdir -p "$bindir"
    for b in runner-manager runner-manager-tray runner-manager-window; do
        [[ -x $CARGO_TARGET_DIR/release/$b ]] || continue
        cp "$CARGO_TARGET_DIR/release/$b" "$bindir/$b"
        strip --strip-unneeded "$bindir/$b"
    done
fi
got=$("$bindir/runner-manager" --version)
[[ $got == "runner-manager $version" ]] || { echo "release.sh: the binary reports '$got'" >&2; exit 1; }

case $(uname -m) in
    x86_64) arch=x86_64 debarch=amd64 ;;
    aarch64) arch=aarch64 debarch=arm64 ;;
    *) arch=$(uname -m) debarch=$(dpkg --print-architecture) ;;
esac
mkdir -p "$out"
out=$(cd "$out" && pwd)
epoch=$(cd "$repo" && git log -1 --format=%ct 2>/dev/null || date +%s)

# Tray parts, when the tray is part of this checkout.
tray_bin=""
[[ -n $tray_pkg && -x "$bindir/runner-manager-tray" ]] && tray_bin="$bindir/runner-manager-tray"
if [[ -n $tray_bin && ! -x "$bindir/runner-manager-window" ]]; then
    echo "release.sh: runner-manager-window (the tray's windows) was not built" >&2
    exit 1
fi
install_desktop() { # $1 = prefix (usr, or the portable root)
    [[ -n $tray_bin ]] || return 0
    install -D -m 0755 "$tray_bin" "$1/bin/runner-manager-tray"
    install -D -m 0755 "$bindir/runner-manager-window" "$1/bin/runner-manager-window"
    install -D -m 0644 "$src/installer/desktop/runner-manager.desktop" "$1/share/applications/runner-manager.desktop"
    for icon in "$src"/icons/*x*.png; do
        [[ -e $icon ]] || continue
        size=$(basename "$icon" .png)
        [[ $size =~ ^[0-9]+x[0-9]+$ ]] || continue
        install -D -m 0644 "$icon" "$1/share/icons/hicolor/$size/apps/runner-manager.png"
    done
}

# 3. The portable archive: the service (login mode) and the tray, for ~/.local.
pname="runner-manager-$version-linux-$arch"
proot="$work/portable/$pname"
install -D -m 0755 "$bindir/runner-manager" "$proot/bin/runner-manager"
install_desktop "$proot"
# The marker: how the updater recognises a portable install, and which files it owns.
install -d "$proot/share/runner-manager"
listed=$(cd "$proot" && find . -type f | sed 's|^\./||' | sort | sed 's/.*/"&", /' | tr -d '\n')
printf '{"kind": "portable", "version": "%s", "files": [%s"share/runner-manager/portable.json"]}\n' \
    "$version" "$listed" > "$proot/share/runner-manager/portable.json"
tar -C "$work/portable" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    -czf "$out/$pname.tar.gz" "$pname"

# 4. The .deb.
deb="$work/deb"
install -D -m 0755 "$bindir/runner-manager" "$deb/usr/bin/runner-manager"
install_desktop "$deb/usr"
install -d "$deb/lib/systemd/system"
sed -e 's|{{BINARY}}|/usr/bin/runner-manager|g' \
    -e 's|{{DATA_DIR}}|/var/lib/runner-manager|g' \
    -e 's|{{RUNNER_ROOT}}|/var/lib/runner-manager/runners|g' \
    -e 's|{{MODE}}|boot|g' \
    "$src/installer/systemd/runner-manager.service" > "$deb/lib/systemd/system/runner-manager.service"
chmod 0644 "$deb/lib/systemd/system/runner-manager.service"
install -D -m 0644 "$src/README.md" "$deb/usr/share/doc/runner-manager/README.md"
printf 'runner-manager\nLicense: MIT OR Apache-2.0\n' > "$deb/usr/share/doc/runner-manager/copyright"
install -d -m 0755 "$deb/DEBIAN"
for s in postinst prerm postrm; do install -m 0755 "$src/installer/debian/$s" "$deb/DEBIAN/$s"; done
mkdir -p "$work/shlibs/debian"
printf 'Source: runner-manager\n\nPackage: runner-manager\nArchitecture: any\n' > "$work/shlibs/debian/control"
bins=("$deb/usr/bin/runner-manager")
[[ -n $tray_bin ]] && bins+=("$deb/usr/bin/runner-manager-tray" "$deb/usr/bin/runner-manager-window")
shlibs=$(cd "$work/shlibs" && dpkg-shlibdeps -O "${bins[@]}" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
size_kb=$(du -sk --exclude=DEBIAN "$deb" | cut -f1)
# The tray loads the StatusNotifierItem library at run time (dlopen), so dpkg-shlibdeps cannot
# see it: named here.
tray_depends=""
[[ -n $tray_bin ]] && tray_depends="libayatana-appindicator3-1 | libappindicator3-1, "
cat > "$deb/DEBIAN/control" <<CONTROL
Package: runner-manager
Version: $version
Architecture: $debarch
Maintainer: runner-manager maintainers <maintainers@runner-manager.invalid>
Installed-Size: $size_kb
Depends: ${shlibs:+$shlibs, }${tray_depends}passwd, ca-certificates, bubblewrap (>= 0.8), passt, mount
Section: devel
Priority: optional
Description: ephemeral GitHub Actions self-hosted runners on this machine
 A background service (and tray app) that starts one just-in-time GitHub Actions runner
 per queued job asking for this machine's label, lets it take that job, then removes it
 and scrubs its directory. Nothing idles between jobs; nothing listens on the network.
CONTROL
find "$deb" -exec touch -h -d "@$epoch" {} +
debname="runner-manager_${version}_${debarch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$deb" "$out/$debname" >/dev/null

# 5. Checksums and signatures.
(cd "$out" && rm -f SHA256SUMS ./*.minisig && sha256sum "$debname" "$pname.tar.gz" > SHA256SUMS)
sign() { # $1 = file, $2 = trusted comment
    minisign -S -s "$keyfile" -m "$out/$1" -x "$out/$1.minisig" -t "$2" </dev/null >/dev/null
}
sign SHA256SUMS "runner-manager $version SHA256SUMS"
sign "$debname" "runner-manager $version $debname"
sign "$pname.tar.gz" "runner-manager $version $pname.tar.gz"
if [[ -n ${RUNNER_MANAGER_ENDORSING_KEY_FILE:-} ]]; then
    install -m 0600 "$RUNNER_MANAGER_ENDORSING_KEY_FILE" "$work/endorsing.key"
    cp "$pubkey_file" "$out/release-key.pub"
    minisign -S -s "$work/endorsing.key" -m "$out/release-key.pub" -x "$out/release-key.pub.minisig" \
        -t "runner-manager release key" </dev/null >/dev/null
fi
# What the binaries trust must verify what was signed (checked above; this catches a slip).
minisign -Vq -p "$pubkey_file" -m "$out/SHA256SUMS" || {
    echo "release.sh: SHA256SUMS does not verify with $pubkey_file" >&2; exit 1; }
echo "release $version ($profile) in $out:"
(cd "$out" && ls -l)
