# wisp — build, test, demo, install.
#   make            build/libwisp.so, build/libwisp.a, build/wisp (on every core unless -j says otherwise)
#   make test       every suite of spec/run.sh (installs missing Debian packages first)
#   make test-gpu   the same with the GPU specs (on a machine with a CUDA device)
#   make demo       build/demo: a Criteo-like model and data, every input the README's tour uses; scores on every device
#   make bench      scripts/bench/bench_cpu_vs_liblinear.sh (LIBLINEAR's predictor against wisp score)
#   make install PREFIX=/usr/local DESTDIR=...   /   make uninstall   (no LD_LIBRARY_PATH needed: README, Install)
.DEFAULT_GOAL := all
.SUFFIXES:
MAKEFLAGS += --no-builtin-rules
# every core by default; an explicit -j (on the command line, in MAKEFLAGS, or from an
# outer make's jobserver) wins. (GNU make 4.3 shows no -j in MAKEFLAGS while it reads
# this file, so the environment's copy is looked at too; a command-line -j overrides this.)
ifeq ($(filter -j% --jobserver%,$(MAKEFLAGS) $(shell printenv MAKEFLAGS)),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif

PREFIX  ?= /usr/local
DESTDIR ?=
BUILD   ?= build
LUADIR  := $(PREFIX)/share/lua/5.1
VERSION := 0.1.0

CC      ?= cc
CFLAGS  ?= -O2 -g
WFLAGS  := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wno-format-truncation
XCFLAGS := -std=c11 -D_GNU_SOURCE -fPIC -pthread $(WFLAGS) -Iengine/include -Iengine -march=x86-64-v2 -mtune=native \
           -DWISP_LUA_DIR='"$(LUADIR)"'
LDLIBS  := -lxxhash -lm -lpthread -ldl -lrt

# ---- CUDA: compiled whenever nvcc exists; the runtime is linked statically,
# so the same binary runs (and says "no CUDA device") where there is no GPU.
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifneq ($(NVCC),)
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# The GPU architectures compiled (kernels/README.md, "Architectures"): sm_90 machine code
# (the H200/H100 this is built and measured for) and compute_90 PTX, which the driver
# compiles once at first load for any newer GPU. sm_80 (A100) is left out of the default:
# it doubles the kernels' build time; add it with
#   make CUDA_ARCHS="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
# A GPU older than the oldest architecture built is reported unusable (engine/cuda/cuda_device.c).
CUDA_ARCHS ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVFLAGS    ?= -O3 -std=c++17 -Xcompiler -fPIC -Iengine/include -Iengine -lineinfo $(CUDA_ARCHS)
CU_SRC     := $(wildcard kernels/*.cu)
CU_OBJ     := $(CU_SRC:kernels/%.cu=$(BUILD)/obj/kernels/%.o)
CUDA_CFLAGS := -DWISP_HAVE_CUDA -I$(CUDA_HOME)/include
CUDA_LIBS  := -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/targets/x86_64-linux/lib -lcudart_static -lstdc++
CUDA_EXCLUDE := engine/cuda/cuda_stub.c
# the backend's files (engine/cuda/) share its private header
$(patsubst engine/%.c,$(BUILD)/obj/%.o,$(filter-out engine/cuda/cuda_stub.c,$(wildcard engine/cuda/*.c))): engine/cuda/cuda_internal.h
else
CU_OBJ     :=
CUDA_CFLAGS :=
CUDA_LIBS  :=
# the backend's files compile to nothing without WISP_HAVE_CUDA; cuda_stub.c stands in
CUDA_EXCLUDE :=
endif

# the library: every engine/<subsystem>/*.c but the CLI (engine/cli/) and the bindings (engine/bindings/)
LIB_SRC := $(filter-out engine/cli/% engine/bindings/% $(CUDA_EXCLUDE),$(wildcard engine/*/*.c))
CLI_SRC := $(wildcard engine/cli/*.c)
LIB_OBJ := $(LIB_SRC:engine/%.c=$(BUILD)/obj/%.o) $(CU_OBJ)
CLI_OBJ := $(CLI_SRC:engine/%.c=$(BUILD)/obj/%.o)
LUAJIT_CFLAGS := $(shell pkg-config --cflags luajit 2>/dev/null || echo -I/usr/include/luajit-2.1)
LUAJIT_LIBS   := $(shell pkg-config --libs luajit 2>/dev/null || echo -lluajit-5.1)
EDIT_LIBS     := -ledit

.PHONY: all deps test test-c test-lua test-gpu demo serve bench install uninstall clean
all: deps-build $(BUILD)/libwisp.so $(BUILD)/libwisp.a $(BUILD)/wisp

# ---- Debian packages: installed when missing (fresh machines, CI) ----------
BUILD_PKGS := gcc make pkg-config libxxhash-dev libluajit2-5.1-dev luajit2 libedit-dev
TEST_PKGS  := lua-busted lua-cjson liblinear-tools tmux nginx libnginx-mod-http-lua lua-resty-core wrk curl g++
# WISP_SKIP_DEPS=1: never call apt-get (machines whose packages come from elsewhere). Under -j several
# of these run at once (deps-test, deps-java, deps-reliability): flock takes them one at a time, as
# apt-get's own lock would refuse the second
define ensure_pkgs
	@[ -n "$(WISP_SKIP_DEPS)" ] && exit 0; missing=""; for p in $(1); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "wisp: installing Debian packages:$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then echo "wisp: need root to install$$missing (or install them yourself)" >&2; exit 1; fi; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  flock /tmp/wisp-apt.lock sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null" || exit 1; \
	fi
endef
.PHONY: deps-build deps-test
deps-build:
	$(call ensure_pkgs,$(BUILD_PKGS))
deps-test: deps-build
	$(call ensure_pkgs,$(TEST_PKGS))
deps: deps-test

# ---- objects -----------------------------------------------------------------
# every object depends on every engine header (the public one and the private ones)
ENGINE_HDR := engine/include/wisp.h $(wildcard engine/*/*.h)
$(BUILD)/obj/%.o: engine/%.c $(ENGINE_HDR) | $(BUILD)/obj
	@mkdir -p $(dir $@)
	$(CC) $(XCFLAGS) $(CFLAGS) $(CUDA_CFLAGS) -c $< -o $@
$(BUILD)/obj/cli/%.o: engine/cli/%.c $(ENGINE_HDR) | $(BUILD)/obj
	@mkdir -p $(dir $@)
	$(CC) $(XCFLAGS) $(CFLAGS) $(LUAJIT_CFLAGS) -c $< -o $@
$(BUILD)/obj/kernels/%.o: kernels/%.cu $(ENGINE_HDR) $(wildcard kernels/*.cuh) | $(BUILD)/obj
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@
# under -j, nothing compiles before the build's Debian packages are there
$(BUILD)/obj: | deps-build
	@mkdir -p $@ $@/kernels

$(BUILD)/libwisp.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^
# libwisp.so exports the functions declared in wisp.h and nothing else (no
# internal wisp_* helpers, no symbols of the static CUDA runtime); the hooks
# below are for specs and benchmarks that reach them through the FFI/ctypes.
# Declared once in engine/core/wisp_test.h (an NVCC= build answers the CUDA ones from engine/cuda/cuda_stub.c).
TEST_HOOKS := wisp_fault_alloc_after wisp_cuda_units_read wisp_cuda_time_resident wisp_cuda_timeline_start \
              wisp_cuda_timeline_read wisp_cuda_test_alloc wisp_cuda_test_copy wisp_cuda_test_free
$(BUILD)/libwisp.map: engine/include/wisp.h Makefile | $(BUILD)/obj
	@{ echo '{ global:'; \
	   sed -E '/^[[:space:]]*(\/?\*|\/\/)/d' $< | grep -oE '\bwisp_[a-z0-9_]+[[:space:]]*\(' | tr -d ' (' | sort -u | sed 's/$$/;/'; \
	   for h in $(TEST_HOOKS); do echo "$$h;"; done; \
	   echo 'local: *; };'; } > $@
$(BUILD)/libwisp.so: $(LIB_OBJ) $(BUILD)/libwisp.map
	$(CC) -shared -Wl,-soname,libwisp.so.0 -Wl,--no-undefined -Wl,--version-script=$(BUILD)/libwisp.map \
	  -o $@ $(LIB_OBJ) $(CUDA_LIBS) $(LDLIBS)
# the CLI embeds LuaJIT and links the library statically; -rdynamic exports
# wisp_* so the Lua layer finds them through ffi.C inside `wisp run/repl`
$(BUILD)/wisp: $(CLI_OBJ) $(BUILD)/libwisp.a
	$(CC) -rdynamic -o $@ $(CLI_OBJ) -Wl,--whole-archive $(BUILD)/libwisp.a -Wl,--no-whole-archive \
	  $(CUDA_LIBS) $(LUAJIT_LIBS) $(EDIT_LIBS) $(LDLIBS)

# ---- tests ---------------------------------------------------------------------
C_TESTS := $(patsubst spec/c/%.c,$(BUILD)/test/%,$(wildcard spec/c/test_*.c))
$(BUILD)/test/%: spec/c/%.c $(wildcard spec/c/*.h) $(BUILD)/libwisp.a
	@mkdir -p $(dir $@)
	$(CC) $(XCFLAGS) $(CFLAGS) -Ispec/c -o $@ $< $(BUILD)/libwisp.a $(CUDA_LIBS) $(LDLIBS)

# the service harnesses of spec/nginx (raw-socket clients, no library): the reload soak and the fuzzer
TEST_TOOLS := $(BUILD)/test-tools/soak $(BUILD)/test-tools/svcfuzz
$(BUILD)/test-tools/%: spec/nginx/%.c spec/nginx/svchttp.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -pthread $(WFLAGS) $(CFLAGS) -o $@ $< -lm
.PHONY: test-tools
test-tools: $(TEST_TOOLS)

test: deps-test all $(C_TESTS) $(TEST_TOOLS)
	@WISP_BUILD=$(BUILD) sh spec/run.sh

test-gpu: deps-test all $(C_TESTS) $(TEST_TOOLS)
	@WISP_BUILD=$(BUILD) WISP_TEST_GPU=1 sh spec/run.sh

# the OpenResty prediction service on the demo model (examples/openresty/serve.sh --help)
serve: deps-test all
	@examples/openresty/serve.sh --build $(BUILD)

demo: deps-test all
	@$(BUILD)/wisp run examples/demo.lua --out $(BUILD)/demo

bench: all
	@bash scripts/bench/bench_cpu_vs_liblinear.sh --build $(BUILD)

# ---- install -----------------------------------------------------------------
# $(BUILD)/prefix records PREFIX; it changes (and wisp.pc is remade) only when PREFIX
# does: `make install PREFIX=A` then PREFIX=B installs a wisp.pc naming B. (The CLI
# needs no rebuild: it looks for the Lua modules next to itself first.)
$(BUILD)/prefix: FORCE | $(BUILD)/obj
	@echo '$(PREFIX)' | cmp -s - $@ || echo '$(PREFIX)' > $@
.PHONY: FORCE
FORCE:
# Outside /usr, wisp.pc adds an rpath to PREFIX/lib, so a program linked with
# `pkg-config --libs wisp` runs without LD_LIBRARY_PATH; the installed bin/wisp links
# the library statically and finds the Lua modules next to itself (PREFIX/share/lua/5.1).
PC_RPATH = $(if $(filter /usr,$(PREFIX)),,-Wl,-rpath,$${libdir} )
$(BUILD)/wisp.pc: Makefile $(BUILD)/prefix
	@printf 'prefix=%s\nexec_prefix=$${prefix}\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: wisp\nDescription: inference engine for sparse wide models on CPUs and CUDA GPUs\nVersion: %s\nLibs: -L$${libdir} %s-lwisp\nLibs.private: %s\nCflags: -I$${includedir}\n' \
	  '$(PREFIX)' '$(VERSION)' '$(PC_RPATH)' '$(strip $(CUDA_LIBS) $(LDLIBS))' > $@

install: all $(BUILD)/wisp.pc
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(LUADIR)/wisp
	install -m 755 $(BUILD)/wisp $(DESTDIR)$(PREFIX)/bin/wisp
	install -m 755 $(BUILD)/libwisp.so $(DESTDIR)$(PREFIX)/lib/libwisp.so.$(VERSION)
	ln -sf libwisp.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libwisp.so.0
	ln -sf libwisp.so.0 $(DESTDIR)$(PREFIX)/lib/libwisp.so
	install -m 644 $(BUILD)/libwisp.a $(DESTDIR)$(PREFIX)/lib/libwisp.a
	install -m 644 engine/include/wisp.h $(DESTDIR)$(PREFIX)/include/wisp.h
	install -m 644 $(BUILD)/wisp.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/wisp.pc
	install -m 644 lua/wisp/*.lua $(DESTDIR)$(LUADIR)/wisp/ && install -d $(DESTDIR)$(LUADIR)/wisp/nginx && install -m 644 lua/wisp/nginx/*.lua $(DESTDIR)$(LUADIR)/wisp/nginx/
	@if [ -z "$(DESTDIR)" ] && command -v ldconfig >/dev/null; then ldconfig; fi

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/wisp $(DESTDIR)$(PREFIX)/lib/libwisp.so* $(DESTDIR)$(PREFIX)/lib/libwisp.a \
	  $(DESTDIR)$(PREFIX)/include/wisp.h $(DESTDIR)$(PREFIX)/lib/pkgconfig/wisp.pc
	rm -rf $(DESTDIR)$(LUADIR)/wisp
	@# the directories install made, each removed only when nothing else is left in it
	@# (under /usr and /usr/local the system's own bin, lib, include and share stay)
	@for d in $(LUADIR) $(PREFIX)/share/lua $(PREFIX)/lib/pkgconfig $(if $(filter /usr /usr/local,$(PREFIX)),, \
	          $(PREFIX)/share $(PREFIX)/lib $(PREFIX)/include $(PREFIX)/bin $(PREFIX)); do \
	  [ -d "$(DESTDIR)$$d" ] && rmdir "$(DESTDIR)$$d" 2>/dev/null || true; done

clean:
	rm -rf $(BUILD)

# ---- more targets live next to their code: sanitizers and fuzzing (spec/*.mk),
# the bindings (engine/bindings/<binding>/<binding>.mk: Java, C++, Spark) ----
-include $(wildcard spec/*.mk) $(wildcard engine/bindings/*/*.mk)
