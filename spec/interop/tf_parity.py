#!/usr/bin/env python3
"""tf_parity.py — TensorFlow parity: train a linear model in TensorFlow on generated raw rows, export it with scripts/tools/tf_export.py, score held-out rows with wisp, compare.

Usage: spec/interop/tf_parity.py [--train 20000] [--test 3000] [--steps 400] [--tol 1e-5] [--keep DIR]
       spec/interop/tf_parity.py --replay DIR     (no TensorFlow, no numpy: compare wisp on every
                                                   device with the predictions kept in DIR by --keep;
                                                   for a GPU machine where TensorFlow is not installed)
Needs TensorFlow (tensorflow-cpu) and a built libwisp.so ($WISP_LIB or build/libwisp.so).

The model: tf.compat.v1.feature_column.linear_model (the layer inside
tf.estimator.LinearClassifier; the same variable names under "linear_model/")
over numeric (normalized), bucketized, hash_bucket (dense and sparse
inputs), vocabulary_list (OOV buckets), identity and crossed columns (raw
keys, a bucketized key, an int64 key), trained with FTRL on a synthetic
click model. Held-out rows include missing values, out-of-vocabulary
strings, -1 and "" markers and empty sparse lists. wisp reads the held-out
rows as TSV (with a header) and as JSON lines, transforms them on the CPU,
scores them on the CPU and, when a GPU is usable, on "auto" too, and every
probability must equal TensorFlow's to --tol.
When the tf_keras package is importable (pip install tf_keras), the same
columns (categorical ones in indicator_column) also feed a Keras 2 model,
inputs -> DenseFeatures -> Dense(1, sigmoid), trained with FTRL, saved as a
SavedModel, exported with tf_export.py --keras and compared the same way
(--no-keras skips it). Prints one summary line; exit status 0 on success.
"""
import argparse
import ctypes
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts", "tools"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

try:
    import numpy as np  # noqa: E402
except ImportError:        # --replay works without numpy
    np = None

import tf_export  # noqa: E402

CITIES = ["c%05d" % i for i in range(3000)]
DEVICES = ["ios", "android", "web", "tv", "car"]          # tv and car are out of the vocabulary
TAGS = ["t%d" % i for i in range(40)]


def description():
    age = {"type": "numeric", "key": "age", "normalizer": {"type": "standard", "mean": 40.0, "std": 12.5}}
    age_b = {"type": "bucketized", "source": {"type": "numeric", "key": "age"},
             "boundaries": [18, 25, 30, 35, 40, 45, 50, 55, 60, 65]}
    spec = {"format": "wisp-columns", "version": 1,
            "inputs": [{"name": "age", "dtype": "float32", "default": 35.0},
                       {"name": "income", "dtype": "float32", "default": 0.0},
                       {"name": "city", "dtype": "string"},
                       {"name": "device", "dtype": "string"},
                       {"name": "hour", "dtype": "int64"},
                       {"name": "tags", "dtype": "string", "sparse": True}],
            "columns": [dict(age, name="age"),
                        {"name": "income", "type": "numeric", "key": "income",
                         "normalizer": {"type": "affine", "scale": 0.001, "shift": -0.5}},
                        dict(age_b, name="age_bucketized"),
                        {"name": "city", "type": "hash_bucket", "key": "city", "buckets": 5000},
                        {"name": "device", "type": "vocabulary_list", "key": "device",
                         "vocabulary": ["ios", "android", "web"], "num_oov_buckets": 2},
                        {"name": "hour", "type": "identity", "key": "hour", "buckets": 24, "default_value": 0},
                        {"name": "tags", "type": "hash_bucket", "key": "tags", "buckets": 64},
                        {"name": "age_bucketized_X_city", "type": "crossed", "keys": ["city", age_b], "buckets": 20000},
                        {"name": "device_X_hour", "type": "crossed", "keys": ["device", "hour"], "buckets": 500},
                        {"name": "city_X_tags", "type": "crossed", "keys": ["tags", "city"], "buckets": 30000}]}
    tf_export.assign_offsets(spec)
    return spec


def f32(x):
    return float(np.float32(x))


def gen_rows(n, rng, holdout):
    rows, labels = [], []
    miss = 0.15 if holdout else 0.05
    for _ in range(n):
        r = {}
        if rng.random() > miss:
            r["age"] = f32(min(90, max(16, rng.gauss(40, 13))))
        if rng.random() > miss:
            r["income"] = f32(rng.lognormvariate(7, 1))
        if rng.random() > miss:
            r["city"] = CITIES[min(len(CITIES) - 1, int(rng.paretovariate(1.1)) - 1)] if rng.random() < 0.9 \
                else "new%d" % rng.randrange(10**6)
        elif holdout and rng.random() < 0.5:
            r["city"] = ""
        if rng.random() > miss:
            r["device"] = rng.choice(DEVICES) if holdout else rng.choice(DEVICES[:3] + ["tv"])
        if rng.random() > miss:
            r["hour"] = rng.randrange(24) if rng.random() < 0.97 else rng.choice([-1, 30, 99])
        k = rng.choice([0, 0, 1, 2, 3])
        if k:
            r["tags"] = rng.sample(TAGS, k)
        # a synthetic click model
        z = -1.0 + 0.03 * (r.get("age", 35) - 40) + (0.4 if r.get("device") == "ios" else 0)
        z += 0.6 * math.sin(zlib.crc32(r.get("city", "").encode()) % 7) + 0.2 * len(r.get("tags", []))
        labels.append(1.0 if rng.random() < 1 / (1 + math.exp(-z)) else 0.0)
        rows.append(r)
    return rows, labels


def feed_arrays(spec, rows):
    """numpy arrays per input (dense: defaults filled) and sparse triples."""
    out = {}
    n = len(rows)
    for inp in spec["inputs"]:
        name = inp["name"]
        if inp.get("sparse"):
            idx, vals = [], []
            for r, row in enumerate(rows):
                for k, v in enumerate(row.get(name, [])):
                    idx.append([r, k])
                    vals.append(v.encode())
            out[name] = (np.array(idx, dtype=np.int64).reshape(-1, 2), np.array(vals, dtype=object), [n, 3])
        else:
            d = tf_export.input_default(inp)
            col = [row.get(name, d) for row in rows]
            if inp["dtype"] == "string":
                out[name] = np.array([v.encode() for v in col], dtype=object).reshape(n, 1)
            elif inp["dtype"] == "int64":
                out[name] = np.array(col, dtype=np.int64).reshape(n, 1)
            else:
                out[name] = np.array(col, dtype=np.float32).reshape(n, 1)
    return out


def train_and_predict(spec, train, labels, test, steps, ckpt_dir, rng):
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.set_random_seed(7)
        ph = {}
        for inp in spec["inputs"]:
            dt = {"float32": tf.float32, "int64": tf.int64, "string": tf.string}[inp["dtype"]]
            ph[inp["name"]] = tf.compat.v1.sparse_placeholder(dt, name=inp["name"]) if inp.get("sparse") \
                else tf.compat.v1.placeholder(dt, [None, 1], name=inp["name"])
        y = tf.compat.v1.placeholder(tf.float32, [None, 1])
        logits = tf.compat.v1.feature_column.linear_model(ph, tf_export.tf_columns(spec))
        prob = tf.sigmoid(logits)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
        train_op = tf.compat.v1.train.FtrlOptimizer(0.2, l1_regularization_strength=0.001).minimize(loss)
        saver = tf.compat.v1.train.Saver()

        def feed(rows, lab=None):
            arr = feed_arrays(spec, rows)
            fd = {}
            for name, p in ph.items():
                if isinstance(arr[name], tuple):
                    fd[p] = tf.compat.v1.SparseTensorValue(*arr[name])
                else:
                    fd[p] = arr[name]
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
            p = sess.run(prob, feed(test)).reshape(-1)
    return path, p, float(final_loss)


def train_keras(spec, train, labels, test, work):
    """A tf_keras model over the description's columns; returns (SavedModel dir, predictions) or (None, why)."""
    try:
        import tf_keras as keras
    except ImportError:
        return None, "tf_keras not importable (pip install tf_keras)"
    import tensorflow as tf
    tf.random.set_seed(7)
    inputs = {}
    for inp in spec["inputs"]:
        dt = {"float32": tf.float32, "int64": tf.int64, "string": tf.string}[inp["dtype"]]
        sparse = bool(inp.get("sparse"))
        inputs[inp["name"]] = keras.Input(shape=(None,) if sparse else (1,), sparse=sparse, dtype=dt, name=inp["name"])
    x = keras.layers.DenseFeatures(tf_export.keras_wrap(spec), name="features")(inputs)
    out = keras.layers.Dense(1, activation="sigmoid", name="logit")(x)
    model = keras.Model(inputs, out)
    model.compile(optimizer=keras.optimizers.Ftrl(0.2, l1_regularization_strength=0.001), loss="binary_crossentropy")
    model.fit(tf_export.tf_features(spec, train), np.array(labels, np.float32).reshape(-1, 1),
              batch_size=512, epochs=2, verbose=0)
    path = os.path.join(work, "keras_model")
    model.save(path)
    p = model.predict(tf_export.tf_features(spec, test), batch_size=4096, verbose=0).reshape(-1).astype(np.float64)
    return path, p


# ---- wisp through ctypes ----------------------------------------------------------------

def wisp_lib():
    lib = tf_export.load_lib()
    vp, sz, u64, c_int = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int
    P = ctypes.POINTER
    sigs = {
        "wisp_engine_new": ([c_int, P(vp)], c_int), "wisp_engine_free": ([vp], None),
        "wisp_engine_gpu_count": ([vp], c_int),
        "wisp_model_load": ([vp, ctypes.c_char_p, P(vp)], c_int), "wisp_model_free": ([vp], None),
        "wisp_columns_from_model": ([vp, P(vp)], c_int), "wisp_columns_free": ([vp], None),
        "wisp_raw_new": ([vp, vp, P(vp)], c_int), "wisp_raw_free": ([vp], None),
        "wisp_raw_set_schema": ([vp, ctypes.c_char_p, c_int], c_int),
        "wisp_raw_parse_tsv": ([vp, ctypes.c_char_p, sz, c_int, sz, P(u64), P(sz)], c_int),
        "wisp_raw_parse_jsonl": ([vp, ctypes.c_char_p, sz, c_int, sz, P(u64), P(sz)], c_int),
        "wisp_raw_bad_count": ([vp], sz),
        "wisp_batch_new": ([vp, P(vp)], c_int), "wisp_batch_free": ([vp], None),
        "wisp_batch_rows": ([vp], sz), "wisp_batch_bad_count": ([vp], sz),
        "wisp_transform": ([vp, vp], c_int),
        "wisp_session_new": ([vp, vp, ctypes.c_char_p, P(vp)], c_int), "wisp_session_free": ([vp], None),
        "wisp_session_score": ([vp, vp, P(ctypes.c_float)], c_int),
        "wisp_session_score_raw": ([vp, vp, P(ctypes.c_float)], c_int),
        "wisp_session_last_device": ([vp], ctypes.c_char_p),
    }
    for name, (args, res) in sigs.items():
        f = getattr(lib, name)
        f.argtypes, f.restype = args, res
    return lib


def check(lib, rc, what):
    if rc != 0:
        raise SystemExit("tf_parity: %s failed: %s" % (what, lib.wisp_errmsg().decode()))


def wisp_scores(lib, model_path, text, fmt, devices):
    eng, m, cols, raw, b = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    check(lib, lib.wisp_engine_new(1, ctypes.byref(eng)), "engine")
    check(lib, lib.wisp_model_load(eng, model_path.encode(), ctypes.byref(m)), "load")
    check(lib, lib.wisp_columns_from_model(m, ctypes.byref(cols)), "columns")
    check(lib, lib.wisp_raw_new(eng, cols, ctypes.byref(raw)), "raw")
    data = text.encode()
    line, used = ctypes.c_uint64(0), ctypes.c_size_t(0)
    t0 = time.perf_counter()
    if fmt == "tsv":
        check(lib, lib.wisp_raw_set_schema(raw, b"header", ord("\t")), "schema")
        check(lib, lib.wisp_raw_parse_tsv(raw, data, len(data), 1, 0, ctypes.byref(line), ctypes.byref(used)), "parse")
    else:
        check(lib, lib.wisp_raw_parse_jsonl(raw, data, len(data), 1, 0, ctypes.byref(line), ctypes.byref(used)), "parse")
    if lib.wisp_raw_bad_count(raw):
        raise SystemExit("tf_parity: %d bad rows in the %s text" % (lib.wisp_raw_bad_count(raw), fmt))
    check(lib, lib.wisp_batch_new(eng, ctypes.byref(b)), "batch")
    check(lib, lib.wisp_transform(raw, b), "transform")
    t1 = time.perf_counter()
    n = lib.wisp_batch_rows(b)
    results = {}
    for dev in devices:
        s = ctypes.c_void_p()
        check(lib, lib.wisp_session_new(eng, m, dev.encode(), ctypes.byref(s)), "session")
        out = (ctypes.c_float * n)()
        check(lib, lib.wisp_session_score(s, b, out), "score")
        results[lib.wisp_session_last_device(s).decode()] = list(out)
        # the fused path: raw columns -> probabilities (on a GPU, the transform runs there too)
        out2 = (ctypes.c_float * n)()
        check(lib, lib.wisp_session_score_raw(s, raw, out2), "score_raw")
        results["raw@" + lib.wisp_session_last_device(s).decode()] = list(out2)
        lib.wisp_session_free(s)
    gpus = lib.wisp_engine_gpu_count(eng)
    for f, h in (("wisp_batch_free", b), ("wisp_raw_free", raw), ("wisp_columns_free", cols), ("wisp_model_free", m),
                 ("wisp_engine_free", eng)):
        getattr(lib, f)(h)
    return results, t1 - t0, gpus


def to_tsv(spec, rows):
    names = [i["name"] for i in spec["inputs"] if not i.get("sparse")]
    lines = ["label\t" + "\t".join(names)]
    for r in rows:
        f = ["0"]
        for nm in names:
            v = r.get(nm)
            f.append("" if v is None else (repr(v) if isinstance(v, float) else str(v)))
        lines.append("\t".join(f))
    return "\n".join(lines) + "\n"


def replay(a):
    """Score the kept held-out rows on every device and compare with the kept TensorFlow predictions."""
    with open(os.path.join(a.replay, "p_tf.json")) as f:
        kept = json.load(f)
    with open(os.path.join(a.replay, "test.jsonl")) as f:
        jsonl = f.read()
    model_path = os.path.join(a.replay, "model.wisp")
    lib = wisp_lib()
    probe = wisp_scores(lib, model_path, "", "jsonl", ["cpu"])
    ngpu = probe[2]
    devices = ["cpu"] + (["gpu:%d" % i for i in range(ngpu)] + (["gpus"] if ngpu > 1 else []) if ngpu else [])
    res, _, _ = wisp_scores(lib, model_path, jsonl, "jsonl", devices)
    worst = {dev: max(abs(float(x) - y) for x, y in zip(p, kept["p_tf"])) for dev, p in res.items()}
    ok = len(res) == 2 * len(devices)           # score and score_raw on each
    kmodel = os.path.join(a.replay, "keras.wisp")
    if "p_keras" in kept and os.path.exists(kmodel):
        res_k, _, _ = wisp_scores(lib, kmodel, jsonl, "jsonl", devices)
        ok = ok and len(res_k) == 2 * len(devices)
        for dev, p in res_k.items():
            worst["keras/" + dev] = max(abs(float(x) - y) for x, y in zip(p, kept["p_keras"]))
    ok = ok and all(v <= a.tol for v in worst.values())
    print("tf_parity --replay: %s: %d rows, TensorFlow %s, max |p_wisp - p_tf| by device: %s (tol %g); %d GPU(s)" % (
        "ok" if ok else "FAILED", len(kept["p_tf"]), kept["tensorflow"],
        ", ".join("%s %.2e" % kv for kv in sorted(worst.items())), a.tol, ngpu))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", type=int, default=20000)
    ap.add_argument("--test", type=int, default=3000)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--no-keras", action="store_true", help="skip the Keras (tf_keras) model")
    ap.add_argument("--keep", help="keep the checkpoint, model, held-out rows and predictions in this directory")
    ap.add_argument("--replay", help="compare wisp with the predictions kept in this directory (no TensorFlow)")
    a = ap.parse_args()
    if a.replay:
        return replay(a)
    rng = random.Random(a.seed)
    spec = description()
    train, labels = gen_rows(a.train, rng, False)
    test, _ = gen_rows(a.test, rng, True)
    work = a.keep or tempfile.mkdtemp(prefix="wisp_tf_parity_")
    os.makedirs(work, exist_ok=True)
    kpath, p_k, t_keras = None, "--no-keras", 0.0
    if not a.no_keras:       # first: train_and_predict turns eager execution off for good
        t0 = time.perf_counter()
        kpath, p_k = train_keras(spec, train, labels, test, work)
        t_keras = time.perf_counter() - t0
    t0 = time.perf_counter()
    ckpt, p_tf, loss = train_and_predict(spec, train, labels, test, a.steps, work, rng)
    t_train = time.perf_counter() - t0
    spec_path = os.path.join(work, "columns.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f, indent=1)
    model_path = os.path.join(work, "model.wisp")
    env = dict(os.environ)
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "tools", "tf_export.py"), "--columns", spec_path,
                    "--checkpoint", ckpt, "--out", model_path], check=True, env=env, stdout=subprocess.DEVNULL)
    lib = wisp_lib()
    # held-out rows: the dense inputs as TSV would lose the sparse tags, so TSV covers a
    # description without them... instead: JSON lines carry everything, TSV the rows without tags
    jsonl = "\n".join(json.dumps(r) for r in test) + "\n"
    probe = wisp_scores(lib, model_path, "", "jsonl", ["cpu"])
    devices = ["cpu"] + (["auto"] if probe[2] > 0 else [])
    res_j, t_j, _ = wisp_scores(lib, model_path, jsonl, "jsonl", devices)
    no_tags = [i for i, r in enumerate(test) if not r.get("tags")]
    res_t, t_t, _ = wisp_scores(lib, model_path, to_tsv(spec, [test[i] for i in no_tags]), "tsv", ["cpu"])
    worst = {}
    for dev, p in res_j.items():
        worst["jsonl/" + dev] = float(np.max(np.abs(np.array(p, dtype=np.float64) - p_tf)))
    worst["tsv/cpu"] = float(np.max(np.abs(np.array(res_t["cpu"], dtype=np.float64) - p_tf[no_tags])))
    keras_note = ""
    if not a.no_keras:
        if kpath is None:
            keras_note = "; Keras SKIPPED: " + p_k
        else:
            kmodel = os.path.join(work, "keras.wisp")
            subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "tools", "tf_export.py"), "--columns", spec_path,
                            "--keras", kpath, "--out", kmodel], check=True, env=env, stdout=subprocess.DEVNULL)
            res_k, _, _ = wisp_scores(lib, kmodel, jsonl, "jsonl", devices)
            for dev, p in res_k.items():
                worst["keras-jsonl/" + dev] = float(np.max(np.abs(np.array(p, dtype=np.float64) - p_k)))
            keras_note = "; Keras model: mean p %.4f, training %.1fs" % (float(np.mean(p_k)), t_keras)
    if a.keep:
        import tensorflow as tf
        with open(os.path.join(work, "test.jsonl"), "w") as f:
            f.write(jsonl)
        with open(os.path.join(work, "p_tf.json"), "w") as f:
            kept = {"tensorflow": tf.__version__, "p_tf": [float(x) for x in p_tf]}
            if kpath is not None:
                kept["p_keras"] = [float(x) for x in p_k]      # for keras.wisp, kept next to model.wisp
            json.dump(kept, f)
    ok = all(v <= a.tol for v in worst.values())
    print("tf_parity: %s: %d held-out rows (%d via TSV), TensorFlow %s, train loss %.4f, max |p_wisp - p_tf|: %s "
          "(tol %g); mean p %.4f; training %.1fs, wisp parse+transform %.1f ms%s" % (
              "ok" if ok else "FAILED", len(test), len(no_tags), __import__("tensorflow").__version__, loss,
              ", ".join("%s %.2e" % kv for kv in sorted(worst.items())), a.tol, float(np.mean(p_tf)), t_train, 1e3 * t_j, keras_note))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
