#!/usr/bin/env python3
"""vw_parity.py — Vowpal Wabbit parity: train logistic models with the real VW (the vowpalwabbit PyPI package) on generated data, import them with `wisp import vw`, score held-out lines with `wisp score --format vw`, compare with VW's own predictions.

Usage: spec/interop/vw_parity.py [--wisp build/wisp] [--train 20000] [--test 3000] [--tol 1e-5] [--keep DIR]
       spec/interop/vw_parity.py --replay DIR   (no VW needed: import the text models kept in DIR by
                                                 --keep and compare wisp on every device, GPUs
                                                 included, with the predictions kept there)
Needs `import vowpalwabbit` (pip install vowpalwabbit) and a built wisp CLI.

The data: a numeric namespace (|num age:37.5 income:0.42 ..., with a namespace
weight on some lines), a categorical namespace (|cat city_Paris device_ios
hour_13 ..., digits-only names too, hashed as integers by VW), a tags
namespace with several features per line, tags and importance weights in the
labels. Labels come from a logistic model with interactions. Each
configuration trains `vw --loss_function logistic ...` on the training lines
(--readable_model or --invert_hash), then:
  1. VW predicts the held-out lines: `vw -t -i model.bin --link logistic -p preds`
  2. wisp imports the text model and scores the same lines (CLI, --device cpu and auto)
  3. |p_wisp - p_vw| <= --tol on every line (VW's -p file prints 6 decimals, so
     the probabilities are also taken at full precision from pylibvw's predict)
  4. the same model with VW's exact float weights (pylibvw get_weight, written
     with 9 significant digits) must agree to 2e-6: this isolates the hashing
     from the 6-digit rounding of VW's readable model
Prints one summary line; exit status 0 on success.
"""
import argparse
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

try:
    import vowpalwabbit  # noqa: E402
except ImportError:         # --replay works without VW
    vowpalwabbit = None

CITIES = ["Paris", "Lyon", "Berlin", "Madrid", "Rome", "Oslo", "Lima", "Tokyo"] + ["c%04d" % i for i in range(400)]
DEVICES = ["ios", "android", "web", "tv"]
TAGS = ["t%d" % i for i in range(60)]

CONFIGS = [
    # name, VW training options, which text model
    ("b18_q_ab", "-b 18 -q nc", "readable"),
    ("b20_seed_nocon_invert", "-b 20 -q nc -q ct -q cc --hash_seed 11 --noconstant", "invert"),
    ("b16_hash_all_ignore_linear", "-b 16 -q ct --hash all --ignore_linear t", "readable"),
]


def gen_rows(n, rng):
    rows = []
    for i in range(n):
        age = rng.uniform(18, 80)
        income = rng.lognormvariate(0, 1)
        clicks = rng.randrange(0, 30)
        city = rng.choice(CITIES[:8]) if rng.random() < 0.6 else rng.choice(CITIES)
        device = rng.choice(DEVICES)
        hour = rng.randrange(24)
        zip_ = rng.randrange(10000, 99999)
        tags = rng.sample(TAGS, rng.randrange(0, 5))
        # the true model: linear + interactions
        z = -1.0 + 0.03 * (age - 40) + 0.4 * math.log(income) + 0.05 * clicks
        z += {"ios": 0.5, "android": 0.1, "web": -0.3, "tv": -0.8}[device]
        z += 0.6 if city in ("Paris", "Tokyo") else -0.1
        z += 0.4 * (device == "ios" and hour >= 18) - 0.3 * (len(tags) > 2)
        z += 0.02 * (age - 40) * (device == "web")
        y = 1 if rng.random() < 1 / (1 + math.exp(-z)) else -1
        num = "|num age:%.2f income:%.5f clicks:%d" % (age, income, clicks)
        if rng.random() < 0.1:
            num = "|num:0.5 age:%.2f income:%.5f clicks:%d" % (age, income, clicks)
        cat = "|cat city_%s device_%s hour_%d %d" % (city, device, hour, zip_)
        tg = "|tags " + " ".join(tags) if tags else "|tags"
        label = str(y)
        r = rng.random()
        if r < 0.1:
            label += " 2.0"                      # importance weight
        elif r < 0.2:
            label += " 'row%d" % i               # a tag
        rows.append("%s %s %s %s" % (label, num, cat, tg))
    return rows


def vw(args, quiet=True):
    """Run VW's command line (python -m vowpalwabbit) and fail loudly."""
    cmd = [sys.executable, "-m", "vowpalwabbit"] + args.split() + (["--quiet"] if quiet else [])
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit("vw_parity: %s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr[-2000:]))


def read_preds(path):
    with open(path) as f:
        return [float(line.split()[0]) for line in f if line.strip()]


def wisp_score(wisp, model, data, device):
    r = subprocess.run([wisp, "score", "--format", "vw", "-d", device, "-m", model, data],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit("vw_parity: wisp score -d %s failed (%d): %s" % (device, r.returncode, r.stderr[-2000:]))
    return [float(x) for x in r.stdout.split()]


def wisp_import(wisp, src, dst):
    r = subprocess.run([wisp, "import", "vw", src, dst], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit("vw_parity: wisp import vw %s failed (%d): %s" % (src, r.returncode, r.stderr[-2000:]))
    return r.stderr.strip()


def exact_readable(model_bin, opts, readable_src, out_path):
    """The readable model's header with VW's exact float weights (pylibvw), 9 significant digits."""
    ws = vowpalwabbit.Workspace("--quiet -i %s" % model_bin)
    n = ws.num_weights()
    with open(readable_src) as f:
        header = []
        for line in f:
            head = line.split(" ")[0]
            if ":" in head and head.rsplit(":", 2)[-2].isdigit():
                break                               # the first weight line
            header.append(line)
    nz = 0
    with open(out_path, "w") as f:
        f.writelines(header)
        for i in range(n):
            w = ws.get_weight(i)
            if w != 0.0:
                f.write("%d:%.9g\n" % (i, w))
                nz += 1
    ws.finish()
    return nz


def replay(a):
    """Score the kept test lines with the kept text models on cpu, auto and every GPU; compare."""
    t0 = time.time()
    test_path = os.path.join(a.replay, "test.vw")
    r = subprocess.run([a.wisp, "devices"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    gpus = [ln.split()[0] for ln in r.stdout.splitlines() if ln.startswith("gpu:") and "unusable" not in ln]
    failures, summary = [], []
    for name, _, _ in CONFIGS:
        d = os.path.join(a.replay, name)
        p_vw = read_preds(os.path.join(d, "preds_full.txt"))
        for src, tol in (("model.txt", a.tol), ("exact.txt", 2e-6)):
            wm = os.path.join(d, "replay_" + src.replace(".txt", ".wisp"))
            wisp_import(a.wisp, os.path.join(d, src), wm)
            for device in ["cpu", "auto"] + gpus:
                p = wisp_score(a.wisp, wm, test_path, device)
                diff = max(abs(x - y) for x, y in zip(p, p_vw)) if len(p) == len(p_vw) else float("inf")
                if diff > tol:
                    failures.append("%s %s (%s): max |diff| %.3g > %g" % (name, src, device, diff, tol))
                summary.append("%s/%s/%s %.2g" % (name, src[:5], device, diff))
    for f in failures:
        print("vw_parity: FAIL: " + f)
    print("vw_parity --replay: %d lines, devices cpu, auto%s: %s (%.0f s)" % (
        len(p_vw), "".join(", " + g for g in gpus), "; ".join(summary), time.time() - t0))
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wisp", default=os.path.join(ROOT, "build", "wisp"))
    ap.add_argument("--train", type=int, default=20000)
    ap.add_argument("--test", type=int, default=3000)
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", help="keep the data, models and predictions in this directory")
    ap.add_argument("--replay", help="compare wisp with the predictions kept in this directory by --keep")
    a = ap.parse_args()
    if not os.access(a.wisp, os.X_OK):
        raise SystemExit("vw_parity: %s is not an executable (make first, or --wisp PATH)" % a.wisp)
    if a.replay:
        return replay(a)
    if vowpalwabbit is None:
        raise SystemExit("vw_parity: needs the vowpalwabbit package (pip install vowpalwabbit)")
    tmp = a.keep or tempfile.mkdtemp(prefix="wisp_vw_parity_")
    os.makedirs(tmp, exist_ok=True)
    rng = random.Random(a.seed)
    train, test = gen_rows(a.train, rng), gen_rows(a.test, rng)
    train_path, test_path = os.path.join(tmp, "train.vw"), os.path.join(tmp, "test.vw")
    with open(train_path, "w") as f:
        f.write("\n".join(train) + "\n")
    with open(test_path, "w") as f:
        f.write("\n".join(test) + "\n")

    t0 = time.time()
    summary, failures, worst = [], [], 0.0
    for name, opts, kind in CONFIGS:
        d = os.path.join(tmp, name)
        os.makedirs(d, exist_ok=True)
        text_model = os.path.join(d, "model.txt")
        model_bin = os.path.join(d, "model.bin")
        flag = "--readable_model" if kind == "readable" else "--invert_hash"
        vw("--loss_function logistic %s -d %s -f %s %s %s --passes 1" % (opts, train_path, model_bin, flag, text_model))
        preds_path = os.path.join(d, "preds.txt")
        vw("-t -i %s -d %s -p %s --link logistic" % (model_bin, test_path, preds_path))
        p_file = read_preds(preds_path)
        # full-precision predictions from the same model
        ws = vowpalwabbit.Workspace("--quiet -t -i %s --link logistic" % model_bin)
        p_vw = []
        for line in test:
            ex = ws.example(line)
            p_vw.append(ws.predict(ex))
            ws.finish_example(ex)
        ws.finish()
        with open(os.path.join(d, "preds_full.txt"), "w") as f:
            f.write("".join("%.9g\n" % x for x in p_vw))
        if len(p_file) != len(test) or max(abs(x - y) for x, y in zip(p_file, p_vw)) > 1e-6:
            failures.append("%s: VW's -p file and pylibvw disagree" % name)
        wisp_model = os.path.join(d, "model.wisp")
        wisp_import(a.wisp, text_model, wisp_model)
        for device in ("cpu", "auto"):
            p_wisp = wisp_score(a.wisp, wisp_model, test_path, device)
            if len(p_wisp) != len(test):
                failures.append("%s (%s): wisp printed %d probabilities for %d lines" % (name, device, len(p_wisp), len(test)))
                continue
            diff = max(abs(x - y) for x, y in zip(p_wisp, p_vw))
            diff_file = max(abs(x - y) for x, y in zip(p_wisp, p_file))
            worst = max(worst, diff)
            if diff > a.tol or diff_file > a.tol + 5e-7:
                i = max(range(len(test)), key=lambda k: abs(p_wisp[k] - p_vw[k]))
                failures.append("%s (%s): max |p_wisp - p_vw| = %.3g > %g at held-out line %d: %r (wisp %.9g, VW %.9g)"
                                % (name, device, diff, a.tol, i + 1, test[i][:120], p_wisp[i], p_vw[i]))
            if device == "cpu":
                summary.append("%s %.2g" % (name, diff))
        # exact weights: the hashing alone
        exact_txt, exact_wisp = os.path.join(d, "exact.txt"), os.path.join(d, "exact.wisp")
        exact_readable(model_bin, opts, text_model, exact_txt)
        wisp_import(a.wisp, exact_txt, exact_wisp)
        p_exact = wisp_score(a.wisp, exact_wisp, test_path, "cpu")
        dx = max(abs(x - y) for x, y in zip(p_exact, p_vw))
        if dx > 2e-6:
            failures.append("%s: with VW's exact weights max |diff| = %.3g > 2e-6" % (name, dx))
        summary[-1] += " (exact weights %.2g)" % dx
    if not a.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        for f in failures:
            print("vw_parity: FAIL: " + f)
        return 1
    print("vw_parity: VW %s, %d held-out lines x %d models (%d training lines), wisp = VW to %g: max |diff| %s (%.0f s)"
          % (vowpalwabbit.__version__, len(test), len(CONFIGS), len(train), a.tol, ", ".join(summary), time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
