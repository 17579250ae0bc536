"""spec/v2/conftest.py — fixtures of the Open Inference Protocol (KServe v2) specs: a real nginx with wisp.

Run through spec/v2/run.sh (its own venv, $WISP_BUILD/v2-venv). The environment it sets:
WISP_BUILD (the build dir: libwisp.so, the CLI), WISP_ROOT (the checkout).

Fixtures
--------
wisp_build   pathlib.Path of $WISP_BUILD (absolute).
wisp_cli     pathlib.Path of $WISP_BUILD/wisp.
v2_models   pathlib.Path of a session-wide directory (mode 755) holding the models of
             spec/v2/models.lua: plain.wisp (5000 features, no columns: an id model),
             plain_v2.wisp, tiny.wisp (10 features), ctr.wisp / ctr_v2.wisp (feature columns
             over the inputs age float32, city string, color string, uid int64, tags string sparse).
wisp_score   function(model_path, text, fmt="libsvm") -> list of floats: `wisp score -d cpu`
             on the rows in text (fmt "libsvm" or "jsonl"); a bad row is float("nan").
wisp_service factory (function scope; every service it started is stopped at teardown):

    svc = wisp_service(models={"plain": path, ...} | "name=path,...",
                       extra=["--workers", "2", ...],      # more serve.sh options
                       configure={"reload_check_s": 0.2},  # more configure{} options (Lua values:
                                                          # str, int, float, bool, list, dict)
                       admin=False,                        # True: serve.sh --admin-port (a free port)
                       wait_ready=True,                    # wait for /readyz 200 (else only /healthz)
                       timeout=30)

    svc.base          "http://127.0.0.1:PORT" (the inference listener)
    svc.admin_base    "http://127.0.0.1:APORT" with admin=True, else svc.base
    svc.port, svc.admin_port, svc.prefix (pathlib.Path: conf/, logs/), svc.models (the string passed)
    svc.url(path)     svc.base + path;  svc.admin_url(path)
    svc.get(path, **kw), svc.post(path, **kw)   requests on the inference listener (timeout 30 s)
    svc.error_log()   the text of logs/error.log
    svc.master_pid(), svc.worker_pids(), svc.alive() (master and every worker it had at start still run)
    svc.stop()        QUIT, up to 5 s, then KILL (idempotent)

    serve.sh's defaults otherwise: 1 worker here (extra=["--workers", "N"] for more), device cpu
    (WISP_V2_DEVICE=gpu, or WISP_TEST_GPU=1: gpu; WISP_OIP_DEVICE is its 0.1.x name),
    --max-rows 10000, --max-body 8m; started as root, the workers run as root (--user root: they
    read models under pytest's tmp_path, mode 700).

The first positional argument may also be the models (wisp_service("plain=/p/plain.wisp")).

v2_service  one service for a test module (module scope), 2 workers: the models plain, tiny and ctr
             of v2_models (version "1" each); stopped after the module.
A failed start raises RuntimeError with the error log's tail.
"""
import ctypes
import math
import os
import pathlib
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest
import requests

ROOT = pathlib.Path(os.environ.get("WISP_ROOT") or pathlib.Path(__file__).resolve().parents[2])
BUILD = pathlib.Path(os.environ.get("WISP_BUILD", "build"))
# the device the services score on: cpu, or gpu with WISP_V2_DEVICE=gpu or WISP_TEST_GPU=1 (the answers
# must still equal the CLI's CPU answers to 1e-6)
DEVICE = (
    os.environ.get("WISP_V2_DEVICE")
    or os.environ.get("WISP_OIP_DEVICE")
    or ("gpu" if os.environ.get("WISP_TEST_GPU") == "1" else "cpu")
)
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD


def _free_port():
    """A loopback port nothing listens on (spec/nginx/free_port.sh's rule: random in 20000-59999)."""
    for _ in range(100):
        p = random.randint(20000, 59999)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                continue
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", p)) != 0:
                return p
    raise RuntimeError("no free loopback port")


def _lua(v):
    """A Python value as a Lua literal (for configure{} options)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, (list, tuple)):
        return "{" + ", ".join(_lua(x) for x in v) + "}"
    if isinstance(v, dict):
        return "{" + ", ".join("[%s] = %s" % (_lua(k), _lua(x)) for k, x in v.items()) + "}"
    raise TypeError("configure option of type %s" % type(v).__name__)


def _nginx_bin():
    for p in (shutil.which("nginx"), "/usr/sbin/nginx", "/opt/devdeps/usr/sbin/nginx"):
        if p and os.access(p, os.X_OK):
            return p
    return None


class Service:
    def __init__(self, models, extra=(), configure=None, admin=False, wait_ready=True, timeout=30):
        if isinstance(models, dict):
            models = ",".join("%s=%s" % (k, v) for k, v in models.items())
        self.models = models
        self.nginx = _nginx_bin()
        if not self.nginx:
            raise RuntimeError("nginx not installed (make deps-test installs it)")
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="wisp-v2."))
        os.chmod(self.tmp, 0o755)
        self.prefix = self.tmp / "prefix"
        self._stopped = False
        self._workers0 = []
        err = ""
        for _ in range(5):
            self.port = _free_port()
            self.admin_port = None
            args = ["sh", str(ROOT / "examples/openresty/serve.sh"), "--render-only", "--prefix", str(self.prefix),
                    "--port", str(self.port), "--models", models, "--workers", "1", "--device", DEVICE,
                    "--build", str(BUILD)]
            if admin:
                self.admin_port = _free_port()
                while self.admin_port == self.port:
                    self.admin_port = _free_port()
                args += ["--admin-port", str(self.admin_port)]
            if os.getuid() == 0:
                # started as root, nginx runs its workers as nobody, who cannot read pytest's
                # tmp_path (mode 700): the workers run as root here (extra may say otherwise)
                args += ["--user", "root"]
            args += list(extra)
            r = subprocess.run(args, capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError("serve.sh --render-only failed: " + r.stderr + r.stdout)
            if configure:
                conf = self.prefix / "conf/nginx.conf"
                text = conf.read_text()
                # the options go last in the configure{} table (a key given twice: the last wins)
                start = text.index('require("wisp.nginx").configure {')
                close = text.index("\n        }\n", start)
                opts = "".join("\n            %s = %s," % (k, _lua(v)) for k, v in configure.items())
                conf.write_text(text[:close] + opts + text[close:])
            r = subprocess.run([self.nginx, "-p", str(self.prefix), "-c", "conf/nginx.conf"],
                               capture_output=True, text=True)
            if r.returncode == 0:
                break
            err = r.stderr
            if "Address already in use" not in err:
                raise RuntimeError("nginx did not start: " + err + self._log_tail())
        else:
            raise RuntimeError("nginx did not start (ports in use): " + err)
        self.base = "http://127.0.0.1:%d" % self.port
        self.admin_base = "http://127.0.0.1:%d" % self.admin_port if self.admin_port else self.base
        self.session = requests.Session()
        deadline = time.time() + timeout
        up = False
        while time.time() < deadline:
            try:
                if self.session.get(self.url("/healthz"), timeout=2).status_code == 200:
                    up = True
                    break
            except requests.RequestException:
                pass
            time.sleep(0.05)
        if not up:
            self.stop()
            raise RuntimeError("nginx: /healthz never answered 200" + self._log_tail())
        if wait_ready:
            ok = False
            while time.time() < deadline:
                try:
                    if self.session.get(self.url("/readyz"), timeout=2).status_code == 200:
                        ok = True
                        break
                except requests.RequestException:
                    pass
                time.sleep(0.05)
            if not ok:
                tail = self._log_tail()
                self.stop()
                raise RuntimeError("nginx: /readyz never answered 200" + tail)
        self._workers0 = self.worker_pids()

    def url(self, path):
        return self.base + path

    def admin_url(self, path):
        return self.admin_base + path

    def get(self, path, **kw):
        kw.setdefault("timeout", 30)
        return self.session.get(self.url(path), **kw)

    def post(self, path, **kw):
        kw.setdefault("timeout", 30)
        return self.session.post(self.url(path), **kw)

    def error_log(self):
        p = self.prefix / "logs/error.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def _log_tail(self):
        lines = self.error_log().splitlines()[-30:]
        return ("\n--- error.log (last 30 lines)\n" + "\n".join(lines)) if lines else ""

    def master_pid(self):
        try:
            return int((self.prefix / "logs/nginx.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def worker_pids(self):
        m = self.master_pid()
        if not m:
            return []
        r = subprocess.run(["pgrep", "-P", str(m)], capture_output=True, text=True)
        return sorted(int(x) for x in r.stdout.split())

    def alive(self):
        m = self.master_pid()
        if not m:
            return False
        try:
            os.kill(m, 0)
        except OSError:
            return False
        return all(os.path.exists("/proc/%d" % w) for w in self._workers0) and set(self._workers0) <= set(
            self.worker_pids()
        )

    def stop(self):
        if self._stopped:
            return
        self._stopped = True
        m = self.master_pid()
        if m:
            try:
                os.kill(m, signal.SIGQUIT)
                for _ in range(50):
                    os.kill(m, 0)
                    time.sleep(0.1)
                os.kill(m, signal.SIGKILL)
            except OSError:
                pass
        if (os.environ.get("WISP_V2_KEEP") or os.environ.get("WISP_OIP_KEEP")) != "1":
            shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def lib():
    """$WISP_BUILD/libwisp.so through ctypes, wisp_json_numbers and wisp_err_name declared (test_json_numbers*.py)"""
    L = ctypes.CDLL(str(BUILD / "libwisp.so"))
    f = L.wisp_json_numbers
    f.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                  ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
    f.restype = ctypes.c_int
    L.wisp_err_name.restype = ctypes.c_char_p
    L.wisp_err_name.argtypes = [ctypes.c_int]
    return L


@pytest.fixture(scope="session")
def wisp_build():
    return BUILD


@pytest.fixture(scope="session")
def wisp_cli():
    p = BUILD / "wisp"
    if not p.exists():
        pytest.exit("%s is missing: build it first (make BUILD=%s NVCC=)" % (p, BUILD))
    return p


@pytest.fixture(scope="session")
def v2_models(wisp_cli, tmp_path_factory):
    d = tmp_path_factory.mktemp("v2-models")
    os.chmod(d, 0o755)
    for p in d.parents:
        if str(p).startswith(tempfile.gettempdir() + "/") or str(p) == tempfile.gettempdir():
            try:
                os.chmod(p, os.stat(p).st_mode | 0o755)
            except OSError:
                pass
    r = subprocess.run([str(wisp_cli), "run", str(ROOT / "spec/v2/models.lua"), str(d)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("spec/v2/models.lua failed: " + r.stderr + r.stdout)
    return d


@pytest.fixture(scope="session")
def wisp_score(wisp_cli):
    def score(model_path, text, fmt="libsvm"):
        with tempfile.NamedTemporaryFile("w", suffix="." + fmt, delete=False) as f:
            f.write(text)
            name = f.name
        try:
            args = [str(wisp_cli), "score", "-m", str(model_path), "-d", "cpu"]
            if fmt != "libsvm":
                args += ["--format", fmt]
            r = subprocess.run(args + [name], capture_output=True, text=True)
        finally:
            os.unlink(name)
        if r.returncode not in (0, 1) or (r.returncode != 0 and not r.stdout):
            raise RuntimeError("wisp score failed (%d): %s" % (r.returncode, r.stderr))
        out = []
        for line in r.stdout.splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                out.append(float(line.split()[0]))
            except ValueError:
                out.append(math.nan)
        return out
    return score


@pytest.fixture
def wisp_service():
    started = []

    def start(models=None, extra=(), configure=None, admin=False, wait_ready=True, timeout=30):
        if models is None:
            raise TypeError("wisp_service: models= is required")
        s = Service(models, extra=extra, configure=configure, admin=admin, wait_ready=wait_ready, timeout=timeout)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="module")
def v2_service(v2_models):
    s = Service({"plain": v2_models / "plain.wisp", "tiny": v2_models / "tiny.wisp", "ctr": v2_models / "ctr.wisp"},
                extra=["--workers", "2"])
    yield s
    s.stop()
