#!/usr/bin/env bash
# `make run`: the quickstart, from the CPU build (`cpu`) or the GPU build (`gpu`, on the first GPU;
# the quickstart config itself says launch.use_cpu: true, so the GPU build overrides it). With a
# display the GUI opens on it (Run > Start trains it, the dashboard shows it); without one it
# trains headless (progress bar, samples every 250 steps; Ctrl-C stops after a checkpoint).
# ZS_HEADLESS=1 trains headless with a display too.
set -euo pipefail
zs="$1"
mode="${2:-cpu}"
config="configs/quickstart.yaml"
sets=()
if [ "$mode" = gpu ]; then
  sets=(--set launch.use_cpu=false)
  echo "make run: the GPU build ($zs)"
else
  echo "make run: the CPU build ($zs)"
fi
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && [ "${ZS_HEADLESS:-0}" != 1 ]; then
  if [ "$mode" = gpu ]; then
    # The GUI opens a config file as it is: a copy that asks for the GPU.
    mkdir -p runs
    sed 's/^\(  use_cpu:\) true/\1 false/' "$config" > runs/quickstart-gpu.yaml
    config=runs/quickstart-gpu.yaml
  fi
  echo "make run: opening the GUI on $config: Run > Start trains it (the Device line says where)"
  exec "$zs" "$config"
fi
echo "make run: training $config headless (about 10 minutes on 2 CPU cores, a minute on a GPU)"
exec "$zs" train "$config" "${sets[@]}"
