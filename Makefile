# ddprt — plain make. CPU-only unless nvcc / libibverbs are found (later issues).
# Variants: make (build/), make test, make asan, make ubsan, make tsan, make fuzz.
BUILD   ?= build
CC      ?= cc
OPT     ?= -O2
SAN     ?=
CFLAGS  := -std=c11 -Wall -Wextra -Werror $(OPT) -g -D_GNU_SOURCE -pthread -I. -MMD -MP $(SAN) $(EXTRA_CFLAGS)
LDFLAGS := -pthread $(SAN)
LDLIBS  := -lz -lm

# Every *_main.c is a program: dir/foo_bar_main.c -> $(BUILD)/ddprt-foo-bar.
MAINS    := $(wildcard rt/*_main.c transport/*_main.c nn/*_main.c kernels/*_main.c)
LIB_SRC  := $(filter-out %_main.c,$(wildcard rt/*.c transport/*.c nn/*.c kernels/cpu/*.c ports/posix/*.c ports/nocuda/*.c))
TEST_SRC := $(wildcard test/*.c)
# test/progs/foo.c -> $(BUILD)/t-foo: helper processes that multi-process tests start.
TPROG_SRC:= $(wildcard test/progs/*.c)

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)
PROGS    := $(foreach m,$(MAINS),$(BUILD)/ddprt-$(subst _,-,$(patsubst %_main.c,%,$(notdir $(m)))))
TPROGS   := $(foreach p,$(TPROG_SRC),$(BUILD)/t-$(basename $(notdir $(p))))

.PHONY: all test asan ubsan tsan fuzz clean run bench
all: $(BUILD)/libddprt.a $(PROGS) $(TPROGS) $(BUILD)/test-runner

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libddprt.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

define prog_rule
$(BUILD)/ddprt-$(subst _,-,$(patsubst %_main.c,%,$(notdir $(1)))): $(BUILD)/obj/$(1:.c=.o) $(BUILD)/libddprt.a
	$$(CC) $$(LDFLAGS) -o $$@ $$^ $$(LDLIBS)
endef
$(foreach m,$(MAINS),$(eval $(call prog_rule,$(m))))

$(BUILD)/t-%: $(BUILD)/obj/test/progs/%.o $(BUILD)/libddprt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/test-runner: $(TEST_OBJ) $(BUILD)/libddprt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The runner forks one child per test; DDPRT_BUILD tells tests where the programs are.
test: all
	DDPRT_BUILD=$(BUILD) ./$(BUILD)/test-runner $(T)

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
run: all
	@if [ -z "$$DDPRT_DATA" ] && [ ! -e data/train-images-idx3-ubyte.gz ] && [ ! -e $(DATA_DIR)/train-images-idx3-ubyte.gz ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get install -y dataset-fashion-mnist || { apt-get update && apt-get install -y dataset-fashion-mnist; }; \
	  else echo "Fashion-MNIST is missing; run: sudo apt-get install dataset-fashion-mnist"; exit 1; fi; fi
	./$(BUILD)/ddprt-launch --nproc-per-node $(NPROC) -- ./$(BUILD)/ddprt-train $(RUN_ARGS)

# libFuzzer on the rendezvous wire parsers + hostlists (clang with libFuzzer; on Debian/
# Ubuntu it comes with clang, else apt install libclang-rt-14-dev). FUZZ_TIME seconds.
FUZZ_CC   ?= clang
FUZZ_TIME ?= 30
fuzz:
	@mkdir -p build-fuzz/corpus-rdzv
	$(FUZZ_CC) -std=c11 -g -O1 -D_GNU_SOURCE -I. -fsanitize=fuzzer,address,undefined \
		test/fuzz/fuzz_rdzv.c rt/rdzv_wire.c rt/rdzv_env.c -o build-fuzz/fuzz_rdzv
	./build-fuzz/fuzz_rdzv -max_total_time=$(FUZZ_TIME) -max_len=4096 build-fuzz/corpus-rdzv

clean:
	rm -rf build build-asan build-ubsan build-tsan build-fuzz

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
