"""record.py — what every Python benchmark records and where (the Python one of three: record.lua, record.sh).

    sys.path.insert(0, os.path.join(<root>, "scripts", "lib")); import record
    rec = record.take_record_flag(sys.argv)            # removes --record; True if asked to record (or WISP_RECORD=1)
    path = args.out or record.out_path("bench_x-%s.json" % label, rec)
    record.write(path, doc)                            # envelope(doc) -> JSON (indent 2) -> "wrote PATH" on stderr

commit(): WISP_COMMIT when set (a copy of the tree without .git, such as the device machine's,
knows its commit only that way), else git's short HEAD, with "+uncommitted" when tracked files
outside scripts/results differ from it, else "unknown (why)". machine(): cpu, cores, gpu and a
one-line machine. out_path(): build/results/ unless recording (scripts/results/), so a benchmark
never dirties the tree. envelope(): a document in scripts/results/SCHEMA.md's schema (the same
rules as record.lua's envelope, which scripts/results/check.lua applies).
"""
import datetime
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REQUIRED = ("machine", "cpu", "cores", "gpu", "commit", "date", "command", "peers", "results")
OPTIONAL = ("benchmark", "label", "script", "issue", "what", "description", "note", "notes", "annotation",
            "setup", "workload", "mode", "device", "seconds", "machine_detail", "wisp_version",
            "definitions", "targets", "superseded")


def _out(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return r.stdout.strip() if r.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def commit(root=ROOT):
    env = os.environ.get("WISP_COMMIT")
    if env:
        return env
    c = _out(["git", "-C", root, "rev-parse", "--short", "HEAD"])
    if not c:
        return "unknown (WISP_COMMIT not set and no git checkout)"
    if _out(["git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!scripts/results"]):
        c += "+uncommitted"
    return c


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown (no model name in /proc/cpuinfo)"


def machine():
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or "unknown (os.cpu_count() failed)"
    names = [n for n in _out(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]).splitlines() if n.strip()]
    if not names:
        gpu = "none (no nvidia-smi)" if shutil.which("nvidia-smi") is None else "none (nvidia-smi lists no GPU)"
    elif len(set(names)) == 1:
        gpu = names[0] if len(names) == 1 else "%d x %s" % (len(names), names[0])
    else:
        gpu = " + ".join(names)
    name = os.environ.get("WISP_MACHINE") or "%s: %s cores, %s" % (os.uname().nodename, cores, gpu)
    return {"machine": name, "cpu": cpu_model(), "cores": cores, "gpu": gpu}


def take_record_flag(argv):
    """Removes every --record from argv (in place); True if there was one or WISP_RECORD=1."""
    found = os.environ.get("WISP_RECORD") == "1"
    while "--record" in argv:
        argv.remove("--record")
        found = True
    return found


def out_path(name, record=False):
    d = os.path.join(ROOT, "scripts" if record else "build", "results")
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def envelope(doc, facts=None):
    """A copy of doc in the schema: the machine facts from doc's own "machine" object when it has one
    (kept as machine_detail), else from machine(); "peer" becomes "peers"; every other key that is
    neither required nor optional is a figure and moves under "results" (an array "results" becomes
    results["runs"]). Key order is kept. Never invents a figure."""
    facts = facts or machine()
    detail = doc.get("machine") if isinstance(doc.get("machine"), dict) else None
    out, results = {}, {}
    for k, v in doc.items():
        if k == "results":
            if isinstance(v, list):
                results["runs"] = v
            elif isinstance(v, dict):
                results.update(v)
            else:
                results["value"] = v
        elif k == "peer" and "peers" not in doc:
            out["peers"] = v
        elif k == "machine" and detail is not None:
            out["machine_detail"] = detail
        elif k in REQUIRED or k in OPTIONAL:
            out[k] = v
        else:
            results[k] = v
    if not isinstance(out.get("machine"), str):
        out["machine"] = facts["machine"]
    d = detail or {}
    out.setdefault("cpu", d.get("cpu") or facts["cpu"])
    out.setdefault("cores", d.get("cores") or d.get("logical_cpus") or facts["cores"])
    out.setdefault("gpu", d.get("gpu") or facts["gpu"])
    out.setdefault("commit", commit())
    out.setdefault("date", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    out["results"] = results
    order = [k for k in REQUIRED[:-1] if k in out] + [k for k in out if k not in REQUIRED] + ["results"]
    return {k: out[k] for k in order}


def write(path, doc, indent=2):
    env = envelope(doc)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(env, f, indent=indent)
        f.write("\n")
    os.replace(path + ".tmp", path)
    sys.stderr.write("wrote %s\n" % path)
    return env
