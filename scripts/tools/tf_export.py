#!/usr/bin/env python3
"""tf_export.py — a column description + a TensorFlow linear model -> a .wisp file (a thin wrapper of wisp.from_tensorflow), and the bridge from descriptions to tf.feature_column.

Usage (with the wisp package installed in the interpreter's environment: pip install .):
  scripts/tools/tf_export.py --columns columns.json --checkpoint DIR_OR_PREFIX --out model.wisp [--dtype f32|f16|i8]
  scripts/tools/tf_export.py --columns columns.json --keras MODEL --out model.wisp [--dtype f32|f16|i8]
      Builds the tf.feature_column objects columns.json describes (a
      column description: engine/COLUMNS.md) and hands them, with the
      inputs' types, sparseness and defaults and the normalizers the
      description names, to wisp.from_tensorflow, which reads the weights
      (a linear_model / LinearClassifier checkpoint or SavedModel: --prefix
      names another scope than "linear_model/" or "linear/linear_model/";
      --keras: a Keras 2 (tf_keras) inputs -> DenseFeatures -> Dense(1)
      model, its categorical columns in indicator_column), writes the
      description again from the columns (offsets in the description's
      column order) and the .wisp file. Whatever it cannot reproduce
      exactly is refused with the reason (help(wisp.from_tensorflow)).
      Users who build their columns in Python call wisp.from_tensorflow
      directly, with no description to write by hand.
  scripts/tools/tf_export.py --columns columns.json --print-tf
      Print the tf.feature_column objects the description stands for.

As a module (scripts/tools/ on sys.path; needs neither wisp nor, until
called, TensorFlow): tf_columns(spec) builds the TensorFlow feature columns
of a description, tf_features(spec, rows) the tensors to feed them from raw
rows (dicts, missing keys allowed), assign_offsets(spec) and
column_size(col) the slices, keras_wrap(spec) the columns DenseFeatures
takes, import_args(spec) from_tensorflow's inputs= and normalizers=.

Numbers: TensorFlow keeps boundaries and normalizer constants as float32;
the description keeps the Python floats and wisp rounds them the same way.
"""
import argparse
import json
import os
import sys

import numpy as np

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
    """The description's top-level columns; one named "<TensorFlow name>_indicator" (as wisp.from_tensorflow
    names an indicator_column it imported) is wrapped in indicator_column again."""
    out = []
    for c in spec["columns"]:
        tc = tf_column(c, spec)
        if c.get("name") == tc.name + "_indicator" and c["type"] != "numeric":
            tc = _tf().feature_column.indicator_column(tc)
        out.append(tc)
    return out


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


def keras_wrap(spec):
    """The columns of a description as DenseFeatures takes them: categorical ones in indicator_column."""
    fc = _tf().feature_column
    out = []
    for c in tf_columns(spec):
        kind = type(c).__name__
        out.append(c if kind in ("NumericColumn", "BucketizedColumn", "IndicatorColumn") else fc.indicator_column(c))
    return out


def import_args(spec):
    """from_tensorflow's inputs= and normalizers= for the columns of a description (which says both)."""
    inputs = {}
    for i in spec["inputs"]:
        o = {"dtype": i["dtype"], "sparse": bool(i.get("sparse"))}
        if not i.get("sparse") and "default" in i:
            o["default"] = i["default"]
        inputs[i["name"]] = o
    norms = {}

    def walk(c):
        if c.get("type") == "numeric" and c.get("normalizer"):
            n = dict(c["normalizer"])
            if norms.setdefault(c["key"], n) != n:
                raise SystemExit("tf_export: input %r has two normalizers (%s, %s); wisp.from_tensorflow takes one "
                                 "per input" % (c["key"], norms[c["key"]], n))
        for k in ([c["source"]] if "source" in c else []) + [k for k in c.get("keys", []) if isinstance(k, dict)]:
            walk(k)
    for c in spec["columns"]:
        walk(c)
    return inputs, norms


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--columns", required=True, help="column description (JSON)")
    ap.add_argument("--checkpoint", help="checkpoint directory or prefix, or a SavedModel directory")
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
    try:
        import wisp
    except ImportError as e:
        raise SystemExit("tf_export: `import wisp` fails (%s): install the package into this interpreter's "
                         "environment (pip install . from the repository root)" % e)
    inputs, norms = import_args(spec)
    try:
        if a.keras:
            m = wisp.from_tensorflow(keras_wrap(spec), a.keras, a.out, a.dtype, inputs, norms, a.prefix)
        else:
            m = wisp.from_tensorflow(tf_columns(spec), a.checkpoint, a.out, a.dtype, inputs, norms, a.prefix)
    except ValueError as e:
        raise SystemExit("tf_export: %s" % e)
    print("tf_export: wrote %s (%d weights, %d columns, bias %.6g)" % (a.out, m.num_features, len(m.columns["columns"]),
                                                                      m.bias))
    return 0


if __name__ == "__main__":
    sys.exit(main())
