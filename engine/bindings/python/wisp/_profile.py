"""_profile.py — wisp.profile(): a record per scoring call (the C profile of each call: parse, transform, h2d, kernel,
d2h, sync, overhead, bytes) and the Chrome/Perfetto trace JSON, the layout lua/wisp/profile.lua writes.

    with wisp.profile("trace.json") as prof:      # or prof = wisp.profile(); ...; prof.stop()
        session.score(X)
    print(prof.table())                          # open trace.json in https://ui.perfetto.dev

While a profile runs, every Session.score switches its session's C profile on
(wisp_session_set_profiling) and appends what the call added to each statistic
and when it started (wisp_clock_ns's clock). Stage durations are measured; their
places inside a call are in pipeline order (transform, h2d, kernel, d2h, sync,
overhead at the end), since the engine keeps durations, not per-stage timestamps.
When no profile runs, Session.score pays one global lookup.
"""
import json

from . import _wisp

STAGES = ("parse", "transform", "h2d", "kernel", "d2h", "sync", "overhead")
active = None           # the running Profile (one at a time)


class Profile:
    """A running or stopped profile: .records (one dict per call: session,
    device, start_ns and the statistics it added), table(), trace(), write(path)."""

    def __init__(self, path=None, max_records=1_000_000):
        self.path = path
        self.max_records = max_records
        self.records = []
        self.dropped = 0
        self.sessions = []
        self.t0_ns = _wisp.clock_ns()

    def _begin(self, session):
        if session not in self.sessions:
            self.sessions.append(session)
            session._s.set_profiling(True)

    def _record(self, session, name):
        s = session._s
        if s is None:
            return
        if len(self.records) >= self.max_records:
            self.dropped += 1
            return
        start, st = s.last_stats()
        st["start_ns"], st["name"], st["device"], st["session"] = start, name, s.last_device(), id(session)
        self.records.append(st)

    def stop(self):
        """Stop recording (the C profile of the sessions it switched on is switched off); writes path if given."""
        global active
        if active is self:
            active = None
        for sess in self.sessions:
            if sess._s is not None:
                sess._s.set_profiling(False)
        if self.path:
            self.write(self.path)
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def totals(self):
        """The records' statistics summed (a dict of the stat names)."""
        out = {}
        for r in self.records:
            for k, v in r.items():
                if isinstance(v, int) and k not in ("start_ns", "session"):
                    out[k] = out.get(k, 0) + v
        return out

    def table(self):
        """The stage breakdown as text: per stage the total, per batch and share of the calls' wall time."""
        st = self.totals()
        wall = max(st.get("ns_total", 0), 1)
        batches = max(st.get("batches", 0), 1)
        lines = ["%-10s %12s %12s %7s" % ("stage", "total ms", "us/batch", "share")]
        for name in STAGES:
            ns = st.get("ns_" + name, 0)
            lines.append("%-10s %12.3f %12.2f %6.1f%%" % (name, ns / 1e6, ns / batches / 1e3, 100.0 * ns / wall))
        lines.append("%d calls, %d batches, %d rows, %d bytes h2d, %d bytes d2h" % (
            len(self.records), st.get("batches", 0), st.get("rows", 0), st.get("bytes_h2d", 0), st.get("bytes_d2h", 0)))
        return "\n".join(lines)

    def trace(self):
        """The trace as a dict {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}."""
        ev = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "wisp"}}]
        tracks = set()

        def track(tid, name):
            if tid not in tracks:
                tracks.add(tid)
                ev.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": name}})
                ev.append({"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid, "args": {"sort_index": tid}})

        t0 = min([self.t0_ns] + [r["start_ns"] for r in self.records if r["start_ns"] > 0])

        def x(tid, name, start, dur, args=None, cat="wisp"):
            e = {"name": name, "cat": cat, "ph": "X", "pid": 1, "tid": tid, "ts": (start - t0) / 1e3, "dur": dur / 1e3}
            if args:
                e["args"] = args
            ev.append(e)

        track(1, "python caller thread")
        gpus = {}
        for r in self.records:
            s0, total = r["start_ns"], r.get("ns_total", 0)
            args = {k: r.get(k, 0) for k in ("rows", "nnz", "bytes_h2d", "bytes_d2h", "fallbacks", "batches")}
            args["device"] = r["device"]
            x(1, r["name"], s0, total, args, "call")
            cur = s0
            if r.get("ns_parse", 0):
                x(1, "parse", cur, r["ns_parse"], None, "parse")
                cur += r["ns_parse"]
            if r.get("ns_transform", 0):
                x(1, "transform", cur, r["ns_transform"], None, "stage")
                cur += r["ns_transform"]
            dev = r["device"]
            if dev.startswith("gpu"):
                base = gpus.setdefault(dev, 10 + 3 * len(gpus))
                for i, (st, what) in enumerate((("h2d", "copy"), ("kernel", "compute"), ("d2h", "copy"))):
                    track(base + i, "%s %s (%s stream)" % (dev, st, what))
                    if r.get("ns_" + st, 0):
                        x(base + i, st, cur, r["ns_" + st], None, "stage")
                        cur += r["ns_" + st]
            elif r.get("ns_kernel", 0):
                track(2, "cpu scoring (engine pool)")
                x(2, "kernel (cpu)", cur, r["ns_kernel"], {"rows": r.get("rows", 0)}, "stage")
                cur += r["ns_kernel"]
            if r.get("ns_sync", 0):
                x(1, "sync", cur, r["ns_sync"], None, "stage")
            if r.get("ns_overhead", 0):
                x(1, "overhead", s0 + total - r["ns_overhead"], r["ns_overhead"], None, "stage")
        return {"traceEvents": ev, "displayTimeUnit": "ns",
                "otherData": {"producer": "wisp %s (engine/bindings/python/wisp/_profile.py)" % _wisp.version(),
                              "calls": len(self.records), "dropped": self.dropped}}

    def write(self, path):
        """Write the trace JSON to path."""
        with open(path, "w") as f:
            json.dump(self.trace(), f)


def start(path=None, max_records=1_000_000):
    global active
    if active is not None:
        raise RuntimeError("wisp.profile: a profile is already running (stop it first)")
    active = Profile(path, max_records)
    return active
