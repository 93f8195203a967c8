# ZeroStudio: two commands do all the setup on Debian 12.
#   make run    install what is missing, build, run the quickstart (GUI with a display, else headless)
#   make test   install what is missing, build, run every test
# Other targets: deps, configure, build, package, bench, docs, guide, clean.

BUILD      ?= build
BUILD_TYPE ?= Release
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=

# Every Debian package the project needs (build, tests, benchmarks).
PACKAGES := build-essential cmake ninja-build ccache pkg-config git \
            libtorch-dev libgloo-dev libopenblas0-pthread \
            qt6-base-dev qt6-qpa-plugins libqcustomplot-dev libyaml-cpp-dev nlohmann-json3-dev \
            liburing-dev libpng-dev libjpeg-dev zlib1g-dev libicu-dev \
            xvfb xauth fonts-dejavu-core python3-torch \
            dpkg-dev lintian appstream desktop-file-utils groff-base

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
ZS := $(BUILD)/app/zerostudio

.PHONY: all deps configure build run test package bench docs guide clean

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

# The main job on the built-in quickstart.
run: build
	@scripts/run_quickstart.sh $(ZS)

# Every test; UI tests need a display, so without one the whole run goes under xvfb-run.
test: build
	@cd $(BUILD) && if [ -n "$$DISPLAY" ]; then ctest --output-on-failure -j $(JOBS); \
	  else xvfb-run -a -s "-screen 0 1280x1024x24" ctest --output-on-failure -j $(JOBS); fi

# The Debian package (CPack): $(BUILD)/zerostudio_<version>_amd64.deb, dependencies computed by
# dpkg-shlibdeps; tst_package builds it too and checks it with lintian.
package: build
	cd $(BUILD) && cpack -G DEB

# The user guide's screenshots, from the UI tests under Xvfb (docs/guide/images).
guide: build
	@scripts/guide_screenshots.sh $(BUILD)

bench: build
	@scripts/run_benchmarks.sh $(BUILD)

# docs/CONFIG.md is generated from the schema (tests fail when it drifts).
docs: build
	$(ZS) config schema --markdown > docs/CONFIG.md

clean:
	rm -rf $(BUILD)
