# ZeroStudio: two commands do all the setup on Debian 12.
#   make run           install what is missing, build, run the quickstart (GUI with a display, else
#                      headless): with an NVIDIA driver, the GPU build in build-cuda/ against the
#                      CUDA runtime (scripts/zs-runtime, made once under ~/.cache/zerostudio);
#                      ZS_CPU=1 forces the CPU build
#   make test          install what is missing, build, run every test (Debian's LibTorch 1.13, no peer Python)
#   make test-torch2   the same code against the GPU build's LibTorch (the runtime's PyTorch 2.x, CUDA
#                      paths compiled), in build-torch2/, plus the Python peer tests (.venv/)
#   make fuzz          the libFuzzer targets (tests/fuzz), FUZZ_SECONDS each under ASan + UBSan, in
#                      build-fuzz/ (clang); a finding fails it and is kept in tests/fuzz/regressions/
# Other targets: deps, peers, runtime, configure, build, build-cuda, build-torch2, build-fuzz, package,
# package-cuda, bench, docs, guide, clean.

BUILD      ?= build
BUILD_TYPE ?= Release
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=

# Every Debian package the project needs (build, tests, benchmarks).
PACKAGES := build-essential cmake ninja-build ccache pkg-config git \
            libtorch-dev libgloo-dev libopenblas0-pthread \
            qt6-base-dev qt6-qpa-plugins libqcustomplot-dev libyaml-cpp-dev nlohmann-json3-dev \
            liburing-dev libpng-dev libjpeg-dev zlib1g-dev libicu-dev libsentencepiece-dev \
            xvfb xauth fonts-dejavu-core python3-torch python3-venv \
            dpkg-dev lintian appstream desktop-file-utils groff-base \
            clang libclang-rt-14-dev

# The pinned peer environment: Debian's Python 3.11 (python3-venv) with tests/peers/requirements.txt.
VENV        := .venv
PEER_PY     := $(VENV)/bin/python
PIP_VERSION := 25.3
TORCH2_BUILD ?= build-torch2
# The GPU build of make run and of the zerostudio-cuda package.
CUDA_BUILD   ?= build-cuda
# The CUDA runtime both GPU builds and build-torch2 link (scripts/zs-runtime: torch's wheel and its
# CUDA libraries, keyed by the pin), and the CMake arguments of a build against it.
RUNTIME_DIR  := $(shell scripts/zs-runtime path)
RUNTIME_ARGS  = -DCMAKE_PREFIX_PATH=$(RUNTIME_DIR)/torch/share/cmake -DZS_REQUIRE_CUDA_BUILD=ON -DZS_WERROR=ON
# What make test-torch2 runs: unit and e2e tests, one exactness row per ZeRO stage, the peer tests,
# and the package test (there: the GPU package, zerostudio-cuda).
TORCH2_LABELS := unit|e2e|dist_row|peers|package
# The fuzz build (clang, sanitizers, the engine and tests/fuzz only) and each target's time in make fuzz.
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 20

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
ZS := $(BUILD)/app/zerostudio

.PHONY: all deps peers runtime configure build run run-cpu run-gpu configure-cuda build-cuda test configure-torch2 build-torch2 test-torch2 configure-fuzz build-fuzz fuzz \
        package package-cuda bench docs guide clean

all: build

# Installs exactly the missing packages; does nothing (not even apt-get update) when none are.
deps:
	@missing=""; \
	for p in $(PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  $(SUDO) apt-get update && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y $$missing; \
	else \
	  echo "make deps: all packages present"; \
	fi

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)

configure: deps
	cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The quickstart, on the GPU where there is an NVIDIA driver (scripts/nvidia-driver: the kernel
# module's version file or nvidia-smi's GPU list; ZEROSTUDIO_NVIDIA_PROC / ZEROSTUDIO_NVIDIA_SMI
# play another machine), else on the CPU build. ZS_CPU=1 forces the CPU build.
run:
	@if [ "$${ZS_CPU:-0}" != 1 ] && scripts/nvidia-driver; then \
	  $(MAKE) --no-print-directory run-gpu; else $(MAKE) --no-print-directory run-cpu; fi

run-cpu: build
	@scripts/run_quickstart.sh $(ZS) cpu

run-gpu: build-cuda
	@scripts/run_quickstart.sh $(CUDA_BUILD)/app/zerostudio gpu

# The runtime folder (a no-op when it is complete: every clone shares it).
runtime:
	@scripts/zs-runtime install

# A configured folder is configured again from scratch when its LibTorch is not the runtime's.
reset_if_other_torch = if [ -f $(1)/CMakeCache.txt ] && ! grep -qx "Torch_DIR:PATH=$(RUNTIME_DIR)/torch/share/cmake/Torch" \
  $(1)/CMakeCache.txt; then echo "$(1): LibTorch changes to the runtime's: configuring again"; rm -f $(1)/CMakeCache.txt; fi

# The GPU build: the runtime's LibTorch, linked with a RUNPATH into it (no LD_LIBRARY_PATH). Torch's
# CMake compiles with nvcc: NVIDIA's CUDA toolkit where it is installed, else (or with
# ZS_PYPI_NVCC=1) nvcc and the CUDA headers from PyPI (scripts/zs-runtime tools, made once).
configure-cuda: deps runtime
	@$(call reset_if_other_torch,$(CUDA_BUILD))
	@nvcc_args=""; \
	if [ "$${ZS_PYPI_NVCC:-0}" = 1 ] || { ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; }; then \
	  tk=$$(scripts/zs-runtime tools | tail -n1) || exit 1; \
	  nvcc_args="-DCMAKE_CUDA_COMPILER=$$tk/bin/nvcc -DCUDAToolkit_ROOT=$$tk -DCUDA_TOOLKIT_ROOT_DIR=$$tk -DCUDA_NVCC_EXECUTABLE=$$tk/bin/nvcc"; \
	fi; \
	echo cmake -S . -B $(CUDA_BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(RUNTIME_ARGS) $$nvcc_args $(CMAKE_ARGS); \
	cmake -S . -B $(CUDA_BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(RUNTIME_ARGS) $$nvcc_args $(CMAKE_ARGS)

build-cuda: configure-cuda
	cmake --build $(CUDA_BUILD) -j $(JOBS) --target zerostudio zs_shell_docs

# $(call run_ctest,BUILD_DIR,CTEST_ARGS): the tests of a build folder, $(JOBS) at a time, each with its
# share of the cores as OpenMP threads (zerostudio launch gives each rank the same). Debian's
# LibTorch uses one thread anyway; PyTorch's wheel takes one per core, and two tests at a time on
# two cores then oversubscribed them: OpenMP's spinning threads made tests 6-9x slower
# (tst_train_e2e hit its 300 s limit). UI tests need a display: without one, under xvfb-run.
TEST_THREADS = $(shell n=$$(( $$(nproc) / $(JOBS) )); [ $$n -ge 1 ] && echo $$n || echo 1)
run_ctest = cd $(1) && export OMP_NUM_THREADS=$(TEST_THREADS) && \
  if [ -n "$$DISPLAY" ]; then ctest --output-on-failure -j $(JOBS) $(2); \
  else xvfb-run -a -s "-screen 0 1280x1024x24" ctest --output-on-failure -j $(JOBS) $(2); fi

# Every test.
test: build
	@$(call run_ctest,$(BUILD),)

# The pinned peer environment, made again only when tests/peers/requirements.txt changes. deepspeed
# is an sdist whose setup imports torch: it goes in last, without build isolation (its build
# dependencies are pinned in the first pass) and without its CUDA ops. pip's cache keeps the
# wheels (about 3 GB with torch's CUDA libraries) for the next clone.
$(VENV)/.pinned: tests/peers/requirements.txt
	@$(MAKE) --no-print-directory deps
	@start=$$(date +%s); set -e; \
	rm -rf $(VENV); /usr/bin/python3 -m venv $(VENV); \
	$(PEER_PY) -m pip install --disable-pip-version-check -q pip==$(PIP_VERSION); \
	grep -v '^deepspeed==' tests/peers/requirements.txt > $(VENV)/requirements-first.txt; \
	$(PEER_PY) -m pip install --disable-pip-version-check -q -r $(VENV)/requirements-first.txt; \
	DS_BUILD_OPS=0 $(PEER_PY) -m pip install --disable-pip-version-check -q --no-build-isolation --no-deps \
	  $$(grep '^deepspeed==' tests/peers/requirements.txt); \
	$(PEER_PY) -m pip check; \
	cp tests/peers/requirements.txt $@; \
	echo "make peers: $(VENV) installed in $$(( $$(date +%s) - start )) s"

peers: $(VENV)/.pinned

# The PyTorch 2.x build: the GPU build's LibTorch (the runtime's: C++11 ABI, CUDA 13, the same
# compile flags as build-cuda, so each compiles what the other's ccache entries miss), the CUDA
# paths required, warnings as errors, the peer tests registered (.venv's Python).
configure-torch2: peers runtime
	@$(call reset_if_other_torch,$(TORCH2_BUILD))
	cmake -S . -B $(TORCH2_BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(RUNTIME_ARGS) \
	  -DZS_PEER_PYTHON=$(abspath $(PEER_PY)) $(CMAKE_ARGS)

build-torch2: configure-torch2
	cmake --build $(TORCH2_BUILD) -j $(JOBS)

test-torch2: build-torch2
	@$(call run_ctest,$(TORCH2_BUILD),-L '$(TORCH2_LABELS)')

# The fuzz targets: Debian's clang with libFuzzer, ASan and UBSan over the engine (CMakeLists.txt,
# ZS_FUZZ); LibTorch and the other libraries stay uninstrumented.
configure-fuzz: deps
	cmake -S . -B $(FUZZ_BUILD) $(GENERATOR) -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Fuzz -DZS_FUZZ=ON

build-fuzz: configure-fuzz
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target zs_fuzz_all

fuzz: build-fuzz
	@scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# The Debian package (CPack): $(BUILD)/zerostudio_<version>_amd64.deb, dependencies computed by
# dpkg-shlibdeps; tst_package builds it too and checks it with lintian.
package: build
	cd $(BUILD) && cpack -G DEB

# The GPU package: $(CUDA_BUILD)/zerostudio-cuda_<version>_amd64.deb, the GPU build with its
# RUNPATH in /var/lib/zerostudio (the runtime `zerostudio runtime install` makes there).
package-cuda: build-cuda
	cd $(CUDA_BUILD) && cmake --build . -j $(JOBS) && cpack -G DEB

# The user guide's screenshots, from the UI tests under Xvfb (docs/guide/images).
guide: build
	@scripts/guide_screenshots.sh $(BUILD)

bench: build
	@scripts/run_benchmarks.sh $(BUILD)

# docs/CONFIG.md is generated from the schema (tests fail when it drifts).
docs: build
	$(ZS) config schema --markdown > docs/CONFIG.md

clean:
	rm -rf $(BUILD) $(TORCH2_BUILD) $(CUDA_BUILD) $(FUZZ_BUILD)
