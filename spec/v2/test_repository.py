"""test_repository.py — the model repository extension (POST /v2/repository/index, .../models/NAME/load,
.../unload) against a real nginx with 2 workers: the index's rows and states (READY, UNAVAILABLE with
the reason: not in the version policy, unloaded, failed to load), unload and load reaching every
worker through the shared dict, a single-file model unloaded and loaded, errors for unknown models,
a failed load, and the admin rule (configure{admin = "separate"}: the extension on the admin
listener only, 403 on the inference listener). Probabilities are compared with `wisp score`.
"""
import requests

from repo_util import DEVICE, ROWS, add_version, make_repo, predict_v1, same, wait_for, write_config

FAST = {"reload_check_s": 0.2}


def index(svc, ready=None):
    body = {} if ready is None else {"ready": ready}
    r = svc.session.post(svc.admin_url("/v2/repository/index"), json=body, timeout=10)
    assert r.status_code == 200, r.text
    return {(m["name"], m.get("version")): m for m in r.json()}


def v1_statuses(svc, model, n=8):
    """The statuses of n predicts on new connections (nginx hands them to both workers)."""
    return [predict_v1(svc, model, session=requests).status_code for _ in range(n)]


def start(wisp_service, v2_models, tmp_path, admin=False):
    p1, p2 = v2_models / "plain.wisp", v2_models / "plain_v2.wisp"
    repo = make_repo(tmp_path / "models", {"a": {1: p1, 2: p2}, "b": {1: p1, 2: p2}})
    write_config(repo, "b", '{"version_policy": {"specific": {"versions": [1]}}}')
    svc = wisp_service(
        models="s=%s" % p2,
        extra=["--model-repository", str(repo), "--workers", "2", "--device", DEVICE],
        configure=FAST,
        admin=admin,
    )
    return svc, repo


def test_index_rows_and_states(wisp_service, v2_models, tmp_path):
    svc, repo = start(wisp_service, v2_models, tmp_path)
    ix = index(svc)
    assert set(ix) == {("a", "1"), ("a", "2"), ("b", "1"), ("b", "2"), ("s", "1")}, ix
    assert {k: m["state"] for k, m in ix.items()} == {
        ("a", "1"): "UNAVAILABLE",
        ("a", "2"): "READY",
        ("b", "1"): "READY",
        ("b", "2"): "UNAVAILABLE",
        ("s", "1"): "READY",
    }
    assert "not in the version policy (latest 1)" in ix[("a", "1")]["reason"]
    assert "not in the version policy (specific 1)" in ix[("b", "2")]["reason"]
    assert set(index(svc, ready=True)) == {("a", "2"), ("b", "1"), ("s", "1")}
    assert set(index(svc, ready=False)) == set(ix)
    # a body that is not {"ready": bool}
    r = svc.post("/v2/repository/index", data="[1]", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "error" in r.json()


def test_unload_and_load_reach_every_worker(wisp_service, v2_models, wisp_score, tmp_path):
    svc, repo = start(wisp_service, v2_models, tmp_path)
    want2 = wisp_score(v2_models / "plain_v2.wisp", ROWS)
    r = svc.post("/v2/repository/models/a/unload")
    assert r.status_code == 200 and r.json() == {"name": "a", "unload": True}, r.text
    assert wait_for(lambda: set(v1_statuses(svc, "a")) == {503}), v1_statuses(svc, "a")
    r = svc.get("/v2/models/a/ready")
    assert r.status_code == 503 and r.json()["ready"] is False
    ix = index(svc)
    assert ix[("a", "2")]["state"] == "UNAVAILABLE" and "unloaded" in ix[("a", "2")]["reason"], ix
    assert ix[("b", "1")]["state"] == "READY" and ix[("s", "1")]["state"] == "READY"
    # infer on an unloaded model: an error answer, not a 5xx other than 503
    body = {"inputs": [{"name": "indptr", "datatype": "INT64", "shape": [2], "data": [0, 1]},
                       {"name": "indices", "datatype": "INT32", "shape": [1], "data": [7]}]}
    r = svc.post("/v2/models/a/infer", json=body)
    assert r.status_code == 503 and "unloaded" in r.json()["error"], r.text
    # load: served again by both workers, the same probabilities as before
    r = svc.post("/v2/repository/models/a/load")
    assert r.status_code == 200 and r.json() == {"name": "a", "load": True}, r.text
    assert wait_for(lambda: set(v1_statuses(svc, "a")) == {200})
    for _ in range(6):
        r = predict_v1(svc, "a", session=requests)
        assert r.status_code == 200 and same(r.json()["predictions"], want2)
    assert index(svc)[("a", "2")]["state"] == "READY"
    # a single-file model: unload, then load
    assert svc.post("/v2/repository/models/s/unload").status_code == 200
    assert wait_for(lambda: set(v1_statuses(svc, "s")) == {503})
    assert index(svc)[("s", "1")]["state"] == "UNAVAILABLE"
    assert svc.post("/v2/repository/models/s/load").status_code == 200
    assert wait_for(lambda: set(v1_statuses(svc, "s")) == {200})
    assert svc.alive()


def test_load_picks_up_a_new_version_and_errors(wisp_service, v2_models, wisp_score, tmp_path):
    svc, repo = start(wisp_service, v2_models, tmp_path)
    # unknown names
    r = svc.post("/v2/repository/models/nope/load")
    assert r.status_code == 404 and "error" in r.json()
    r = svc.post("/v2/repository/models/nope/unload")
    assert r.status_code == 404 and "error" in r.json()
    assert svc.get("/v2/repository/index").status_code == 405
    # a model directory whose only version is broken: load answers 400 with the reason
    broken = tmp_path / "broken.wisp"
    broken.write_bytes((v2_models / "plain.wisp").read_bytes()[:3000])
    make_repo(repo, {"c": {1: broken}})
    r = svc.post("/v2/repository/models/c/load")
    assert r.status_code == 400 and "failed to load 'c'" in r.json()["error"], r.text
    assert index(svc)[("c", "1")]["state"] == "UNAVAILABLE"
    # load right after a new version is renamed in: it serves at once on the answering worker
    add_version(repo, "a", 3, v2_models / "tiny.wisp")
    r = svc.post("/v2/repository/models/a/load")
    assert r.status_code == 200, r.text
    assert wait_for(lambda: index(svc).get(("a", "3"), {}).get("state") == "READY")
    r = svc.get("/v2/models/a")
    assert r.status_code == 200 and r.json()["versions"] == ["3"], r.text
    assert svc.alive()


def test_admin_listener_only_when_separate(wisp_service, v2_models, tmp_path):
    svc, repo = start(wisp_service, v2_models, tmp_path, admin=True)
    for path in ("/v2/repository/index", "/v2/repository/models/a/unload", "/v2/repository/models/a/load"):
        r = svc.post(path)
        assert r.status_code == 403 and "admin listener" in r.json()["error"], (path, r.text)
    # nothing was unloaded by the refused call
    assert set(v1_statuses(svc, "a", 4)) == {200}
    r = svc.session.post(svc.admin_url("/v2/repository/models/a/unload"), timeout=10)
    assert r.status_code == 200, r.text
    assert wait_for(lambda: set(v1_statuses(svc, "a", 4)) == {503})
    assert index(svc)[("a", "2")]["state"] == "UNAVAILABLE"
    # inference stays on the inference listener; the index answers on the admin one
    assert svc.get("/v2/models/b/ready").status_code == 200
