"""test_infer.py — POST /v2/models/NAME[/versions/V]/infer against a real nginx: the probabilities equal
`wisp score`'s on random rows through every form (raw JSON, tritonclient.http JSON and binary, INT32 and
INT64 offsets and ids, nested JSON data, requested outputs), id models and column models (dense, sparse,
ragged, missing values, int64 beyond 2^53), and the bad rows (NaN + bad_rows + bad_row_reasons) agree
with v1's answers on the same rows."""
import json
import math
import random
import time
import re

import numpy as np
import pytest
import requests
import tritonclient.http as th
from tritonclient.utils import InferenceServerException

PLAIN_F = 5000      # spec/v2/models.lua: plain.wisp's features


def close(got, want, tol=1e-6):
    assert len(got) == len(want), (got, want)
    for i, (g, w) in enumerate(zip(got, want)):
        if math.isnan(w):
            assert g is None or math.isnan(g), (i, g, w)
        else:
            assert g is not None and abs(g - w) <= tol, (i, g, w)


def rand_id_rows(rng, n, nf=PLAIN_F, valued=True):
    """rows of (ids, vals or None): empty rows, duplicate ids, ids at the table's edges and beyond it"""
    rows = []
    for _ in range(n):
        k = rng.choice([0, 1, 2, 5, 17, 40]) if rng.random() < 0.9 else rng.randint(0, 60)
        ids = []
        for _ in range(k):
            r = rng.random()
            ids.append(
                0 if r < 0.05 else nf - 1 if r < 0.1 else nf + rng.randint(0, 3) if r < 0.13 else rng.randrange(nf)
            )
        if ids and rng.random() < 0.2:
            ids.append(ids[0])                       # a duplicate id
        vals = [round(rng.uniform(-3, 3), 4) for _ in ids] if valued and rng.random() < 0.7 else None
        rows.append((ids, vals))
    return rows


def libsvm(rows):
    out = []
    for ids, vals in rows:
        if vals is None:
            out.append(" ".join(["0"] + ["%d:1" % i for i in ids]))
        else:
            out.append(" ".join(["0"] + ["%d:%.9g" % (i, v) for i, v in zip(ids, vals)]))
    return "\n".join(out) + "\n"


def csr(rows, all_valued):
    indptr, indices, values = [0], [], []
    for ids, vals in rows:
        indices += ids
        values += (vals if vals is not None else [1.0] * len(ids))
        indptr.append(len(indices))
    return indptr, indices, (values if all_valued else None)


def v2_json_body(indptr, indices, values, ip_dt="INT64", ix_dt="INT32", **extra):
    ins = [{"name": "indptr", "datatype": ip_dt, "shape": [len(indptr)], "data": indptr},
           {"name": "indices", "datatype": ix_dt, "shape": [len(indices)], "data": indices}]
    if values is not None:
        ins.append({"name": "values", "datatype": "FP32", "shape": [len(values)], "data": values})
    body = {"inputs": ins}
    body.update(extra)
    return body


def probs_of(answer):
    out = {o["name"]: o for o in answer["outputs"]}
    return out["probability"]["data"], out.get("bad_rows", {}).get("data")


@pytest.fixture(scope="module")
def client(v2_service):
    return th.InferenceServerClient("127.0.0.1:%d" % v2_service.port)


def triton_inputs(indptr, indices, values, binary, ip_dt="INT64", ix_dt="INT32"):
    npt = {"INT64": np.int64, "INT32": np.int32}
    a = th.InferInput("indptr", [len(indptr)], ip_dt)
    a.set_data_from_numpy(np.array(indptr, dtype=npt[ip_dt]), binary_data=binary)
    b = th.InferInput("indices", [len(indices)], ix_dt)
    b.set_data_from_numpy(np.array(indices, dtype=npt[ix_dt]), binary_data=binary)
    ins = [a, b]
    if values is not None:
        c = th.InferInput("values", [len(values)], "FP32")
        c.set_data_from_numpy(np.array(values, dtype=np.float32), binary_data=binary)
        ins.append(c)
    return ins


# ---- id models: every form equals wisp score ----------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_id_model_every_form_equals_cli(v2_service, v2_models, wisp_score, client, seed):
    rng = random.Random(1000 + seed)
    n = rng.choice([1, 2, 7, 100, 257])
    all_valued = seed % 2 == 0
    rows = rand_id_rows(rng, n, valued=True)
    if all_valued:
        rows = [(ids, vals if vals is not None else [round(rng.uniform(-2, 2), 3) for _ in ids]) for ids, vals in rows]
    else:
        rows = [(ids, None) for ids, _ in rows]
    want = wisp_score(v2_models / "plain.wisp", libsvm(rows))
    assert len(want) == n
    indptr, indices, values = csr(rows, all_valued)
    # raw JSON, INT64/INT32 and INT32/INT64
    for ip_dt, ix_dt in (("INT64", "INT32"), ("INT32", "INT64")):
        r = v2_service.post(
            "/v2/models/plain/infer", json=v2_json_body(indptr, indices, values, ip_dt, ix_dt, id="q%d" % seed)
        )
        assert r.status_code == 200, r.text
        a = r.json()
        assert a["model_name"] == "plain" and a["model_version"] == "1" and a["id"] == "q%d" % seed
        p, bad = probs_of(a)
        assert bad == []
        close(p, want)
    # the version in the path
    r = v2_service.post("/v2/models/plain/versions/1/infer", json=v2_json_body(indptr, indices, values))
    assert r.status_code == 200, r.text
    close(probs_of(r.json())[0], want)
    # tritonclient: binary inputs and outputs (its default), JSON inputs and outputs, mixed
    for bin_in, bin_out in ((True, True), (False, False), (True, False), (False, True)):
        for ip_dt, ix_dt in (("INT64", "INT32"), ("INT32", "INT64")):
            outs = [
                th.InferRequestedOutput("probability", binary_data=bin_out),
                th.InferRequestedOutput("bad_rows", binary_data=bin_out),
            ]
            res = client.infer("plain", triton_inputs(indptr, indices, values, bin_in, ip_dt, ix_dt), outputs=outs,
                               request_id="t%d" % seed, model_version="1" if seed % 3 == 0 else "")
            got = res.as_numpy("probability")
            assert got.dtype == np.float32 and got.shape == (n,)
            close([float(x) for x in got], want)
            assert res.as_numpy("bad_rows").shape == (0,)
            assert res.get_response()["id"] == "t%d" % seed
    # no outputs named: every output, binary (tritonclient asks binary_data_output)
    res = client.infer("plain", triton_inputs(indptr, indices, values, True))
    close([float(x) for x in res.as_numpy("probability")], want)
    assert res.as_numpy("bad_rows").dtype == np.int64


def test_ids_at_and_beyond_the_table_edge(v2_service, v2_models, wisp_score, client):
    rows = [
        ([0], [1.0]),
        ([9], [2.5]),
        ([10], [1.0]),
        ([11, 10**6], [1.0, 1.0]),
        ([], None),
        ([9, 9, 0], [1.0, -1.0, 0.5]),
    ]
    want = wisp_score(v2_models / "tiny.wisp", libsvm(rows))
    indptr, indices, values = csr(rows, True)
    res = client.infer("tiny", triton_inputs(indptr, indices, values, True, "INT64", "INT64"))
    close([float(x) for x in res.as_numpy("probability")], want)
    # ids beyond 2^32 (INT64, binary): ignored as out of range, like any id past the table
    big = [[2 ** 33, 2 ** 62, 3]]
    res = client.infer("tiny", triton_inputs([0, 3], big[0], [1.0, 1.0, 1.0], True, "INT64", "INT64"))
    close([float(x) for x in res.as_numpy("probability")], wisp_score(v2_models / "tiny.wisp", "0 3:1\n"))


# ---- bad rows ----------------------------------------------------------------------------------

def test_bad_rows_nan_bad_rows_and_reasons_match_v1(v2_service, v2_models, wisp_score, client):
    rows = [([1, 2], [0.5, 1.0]), ([3, -4], [1.0, 1.0]), ([7], [1e39]), ([4999], [2.0]), ([5], [1.0])]
    good = [r if i not in (1, 2) else ([], None) for i, r in enumerate(rows)]
    want = wisp_score(v2_models / "plain.wisp", libsvm(good))
    want[1] = want[2] = math.nan
    indptr, indices, values = csr(rows, True)
    r = v2_service.post("/v2/models/plain/infer", json=v2_json_body(indptr, indices, values))
    assert r.status_code == 200, r.text
    a = r.json()
    p, bad = probs_of(a)
    close(p, want)
    assert bad == [1, 2]
    reasons = json.loads(a["parameters"]["bad_row_reasons"])
    assert [x["index"] for x in reasons] == [1, 2]
    assert "a negative feature index (-4)" in reasons[0]["error"]     # wisp_batch_from_csr's one message
    assert "finite" in reasons[1]["error"]
    # v1 on the same rows: null at the same rows, its errors at the same indices
    v1 = v2_service.post("/v1/models/plain:predict",
                          json={"instances": [{"ids": ids, "vals": vals} for ids, vals in rows]})
    assert v1.status_code == 200, v1.text
    preds = v1.json()["predictions"]
    assert [i for i, x in enumerate(preds) if x is None] == bad
    assert [e["index"] for e in v1.json()["errors"]] == bad
    assert v1.json()["bad_rows"] == v1.json()["errors"]             # the glossary's name and its 0.1.x alias
    close([x for x in p if x is not None], [x for x in preds if x is not None])
    # binary: NaN in the FP32 buffer (inf is the binary form of a value beyond float32)
    values_b = list(values)
    values_b[indptr[2]] = float("inf")
    res = client.infer("plain", triton_inputs(indptr, indices, values_b, True))
    got = res.as_numpy("probability")
    assert np.isnan(got[1]) and np.isnan(got[2])
    close([float(x) for x in got], want)
    assert list(res.as_numpy("bad_rows")) == [1, 2]
    assert "bad_row_reasons" in res.get_response()["parameters"]


def test_only_bad_rows_requested_and_every_row_bad(v2_service):
    # every row bad: 400, as v1 answers a request of which no row scores
    r = v2_service.post("/v2/models/plain/infer", json=v2_json_body([0, 1, 2], [-1, -3], None))
    assert r.status_code == 400 and "no row could be scored" in r.json()["error"], r.text
    assert "row 0" in r.json()["error"] and "row 1" in r.json()["error"]
    # only bad_rows asked for, none bad (an empty row is a good row: the bias)
    r = v2_service.post(
        "/v2/models/plain/infer", json=v2_json_body([0, 1, 1], [1], None, outputs=[{"name": "bad_rows"}])
    )
    assert r.status_code == 200, r.text
    a = r.json()
    assert [o["name"] for o in a["outputs"]] == ["bad_rows"] and a["outputs"][0]["data"] == []
    assert "bad_row_reasons" not in a["parameters"]
    # the outputs in the order asked, one row bad
    body = v2_json_body([0, 1, 2], [1, -3], None, outputs=[{"name": "bad_rows"}, {"name": "probability"}])
    r = v2_service.post("/v2/models/plain/infer", json=body)
    a = r.json()
    assert r.status_code == 200, r.text
    assert [o["name"] for o in a["outputs"]] == ["bad_rows", "probability"]
    assert a["outputs"][0]["data"] == [1] and a["outputs"][1]["data"][1] is None and a["outputs"][1]["data"][0] > 0


# ---- column models ---------------------------------------------------------------------------

CITIES = ["Paris", "Lyon", "Berlin", "Oslo", "Quito", "", "a\"b,c", "\u00e9t\u00e9"]
COLORS = ["red", "green", "blue", "mauve"]
TAGS = ["a", "b", "c", "news", "sport", "x y"]


def rand_raw_rows(rng, n, big_ints):
    rows = []
    for _ in range(n):
        row = {}
        if rng.random() < 0.85:
            row["age"] = round(rng.uniform(0, 90), 2)
        if rng.random() < 0.95:
            row["city"] = rng.choice(CITIES)
        if rng.random() < 0.8:
            row["color"] = rng.choice(COLORS)
        if rng.random() < 0.9:
            row["uid"] = (
                rng.choice([0, 1, -5, 2**40 + 7, 2**53 + 1, 2**63 - 1, -(2**63)])
                if big_ints and rng.random() < 0.5
                else rng.randint(-1000, 10**6)
            )
        k = rng.choice([0, 0, 1, 2, 3])
        if k or rng.random() < 0.5:
            row["tags"] = [rng.choice(TAGS) for _ in range(k)]
        rows.append(row)
    return rows


def jsonl(rows):
    return "".join(json.dumps(r) + "\n" for r in rows)


def column_tensors(rows, name, dtype):
    """(values, indptr or None): indptr when some row lacks the input or has a list"""
    ragged = any(name not in r or isinstance(r[name], list) for r in rows)
    vals, ip = [], [0]
    for r in rows:
        v = r.get(name)
        if isinstance(v, list):
            vals += v
        elif v is not None:
            vals.append(v)
        ip.append(len(vals))
    return vals, (ip if ragged else None)


NP = {"FP32": np.float32, "INT64": np.int64, "BYTES": object, "FP64": np.float64, "INT32": np.int32}
COLS = [("age", "FP32"), ("city", "BYTES"), ("color", "BYTES"), ("uid", "INT64"), ("tags", "BYTES")]


def triton_column_inputs(rows, binary, cols=COLS):
    ins = []
    for name, dt in cols:
        vals, ip = column_tensors(rows, name, dt)
        arr = np.array([v.encode() for v in vals] if dt == "BYTES" else vals, dtype=NP[dt])
        if dt == "BYTES":
            arr = arr.reshape(len(vals))
        t = th.InferInput(name, [len(vals)], dt)
        t.set_data_from_numpy(arr, binary_data=binary)
        ins.append(t)
        if ip is not None:
            t2 = th.InferInput(name + "_indptr", [len(ip)], "INT64")
            t2.set_data_from_numpy(np.array(ip, dtype=np.int64), binary_data=binary)
            ins.append(t2)
    return ins


def json_column_body(rows, cols=COLS):
    ins = []
    for name, dt in cols:
        vals, ip = column_tensors(rows, name, dt)
        ins.append({"name": name, "datatype": dt, "shape": [len(vals)], "data": vals})
        if ip is not None:
            ins.append({"name": name + "_indptr", "datatype": "INT32", "shape": [len(ip)], "data": ip})
    return {"inputs": ins}


@pytest.mark.parametrize("seed", range(5))
def test_column_model_every_form_equals_cli(v2_service, v2_models, wisp_score, client, seed):
    rng = random.Random(2000 + seed)
    n = rng.choice([1, 3, 50, 100])
    rows = rand_raw_rows(rng, n, big_ints=False)
    want = wisp_score(v2_models / "ctr.wisp", jsonl(rows), "jsonl")
    assert len(want) == n and not any(math.isnan(w) for w in want)
    r = v2_service.post("/v2/models/ctr/infer", json=json_column_body(rows))
    assert r.status_code == 200, r.text
    p, bad = probs_of(r.json())
    assert bad == []
    close(p, want)
    for binary in (True, False):
        res = client.infer("ctr", triton_column_inputs(rows, binary),
                           outputs=[th.InferRequestedOutput("probability", binary_data=binary)])
        close([float(x) for x in res.as_numpy("probability")], want)


def test_column_model_int64_beyond_2_53_binary_and_fixed_width_forms(v2_service, v2_models, wisp_score, client):
    rng = random.Random(77)
    rows = rand_raw_rows(rng, 60, big_ints=True)
    for r in rows:                    # every row has uid, age, city, color, and two tags: [n], [n, 2]
        r.setdefault("uid", 3)
        r.setdefault("age", 30.0)
        r.setdefault("city", "Oslo")
        r.setdefault("color", "red")
        r["tags"] = (r.get("tags", []) + ["a", "b"])[:2]
    want = wisp_score(v2_models / "ctr.wisp", jsonl(rows), "jsonl")
    n = len(rows)
    ins = []
    for name, dt in COLS:
        if name == "tags":
            t = th.InferInput("tags", [n, 2], "BYTES")
            t.set_data_from_numpy(np.array([[x.encode() for x in r["tags"]] for r in rows], dtype=object))
        else:
            arr = np.array([r[name].encode() if dt == "BYTES" else r[name] for r in rows], dtype=NP[dt])
            t = th.InferInput(name, [n] if name != "age" else [n, 1], dt)
            t.set_data_from_numpy(arr.reshape([n] if name != "age" else [n, 1]))
        ins.append(t)
    res = client.infer("ctr", ins)
    close([float(x) for x in res.as_numpy("probability")], want)
    # FP64 for the float input, INT32 for the int64 input (small values): the same rows
    small = [dict(r, uid=r["uid"] % 100000) for r in rows]
    want2 = wisp_score(v2_models / "ctr.wisp", jsonl(small), "jsonl")
    body = json_column_body(
        small, [("age", "FP64"), ("city", "BYTES"), ("color", "BYTES"), ("uid", "INT32"), ("tags", "BYTES")]
    )
    r = v2_service.post("/v2/models/ctr/infer", json=body)
    assert r.status_code == 200, r.text
    close(probs_of(r.json())[0], want2)
    # the same [n, 2] and [n, 1] forms as nested JSON lists (row-major)
    body = json_column_body(small, [("city", "BYTES"), ("color", "BYTES"), ("uid", "INT64")])
    body["inputs"].append({"name": "tags", "datatype": "BYTES", "shape": [n, 2], "data": [r["tags"] for r in small]})
    body["inputs"].append({"name": "age", "datatype": "FP32", "shape": [n, 1], "data": [[r["age"]] for r in small]})
    r = v2_service.post("/v2/models/ctr/infer", json=body)
    assert r.status_code == 200, r.text
    close(probs_of(r.json())[0], want2)
    # JSON integers beyond 2^53 are read from their text, exactly (not as doubles): the same as binary
    body = json_column_body(rows)
    assert any(abs(r["uid"]) > 2 ** 53 for r in rows)
    r = v2_service.post("/v2/models/ctr/infer", json=body)
    assert r.status_code == 200, r.text
    close(probs_of(r.json())[0], want)
    # one such int written with an exponent cannot be read exactly: refused, not rounded
    body = json.dumps(json_column_body(rows[:2])).replace(
        '"uid", "datatype": "INT64", "shape": [2], "data": [',
        '"uid", "datatype": "INT64", "shape": [2], "data": [9.007199254740993e15, ',
    )
    body = body.replace(
        '"data": [9.007199254740993e15, %d, %d]' % (rows[0]["uid"], rows[1]["uid"]),
        '"data": [9.007199254740993e15, %d]' % rows[1]["uid"],
    )
    r = v2_service.post("/v2/models/ctr/infer", data=body)
    assert r.status_code == 400 and "2^53" in r.json()["error"], r.text


def test_column_model_bad_rows_match_v1(v2_service, v2_models, wisp_score, client):
    rows = [{"age": 30, "city": "Paris"}, {"age": 20, "city": "Lyon"}, {"age": 40, "city": "Oslo"}]
    # row 1 gets two ages (a dense input takes one): bad; row 2 a NaN age (binary): bad
    ins = []
    t = th.InferInput("age", [4], "FP32")
    t.set_data_from_numpy(np.array([30, 20, 21, float("nan")], dtype=np.float32))
    ins.append(t)
    t = th.InferInput("age_indptr", [4], "INT64")
    t.set_data_from_numpy(np.array([0, 1, 3, 4], dtype=np.int64))
    ins.append(t)
    t = th.InferInput("city", [3], "BYTES")
    t.set_data_from_numpy(np.array([b"Paris", b"Lyon", b"Oslo"], dtype=object))
    ins.append(t)
    res = client.infer("ctr", ins)
    got = res.as_numpy("probability")
    want = wisp_score(v2_models / "ctr.wisp", jsonl(rows[:1]), "jsonl")
    close([float(got[0])], want)
    assert np.isnan(got[1]) and np.isnan(got[2])
    assert list(res.as_numpy("bad_rows")) == [1, 2]
    reasons = json.loads(res.get_response()["parameters"]["bad_row_reasons"])
    assert [x["index"] for x in reasons] == [1, 2] and all(x["error"] for x in reasons)
    # v1 with a bad row of the same kind (a string for the float input): null and an error at its index
    v1 = v2_service.post("/v1/models/ctr:predict", json={"instances": [rows[0], {"age": "x"}, rows[2]]})
    assert v1.status_code == 200 and v1.json()["predictions"][1] is None and v1.json()["errors"][0]["index"] == 1


def test_metadata_inputs_drive_a_request(v2_service, v2_models, wisp_score, client):
    """the metadata's inputs and datatypes are what infer takes: a request built from it alone"""
    md = client.get_model_metadata("ctr")
    assert md["platform"] == "wisp" and "1" in md["versions"]
    names = {i["name"]: i for i in md["inputs"]}
    assert set(names) == {"age", "city", "color", "uid", "tags"}
    assert (
        names["age"]["datatype"] == "FP32"
        and names["city"]["datatype"] == "BYTES"
        and names["uid"]["datatype"] == "INT64"
    )
    assert names["tags"]["shape"] == [-1, -1] and names["age"]["shape"] == [-1]
    row = {"age": 41.5, "city": "Berlin", "color": "blue", "uid": 12, "tags": ["news"]}
    ins = []
    for name, meta in names.items():
        v = row[name] if isinstance(row[name], list) else [row[name]]
        shape = [1, len(v)] if meta["shape"] == [-1, -1] else [1]
        t = th.InferInput(name, shape, meta["datatype"])
        t.set_data_from_numpy(
            np.array([x.encode() if isinstance(x, str) else x for x in v], dtype=NP[meta["datatype"]]).reshape(shape)
        )
        ins.append(t)
    res = client.infer("ctr", ins)
    close([float(x) for x in res.as_numpy("probability")], wisp_score(v2_models / "ctr.wisp", jsonl([row]), "jsonl"))
    md = client.get_model_metadata("plain", "1")
    assert [i["name"] for i in md["inputs"]] == ["indptr", "indices", "values"]
    assert [o["name"] for o in md["outputs"]] == ["probability", "bad_rows"]
    assert md["outputs"][0]["datatype"] == "FP32" and md["outputs"][1]["datatype"] == "INT64"


def batch_rows_counts(svc):
    """/metrics' wisp_batch_rows observation counts by (model, path): where the rows were scored
    (direct: the worker's session; thread: a pool thread's VM; batcher: a batch of the batcher)"""
    text = svc.session.get(svc.admin_url("/metrics"), timeout=10).text
    out = {}
    for labels, n in re.findall(r'^wisp_batch_rows_count\{([^}]*)\} (\d+)$', text, re.M):
        d = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        key = (d.get("model"), d.get("path"))
        out[key] = out.get(key, 0) + int(n)
    return out


def counts_settled(svc, want):
    """the counts once every one in want (key -> least count) is reached (the workers flush their
    metrics every flush_s), or the last ones read after 10 s"""
    deadline = time.time() + 10
    while True:
        got = batch_rows_counts(svc)
        if all(got.get(k, 0) >= v for k, v in want.items()) or time.time() > deadline:
            return got
        time.sleep(0.1)


@pytest.mark.parametrize("mode", ["inline", "thread", "async", "auto"])
def test_every_mode_places_v2_as_v1(wisp_service, v2_models, wisp_score, mode):
    """v2 infer in each mode, batching on, scored where v1's predict would score it: mode thread
    (and auto for a body of thread_min_bytes = 16384 or more) in the thread pool's VMs, one row
    (not mode thread) through the batcher, the rest in the worker (async: submit + wait). Every
    answer (binary and JSON, ids and columns, a bad row, a refused request) as the CLI's; the
    placement read from /metrics' wisp_batch_rows{path=...}."""
    svc = wisp_service(models={"plain": v2_models / "plain.wisp", "ctr": v2_models / "ctr.wisp"},
                       extra=["--mode", mode, "--batching", "on"])
    plain, ctr = v2_models / "plain.wisp", v2_models / "ctr.wisp"
    rng = random.Random(7)
    c = th.InferenceServerClient("127.0.0.1:%d" % svc.port)
    c0 = batch_rows_counts(svc)
    small, big = [], []                   # the plain requests by body size (bytes < or >= 16384)

    rows = rand_id_rows(rng, 30)
    rows = [(ids, vals if vals is not None else [1.0] * len(ids)) for ids, vals in rows]
    for n1 in (30, 1):                    # binary in and out (tritonclient's default)
        sub = rows[:n1]
        ip, ix, vs = csr(sub, True)
        res = c.infer("plain", triton_inputs(ip, ix, vs, True))
        close([float(x) for x in res.as_numpy("probability")], wisp_score(plain, libsvm(sub)))
        small.append(n1)
    many = rand_id_rows(rng, 600)
    ip, ix, vs = csr(many, True)
    assert 8 * len(ip) + 8 * len(ix) >= 16384
    res = c.infer("plain", triton_inputs(ip, ix, vs, True))
    close([float(x) for x in res.as_numpy("probability")], wisp_score(plain, libsvm(many)))
    big.append(len(many))
    body = json.dumps(v2_json_body(ip, ix, vs))
    assert len(body) >= 16384
    r = svc.post("/v2/models/plain/infer", data=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    close(probs_of(r.json())[0], wisp_score(plain, libsvm(many)))
    big.append(len(many))
    # a bad row (a negative index) among good ones: NaN (null), its index in bad_rows, the others scored
    bad = [r2 for r2 in rows[:5]]
    ip, ix, vs = csr(bad, True)
    k = next(i for i in range(5) if ip[i + 1] > ip[i])
    ix[ip[k]] = -3
    r = svc.post("/v2/models/plain/infer", json=v2_json_body(ip, ix, vs))
    assert r.status_code == 200, r.text
    probs, bad_rows = probs_of(r.json())
    assert bad_rows == [k] and probs[k] is None
    want = wisp_score(plain, libsvm([row for i, row in enumerate(bad) if i != k]))
    close([p for i, p in enumerate(probs) if i != k], want)
    reason = json.loads(r.json()["parameters"]["bad_row_reasons"])[0]
    assert reason["index"] == k and "a negative feature index (-3)" in reason["error"]   # wisp_batch_from_csr's
    small.append(5)
    # a refused request: the error answered from wherever it was decoded
    r = svc.post(
        "/v2/models/plain/infer", json={"inputs": [{"name": "nope", "datatype": "INT64", "shape": [1], "data": [0]}]}
    )
    assert r.status_code == 400 and "unknown input 'nope'" in r.json()["error"], r.text

    raw = rand_raw_rows(rng, 20, big_ints=True)
    res = c.infer("ctr", triton_column_inputs(raw, True))
    close([float(x) for x in res.as_numpy("probability")], wisp_score(ctr, jsonl(raw), "jsonl"))
    one = raw[:1]
    r = svc.post("/v2/models/ctr/infer", json=json_column_body(one))
    assert r.status_code == 200, r.text
    close(probs_of(r.json())[0], wisp_score(ctr, jsonl(one), "jsonl"))

    # where they were scored
    d = lambda got, key: got.get(key, 0) - c0.get(key, 0)
    if mode == "thread":
        want = {("plain", "thread"): c0.get(("plain", "thread"), 0) + len(small) + len(big),
                ("ctr", "thread"): c0.get(("ctr", "thread"), 0) + 2}
    elif mode == "auto":
        want = {("plain", "thread"): c0.get(("plain", "thread"), 0) + len(big),
                ("plain", "batcher"): c0.get(("plain", "batcher"), 0) + 1,
                ("ctr", "batcher"): c0.get(("ctr", "batcher"), 0) + 1}
    else:
        want = {("plain", "batcher"): c0.get(("plain", "batcher"), 0) + 1,
                ("ctr", "batcher"): c0.get(("ctr", "batcher"), 0) + 1}
    got = counts_settled(svc, want)
    for key, v in want.items():
        assert got.get(key, 0) >= v, (mode, key, got, c0)
    if mode == "thread":
        assert d(got, ("plain", "batcher")) == 0 and d(got, ("ctr", "batcher")) == 0, (got, c0)
    elif mode == "auto":
        assert d(got, ("plain", "thread")) == len(big) and d(got, ("ctr", "thread")) == 0, (got, c0)
    else:
        assert d(got, ("plain", "thread")) == 0 and d(got, ("ctr", "thread")) == 0, (got, c0)
    assert svc.alive()
