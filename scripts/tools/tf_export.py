#!/usr/bin/env python3
"""tf_export.py — TensorFlow linear models -> .wisp files, and the bridge between wisp's column descriptions and tf.feature_column.

Usage:
  scripts/tools/tf_export.py --columns columns.json --checkpoint DIR_OR_PREFIX --out model.wisp [--dtype f32|f16|i8]
  scripts/tools/tf_export.py --columns columns.json --keras MODEL --out model.wisp [--dtype f32|f16|i8]
      Reads the weights of a linear model over the feature columns that
      columns.json describes (a column description; its grammar is
      engine/COLUMNS.md) from a TensorFlow checkpoint and writes a
      self-contained .wisp file: the description in its "columns" section,
      one slice of the weight table per column, the bias.
      Checkpoints written by tf.estimator.LinearClassifier (variables
      "linear/linear_model/<column>/weights", ".../bias_weights") and by
      tf.compat.v1.feature_column.linear_model ("linear_model/...") are
      understood, as is a SavedModel directory (its variables/ checkpoint);
      --prefix names another scope. (Keras 3, TensorFlow >= 2.16, has no
      feature-column layers; a Keras model of preprocessing layers is not read.) Column names are
      TensorFlow's (e.g. "age_bucketized", "a_X_b"), computed here from the
      description. Binary classifiers only (one logit).
      --keras reads a Keras 2 model (the tf_keras package: pip install
      tf_keras; a SavedModel directory, .keras or .h5 file) built as
        inputs -> tf_keras.layers.DenseFeatures(columns) -> Dense(1, sigmoid or linear)
      where the columns are the description's, categorical ones wrapped in
      indicator_column. DenseFeatures concatenates its columns sorted by
      name (numeric: 1 value, bucketized: a one-hot of its buckets,
      indicator: the counts of its ids), so the Dense kernel's rows are
      exactly the weights of a linear model, column by column. The model's
      columns are checked against the description (names, kinds, sizes,
      keys, boundaries, vocabularies); anything else (an embedding column,
      hidden layers, several outputs) is refused with the reason.
  scripts/tools/tf_export.py --columns columns.json --print-tf
      Print the tf.feature_column objects the description stands for.

As a module (scripts/tools/ on sys.path): tf_columns(spec) builds the TensorFlow
feature columns of a description, tf_features(spec, rows) the tensors to
feed them from raw rows (dicts, missing keys allowed), and write_wisp()
writes a .wisp file through libwisp (ctypes; $WISP_LIB or build/libwisp.so).

Numbers: TensorFlow keeps boundaries and normalizer constants as float32;
the description keeps the Python floats and wisp rounds them the same way.
"""
import argparse
import ctypes
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import wisp_ctypes  # noqa: E402  scripts/lib/wisp_ctypes.py: the one binding of libwisp.so

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

DTYPES = {"float32": np.float32, "int64": np.int64, "string": object}


def _tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf  # noqa: imported late: the module is usable without TensorFlow for write_wisp
    return tf


def inputs_by_name(spec):
    return {i["name"]: i for i in spec["inputs"]}


def input_default(inp):
    """The value a dense input takes when a row leaves it out (None: no default)."""
    if inp.get("sparse"):
        return None
    if "default" in inp:
        return inp["default"]
    return {"string": "", "int64": -1, "float32": None}[inp["dtype"]]


def _normalizer(norm):
    if not norm:
        return None
    if norm["type"] == "standard":
        mean, std = float(norm["mean"]), float(norm["std"])
        return lambda x: (x - mean) / std
    if norm["type"] == "affine":
        scale, shift = float(norm["scale"]), float(norm["shift"])
        return lambda x: x * scale + shift
    raise ValueError("unknown normalizer %r" % norm["type"])


def tf_column(col, spec):
    """The tf.feature_column object for one column of a description."""
    tf = _tf()
    fc = tf.feature_column
    ins = inputs_by_name(spec)
    t = col["type"]
    if t == "numeric":
        inp = ins[col["key"]]
        dt = tf.int64 if inp["dtype"] == "int64" else tf.float32
        return fc.numeric_column(col["key"], shape=(1,), dtype=dt, normalizer_fn=_normalizer(col.get("normalizer")))
    if t == "bucketized":
        return fc.bucketized_column(tf_column(col["source"], spec), [float(b) for b in col["boundaries"]])
    if t == "hash_bucket":
        dt = tf.int64 if ins[col["key"]]["dtype"] == "int64" else tf.string
        return fc.categorical_column_with_hash_bucket(col["key"], col["buckets"], dtype=dt)
    if t == "vocabulary_list":
        dt = tf.int64 if ins[col["key"]]["dtype"] == "int64" else tf.string
        return fc.categorical_column_with_vocabulary_list(
            col["key"], col["vocabulary"], dtype=dt, default_value=col.get("default_value", -1),
            num_oov_buckets=col.get("num_oov_buckets", 0))
    if t == "identity":
        return fc.categorical_column_with_identity(col["key"], col["buckets"], default_value=col.get("default_value"))
    if t == "crossed":
        keys = [k if isinstance(k, str) else tf_column(k, spec) for k in col["keys"]]
        hk = col.get("hash_key")
        if isinstance(hk, str):
            hk = int(hk, 16)
        return fc.crossed_column(keys, col["buckets"], hash_key=hk)
    raise ValueError("unknown column type %r" % t)


def tf_columns(spec):
    return [tf_column(c, spec) for c in spec["columns"]]


def column_size(col):
    t = col["type"]
    if t == "numeric":
        return 1
    if t == "bucketized":
        return len(col["boundaries"]) + 1
    if t == "vocabulary_list":
        return len(col["vocabulary"]) + col.get("num_oov_buckets", 0)
    return col["buckets"]


def assign_offsets(spec):
    """Give each column without an offset the next free slice; returns num_features."""
    off = 0
    for c in spec["columns"]:
        if "offset" not in c:
            c["offset"] = off
        off = max(off, c["offset"] + column_size(c))
    spec["num_features"] = max(spec.get("num_features", 0), off)
    return spec["num_features"]


def tf_features(spec, rows):
    """Tensors for TensorFlow from raw rows (dicts): dense inputs as [n, 1]
    tensors (a missing key takes the input's default), sparse inputs as
    SparseTensors (a list, a scalar or nothing per row)."""
    tf = _tf()
    feats = {}
    n = len(rows)
    for inp in spec["inputs"]:
        name, dt = inp["name"], inp["dtype"]
        npdt = DTYPES[dt]
        if inp.get("sparse"):
            idx, vals = [], []
            width = 1
            for r, row in enumerate(rows):
                v = row.get(name)
                if v is None:
                    continue
                vs = v if isinstance(v, list) else [v]
                width = max(width, len(vs))
                for k, x in enumerate(vs):
                    idx.append([r, k])
                    vals.append(x)
            arr = np.array(vals, dtype=npdt) if vals else np.zeros((0,), dtype=npdt)
            if dt == "string":
                arr = np.array([x.encode("utf-8") if isinstance(x, str) else x for x in vals], dtype=object)
            feats[name] = tf.SparseTensor(np.array(idx, dtype=np.int64).reshape(-1, 2), tf.constant(arr, dtype={
                "float32": tf.float32, "int64": tf.int64, "string": tf.string}[dt]), [n, width])
        else:
            d = input_default(inp)
            col = []
            for row in rows:
                v = row.get(name, d)
                if v is None:
                    raise ValueError("row lacks dense input %r, which has no default" % name)
                if dt == "float32" and isinstance(v, str):
                    v = float(v)          # "nan", "inf"
                if dt == "string" and isinstance(v, str):
                    v = v.encode("utf-8")
                col.append(v)
            arr = np.array(col, dtype=npdt).reshape(n, 1)
            feats[name] = tf.constant(arr, dtype={"float32": tf.float32, "int64": tf.int64, "string": tf.string}[dt])
    return feats


# ---- writing .wisp through libwisp -------------------------------------------------

def load_lib():
    return wisp_ctypes.load()


def write_wisp(path, weights, bias, columns_text, meta="", dtype="f32", lib=None):
    lib = lib or load_lib()
    w = np.ascontiguousarray(weights, dtype=np.float32)
    text = columns_text.encode("utf-8")
    h = ctypes.c_void_p()
    if lib.wisp_columns_parse(text, len(text), ctypes.byref(h)) != 0:
        raise SystemExit("tf_export: the description is not valid: " + lib.wisp_errmsg().decode())
    lib.wisp_columns_free(h)
    dt = {"f32": 0, "f16": 1, "i8": 2}[dtype]
    rc = lib.wisp_model_write(path.encode(), w.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), len(w),
                              float(bias), dt, meta.encode(), text)
    if rc != 0:
        raise SystemExit("tf_export: writing %s failed: %s" % (path, lib.wisp_errmsg().decode()))


# ---- checkpoints -----------------------------------------------------------------------

def find_prefix(names, prefix=None):
    if prefix is not None:
        return prefix.rstrip("/") + "/"
    for p in ("linear/linear_model/", "linear_model/"):
        if p + "bias_weights" in names:
            return p
    cands = sorted(n[:-len("bias_weights")] for n in names if n.endswith("/bias_weights"))
    if len(cands) == 1:
        return cands[0]
    raise SystemExit("tf_export: cannot find the linear model's bias_weights in the checkpoint (use --prefix); "
                     "candidates: %s" % (cands or "none"))


def weights_from_checkpoint(ckpt, spec, prefix=None):
    """(weights, bias) laid out by the description's slices."""
    tf = _tf()
    if os.path.isdir(ckpt) and os.path.exists(os.path.join(ckpt, "saved_model.pb")):
        ckpt = os.path.join(ckpt, "variables", "variables")    # a SavedModel keeps its variables as a checkpoint
    reader = tf.train.load_checkpoint(ckpt)
    names = set(reader.get_variable_to_shape_map())
    pre = find_prefix(names, prefix)
    nf = assign_offsets(spec)
    w = np.zeros(nf, dtype=np.float32)
    cols = tf_columns(spec)
    for c, tc in zip(spec["columns"], cols):
        var = pre + tc.name + "/weights"
        if var not in names:
            raise SystemExit("tf_export: no variable %r for column %r in the checkpoint" % (var, c["name"]))
        v = reader.get_tensor(var)
        if v.ndim != 2 or v.shape[1] != 1:
            raise SystemExit("tf_export: %s has shape %s; only binary (one-logit) linear models are supported"
                             % (var, v.shape))
        size = column_size(c)
        if v.shape[0] != size:
            raise SystemExit("tf_export: %s has %d rows, the column has %d weights" % (var, v.shape[0], size))
        w[c["offset"]:c["offset"] + size] = v[:, 0]
        if c["name"] != tc.name:
            c["name"] = tc.name
    bias = reader.get_tensor(pre + "bias_weights")
    if bias.shape != (1,):
        raise SystemExit("tf_export: bias_weights has shape %s; only binary models are supported" % (bias.shape,))
    return w, float(bias[0])


# ---- Keras 2 (tf_keras) models: DenseFeatures -> Dense(1) ------------------------------

def _norm_config(x):
    """A serialized feature column with its normalizer function reduced to present/absent
    (a Python callable does not survive saving; the description's normalizer is taken as is)."""
    if isinstance(x, dict):
        return {k: (v is not None) if k == "normalizer_fn" else _norm_config(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_norm_config(v) for v in x]
    return x


def _dense_width(cfg, name):
    kind, c = cfg["class_name"], cfg["config"]
    if kind == "NumericColumn":
        if list(c.get("shape", [1])) != [1]:
            raise SystemExit("tf_export: numeric column %r has shape %s; only scalars are supported" % (name, c["shape"]))
        return 1
    if kind == "BucketizedColumn":
        return len(c["boundaries"]) + 1
    if kind == "IndicatorColumn":
        return None      # the categorical column's size: from the description
    raise SystemExit("tf_export: column %r is a %s; a linear model over DenseFeatures needs numeric, bucketized or "
                     "indicator columns (an embedding is not linear in the ids)" % (name, kind))


def keras_wrap(spec):
    """The columns of a description as DenseFeatures takes them: categorical ones in indicator_column."""
    fc = _tf().feature_column
    out = []
    for c in tf_columns(spec):
        kind = type(c).__name__
        out.append(c if kind in ("NumericColumn", "BucketizedColumn") else fc.indicator_column(c))
    return out


def weights_from_keras(path, spec):
    """(weights, bias) of a tf_keras model inputs -> DenseFeatures -> Dense(1), laid out by the description."""
    _tf()
    try:
        import tf_keras as keras
    except ImportError:
        raise SystemExit("tf_export: --keras needs the tf_keras package (pip install tf_keras): Keras 3 has no "
                         "DenseFeatures layer, so models built on feature columns are Keras 2 models")
    try:
        model = keras.models.load_model(path, compile=False)
    except Exception as e:  # noqa: BLE001  (the loader raises many kinds)
        raise SystemExit("tf_export: cannot load the Keras model %s: %s" % (path, str(e).splitlines()[0] if str(e) else e))
    feats = [l for l in model.layers if type(l).__name__ == "DenseFeatures"]
    dense = [l for l in model.layers if type(l).__name__ == "Dense"]
    if len(feats) != 1 or len(dense) != 1:
        raise SystemExit("tf_export: %s: expected one DenseFeatures layer and one Dense layer, found %d and %d (layers: %s)"
                         % (path, len(feats), len(dense), ", ".join(type(l).__name__ for l in model.layers)))
    df, d = feats[0], dense[0]
    other = [type(l).__name__ for l in model.layers if l not in (df, d) and type(l).__name__ != "InputLayer"]
    if other:
        raise SystemExit("tf_export: %s: layers other than DenseFeatures -> Dense are not supported: %s" % (path, other))
    if d.input is not df.output and getattr(d.input, "name", 1) != getattr(df.output, "name", 2):
        raise SystemExit("tf_export: %s: the Dense layer does not read the DenseFeatures output" % path)
    act = d.get_config().get("activation")
    if act not in ("sigmoid", "linear"):
        raise SystemExit("tf_export: %s: the Dense layer's activation is %r; wisp scores sigmoid(logit): use sigmoid, "
                         "or linear for a model trained from logits" % (path, act))
    kernel, bias = d.get_weights() if d.use_bias else (d.get_weights()[0], np.zeros(1, np.float32))
    if kernel.ndim != 2 or kernel.shape[1] != 1:
        raise SystemExit("tf_export: %s: the Dense kernel has shape %s; only binary (one-logit) models are supported"
                         % (path, kernel.shape))
    from tensorflow.python.feature_column import serialization   # what DenseFeatures' get_config uses
    want = {}            # normalized config -> (TensorFlow name, description column)
    for c, tc, wc in zip(spec["columns"], tf_columns(spec), keras_wrap(spec)):
        want[json.dumps(_norm_config(serialization.serialize_feature_column(wc)), sort_keys=True)] = (wc.name, c, tc.name)
    saved = df.get_config().get("feature_columns") or []
    found = []
    for cfg in saved:
        key = json.dumps(_norm_config(cfg), sort_keys=True)
        if key not in want:
            raise SystemExit("tf_export: %s: a column of the model is not in the description (or differs from it): %s"
                             % (path, json.dumps(cfg)[:400]))
        found.append((want[key], cfg))
    if len(found) != len(want) or len({f[0][0] for f in found}) != len(want):
        raise SystemExit("tf_export: %s: the model has %d columns, the description %d" % (path, len(found), len(want)))
    nf = assign_offsets(spec)
    w = np.zeros(nf, dtype=np.float32)
    row = 0
    for (wname, col, tfname), cfg in sorted(found, key=lambda f: f[0][0]):   # DenseFeatures' concatenation order
        width = _dense_width(cfg, wname) or column_size(col)
        if width != column_size(col):
            raise SystemExit("tf_export: column %r: %d dense values, the description has %d weights"
                             % (tfname, width, column_size(col)))
        if row + width > kernel.shape[0]:
            raise SystemExit("tf_export: %s: the Dense kernel has %d rows, fewer than the columns need" % (path, kernel.shape[0]))
        w[col["offset"]:col["offset"] + width] = kernel[row:row + width, 0]
        col["name"] = tfname
        row += width
    if row != kernel.shape[0]:
        raise SystemExit("tf_export: %s: the Dense kernel has %d rows, the columns %d" % (path, kernel.shape[0], row))
    return w, float(np.asarray(bias).reshape(-1)[0])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--columns", required=True, help="column description (JSON)")
    ap.add_argument("--checkpoint", help="checkpoint directory or prefix")
    ap.add_argument("--keras", help="a tf_keras model (SavedModel dir, .keras, .h5): DenseFeatures -> Dense(1)")
    ap.add_argument("--prefix", help="variable scope of the linear model (default: found)")
    ap.add_argument("--out", help=".wisp file to write")
    ap.add_argument("--dtype", default="f32", choices=["f32", "f16", "i8"])
    ap.add_argument("--print-tf", action="store_true")
    a = ap.parse_args(argv)
    with open(a.columns) as f:
        spec = json.load(f)
    if a.print_tf:
        for c in tf_columns(spec):
            print(c)
        return 0
    if bool(a.checkpoint) == bool(a.keras) or not a.out:
        ap.error("--out and one of --checkpoint or --keras are required")
    if a.keras:
        w, bias = weights_from_keras(a.keras, spec)
        meta = "source=tensorflow-keras\nkeras_model=%s\nexporter=scripts/tools/tf_export.py\n" % os.path.abspath(a.keras)
    else:
        w, bias = weights_from_checkpoint(a.checkpoint, spec, a.prefix)
        meta = "source=tensorflow\ncheckpoint=%s\nexporter=scripts/tools/tf_export.py\n" % os.path.abspath(a.checkpoint)
    write_wisp(a.out, w, bias, json.dumps(spec, indent=1), meta=meta, dtype=a.dtype)
    print("tf_export: wrote %s (%d weights, %d columns, bias %.6g)" % (a.out, len(w), len(spec["columns"]), bias))
    return 0


if __name__ == "__main__":
    sys.exit(main())
