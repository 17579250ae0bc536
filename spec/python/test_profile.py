"""test_profile.py — wisp.profile(): a record per Session.score with the C profile's statistics, the stage table, the Perfetto trace."""
import json

import numpy as np
import pytest

import wisp

from conftest import make_rows


def test_profile_records_each_call_and_writes_the_trace(model_path, tmp_path):
    s = wisp.load(model_path).session("cpu")
    X = make_rows(50, 3)
    out = tmp_path / "trace.json"
    with wisp.profile(str(out)) as prof:
        s.score(X)
        s.score("1 3:0.5 17:1\n0 4\n")
    assert len(prof.records) == 2
    r0, r1 = prof.records
    assert r0["rows"] == 50 and r0["nnz"] == int(X[0][-1]) and r0["device"] == "cpu"
    assert r1["rows"] == 2 and r1["ns_total"] > 0 and r1["start_ns"] >= r0["start_ns"]
    assert prof.totals()["rows"] == 52
    assert "kernel" in prof.table()
    tr = json.loads(out.read_text())
    calls = [e for e in tr["traceEvents"] if e.get("cat") == "call"]
    assert len(calls) == 2 and calls[0]["args"]["rows"] == 50 and calls[0]["dur"] > 0
    assert tr["otherData"]["calls"] == 2
    s.score(X)                                  # stopped: nothing more recorded, C profile off
    assert len(prof.records) == 2
    with pytest.raises(RuntimeError):
        with wisp.profile():
            wisp.profile()
