#!/usr/bin/env bash
# Issue 39's measurements in one command on a lent GPU machine, with binaries built here (Debian 12)
# against the same PyTorch wheel the machine has (2.11.0+cu130: `make build-torch2`), so the machine
# spends no time compiling. Here, in the repository root:
#   scripts/gpu/prepare.sh && scripts/gpu/measure.sh pack
# packs .gpu/prefix.tar.xz, .gpu/fixtures.tar.xz, .gpu/bin.tar.xz (bench_gpu_step, bench_cpu_adam,
# bench_offload_host,
# zs_tests, zs_dist_worker) and .whl/ (the pinned diffusers, for the baselines). There, with .gpu and
# .whl carried:
#   scripts/gpu/measure.sh run [STEP...]   (default: package flux-lora sd15 tests qwen — the GPU
#                                          package first (issue 52), then issue 58's order: the
#                                          Flux.1 fault, offload against stage 0, Flux.1 LoRA
#                                          streamed vs resident vs diffusers, the CUDA tests, then
#                                          Qwen-Image's seed LoRA config if time is left)
# Steps: package flux-lora flux-quant sdpa flux-cudnn tests sdxl sd15 flux streams qwen. Each writes its figures to $OUT/<step>.log as they come
# (seven files: the device tool brings back eight at most),
# and a step is skipped once the deadline (ZS_DEADLINE seconds after the start, default 540) is
# too near for it.
set -uo pipefail
root=$(pwd)
out=${OUT:-$root/.gpu/out}
prefix=/tmp/zs-prefix
build=build-torch2

case "${1:-run}" in
  pack)
    mkdir -p .gpu .whl
    # The GPU package (make package-cuda), without CUDA libraries: the machine's own PyTorch is
    # its runtime there (the package step).
    cp build-cuda/zerostudio-cuda_*_amd64.deb .gpu/zerostudio-cuda.deb
    tar -cJf .gpu/bin.tar.xz $build/bench/bench_gpu_step $build/bench/bench_cpu_adam $build/bench/bench_offload_host \
      $build/tests/zs_tests \
      $build/tests/zs_dist_worker
    version=$(.venv/bin/python -c 'import diffusers; print(diffusers.__version__)')
    .venv/bin/pip download -q --no-deps --only-binary=:all: -d .whl "diffusers==$version" importlib_metadata
    ls -la .gpu .whl
    exit 0
    ;;
  run) shift ;;
  *) echo "usage: scripts/gpu/measure.sh pack | run [STEP...]" >&2; exit 2 ;;
esac

start=$(date +%s)
deadline=${ZS_DEADLINE:-540}
left() { echo $(( deadline - ($(date +%s) - start) )); }
mkdir -p "$out"
steps=${*:-package flux-lora sd15 tests qwen}

# The binaries look for the source tree and ../shared where they were built (/work/main).
mkdir -p $prefix && tar -xJf .gpu/prefix.tar.xz -C $prefix || exit 1
tar -xJf .gpu/bin.tar.xz || exit 1
shared=$(cd "$root/.." && pwd)/shared
[ -d "$shared/fixtures" ] || { mkdir -p "$shared" && tar -xJf .gpu/fixtures.tar.xz -C "$shared"; }
if [ "$root" != /work/main ]; then
  mkdir -p /work
  [ -e /work/main ] || ln -s "$root" /work/main
  [ -e /work/shared ] || ln -s "$shared" /work/shared
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site
torch_lib=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__) + "/lib")')
export LD_LIBRARY_PATH=$torch_lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:$prefix/usr/lib/x86_64-linux-gnu
{
  echo "$(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)," \
       "$(nproc) CPU cores, $(free -g | awk '/Mem:/{print $2}') GiB, python3 torch" \
       "$(python3 -c 'import torch; print(torch.__version__)'), diffusers $(python3 -c 'import diffusers; print(diffusers.__version__)' 2>&1 | tail -1)"
  for b in $build/bench/bench_gpu_step $build/tests/zs_tests; do ldd $b | grep "not found" && echo "$b: libraries missing"; done
} 2>&1 | tee "$out/machine.log"
ldd $build/bench/bench_gpu_step | grep -q "not found" && exit 3

bench=$build/bench/bench_gpu_step
for step in $steps; do
  t=$(left)
  case $step in
    package)
      # Issue 52: the zerostudio-cuda package installed here, its runtime being this machine's own
      # PyTorch (torch/ and nvidia/ of its site-packages, behind the runtime folder's path and
      # marker), then `zerostudio doctor` and 20 quickstart steps on the GPU from it.
      [ "$t" -gt 60 ] || { echo "package: skipped, ${t}s left"; continue; }
      {
        site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
        pin=$(sed -n 's/^TORCH_VERSION=//p' scripts/zs-runtime)+$(sed -n 's/^CUDA_TAG=//p' scripts/zs-runtime)
        rt=/var/lib/zerostudio/runtime-${pin/+/-}
        mkdir -p "$rt" && ln -sfn "$site/torch" "$rt/torch" && ln -sfn "$site/nvidia" "$rt/nvidia"
        for m in "$rt" "$site"; do printf 'torch %s\nthe lent machine'"'"'s own PyTorch\n' "$pin" > "$m/zerostudio-runtime.txt"; done
        if command -v dpkg >/dev/null && [ "$(id -u)" = 0 ]; then
          dpkg -i --force-depends .gpu/zerostudio-cuda.deb && zs=/usr/bin/zerostudio && root=
        else
          dpkg -x .gpu/zerostudio-cuda.deb /tmp/zs-root && zs=/tmp/zs-root/usr/lib/zerostudio/zerostudio && root=/tmp/zs-root
        fi
        # Debian's Qt, yaml-cpp and friends come from the prefix (this machine is not Debian 12).
        export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu
        ldd $root/usr/lib/zerostudio/zerostudio | grep "not found"
        timeout 60 $zs doctor; echo "doctor exit $?"
        timeout $((t - 90)) $zs train $root/usr/share/zerostudio/configs/quickstart.yaml --set launch.use_cpu=false \
          --set training.max_steps=20 --set sampling.every_n_steps=0 --set checkpointing.every_n_steps=0 \
          --set data.generate_count=640 --run-dir /tmp/zs-package-run 2>&1 | tail -15
        echo "quickstart exit ${PIPESTATUS[0]}"
      } 2>&1 | tee "$out/package.log"
      ;;
    tests)
      # The CUDA twins (ZS_REQUIRE_CUDA: a skip fails), side by side.
      [ "$t" -gt 60 ] || { echo "tests: skipped, ${t}s left"; continue; }
      ( CI=1 ZS_REQUIRE_CUDA=1 timeout 150 $build/tests/zs_tests tst_cuda > /tmp/tst_cuda.log 2>&1; echo "tst_cuda exit $?" ) &
      ( CI=1 ZS_REQUIRE_CUDA=1 timeout 150 $build/tests/zs_tests tst_dist cudaMatchesTheCpuReference > /tmp/tst_dist_cuda.log 2>&1
        echo "tst_dist cudaMatchesTheCpuReference exit $?" ) &
      ( CI=1 ZS_REQUIRE_CUDA=1 timeout 150 $build/tests/zs_tests tst_train_e2e fp16TrainsOnCudaWithLossScaling > /tmp/tst_e2e_cuda.log 2>&1
        echo "tst_train_e2e fp16TrainsOnCudaWithLossScaling exit $?" ) &
      wait
      for f in /tmp/tst_cuda.log /tmp/tst_dist_cuda.log /tmp/tst_e2e_cuda.log; do echo "== $f"; cat $f; done > "$out/tests.log"
      grep -h -E "^(FAIL|Totals)|Loc:" /tmp/tst_*.log | head -40
      ;;
    sdxl)
      # Seed 000: SDXL's UNet, 1024 px, batch 8, bf16, checkpointing, ZeRO-2 + optimizer in CPU memory.
      [ "$t" -gt 120 ] || { echo "sdxl: skipped, ${t}s left"; continue; }
      timeout $((t - 10)) $bench --model sdxl --res 128 --batch 8 --ckpt 1 --runs stage2+cpu-opt --steps 3 --warmup 1 \
        --baseline 0 --profile 1 2>&1 | tee "$out/sdxl.log"
      ;;
    sd15)
      # Offload against stage 0 right before it, and the host's AdamW floor.
      [ "$t" -gt 70 ] || { echo "sd15: skipped, ${t}s left"; continue; }
      timeout $((t - 10)) $bench --model sd15 --batch 8 --runs stage0,stage2+cpu-opt,stage2+cpu-opt+delayed --steps 5 --warmup 2 --baseline 1 \
        --profile 1 2>&1 | tee "$out/sd15.log"
      timeout 60 $build/bench/bench_cpu_adam --sizes 256 --threads "$(nproc)" --steps 3 --python python3 2>&1 | tee -a "$out/sd15.log"
      timeout 60 $build/bench/bench_offload_host --params 256 --threads 1,0 --steps 3 --lean 0 2>&1 | tee -a "$out/sd15.log"
      ;;
    flux-lora)
      # Issue 58 items 1 and 3: Flux.1 [dev] LoRA r16 at full width (4 double + 8 single blocks),
      # 1024 px: the ready config (ZeRO-3, base streamed from CPU memory) alone first, then the
      # diffusers + peft baseline, then the base resident on the card (stage 0). The second H200
      # session saw the baseline fail with CUBLAS_STATUS_EXECUTION_FAILED and this LoRA run with
      # an illegal memory access: whatever fails here runs again with CUDA_LAUNCH_BLOCKING=1, and a
      # failing ZeroStudio run once more at one block of each kind under compute-sanitizer.
      [ "$t" -gt 150 ] || { echo "flux-lora: skipped, ${t}s left"; continue; }
      flags="--model flux-dev --layers 4 --single-layers 8 --steps 3 --warmup 1"
      timeout $((t - 10)) $bench $flags --runs configs/flux-dev-lora.yaml --baseline 1 2>&1 | tee "$out/flux.log"
      t=$(left)
      timeout $((t - 10)) $bench $flags --runs scripts/gpu/flux-dev-lora-resident.yaml --baseline 0 2>&1 | tee -a "$out/flux.log"
      if grep -q "failed" "$out/flux.log"; then
        t=$(left)
        echo "== again with CUDA_LAUNCH_BLOCKING=1" | tee -a "$out/flux.log"
        if grep -q "PyTorch baseline failed" "$out/flux.log"; then
          CUDA_LAUNCH_BLOCKING=1 timeout $((t / 3)) python3 bench/gpu_transformer_baseline.py --model flux-dev \
            --config configs/flux-dev-lora.yaml --layers 4 --single-layers 8 --steps 1 --warmup 1 2>&1 | tail -30 | tee -a "$out/flux.log"
        fi
        for c in configs/flux-dev-lora.yaml scripts/gpu/flux-dev-lora-resident.yaml; do
          grep -q "^$c .*failed" "$out/flux.log" || continue
          t=$(left)
          CUDA_LAUNCH_BLOCKING=1 timeout $((t / 3)) $bench --model flux-dev --layers 4 --single-layers 8 --steps 1 \
            --warmup 1 --child $c 2>&1 | tail -30 | tee -a "$out/flux.log"
          t=$(left)
          [ "$t" -gt 90 ] && timeout $((t / 2)) compute-sanitizer --print-limit 20 $bench --model flux-dev --layers 1 \
            --single-layers 1 --steps 1 --warmup 0 --child $c 2>&1 | tail -60 | tee -a "$out/flux.log"
        done
      fi
      ;;
    flux-quant)
      # Issue 53: Flux.1 [dev] LoRA r16 at full width (4 double + 8 single blocks), 1024 px, with the
      # base resident in fp8 and in NF4 against the bf16 base streamed from CPU memory (the ready
      # config), s/it and peak in one run; each block's Linear weights dequantized as it runs.
      [ "$t" -gt 150 ] || { echo "flux-quant: skipped, ${t}s left"; continue; }
      timeout $((t - 10)) $bench --model flux-dev --layers 4 --single-layers 8 --steps 3 --warmup 1 --baseline 0 \
        --runs configs/flux-dev-lora.yaml,configs/flux-dev-lora-fp8.yaml,configs/flux-dev-lora-nf4.yaml 2>&1 | tee "$out/flux-quant.log"
      ;;
    sdpa)
      # Issue 58 item 1: PyTorch's SDPA alone at Flux.1's joint-attention shapes, one backend forced
      # each, each in a process of its own (a fault poisons the context).
      [ "$t" -gt 40 ] || { echo "sdpa: skipped, ${t}s left"; continue; }
      for v in "cudnn transposed" "cudnn contiguous" "flash transposed" "efficient transposed"; do
        timeout 45 python3 scripts/gpu/sdpa_cudnn_repro.py $v 2>&1 | grep -E "^sdpa|Error|error" | head -3
      done | tee "$out/sdpa.log"
      ;;
    flux-cudnn)
      # The diffusers + peft baseline with PyTorch's own SDPA choice (cuDNN on Hopper).
      [ "$t" -gt 60 ] || { echo "flux-cudnn: skipped, ${t}s left"; continue; }
      ZEROSTUDIO_CUDNN_ATTENTION=1 timeout $((t - 10)) python3 bench/gpu_transformer_baseline.py --model flux-dev \
        --config configs/flux-dev-lora.yaml --layers 4 --single-layers 8 --steps 2 --warmup 1 2>&1 | tail -5 \
        | tee "$out/flux-cudnn.log"
      ;;
    flux)
      # A fifth of the blocks at full width (building all 57 with random weights took over 3.5 min).
      [ "$t" -gt 150 ] || { echo "flux: skipped, ${t}s left"; continue; }
      # LoRA first: in the second H200 session its child failed with an illegal memory access right
      # after the diffusers baseline's cuBLAS failure (rerun it alone with CUDA_LAUNCH_BLOCKING=1 if so).
      timeout $((t - 10)) $bench --model flux-dev --runs configs/flux-dev-lora.yaml,configs/flux-dev-finetune-adafactor.yaml \
        --layers 4 --single-layers 8 --steps 2 --warmup 1 --baseline 1 2>&1 | tee "$out/flux.log"
      ;;
    streams)
      [ "$t" -gt 60 ] || { echo "streams: skipped, ${t}s left"; continue; }
      timeout $((t - 10)) $bench --model sd15 --batch 8 --runs stage3+cpu-param,stage3+cpu-param/serial,stage3,stage3/serial \
        --steps 4 --warmup 2 --baseline 0 2>&1 | tee "$out/streams.log"
      ;;
    qwen)
      [ "$t" -gt 150 ] || { echo "qwen: skipped, ${t}s left"; continue; }
      timeout $((t - 10)) $bench --model qwen-image \
        --runs configs/qwen-image-lora-zero3-offload.yaml,configs/qwen-image-finetune-adafactor.yaml \
        --layers 12 --steps 2 --warmup 1 --baseline 1 2>&1 | tee "$out/qwen.log"
      ;;
    *) echo "unknown step $step" ;;
  esac
  echo "== $step done at $(( $(date +%s) - start )) s" | tee -a "$out/machine.log"
done
