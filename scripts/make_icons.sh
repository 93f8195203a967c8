#!/usr/bin/env bash
# Renders resources/icons/zerostudio.svg into the PNG sizes of the freedesktop icon theme's hicolor
# theme (48x48 is the one the spec requires; the others are what desktops ask for), under
# resources/icons/hicolor/<N>x<N>/apps/zerostudio.png. The PNGs are committed; run this again after
# changing the SVG. Needs rsvg-convert (Debian: librsvg2-bin).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
svg="$here/resources/icons/zerostudio.svg"
for n in 16 22 24 32 48 64 128 256 512; do
  out="$here/resources/icons/hicolor/${n}x${n}/apps"
  mkdir -p "$out"
  rsvg-convert -w "$n" -h "$n" "$svg" -o "$out/zerostudio.png"
done
echo "icons written under resources/icons/hicolor"
