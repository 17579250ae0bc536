# spec/interop.mk — parity with other trainers' libraries; included by the Makefile.
#
#   make test-interop     TensorFlow parity (spec/interop/tf_parity.py: train a linear_model layer and, with
#                         tf_keras installed, a Keras DenseFeatures -> Dense(1) model; export with
#                         scripts/tools/tf_export.py, score held-out raw rows, |p_wisp - p_tf| <= 1e-5)
#                         when `import tensorflow` works, and Fingerprint64 against Debian's
#                         libfarmhash (spec/interop/farmhash_check.cc) when libfarmhash-dev is
#                         installed; each is skipped with a message otherwise. Neither is part
#                         of `make test`: TensorFlow takes minutes to install
#                         (pip install tensorflow-cpu). The golden vectors TensorFlow produced
#                         (spec/data/tf_golden_*.json, spec/data/gen/tf_golden.py) are tested by `make test`.
#   make tf-golden        regenerate spec/data/tf_golden_*.json with the installed TensorFlow
#   (test-interop also)   Vowpal Wabbit parity (spec/interop/vw_parity.py: train logistic models with
#                         the vowpalwabbit PyPI package, -q interactions, --readable_model and
#                         --invert_hash, import with `wisp import vw`, score held-out lines with
#                         `wisp score --format vw`, |p_wisp - p_vw| <= 1e-5); installs vowpalwabbit
#                         with `$(INTEROP_PY) -m pip install vowpalwabbit` when missing, skipped with a
#                         message when that fails. VW's golden vectors (spec/data/vw_golden.json,
#                         spec/data/gen/vw_golden.py) are tested by `make test` (spec/c/test_vw.c).
#   make vw-golden        regenerate spec/data/vw_golden.json with the installed vowpalwabbit

INTEROP_PY ?= python3

.PHONY: test-interop tf-golden interop-farmhash interop-tf interop-vw vw-golden
test-interop: interop-farmhash interop-tf interop-vw

interop-tf: all
	@if $(INTEROP_PY) -c "import tensorflow" >/dev/null 2>&1; then \
	  out=$$(WISP_LIB=$(abspath $(BUILD))/libwisp.so TF_CPP_MIN_LOG_LEVEL=3 $(INTEROP_PY) spec/interop/tf_parity.py 2>&1); st=$$?; \
	  if [ $$st -eq 0 ]; then echo "$$out" | tail -n 1; else echo "$$out" | tail -n 30; fi; exit $$st; \
	else \
	  echo "test-interop: TensorFlow parity SKIPPED: '$(INTEROP_PY) -c \"import tensorflow\"' fails (pip install tensorflow-cpu)"; \
	fi

interop-farmhash: $(BUILD)/libwisp.a
	@if [ -f /usr/include/farmhash.h ]; then \
	  mkdir -p $(BUILD)/test && \
	  $(CXX) -O2 -Iengine/include -o $(BUILD)/test/farmhash_check spec/interop/farmhash_check.cc \
	    $(BUILD)/libwisp.a -lfarmhash $(CUDA_LIBS) $(LDLIBS) && $(BUILD)/test/farmhash_check; \
	else \
	  echo "test-interop: libfarmhash check SKIPPED: /usr/include/farmhash.h missing (apt-get install libfarmhash-dev)"; \
	fi

tf-golden:
	TF_CPP_MIN_LOG_LEVEL=3 $(INTEROP_PY) spec/data/gen/tf_golden.py --out spec/data 2>/dev/null

# A virtual environment with the trainers' packages, for CI (.ci/run): `make interop-venv`
# then `make test-interop INTEROP_PY=$(BUILD)/interop-venv/bin/python`. Fails (and CI skips
# the parity tests, saying so) when PyPI cannot be reached.
INTEROP_PIP_PKGS ?= "tensorflow-cpu==2.21.*" "tf_keras==2.21.*" "vowpalwabbit==9.*" numpy
.PHONY: interop-venv
interop-venv:
	$(call ensure_pkgs,python3 python3-venv)
	@[ -x $(BUILD)/interop-venv/bin/python ] || python3 -m venv $(BUILD)/interop-venv
	@echo "wisp: installing $(INTEROP_PIP_PKGS) into $(BUILD)/interop-venv (minutes)"
	@timeout 900 $(BUILD)/interop-venv/bin/pip install -q --disable-pip-version-check $(INTEROP_PIP_PKGS)

interop-vw: all
	@if ! $(INTEROP_PY) -c "import vowpalwabbit" >/dev/null 2>&1; then \
	  echo "test-interop: installing vowpalwabbit ($(INTEROP_PY) -m pip install vowpalwabbit)"; \
	  $(INTEROP_PY) -m pip install -q vowpalwabbit >/dev/null 2>&1 || true; \
	fi; \
	if $(INTEROP_PY) -c "import vowpalwabbit" >/dev/null 2>&1; then \
	  out=$$($(INTEROP_PY) spec/interop/vw_parity.py --wisp $(abspath $(BUILD))/wisp 2>&1); st=$$?; \
	  if [ $$st -eq 0 ]; then echo "$$out" | tail -n 1; else echo "$$out" | tail -n 30; fi; exit $$st; \
	else \
	  echo "test-interop: Vowpal Wabbit parity SKIPPED: '$(INTEROP_PY) -c \"import vowpalwabbit\"' fails and pip could not install it"; \
	fi

vw-golden:
	$(INTEROP_PY) spec/data/gen/vw_golden.py --out spec/data
