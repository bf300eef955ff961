# SPDX-License-Identifier: Apache-2.0
# The two commands of the README, plus helpers. Everything goes through CMake;
# `scripts/setup.sh` checks (and where possible installs) the build tools.
#
# GPU architectures. The developer tree $(BUILD) (build, demo, test, bench)
# compiles device code for DEV_ARCHS only: the GPUs this machine has
# (nvidia-smi's compute capabilities, cubins only), or, with none visible,
# sm_75 and sm_90, which compile both paths of the kernels (sm_75: the
# general kernel alone, the streaming kernels compiled out; sm_90: all of
# them, with programmatic dependent launch) in a fraction of the time of the
# default list. `make install` builds the library and the CLI in their own
# tree, $(DIST), for CMake's default list (every architecture from sm_75 on,
# and PTX; CMakeLists.txt), as `pip install .` does.
BUILD ?= build
DIST ?= build-dist
export PATH := $(HOME)/.local/bin:$(PATH)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release
GPU_ARCHS = $(shell nvidia-smi -L >/dev/null 2>&1 && nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | \
               grep -E '^[0-9]+\.[0-9]+$$' | tr -d . | sort -u | sed 's/$$/-real/' | paste -sd';' -)
DEV_ARCHS ?= $(if $(GPU_ARCHS),$(GPU_ARCHS),75-real;90-real)

.PHONY: all setup build demo test bench install wheel clean

all: build

setup:
	@sh scripts/setup.sh

$(BUILD)/CMakeCache.txt: | setup
	cmake -S . -B $(BUILD) "-DCMAKE_CUDA_ARCHITECTURES=$(DEV_ARCHS)" $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The main job: run the three named operators on real-model presets and check
# them (builds the library and the CLI only).
demo: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target qkvfuse qkvfuse_cli
	$(BUILD)/bin/qkvfuse demo

# The whole CPU test suite.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target qkvfuse_cli
	$(BUILD)/bin/qkvfuse bench

$(DIST)/CMakeCache.txt: | setup
	cmake -S . -B $(DIST) $(CMAKE_FLAGS) -DQKVFUSE_BUILD_TESTS=OFF

install: $(DIST)/CMakeCache.txt
	cmake --build $(DIST) -j $(JOBS)
	cmake --install $(DIST) $(if $(PREFIX),--prefix $(PREFIX),)

# The Python wheel, manylinux-tagged by auditwheel, into dist/ (scripts/wheel.sh;
# its own clean folder $(BUILD)-wheel). WHEEL_CUDA=OFF builds it CPU-only,
# ON requires nvcc, AUTO (the default) uses it when found.
WHEEL_CUDA ?= AUTO
wheel: setup
	sh scripts/wheel.sh --build $(BUILD)-wheel --dist dist --cuda $(WHEEL_CUDA)

clean:
	rm -rf $(BUILD) $(DIST)
