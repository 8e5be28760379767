# Thin wrapper over CMake. The two commands of the quick start:
#   make run    install what is missing, build, replay a hybrid model
#               (qwen3-next-like) on the bundled trace (the synthetic workload
#               when ../shared/traces is not there), beside its HBM-only
#               baseline (TTFT with and without the tiers)
#   make check  install what is missing, build, run the whole test suite
# Also: make install [DESTDIR=…] [PREFIX=…] (libkvtier, headers, kvtier.pc, the
# kvtier command), make mutants (tools/mutants.sh: the mutation check), make
# python (python/kvtier over libkvtier, into $(BUILD)/python).
BUILD ?= build
JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
RUN_TRACE ?= ../shared/traces/conversation_trace.jsonl
PREFIX ?= /usr/local

.PHONY: all setup configure build run check install mutants format format-check clean python

all: build

setup:
	@tools/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -DKVTIER_WERROR=ON $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j$(JOBS) -- --no-print-directory

run: configure
	@cmake --build $(BUILD) --target kvtier -j$(JOBS) -- --no-print-directory
	$(BUILD)/kvtier replay --model qwen3-next-like --hbm-baseline on $(if $(wildcard $(RUN_TRACE)),--trace $(RUN_TRACE) --limit 300 --instances 4,--limit 300)

check: setup
	@tools/check.sh

install: build
	@DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix "$(PREFIX)"

python: configure
	@cmake --build $(BUILD) --target python -j$(JOBS) -- --no-print-directory
	@echo "python: PYTHONPATH=$(BUILD)/python /usr/bin/python3 -c 'import kvtier'"

mutants: setup
	@tools/mutants.sh

format:
	@git ls-files '*.c' '*.h' | xargs clang-format -i

format-check:
	@tools/check.sh format

clean:
	rm -rf build build-asan build-tsan build-release build-debug build-fuzz
