# k25bench - the one build.
#
#   make            build build/k25 and build/libk25.a (CPU backend)
#   make test       install deps, build, run every CMocka test executable, then the
#                   pipeline (ci/pipeline.sh): ci-smoke sweep, report, gate vs the stored baseline,
#                   the CI timing gate (ci/timing-gate.sh: the baseline commit built from
#                   source, measured beside the candidate, interleaved) and the instruction
#                   gate (ci/instr-gate.sh: both under callgrind, > 3% more instructions fails)
#   make test-quick the unit tests only (no integration tests)
#   make layering-check  the include paths refuse upward and internal includes
#                   (ci/layering-check.sh; README.md "Source layout"); part of test, test-quick
#   make demo       install deps, build, run the demo (k25 run, bench, then the ci-smoke
#                   sweep + report + gate; prints where the report is and the best setting)
#   make baselines  re-measure baselines/results/ci-smoke, the gate's stored baseline
#   make bench-decode  batch-1 decode and prefill of `small`: k25 against the single-file
#                   reference decoder (bench/ref_decoder.c), interleaved (ci/bench-decode.sh)
#   make instr-gate the instruction-count gate alone (ci/instr-gate.sh; docs/gates.md)
#   make gate-ab    interleaved A/B timing gate (ci/timing-gate.sh): GATE_A=old/k25
#                   GATE_B=build/k25 (default: A = B, the noise floor); ROUNDS=N MAX_ROUNDS=M
#   make asan       AddressSanitizer + UBSan build of the tests, then run them
#   make fuzz       libFuzzer targets (tests/fuzz/, clang) in build-fuzz/fuzz/; make fuzz-smoke
#                   runs each FUZZ_SECONDS (30) on seeds from the shipped files
#   make CUDA=1     also the CUDA backend (engine/cuda/: .cu kernels through nvcc for sm_80 and
#                   sm_90 + PTX, host warnings and nvcc warnings as errors; links cudart, cuBLASLt,
#                   cuBLAS, cuDNN from CUDA_HOME, default /usr/local/cuda).  Without it nothing
#                   CUDA is compiled or linked.
#   make cuda-check compile-only check of every .cu for sm_80 and sm_90 with ptxas -v: no
#                   warnings, no register spills (ci/cuda-check.sh; skipped without nvcc)
#   make PORTABLE=1 no -march=native (a binary for other x86-64 machines)
#   make install    PREFIX=/usr/local: k25, its report templates and the k25-benchmark,
#                   k25-mem-calculator, k25-log-analyzer, k25-checksum aliases
#
# Dependencies (Debian packages) come from ci/install-deps.sh, which
# `make test`, `make demo` and `make asan` call first.

CC       ?= gcc
ifeq ($(CUDA),1)
BUILD    ?= build-cuda
else
BUILD    ?= build
endif
ifeq ($(PORTABLE),1)
OPT      ?= -O3
else
OPT      ?= -O3 -march=native
endif
SAN      ?=
PKGS     := openblas yaml-0.1 jansson hdf5 libcrypto libmicrohttpd libcurl libpcre2-8 libutf8proc
# Recursively expanded so pkg-config runs only when a recipe needs it
# (after install-deps has run).
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS))
PKG_LIBS   = $(shell pkg-config --libs $(PKGS))

# Source layout (README.md, "Source layout"): one library per folder, bottom to top
#   util -> engine/cpu (+ the baseline kernels) -> engine -> datasets -> harness -> sweeps
#        -> reports -> gates -> cli
# Each folder compiles with its own directory on the include path plus the public-header
# directories of the folders below it, $(BUILD)/include/FOLDER/, which hold symbolic links
# to those folders' public headers only (PUB_*).  So an upward include, or an include of
# another folder's internal header, is a compile error ("No such file or directory");
# `make layering-check` proves it for every pair.  tests/ and tests/fuzz/ see every folder
# (they test internals).
#
# engine/cpu/ (the CPU backend: its kernels, KV storage and compaction) implements the
# backend interface that engine/ defines: it sees engine's backend-facing headers
# (PUB_enginebe: backend.h, kvcache.h and what they include) and nothing else of engine/;
# engine/ sees engine/cpu/k25_cpu.h only.  The backends alone are compiled with
# K25_BACKEND_IMPL, which makes struct k25_buf complete (backend.h): anywhere else
# `buf->data` does not compile.
LAYERS         := util cpu engine datasets harness sweeps reports gates cli
SRCDIRS_util     := util
SRCDIRS_cpu      := engine/cpu
SRCDIRS_engine   := engine
ifeq ($(CUDA),1)
SRCDIRS_engine   += engine/cuda
endif
SRCDIRS_datasets := datasets
SRCDIRS_harness  := harness
SRCDIRS_sweeps   := sweeps
SRCDIRS_reports  := reports
SRCDIRS_gates    := gates
SRCDIRS_cli      := cli
PUB_util       := util/k25util.h
PUB_cpu        := engine/cpu/k25_cpu.h
PUB_engine     := engine/k25.h engine/k25_attn.h engine/k25_tok.h
PUB_enginebe   := engine/k25.h engine/k25_attn.h engine/internal.h engine/backend.h engine/kvcache.h \
                  engine/prefix.h
PUB_datasets   := datasets/gold.h
PUB_harness    := harness/harness.h
PUB_sweeps     := sweeps/sweep.h
PUB_reports    := reports/report.h
PUB_gates      := gates/gate.h
PUB_cli        := cli/cli.h
BELOW_util     :=
BELOW_cpu      := util enginebe
BELOW_engine   := util cpu
BELOW_datasets := util engine
BELOW_harness  := $(BELOW_datasets) datasets
BELOW_sweeps   := $(BELOW_harness) harness
BELOW_reports  := $(BELOW_sweeps) sweeps
BELOW_gates    := $(BELOW_reports) reports
BELOW_cli      := $(BELOW_gates) gates
PUBSETS        := $(LAYERS) enginebe
PUBDIR         := $(BUILD)/include
GENDIR         := $(BUILD)/gen
# A folder's include flags: its own source directories, then the public headers below it.
layer_inc       = $(SRCDIRS_$(1):%=-I%) $(BELOW_$(1):%=-I$(PUBDIR)/%) -I$(GENDIR)
ALL_SRCDIRS    := $(foreach L,$(LAYERS),$(SRCDIRS_$(L)))
ALL_INC        := $(ALL_SRCDIRS:%=-I%) -I$(GENDIR)

# LAYER_INC is set per object below (pattern-specific); tests use ALL_INC.
CFLAGS_BASE = -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -fopenmp $(OPT) $(SAN) -g \
              -MMD -MP $(PKG_CFLAGS) $(CUDA_CFLAGS) $(CFLAGS)
CFLAGS_ALL  = $(CFLAGS_BASE) $(ALL_INC)
LDLIBS_ALL = $(SAN) -fopenmp $(PKG_LIBS) $(CUDA_LIBS) -lm -lpthread $(LDLIBS)

# One static library per folder, linked top to bottom.  engine/ and engine/cpu/ call each
# other (the registry names the CPU backend; the CPU backend charges the engine's memory
# accounting and reads its block tables), so the two are linked as a group.
LIBNAME_util     := libk25util.a
LIBNAME_cpu      := libk25cpu.a
LIBNAME_engine   := libk25.a
LIBNAME_datasets := libk25datasets.a
LIBNAME_harness  := libk25harness.a
LIBNAME_sweeps   := libk25sweeps.a
LIBNAME_reports  := libk25reports.a
LIBNAME_gates    := libk25gates.a
LIBNAME_cli      := libk25cli.a
CLI_MAIN       := cli/main.c
$(foreach L,$(LAYERS),$(eval SRC_$(L) := $(filter-out $(CLI_MAIN),$(foreach D,$(SRCDIRS_$(L)),$(wildcard $(D)/*.c)))))
$(foreach L,$(LAYERS),$(eval OBJ_$(L) := $(SRC_$(L):%.c=$(BUILD)/obj/%.o)))

# The CUDA backend (make CUDA=1): engine/cuda/*.cu through nvcc into libk25.a, the host side
# (engine/cuda/*.c) through $(CC) with the CUDA headers; K25_WITH_CUDA registers it
# (engine/backend.c, the one #ifdef).  Real code for sm_80 (A100) and sm_90 (H100), PTX of
# sm_90 for newer GPUs.
CUDA_HOME   ?= /usr/local/cuda
NVCC        ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCH   ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
               -gencode arch=compute_90,code=compute_90
NVCC_WARN   := -Xcompiler -Wall,-Wextra,-Werror -Werror all-warnings
NVCCFLAGS   ?= -std=c++17 -O3 -lineinfo $(NVCC_WARN) -Iengine/cuda
CU_SRC      := $(wildcard engine/cuda/*.cu)
ifeq ($(CUDA),1)
CU_OBJ      := $(CU_SRC:%.cu=$(BUILD)/obj/%.cu.o)
OBJ_engine  += $(CU_OBJ)
CUDA_CFLAGS := -DK25_WITH_CUDA -isystem $(CUDA_HOME)/include
CUDA_LIBS   := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudnn -lcublasLt -lcublas -lcudart \
               -lstdc++ -ldl
endif
$(foreach L,$(LAYERS),$(eval LIB_$(L) := $(BUILD)/$(LIBNAME_$(L))))
$(foreach L,$(LAYERS),$(foreach D,$(SRCDIRS_$(L)),$(eval $(BUILD)/obj/$(D)/%.o: LAYER_INC = $(call layer_inc,$(L)))))
# The backends (and only they) see struct k25_buf's fields.
$(BUILD)/obj/engine/cpu/%.o: LAYER_INC += -DK25_BACKEND_IMPL
$(BUILD)/obj/engine/cuda/%.o: LAYER_INC += -DK25_BACKEND_IMPL
LIBS_TOPDOWN   := $(foreach L,cli gates reports sweeps harness datasets engine cpu util,$(LIB_$(L)))
# The link line: engine and cpu as a group (they call each other).
LIBS_LINK      := $(foreach L,cli gates reports sweeps harness datasets,$(LIB_$(L))) \
                  -Wl,--start-group $(LIB_engine) $(LIB_cpu) -Wl,--end-group $(LIB_util)
MAIN_OBJ       := $(BUILD)/obj/cli/main.o
TEST_SRC    := $(wildcard tests/test_*.c)
TEST_BIN    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

K25         := $(BUILD)/k25

.PHONY: all deps test test-quick demo asan clean tests-bin baselines gate-ab instr-gate layering-check cuda-check
all: $(K25)

$(BUILD)/obj/engine/cuda/%.cu.o: engine/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(CUDA_ARCH) -MMD -MP -c $< -o $@

# Compile-only check of every .cu (CI, where nvcc is installed): ci/cuda-check.sh.
cuda-check:
	@NVCC="$(NVCC)" NVCCFLAGS="$(NVCCFLAGS)" ./ci/cuda-check.sh $(CU_SRC)

deps:
	@./ci/install-deps.sh

# Build info recorded in every result's provenance; rewritten only when it changes.
$(GENDIR)/buildinfo.h: FORCE
	@mkdir -p $(GENDIR)
	@{ echo '#define K25_BUILD_CC "$(shell $(CC) --version | head -n1)"'; \
	   echo '#define K25_BUILD_CFLAGS "$(strip $(OPT) $(SAN) $(CFLAGS))"'; \
	   echo '#define K25_BUILD_GIT "$(shell git describe --always --dirty 2>/dev/null || echo unknown)"'; \
	 } > $@.tmp; cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@
FORCE:

# The public-header directories: rebuilt from PUB_* whenever the Makefile changes.
$(PUBDIR)/.stamp: Makefile
	@rm -rf $(PUBDIR)
	@$(foreach L,$(PUBSETS),mkdir -p $(PUBDIR)/$(L) && \
	   $(foreach H,$(PUB_$(L)),ln -s $(abspath $(H)) $(PUBDIR)/$(L)/ &&)) touch $@

$(BUILD)/obj/%.o: %.c | $(GENDIR)/buildinfo.h $(PUBDIR)/.stamp
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(LAYER_INC) -c $< -o $@

# make layering-check: proves the include paths above enforce the layout
# (ci/layering-check.sh: every folder against every other folder's headers); part of
# make test and make test-quick.
layering-check: $(PUBDIR)/.stamp $(GENDIR)/buildinfo.h
	@mkdir -p $(BUILD)/layering
	@: > $(BUILD)/layering/spec.txt
	@$(foreach L,$(LAYERS),echo '$(L)|$(SRCDIRS_$(L))|$(call layer_inc,$(L))|$(foreach B,$(BELOW_$(L)),$(PUB_$(B)))' \
	   >> $(BUILD)/layering/spec.txt;)
	@CC="$(CC)" CPPFLAGS_BASE="-std=c11 -D_GNU_SOURCE -fopenmp $(PKG_CFLAGS)" \
	   ./ci/layering-check.sh $(BUILD)/layering/spec.txt $(ALL_SRCDIRS)

$(foreach L,$(LAYERS),$(eval $(LIB_$(L)): $(OBJ_$(L))))
$(LIBS_TOPDOWN):
	@rm -f $@
	ar rcs $@ $^

$(K25): $(MAIN_OBJ) $(LIBS_TOPDOWN)
	$(CC) -o $@ $(MAIN_OBJ) $(LIBS_LINK) $(LDLIBS_ALL)

$(BUILD)/tests/%: tests/%.c $(LIBS_TOPDOWN) $(wildcard tests/*.h) | $(GENDIR)/buildinfo.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests -Iengine/cuda -o $@ $< $(LIBS_LINK) $(LDLIBS_ALL) -lcmocka

# TEST-ONLY: k25 with extra work linked in (2 of 3 GEMMs twice, tests/extra_work.c), the
# "slower commit" of the timing-gate proof in tests/test_gate.c
$(BUILD)/tests/k25-extra-work: $(MAIN_OBJ) $(LIBS_TOPDOWN) tests/extra_work.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ tests/extra_work.c $(MAIN_OBJ) $(LIBS_LINK) \
	   -Wl,--wrap=cblas_sgemm $(LDLIBS_ALL)

tests-bin: $(K25) $(TEST_BIN) $(BUILD)/tests/k25-extra-work

test: deps
	@$(MAKE) --no-print-directory -j$$(nproc) tests-bin
	@$(MAKE) --no-print-directory layering-check
	@K25=$(K25) ./ci/run-tests.sh $(TEST_BIN)
	@K25=$(K25) ./ci/pipeline.sh test

test-quick: deps
	@$(MAKE) --no-print-directory -j$$(nproc) tests-bin
	@$(MAKE) --no-print-directory layering-check
	@K25=$(K25) K25_QUICK=1 ./ci/run-tests.sh $(TEST_BIN)

asan: deps
	@$(MAKE) --no-print-directory BUILD=build-asan OPT="-O1" \
	   SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" tests-bin
	@K25=build-asan/k25 K25_QUICK=1 ASAN_OPTIONS=detect_leaks=1 ./ci/run-tests.sh $(patsubst $(BUILD)/%,build-asan/%,$(TEST_BIN))

demo: deps
	@$(MAKE) --no-print-directory -j$$(nproc) all
	@K25=$(K25) ./ci/demo.sh

baselines: deps
	@$(MAKE) --no-print-directory -j$$(nproc) all
	@K25=$(K25) ./ci/baselines.sh

# Interleaved A/B timing gate of two binaries on this machine (ci/timing-gate.sh, its
# workload and policy): GATE_A = baseline binary (default: build/k25, i.e. A against A,
# the noise floor), GATE_B = candidate; ROUNDS=N, MAX_ROUNDS=M.
GATE_A        ?= $(K25)
GATE_B        ?= $(K25)
gate-ab: deps
	@$(MAKE) --no-print-directory -j$$(nproc) all
	K25_BASE_BIN=$(GATE_A) K25=$(GATE_B) K25_TIMING_OUT=results/gate-ab ./ci/timing-gate.sh

# The instruction-count gate (ci/instr-gate.sh, docs/gates.md): the baseline commit built from
# source (cached, shared with the timing gate) and build/k25 run a fixed tiny workload under
# valgrind --tool=callgrind; a figure needing > 3% more instructions fails.  make test runs it
# from ci/pipeline.sh.
instr-gate: deps
	@$(MAKE) --no-print-directory -j$$(nproc) all
	K25=$(K25) ./ci/instr-gate.sh

# The single-file reference decoder (bench/ref_decoder.c: llama2.c-style, fp32, OpenMP, no
# BLAS, no libk25), built on its own; make bench-decode measures k25's batch-1 decode and prefill
# against it on `small`, interleaved (ci/bench-decode.sh; BENCH_ARGS="--rounds 5 -- --kv-cache-dtype
# fp16" passes options).  tests/test_refdecoder.c runs it beside k25.
REF_DECODER   := $(BUILD)/ref_decoder
BENCH_ARGS    ?=
.PHONY: bench-decode
$(REF_DECODER): bench/ref_decoder.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -fopenmp $(OPT) $(SAN) -g -o $@ $< -lm

$(BUILD)/tests/test_refdecoder: $(REF_DECODER)

bench-decode: deps
	@$(MAKE) --no-print-directory -j$$(nproc) all $(REF_DECODER)
	K25=$(K25) K25_REF_DECODER=$(REF_DECODER) ./ci/bench-decode.sh $(BENCH_ARGS)

# libFuzzer targets (tests/fuzz/fuzz_*.c, tests/fuzz/README.md) built with clang
# -fsanitize=fuzzer,address,undefined into build-fuzz/fuzz/; fuzz-smoke runs each for
# FUZZ_SECONDS on seed corpora made from the shipped files (FUZZ_TARGETS="trace gold"
# picks some).  Needs clang (K25_FUZZ_DEPS=1 ci/install-deps.sh): not part of make test.
FUZZ_CC       ?= clang
FUZZ_BUILD    ?= build-fuzz
FUZZ_SECONDS  ?= 30
FUZZ_TARGETS  ?=
FUZZ_NAMES    := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
.PHONY: fuzz fuzz-bins fuzz-smoke
fuzz:
	@K25_FUZZ_DEPS=1 ./ci/install-deps.sh
	@$(MAKE) --no-print-directory -j$$(nproc) BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) OPT="-O1" \
	   SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	   CFLAGS="-fsanitize=fuzzer-no-link -Wno-pass-failed" fuzz-bins

fuzz-bins: $(FUZZ_NAMES:%=$(BUILD)/fuzz/%)

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_util.h $(LIBS_TOPDOWN) | $(GENDIR)/buildinfo.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests/fuzz -fsanitize=fuzzer -o $@ $< $(LIBS_LINK) $(LDLIBS_ALL)

fuzz-smoke: fuzz
	@./tests/fuzz/smoke.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# make install PREFIX=/opt/k25 (default /usr/local; DESTDIR for staging): bin/k25, the report
# templates where k25 report looks for them (share/k25/templates, next to bin/), and the
# aliases that dispatch on argv[0] (cli/main.c): k25-benchmark, k25-mem-calculator,
# k25-log-analyzer, k25-checksum, each a symbolic link to k25.
PREFIX        ?= /usr/local
K25_ALIASES   := k25-benchmark k25-mem-calculator k25-log-analyzer k25-checksum
.PHONY: install
install: $(K25)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/k25/templates
	install -m 755 $(K25) $(DESTDIR)$(PREFIX)/bin/k25
	install -m 644 reports/templates/*.gp $(DESTDIR)$(PREFIX)/share/k25/templates/
	for a in $(K25_ALIASES); do ln -sf k25 $(DESTDIR)$(PREFIX)/bin/$$a; done

clean:
	rm -rf build build-asan build-cuda build-instr

-include $(shell find $(BUILD)/obj $(BUILD)/tests -name '*.d' 2>/dev/null)
