# spec/reliability.mk — sanitizer builds (ASan+UBSan, TSan), valgrind, libFuzzer targets; included by the Makefile.
#
#   make fuzz [FUZZ_SECONDS=60]  run every libFuzzer target for FUZZ_SECONDS each, then replay
#                               the seed corpora and spec/fuzz/regress
#   make fuzz-regress           replay spec/fuzz/corpus and spec/fuzz/regress through every target
#   make test-asan              C tests + busted specs against the ASan+UBSan library
#   make test-tsan              C tests under ThreadSanitizer
#   make test-valgrind          C tests under valgrind memcheck (WISP_TEST_QUICK=1)
#   make test-reliability       all of the above with a short fuzz pass (spec/reliability.sh;
#                               `make test` runs it through spec/run.sh)
# Every build here compiles the library's engine/*/*.c itself with clang, CUDA off (engine/cuda/cuda_stub.c),
# into $(BUILD)/asan, $(BUILD)/tsan and $(BUILD)/fuzz; nothing here touches $(BUILD)/obj.

SAN_CC       ?= clang
FUZZ_SECONDS ?= 60
REL_PKGS     := clang libclang-rt-dev valgrind

# library sources for the sanitizer builds: no CLI, never the CUDA backend (built without
# WISP_HAVE_CUDA, its engine/cuda/*.c files compile to nothing and cuda_stub.c stands in)
SAN_SRC   := $(filter-out engine/cli/% engine/bindings/%,$(wildcard engine/*/*.c))
SAN_HDR   := engine/include/wisp.h $(wildcard engine/*/*.h)
SAN_TESTS := $(patsubst spec/c/%.c,%,$(wildcard spec/c/test_*.c))
FUZZ_SRC  := $(wildcard spec/fuzz/fuzz_*.c)
FUZZ_TARGETS := $(patsubst spec/fuzz/%.c,%,$(FUZZ_SRC))

# the normal build's flags, -O1 -g and the sanitizer; no -DWISP_LUA_DIR (no CLI here)
SAN_XCFLAGS := -std=c11 -D_GNU_SOURCE -fPIC -pthread $(WFLAGS) -Wno-unknown-warning-option \
               -Iengine/include -Iengine -march=x86-64-v2 -g -fno-omit-frame-pointer
ASAN_FLAGS  := -O1 -fsanitize=address,undefined -fno-sanitize-recover=all
TSAN_FLAGS  := -O1 -fsanitize=thread
FUZZ_FLAGS  := -O1 -fsanitize=address,undefined -fno-sanitize-recover=all

.PHONY: deps-reliability reliability-build asan-build tsan-build fuzz-build fuzz fuzz-regress \
        test-asan test-tsan test-valgrind test-reliability
deps-reliability: deps-test
	$(call ensure_pkgs,$(REL_PKGS))

# `make test` builds the sanitizer libraries and tests (in parallel with the rest under -j);
# WISP_RELIABILITY=0 leaves them out (spec/run.sh then skips spec/reliability.sh)
ifneq ($(WISP_RELIABILITY),0)
test: reliability-build
endif

# ---- ASan + UBSan -------------------------------------------------------------------
ASAN_DIR := $(BUILD)/asan
ASAN_OBJ := $(SAN_SRC:engine/%.c=$(ASAN_DIR)/obj/%.o)
$(ASAN_DIR)/obj/%.o: engine/%.c $(SAN_HDR) | deps-reliability
	@mkdir -p $(dir $@)
	$(SAN_CC) $(SAN_XCFLAGS) $(ASAN_FLAGS) -c $< -o $@
$(ASAN_DIR)/libwisp.a: $(ASAN_OBJ)
	@rm -f $@
	ar rcs $@ $^
# the .so leaves the ASan runtime unresolved: the process that loads it
# (luajit) gets it through LD_PRELOAD of clang's shared runtime
$(ASAN_DIR)/libwisp.so: $(ASAN_OBJ)
	$(SAN_CC) -shared -fsanitize=address,undefined -shared-libasan -o $@ $^ $(LDLIBS)
$(ASAN_DIR)/test/%: spec/c/%.c $(wildcard spec/c/*.h) $(ASAN_DIR)/libwisp.a
	@mkdir -p $(dir $@)
	$(SAN_CC) $(SAN_XCFLAGS) $(ASAN_FLAGS) -Ispec/c -o $@ $< $(ASAN_DIR)/libwisp.a $(LDLIBS)
asan-build: $(ASAN_DIR)/libwisp.so $(SAN_TESTS:%=$(ASAN_DIR)/test/%)

# ---- TSan -----------------------------------------------------------------------------
TSAN_DIR := $(BUILD)/tsan
TSAN_OBJ := $(SAN_SRC:engine/%.c=$(TSAN_DIR)/obj/%.o)
$(TSAN_DIR)/obj/%.o: engine/%.c $(SAN_HDR) | deps-reliability
	@mkdir -p $(dir $@)
	$(SAN_CC) $(SAN_XCFLAGS) $(TSAN_FLAGS) -c $< -o $@
$(TSAN_DIR)/libwisp.a: $(TSAN_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(TSAN_DIR)/test/%: spec/c/%.c $(wildcard spec/c/*.h) $(TSAN_DIR)/libwisp.a
	@mkdir -p $(dir $@)
	$(SAN_CC) $(SAN_XCFLAGS) $(TSAN_FLAGS) -Ispec/c -o $@ $< $(TSAN_DIR)/libwisp.a $(LDLIBS)
tsan-build: $(SAN_TESTS:%=$(TSAN_DIR)/test/%)

# ---- libFuzzer ---------------------------------------------------------------------------
FUZZ_DIR := $(BUILD)/fuzz
FUZZ_OBJ := $(SAN_SRC:engine/%.c=$(FUZZ_DIR)/obj/%.o)
$(FUZZ_DIR)/obj/%.o: engine/%.c $(SAN_HDR) | deps-reliability
	@mkdir -p $(dir $@)
	$(SAN_CC) $(SAN_XCFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZ_DIR)/libwisp.a: $(FUZZ_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(FUZZ_TARGETS:%=$(FUZZ_DIR)/%): $(FUZZ_DIR)/%: spec/fuzz/%.c spec/fuzz/fuzz_common.h $(FUZZ_DIR)/libwisp.a
	$(SAN_CC) $(SAN_XCFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer -Ispec/fuzz -o $@ $< $(FUZZ_DIR)/libwisp.a $(LDLIBS)
fuzz-build: $(FUZZ_TARGETS:%=$(FUZZ_DIR)/%)

reliability-build: asan-build tsan-build fuzz-build

# ---- runs -------------------------------------------------------------------------------
fuzz: fuzz-build
	@WISP_BUILD=$(BUILD) WISP_FUZZ_SECONDS=$(FUZZ_SECONDS) sh spec/reliability.sh fuzz regress
fuzz-regress: fuzz-build
	@WISP_BUILD=$(BUILD) sh spec/reliability.sh regress
test-asan: deps-test all asan-build
	@WISP_BUILD=$(BUILD) sh spec/reliability.sh asan
test-tsan: tsan-build
	@WISP_BUILD=$(BUILD) sh spec/reliability.sh tsan
test-valgrind: deps-reliability $(C_TESTS)
	@WISP_BUILD=$(BUILD) sh spec/reliability.sh valgrind
test-reliability: deps-test all $(C_TESTS) reliability-build
	@WISP_BUILD=$(BUILD) sh spec/reliability.sh
