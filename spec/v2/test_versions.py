"""test_versions.py — model versions against a real nginx: the model repository's layout
(MODELS/name/N/model.wisp), the version policy (latest 1 by default, latest N, all, specific; from
configure{} / serve.sh --version-policy and from MODELS/name/config.json, changed while serving),
a single file as version "1", versions added and removed under a load loop with zero failed
requests, a new version that fails to load leaving the old one serving, the warm-up's time, and
/metrics labelled by version. Every probability is compared with `wisp score` on the version's file.
"""
import subprocess
import threading
import time

import pytest
import requests

from repo_util import (DEVICE, ROWS, WANT_DEV, add_version, make_repo, metrics_text, predict_v1, remove_version,
                       same, served_versions, wait_for, which, write_config)

FAST = {"reload_check_s": 0.2}


def repo_service(wisp_service, repo, extra=(), models="", **kw):
    return wisp_service(models=models, extra=["--model-repository", str(repo), "--device", DEVICE] + list(extra),
                        configure=FAST, **kw)


def v2_routes(svc):
    """Whether the v2 endpoints answer (routes.lua's v2 wiring, helper O1's side of issue 18)."""
    return svc.get("/v2/health/live").status_code == 200


def test_policies_latest_all_specific(wisp_service, v2_models, wisp_score, tmp_path):
    p1, p2, p3 = v2_models / "plain.wisp", v2_models / "plain_v2.wisp", v2_models / "tiny.wisp"
    three = {1: p1, 2: p2, 3: p3}
    repo = make_repo(tmp_path / "models", {"dflt": three, "l2": three, "every": three, "pick": three, "top": three})
    write_config(repo, "l2", '{"version_policy": {"latest": {"num_versions": 2}}}')
    write_config(repo, "every", '{"version_policy": "all"}')
    write_config(repo, "pick", '{"version_policy": {"specific": {"versions": [1, 3]}}}')
    # "top": the configuration's default policy (serve.sh --version-policy) without a config.json
    svc = repo_service(wisp_service, repo, extra=["--version-policy", "latest:1"])
    m = metrics_text(svc)
    assert served_versions(m, "dflt") == {"3"}
    assert served_versions(m, "top") == {"3"}
    assert served_versions(m, "l2") == {"2", "3"}
    assert served_versions(m, "every") == {"1", "2", "3"}
    assert served_versions(m, "pick") == {"1", "3"}
    # v1 answers with the latest ready version under the policy: 3 everywhere here
    want = {v: wisp_score(p, ROWS) for v, p in three.items()}
    for name in ("dflt", "l2", "every", "pick", "top"):
        r = predict_v1(svc, name)
        assert r.status_code == 200, r.text
        assert which(r.json()["predictions"], want) == [3], name
        assert r.json()["version"] == "3"
    if v2_routes(svc):
        for name, served in (("dflt", {"3"}), ("l2", {"2", "3"}), ("every", {"1", "2", "3"}), ("pick", {"1", "3"})):
            for v in ("1", "2", "3"):
                r = svc.get("/v2/models/%s/versions/%s/ready" % (name, v))
                assert (r.status_code == 200) == (v in served), (name, v, r.status_code, r.text)
            for v in served:
                body = {"inputs": [{"name": "indptr", "datatype": "INT64", "shape": [2], "data": [0, 2]},
                                   {"name": "indices", "datatype": "INT32", "shape": [2], "data": [7, 4999]}]}
                r = svc.post("/v2/models/%s/versions/%s/infer" % (name, v), json=body)
                assert r.status_code == 200, r.text
                got = r.json()
                assert got.get("model_version") == v
                p = [o for o in got["outputs"] if o["name"] == "probability"][0]["data"]
                assert same(p, wisp_score(three[int(v)], "0 7 4999\n"))
    assert svc.alive()


def test_policy_from_config_json_changes_without_restart(wisp_service, v2_models, wisp_score, tmp_path):
    p1, p2, p3 = v2_models / "plain.wisp", v2_models / "plain_v2.wisp", v2_models / "tiny.wisp"
    repo = make_repo(tmp_path / "models", {"m": {1: p1, 2: p2, 3: p3}})
    svc = repo_service(wisp_service, repo, extra=["--workers", "2"])
    assert served_versions(metrics_text(svc), "m") == {"3"}
    write_config(repo, "m", '{"version_policy": "specific:1,2"}')
    assert wait_for(lambda: served_versions(metrics_text(svc), "m") == {"1", "2"}), metrics_text(svc)
    want = {v: wisp_score(p, ROWS) for v, p in {1: p1, 2: p2, 3: p3}.items()}
    for _ in range(8):     # new connections: both workers
        r = predict_v1(svc, "m", session=requests)
        assert r.status_code == 200 and which(r.json()["predictions"], want) == [2], r.text
    # a config.json that does not parse: the model keeps the versions it serves, the log says why
    write_config(repo, "m", '{"version_policy": "latest:zero"}')
    time.sleep(0.8)
    assert served_versions(metrics_text(svc), "m") == {"1", "2"}
    assert "config.json: version_policy: latest:N" in svc.error_log()
    write_config(repo, "m", '{"version_policy": {"latest": {"num_versions": 2}}}')
    assert wait_for(lambda: served_versions(metrics_text(svc), "m") == {"2", "3"}), metrics_text(svc)
    assert svc.alive()


def test_single_file_is_version_1_and_v1_unchanged(wisp_service, v2_models, wisp_score, tmp_path):
    p1, p2 = v2_models / "plain.wisp", v2_models / "plain_v2.wisp"
    repo = make_repo(tmp_path / "models", {"rep": {1: p1, 2: p2}})
    svc = repo_service(wisp_service, repo, models="single=%s" % p1)
    m = metrics_text(svc)
    assert served_versions(m, "single") == {"1"}
    assert served_versions(m, "rep") == {"2"}
    r = predict_v1(svc, "single")
    assert r.status_code == 200 and same(r.json()["predictions"], wisp_score(p1, ROWS)), r.text
    assert r.json()["version"] == "1"
    meta = svc.get("/v1/models/single").json()
    assert meta["ready"] is True and meta["version"]["checksum"]
    # version_id: the bytes that answered (what "version" said before versions existed)
    vid = r.json()["version_id"]
    assert len(vid) == 12 and meta["version"]["checksum"].lower().startswith(vid.lower()), (vid, meta["version"])
    r2 = predict_v1(svc, "rep")
    assert r2.json()["version"] == "2" and r2.json()["version_id"] != vid   # another file, another identity
    names = [x["name"] for x in svc.get("/v1/models").json()["models"]]
    assert names == ["rep", "single"]
    if v2_routes(svc):
        assert svc.get("/v2/models/single/versions/1/ready").status_code == 200
        assert svc.get("/v2/models/single/versions/2/ready").status_code != 200
        assert svc.get("/v2/models/rep/versions/2/ready").status_code == 200
    # the model's directory removed from the repository: no longer served (404), /readyz whole again
    import shutil
    shutil.rmtree(repo / "rep")
    assert wait_for(lambda: svc.get("/v1/models/rep").status_code == 404)
    assert [x["name"] for x in svc.get("/v1/models").json()["models"]] == ["single"]
    assert svc.get("/readyz").status_code == 200
    assert "model 'rep' left the repository" in svc.error_log()
    assert 'model="rep"' not in metrics_text(svc).split("# HELP wisp_device_info")[1]


class LoadLoop:
    """Clients sending the same rows to v1 (and v2 when it is there) until stopped, each answer
    checked against the answers of the versions that may serve (a request fails when it is not
    200 or its probabilities are no allowed version's)."""

    def __init__(self, svc, model, answers, clients=4, v2=False):
        self.svc, self.model, self.answers, self.v2 = svc, model, answers, v2
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.ok, self.failures, self.by_version = 0, [], {}
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(clients)]

    def run(self, i):
        s = requests.Session()
        n = 0
        while not self.stop_flag.is_set() and n < 20000:
            n += 1
            try:
                if self.v2 and i % 2 == 1:
                    body = {"inputs": [{"name": "indptr", "datatype": "INT64", "shape": [3], "data": [0, 2, 2]},
                                       {"name": "indices", "datatype": "INT32", "shape": [2], "data": [7, 4999]}]}
                    r = s.post(self.svc.url("/v2/models/%s/infer" % self.model), json=body, timeout=30)
                    preds = (
                        [o for o in r.json()["outputs"] if o["name"] == "probability"][0]["data"]
                        if r.status_code == 200
                        else None
                    )
                    said = r.json().get("model_version") if r.status_code == 200 else None
                    answers = self.answers_v2
                else:
                    r = predict_v1(self.svc, self.model, session=s)
                    preds = r.json()["predictions"] if r.status_code == 200 else None
                    said = r.json().get("version") if r.status_code == 200 else None
                    answers = self.answers
            except (requests.RequestException, ValueError, KeyError, IndexError) as e:
                with self.lock:
                    self.failures.append(repr(e))
                continue
            got = which(preds, answers) if preds is not None else []
            with self.lock:
                if r.status_code != 200 or len(got) != 1 or said != str(got[0]):
                    # not 200, no allowed version's probabilities, or an answer whose version is
                    # not the one whose probabilities it carries
                    self.failures.append("HTTP %d %s" % (r.status_code, r.text[:200]))
                else:
                    self.ok += 1
                    self.by_version[got[0]] = self.by_version.get(got[0], 0) + 1

    def start(self):
        for t in self.threads:
            t.start()

    def stop(self):
        self.stop_flag.set()
        for t in self.threads:
            t.join(60)

    def count(self, v):
        with self.lock:
            return self.by_version.get(v, 0)


@pytest.mark.parametrize("mode", ["inline", "thread", "async"])
def test_rollover_under_load_zero_failed_requests(wisp_service, v2_models, wisp_score, tmp_path, mode):
    """Version 3 added while clients load the service (2 workers; scored in the event loop, in
    the thread pool's VMs, which load each version themselves, or async: the request yields while
    it holds its version), then removed: every request answers
    200 with one version's probabilities (0 failures), v3 serves once warmed up, a broken v4 is
    refused while v3 keeps serving, v2 serves again after v3 and v4 leave; no worker dies."""
    p1, p2, p3 = v2_models / "plain.wisp", v2_models / "plain_v2.wisp", v2_models / "tiny.wisp"
    repo = make_repo(tmp_path / "models", {"m": {1: p1, 2: p2}})
    svc = repo_service(wisp_service, repo, extra=["--workers", "2", "--mode", mode])
    answers = {v: wisp_score(p, ROWS) for v, p in {2: p2, 3: p3}.items()}
    use_v2 = v2_routes(svc)
    loop = LoadLoop(svc, "m", answers, clients=4, v2=use_v2)
    loop.answers_v2 = {v: wisp_score(p, "0 7 4999\n0\n") for v, p in {2: p2, 3: p3}.items()}
    loop.start()
    try:
        assert wait_for(lambda: loop.count(2) >= 50, timeout=20)
        add_version(repo, "m", 3, p3)
        assert wait_for(lambda: served_versions(metrics_text(svc), "m") == {"3"}, timeout=20)
        n3 = loop.count(3)
        assert wait_for(lambda: loop.count(3) >= n3 + 100, timeout=20)
        # a broken version 4 (truncated) renamed in under load: refused, v3 keeps answering
        broken = tmp_path / "broken.wisp"
        broken.write_bytes(p1.read_bytes()[:4000])
        add_version(repo, "m", 4, broken)
        assert wait_for(lambda: svc.error_log().count("model 'm': load failed") >= 2, timeout=20)
        n3 = loop.count(3)
        assert wait_for(lambda: loop.count(3) >= n3 + 100, timeout=20)
        assert served_versions(metrics_text(svc), "m") == {"3"}
        remove_version(repo, "m", 4)
        remove_version(repo, "m", 3)
        assert wait_for(lambda: served_versions(metrics_text(svc), "m") == {"2"}, timeout=20)
        n2 = loop.count(2)
        assert wait_for(lambda: loop.count(2) >= n2 + 100, timeout=20)
    finally:
        loop.stop()
    assert loop.failures == [], "%d failed requests of %d, first: %s" % (
        len(loop.failures),
        loop.ok + len(loop.failures),
        loop.failures[:3],
    )
    assert loop.count(2) > 0 and loop.count(3) > 0
    print("rollover (mode %s, v2 API too: %s): %d requests, 0 failed; answered by v2 %d, v3 %d"
          % (mode, use_v2, loop.ok, loop.count(2), loop.count(3)))
    assert svc.alive()
    log = svc.error_log()
    assert "model 'm' version 3 leaves service (its model.wisp is gone)" in log
    assert "model 'm' version 2 leaves service (not in the version policy (latest 1))" in log


def test_broken_new_version_leaves_the_old_serving(wisp_service, v2_models, wisp_score, tmp_path):
    p1, p2 = v2_models / "plain.wisp", v2_models / "plain_v2.wisp"
    repo = make_repo(tmp_path / "models", {"m": {1: p1}})
    svc = repo_service(wisp_service, repo)
    broken = tmp_path / "broken.wisp"
    broken.write_bytes(p2.read_bytes()[:5000])          # truncated: fails its checksum
    add_version(repo, "m", 2, broken)
    assert wait_for(lambda: "model 'm': load failed" in svc.error_log())
    time.sleep(0.5)
    assert served_versions(metrics_text(svc), "m") == {"1"}
    r = predict_v1(svc, "m")
    assert r.status_code == 200 and same(r.json()["predictions"], wisp_score(p1, ROWS)), r.text
    if v2_routes(svc):
        assert svc.get("/v2/models/m/versions/1/ready").status_code == 200
        assert svc.get("/v2/models/m/versions/2/ready").status_code != 200
    # the good file renamed over the broken one: version 2 serves, 1 leaves
    stage = repo / "m" / "2" / ".model.wisp.tmp"
    stage.write_bytes(p2.read_bytes())
    stage.chmod(0o644)
    stage.rename(repo / "m" / "2" / "model.wisp")
    assert wait_for(lambda: served_versions(metrics_text(svc), "m") == {"2"}), metrics_text(svc)
    r = predict_v1(svc, "m")
    assert r.status_code == 200 and same(r.json()["predictions"], wisp_score(p2, ROWS)), r.text


def test_warmup_time_and_metrics_by_version(wisp_service, v2_models, tmp_path):
    p1, p2 = v2_models / "plain.wisp", v2_models / "plain_v2.wisp"
    c1, c2 = v2_models / "ctr.wisp", v2_models / "ctr_v2.wisp"
    repo = make_repo(tmp_path / "models", {"m": {1: p1, 2: p2}, "cols": {1: c1, 2: c2}})
    write_config(repo, "m", '{"version_policy": "all"}')
    svc = repo_service(wisp_service, repo, admin=True)
    for _ in range(3):
        assert predict_v1(svc, "m").status_code == 200
    m = metrics_text(svc)
    import re
    warm = {(g[0], g[1]): float(g[2]) for g in
            re.findall(r'^wisp_model_warmup_seconds\{model="([^"]+)",version="([^"]+)"\} (\S+)$', m, re.M)}
    assert set(warm) == {("m", "1"), ("m", "2"), ("cols", "2")}, m
    assert all(v > 0 for v in warm.values())
    assert re.search(r'^wisp_model_requests_total\{model="m",version="2"\} 3$', m, re.M), m
    assert re.search(r'^wisp_model_version_id_info\{model="m",version="1",id="[0-9a-f]{12}"\} 1$', m, re.M), m
    # the log says each version's warm-up
    assert re.search(
        r"model 'cols' loaded \(start\): \S+/cols/2/model.wisp version 2 \([0-9a-f]+\) on %s in [0-9.]+ ms "
        r"\(warm-up [0-9.]+ ms\)" % re.escape(WANT_DEV),
        svc.error_log(),
    )
    meta = svc.get("/v2/models/m/versions/1").json()
    assert meta["parameters"]["version"] == "1" and meta["parameters"]["warmup_ms"] > 0, meta
    assert meta["parameters"]["device"] == WANT_DEV, meta


def test_versions_logic_without_nginx(wisp_cli, tmp_path):
    """spec/nginx/versions_check.lua: the policy grammar and the repository logic (models.lua) on
    real directories, with a stand-in for ngx (numeric version order, non-version names, a version
    without its model.wisp, resolve/versions/index/load/unload, retirement after the last request)."""
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2]
    r = subprocess.run([str(wisp_cli), "run", str(root / "spec/nginx/versions_check.lua"), str(tmp_path)],
                       capture_output=True, text=True, cwd=str(root), timeout=120)
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    assert r.returncode == 0 and last.endswith(" 0 failed") and not last.startswith("versions: 0 passed"), (
        r.stdout + r.stderr
    )
