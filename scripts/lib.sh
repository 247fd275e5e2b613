# Shared by scripts/*.sh: install what a fresh Debian 12 machine lacks for building and testing.
#   libdbus-1-dev                 the keyring crate's Secret Service backend (build)
#   dbus gnome-keyring libsecret-tools   a real Secret Service for the credential-store tests;
#                                 dbus-daemon also carries the admission tests' fake UPower/logind
#   libwebkit2gtk-4.1-dev libgtk-3-dev libayatana-appindicator3-dev librsvg2-dev
#   libsoup-3.0-dev libssl-dev libxdo-dev file   the tray app (Tauri 2: WebKitGTK, tray, menus)
#   xvfb xauth dbus-x11 at-spi2-core fonts-dejavu-core   the tray tests' headless X session
#   python3-dbus python3-gi       the tests' fake tray host and notification server (tests/tray)
#   python3-xlib                  closes a window as a window manager would (tests/tray)
#   webkit2gtk-driver             WebKitWebDriver: the tests drive the tray's windows
#   xdotool imagemagick libglib2.0-bin   window lookups, screenshots, `gio launch` (autostart)
#   minisign                      signs releases (scripts/release.sh) and the update tests' releases
#   keyutils                      `keyctl`: the sandbox tests' session keyring probe
#   bubblewrap passt              the job sandbox (bwrap: namespaces and the filesystem view; pasta:
#                                 the job network's user-mode stack); the .deb depends on both
#   postgresql                    the pool tests' PostgreSQL: they start throwaway clusters of their
#                                 own with its server binaries (Debian's own cluster is not used)

APT_PACKAGES=(build-essential pkg-config libdbus-1-dev dbus gnome-keyring libsecret-tools
    libwebkit2gtk-4.1-dev libgtk-3-dev libayatana-appindicator3-dev librsvg2-dev
    libsoup-3.0-dev libssl-dev libxdo-dev file
    xvfb xauth dbus-x11 at-spi2-core fonts-dejavu-core
    python3-dbus python3-gi python3-xlib webkit2gtk-driver
    xdotool imagemagick libglib2.0-bin minisign postgresql bubblewrap passt keyutils)

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

# The job sandbox's network wall (pasta) opens /dev/net/tun as the runner's own uid. Desktop
# distributions make it 0666; a bare server or CI image may leave it 0600, where the service
# refuses to run jobs (`runner-manager host doctor` names this fix). Open it as a desktop has it.
ensure_tun_device() {
    [[ -c /dev/net/tun ]] || return 0
    [[ $(stat -c %a /dev/net/tun) == 666 ]] && return 0
    if [[ $(id -u) -eq 0 ]]; then
        chmod 0666 /dev/net/tun
    else
        echo "/dev/net/tun is not 0666: jobs cannot run in their sandbox until" \
             "\`sudo chmod 0666 /dev/net/tun\` (runner-manager host doctor says more)" >&2
    fi
}
