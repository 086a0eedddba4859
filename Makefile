# SPDX-License-Identifier: Apache-2.0
# weir's top-level commands. Each works from a fresh clone: it installs the
# Debian packages it needs (scripts/deps.sh, idempotent) and builds with CMake.
#
#   make run     build and run the demo: Nexmark q5 (hot items) as a job plugin
#                through `weir run`, with checkpoints; examples/demo is the HTTP demo
#   make test    check that every #include follows the layers in LAYERS
#                (scripts/check-layers, first: it takes a second); build the
#                normal, ASan+UBSan, TSan and ucontext configurations
#                and run the whole suite in each, under both I/O backends
#                (ucontext: the unit tests only, not tests/integration); run
#                every fuzz target for a bounded time; then scripts/check-deps
#                (every system header, library and tool used comes from a
#                package scripts/deps.sh installs)
#   make check-layers  just the layering check and its self-test
#   make test-fuzz  build the libFuzzer targets (build/fuzz) and run each for
#                FUZZ_SECONDS (default 20) from its seed corpus in fuzz/corpus/
#   make bench   build Release and run every benchmark with its peers
#   make soak    build Release and run bench/soak: KILLS (default 100) SIGKILLs
#                of random workers under a long exactly-once job on a local
#                cluster, then check nothing was lost or duplicated (minutes)
#   make build   just the normal build (build/release)
#   make install build, then install headers, libweir, the weir command, the
#                CMake package and weir.pc under PREFIX (default /usr/local)

JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 20
PREFIX ?= /usr/local
CTEST = ctest --output-on-failure -j$(JOBS)
# The scripts of tests/integration (nodes, etcd, a browser as processes):
# what they check does not hang on how a fiber switches, so the ucontext
# configuration leaves them to the others.
INTEGRATION = ^(install_job|cluster|ha|ha_etcd|etcd_secure|api|tls|data_tls|console|example_wordcount|example_lookup)([.].*)?$$

.PHONY: all deps build install run test test-release test-asan test-tsan test-ucontext test-aarch64 test-fuzz check-deps check-layers bench soak clean format

all: build

deps:
	@scripts/deps.sh

build/release/Makefile: deps
	cmake -S . -B build/release -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=gcc

build: build/release/Makefile
	cmake --build build/release -j$(JOBS)

install: build
	cmake --install build/release --prefix $(PREFIX)

run: build
	./build/release/weir run build/release/examples/nexmark_job.so --parallelism 2 \
	    --checkpoint-dir build/run-checkpoints --checkpoint-interval-ms 500 -- q5 4000000

test-release: build
	cd build/release && $(CTEST)

test-asan: deps
	cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	      -DWEIR_SANITIZE=address -DWEIR_BUILD_BENCH=OFF
	cmake --build build/asan -j$(JOBS)
	cd build/asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(CTEST)

test-tsan: deps
	cmake -S . -B build/tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	      -DWEIR_SANITIZE=thread -DWEIR_BUILD_BENCH=OFF
	cmake --build build/tsan -j$(JOBS)
	cd build/tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/tests/tsan.supp $(CTEST)

test-ucontext: deps
	cmake -S . -B build/ucontext -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=gcc \
	      -DWEIR_CONTEXT=ucontext -DWEIR_BUILD_BENCH=OFF
	cmake --build build/ucontext -j$(JOBS)
	cd build/ucontext && $(CTEST) -E '$(INTEGRATION)'

test-aarch64: deps
	scripts/test-aarch64.sh build/aarch64

test-fuzz: deps
	cmake -S . -B build/fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	      -DWEIR_SANITIZE=address -DWEIR_FUZZ=ON -DWEIR_BUILD_TESTS=OFF -DWEIR_BUILD_BENCH=OFF
	cmake --build build/fuzz -j$(JOBS)
	fuzz/run.sh build/fuzz $(FUZZ_SECONDS)

# Every system file the configurations above used must come from a package
# scripts/deps.sh installs (or a hard Depends of one): a Recommends is not on
# a new machine. The second line proves the check can fail: without the
# aarch64 C library headers it must name one of them.
check-deps:
	scripts/check-deps build
	@if CHECK_DEPS_DROP=libc6-dev-arm64-cross scripts/check-deps build 2>&1 | \
	    grep -q '/usr/aarch64-linux-gnu/include/.* is in package libc6-dev-arm64-cross'; then \
	  echo "check-deps: self-test ok (a dropped package is named)"; \
	else echo "check-deps: self-test FAILED: dropping libc6-dev-arm64-cross went unnoticed"; exit 1; fi

# Every #include in src/ and include/weir/ must follow an arrow of LAYERS.
# The second part proves the check can fail: a copy of the tree with a
# forbidden include put into an io backend must be refused, naming the
# file, the line and both layers.
check-layers:
	scripts/check-layers
	@t=$$(mktemp -d) && trap 'rm -rf "$$t"' EXIT && \
	cp -R LAYERS src include "$$t"/ && \
	{ echo '#include "rt/rt_int.h"'; cat src/io/uring.c; } >"$$t"/src/io/uring.c && \
	if scripts/check-layers "$$t" >"$$t"/out 2>&1; then \
	  echo "check-layers: self-test FAILED: an io file including rt/rt_int.h went unnoticed"; exit 1; \
	elif grep -qx 'src/io/uring.c:1: io may not include rt (rt/rt_int.h)' "$$t"/out; then \
	  echo "check-layers: self-test ok (a forbidden include is named)"; \
	else echo "check-layers: self-test FAILED: unexpected output:"; cat "$$t"/out; exit 1; fi

test: check-layers test-release test-asan test-tsan test-ucontext test-aarch64 test-fuzz
	$(MAKE) --no-print-directory check-deps
	@echo "make test: all configurations passed"

bench: deps
	bench/run

soak: deps
	bench/soak

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build
