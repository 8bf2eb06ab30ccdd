# specula — build: `make` (library, CLI, tests), `make test`, `make run`, `make asan`.
# Every .c under src/ (except src/cli/) goes into libspecula; src/cli/ is the `specula`
# binary; each tests/test_*.c is one test program. New files need no Makefile edit.

CC       ?= cc
BUILD    ?= build
OPT      ?= -O3 -march=native -fno-math-errno
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-parameter \
               -fPIC -pthread -g -Iinclude -Isrc $(shell pkg-config --cflags jansson libpcre2-8 libutf8proc libmicrohttpd 2>/dev/null)
CFLAGS   += $(CFLAGS_BASE) $(OPT) $(EXTRA_CFLAGS)
LDLIBS   += $(shell pkg-config --libs jansson libpcre2-8 libutf8proc libmicrohttpd 2>/dev/null || echo -ljansson -lpcre2-8 -lutf8proc -lmicrohttpd) -lm -pthread

# MPI (optional): with `mpicc` present, src/train/dist.c is built with SP_HAVE_MPI and everything
# links Open MPI (`mpirun -np N specula train|regen`). NO_MPI=1 builds without it.
ifeq ($(NO_MPI),)
MPICC    := $(shell command -v mpicc 2>/dev/null)
endif
ifneq ($(MPICC),)
CFLAGS   += -DSP_HAVE_MPI $(shell mpicc --showme:compile 2>/dev/null)
LDLIBS   += $(shell mpicc --showme:link 2>/dev/null)
endif

# Instruction-set variants: src/*/*_avx512.c and *_avx2.c are x86-64 only, *_neon.c aarch64
# only; each is compiled with its instruction set enabled and entered only after the run-time
# check of src/core/cpu.h picks that tier.
TARGET_MACHINE := $(shell $(CC) -dumpmachine 2>/dev/null)
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

.PHONY: install check-install all deps test test-fast run asan clang bench bench-dflash bench-kernels bench-train clean
all: $(BUILD)/libspecula.a $(BUILD)/libspecula.so $(BUILD)/specula $(TEST_BIN)

deps:
	@sh tools/deps.sh

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

$(BUILD)/libspecula.so: $(LIB_OBJ) $(BUILD)/libspecula.map
	$(CC) -shared -Wl,--version-script=$(BUILD)/libspecula.map -o $@ $(LIB_OBJ) $(LDFLAGS) $(LDLIBS)

$(BUILD)/specula: $(CLI_OBJ) $(BUILD)/libspecula.a
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libspecula.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libspecula.a $(HEADERS) $(TEST_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libspecula.a $(LDFLAGS) $(LDLIBS)

# Sanitizer build: same sources, ASan + UBSan, in build-asan/.
asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -march=native -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	        LDFLAGS="-fsanitize=address,undefined" all

# Warning check with the other compiler.
clang:
	$(MAKE) CC=clang BUILD=build-clang all

# README command 2: install, build (gcc, clang, sanitizers) and run every test.
test: deps
	$(MAKE) all
	$(MAKE) clang
	$(MAKE) asan
	sh tests/run.sh build build-asan

# `make install PREFIX=DIR`: the library (static and shared), the public header, the `specula`
# binary, specula.pc for pkg-config and the embedded default model (PREFIX/share/specula/default,
# where `specula run` finds it).
PREFIX  ?= /usr/local
VERSION := $(shell sed -n 's/^\#define SPECULA_VERSION "\([^"]*\)".*/\1/p' include/specula.h)
install: $(BUILD)/libspecula.a $(BUILD)/libspecula.so $(BUILD)/specula
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin \
	           $(DESTDIR)$(PREFIX)/share/specula
	install -m 644 $(BUILD)/libspecula.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libspecula.so $(DESTDIR)$(PREFIX)/lib/
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
	$(MAKE) all
	sh tools/run-default.sh

clean:
	rm -rf build build-asan build-clang

# The embedded pair's benchmark report (JSON + plots in build/bench/).
bench: all
	sh tools/bench-default.sh

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
