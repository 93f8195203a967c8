#!/usr/bin/env bash
# make fuzz: every libFuzzer target of BUILD/fuzz (tests/fuzz/README.md), each for SECONDS seconds
# under ASan + UBSan, after replaying its regression files (tests/fuzz/regressions/<target>/).
# A finding (a crash, a sanitizer report, an exception the CLI would call "unexpected failure", a
# timeout, an allocation over the limit) fails the run: its input is copied into the regression
# folder, to be fixed and committed with the fix. Prints each target's inputs per second.
#   scripts/fuzz.sh BUILD [SECONDS] [TARGET...]
set -uo pipefail
build=${1:?usage: scripts/fuzz.sh BUILD [SECONDS] [TARGET...]}
seconds=${2:-20}
shift $(( $# >= 2 ? 2 : 1 ))
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$build/fuzz"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for t in "$bin"/fuzz_*; do targets+=("$(basename "$t" | sed 's/^fuzz_//')"); done
fi
[ ${#targets[@]} -gt 0 ] || { echo "fuzz: no targets in $bin (make build-fuzz)"; exit 1; }

# Reports stop at the first finding; a leak in one input counts; an input that takes 10 s is a hang.
# One allocation over 1 GiB is a finding (an unbounded size read from a file; the weight-file
# targets' data sections stay under 16 MiB, and full-size skeletons are meta tensors that allocate
# nothing), and so is more than 3 GiB in use.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_odr_violation=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export OMP_NUM_THREADS=1
limits=(-rss_limit_mb=3072 -malloc_limit_mb=1024 -timeout=10)

failed=()
summary=()
for t in "${targets[@]}"; do
  exe="$bin/fuzz_$t"
  work="$build/fuzz-corpus/$t"
  seeds="$build/fuzz-seeds/$t"
  regressions="$root/tests/fuzz/regressions/$t"
  findings="$build/fuzz-findings/$t"
  rm -rf "$seeds" "$findings"
  mkdir -p "$work" "$seeds" "$findings"
  if ! ZS_FUZZ_WRITE_SEEDS="$seeds" "$exe" >/dev/null 2>"$findings/seeds.log"; then
    cat "$findings/seeds.log"; echo "fuzz: $t: writing its seeds failed"; failed+=("$t"); continue
  fi
  # 1. The regression files: every input once.
  if [ -d "$regressions" ] && [ -n "$(ls -A "$regressions")" ]; then
    if ! "$exe" "${limits[@]}" "$regressions"/* >"$findings/regressions.log" 2>&1; then
      tail -40 "$findings/regressions.log"
      echo "fuzz: $t: a regression file fails again ($regressions)"; failed+=("$t"); continue
    fi
  fi
  # 2. Fuzzing from the seeds and what earlier runs found (the work corpus, kept in BUILD).
  log="$findings/fuzz.log"
  "$exe" "${limits[@]}" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$findings/" "$work" "$seeds" >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  corpus=$(ls "$work" | wc -l)
  if [ $rc -ne 0 ]; then
    tail -60 "$log"
    mkdir -p "$regressions"
    for a in "$findings"/crash-* "$findings"/leak-* "$findings"/timeout-* "$findings"/oom-*; do
      [ -e "$a" ] && cp "$a" "$regressions/" && echo "fuzz: $t: kept $regressions/$(basename "$a")"
    done
    echo "fuzz: $t: FINDING (exit $rc) after ${runs:-?} inputs; fix it and commit the regression file"
    failed+=("$t")
  fi
  summary+=("$(printf '%-16s %8s inputs %6s/s  corpus %5s  %s' "$t" "${runs:-0}" "${rate:-0}" "$corpus" "$([ $rc -eq 0 ] && echo ok || echo FINDING)")")
done
echo "fuzz: ${#targets[@]} targets, ${seconds} s each:"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in: ${failed[*]}"
  exit 1
fi
