#!/usr/bin/env bash
# Run on a Debian 12 machine, in the repository root: packs what a lent GPU machine lacks into
# the git-ignored folder .gpu/ (carried there with the working tree):
#   .gpu/prefix.tar.xz    Debian's yaml-cpp, nlohmann_json, QtCore/QtTest (+ moc), ICU, libpng,
#                         libjpeg and gloo headers, unpacked and trimmed (no static libraries,
#                         docs, or other Qt modules' headers)
#   .gpu/fixtures.tar.xz  ../shared/fixtures (../shared does not travel)
# Then on the GPU machine: scripts/gpu/run.sh (build, test, bench).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
packages="qt6-base-dev qt6-base-dev-tools libqt6core6 libqt6test6 libb2-1 libdouble-conversion3 libicu72 libicu-dev
          libpcre2-16-0 libyaml-cpp0.7 libyaml-cpp-dev nlohmann-json3-dev libpng16-16 libpng-dev libjpeg62-turbo
          libjpeg62-turbo-dev zlib1g-dev libgloo-dev libglib2.0-0 liburing2
          libqt6gui6 libqt6widgets6 libqt6printsupport6 libqcustomplot2.1 libmd4c0 libxkbcommon0 libsentencepiece0"
mkdir -p .debs .gpu
(cd .debs && apt-get download $packages)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for f in .debs/*.deb; do dpkg -x "$f" "$stage"; done
lib="$stage/usr/lib/x86_64-linux-gnu"
find "$stage" -name '*.a' -delete
rm -rf "$stage/usr/share/doc" "$stage/usr/share/man" "$stage/usr/share/lintian" "$lib/gio" "$lib/glib-2.0"
rm -f "$lib"/libgio-2.0* "$lib"/libgmodule-2.0* "$lib"/libgobject-2.0* "$lib"/libgthread-2.0* "$lib"/libicuio* \
      "$lib"/libicutest* "$lib"/libicutu*
(cd "$stage/usr/include/x86_64-linux-gnu/qt6" && ls | grep -v -x -e QtCore -e QtTest | xargs rm -rf)
(cd "$lib" && for f in *.so; do [ -e "$f" ] || rm -f "$f"; done && ln -sf /lib/x86_64-linux-gnu/libz.so.1 libz.so)
# QtCore's target names a mkspecs folder that only qmake's packages fill.
mkdir -p "$lib/qt6/mkspecs/linux-g++"
# Qt6CoreTools' targets name qmake6, which the engine never runs: a stub keeps find_package happy.
printf '#!/bin/sh\necho "qmake6 is not part of the ZeroStudio GPU prefix" >&2\nexit 1\n' > "$stage/usr/bin/x86_64-linux-gnu-qmake6"
chmod +x "$stage/usr/bin/x86_64-linux-gnu-qmake6"
tar -cJf .gpu/prefix.tar.xz -C "$stage" usr
tar -cJf .gpu/fixtures.tar.xz -C ../shared fixtures
ls -la .gpu
