"""test_fixture.py — the wisp_service fixture itself: nginx starts with the models asked for, configure{}
options reach the service, the admin listener is separate, and stop() ends every process."""
import os


def test_service_starts_serves_v1_and_stops(wisp_service, v2_models, wisp_score):
    rows = "0 1:0.5 3 4999:2\n0 7\n"
    svc = wisp_service(models={"plain": v2_models / "plain.wisp"})
    r = svc.post("/v1/models/plain:predict", data=rows, headers={"Content-Type": "text/x-libsvm"})
    assert r.status_code == 200, r.text
    want = wisp_score(v2_models / "plain.wisp", rows)
    assert [round(p, 6) for p in r.json()["predictions"]] == [round(p, 6) for p in want]
    assert svc.alive()
    pids = [svc.master_pid()] + svc.worker_pids()
    svc.stop()
    assert not any(os.path.exists("/proc/%d" % p) for p in pids)


def test_configure_options_and_admin_listener(wisp_service, v2_models):
    svc = wisp_service("plain=%s" % (v2_models / "plain.wisp"), configure={"max_rows_per_request": 3}, admin=True,
                       extra=["--workers", "2"])
    r = svc.post("/v1/models/plain:predict", data="0 1\n" * 4, headers={"Content-Type": "text/x-libsvm"})
    assert r.status_code == 413, r.text
    assert svc.get("/metrics").status_code == 403
    assert svc.session.get(svc.admin_url("/metrics"), timeout=10).status_code == 200
    assert len(svc.worker_pids()) == 2
