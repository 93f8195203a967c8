#!/usr/bin/env bash
# `make run`: train the quickstart headless (progress bar, samples every 250 steps).
# The GUI (`zerostudio configs/quickstart.yaml`) shows the config; starting runs from it comes
# with the dashboard issue.
set -euo pipefail
zs="$1"
config="configs/quickstart.yaml"
echo "make run: training $config (about 10 minutes on 2 CPU cores); Ctrl-C stops after a checkpoint"
exec "$zs" train "$config"
