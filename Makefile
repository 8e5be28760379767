# Thin wrapper over CMake. The two commands of the quick start:
#   make run    install what is missing, build, run `kvtier replay` on defaults
#   make check  install what is missing, build, run the whole test suite
BUILD ?= build
JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all setup build run check format format-check asan tsan fuzz clean

all: build

setup:
	@tools/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -DKVTIER_WERROR=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

run: build
	$(BUILD)/kvtier replay

check: setup
	@tools/check.sh

format:
	@git ls-files '*.c' '*.h' | xargs clang-format -i

format-check:
	@tools/check.sh format

clean:
	rm -rf build build-asan build-tsan build-fuzz
