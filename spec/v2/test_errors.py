"""test_errors.py — the v2 endpoints' protocol errors and health/metadata answers against a real nginx: every
malformed request gets its status and a JSON {"error": "..."} (never a 5xx, never a dead worker), the
health and readiness endpoints answer 200 true or 503 false (KServe's statuses), and tritonclient
raises InferenceServerException with the server's message."""
import json
import struct

import numpy as np
import pytest
import requests
import tritonclient.http as th
from tritonclient.utils import InferenceServerException


def ids_body(**over):
    b = {"inputs": [{"name": "indptr", "datatype": "INT64", "shape": [3], "data": [0, 1, 3]},
                    {"name": "indices", "datatype": "INT32", "shape": [3], "data": [1, 2, 3]}]}
    b.update(over)
    return b


def with_input(i, **over):
    b = ids_body()
    b["inputs"][i].update(over)
    return b


def binary(header, *bufs):
    h = json.dumps(header).encode()
    return h + b"".join(bufs), len(h)


def bin_ids_header(sizes, **extra):
    ins = [{"name": "indptr", "datatype": "INT64", "shape": [3], "parameters": {"binary_data_size": sizes[0]}},
           {"name": "indices", "datatype": "INT32", "shape": [3], "parameters": {"binary_data_size": sizes[1]}}]
    h = {"inputs": ins}
    h.update(extra)
    return h


IP = struct.pack("<3q", 0, 1, 3)
IX = struct.pack("<3i", 1, 2, 3)

# (label, model, json body | (bytes, header length or None | str), status, words in the message)
CASES = [
    ("bad JSON", "plain", (b'{"inputs": [', None), 400, "bad JSON"),
    ("not an object", "plain", (b"[1, 2]", None), 400, "inference request"),
    ("no inputs", "plain", {"outputs": []}, 400, "inputs"),
    ("empty inputs", "plain", {"inputs": []}, 400, "inputs"),
    ("id not a string", "plain", ids_body(id=7), 400, '"id"'),
    ("missing indices", "plain", {"inputs": [ids_body()["inputs"][0]]}, 400, "indices"),
    (
        "unknown input",
        "plain",
        ids_body(inputs=ids_body()["inputs"] + [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}]),
        400,
        "unknown input 'x'",
    ),
    ("input twice", "plain", ids_body(inputs=ids_body()["inputs"] * 2), 400, "twice"),
    ("unknown datatype", "plain", with_input(1, datatype="INT33"), 400, "unknown datatype"),
    ("datatype wisp does not read", "plain", with_input(1, datatype="UINT8"), 400, "not one wisp reads"),
    ("FP32 indices", "plain", with_input(1, datatype="FP32", data=[1.0, 2.0, 3.0]), 400, "INT32 or INT64"),
    ("FP32 indptr", "plain", with_input(0, datatype="FP32", data=[0.0, 1.0, 3.0]), 400, "INT64 or INT32"),
    ("shape vs data", "plain", with_input(1, shape=[4]), 400, "holds 4 elements"),
    ("negative dimension", "plain", with_input(1, shape=[-3]), 400, "non-negative"),
    ("2-D indices", "plain", with_input(1, shape=[3, 1], data=[[1], [2], [3]]), 400, "1-D"),
    ("no data", "plain", {"inputs": [{"name": "indptr", "datatype": "INT64", "shape": [1]}]}, 400, "no \"data\""),
    ("a string in INT32 data", "plain", with_input(1, data=[1, "2", 3]), 400, "a number expected"),
    ("a fraction in INT32 data", "plain", with_input(1, data=[1, 2.5, 3]), 400, "an integer expected"),
    ("INT32 out of range", "plain", with_input(1, data=[1, 2**31, 3]), 400, "range of INT32"),
    ("indptr not from 0", "plain", with_input(0, data=[1, 1, 3]), 400, "0 expected"),
    ("indptr decreasing", "plain", with_input(0, data=[0, 2, 1]), 400, "must not decrease"),
    ("indptr past nnz", "plain", with_input(0, data=[0, 1, 4]), 400, "has 3 elements"),
    (
        "values count",
        "plain",
        ids_body(inputs=ids_body()["inputs"] + [{"name": "values", "datatype": "FP32", "shape": [2], "data": [1, 2]}]),
        400,
        "one value per index",
    ),
    (
        "FP64 values",
        "plain",
        ids_body(
            inputs=ids_body()["inputs"] + [{"name": "values", "datatype": "FP64", "shape": [3], "data": [1, 2, 3]}]
        ),
        400,
        "FP32 expected",
    ),
    (
        "zero rows",
        "plain",
        {
            "inputs": [
                {"name": "indptr", "datatype": "INT64", "shape": [1], "data": [0]},
                {"name": "indices", "datatype": "INT32", "shape": [0], "data": []},
            ]
        },
        400,
        "empty request",
    ),
    ("unknown output", "plain", ids_body(outputs=[{"name": "logit"}]), 400, "unknown output 'logit'"),
    ("output twice", "plain", ids_body(outputs=[{"name": "probability"}, {"name": "probability"}]), 400, "twice"),
    (
        "class_count",
        "plain",
        ids_body(outputs=[{"name": "probability", "parameters": {"class_count": 2}}]),
        400,
        "classification",
    ),
    (
        "binary_data_output not a bool",
        "plain",
        ids_body(parameters={"binary_data_output": "yes"}),
        400,
        "binary_data_output",
    ),
    (
        "binary without the header",
        "plain",
        (binary(bin_ids_header([24, 12]), IP, IX)[0], None),
        400,
        "Inference-Header-Content-Length",
    ),
    (
        "binary_data_size without the header",
        "plain",
        (json.dumps(bin_ids_header([24, 12])).encode(), None),
        400,
        "Inference-Header-Content-Length",
    ),
    ("binary size vs shape", "plain", binary(bin_ids_header([24, 8]), IP, IX[:8]), 400, "binary_data_size says 8"),
    ("binary past the body", "plain", binary(bin_ids_header([24, 16]), IP, IX), 400, "runs past the body"),
    ("trailing binary bytes", "plain", binary(bin_ids_header([24, 12]), IP, IX, b"xx"), 400, "add up to"),
    (
        "header length not a number",
        "plain",
        (binary(bin_ids_header([24, 12]), IP, IX)[0], "12a"),
        400,
        "positive integer",
    ),
    (
        "header length past the body",
        "plain",
        (binary(bin_ids_header([24, 12]), IP, IX)[0], "100000"),
        400,
        "longer than the body",
    ),
    (
        "data and binary_data_size",
        "plain",
        binary(
            {
                "inputs": [
                    {
                        "name": "indptr",
                        "datatype": "INT64",
                        "shape": [3],
                        "data": [0, 1, 3],
                        "parameters": {"binary_data_size": 24},
                    }
                ]
            },
            IP,
        ),
        400,
        "both",
    ),
    (
        "BYTES element past its tensor",
        "ctr",
        binary(
            {"inputs": [{"name": "city", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 6}}]},
            struct.pack("<I", 9) + b"ab",
        ),
        400,
        "runs past",
    ),
    (
        "BYTES with bytes left over",
        "ctr",
        binary(
            {"inputs": [{"name": "city", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 8}}]},
            struct.pack("<I", 2) + b"abcd",
        ),
        400,
        "take 6 bytes",
    ),
    (
        "column: unknown input",
        "ctr",
        {"inputs": [{"name": "nosuch", "datatype": "FP32", "shape": [1], "data": [1]}]},
        400,
        "unknown input 'nosuch'",
    ),
    (
        "column: BYTES for a float input",
        "ctr",
        {"inputs": [{"name": "age", "datatype": "BYTES", "shape": [1], "data": ["x"]}]},
        400,
        "is float32",
    ),
    (
        "column: FP32 for a string input",
        "ctr",
        {"inputs": [{"name": "city", "datatype": "FP32", "shape": [1], "data": [1]}]},
        400,
        "is string",
    ),
    (
        "column: a number in BYTES data",
        "ctr",
        {"inputs": [{"name": "city", "datatype": "BYTES", "shape": [1], "data": [5]}]},
        400,
        "a string expected",
    ),
    (
        "column: dense [n, 2]",
        "ctr",
        {"inputs": [{"name": "age", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]},
        400,
        "dense",
    ),
    (
        "column: 3-D",
        "ctr",
        {"inputs": [{"name": "tags", "datatype": "BYTES", "shape": [1, 1, 1], "data": ["a"]}]},
        400,
        "shape",
    ),
    (
        "column: rows disagree",
        "ctr",
        {
            "inputs": [
                {"name": "age", "datatype": "FP32", "shape": [2], "data": [1, 2]},
                {"name": "city", "datatype": "BYTES", "shape": [3], "data": ["a", "b", "c"]},
            ]
        },
        400,
        "disagree",
    ),
    (
        "column: NAME_indptr alone",
        "ctr",
        {"inputs": [{"name": "age_indptr", "datatype": "INT64", "shape": [2], "data": [0, 0]}]},
        400,
        "without the input",
    ),
    (
        "column: ragged values 2-D",
        "ctr",
        {
            "inputs": [
                {"name": "tags", "datatype": "BYTES", "shape": [1, 1], "data": ["a"]},
                {"name": "tags_indptr", "datatype": "INT64", "shape": [2], "data": [0, 1]},
            ]
        },
        400,
        "1-D",
    ),
    (
        "column: ragged indptr past the values",
        "ctr",
        {
            "inputs": [
                {"name": "tags", "datatype": "BYTES", "shape": [1], "data": ["a"]},
                {"name": "tags_indptr", "datatype": "INT64", "shape": [2], "data": [0, 2]},
            ]
        },
        400,
        "has 1 elements",
    ),
    (
        "column: INT64 beyond INT64 in JSON",
        "ctr",
        {"inputs": [{"name": "uid", "datatype": "INT64", "shape": [1], "data": [2**63]}]},
        400,
        "range of INT64",
    ),
    (
        "column: INT64 below INT64 in JSON",
        "ctr",
        {"inputs": [{"name": "uid", "datatype": "INT64", "shape": [1], "data": [-(2**63) - 1]}]},
        400,
        "range of INT64",
    ),
    (
        "column: INT64 given as 1e17",
        "ctr",
        (b'{"inputs": [{"name": "uid", "datatype": "INT64", "shape": [1], "data": [1e17]}]}', None),
        400,
        "2^53",
    ),
    ("a fraction in INT64 data", "plain", with_input(0, data=[0, 1.5, 3]), 400, "an integer expected"),
    (
        "a trailing comma in data",
        "plain",
        (b'{"inputs": [{"name": "indptr", "datatype": "INT64", "shape": [3], "data": [0, 1, 3,]}]}', None),
        400,
        "bad JSON",
    ),
    ("null in data", "plain", with_input(1, data=[1, None, 3]), 400, "a number expected"),
    (
        "column: zero rows",
        "ctr",
        {"inputs": [{"name": "age", "datatype": "FP32", "shape": [0], "data": []}]},
        400,
        "empty request",
    ),
    (
        "column: every row bad",
        "ctr",
        {
            "inputs": [
                {"name": "age", "datatype": "FP32", "shape": [2], "data": [1, 2]},
                {"name": "age_indptr", "datatype": "INT64", "shape": [3], "data": [0, 2, 2]},
                {"name": "city", "datatype": "BYTES", "shape": [2], "data": ["a", "b"]},
                {"name": "city_indptr", "datatype": "INT64", "shape": [3], "data": [0, 1, 2]},
            ]
        },
        200,
        "",
    ),
]


@pytest.mark.parametrize("label,model,body,status,words", CASES, ids=[c[0] for c in CASES])
def test_protocol_error(v2_service, label, model, body, status, words):
    headers = {}
    if isinstance(body, tuple):
        data, hl = body
        if hl is not None:
            headers["Inference-Header-Content-Length"] = str(hl)
        headers["Content-Type"] = "application/octet-stream"
        r = v2_service.post("/v2/models/%s/infer" % model, data=data, headers=headers)
    else:
        r = v2_service.post("/v2/models/%s/infer" % model, json=body)
    if status == 200:                 # (the last case: a dense input given 2 values is a bad row; row 1 scores)
        assert r.status_code == 200, r.text
        assert [o for o in r.json()["outputs"] if o["name"] == "bad_rows"][0]["data"] == [0]
        return
    assert r.status_code == status, (label, r.status_code, r.text)
    doc = r.json()
    assert set(doc) == {"error"} and isinstance(doc["error"], str), doc
    assert words in doc["error"], (label, doc["error"])


def test_routes_statuses(v2_service):
    s = v2_service
    r = s.post("/v2/models/nosuch/infer", json=ids_body())
    assert r.status_code == 404 and "unknown model 'nosuch'" in r.json()["error"]
    assert s.get("/v2/models/nosuch").status_code == 404
    assert s.get("/v2/models/nosuch/ready").status_code == 404
    r = s.post("/v2/models/plain/versions/7/infer", json=ids_body())
    assert r.status_code == 404 and "error" in r.json()
    assert s.get("/v2/models/plain/versions/7").status_code == 404
    assert s.get("/v2/models/plain/versions/7/ready").status_code == 404
    r = s.get("/v2/models/plain/infer")
    assert r.status_code == 405 and r.headers["Allow"] == "POST" and "error" in r.json()
    assert s.post("/v2/models/plain", json={}).status_code == 405
    assert s.post("/v2/health/live").status_code == 405
    assert s.post("/v2").status_code == 405
    for p in ("/v2/foo", "/v2/models/plain/explain", "/v2/models/plain/versions/1/x/infer", "/v2/models/"):
        r = s.get(p)
        assert r.status_code == 404 and "error" in r.json(), p
    r = s.post("/v2/models/plain/infer", data=b"")
    assert r.status_code == 400 and "empty" in r.json()["error"]
    r = s.post("/v2/models/plain/infer", data=b"x", headers={"Content-Encoding": "gzip"})
    assert r.status_code == 415 and "error" in r.json()
    # the row limit: more rows than max_rows_per_request (10000, serve.sh's default) -> 413
    n = 10001
    body = {"inputs": [{"name": "indptr", "datatype": "INT64", "shape": [n + 1], "data": list(range(n + 1))},
                       {"name": "indices", "datatype": "INT32", "shape": [n], "data": [1] * n}]}
    r = s.post("/v2/models/plain/infer", json=body)
    assert r.status_code == 413 and "too many rows" in r.json()["error"]
    # HEAD on the GET endpoints
    assert s.session.head(s.url("/v2/health/ready"), timeout=10).status_code == 200
    assert s.alive()


def test_health_and_server_metadata(v2_service):
    s = v2_service
    assert s.get("/v2/health/live").json() == {"live": True}
    assert s.get("/v2/health/ready").json() == {"ready": True}
    md = s.get("/v2").json()
    assert md["name"] == "wisp" and isinstance(md["version"], str)
    assert "binary_tensor_data" in md["extensions"]
    r = s.get("/v2/models/plain/ready")
    assert r.status_code == 200 and r.json() == {"name": "plain", "ready": True}
    assert s.get("/v2/models/plain/versions/1/ready").status_code == 200
    md = s.get("/v2/models/plain").json()
    assert md["name"] == "plain" and md["platform"] == "wisp" and md["versions"] == ["1"]
    for t in md["inputs"] + md["outputs"]:
        assert isinstance(t["name"], str) and isinstance(t["datatype"], str) and isinstance(t["shape"], list)
    assert md["parameters"]["features"] == 5000
    assert s.get("/v2/models/plain/versions/1").json()["inputs"] == md["inputs"]


def test_not_ready_model_and_server(wisp_service, v2_models, tmp_path):
    missing = tmp_path / "late.wisp"
    svc = wisp_service(models={"plain": v2_models / "plain.wisp", "late": missing}, wait_ready=False)
    # not ready: 503 and an "error", as KServe's reference server answers (and v1's /readyz)
    r = svc.get("/v2/health/ready")
    assert r.status_code == 503 and r.json()["ready"] is False and r.json()["error"]
    r = svc.get("/v2/models/late/ready")
    assert r.status_code == 503 and r.json()["ready"] is False and r.json()["name"] == "late" and r.json()["error"]
    r = svc.post("/v2/models/late/infer", json=ids_body())
    assert r.status_code in (400, 503) and "error" in r.json()
    assert svc.get("/v2/models/plain/ready").status_code == 200
    c = th.InferenceServerClient("127.0.0.1:%d" % svc.port)
    assert c.is_server_live() and not c.is_server_ready() and not c.is_model_ready("late") and c.is_model_ready("plain")


def test_tritonclient_raises_the_servers_message(v2_service):
    c = th.InferenceServerClient("127.0.0.1:%d" % v2_service.port)
    a = th.InferInput("indptr", [3], "INT64")
    a.set_data_from_numpy(np.array([0, 2, 1], dtype=np.int64))
    b = th.InferInput("indices", [2], "INT32")
    b.set_data_from_numpy(np.array([1, 2], dtype=np.int32))
    with pytest.raises(InferenceServerException) as ei:
        c.infer("plain", [a, b])
    assert "must not decrease" in str(ei.value) and ei.value.status() == "400"
    with pytest.raises(InferenceServerException) as ei:
        c.infer("nosuch", [a, b])
    assert ei.value.status() == "404"
    with pytest.raises(InferenceServerException):
        c.get_model_metadata("nosuch")
    assert c.is_server_live()


def test_admin_listener_and_repository_routes(wisp_service, v2_models):
    svc = wisp_service(models={"plain": v2_models / "plain.wisp"}, admin=True)
    r = svc.post("/v2/repository/index", json={})
    assert r.status_code == 403 and "admin listener" in r.json()["error"]
    assert svc.post("/v2/repository/models/plain/load").status_code == 403
    assert svc.post("/v2/repository/models/plain/unload").status_code == 403
    # inference stays on the inference listener
    assert svc.post("/v2/models/plain/infer", json=ids_body()).status_code == 200
    r = svc.session.post(svc.admin_url("/v2/repository/index"), json={}, timeout=10)
    assert r.status_code in (200, 501), r.text
    if r.status_code == 200:
        idx = r.json()
        assert isinstance(idx, list) and any(m["name"] == "plain" for m in idx)
        for m in idx:
            assert set(m) <= {"name", "version", "state", "reason"} and "name" in m
    assert svc.session.get(svc.admin_url("/v2/repository/index"), timeout=10).status_code == 405
    r = svc.session.post(svc.admin_url("/v2/repository/models/plain/reload"), timeout=10)
    assert r.status_code == 404
    r = svc.session.post(svc.admin_url("/v2/repository/index"), data=b"[1", timeout=10)
    assert r.status_code == 400 and "error" in r.json()


def test_no_5xx_and_no_dead_worker_after_garbage(v2_service):
    """random mutations of valid requests: never a 5xx, every answer JSON, the workers alive"""
    import random
    rng = random.Random(5)
    base = json.dumps(ids_body(outputs=[{"name": "probability"}]))
    data, hl = binary(bin_ids_header([24, 12]), IP, IX)
    for i in range(300):
        if i % 2:
            s = bytearray(base.encode())
        else:
            s = bytearray(data)
        for _ in range(rng.randint(1, 6)):
            k = rng.randrange(len(s))
            op = rng.random()
            if op < 0.4:
                s[k] = rng.randrange(256)
            elif op < 0.7:
                del s[k]
            else:
                s[k:k] = bytes([rng.randrange(256)])
        headers = {} if i % 2 else {"Inference-Header-Content-Length": str(rng.choice([hl, hl - 1, hl + 1, len(s)]))}
        r = v2_service.post(
            "/v2/models/%s/infer" % rng.choice(["plain", "ctr", "tiny"]), data=bytes(s), headers=headers
        )
        assert r.status_code < 500, (i, r.status_code, r.text, bytes(s))
        if r.status_code != 200 or "Inference-Header-Content-Length" not in r.headers:
            json.loads(r.text)
    assert v2_service.alive()
