#!/usr/bin/env bash
# Regenerates the PNGs under icons/ from the SVG sources in icons/src (the PNGs are committed,
# so building does not need these tools). Needs rsvg-convert (Debian: librsvg2-bin).
set -euo pipefail
cd "$(dirname "$0")/../icons"
if ! command -v rsvg-convert >/dev/null; then
    echo "rsvg-convert is missing: apt-get install librsvg2-bin" >&2
    exit 1
fi
png() { rsvg-convert -w "$2" -h "$2" "src/$1.svg" -o "$3"; }
# The app icon, in the sizes Tauri and the desktop use.
png app 32 32x32.png
png app 128 128x128.png
png app 256 128x128@2x.png
png app 512 icon.png
# The tray's state icons: 32 px, and 64 px for HiDPI panels.
for state in idle busy paused attention signed-out down not-allowed; do
    png "$state" 32 "tray/$state.png"
    png "$state" 64 "tray/$state@2x.png"
done
echo "icons regenerated under $(pwd)"
