#!/usr/bin/env bash
# Regenerates the user guide's screenshots (docs/guide/images) from the UI tests, which grab the
# wizard's pages, the dashboard's tabs and the checkpoint browser under Xvfb into
# BUILD/screenshots. Usage: scripts/guide_screenshots.sh [BUILD]   (make guide)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build}"
run() { if [ -n "${DISPLAY:-}" ]; then "$@"; else xvfb-run -a -s "-screen 0 1280x1024x24" "$@"; fi; }
(cd "$build" && run ctest -R 'tst_setup_wizard|tst_dashboard_e2e|tst_queue_panel|tst_samples_compare' --output-on-failure)
out="$here/docs/guide/images"
mkdir -p "$out"
for shot in wizard_0_environment wizard_1_deepspeed wizard_2_processes wizard_3_model wizard_model_family_card \
            wizard_4_method wizard_5_dataset wizard_6_training wizard_7_sampling wizard_8_output wizard_9_summary \
            dashboard_dashboard dashboard_samples dashboard_checkpoints dashboard_log dashboard_config \
            checkpoints_lora queue samples_strip samples_compare_steps samples_compare_runs samples_zoom; do
  cp "$build/screenshots/$shot.png" "$out/$shot.png"
done
echo "screenshots copied to docs/guide/images"
