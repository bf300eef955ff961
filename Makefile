# The two commands of the README, plus helpers. Everything goes through CMake;
# `scripts/setup.sh` checks (and where possible installs) the build tools.
BUILD ?= build
export PATH := $(HOME)/.local/bin:$(PATH)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all setup build demo test bench install wheel clean

all: build

setup:
	@sh scripts/setup.sh

$(BUILD)/CMakeCache.txt: | setup
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The main job: run the three named operators on real-model presets and check them.
demo: build
	$(BUILD)/bin/qkvfuse demo

# The whole CPU test suite.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: build
	$(BUILD)/bin/qkvfuse bench

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX),)

# The Python wheel, manylinux-tagged by auditwheel, into dist/ (scripts/wheel.sh;
# its own clean folder $(BUILD)-wheel). WHEEL_CUDA=OFF builds it CPU-only,
# ON requires nvcc, AUTO (the default) uses it when found.
WHEEL_CUDA ?= AUTO
wheel: setup
	sh scripts/wheel.sh --build $(BUILD)-wheel --dist dist --cuda $(WHEEL_CUDA)

clean:
	rm -rf $(BUILD)
