"""conftest.py — fixtures of the Python package's specs: the wisp CLI, a LIBLINEAR model imported by it, random rows.

The reference for every score is `wisp score -d cpu` (the CLI named by
$WISP_CLI, set by spec/python/run.sh) on the same rows written as libsvm
text: the package must print the same float32 probabilities.
"""
import math
import os
import random
import subprocess

import numpy as np
import pytest

NUM_FEATURES = 1000      # LIBLINEAR nr_feature: ids 1..1000 (id 0 has weight 0)


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("WISP_CLI")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("WISP_CLI must name the wisp CLI (spec/python/run.sh sets it to $WISP_BUILD/wisp)")
    return path


@pytest.fixture(scope="session")
def model_path(cli, tmp_path_factory):
    """A LIBLINEAR L2R_LR model (labels "1 -1", bias feature) imported with `wisp import liblinear`."""
    d = tmp_path_factory.mktemp("model")
    rnd = random.Random(15)
    txt = d / "model.txt"
    with open(txt, "w") as f:
        f.write("solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature %d\nbias 1\nw\n" % NUM_FEATURES)
        for _ in range(NUM_FEATURES + 1):
            f.write("%.17g \n" % rnd.gauss(0, 0.7))
    out = d / "model.wisp"
    subprocess.run([cli, "import", "liblinear", str(txt), str(out)], check=True, capture_output=True)
    return str(out)


def make_rows(n, seed, max_id=NUM_FEATURES + 50):
    """n rows of sorted unique ids in [0, max_id) (some beyond the model's
    table) with float32 values; returns (indptr int32, indices int32, values float32)."""
    rng = np.random.default_rng(seed)
    indptr = [0]
    idx, val = [], []
    for _ in range(n):
        k = int(rng.integers(0, 30))
        ids = np.sort(rng.choice(max_id, size=k, replace=False))
        idx.extend(ids.tolist())
        val.extend(rng.normal(0, 1.5, size=k).astype(np.float32).tolist())
        indptr.append(len(idx))
    return (np.array(indptr, dtype=np.int32), np.array(idx, dtype=np.int32), np.array(val, dtype=np.float32))


def libsvm_text(indptr, indices, values=None):
    """The rows as libsvm text ("%.9g" round-trips float32 exactly); bare ids when values is None."""
    lines = []
    for r in range(len(indptr) - 1):
        a, z = indptr[r], indptr[r + 1]
        if values is None:
            feats = ["%d" % indices[k] for k in range(a, z)]
        else:
            feats = ["%d:%.9g" % (indices[k], values[k]) for k in range(a, z)]
        lines.append(" ".join(["0"] + feats))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def cli_score(cli, model_path, tmp_path_factory):
    """cli_score(text) -> numpy array of the lines `wisp score -d cpu` prints for the text (strings)."""
    d = tmp_path_factory.mktemp("cli")
    counter = [0]

    def run(text):
        counter[0] += 1
        f = d / ("rows%d.libsvm" % counter[0])
        f.write_text(text)
        r = subprocess.run([cli, "score", "-d", "cpu", "-m", model_path, str(f)], capture_output=True, text=True)
        return np.array(r.stdout.split())
    return run


def cli_format(p):
    """Probabilities as `wisp score` prints them (engine/cli/cli.c fmt_prob):
    9 decimals in [0.001, 1], %.9g below, "nan"."""
    out = []
    for v in np.asarray(p, dtype=np.float32).tolist():
        if math.isnan(v):
            out.append("nan")
        elif 0.001 <= v <= 1.0:
            x = math.floor(v * 1e9 + 0.5)     # llround of a positive value
            out.append("1.000000000" if x >= 1000000000 else "0.%09d" % x)
        else:
            out.append("%.9g" % v)
    return np.array(out)
