#!/usr/bin/env bash
# The shell half of the GPU build (issue 52): make run's driver probe (scripts/nvidia-driver)
# with the same hooks as `zerostudio doctor`'s, and scripts/zs-runtime's folder rules — where it
# puts the runtime, that an incomplete folder is not taken for one, and that a failed install
# leaves nothing behind. Usage: tests/gpu_scripts.sh SOURCE_DIR
set -uo pipefail
src="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check NAME EXPECTED_EXIT COMMAND...
  local name="$1" want="$2"
  shift 2
  "$@" > "$tmp/out" 2>&1
  local got=$?
  if [ "$got" != "$want" ]; then
    echo "FAIL $name: exit $got, expected $want"; sed 's/^/  | /' "$tmp/out"; fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}
probe="$src/scripts/nvidia-driver"
echo "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.82.07  Thu Aug 28 2025" > "$tmp/version"
printf '#!/bin/sh\n[ "$1" = -L ] && echo "GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-1)"\n' > "$tmp/smi"
printf '#!/bin/sh\nexit 9\n' > "$tmp/smi-broken"
chmod +x "$tmp/smi" "$tmp/smi-broken"
check "the kernel module's file means a driver" 0 env ZEROSTUDIO_NVIDIA_PROC="$tmp/version" ZEROSTUDIO_NVIDIA_SMI="$tmp/none" "$probe"
grep -q "580.82.07" "$tmp/out" || { echo "FAIL the probe names the driver's version"; fails=$((fails + 1)); }
check "nvidia-smi listing a GPU means a driver" 0 env ZEROSTUDIO_NVIDIA_PROC="$tmp/none" ZEROSTUDIO_NVIDIA_SMI="$tmp/smi" "$probe"
check "neither means none" 1 env ZEROSTUDIO_NVIDIA_PROC="$tmp/none" ZEROSTUDIO_NVIDIA_SMI="$tmp/smi-broken" "$probe"

rt="$src/scripts/zs-runtime"
pin_dir="runtime-$(sed -n 's/^TORCH_VERSION=//p' "$rt")-$(sed -n 's/^CUDA_TAG=//p' "$rt")"
check "the default folder is keyed by the pin" 0 env -u ZS_RUNTIME_DIR XDG_CACHE_HOME="$tmp/cache" "$rt" path
[ "$(cat "$tmp/out")" = "$tmp/cache/zerostudio/$pin_dir" ] || { echo "FAIL path: $(cat "$tmp/out")"; fails=$((fails + 1)); }
check "the package's folder" 0 env -u ZS_RUNTIME_DIR ZS_RUNTIME_SYSTEM=1 "$rt" path
[ "$(cat "$tmp/out")" = "/var/lib/zerostudio/$pin_dir" ] || { echo "FAIL system path: $(cat "$tmp/out")"; fails=$((fails + 1)); }
mkdir -p "$tmp/half/torch"
check "a folder without its marker is not a runtime" 1 "$rt" status --dir "$tmp/half"
echo "torch 0.0.1+cu000" > "$tmp/half/zerostudio-runtime.txt"
check "a marker of another pin is not this runtime" 1 "$rt" status --dir "$tmp/half"
mkdir -p "$tmp/wheels"
check "an install from an empty wheel folder fails" 1 "$rt" install --dir "$tmp/rt/$pin_dir" --from "$tmp/wheels"
[ -z "$(ls -A "$tmp/rt" 2>/dev/null | grep -v '^\.pip$')" ] || { echo "FAIL a failed install left: $(ls -A "$tmp/rt")"; fails=$((fails + 1)); }
check "remove deletes the folder" 0 "$rt" remove --dir "$tmp/half"
[ ! -e "$tmp/half" ] || { echo "FAIL remove left $tmp/half"; fails=$((fails + 1)); }
check "the PyPI nvcc needs the runtime first" 1 env ZS_RUNTIME_DIR="$tmp/no-runtime" "$rt" tools
grep -q "make the runtime first" "$tmp/out" || { echo "FAIL tools without a runtime: $(cat "$tmp/out")"; fails=$((fails + 1)); }
check "bad usage" 2 "$rt" frobnicate
[ "$fails" = 0 ] && echo "all passed"
exit $((fails > 0))
