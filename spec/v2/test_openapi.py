"""test_openapi.py — examples/openresty/openapi.yaml (v1 and v2) checked against the running service
with schemathesis, in a bounded time: every answer's status code is one the document lists for the
operation, its Content-Type and its JSON body are as documented, no answer is a 5xx, and afterwards
every nginx worker that started is still running (none crashed), the error log has no crash, and
a prediction still equals `wisp score`.

Two runs against one service (a single-file model and a repository with two versions of an id model
and a model with feature columns, 2 workers):
  1. the document with the path parameters pinned to the served names (and one unknown name) and
     versions, so that the generated requests reach the parsers and the scoring, not only 404s;
  2. the document as it is (random names and versions: the routing and its 404s).
Both leave out POST /v2/repository/models/{name}/unload: a fuzzer that unloads the served models
turns the rest of the run into 503s (documented, but server errors); test_repository.py checks
unload and load. The budget: WISP_V2_FUZZ_S seconds in all (default 60), examples per operation
WISP_V2_FUZZ_N (default 25), seed WISP_V2_FUZZ_SEED (default 18).
"""
import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

from repo_util import DEVICE, ROWS, make_repo, predict_v1, same, write_config

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "examples/openresty/openapi.yaml"
BUDGET = float(os.environ.get("WISP_V2_FUZZ_S", "60"))
EXAMPLES = os.environ.get("WISP_V2_FUZZ_N", "25")
SEED = os.environ.get("WISP_V2_FUZZ_SEED", "18")
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


def schemathesis_bin():
    p = pathlib.Path(sys.executable).parent / "schemathesis"
    if not p.exists():
        pytest.fail("schemathesis is not installed in %s (spec/v2/run.sh installs it)" % p.parent)
    return p


def run_schemathesis(doc, base, seconds, out_path):
    args = [str(schemathesis_bin()), "run", str(doc), "-u", base, "--checks", CHECKS,
            "--exclude-path-regex", "unload$", "-n", EXAMPLES, "--max-time", str(max(1, int(seconds))),
            "--seed", SEED, "-w", "2", "--request-timeout", "10", "--no-color"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 120, cwd=str(out_path.parent))
    out_path.write_text(r.stdout + r.stderr)
    return r.returncode, r.stdout + r.stderr


def test_document_parses_and_names_every_route():
    d = yaml.safe_load(DOC.read_text())
    assert d["openapi"].startswith("3.")
    paths = set(d["paths"])
    for p in ("/healthz", "/readyz", "/metrics", "/v1/models", "/v1/models/{name}", "/v1/models/{name}:predict",
              "/v1/models/{name}:reload", "/v2", "/v2/health/live", "/v2/health/ready", "/v2/models/{name}",
              "/v2/models/{name}/versions/{version}", "/v2/models/{name}/ready",
              "/v2/models/{name}/versions/{version}/ready", "/v2/models/{name}/infer",
              "/v2/models/{name}/versions/{version}/infer", "/v2/repository/index",
              "/v2/repository/models/{name}/load", "/v2/repository/models/{name}/unload"):
        assert p in paths, p
    # every operation lists its statuses (no "default": the status check would pass anything)
    for p, ops in d["paths"].items():
        for m, op in ops.items():
            if m == "parameters":
                continue
            assert "default" not in op["responses"], (p, m)
            assert all(re.match(r"^[1-5]\d\d$", c) for c in op["responses"]), (p, m)


def test_schemathesis_against_the_service(wisp_service, v2_models, wisp_score, tmp_path):
    p1, p2, c1 = v2_models / "plain.wisp", v2_models / "plain_v2.wisp", v2_models / "ctr.wisp"
    repo = make_repo(tmp_path / "models", {"m": {1: p1, 2: p2}, "cols": {1: c1}})
    write_config(repo, "m", '{"version_policy": "all"}')
    svc = wisp_service(models="plain=%s" % p1, extra=["--model-repository", str(repo), "--workers", "2",
                                                                "--device", DEVICE])
    workers = svc.worker_pids()
    assert len(workers) == 2

    d = yaml.safe_load(DOC.read_text())
    d["components"]["parameters"]["ModelName"]["schema"] = {"type": "string", "enum": ["plain", "m", "cols", "nope"]}
    d["components"]["parameters"]["ModelVersion"]["schema"] = {"type": "string", "enum": ["1", "2", "3"]}
    pinned = tmp_path / "pinned.yaml"
    pinned.write_text(yaml.safe_dump(d))

    rc1, out1 = run_schemathesis(pinned, svc.base, BUDGET * 0.7, tmp_path / "pinned.out")
    rc2, out2 = run_schemathesis(DOC, svc.base, BUDGET * 0.3, tmp_path / "plain.out")

    def summary(out):
        tail = out.strip().splitlines()[-40:]
        fails = [l for l in out.splitlines() if re.match(r"^_{3,} .* _{3,}$", l) or "ST1" in l or "curl -X" in l]
        return "\n".join(fails[:60] + ["..."] + tail)

    for label, rc, out in (("names pinned", rc1, out1), ("the document as it is", rc2, out2)):
        m = re.search(r"(\d+) generated, (\d+) passed", out)
        assert m and int(m.group(1)) > 100, "schemathesis (%s) ran too few cases:\n%s" % (label, summary(out))
        if rc == 0:
            continue
        # a failure of the service (a check: ST1xx), a network error (a worker that died) or a
        # timeout fails the test; so does any error but schemathesis's own generator failing
        # (a "Runtime Error" raised inside schemathesis/hypothesis while it makes a case: seen
        # in its coverage phase as hypothesis's "Inconsistent results", not a request sent)
        assert "Failures:" not in out and int(m.group(1)) == int(m.group(2)), \
            "schemathesis (%s) found failures:\n%s" % (label, summary(out))
        errors = re.search(r"^Errors:\n(.*?)\n\n", out, re.M | re.S)
        kinds = re.findall(r"^\s*\S+\s+([A-Za-z ]+): \d+$", errors.group(1), re.M) if errors else []
        internal = "site-packages/schemathesis/" in out and "Connection" not in out and "Timeout" not in out
        assert kinds == ["Runtime Error"] and internal, "schemathesis (%s) failed:\n%s" % (label, summary(out))
        print("schemathesis (%s): %s generated, %s passed; an error inside schemathesis's own case generation "
              "(not a request) was ignored" % (label, m.group(1), m.group(2)))
    # no dead worker, no crash in the log, and the service still answers right
    assert svc.alive() and svc.worker_pids() == workers
    log = svc.error_log()
    assert not re.search(r"exited on signal|\[alert\]|\[emerg\]|core dumped", log), log[-3000:]
    r = predict_v1(svc, "plain")
    assert r.status_code == 200 and same(r.json()["predictions"], wisp_score(p1, ROWS)), r.text
