"""test_kserve_ref.py — KServe's reference server (kserve.ModelServer serving a scikit-learn logistic
regression, spec/v2/kserve_ref.py) as the protocol's reference for the shapes of wisp's answers: the
same keys with the same JSON types in server metadata, health, model metadata, model readiness, infer
answers and error answers (values differ: other models). Skipped, with the reason, when kserve did not
install (spec/v2/run.sh says so)."""
import os
import pathlib
import subprocess
import sys
import time

import pytest
import requests

from conftest import _free_port

HERE = pathlib.Path(__file__).resolve().parent

NO_KSERVE = os.environ.get("WISP_V2_NO_KSERVE")
try:
    import kserve  # noqa: F401
    import sklearn  # noqa: F401
except Exception as e:   # an import that fails for any reason: the specs skip and say why
    NO_KSERVE = NO_KSERVE or "kserve/scikit-learn do not import: %s" % e

pytestmark = pytest.mark.skipif(bool(NO_KSERVE), reason="KServe reference: %s" % NO_KSERVE)


@pytest.fixture(scope="module")
def kserve_url():
    port = _free_port()
    log = open(os.environ.get("TMPDIR", "/tmp") + "/wisp-kserve-ref-%d.log" % port, "w")
    p = subprocess.Popen([sys.executable, str(HERE / "kserve_ref.py"), str(port)], stdout=log, stderr=subprocess.STDOUT)
    url = "http://127.0.0.1:%d" % port
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            if p.poll() is not None:
                pytest.fail("kserve_ref.py exited with %s (log: %s)" % (p.returncode, log.name))
            try:
                if requests.get(url + "/v2/health/ready", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.2)
        else:
            pytest.fail("KServe's server did not become ready in 90 s (log: %s)" % log.name)
        yield url
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
        log.close()


def jtype(v):
    return {
        dict: "object",
        list: "array",
        str: "string",
        bool: "bool",
        int: "number",
        float: "number",
        type(None): "null",
    }[type(v)]


def same_shape(ref, got, where="$"):
    """every key KServe's answer has with a non-null value, wisp's has with the same JSON type (recursively;
    arrays: element by element over the common length). wisp may add keys (its "parameters")."""
    assert jtype(got) == jtype(ref), "%s: KServe %s, wisp %s (%r vs %r)" % (where, jtype(ref), jtype(got), ref, got)
    if isinstance(ref, dict):
        for k, v in ref.items():
            if v is None:
                continue
            assert k in got, "%s: KServe has key %r, wisp does not (wisp: %s)" % (where, k, sorted(got))
            same_shape(v, got[k], where + "." + k)
    elif isinstance(ref, list):
        for i, (a, b) in enumerate(zip(ref, got)):
            same_shape(a, b, "%s[%d]" % (where, i))


def test_server_metadata_and_health(kserve_url, v2_service):
    for path in ("/v2", "/v2/health/live", "/v2/health/ready"):
        ref, got = requests.get(kserve_url + path, timeout=10), v2_service.get(path)
        assert ref.status_code == got.status_code == 200, path
        same_shape(ref.json(), got.json(), path)
    assert set(requests.get(kserve_url + "/v2/health/live", timeout=10).json()) == set(
        v2_service.get("/v2/health/live").json()
    )


def test_model_metadata_and_ready(kserve_url, v2_service):
    ref = requests.get(kserve_url + "/v2/models/sk", timeout=10).json()
    for name in ("plain", "ctr"):
        got = v2_service.get("/v2/models/" + name).json()
        assert set(ref) <= set(got), (sorted(ref), sorted(got))
        same_shape(ref, got, name)
        for t in got["inputs"] + got["outputs"]:
            assert {"name", "datatype", "shape"} <= set(t)
            assert all(isinstance(d, int) for d in t["shape"])
    ref = requests.get(kserve_url + "/v2/models/sk/ready", timeout=10)
    got = v2_service.get("/v2/models/plain/ready")
    assert ref.status_code == got.status_code == 200
    assert set(ref.json()) == set(got.json())
    same_shape(ref.json(), got.json())


def test_infer_answer(kserve_url, v2_service):
    ref = requests.post(
        kserve_url + "/v2/models/sk/infer",
        timeout=10,
        json={
            "id": "r1",
            "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [2, 4], "data": [1, 2, 3, 4, 5, 6, 7, 8]}],
        },
    )
    got = v2_service.post("/v2/models/plain/infer", json={
        "id": "r1", "inputs": [{"name": "indptr", "datatype": "INT64", "shape": [3], "data": [0, 1, 3]},
                               {"name": "indices", "datatype": "INT32", "shape": [3], "data": [1, 2, 3]}]})
    assert ref.status_code == got.status_code == 200, (ref.text, got.text)
    r, g = ref.json(), got.json()
    same_shape({k: v for k, v in r.items() if k != "model_version"}, g)
    assert g["id"] == r["id"] == "r1"
    same_shape(r["outputs"][0], [o for o in g["outputs"] if o["name"] == "probability"][0])


@pytest.mark.parametrize("what", ["unknown model metadata", "unknown model ready", "unknown model infer", "bad input"])
def test_error_answers(kserve_url, v2_service, what):
    if what == "unknown model metadata":
        ref, got = requests.get(kserve_url + "/v2/models/nosuch", timeout=10), v2_service.get("/v2/models/nosuch")
    elif what == "unknown model ready":
        ref, got = requests.get(kserve_url + "/v2/models/nosuch/ready", timeout=10), v2_service.get(
            "/v2/models/nosuch/ready"
        )
    elif what == "unknown model infer":
        ref = requests.post(kserve_url + "/v2/models/nosuch/infer", json={"inputs": []}, timeout=10)
        got = v2_service.post("/v2/models/nosuch/infer", json={"inputs": []})
    else:    # a tensor of the wrong shape for the model
        ref = requests.post(kserve_url + "/v2/models/sk/infer", timeout=10,
                            json={"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [3], "data": [1, 2, 3]}]})
        got = v2_service.post(
            "/v2/models/plain/infer",
            json={
                "inputs": [
                    {"name": "indptr", "datatype": "INT64", "shape": [2], "data": [0, 1]},
                    {"name": "indices", "datatype": "INT32", "shape": [2, 1], "data": [[1], [2]]},
                ]
            },
        )
    assert ref.status_code == got.status_code, (what, ref.status_code, ref.text, got.status_code, got.text)
    assert set(ref.json()) == set(got.json()) == {"error"}, (ref.text, got.text)
    same_shape(ref.json(), got.json())
