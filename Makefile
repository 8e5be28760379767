# Thin wrapper over CMake. The two commands of the quick start:
#   make run    install what is missing, build, run `kvtier replay` on defaults
#   make check  install what is missing, build, run the whole test suite
BUILD ?= build
JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all setup configure build run check format format-check clean

all: build

setup:
	@tools/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -DKVTIER_WERROR=ON $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j$(JOBS) -- --no-print-directory

run: configure
	@cmake --build $(BUILD) --target kvtier -j$(JOBS) -- --no-print-directory
	$(BUILD)/kvtier replay

check: setup
	@tools/check.sh

format:
	@git ls-files '*.c' '*.h' | xargs clang-format -i

format-check:
	@tools/check.sh format

clean:
	rm -rf build build-asan build-tsan build-fuzz
