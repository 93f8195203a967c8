#!/usr/bin/env bash
# On a lent GPU machine (PyTorch 2.x with CUDA and NCCL in python3; no Qt, yaml-cpp or
# nlohmann_json), in the repository root, with .gpu/ carried (scripts/gpu/prepare.sh makes it):
#   scripts/gpu/run.sh build            unpack .gpu/, configure build-gpu/ (engine, CLI, engine tests,
#                                       benchmarks; no GUI) against python3's LibTorch, build
#   scripts/gpu/run.sh test [ARGS]      ctest with CI=1 and ZS_REQUIRE_CUDA=1 (nothing skips silently)
#   scripts/gpu/run.sh bench [ARGS]     bench_gpu_step ARGS
#   scripts/gpu/run.sh debug BIN [ARGS] a backtrace of BIN's crash (cuda-gdb; there is no gdb)
# Logs go to $OUT (the device tool's folder) or .gpu/out.
set -uo pipefail
root=$(pwd)
out=${OUT:-$root/.gpu/out}
prefix=/tmp/zs-prefix
build=$root/build-gpu
mkdir -p "$out"
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH

shared=$(cd "$root/.." && pwd)/shared  # where CMake looks for the fixtures, as in CI

unpack() {
  if [ ! -d $prefix/usr ]; then mkdir -p $prefix && tar -xJf .gpu/prefix.tar.xz -C $prefix || exit 1; fi
  # QtCore's CMake target names its mkspecs folder, which only the qmake packages fill.
  mkdir -p $prefix/usr/lib/x86_64-linux-gnu/qt6/mkspecs/linux-g++
  # Where the machine has its own libjpeg/libpng/zlib headers, the compiler finds those before
  # the carried ones: use its libraries with them (a libjpeg 62 library under libjpeg 8 headers
  # refuses to start).
  local lib=$prefix/usr/lib/x86_64-linux-gnu inc=$prefix/usr/include
  [ -f /usr/include/jpeglib.h ] && rm -f $lib/libjpeg.so* $inc/jpeglib.h $inc/jconfig.h $inc/jmorecfg.h $inc/jerror.h
  [ -f /usr/include/png.h ] && rm -rf $lib/libpng* $inc/png.h $inc/pngconf.h $inc/pnglibconf.h $inc/libpng16
  [ -f /usr/include/zlib.h ] && rm -f $lib/libz.so $inc/zlib.h $inc/zconf.h
  if [ ! -d "$shared/fixtures" ]; then mkdir -p "$shared" && tar -xJf .gpu/fixtures.tar.xz -C "$shared" || exit 1; fi
}

case "${1:-build}" in
  build)
    unpack
    torch_cmake=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
    echo "python3 torch $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(c++ --version | head -1), $(cmake --version | head -1)"
    # DT_RPATH (not RUNPATH): the carried libraries' own dependencies (ICU under QtCore) resolve
    # from the prefix too, without LD_LIBRARY_PATH.
    if [ ! -f "$build/build.ninja" ]; then
      cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DZS_BUILD_GUI=OFF \
        -DCMAKE_PREFIX_PATH="$torch_cmake;$prefix/usr" \
        -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags >"$out/configure.log" 2>&1
      rc=$?
      grep -E "ZeroStudio|CUDA|Torch|Caffe2|Error|error|Warning" "$out/configure.log" | head -40
      [ $rc -eq 0 ] || { tail -40 "$out/configure.log"; exit $rc; }
    fi
    start=$(date +%s)
    # moc runs during the build and needs the carried libraries (pcre2-16).
    LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu ninja -C "$build" -k 0 >"$out/build.log" 2>&1
    rc=$?
    echo "build: exit $rc in $(( $(date +%s) - start )) s"
    [ $rc -eq 0 ] || grep -E "error|Error" -A3 "$out/build.log" | head -120
    exit $rc
    ;;
  test)
    shift
    cd "$build" || exit 1
    start=$(date +%s)
    CI=1 ZS_REQUIRE_CUDA=1 OMP_NUM_THREADS=2 ctest -j 8 --timeout 280 --output-on-failure "$@" >"$out/ctest.log" 2>&1
    rc=$?
    echo "ctest: exit $rc in $(( $(date +%s) - start )) s"
    grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|FAIL!|QWARN|QINFO.*(CUDA|fp32|bf16|fp16)" "$out/ctest.log" | tail -80
    exit $rc
    ;;
  debug)
    # A backtrace where there is no gdb: cuda-gdb debugs host code too. debug BINARY [ARGS]
    shift
    cuda-gdb -q -batch -ex run -ex bt -ex "info threads" --args "$@" 2>&1 | grep -v "^\[New Thread\|^\[Thread" | tail -60
    ;;
  bench)
    shift
    "$build/bench/bench_gpu_step" "$@" 2>&1 | tee -a "$out/bench.log"
    ;;
  *)
    echo "usage: scripts/gpu/run.sh build|test|bench [ARGS]" >&2
    exit 2
    ;;
esac
