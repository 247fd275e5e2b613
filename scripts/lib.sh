# Shared by scripts/*.sh: install what a fresh Debian 12 machine lacks for building and testing.
# Only what the code needs today; the tray's WebKit/GTK stack is added when the tray lands.
#   libdbus-1-dev                 the keyring crate's Secret Service backend (build)
#   dbus gnome-keyring libsecret-tools   a real Secret Service for the credential-store tests
#   minisign                      signs releases (scripts/release.sh) and the update tests' releases

APT_PACKAGES=(build-essential pkg-config libdbus-1-dev dbus gnome-keyring libsecret-tools minisign)

ensure_build_deps() {
    local missing=()
    for p in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        echo "installing: ${missing[*]}" >&2
        local sudo=""
        [[ $(id -u) -eq 0 ]] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
    fi
    if ! command -v cargo >/dev/null; then
        echo "cargo not found: install Rust with rustup (https://rustup.rs), then run this again" >&2
        exit 1
    fi
}
