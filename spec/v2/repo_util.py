"""spec/v2/repo_util.py — helpers of the model-repository specs (test_versions.py, test_repository.py,
test_openapi.py): a MODELS/name/N/model.wisp tree built from spec/v2/models.lua's files, versions
added and removed as an operator would (a staged directory renamed in), the served versions read
from /metrics, rows and the answers each version gives them.
"""
import os
import pathlib
import re
import shutil
import time

# the device the services of these specs score on, as conftest.py's: cpu, or gpu with
# WISP_V2_DEVICE=gpu (or its 0.1.x name WISP_OIP_DEVICE) or WISP_TEST_GPU=1 (the warm-up then runs on the GPU;
# probabilities must still equal the CLI's CPU ones to 1e-6)
DEVICE = (
    os.environ.get("WISP_V2_DEVICE")
    or os.environ.get("WISP_OIP_DEVICE")
    or ("gpu" if os.environ.get("WISP_TEST_GPU") == "1" else "cpu")
)
WANT_DEV = "cpu" if DEVICE == "cpu" else "gpu:0"

# libsvm rows for the id models (plain.wisp: 5000 features): empty rows, duplicate ids, the
# table's edges (0, 4999) and an id beyond it (ignored, as libsvm's)
ROWS = "\n".join([
    "0 1:0.5 3 4999:2",
    "0 7",
    "1",
    "0 0 0 17:1.5",
    "0 4998:0.25 4999 5000:3",
    "1 12 45 678 910:0.75 2222",
]) + "\n"


def make_repo(root, models):
    """make_repo(root, {"name": {1: path, 2: path, ...}, ...}[, config]) -> pathlib.Path(root).

    Each version's file is copied to root/name/N/model.wisp; the directories are mode 755 so
    that nginx workers started by root as nobody read them."""
    root = pathlib.Path(root)
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    for name, versions in models.items():
        d = root / name
        d.mkdir(exist_ok=True)
        os.chmod(d, 0o755)
        for v, path in versions.items():
            add_version(root, name, v, path)
    return root


def add_version(root, name, v, path):
    """Version v of model name, as an operator adds it: the file written into a hidden staging
    directory beside the versions, then the directory renamed to v (one rename: the service never
    sees a version directory without its model.wisp)."""
    d = pathlib.Path(root) / name
    stage = d / (".stage-%s" % v)
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir()
    shutil.copyfile(path, stage / "model.wisp")
    os.chmod(stage, 0o755)
    os.chmod(stage / "model.wisp", 0o644)
    os.rename(stage, d / str(v))


def remove_version(root, name, v):
    shutil.rmtree(pathlib.Path(root) / name / str(v))


def write_config(root, name, text):
    """MODELS/name/config.json, written by rename."""
    d = pathlib.Path(root) / name
    tmp = d / ".config.json.tmp"
    tmp.write_text(text)
    os.chmod(tmp, 0o644)
    os.rename(tmp, d / "config.json")


def metrics_text(svc):
    r = svc.session.get(svc.admin_url("/metrics"), timeout=10)
    assert r.status_code == 200, r.text
    return r.text


def served_versions(text, model):
    """The versions /metrics says are served (wisp_model_version_ready ... 1) for model."""
    out = set()
    for m in re.finditer(
        r'^wisp_model_version_ready\{model="%s",version="([^"]+)"\} 1$' % re.escape(model), text, re.M
    ):
        out.add(m.group(1))
    return out


def wait_for(cond, timeout=10.0, step=0.05):
    """Poll cond() until it is truthy (returns it) or timeout (returns the last value)."""
    deadline = time.time() + timeout
    v = cond()
    while not v and time.time() < deadline:
        time.sleep(step)
        v = cond()
    return v


def predict_v1(svc, model, rows=ROWS, session=None):
    s = session or svc.session
    return s.post(svc.url("/v1/models/%s:predict" % model), data=rows, headers={"Content-Type": "text/x-libsvm"},
                  timeout=30)


def same(a, b, tol=1e-6):
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b))


def which(preds, answers):
    """The names in answers ({name: [p, ...]}) whose probabilities preds equals, as a sorted list."""
    return sorted(k for k, v in answers.items() if same(preds, v))
