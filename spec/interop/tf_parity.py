#!/usr/bin/env python3
"""tf_parity.py — TensorFlow parity of wisp.from_tensorflow: train linear models in TensorFlow on generated raw rows, import them with the package, score held-out raw rows with wisp, compare with TensorFlow's own predictions.

Usage: spec/interop/tf_parity.py [--train 20000] [--test 3000] [--steps 400] [--tol 1e-6] [--wisp build/wisp]
                                 [--keep DIR] [--no-keras]
       spec/interop/tf_parity.py --replay DIR [--wisp build/wisp]
           (no TensorFlow, no numpy, no package: `wisp score` on every device against the
            predictions kept in DIR by --keep; for a GPU machine where TensorFlow is not installed)
Needs TensorFlow (tensorflow-cpu), the wisp package (`import wisp`: make test-interop installs it
into $(BUILD)/interop-venv with pip) and the CLI (--wisp, default $WISP_CLI or build/wisp).

The columns are built here as a user builds them, with tf.feature_column:
numeric (a standard and an affine normalizer_fn, defaults), bucketized,
hash_bucket (a dense string input, a sparse one, an int64 one),
vocabulary_list (strings with OOV buckets; int64 without), identity (with a
default; inside an indicator_column), crossed (raw string and int64 keys, a
bucketized key, a vocabulary key, a sparse key, a hash_key, a raw float key). The model:
tf.compat.v1.feature_column.linear_model (the layer inside
tf.estimator.LinearClassifier), trained with FTRL on a synthetic click
model, saved as a checkpoint and as a SavedModel (both imported). wisp.from_tensorflow(columns, checkpoint,
path, inputs={"tags": sparse}, normalizers=...) writes the .wisp file and
its description. Held-out rows: missing values, random and non-ASCII
strings, "" and -1 markers, ages exactly at the bucket boundaries and one
float32 step either side, out-of-range hours, empty sparse lists. wisp
scores them as a dict of columns (the package, CPU; "auto" too when its build
sees a usable GPU), as JSON lines (the CLI, on the CPU and each GPU `wisp
devices` lists) and as TSV (the CLI, CPU); every probability must equal
TensorFlow's to --tol. The description written is exported again by
scripts/tools/tf_export.py (--columns, --checkpoint) and scored (JSON lines, CPU).
With tf_keras (Keras 2) importable, the same columns (categorical ones in
indicator_column) feed inputs -> DenseFeatures -> Dense(1, sigmoid), trained
with FTRL, saved as a SavedModel; it is imported twice: the live model
(its own columns and Inputs) and the saved directory (with the columns
given, since saving loses the normalizer functions), and compared the same
way; and tf_keras' premade LinearModel in place of the Dense layer (live,
the package on the CPU). --no-keras skips them. Prints one summary line; exit status 0 on success.
"""
import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

CITIES = ["c%05d" % i for i in range(3000)]
DEVICES = ["ios", "android", "web", "tv", "car"]          # tv and car are out of the vocabulary
TAGS = ["t%d" % i for i in range(40)]
AGE_BOUNDS = [18, 25, 30, 35, 40, 45, 50, 55, 60, 65]
ODD = ["", " ", "Zürich", "東京", "новый", "a\tb", "\"q\"", "x" * 300, "\u00e9\u0301", "0", "-1", "🙂"]
INPUT_TYPES = {"age": "float32", "income": "float32", "city": "string", "device": "string", "hour": "int64",
               "tags": "string", "zip": "int64", "slot": "int64", "dow": "int64"}
DEFAULTS = {"age": 35.0, "income": 0.0, "city": "", "device": "", "hour": -1, "zip": -1, "slot": -1, "dow": -1}
NORMALIZERS = {"age": {"type": "standard", "mean": 40.0, "std": 12.5},
               "income": {"type": "affine", "scale": 0.001, "shift": -0.5}}


def feature_columns(tf):
    """The model's columns, as a user writes them (for linear_model; keras_columns wraps categoricals)."""
    fc = tf.feature_column
    age = fc.numeric_column("age", default_value=35.0, normalizer_fn=lambda x: (x - 40.0) / 12.5)
    income = fc.numeric_column("income", default_value=0.0, normalizer_fn=lambda x: x * 0.001 + -0.5)
    age_b = fc.bucketized_column(fc.numeric_column("age", default_value=35.0), AGE_BOUNDS)
    city = fc.categorical_column_with_hash_bucket("city", 5000)
    device = fc.categorical_column_with_vocabulary_list("device", ["ios", "android", "web"], num_oov_buckets=2)
    hour = fc.categorical_column_with_identity("hour", 24, default_value=0)
    tags = fc.categorical_column_with_hash_bucket("tags", 64)
    zipc = fc.categorical_column_with_hash_bucket("zip", 1000, dtype=tf.int64)
    slot = fc.categorical_column_with_vocabulary_list("slot", [3, 7, 11, 42], dtype=tf.int64)
    dow = fc.indicator_column(fc.categorical_column_with_identity("dow", 7))
    return [age, income, age_b, city, device, hour, tags, zipc, slot, dow,
            fc.crossed_column(["city", age_b], 20000),
            fc.crossed_column([device, "hour"], 500),
            fc.crossed_column(["tags", "city"], 30000),
            fc.crossed_column([slot, age_b], 300, hash_key=0x1234567),
            fc.crossed_column(["income", device], 1000)]            # a raw float key: truncated to int64


def keras_columns(tf, cols):
    fc = tf.feature_column
    return [c if type(c).__name__ in ("NumericColumn", "BucketizedColumn", "IndicatorColumn")
            else fc.indicator_column(c) for c in cols]


def f32(x):
    import numpy as np
    return float(np.float32(x))


def edge_age(rng):
    import numpy as np
    b = np.float32(rng.choice(AGE_BOUNDS))
    return float(rng.choice([b, np.nextafter(b, np.float32(-np.inf)), np.nextafter(b, np.float32(np.inf))]))


def gen_rows(n, rng, holdout):
    rows, labels = [], []
    miss = 0.15 if holdout else 0.05
    for _ in range(n):
        r = {}
        if rng.random() > miss:
            r["age"] = edge_age(rng) if holdout and rng.random() < 0.3 else f32(min(90, max(16, rng.gauss(40, 13))))
        if rng.random() > miss:
            r["income"] = f32(rng.lognormvariate(7, 1.5)) if rng.random() < 0.95 else f32(-rng.lognormvariate(3, 2))
        if rng.random() > miss:
            u = rng.random()
            r["city"] = CITIES[min(len(CITIES) - 1, int(rng.paretovariate(1.1)) - 1)] if u < 0.85 \
                else "new%d" % rng.randrange(10**6) if u < 0.93 or not holdout else rng.choice(ODD)
        if rng.random() > miss:
            r["device"] = rng.choice(DEVICES) if holdout else rng.choice(DEVICES[:3] + ["tv"])
        if rng.random() > miss:
            r["hour"] = rng.randrange(24) if rng.random() < 0.95 else rng.choice([-1, 24, 30, 99])
        if rng.random() > miss:
            r["zip"] = rng.randrange(10000, 10200) if rng.random() < 0.9 else rng.choice([-1, 0, -77, 2**62, -2**63])
        if rng.random() > miss:
            r["slot"] = rng.choice([3, 7, 11, 42, 42, 5, -1])
        if rng.random() > miss:
            r["dow"] = rng.randrange(7)
        k = rng.choice([0, 0, 1, 2, 3])
        if k:
            r["tags"] = rng.sample(TAGS, k)
            if holdout and rng.random() < 0.1:
                r["tags"].append(rng.choice(ODD + ["t1"]))     # a new tag, "" (kept: a sparse input drops nothing), a repeat
        # a synthetic click model
        z = -1.0 + 0.03 * (r.get("age", 35) - 40) + (0.4 if r.get("device") == "ios" else 0)
        z += 0.6 * math.sin(zlib.crc32(r.get("city", "").encode()) % 7) + 0.2 * len(r.get("tags", []))
        z += 0.3 * (r.get("slot") == 42) - 0.2 * (r.get("dow", 0) in (5, 6)) + 0.1 * math.cos(r.get("hour", 0))
        labels.append(1.0 if rng.random() < 1 / (1 + math.exp(-z)) else 0.0)
        rows.append(r)
    return rows, labels


def feed_arrays(rows):
    """numpy arrays per input: dense ones [n, 1] with the defaults filled, tags as a sparse triple."""
    import numpy as np
    out, n = {}, len(rows)
    for name, t in INPUT_TYPES.items():
        if name == "tags":
            idx, vals = [], []
            for r, row in enumerate(rows):
                for k, v in enumerate(row.get(name, [])):
                    idx.append([r, k])
                    vals.append(v.encode())
            width = max([len(row.get(name, [])) for row in rows] + [1])
            out[name] = (np.array(idx, dtype=np.int64).reshape(-1, 2), np.array(vals, dtype=object), [n, width])
            continue
        col = [row.get(name, DEFAULTS[name]) for row in rows]
        if t == "string":
            out[name] = np.array([v.encode() for v in col], dtype=object).reshape(n, 1)
        else:
            out[name] = np.array(col, dtype=np.int64 if t == "int64" else np.float32).reshape(n, 1)
    return out


def tf_tensors(tf, rows):
    arr = feed_arrays(rows)
    return {k: tf.SparseTensor(*v) if isinstance(v, tuple) else tf.constant(v) for k, v in arr.items()}


def train_linear_model(tf, train, labels, test, steps, ckpt_dir):
    import numpy as np
    tf.compat.v1.disable_eager_execution()
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.set_random_seed(7)
        ph = {}
        for name, t in INPUT_TYPES.items():
            dt = {"float32": tf.float32, "int64": tf.int64, "string": tf.string}[t]
            ph[name] = tf.compat.v1.sparse_placeholder(dt, name=name) if name == "tags" \
                else tf.compat.v1.placeholder(dt, [None, 1], name=name)
        y = tf.compat.v1.placeholder(tf.float32, [None, 1])
        cols = feature_columns(tf)
        logits = tf.compat.v1.feature_column.linear_model(ph, cols)
        prob = tf.sigmoid(logits)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
        train_op = tf.compat.v1.train.FtrlOptimizer(0.2, l1_regularization_strength=0.001).minimize(loss)
        saver = tf.compat.v1.train.Saver()

        def feed(rows, lab=None):
            arr = feed_arrays(rows)
            fd = {p: tf.compat.v1.SparseTensorValue(*arr[k]) if isinstance(arr[k], tuple) else arr[k]
                  for k, p in ph.items()}
            if lab is not None:
                fd[y] = np.array(lab, dtype=np.float32).reshape(-1, 1)
            return fd

        with tf.compat.v1.Session(graph=g) as sess:
            sess.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.tables_initializer()])
            n, bs = len(train), 512
            for step in range(steps):
                i = (step * bs) % n
                sess.run(train_op, feed(train[i:i + bs], labels[i:i + bs]))
            final_loss = sess.run(loss, feed(train[:4000], labels[:4000]))
            path = saver.save(sess, os.path.join(ckpt_dir, "model.ckpt"))
            p = sess.run(prob, feed(test)).reshape(-1).astype(np.float64)
            saved = os.path.join(ckpt_dir, "saved_model")      # the same graph as a (v1) SavedModel directory
            tf.compat.v1.saved_model.simple_save(sess, saved, inputs=dict(ph), outputs={"p": prob})
    return cols, path, saved, p, float(final_loss)


def train_keras(tf, train, labels, test, work):
    """(live model, SavedModel dir, predictions, columns) or (None, why, None, None)."""
    import numpy as np
    try:
        import tf_keras as keras
    except ImportError:
        return None, "tf_keras not importable (pip install tf_keras)", None, None
    tf.random.set_seed(7)
    inputs = {}
    for name, t in INPUT_TYPES.items():
        dt = {"float32": tf.float32, "int64": tf.int64, "string": tf.string}[t]
        sparse = name == "tags"
        inputs[name] = keras.Input(shape=(None,) if sparse else (1,), sparse=sparse, dtype=dt, name=name)
    cols = keras_columns(tf, feature_columns(tf))
    x = keras.layers.DenseFeatures(cols, name="features")(inputs)
    out = keras.layers.Dense(1, activation="sigmoid", name="logit")(x)
    model = keras.Model(inputs, out)
    model.compile(optimizer=keras.optimizers.Ftrl(0.2, l1_regularization_strength=0.001), loss="binary_crossentropy")
    model.fit(tf_tensors(tf, train), np.array(labels, np.float32).reshape(-1, 1), batch_size=512, epochs=2, verbose=0)
    path = os.path.join(work, "keras_model")
    model.save(path)
    p = model.predict(tf_tensors(tf, test), batch_size=4096, verbose=0).reshape(-1).astype(np.float64)
    return model, path, p, cols


# ---- wisp ---------------------------------------------------------------------------------------

def as_columns(rows):
    """The held-out rows as a dict of columns for the package (None: missing; tags: a list per row)."""
    return {name: [r.get(name, [] if name == "tags" else None) for r in rows] for name in INPUT_TYPES}


def to_tsv(rows):
    names = [n for n in INPUT_TYPES if n != "tags"]
    lines = ["label\t" + "\t".join(names)]
    for r in rows:
        f = ["0"]
        for nm in names:
            v = r.get(nm)
            f.append("" if v is None else (repr(v) if isinstance(v, float) else str(v)))
        lines.append("\t".join(f))
    return "\n".join(lines) + "\n"


def tsv_safe(r):
    return not r.get("tags") and all("\t" not in v and "\n" not in v for v in (r.get("city"), r.get("device")) if v)


def cli_scores(cli, model, text, fmt, device):
    p = subprocess.run([cli, "score", "-m", model, "-f", fmt, "-d", device], input=text.encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise SystemExit("tf_parity: wisp score -f %s -d %s failed (%d): %s" % (fmt, device, p.returncode,
                                                                             p.stderr.decode()[-2000:]))
    return [float(x) for x in p.stdout.split()]


def cli_devices(cli):
    out = subprocess.run([cli, "devices"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout.decode()
    gpus = sorted(set(int(m) for m in re.findall(r"^gpu:(\d+)", out, re.M)))
    return ["cpu"] + ["gpu:%d" % i for i in gpus] + (["gpus"] if len(gpus) > 1 else [])


def worst(p, ref, idx=None):
    ref = [ref[i] for i in idx] if idx is not None else ref
    if len(p) != len(ref):
        return float("inf")
    return max([abs(float(a) - float(b)) for a, b in zip(p, ref)] + [0.0])


def wisp_compare(wisp, cli, model_path, test, jsonl, p_ref, devices, tag, res):
    """The package on `devices` (a dict of columns), the CLI on each of its devices (JSON lines) and on the CPU (TSV)."""
    m = wisp.load(model_path)
    cols = as_columns(test)
    for dev in devices:
        res["%s/dict@%s" % (tag, dev)] = worst(m.score(cols, device=dev, errors="raise"), p_ref)
    for dev in cli_devices(cli):
        res["%s/jsonl@%s" % (tag, dev)] = worst(cli_scores(cli, model_path, jsonl, "jsonl", dev), p_ref)
    safe = [i for i, r in enumerate(test) if tsv_safe(r)]
    res["%s/tsv@cpu" % tag] = worst(cli_scores(cli, model_path, to_tsv([test[i] for i in safe]), "tsv", "cpu"),
                                    p_ref, safe)
    return m, len(safe)


def replay(a):
    """Score the kept held-out rows on every device with the CLI and compare with the kept predictions."""
    with open(os.path.join(a.replay, "p_tf.json")) as f:
        kept = json.load(f)
    with open(os.path.join(a.replay, "test.jsonl")) as f:
        jsonl = f.read()
    devices = cli_devices(a.wisp)
    res = {}
    for fname, key in (("model.wisp", "p_tf"), ("keras.wisp", "p_keras")):
        path = os.path.join(a.replay, fname)
        if key in kept and os.path.exists(path):
            for dev in devices:
                res["%s@%s" % (fname, dev)] = worst(cli_scores(a.wisp, path, jsonl, "jsonl", dev), kept[key])
    ok = bool(res) and all(v <= a.tol for v in res.values())
    print("tf_parity --replay: %s: %d rows, TensorFlow %s, max |p_wisp - p_tf|: %s (tol %g); devices %s" % (
        "ok" if ok else "FAILED", len(kept["p_tf"]), kept["tensorflow"],
        ", ".join("%s %.2e" % kv for kv in sorted(res.items())), a.tol, ", ".join(devices)))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", type=int, default=20000)
    ap.add_argument("--test", type=int, default=3000)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--wisp", default=os.environ.get("WISP_CLI") or os.path.join(ROOT, "build", "wisp"),
                    help="the wisp CLI (default $WISP_CLI, else build/wisp)")
    ap.add_argument("--no-keras", action="store_true", help="skip the Keras (tf_keras) model")
    ap.add_argument("--keep", help="keep the checkpoint, models, held-out rows and predictions in this directory")
    ap.add_argument("--replay", help="compare `wisp score` with the predictions kept in this directory (no TensorFlow)")
    a = ap.parse_args()
    if not os.access(a.wisp, os.X_OK):
        raise SystemExit("tf_parity: the wisp CLI %s is missing (make, or --wisp)" % a.wisp)
    if a.replay:
        return replay(a)
    import numpy as np  # noqa: F401
    import tensorflow as tf
    try:
        import wisp
    except ImportError as e:
        raise SystemExit("tf_parity: `import wisp` fails (%s): install the package into this interpreter's venv "
                         "(make test-interop does: pip install . into $(BUILD)/interop-venv)" % e)
    rng = random.Random(a.seed)
    train, labels = gen_rows(a.train, rng, False)
    test, _ = gen_rows(a.test, rng, True)
    work = a.keep or tempfile.mkdtemp(prefix="wisp_tf_parity_")
    os.makedirs(work, exist_ok=True)
    devices = ["cpu"] + (["auto"] if any(d.get("usable") for d in wisp.devices()[1:]) else [])
    jsonl = "\n".join(json.dumps(r, ensure_ascii=False) for r in test) + "\n"
    res, notes = {}, []
    sparse = {"tags": {"sparse": True}}

    kmodel, kpath, p_k, kcols = None, "--no-keras", None, None
    if not a.no_keras:       # first: train_linear_model turns eager execution off for good
        t0 = time.perf_counter()
        kmodel, kpath, p_k, kcols = train_keras(tf, train, labels, test, work)
        if kmodel is None:
            notes.append("Keras SKIPPED: " + kpath)
        else:
            live = os.path.join(work, "keras_live.wisp")
            wisp.from_tensorflow(None, kmodel, live, normalizers=NORMALIZERS)           # its own columns, Inputs
            wisp_compare(wisp, a.wisp, live, test, jsonl, p_k, devices, "keras-live", res)
            saved = os.path.join(work, "keras.wisp")
            wisp.from_tensorflow(kcols, kpath, saved, normalizers=NORMALIZERS)          # the SavedModel directory
            wisp_compare(wisp, a.wisp, saved, test, jsonl, p_k, devices, "keras-saved", res)
            notes.append("Keras: mean p %.4f, training %.1fs" % (float(np.mean(p_k)), time.perf_counter() - t0))
            # the same columns into tf_keras' premade LinearModel (one epoch), live
            import tf_keras as keras
            ins = {n: l for n, l in zip(kmodel.input_names, kmodel.inputs)}
            lm = keras.Model(ins, keras.experimental.LinearModel(units=1, activation="sigmoid")(
                keras.layers.DenseFeatures(kcols)(ins)))
            lm.compile(optimizer=keras.optimizers.Ftrl(0.2), loss="binary_crossentropy")
            lm.fit(tf_tensors(tf, train), np.array(labels, np.float32).reshape(-1, 1), batch_size=512, epochs=1, verbose=0)
            p_lm = lm.predict(tf_tensors(tf, test), batch_size=4096, verbose=0).reshape(-1).astype(np.float64)
            lmpath = os.path.join(work, "keras_linearmodel.wisp")
            wisp.from_tensorflow(None, lm, lmpath, normalizers=NORMALIZERS)
            res["keras-LinearModel/dict@cpu"] = worst(wisp.load(lmpath).score(as_columns(test), device="cpu"), p_lm)
    t0 = time.perf_counter()
    cols, ckpt, saved_dir, p_tf, loss = train_linear_model(tf, train, labels, test, a.steps, work)
    t_train = time.perf_counter() - t0
    model_path = os.path.join(work, "model.wisp")
    m = wisp.from_tensorflow(cols, ckpt, model_path, inputs=sparse, normalizers=NORMALIZERS)
    _, n_tsv = wisp_compare(wisp, a.wisp, model_path, test, jsonl, p_tf, devices, "linear", res)
    sm_path = os.path.join(work, "saved_model.wisp")
    wisp.from_tensorflow(cols, saved_dir, sm_path, inputs=sparse, normalizers=NORMALIZERS)
    res["linear-SavedModel/dict@cpu"] = worst(wisp.load(sm_path).score(as_columns(test), device="cpu"), p_tf)
    spec_path = os.path.join(work, "columns.json")
    with open(spec_path, "w") as f:
        json.dump(m.columns, f, indent=1)
    # scripts/tools/tf_export.py, the wrapper for a hand-written description: the one just written, the same checkpoint
    exported = os.path.join(work, "tf_export.wisp")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "tools", "tf_export.py"), "--columns", spec_path,
                    "--checkpoint", ckpt, "--out", exported], check=True, stdout=subprocess.DEVNULL)
    res["tf_export/jsonl@cpu"] = worst(cli_scores(a.wisp, exported, jsonl, "jsonl", "cpu"), p_tf)
    if a.keep:
        with open(os.path.join(work, "test.jsonl"), "w") as f:
            f.write(jsonl)
        with open(os.path.join(work, "p_tf.json"), "w") as f:
            kept = {"tensorflow": tf.__version__, "p_tf": [float(x) for x in p_tf]}
            if p_k is not None:
                kept["p_keras"] = [float(x) for x in p_k]      # for keras.wisp, kept next to model.wisp
            json.dump(kept, f)
    ok = all(v <= a.tol for v in res.values())
    print("tf_parity: %s: %d held-out rows (%d via TSV), TensorFlow %s, %d columns, train loss %.4f, max |p_wisp - "
          "p_tf|: %s (tol %g); mean p %.4f; training %.1fs%s" % (
              "ok" if ok else "FAILED", len(test), n_tsv, tf.__version__, len(m.columns["columns"]), loss,
              ", ".join("%s %.2e" % kv for kv in sorted(res.items())), a.tol, float(np.mean(p_tf)), t_train,
              "".join("; " + n for n in notes)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
