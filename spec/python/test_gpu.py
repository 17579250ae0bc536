"""test_gpu.py — on a CUDA device the package's sessions answer as the CPU does (skipped without a usable GPU or in a CPU-only build).

The package is CPU-only unless built with an nvcc: on a GPU machine run
    WISP_PY_NVCC=/usr/local/cuda/bin/nvcc WISP_BUILD=build sh spec/python/run.sh
"""
import numpy as np
import pytest
import scipy.sparse as sp

import wisp
from conftest import NUM_FEATURES, make_rows

_gpus = [d for d in wisp.devices() if d["device"] != "cpu" and d["usable"]]
pytestmark = pytest.mark.skipif(not _gpus, reason="no usable CUDA device (%s)" % wisp.devices()[0]["gpu_status"])


@pytest.mark.parametrize("device", ["gpu", "gpus"])
def test_gpu_agrees_with_cpu(model_path, device):
    m = wisp.load(model_path)
    indptr, indices, values = make_rows(20000, seed=21)
    X = sp.csr_matrix((values, indices, indptr), shape=(20000, NUM_FEATURES + 50))
    want = m.session("cpu").score(X)
    s = m.session(device)
    got = s.score(X)
    assert s.last_device.startswith("gpu"), s.last_device
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert s.stats()["fallbacks"] == 0
    assert s.stats()["out_of_range"] == int(np.sum(indices >= NUM_FEATURES + 1))


def test_gpu_bad_rows_as_on_cpu(model_path):
    m = wisp.load(model_path)
    indptr = np.array([0, 2, 3, 5, 6], dtype=np.int32)
    indices = np.array([1, 2, -5, 7, 8, 9], dtype=np.int32)   # -5: read in place, found by the counter
    values = np.array([1, 1, 1, np.nan, 1, 1], dtype=np.float32)
    cpu, gpu = m.session("cpu"), m.session("gpu")
    pc, pg = cpu.score((indptr, indices, values)), gpu.score((indptr, indices, values))
    assert gpu.last_device.startswith("gpu")
    assert [r for r, _ in gpu.last_errors] == [r for r, _ in cpu.last_errors] == [1, 2]
    np.testing.assert_array_equal(np.isnan(pg), np.isnan(pc))
    np.testing.assert_allclose(pg[[0, 3]], pc[[0, 3]], rtol=0, atol=1e-6)
