# specula — build: `make` (library, CLI, tests), `make test`, `make run`, `make asan`.
# Every .c under src/ (except src/cli/) goes into libspecula; src/cli/ is the `specula`
# binary; each tests/test_*.c is one test program. New files need no Makefile edit.

CC       ?= cc
BUILD    ?= build
# `make test` and `make run` build with JOBS compiles at once (default: one per core)
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
# the library's version (include/specula.h): the .so's file name and SONAME, specula.pc
VERSION := $(shell sed -n 's/^\#define SPECULA_VERSION "\([^"]*\)".*/\1/p' include/specula.h)
# One binary per architecture, for every processor of it: ordinary files target a portable
# baseline (x86-64-v2: SSE4.2, any x86-64 of the last 15 years; aarch64: armv8-a), tuned for
# this machine; the SIMD kernels are in *_avx512.c / *_avx2.c / *_neon.c files (below),
# picked at run time (src/core/cpu.h).
TARGET_MACHINE := $(shell $(CC) -dumpmachine 2>/dev/null)
ifneq ($(findstring aarch64,$(TARGET_MACHINE)),)
ARCH_FLAGS ?=
else
ARCH_FLAGS ?= -march=x86-64-v2 -mtune=native
endif
OPT      ?= -O3 $(ARCH_FLAGS) -fno-math-errno
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-parameter \
               -fPIC -pthread -g -Iinclude -Isrc $(shell pkg-config --cflags jansson libpcre2-8 libutf8proc libmicrohttpd 2>/dev/null)
CFLAGS   += $(CFLAGS_BASE) $(OPT) $(EXTRA_CFLAGS)
LIB_LDLIBS := $(shell pkg-config --libs jansson libpcre2-8 libutf8proc libmicrohttpd 2>/dev/null || echo -ljansson -lpcre2-8 -lutf8proc -lmicrohttpd) -lm -pthread
LDLIBS   += $(LIB_LDLIBS)

# MPI (optional): with `mpicc` present, src/train/dist.c is built with SP_HAVE_MPI and the
# `specula` binary, libspecula.a's users and the tests link Open MPI (`mpirun -np N specula
# train|regen`). libspecula.so never does: it is linked with a one-rank dist.o (below).
# NO_MPI=1 builds without it.
ifeq ($(NO_MPI),)
MPICC    := $(shell command -v mpicc 2>/dev/null)
endif
ifneq ($(MPICC),)
MPI_CFLAGS := -DSP_HAVE_MPI $(shell mpicc --showme:compile 2>/dev/null)
CFLAGS   += $(MPI_CFLAGS)
LDLIBS   += $(shell mpicc --showme:link 2>/dev/null)
endif

# Instruction-set variants: src/*/*_avx512.c and *_avx2.c are x86-64 only, *_neon.c aarch64
# only; each is compiled with its instruction set enabled and entered only after the run-time
# check of src/core/cpu.h picks that tier.
ifneq ($(findstring aarch64,$(TARGET_MACHINE)),)
ISA_EXCLUDE := %_avx512.c %_avx2.c
else
ISA_EXCLUDE := %_neon.c
endif
ISA_AVX512 := -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16
ISA_AVX2   := -mavx2 -mfma -mf16c -mno-avx512f
ISA_NEON   := -march=armv8.2-a+dotprod+fp16

LIB_SRC  := $(sort $(filter-out src/cli/% $(ISA_EXCLUDE),$(wildcard src/*/*.c)))
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
HEADERS  := $(wildcard include/*.h src/*/*.h)
TEST_HEADERS := $(wildcard tests/*.h)

.PHONY: install check-install all deps deps-test test test-fast test-avx2 test-aarch64 run asan clang bench bench-peer bench-dflash bench-kernels bench-train clean \
        fuzz-build fuzz-bins fuzz fuzz-ci valgrind
all: $(BUILD)/libspecula.a $(BUILD)/libspecula.so $(BUILD)/specula $(TEST_BIN)

deps:
	@sh tools/deps.sh

deps-test:
	@sh tools/deps.sh --test

$(BUILD)/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%_avx512.o: %_avx512.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ISA_AVX512) -c $< -o $@

$(BUILD)/%_avx2.o: %_avx2.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ISA_AVX2) -c $< -o $@

$(BUILD)/%_neon.o: %_neon.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ISA_NEON) -c $< -o $@

$(BUILD)/libspecula.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The shared library exports exactly the functions of the public header (tools/public-symbols.sh).
$(BUILD)/libspecula.map: include/specula.h tools/public-symbols.sh
	@mkdir -p $(dir $@)
	sh tools/public-symbols.sh include/specula.h > $@

# It is libspecula.so.MAJOR.MINOR.PATCH with the SONAME libspecula.so.MAJOR and the two links
# libspecula.so.MAJOR and libspecula.so; it links no MPI (the one-rank dist.o of nompi/).
SO_MAJOR := $(firstword $(subst ., ,$(VERSION)))
SO_FULL  := libspecula.so.$(VERSION)
SO_NAME  := libspecula.so.$(SO_MAJOR)
SO_OBJ   := $(filter-out $(BUILD)/src/train/dist.o,$(LIB_OBJ)) $(BUILD)/nompi/dist.o

$(BUILD)/nompi/dist.o: src/train/dist.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(filter-out $(MPI_CFLAGS),$(CFLAGS)) -c $< -o $@

$(BUILD)/$(SO_FULL): $(SO_OBJ) $(BUILD)/libspecula.map
	$(CC) -shared -Wl,-soname,$(SO_NAME) -Wl,--version-script=$(BUILD)/libspecula.map -o $@ $(SO_OBJ) $(LDFLAGS) $(LIB_LDLIBS)

# The installed static library: the same objects, no MPI either.
$(BUILD)/nompi/libspecula.a: $(SO_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libspecula.so: $(BUILD)/$(SO_FULL)
	ln -sf $(SO_FULL) $(BUILD)/$(SO_NAME)
	ln -sf $(SO_NAME) $@

$(BUILD)/specula: $(CLI_OBJ) $(BUILD)/libspecula.a
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libspecula.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libspecula.a $(HEADERS) $(TEST_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libspecula.a $(LDFLAGS) $(LDLIBS)

# Sanitizer build: same sources, ASan + UBSan, in build-asan/ (-O2: about a tenth faster than -O1
# under the sanitizers, which still see every access).
asan:
	$(MAKE) BUILD=build-asan OPT="-O2 $(ARCH_FLAGS) -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	        LDFLAGS="-fsanitize=address,undefined" all

# Warning check with the other compiler.
clang:
	$(MAKE) CC=clang BUILD=build-clang all

# libFuzzer targets (fuzz/fuzz_NAME.c -> build-fuzz/fuzz_NAME): the library built by clang with
# coverage, ASan and UBSan (no MPI), and each target's seeds generated by fuzz/make-seeds.sh
# from the gcc build's binary into build-fuzz/seeds/NAME/. See fuzz/README.md.
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_SRC := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_BIN := $(FUZZ_SRC:fuzz/%.c=$(BUILD)/%)
FUZZ_CLI_OBJ := $(filter-out $(BUILD)/src/cli/main.o,$(CLI_OBJ))

fuzz-build:
	$(MAKE) all
	$(MAKE) CC=clang BUILD=build-fuzz NO_MPI=1 OPT="-O1 -g -march=native $(FUZZ_SAN) -fsanitize=fuzzer-no-link" fuzz-bins
	sh fuzz/make-seeds.sh build build-fuzz/seeds

fuzz-bins: $(FUZZ_BIN)

$(BUILD)/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz.h $(BUILD)/libspecula.a $(FUZZ_CLI_OBJ) $(HEADERS)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_CLI_OBJ) $(BUILD)/libspecula.a $(LDFLAGS) $(LDLIBS)

# make fuzz T=NAME S=SECONDS: one target on its seeds (new inputs kept in build-fuzz/corpus/NAME,
# a finding written to build-fuzz/findings/); exits non-zero on any finding.
fuzz:
	@test -n "$(T)" || { echo "usage: make fuzz T=NAME S=SECONDS (NAME: $(FUZZ_SRC:fuzz/fuzz_%.c=%))"; exit 2; }
	sh fuzz/run.sh $(T) $(or $(S),60)

# CI: every target for FUZZ_S seconds each (default 10), JOBS targets at once (each is one process)
fuzz-ci: fuzz-build
	FUZZ_JOBS=$(JOBS) sh fuzz/run.sh all $(or $(FUZZ_S),10)

# valgrind memcheck of a short plain and speculative generate (tools/valgrind-check.sh), on a
# build without -march=native: valgrind does not decode AVX-512
valgrind:
	$(MAKE) BUILD=build-valgrind OPT="-O1 -g" EXTRA_CFLAGS=-Wno-psabi NO_MPI=1 build-valgrind/specula
	sh tools/valgrind-check.sh build-valgrind/specula

# README command 2: install, build (gcc, clang, sanitizers) and run every test (LeakSanitizer on
# in the ASan build), then the SIMD checks (the kernel and identity tests on the AVX2 path and
# on aarch64 under qemu), valgrind on generate and the bounded fuzz run of every parser.
test: deps-test
	$(MAKE) -j$(JOBS) all
	$(MAKE) -j$(JOBS) clang
	$(MAKE) -j$(JOBS) asan
	sh tests/run.sh build build-asan
	$(MAKE) -j$(JOBS) test-avx2
	$(MAKE) -j$(JOBS) test-aarch64
	$(MAKE) -j$(JOBS) valgrind
	$(MAKE) -j$(JOBS) fuzz-ci

# The kernel, model and speculative-identity tests with the tier capped at AVX2 (on a machine
# without AVX2 they run the scalar path).
SIMD_TESTS := test_kernels test_simd test_bf16dot test_quant test_matmul_multi test_model test_spec test_generate test_dflash test_assistant
# On a processor without AVX-512 the main run already took the AVX2 path: this one is skipped.
test-avx2: all
	@if grep -qw avx512bw /proc/cpuinfo 2>/dev/null && grep -qw avx512vl /proc/cpuinfo && grep -qw avx512dq /proc/cpuinfo; then \
	    SPECULA_CPU=avx2 sh tests/run.sh build $(SIMD_TESTS); \
	else echo "test-avx2: this processor has no AVX-512: the main test run took the AVX2 path (or a lower one) already"; fi

# aarch64: cross-compiled with Debian's gcc-aarch64-linux-gnu into build-aarch64/ (NEON tier)
# and run under qemu-user (the arm64 libraries come from the arm64 packages tools/deps.sh
# installs). test_spec is left out: its identity cases take minutes emulated (add it with
# AARCH64_TESTS+=test_spec; SPECULA_TESTS_test_spec below keeps it to those cases).
AARCH64_TESTS := test_kernels test_simd test_bf16dot test_quant test_matmul_multi test_model test_generate
AARCH64_CC    ?= aarch64-linux-gnu-gcc
QEMU_AARCH64  ?= qemu-aarch64-static
test-aarch64:
	$(MAKE) CC=$(AARCH64_CC) BUILD=build-aarch64 NO_MPI=1 $(AARCH64_TESTS:%=build-aarch64/tests/%)
	SPECULA_TEST_EXEC=$(QEMU_AARCH64) SPECULA_TESTS_test_spec=test_greedy_identity,test_eos_in_block \
	    sh tests/run.sh --exec $(QEMU_AARCH64) build-aarch64 $(AARCH64_TESTS)

# `make install PREFIX=DIR`: the library (static and shared, neither linking MPI; the shared one
# versioned with its links), the public header, the `specula`
# binary, specula.pc for pkg-config and the embedded default model (PREFIX/share/specula/default,
# where `specula run` finds it).
PREFIX  ?= /usr/local
install: $(BUILD)/nompi/libspecula.a $(BUILD)/libspecula.so $(BUILD)/specula
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin \
	           $(DESTDIR)$(PREFIX)/share/specula
	install -m 644 $(BUILD)/nompi/libspecula.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/$(SO_FULL) $(DESTDIR)$(PREFIX)/lib/
	ln -sf $(SO_FULL) $(DESTDIR)$(PREFIX)/lib/$(SO_NAME)
	ln -sf $(SO_NAME) $(DESTDIR)$(PREFIX)/lib/libspecula.so
	install -m 644 include/specula.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(BUILD)/specula $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' tools/specula.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/specula.pc
	rm -rf $(DESTDIR)$(PREFIX)/share/specula/default
	cp -R models/default $(DESTDIR)$(PREFIX)/share/specula/default

# Installs into a scratch prefix, checks that libspecula.so exports only sp_* symbols, builds
# examples/generate.c through pkg-config against the installed library and runs it (tests/run.sh
# runs it too, as one of its shell checks).
check-install: all
	sh tests/check_install.sh $(BUILD)

test-fast: all
	sh tests/run.sh build

# README command 1: install, build and run the main job.
run: deps
	$(MAKE) -j$(JOBS) all
	sh tools/run-default.sh

clean:
	rm -rf build build-asan build-clang build-fuzz build-valgrind build-aarch64

# The embedded pair's benchmark report (JSON + plots in build/bench/).
bench: all
	sh tools/bench-default.sh

# specula against llama.cpp on the same GGUF files: tables for docs/BENCHMARKS.md and SVG plots in
# WORK (tools/bench-peer.sh). llama.cpp is never built here: LLAMA_BIN is its build/bin (without
# it the llama.cpp columns read n/a). REDUCED=1: the tiny model and a few tokens (what CI runs).
#   make bench-peer LLAMA_BIN=~/peer/llama.cpp/build/bin [ROUNDS=3 THREADS="1 2" WORK=dir REDUCED=1]
bench-peer: $(BUILD)/specula
	ROUNDS="$(or $(ROUNDS),3)" THREADS="$(or $(THREADS),1 2)" REDUCED="$(or $(REDUCED),0)" SPECULA=$(BUILD)/specula \
	    sh tools/bench-peer.sh "$(or $(WORK),$(BUILD)/bench-peer)" $(LLAMA_BIN)

# DFlash/DSpark draft-block cost vs a target decode step: make bench-dflash T=DIR D=DIR
$(BUILD)/bench_dflash: bench/bench_dflash.c $(BUILD)/libspecula.a $(HEADERS)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libspecula.a $(LDFLAGS) $(LDLIBS)

bench-dflash: $(BUILD)/bench_dflash
	$(BUILD)/bench_dflash $(or $(T),models/default/target) $(or $(D),models/default/drafter)

# Kernel micro-benchmark (sp_matmul vs OpenBLAS); links -lopenblas for this target only.
$(BUILD)/bench_kernels: bench/bench_kernels.c $(BUILD)/libspecula.a $(HEADERS)
	$(CC) $(CFLAGS) -I/usr/include/x86_64-linux-gnu/openblas-pthread -o $@ $< $(BUILD)/libspecula.a $(LDFLAGS) $(LDLIBS) -lopenblas

bench-kernels: $(BUILD)/bench_kernels
	$(BUILD)/bench_kernels

# Drafter-training GEMMs vs the measured GEMM peak (OpenBLAS); links -lopenblas for this target only.
$(BUILD)/bench_train: bench/bench_train.c $(BUILD)/libspecula.a $(HEADERS)
	$(CC) $(CFLAGS) -I/usr/include/x86_64-linux-gnu/openblas-pthread -o $@ $< $(BUILD)/libspecula.a $(LDFLAGS) $(LDLIBS) -lopenblas

bench-train: $(BUILD)/bench_train
	$(BUILD)/bench_train
