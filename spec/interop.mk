# spec/interop.mk — parity with other trainers' libraries; included by the Makefile.
#
#   make test-interop     TensorFlow parity (spec/interop/tf_parity.py: train a linear_model layer and, with
#                         tf_keras installed, a Keras DenseFeatures -> Dense(1) model; import them with
#                         wisp.from_tensorflow (the package, pip-installed into the venv below) and
#                         scripts/tools/tf_export.py, score held-out raw rows, |p_wisp - p_tf| <= 1e-6)
#                         when `import tensorflow` works, and Fingerprint64 against Debian's
#                         libfarmhash (spec/interop/farmhash_check.cc; libfarmhash-dev is installed
#                         with apt-get when missing). Without TensorFlow its parity is skipped with a
#                         message. Neither is part of `make test`: TensorFlow takes minutes to install
#                         (pip install tensorflow-cpu). The golden vectors TensorFlow produced
#                         (spec/data/tf_golden_*.json, spec/data/gen/tf_golden.py) are tested by `make test`.
#   make tf-golden        regenerate spec/data/tf_golden_*.json with the installed TensorFlow
#   (test-interop also)   Vowpal Wabbit parity (spec/interop/vw_parity.py: train logistic models with
#                         the vowpalwabbit PyPI package, -q interactions, --readable_model and
#                         --invert_hash, import with `wisp import vw`, score held-out lines with
#                         `wisp score --format vw`, |p_wisp - p_vw| <= 1e-5); installs vowpalwabbit
#                         into the build's own virtual environment when missing, skipped with a
#                         message when that fails. VW's golden vectors (spec/data/vw_golden.json,
#                         spec/data/gen/vw_golden.py) are tested by `make test` (spec/c/test_vw.c).
#   make vw-golden        regenerate spec/data/vw_golden.json with the installed vowpalwabbit

# The parity tests run under a virtual environment of their own, $(BUILD)/interop-venv
# (made on first use; it also sees the system's site-packages, so a system-wide TensorFlow
# is used). pip installs only into that venv, never into the python3 first on PATH: with
# INTEROP_PY set to another interpreter nothing is installed, missing packages are skipped.
INTEROP_VENV := $(BUILD)/interop-venv
INTEROP_PY ?= $(INTEROP_VENV)/bin/python
INTEROP_OWN := $(filter $(INTEROP_VENV)/bin/python,$(INTEROP_PY))

.PHONY: test-interop tf-golden interop-farmhash interop-tf interop-vw vw-golden
test-interop: interop-farmhash interop-tf interop-vw
interop-tf interop-vw tf-golden vw-golden: $(if $(INTEROP_OWN),interop-venv-base)

# The package goes into the venv with pip (CPU build, under $(BUILD)/interop-py-build; the CLI
# checks the GPUs): tf_parity.py and scripts/tools/tf_export.py `import wisp`.
INTEROP_PKG_LOG := $(BUILD)/interop-pip.log
INTEROP_PY_RUN = $(if $(findstring /,$(INTEROP_PY)),$(abspath $(INTEROP_PY)),$(INTEROP_PY))
interop-tf: all
	@if $(INTEROP_PY) -c "import tensorflow" >/dev/null 2>&1; then \
	  if [ -n "$(INTEROP_OWN)" ]; then \
	    $(INTEROP_PY) -c "import wheel, setuptools; assert int(setuptools.__version__.split('.')[0]) >= 61" 2>/dev/null || \
	      $(INTEROP_PY) -m pip install -q --disable-pip-version-check wheel "setuptools>=61" >$(INTEROP_PKG_LOG) 2>&1; \
	    WISP_PY_BUILD=$(abspath $(BUILD))/interop-py-build WISP_NVCC= $(INTEROP_PY) -m pip install -q --disable-pip-version-check \
	      --no-build-isolation --no-deps --force-reinstall . >>$(INTEROP_PKG_LOG) 2>&1 || \
	      { tail -n 30 $(INTEROP_PKG_LOG); echo "test-interop: pip install . into $(INTEROP_VENV) failed (log: $(INTEROP_PKG_LOG))"; exit 1; }; \
	  fi; \
	  if ! (cd /tmp && $(INTEROP_PY_RUN) -c "import wisp") >/dev/null 2>&1; then \
	    echo "test-interop: TensorFlow parity SKIPPED: '$(INTEROP_PY) -c \"import wisp\"' fails (pip install . into that interpreter's environment)"; exit 0; \
	  fi; \
	  out=$$(cd /tmp && TF_CPP_MIN_LOG_LEVEL=3 $(INTEROP_PY_RUN) $(abspath spec/interop/tf_parity.py) --wisp $(abspath $(BUILD))/wisp 2>&1); st=$$?; \
	  if [ $$st -eq 0 ]; then echo "$$out" | tail -n 1; else echo "$$out" | tail -n 30; fi; exit $$st; \
	else \
	  echo "test-interop: TensorFlow parity SKIPPED: '$(INTEROP_PY) -c \"import tensorflow\"' fails (make interop-venv installs it into $(INTEROP_VENV))"; \
	fi

interop-farmhash: $(BUILD)/libwisp.a
	$(call ensure_pkgs,libfarmhash-dev g++)
	@if [ -f /usr/include/farmhash.h ]; then \
	  mkdir -p $(BUILD)/test && \
	  $(CXX) -O2 -Iengine/include -o $(BUILD)/test/farmhash_check spec/interop/farmhash_check.cc \
	    $(BUILD)/libwisp.a -lfarmhash $(CUDA_LIBS) $(LDLIBS) && $(BUILD)/test/farmhash_check; \
	else \
	  echo "test-interop: libfarmhash check SKIPPED: /usr/include/farmhash.h missing and WISP_SKIP_DEPS set (apt-get install libfarmhash-dev)"; \
	fi

tf-golden:
	TF_CPP_MIN_LOG_LEVEL=3 $(INTEROP_PY) spec/data/gen/tf_golden.py --out spec/data 2>/dev/null

# `make interop-venv` installs every trainer's package into that venv, for CI (.ci/run runs
# it, then `make test-interop`). Fails (and CI skips the parity tests, saying so) when PyPI
# cannot be reached.
INTEROP_PIP_PKGS ?= "tensorflow-cpu==2.21.*" "tf_keras==2.21.*" "vowpalwabbit==9.*" numpy
.PHONY: interop-venv interop-venv-base
interop-venv-base:
	$(call ensure_pkgs,python3 python3-venv)
	@[ -x $(INTEROP_VENV)/bin/python ] || python3 -m venv --system-site-packages $(INTEROP_VENV)
interop-venv: interop-venv-base
	@echo "wisp: installing $(INTEROP_PIP_PKGS) into $(INTEROP_VENV) (minutes)"
	@timeout 900 $(INTEROP_VENV)/bin/pip install -q --disable-pip-version-check $(INTEROP_PIP_PKGS)

interop-vw: all
	@if [ -n "$(INTEROP_OWN)" ] && ! $(INTEROP_PY) -c "import vowpalwabbit" >/dev/null 2>&1; then \
	  echo "test-interop: installing vowpalwabbit into $(INTEROP_VENV)"; \
	  $(INTEROP_PY) -m pip install -q --disable-pip-version-check vowpalwabbit >/dev/null 2>&1 || true; \
	fi; \
	if $(INTEROP_PY) -c "import vowpalwabbit" >/dev/null 2>&1; then \
	  out=$$($(INTEROP_PY) spec/interop/vw_parity.py --wisp $(abspath $(BUILD))/wisp 2>&1); st=$$?; \
	  if [ $$st -eq 0 ]; then echo "$$out" | tail -n 1; else echo "$$out" | tail -n 30; fi; exit $$st; \
	else \
	  echo "test-interop: Vowpal Wabbit parity SKIPPED: '$(INTEROP_PY) -c \"import vowpalwabbit\"' fails and pip could not install it"; \
	fi

vw-golden:
	$(INTEROP_PY) spec/data/gen/vw_golden.py --out spec/data
