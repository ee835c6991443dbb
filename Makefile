# ddprt — plain make. CPU-only unless nvcc / libibverbs are found (later issues).
# Variants: make (build/), make test, make asan, make ubsan, make tsan, make fuzz.
BUILD   ?= build
CC      ?= cc
OPT     ?= -O2
SAN     ?=
CFLAGS  := -std=c11 -Wall -Wextra -Werror $(OPT) -g -D_GNU_SOURCE -pthread -I. -MMD -MP $(SAN) $(EXTRA_CFLAGS)
LDFLAGS := -pthread $(SAN)
LDLIBS  := -lz -lm

# Every folder apps/NAME is one program, $(BUILD)/ddprt-NAME, made of its .c files and the
# library; the library (libddprt.a) holds no program code.
APPS     := $(patsubst apps/%/,%,$(wildcard apps/*/))
LIB_SRC  := $(wildcard rt/*.c transport/*.c nn/*.c nn/*/*.c kernels/cpu/*.c ports/posix/*.c ports/nocuda/*.c)
TEST_SRC := $(wildcard test/*.c)
# test/progs/foo.c -> $(BUILD)/t-foo: helper processes that multi-process tests start.
TPROG_SRC:= $(wildcard test/progs/*.c)
# RDMA verbs backend when the libibverbs headers exist; VERBS=0 builds the stub
# (transport/tp_noverbs.c) instead.
VERBS    ?= $(if $(wildcard /usr/include/infiniband/verbs.h),1,0)
ifeq ($(VERBS),1)
LIB_SRC  := $(filter-out transport/tp_noverbs.c,$(LIB_SRC))
LDLIBS   += -libverbs
else
LIB_SRC  := $(filter-out transport/tp_verbs%.c,$(LIB_SRC))
endif

# Image decoding (nn/data/image.c) when the headers exist; JPEG=0 / PNG=0 opt out.
JPEG     ?= $(if $(wildcard /usr/include/jpeglib.h),1,0)
PNG      ?= $(if $(wildcard /usr/include/png.h),1,0)
CFLAGS   += -DDDPRT_JPEG=$(JPEG) -DDDPRT_PNG=$(PNG)
LDLIBS   += $(if $(filter 1,$(JPEG)),-ljpeg) $(if $(filter 1,$(PNG)),-lpng16)

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
# One set of library objects makes both libddprt.a and libddprt.so: position-independent
# (PIE objects' TLS cannot go into a shared library) with hidden symbols, so the .so
# exports the C API of include/ddprt.h (DDPRT_API) and nothing else.
$(LIB_OBJ): CFLAGS += -fPIC -fvisibility=hidden
# A build folder from before that rebuilds its library objects once (the stamp is new).
$(LIB_OBJ): $(BUILD)/obj/.pic
$(BUILD)/obj/.pic:
	@mkdir -p $(dir $@) && touch $@
VERSION  := $(shell sed -n 's/^\#define DDPRT_VERSION "\(.*\)"/\1/p' rt/version.h)
SONAME   := libddprt.so.$(firstword $(subst ., ,$(VERSION)))
# The cost model of ddprt-bench --predict is tested too.
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/apps/bench/bench_predict.o
PROGS    := $(APPS:%=$(BUILD)/ddprt-%)
# apps/bench-kernels/k_cuda_bench.c times the CUDA kernels: CUDA builds only.
APP_SRC   = $(filter-out $(if $(filter 1,$(CUDA_ON)),,apps/bench-kernels/k_cuda_bench.c),$(wildcard apps/$(1)/*.c))
TPROGS   := $(foreach p,$(TPROG_SRC),$(BUILD)/t-$(basename $(notdir $(p))))

# CUDA port (ports/cuda, kernels/cuda): CUDA=auto (default) builds it when nvcc is on
# PATH or in /usr/local/cuda/bin, CUDA=1 insists, CUDA=0 opts out. Off, ports/nocuda
# answers --device cuda with a clear error; the CPU build never needs the toolkit.
CUDA     ?= auto
.DEFAULT_GOAL := all
NVCC     ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
CUDA_ON  := $(if $(filter auto,$(CUDA)),$(if $(NVCC),1,0),$(CUDA))
ifeq ($(CUDA_ON),1)
ifeq ($(NVCC),)
$(error CUDA=1 but nvcc was not found on PATH or in /usr/local/cuda/bin (install the CUDA Toolkit, or build with CUDA=0))
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(realpath $(NVCC)))
# A100 (sm_80), H100/H200 (sm_90), and sm_90 PTX for newer GPUs to JIT.
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
NVFLAGS  := -std=c++17 -O3 -I. -DDDPRT_CUDA=1 $(CUDA_ARCH) --Werror all-warnings \
            -Xcompiler -Wall,-Wextra,-Werror,-fPIC,-fvisibility=hidden -MMD -MP $(EXTRA_NVFLAGS)
CFLAGS   += -DDDPRT_CUDA=1
# Static cudart: the programs run where only the driver is installed.
LDLIBS   += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
CU_OBJ   := $(patsubst %.cu,$(BUILD)/obj/%.o,$(wildcard kernels/cuda/*.cu ports/cuda/*.cu)) \
            $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard ports/cuda/*.c))
LIB_OBJ  := $(filter-out $(BUILD)/obj/ports/nocuda/%,$(LIB_OBJ)) $(CU_OBJ)
GPU_TEST_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard test/gpu/*.c) test/runner.c test/t_data.c)
$(BUILD)/obj/ports/cuda/%.o: CFLAGS += -I$(CUDA_HOME)/include
$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@
# Built by `make` (so `make test` proves the CUDA build compiles and links); run by
# `make test-gpu` on a machine with a GPU.
all: $(BUILD)/test-gpu-runner
$(BUILD)/test-gpu-runner: $(GPU_TEST_OBJ) $(BUILD)/libddprt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
test-gpu: all
	DDPRT_BUILD=$(BUILD) ./$(BUILD)/test-gpu-runner $(T)
else
test-gpu:
	@echo "make test-gpu needs the CUDA build: nvcc was not found (or CUDA=0)"; exit 1
endif
.PHONY: test-gpu

# The SIMT executor (ports/simt): the kernels/cuda sources compiled by the host C++
# compiler and run on the CPU thread by thread, with barrier, warp, bounds and race
# checks, under the real ports/cuda/port_cuda.c on the executor's CUDA runtime. It needs
# g++, not nvcc or a GPU: make test runs the device suite (test/gpu) and ddprt-train
# --device cuda on it. SIMT=auto (default) builds it when $(CXX) is found, SIMT=0 opts
# out, SIMT=1 insists.
SIMT     ?= auto
SIMT_ON  := $(if $(filter auto,$(SIMT)),$(if $(shell command -v $(CXX) 2>/dev/null),1,0),$(SIMT))
ifeq ($(SIMT_ON),1)
SIMT_DIR := $(BUILD)/obj-simt
# fmaf as one instruction where the CPU has FMA (glibc's software fmaf is ~5x slower).
SIMT_FMA := $(if $(shell grep -qw fma /proc/cpuinfo 2>/dev/null && echo y),-mfma)
# -ffp-contract=off: only an explicit fmaf fuses, so __fmul_rn/__fadd_rn keep their word.
SIMT_CXXFLAGS := -std=c++17 $(OPT) -g -I. -Iports/simt/include -DDDPRT_CUDA=1 -DDDPRT_SIMT=1 -Wall -Wextra \
            -Werror -Wno-unknown-pragmas -ffp-contract=off $(SIMT_FMA) -MMD -MP $(EXTRA_CXXFLAGS)
# Under TSan the executor's own code is not instrumented: its threads are TSan fibers
# ordered only by CUDA's synchronisation (ports/simt/simt_exec.cc).
SIMT_CORE_SAN := $(if $(findstring thread,$(SAN)),-DSIMT_TSAN=1,$(SAN))
# The library sources whose code depends on DDPRT_CUDA (the device halves of the ops,
# the device graph) again with it, and the real port on the executor's runtime.
SIMT_CUDA_RE := ^.if.*DDPRT_CUDA|NN_CUDA[(]
SIMT_C_SRC := $(shell grep -l -E '$(SIMT_CUDA_RE)' $(LIB_SRC)) ports/cuda/port_cuda.c
SIMT_OBJ := $(patsubst %.cu,$(SIMT_DIR)/%.o,$(wildcard kernels/cuda/*.cu)) \
            $(patsubst %.cc,$(SIMT_DIR)/%.o,$(wildcard ports/simt/*.cc)) $(patsubst %.c,$(SIMT_DIR)/%.o,$(SIMT_C_SRC))
# make test's own tests run the executor's programs when it is built.
$(BUILD)/obj/test/%.o: CFLAGS += -DDDPRT_HAVE_SIMT=1
$(SIMT_DIR)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(CXX) -x c++ $(SIMT_CXXFLAGS) $(SAN) -c $< -o $@
$(SIMT_DIR)/ports/simt/%.o: ports/simt/%.cc
	@mkdir -p $(dir $@)
	$(CXX) $(SIMT_CXXFLAGS) $(SIMT_CORE_SAN) -c $< -o $@
$(SIMT_DIR)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DDDPRT_CUDA=1 -DDDPRT_SIMT=1 -Iports/simt/include -c $< -o $@
# The device suite (test/gpu) on the executor, and ddprt-train on it (--device cuda).
SIMT_TEST_OBJ := $(patsubst %.c,$(SIMT_DIR)/%.o,$(wildcard test/gpu/*.c)) $(BUILD)/obj/test/runner.o \
                 $(BUILD)/obj/test/t_data.o
$(BUILD)/test-gpu-simt: $(SIMT_TEST_OBJ) $(SIMT_OBJ) $(BUILD)/libddprt.a
	$(CXX) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/t-train-simt: $(patsubst %.c,$(BUILD)/obj/%.o,$(call APP_SRC,train)) $(SIMT_OBJ) $(BUILD)/libddprt.a
	$(CXX) $(LDFLAGS) -o $@ $^ $(LDLIBS)
# The executor's own checks, one broken kernel each (test/simt, test/test_simt_checks.c).
$(BUILD)/t-simt-checks: $(SIMT_DIR)/test/simt/simt_checks.o $(SIMT_OBJ) $(BUILD)/libddprt.a
	$(CXX) $(LDFLAGS) -o $@ $^ $(LDLIBS)
all: $(BUILD)/test-gpu-simt $(BUILD)/t-train-simt $(BUILD)/t-simt-checks
# Bugs injected into the real kernels, each rebuilt and run on the executor: the table
# of what reported each (test/simt/inject_bugs.sh). make asan/tsan-style: SAN=...
simt-inject: $(BUILD)/test-gpu-simt $(BUILD)/ddprt-train
	DDPRT_SAN="$(SAN)" ./test/simt/inject_bugs.sh $(BUILD) "$(CXX) -x c++ $(SIMT_CXXFLAGS) $(SAN)" \
	  "$(CXX) $(LDFLAGS)" "$(SIMT_TEST_OBJ) $(SIMT_OBJ) $(BUILD)/libddprt.a" "$(LDLIBS)"
.PHONY: simt-inject
-include $(wildcard $(SIMT_DIR)/*/*.d $(SIMT_DIR)/*/*/*.d $(SIMT_DIR)/*/*/*/*.d)
endif

.PHONY: all test asan ubsan tsan fuzz clean run run-gpt bench
# Keep the objects of pattern-built programs (test/progs) between runs.
.SECONDARY:
all: $(BUILD)/libddprt.a $(BUILD)/libddprt.so $(PROGS) $(TPROGS) $(BUILD)/test-runner
	@:

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libddprt.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The shared library: the C API's objects and what they need from the archive;
# versioned soname (libddprt.so.MAJOR), only ddprt_* exported (rt/api.map).
API_OBJ  := $(BUILD)/obj/rt/api.o $(BUILD)/obj/rt/api_coll.o
$(BUILD)/libddprt.so.$(VERSION): $(API_OBJ) $(BUILD)/libddprt.a rt/api.map
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=rt/api.map -Wl,--as-needed \
	  $(if $(SAN),,-Wl,--no-undefined) $(LDFLAGS) -o $@ $(API_OBJ) $(BUILD)/libddprt.a $(LDLIBS)
$(BUILD)/libddprt.so: $(BUILD)/libddprt.so.$(VERSION)
	ln -sf libddprt.so.$(VERSION) $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $@

define prog_rule
$(BUILD)/ddprt-$(1): $(patsubst %.c,$(BUILD)/obj/%.o,$(call APP_SRC,$(1))) $(BUILD)/libddprt.a
	$$(CC) $$(LDFLAGS) -o $$@ $$^ $$(LDLIBS)
endef
$(foreach a,$(APPS),$(eval $(call prog_rule,$(a))))

# t-api_rank uses the C API only, as an outside program does (#include "ddprt.h").
$(BUILD)/obj/test/progs/api_rank.o: CFLAGS += -Iinclude
$(BUILD)/t-%: $(BUILD)/obj/test/progs/%.o $(BUILD)/libddprt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/test-runner: $(TEST_OBJ) $(BUILD)/libddprt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# docs/env.md is printed from the table in rt/env.c (test_rt fails when it is stale).
env-doc: $(BUILD)/t-env_doc
	./$(BUILD)/t-env_doc > docs/env.md
.PHONY: env-doc

# Missing Debian packages of deps/debian.txt (kind "required"): installed as root, else
# the one apt-get command to run. make run / make test do this first and build in a
# second make, because this Makefile looks at installed headers while it is parsed.
deps:
	@./tools/deps.sh

# Builds run in parallel by default (JOBS=1 for a serial build).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# The runner forks one child per test; DDPRT_BUILD tells tests where the programs are.
test: deps
	@$(MAKE) --no-print-directory -j$(JOBS) all
	DDPRT_BUILD=$(BUILD) DDPRT_SAN="$(SAN)" ./$(BUILD)/test-runner $(T)

# The README's two commands from a fresh git clone of HEAD in a pristine Debian 12
# chroot (debootstrap minbase + git make gcc libc6-dev; cached in TEST_FRESH_CACHE).
# Root only. `make run` there gets FRESH_RUN_ARGS (one epoch, to keep it short); both
# build with MAKEFLAGS=-j$(FRESH_JOBS).
FRESH_RUN_ARGS ?= --epochs 1
FRESH_JOBS ?= $(shell nproc)
TEST_FRESH_CACHE ?= /var/cache/ddprt-test-fresh
test-fresh:
	RUN_ARGS="$(FRESH_RUN_ARGS)" JOBS="$(FRESH_JOBS)" CACHE="$(TEST_FRESH_CACHE)" ./tools/test_fresh.sh

# make install PREFIX=/usr/local [DESTDIR=...]: the programs; libddprt.so (soname
# libddprt.so.MAJOR) with include/ddprt.h, the stable C API, and ddprt.pc for it;
# libddprt.a with every header under include/ddprt (as the sources include them:
# "nn/train.h") and ddprt-static.pc for building against the internals.
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PUBLIC_H   := $(filter-out %_int.h transport/tp_reduce_simd.h,\
              $(wildcard rt/*.h transport/*.h nn/*.h nn/*/*.h kernels/*.h ports/posix/*.h ports/cuda/port_cuda.h))
install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR)/ddprt
	install -m 755 $(PROGS) $(DESTDIR)$(BINDIR)
	install -m 644 $(BUILD)/libddprt.a $(DESTDIR)$(LIBDIR)
	install -m 755 $(BUILD)/libddprt.so.$(VERSION) $(DESTDIR)$(LIBDIR)
	ln -sf libddprt.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libddprt.so
	install -m 644 include/ddprt.h $(DESTDIR)$(INCLUDEDIR)/ddprt.h
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)' '' \
	  'Name: ddprt' 'Description: data-parallel collectives for training (C API of libddprt.so)' \
	  'Version: $(VERSION)' 'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lddprt' \
	  'Libs.private: $(LDFLAGS) $(LDLIBS)' > $(DESTDIR)$(LIBDIR)/pkgconfig/ddprt.pc
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)' '' \
	  'Name: ddprt-static' 'Description: data-parallel neural-network training runtime in C (libddprt.a)' \
	  'Version: $(VERSION)' 'Cflags: -I$${includedir}/ddprt -pthread' \
	  'Libs: $${libdir}/libddprt.a $(LDFLAGS) $(LDLIBS)' > $(DESTDIR)$(LIBDIR)/pkgconfig/ddprt-static.pc
	for h in $(PUBLIC_H); do install -D -m 644 $$h $(DESTDIR)$(INCLUDEDIR)/ddprt/$$h || exit 1; done
.PHONY: deps test-fresh install

# The Python package (python/, docs/python.md): the built library goes into it, then
# pip installs it (PYTHON=/usr/bin/python3 for Debian's torch; PIP_FLAGS=--user, or a
# virtual environment's python, where the system's Python is externally managed).
PYTHON    ?= python3
PIP_FLAGS ?=
python: $(BUILD)/libddprt.so
	cp $(BUILD)/libddprt.so.$(VERSION) python/ddprt/$(SONAME)
	$(PYTHON) -m pip install $(PIP_FLAGS) ./python
.PHONY: python

# The verbs tests inside a Soft-RoCE VM (test/verbs_vm.sh; it says why and exits 0
# when the build has no verbs or the VM runner cannot work).
RXE_RUN ?= ../shared/tools/rxe/rxe-run
.PHONY: test-verbs
test-verbs: all
	./test/verbs_vm.sh $(BUILD) $(VERBS) $(RXE_RUN)

# Many hosts on one machine: network namespaces joined by a bridge (test/cluster.sh;
# needs root, skips with a reason otherwise). CLUSTER_BENCH=1: the bench tables instead.
.PHONY: test-cluster
test-cluster: all
	./test/cluster.sh $(BUILD) $(if $(CLUSTER_BENCH),--bench)

asan:
	$(MAKE) BUILD=build-asan SAN="-fsanitize=address -fno-omit-frame-pointer" OPT=-O1 test
ubsan:
	$(MAKE) BUILD=build-ubsan SAN="-fsanitize=undefined -fno-sanitize-recover=all" OPT=-O1 test
tsan:
	$(MAKE) BUILD=build-tsan SAN="-fsanitize=thread" OPT=-O1 test

# The main job: Fashion-MNIST LeNet with the seed script's defaults, data-parallel on
# NPROC ranks over TCP on 127.0.0.1 (ddprt-launch sets the torchrun variables).
NPROC ?= 2
DATA_DIR ?= /usr/share/datasets/fashion-mnist
RUN_ARGS ?=
run: deps
	@$(MAKE) --no-print-directory -j$(JOBS) $(BUILD)/ddprt-launch $(BUILD)/ddprt-train
	@if [ -z "$$DDPRT_DATA" ] && [ ! -e data/train-images-idx3-ubyte.gz ] && [ ! -e $(DATA_DIR)/train-images-idx3-ubyte.gz ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get install -y dataset-fashion-mnist || { apt-get update && apt-get install -y dataset-fashion-mnist; }; \
	  else echo "Fashion-MNIST is missing; run: sudo apt-get install dataset-fashion-mnist"; exit 1; fi; fi
	./$(BUILD)/ddprt-launch --nproc-per-node $(NPROC) -- ./$(BUILD)/ddprt-train $(RUN_ARGS)

# The language-model demo: Debian's fortunes as byte tokens (data/fortunes), a 4-layer
# GPT-2 (nn/models/gpt-fortunes.cfg) on NPROC ranks; validation loss every 100 steps,
# samples at the start, every 300 steps and at the end.
GPT_ARGS ?= --epochs 1
run-gpt: deps
	@$(MAKE) --no-print-directory -j$(JOBS) $(BUILD)/ddprt-launch $(BUILD)/ddprt-train $(BUILD)/ddprt-data
	@if [ ! -e data/fortunes/fortunes_train.bin ]; then \
	  if [ ! -d /usr/share/games/fortunes ]; then \
	    if [ "$$(id -u)" = 0 ]; then apt-get install -y fortunes || { apt-get update && apt-get install -y fortunes; }; \
	    else echo "Debian's fortunes are missing; run: sudo apt-get install fortunes"; exit 1; fi; fi; \
	  ./$(BUILD)/ddprt-data tokenize --to data/fortunes; fi
	./$(BUILD)/ddprt-launch --nproc-per-node $(NPROC) -- ./$(BUILD)/ddprt-train --model-file nn/models/gpt-fortunes.cfg \
	  --data data/fortunes --seq-len 128 --batch-size 16 --optimizer adamw --lr 1e-3 --weight-decay 0.1 \
	  --no-decay-bn-bias --eval-every 100 --sample-every 300 --sample-len 160 --top-k 40 --log-interval 50 $(GPT_ARGS)

# libFuzzer (clang with libFuzzer; on Debian/Ubuntu it comes with clang, else apt
# install libclang-rt-14-dev), ASan + UBSan: the rendezvous wire parsers + hostlists,
# the checkpoint reader (nn/stio), the IDX reader, the JPEG and PNG decoders with the
# transforms after them, the text TSV reader/tokenizer, the --resume path (checkpoint
# and optimizer-state files), ddprt-data's and ddprt-bench's command lines, ddprt-data
# convert on IDX files and the CIFAR reader. FUZZ_TIME seconds each, or FUZZ_RUNS=N
# executions each; FUZZ=name1,name2 runs only those. bench/fuzz_table.sh prints the
# table of a run (target, executions, time, crashes).
FUZZ_CC   ?= clang
FUZZ_TIME ?= 30
FUZZ_RUNS ?=
FUZZ      ?= rdzv,stio,idx,jpeg,png,text,ckpt,args,convert
FUZZ_FLAGS = -std=c11 -g -O1 -D_GNU_SOURCE -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
             -DDDPRT_JPEG=1 -DDDPRT_PNG=1
FUZZ_LIMIT = $(if $(FUZZ_RUNS),-runs=$(FUZZ_RUNS),-max_total_time=$(FUZZ_TIME))
FUZZ_DATA  = $(filter-out %_main.c nn/data/loader.c nn/data/image_write.c,$(wildcard nn/data/*.c)) rt/arena.c rt/log.c rt/env.c
FUZZ_SRC_rdzv = rt/rdzv_wire.c rt/rdzv_env.c rt/env.c rt/log.c
FUZZ_SRC_stio = nn/stio_read.c nn/stio.c
FUZZ_SRC_idx  = nn/data/idx.c rt/arena.c rt/log.c
FUZZ_SRC_jpeg = $(FUZZ_DATA)
FUZZ_SRC_png  = $(FUZZ_DATA)
FUZZ_SRC_text = $(FUZZ_DATA)
FUZZ_SRC_ckpt = nn/ckpt.c nn/stio.c nn/stio_read.c rt/log.c
FUZZ_SRC_args = apps/data/data_args.c apps/bench/bench_args.c rt/args.c rt/env.c rt/tensor.c rt/arena.c rt/log.c
FUZZ_SRC_convert = apps/data/data_convert.c $(FUZZ_DATA) nn/data/image_write.c
FUZZ_LEN_rdzv = 4096
FUZZ_LEN_stio = 8192
FUZZ_LEN_idx  = 256
FUZZ_LEN_jpeg = 16384
FUZZ_LEN_png  = 16384
FUZZ_LEN_text = 4096
FUZZ_LEN_ckpt = 16384
FUZZ_LEN_args = 512
FUZZ_LEN_convert = 8192
FUZZ_LIBS  = -lz -lm -ljpeg -lpng16
comma     := ,
FUZZ_LIST  = $(subst $(comma), ,$(FUZZ))
fuzz:
	@mkdir -p $(addprefix build-fuzz/corpus-,rdzv stio idx jpeg png text ckpt args convert)
	$(CC) -std=c11 -O1 -D_GNU_SOURCE -I. -DDDPRT_JPEG=1 -DDDPRT_PNG=1 test/fuzz/seed_images.c nn/data/image_write.c \
	  -ljpeg -lpng16 -o build-fuzz/seed_images
	./build-fuzz/seed_images build-fuzz/corpus-jpeg build-fuzz/corpus-png
	printf 'pos\tThe cat, the CAT!\nneg\tthe caf\303\251-the dog\r\n\n\0neg\tcat\n7' > build-fuzz/corpus-text/seed
	printf 'convert\0--to\0/x\0--limit\0005\0--format=cifar' > build-fuzz/corpus-args/convert
	printf 'synth\0--to\0/x\0--size\0008x6\0--n\0003' > build-fuzz/corpus-args/synth
	printf 'broadcast\0-b\0004K\0-e\0001M\0-r\0001\0--world-size\0002\0-d\0bf16' > build-fuzz/corpus-args/bench
	printf -- '--predict\0--world-size\0008\0--per-node\0004\0--gpus\0008-64' > build-fuzz/corpus-args/predict
	$(foreach t,$(FUZZ_LIST),$(FUZZ_CC) $(FUZZ_FLAGS) test/fuzz/fuzz_$(t).c $(FUZZ_SRC_$(t)) $(FUZZ_LIBS) -o build-fuzz/fuzz_$(t) &&) true
	$(foreach t,$(FUZZ_LIST),FUZZ_SEED_DIR=build-fuzz/corpus-$(t) ./build-fuzz/fuzz_$(t) $(FUZZ_LIMIT) -max_len=$(FUZZ_LEN_$(t)) -artifact_prefix=build-fuzz/ build-fuzz/corpus-$(t) 2>&1 | tee build-fuzz/log-$(t).txt | tail -3 && ! grep -q "ERROR: \|^SUMMARY\|runtime error" build-fuzz/log-$(t).txt &&) true

clean:
	rm -rf build build-asan build-ubsan build-tsan build-fuzz

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
