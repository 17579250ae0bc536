"""_tf.py — wisp.from_tensorflow: a TensorFlow linear model over tf.feature_column objects (its checkpoint, its
SavedModel, or a Keras 2 DenseFeatures -> Dense(1) model) as a .wisp file, with the column description written here.

Two halves:
  describe(columns, inputs, normalizers) turns feature-column objects into the
      column description of engine/COLUMNS.md. It reads only the columns'
      class names and fields (NumericColumn.key/shape/default_value/dtype/
      normalizer_fn, BucketizedColumn.source_column/boundaries, ...), so it
      needs no TensorFlow; each column's weight slice is keyed by the name
      TensorFlow gives it (computed here, checked against .name where the
      object has one).
  the weight readers: a name-based checkpoint (tf.compat.v1 linear_model,
      tf.estimator.LinearClassifier; a SavedModel's variables/ are one) or a
      mapping of variable names to arrays read like one, and a Keras 2
      (tf_keras) model, live or saved, whose DenseFeatures output feeds one
      Dense(1) layer (or tf_keras' premade LinearModel, the same kernel and bias): DenseFeatures concatenates its columns sorted by name
      (numeric: 1 value, bucketized: a one-hot of its buckets, indicator: the
      counts of its ids), so the kernel's rows are the linear weights.
Everything wisp cannot reproduce exactly is refused (ValueError naming the
column and the reason), never approximated.
"""
import json
import os
import sys

import numpy as np

_F32 = np.float32
_PREFIXES = ("linear/linear_model/", "linear_model/")

# the input types of the description, from TensorFlow dtype names
_INT = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32"}


def _fail(msg):
    raise ValueError("from_tensorflow: " + msg)


def _kind(col):
    """TensorFlow's class name without the v1 underscore (_NumericColumn -> NumericColumn)."""
    return type(col).__name__.lstrip("_")


def _dtype_name(dt):
    if dt is None:
        return None
    name = getattr(dt, "name", dt)
    return name if isinstance(name, str) else str(name)


# ---- refusals: columns whose value is not one weight per id --------------------------------

_REFUSED = {
    "EmbeddingColumn": "an embedding column's value is a learned vector combined over the row's ids (combiner "
                       "'mean' by default; a dot product with the next layer even for 'sum'), not one weight per "
                       "id; wisp keeps only linear models over ids",
    "SharedEmbeddingColumn": "a shared embedding column is an embedding (a learned vector per id, combined over the "
                             "row's ids), not one weight per id",
    "WeightedCategoricalColumn": "a weighted categorical column multiplies each id's weight by a value of another "
                                 "input; the column description has no node for per-id weights from an input",
    "VocabularyFileCategoricalColumn": "the vocabulary is a file TensorFlow reads at run time; the description keeps "
                                       "the vocabulary itself: build the column with "
                                       "categorical_column_with_vocabulary_list(key, <the file's first "
                                       "vocabulary_size lines>, ...) (the same ids) and import that",
    "SequenceCategoricalColumn": "a sequence column feeds sequence models (RNNs), not a linear model",
    "SequenceNumericColumn": "a sequence column feeds sequence models (RNNs), not a linear model",
}


def _refuse_kind(col, where):
    kind = _kind(col)
    why = _REFUSED.get(kind)
    name = getattr(col, "name", None) if not isinstance(col, str) else col
    if why:
        _fail("column %r (%s%s): %s" % (name, kind, where, why))
    _fail("column %r is a %s%s, which wisp does not import (numeric, bucketized, categorical_column_with_hash_bucket, "
          "_with_vocabulary_list, _with_identity, crossed and indicator columns are)" % (name, kind, where))


# ---- normalizers ----------------------------------------------------------------------------

def _probe_values():
    """float32 values a normalizer is checked on: zero, signs, integers, fractions, large and tiny values."""
    rng = np.random.default_rng(15)
    v = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, 7.0, 12.5, 18.0, 25.0, 40.0, 65.0, 99.0, 100.0, 1e3, 1e6, -1e6,
         1e-3, 3.4e38, -3.4e38, 1e-38, 1.1754944e-38]
    v += list(rng.normal(0, 30, 200)) + list(rng.lognormal(5, 3, 200)) + list(rng.integers(-1000, 1000, 100))
    x = np.array(v, dtype=np.float64).astype(_F32)
    return x[np.isfinite(x)]


def _apply_decl(decl, x):
    """The description's normalizer in float32, as engine/transform/transform_cpu.c computes it."""
    if decl["type"] == "standard":
        a, b = _F32(decl["mean"]), _F32(decl["std"])
        with np.errstate(all="ignore"):
            return (x - a) / b
    a, b = _F32(decl["scale"]), _F32(decl["shift"])
    with np.errstate(all="ignore"):
        return x * a + b


def _call_normalizer(fn, x):
    """fn on a float32 column of x (shape [n, 1], as TensorFlow calls it), as a numpy array;
    TensorFlow's graph when TensorFlow is importable and fn takes a tensor, else numpy."""
    tf = sys.modules.get("tensorflow")      # imported by whoever made TensorFlow columns; never imported here
    if tf is not None:
        try:
            g = tf.Graph()
            with g.as_default():
                t = fn(tf.constant(x.reshape(-1, 1)))
                with tf.compat.v1.Session(graph=g) as s:
                    return np.asarray(s.run(t)).reshape(-1)
        except Exception:  # noqa: BLE001  (a numpy-only function: try numpy)
            pass
    return np.asarray(fn(x.reshape(-1, 1))).reshape(-1)


def _check_decl(decl, key):
    if not isinstance(decl, dict) or decl.get("type") not in ("standard", "affine"):
        _fail("normalizers[%r] must be {'type': 'standard', 'mean': m, 'std': s} or {'type': 'affine', 'scale': a, "
              "'shift': b}, not %r" % (key, decl))
    want = {"standard": {"type", "mean", "std"}, "affine": {"type", "scale", "shift"}}[decl["type"]]
    if set(decl) != want:
        _fail("normalizers[%r]: a %s normalizer has exactly the keys %s" % (key, decl["type"], sorted(want)))
    out = {"type": decl["type"]}
    for k in sorted(want - {"type"}):
        v = decl[k]
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not np.isfinite(v):
            _fail("normalizers[%r][%r] must be a finite number, not %r" % (key, k, v))
        out[k] = float(v)
    return out


def _normalizer(col, key, normalizers):
    """The description's normalizer of a numeric column (None when it has none)."""
    fn = getattr(col, "normalizer_fn", None)
    decl = (normalizers or {}).get(key)
    if fn is None:
        return None         # (a declaration no column with a normalizer_fn uses is refused at the end)
    if decl is None:
        _fail("numeric_column(%r) has a normalizer_fn, which is Python code wisp cannot read; say what it computes "
              "with normalizers={%r: {'type': 'standard', 'mean': m, 'std': s}} ((x - m) / s) or {'type': 'affine', "
              "'scale': a, 'shift': b} (x * a + b), in float32 as TensorFlow does; it is checked against the "
              "function" % (key, key))
    decl = _check_decl(decl, key)
    if not callable(fn):
        return decl            # a saved model's columns lose the function: the declaration is taken as given
    x = _probe_values()
    want = _apply_decl(decl, x)
    try:
        got = _call_normalizer(fn, x)
    except Exception as e:  # noqa: BLE001
        _fail("numeric_column(%r): calling its normalizer_fn to check it against normalizers[%r] failed: %s"
              % (key, key, e))
    if got.shape != want.shape:
        _fail("numeric_column(%r): its normalizer_fn maps %d values to %d" % (key, want.size, got.size))
    got = got.astype(_F32)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    if not same.all():
        i = int(np.flatnonzero(~same)[0])
        _fail("numeric_column(%r): its normalizer_fn is not normalizers[%r] = %s: f(%r) = %r, the declared "
              "normalizer gives %r (float32)" % (key, key, json.dumps(decl), float(x[i]), float(got[i]), float(want[i])))
    return decl


# ---- describe: feature columns -> column description ---------------------------------------

class _Describer:
    def __init__(self, inputs=None, normalizers=None, keras_inputs=None):
        self.types = {}          # input name -> (input type, why)
        self.defaults = {}       # input name -> (default, why)
        self.order = []
        self.inputs = dict(inputs or {})
        self.keras_inputs = keras_inputs or {}
        self.normalizers = dict(normalizers or {})
        for name, o in self.inputs.items():
            if not isinstance(o, dict) or set(o) - {"dtype", "sparse", "default"}:
                _fail("inputs[%r] must be a dict of 'dtype' ('string', 'int64', 'float32'), 'sparse' (bool) and "
                      "'default', not %r" % (name, o))
            if "dtype" in o and o["dtype"] not in ("string", "int64", "float32"):
                _fail("inputs[%r]['dtype'] must be 'string', 'int64' or 'float32', not %r" % (name, o["dtype"]))
        self.used_norm = set()
        self.loose = False       # normalizers only present or absent (a saved model's columns, for comparing)

    def use(self, key, itype, why):
        if not isinstance(key, str) or not key:
            _fail("%s: the key %r is not a feature name" % (why, key))
        if key not in self.types and key not in self.order:
            self.order.append(key)
        if itype is None:
            return
        have = self.types.get(key)
        if have and have[0] != itype:
            _fail("input %r is %s for %s and %s for %s; one input has one type" % (key, have[0], have[1], itype, why))
        if not have:
            self.types[key] = (itype, why)

    def default(self, key, value, why):
        have = self.defaults.get(key)
        if have and have[0] != value:
            _fail("input %r has the default %r for %s and %r for %s" % (key, have[0], have[1], value, why))
        self.defaults[key] = (value, why)

    def numeric(self, col, where=""):
        key = col.key
        shape = tuple(getattr(col, "shape", (1,)) or ())
        if shape not in ((1,),):
            _fail("numeric_column(%r%s) has shape %s; wisp's numeric columns are scalars (shape (1,))"
                  % (key, where, shape))
        dt = _dtype_name(getattr(col, "dtype", "float32")) or "float32"
        if dt == "float32":
            itype = "float32"
        elif dt in _INT:
            itype = "int64"
        else:
            _fail("numeric_column(%r%s) has dtype %s; wisp reads float32 (or integer) inputs and would round a %s "
                  "value before bucketizing, where TensorFlow compares it as is" % (key, where, dt, dt))
        self.use(key, itype, "numeric_column(%r)" % key)
        if itype != "float32" and getattr(col, "normalizer_fn", None) is not None:
            _fail("numeric_column(%r) reads a %s input and has a normalizer; wisp normalizes float32 inputs only"
                  % (key, dt))
        if self.loose:
            norm = None if getattr(col, "normalizer_fn", None) is None else {"type": "present"}
        else:
            norm = _normalizer(col, key, self.normalizers)
        if norm is not None:
            self.used_norm.add(key)
        dv = getattr(col, "default_value", None)
        if dv is not None:
            vals = np.asarray(dv).reshape(-1)
            if vals.size != 1:
                _fail("numeric_column(%r) has the default %r; a scalar column has one default" % (key, dv))
            v = vals[0].item()
            if itype == "float32":
                if not np.isfinite(v):
                    _fail("numeric_column(%r) has the default %r, not a finite number" % (key, v))
                v = float(v)
            else:
                if float(v) != int(v):
                    _fail("numeric_column(%r) is an integer column with the default %r" % (key, v))
                v = int(v)
            self.default(key, v, "numeric_column(%r)" % key)
        out = {"type": "numeric", "key": key}
        if norm is not None:
            out["normalizer"] = norm
        return out, key

    def column(self, col, where=""):
        """(description column without name/offset, TensorFlow's name, size)."""
        if isinstance(col, str):
            _fail("%r is a feature name, not a feature column%s" % (col, where))
        kind = _kind(col)
        if kind == "NumericColumn":
            d, name = self.numeric(col, where)
            return d, name, 1
        if kind == "BucketizedColumn":
            src = col.source_column
            if _kind(src) != "NumericColumn":
                _fail("bucketized_column over a %s%s: its source must be a numeric column" % (_kind(src), where))
            sd, sname = self.numeric(src, " (the source of a bucketized column)")
            b = [float(x) for x in col.boundaries]
            if not b:
                _fail("bucketized_column(%r) has no boundaries" % sname)
            if any(not np.isfinite(x) for x in b):
                _fail("bucketized_column(%r): the boundaries %r are not all finite" % (sname, b))
            if any(b[i] >= b[i + 1] for i in range(len(b) - 1)):
                _fail("bucketized_column(%r): the boundaries %r repeat a value (TensorFlow allows it: an empty "
                      "bucket); wisp's description needs increasing boundaries" % (sname, b))
            return {"type": "bucketized", "source": sd, "boundaries": b}, sname + "_bucketized", len(b) + 1
        if kind == "HashedCategoricalColumn":
            dt = _dtype_name(getattr(col, "dtype", "string"))
            itype = "string" if dt == "string" else "int64" if dt in _INT else None
            if itype is None:
                _fail("categorical_column_with_hash_bucket(%r) has dtype %s (string or integer only)" % (col.key, dt))
            self.use(col.key, itype, "categorical_column_with_hash_bucket(%r)" % col.key)
            n = int(col.hash_bucket_size)
            if n < 1:
                _fail("categorical_column_with_hash_bucket(%r) has %d buckets" % (col.key, n))
            return {"type": "hash_bucket", "key": col.key, "buckets": n}, col.key, n
        if kind == "VocabularyListCategoricalColumn":
            voc = list(col.vocabulary_list)
            dt = _dtype_name(getattr(col, "dtype", None))
            if not voc:
                _fail("categorical_column_with_vocabulary_list(%r) has an empty vocabulary" % col.key)
            if dt == "string" or (dt is None and all(isinstance(v, (str, bytes)) for v in voc)):
                out = []
                for v in voc:
                    if isinstance(v, bytes):
                        try:
                            v = v.decode("utf-8")
                        except UnicodeDecodeError:
                            _fail("categorical_column_with_vocabulary_list(%r): the entry %r is not UTF-8"
                                  % (col.key, v))
                    if not isinstance(v, str):
                        _fail("categorical_column_with_vocabulary_list(%r): the entry %r is not a string"
                              % (col.key, v))
                    out.append(v)
                itype = "string"
            elif dt in _INT or (dt is None and all(isinstance(v, (int, np.integer)) for v in voc)):
                out = [int(v) for v in voc]
                itype = "int64"
            else:
                _fail("categorical_column_with_vocabulary_list(%r) has dtype %s (string or integer only)" % (col.key, dt))
            self.use(col.key, itype, "categorical_column_with_vocabulary_list(%r)" % col.key)
            k = int(getattr(col, "num_oov_buckets", 0) or 0)
            dv = getattr(col, "default_value", -1)
            dv = -1 if dv is None else int(dv)
            if k and dv != -1:
                _fail("categorical_column_with_vocabulary_list(%r) has both num_oov_buckets and default_value "
                      "(TensorFlow refuses that too)" % col.key)
            d = {"type": "vocabulary_list", "key": col.key, "vocabulary": out}
            if k:
                d["num_oov_buckets"] = k
            if dv != -1:
                d["default_value"] = dv
            return d, col.key, len(out) + k
        if kind == "IdentityCategoricalColumn":
            self.use(col.key, "int64", "categorical_column_with_identity(%r)" % col.key)
            n = int(col.number_buckets)
            d = {"type": "identity", "key": col.key, "buckets": n}
            if getattr(col, "default_value", None) is not None:
                d["default_value"] = int(col.default_value)
            return d, col.key, n
        if kind == "CrossedColumn":
            keys, names = [], []
            for k in col.keys:
                if isinstance(k, str):
                    self.use(k, None, "crossed_column")
                    keys.append(k)
                    names.append(k)
                    continue
                kk = _kind(k)
                if kk == "HashedCategoricalColumn":
                    _fail("crossed_column over categorical_column_with_hash_bucket(%r): TensorFlow refuses it (cross "
                          "the raw feature %r instead)" % (k.key, k.key))
                if kk not in ("BucketizedColumn", "VocabularyListCategoricalColumn", "IdentityCategoricalColumn",
                              "CrossedColumn"):
                    _refuse_kind(k, " (a key of a crossed column)")
                kd, kn, _ = self.column(k, " (a key of a crossed column)")
                kd = dict(kd, name=kn)
                keys.append(kd)
                names.append(kn)
            if len(keys) < 2:
                _fail("crossed_column(%r) has %d keys (2 or more)" % (names, len(keys)))
            n = int(col.hash_bucket_size)
            d = {"type": "crossed", "keys": keys, "buckets": n}
            hk = getattr(col, "hash_key", None)
            if hk is not None:
                hk = int(hk)
                d["hash_key"] = hk if hk < 2 ** 53 else "0x%x" % hk
            return d, "_X_".join(sorted(names)), n
        if kind == "IndicatorColumn":
            inner = col.categorical_column
            ik = _kind(inner)
            if ik not in ("HashedCategoricalColumn", "VocabularyListCategoricalColumn", "IdentityCategoricalColumn",
                          "CrossedColumn", "BucketizedColumn"):
                _refuse_kind(inner, " (inside indicator_column)")
            d, n, size = self.column(inner, " (inside indicator_column)")
            return d, n + "_indicator", size
        _refuse_kind(col, where)

    def resolve_inputs(self):
        out = []
        for name in self.order:
            o = self.inputs.get(name, {})
            k = self.keras_inputs.get(name, {})
            have = self.types.get(name)
            itype = have[0] if have else None
            for src, t in (("inputs", o.get("dtype")), ("the Keras model's input", k.get("dtype"))):
                if t is None:
                    continue
                if itype is None:
                    itype = t
                elif t != itype:
                    _fail("%s says %r is %s; its columns read it as %s" % (src, name, t, itype))
            if itype is None:
                _fail("input %r is a raw key of a crossed column and no other column reads it, so its type is "
                      "unknown (TensorFlow hashes strings and crosses integers as they are): say it with "
                      "inputs={%r: {'dtype': 'string'}} (or 'int64')" % (name, name))
            if "sparse" in o and "sparse" in k and bool(o["sparse"]) != bool(k["sparse"]):
                _fail("inputs says %r is %s; the Keras model's input is %s (crosses of a raw key differ: a dense "
                      "missing value is crossed, a sparse one is not)" % (
                          name, "sparse" if o["sparse"] else "dense", "sparse" if k["sparse"] else "dense"))
            sparse = bool(o.get("sparse", k.get("sparse", False)))
            inp = {"name": name, "dtype": itype}
            if sparse:
                inp["sparse"] = True
                if o.get("default") is not None:
                    _fail("inputs[%r]: a sparse input has no default (a missing value is no value)" % name)
            elif "default" in o:
                if o["default"] is not None:
                    inp["default"] = o["default"]
            elif name in self.defaults:
                inp["default"] = self.defaults[name][0]
            out.append(inp)
        unknown = set(self.inputs) - set(self.order)
        if unknown:
            _fail("inputs names %s, which no column reads" % sorted(unknown))
        unused = set(self.normalizers) - self.used_norm
        if unused:
            _fail("normalizers names %s, which no numeric column with a normalizer_fn reads" % sorted(unused))
        return out


def describe(feature_columns, inputs=None, normalizers=None, _keras_inputs=None):
    """The column description (a dict, engine/COLUMNS.md's grammar) of a linear model over
    feature_columns, and [(TensorFlow's column name, offset, size)] of their weight slices,
    in the order given. See from_tensorflow for inputs= and normalizers=."""
    if isinstance(feature_columns, (str, bytes)) or not hasattr(feature_columns, "__iter__"):
        _fail("feature_columns must be a list of tf.feature_column objects, not %s" % type(feature_columns).__name__)
    cols = list(feature_columns)
    if not cols:
        _fail("no feature columns")
    d = _Describer(inputs, normalizers, _keras_inputs)
    out, slices, off, names = [], [], 0, set()
    for c in cols:
        desc, name, size = d.column(c)
        tfname = getattr(c, "name", None)
        if isinstance(tfname, str) and tfname != name:
            _fail("column %r: wisp computes the name %r for it (TensorFlow's variable names follow the name)"
                  % (tfname, name))
        if name in names:
            _fail("two columns are named %r (TensorFlow refuses that too)" % name)
        names.add(name)
        out.append(dict({"name": name}, **desc, offset=off, size=size))
        slices.append((name, off, size))
        off += size
    spec = {"format": "wisp-columns", "version": 1, "inputs": d.resolve_inputs(), "columns": out,
            "num_features": off, "comment": "written by wisp.from_tensorflow"}
    return spec, slices


def _strip_normalizers(x):
    if isinstance(x, dict):
        return {k: _strip_normalizers(v) for k, v in x.items() if k != "normalizer"}
    if isinstance(x, list):
        return [_strip_normalizers(v) for v in x]
    return x


# ---- weights: checkpoints (and mappings read like them) -------------------------------------

class _MappingReader:
    def __init__(self, m):
        self.m = m

    def names(self):
        return set(self.m)

    def get(self, name):
        return np.asarray(self.m[name])


class _TFReader:
    def __init__(self, path):
        try:
            import tensorflow as tf
        except ImportError:
            _fail("reading the checkpoint %s needs TensorFlow (pip install tensorflow-cpu); without it, pass the "
                  "weights as a mapping of variable names to arrays" % path)
        try:
            self.r = tf.train.load_checkpoint(path)
        except Exception as e:  # noqa: BLE001
            _fail("cannot read the checkpoint %s: %s" % (path, str(e).splitlines()[0] if str(e) else e))
        self._names = set(self.r.get_variable_to_shape_map())

    def names(self):
        return self._names

    def get(self, name):
        return self.r.get_tensor(name)


def _find_prefix(names, prefix):
    if prefix is not None:
        p = prefix.rstrip("/") + "/" if prefix else ""
        if p + "bias_weights" not in names:
            _fail("no variable %r in the checkpoint" % (p + "bias_weights"))
        return p
    for p in _PREFIXES:
        if p + "bias_weights" in names:
            return p
    cands = sorted(n[:-len("bias_weights")] for n in names if n.endswith("bias_weights"))
    if len(cands) == 1:
        return cands[0]
    _fail("cannot find the linear model's bias_weights in the checkpoint (prefix= names the scope); candidates: %s; "
          "an object-based checkpoint of a Keras model is read through the model (pass the model or its saved "
          "path)" % (cands or "none"))


def _variable(reader, names, var):
    if var in names:
        return reader.get(var)
    parts = []
    while "%s/part_%d" % (var, len(parts)) in names:
        parts.append(reader.get("%s/part_%d" % (var, len(parts))))
    if parts:                               # a partitioned variable: its parts in order along axis 0
        return np.concatenate(parts, axis=0)
    return None


def _float32(a, what):
    a = np.asarray(a)
    if a.dtype != np.float32:
        _fail("%s is %s; wisp keeps float32 weights and would round these" % (what, a.dtype))
    return a


def _weights_from_reader(reader, slices, num_features, prefix, where):
    names = reader.names()
    pre = _find_prefix(names, prefix)
    w = np.zeros(num_features, dtype=np.float32)
    for name, off, size in slices:
        var = pre + name + "/weights"
        v = _variable(reader, names, var)
        if v is None:
            near = sorted(n for n in names if n.startswith(pre) and n.endswith("/weights"))
            _fail("%s has no variable %r for column %r (its weights: %s)" % (where, var, name, near[:20] or "none"))
        v = _float32(v, var)
        if v.ndim != 2 or v.shape[1] != 1:
            _fail("%s has shape %s; wisp scores binary models (one logit: shape [%d, 1])" % (var, v.shape, size))
        if v.shape[0] != size:
            _fail("%s has %d rows; the column has %d weights (are these the model's columns?)" % (var, v.shape[0], size))
        w[off:off + size] = v[:, 0]
    extra = sorted(n for n in names if n.startswith(pre) and n.endswith("/weights")
                   and n[len(pre):-len("/weights")] not in {s[0] for s in slices})
    if extra:
        _fail("%s holds weights of columns not given: %s; pass every column of the model" % (where, extra))
    b = _variable(reader, names, pre + "bias_weights")
    b = _float32(b, pre + "bias_weights")
    if b.shape != (1,):
        _fail("%sbias_weights has shape %s; wisp scores binary models (one logit)" % (pre, b.shape))
    return w, float(b[0])


# ---- weights: Keras 2 (tf_keras) models -----------------------------------------------------

def _is_keras_model(x):
    return hasattr(x, "layers") and hasattr(x, "get_weights")


def _is_keras_path(p):
    if os.path.isdir(p):
        return os.path.exists(os.path.join(p, "keras_metadata.pb"))
    return p.endswith((".keras", ".h5", ".hdf5"))


def _load_keras(path):
    try:
        import tf_keras as keras
    except ImportError:
        _fail("%s is a Keras model; reading it needs the tf_keras package (pip install tf_keras): Keras 3 has no "
              "DenseFeatures layer, so feature-column models are Keras 2 models" % path)
    try:
        return keras.models.load_model(path, compile=False)
    except Exception as e:  # noqa: BLE001  (the loader raises many kinds)
        _fail("cannot load the Keras model %s: %s" % (path, str(e).splitlines()[0] if str(e) else e))


def _keras_inputs(model):
    """{name: {"dtype", "sparse"}} of the model's named inputs."""
    out = {}
    ins = getattr(model, "input", None)
    items = ins.items() if isinstance(ins, dict) else ((getattr(t, "name", None), t) for t in (ins or [])) \
        if isinstance(ins, (list, tuple)) else []
    for name, t in items:
        if not name:
            continue
        spec = getattr(t, "type_spec", None)
        sk = type(spec).__name__ if spec is not None else ""
        if sk.startswith("Ragged"):
            _fail("the Keras model's input %r is ragged; wisp reads dense and sparse inputs" % name)
        dt = _dtype_name(getattr(t, "dtype", None))
        itype = "string" if dt == "string" else "int64" if dt in _INT else "float32" if dt == "float32" else None
        if itype is None:
            _fail("the Keras model's input %r is %s; wisp reads string, integer and float32 inputs" % (name, dt))
        sparse = sk.startswith("Sparse") or bool(getattr(t, "sparse", False))
        shape = tuple(getattr(t, "shape", ()) or ())
        if not sparse and len(shape) >= 2 and shape[-1] not in (1, None):
            _fail("the Keras model's input %r has shape %s: %d values a row in a dense tensor; wisp's dense inputs "
                  "hold one value (a sparse input holds any number)" % (name, shape, shape[-1]))
        out[name] = {"dtype": itype, "sparse": sparse}
    return out


def _dense_width(col):
    kind = _kind(col)
    if kind == "NumericColumn":
        return 1
    if kind == "BucketizedColumn":
        return len(col.boundaries) + 1
    if kind == "IndicatorColumn":
        return None
    _refuse_kind(col, " (in DenseFeatures)")


def _weights_from_keras(model, feature_columns, inputs, normalizers, where):
    layers = list(model.layers)
    kinds = [type(l).__name__ for l in layers]
    feats = [l for l in layers if type(l).__name__ == "DenseFeatures"]
    dense = [l for l in layers if type(l).__name__ in ("Dense", "LinearModel")]
    other = [k for k in kinds if k not in ("DenseFeatures", "Dense", "LinearModel", "InputLayer")]
    if len(feats) != 1 or len(dense) != 1 or other:
        _fail("%s: wisp imports Keras models inputs -> DenseFeatures -> Dense(1) or LinearModel (a linear model); its "
              "layers are %s"
              % (where, ", ".join(kinds)))
    df, d = feats[0], dense[0]
    try:
        reads = d.input is df.output or getattr(d.input, "name", 1) == getattr(df.output, "name", 2)
    except (AttributeError, ValueError):
        reads = True        # a subclassed model has no graph to check; the kernel's shape is checked below
    if not reads:
        _fail("%s: the Dense layer does not read the DenseFeatures output" % where)
    act = d.get_config().get("activation")
    if isinstance(act, dict):            # a serialized activation (tf_keras' LinearModel keeps it so)
        act = act.get("config", {}).get("name", act.get("class_name"))
    act = "linear" if act is None else act
    if act not in ("sigmoid", "linear"):
        _fail("%s: the Dense layer's activation is %r; wisp scores sigmoid(logit): sigmoid, or linear for a model "
              "that outputs the logit" % (where, act))
    ws = d.get_weights()                 # Dense: [kernel, bias]; tf_keras' LinearModel over one input the same
    if len(ws) not in (1, 2):
        _fail("%s: the %s layer has %d weight arrays; wisp imports one kernel and a bias (a LinearModel over one "
              "input: the DenseFeatures output)" % (where, type(d).__name__, len(ws)))
    kernel = _float32(ws[0], "the Dense kernel")
    bias = _float32(ws[1], "the Dense bias") if len(ws) == 2 else np.zeros(1, np.float32)
    if kernel.ndim != 2 or kernel.shape[1] != 1 or bias.shape != (1,):
        _fail("%s: the Dense kernel has shape %s; wisp scores binary models (one logit)" % (where, kernel.shape))
    model_cols = list(getattr(df, "_feature_columns", None) or [])
    if not model_cols:          # a revived (loaded) layer: its columns are in its config
        model_cols = [_from_config(c) for c in (df.get_config().get("feature_columns") or [])]
    if not model_cols:
        _fail("%s: the DenseFeatures layer has no feature columns" % where)
    kin = _keras_inputs(model)
    if feature_columns is None:
        cols = model_cols
    else:
        cols = list(feature_columns)
        mine = {n: dict(c, offset=0, size=0) for n, c in _named(cols, inputs, normalizers, kin)}
        theirs = {}
        for c in model_cols:     # the model's columns, their normalizers only present or absent
            _refuse_if_not_dense(c, where)
            got = _describe_loose(c, kin)
            theirs[got["name"]] = got
        if set(mine) != set(theirs):
            _fail("%s: the model's columns are %s, the feature_columns given %s" % (where, sorted(theirs), sorted(mine)))
        for n, got in theirs.items():
            if _strip_normalizers(got) != _strip_normalizers(mine[n]) or _has_norm(got) != _has_norm(mine[n]):
                _fail("%s: column %r differs from the one given: the model has %s, the feature_columns %s"
                      % (where, n, json.dumps(got)[:300], json.dumps(mine[n])[:300]))
    for c in cols:
        _refuse_if_not_dense(c, where)
    spec, slices = describe(cols, inputs, normalizers, kin)
    byname = {sl[0]: c for sl, c in zip(slices, cols)}
    w = np.zeros(spec["num_features"], dtype=np.float32)
    row = 0
    for name, off, size in sorted(slices):          # DenseFeatures concatenates its columns sorted by name
        width = _dense_width(byname[name]) or size
        if width != size:
            _fail("column %r: %d dense values, %d weights" % (name, width, size))
        if row + width > kernel.shape[0]:
            _fail("%s: the Dense kernel has %d rows, fewer than the columns' %d values" % (where, kernel.shape[0], row + width))
        w[off:off + size] = kernel[row:row + width, 0]
        row += width
    if row != kernel.shape[0]:
        _fail("%s: the Dense kernel has %d rows, the columns %d values" % (where, kernel.shape[0], row))
    return spec, w, float(bias[0])


def _from_config(cfg):
    """A serialized feature column ({"class_name", "config"}, as DenseFeatures' get_config writes it) as an
    object describe() reads: the class name and the fields; a normalizer_fn is its name, not the function."""
    if isinstance(cfg, dict) and set(cfg) >= {"class_name", "config"} and isinstance(cfg["config"], dict):
        o = type(str(cfg["class_name"]), (), {})()
        for k, v in cfg["config"].items():
            setattr(o, k, _from_config(v))
        return o
    if isinstance(cfg, (list, tuple)):
        return tuple(_from_config(v) for v in cfg)
    return cfg


def _refuse_if_not_dense(c, where):
    if _kind(c) not in ("NumericColumn", "BucketizedColumn", "IndicatorColumn"):
        _refuse_kind(c, " (in DenseFeatures of %s)" % where)


def _has_norm(x):
    if isinstance(x, dict):
        return ("normalizer" in x) or any(_has_norm(v) for v in x.values())
    if isinstance(x, list):
        return any(_has_norm(v) for v in x)
    return False


def _named(cols, inputs, normalizers, kin):
    spec, _ = describe(cols, inputs, normalizers, kin)
    return [(c["name"], c) for c in spec["columns"]]


def _describe_loose(col, kin):
    """A column as describe() writes it, a normalizer_fn standing for itself (checked for presence only)."""
    d = _Describer(None, None, kin)
    d.loose = True
    desc, name, size = d.column(col)
    return dict({"name": name}, **desc, offset=0, size=0)


# ---- from_tensorflow ------------------------------------------------------------------------

def convert(feature_columns, checkpoint_or_saved_model, prefix=None, inputs=None, normalizers=None,
            sparse_combiner="sum"):
    """(description, weights, bias, meta) for from_tensorflow."""
    if sparse_combiner != "sum":
        _fail("sparse_combiner=%r: the linear model then divides a column's weights by the count (mean) or its "
              "square root (sqrtn) of its ids; wisp sums them (LinearClassifier's and linear_model's default 'sum')"
              % (sparse_combiner,))
    src = checkpoint_or_saved_model
    if _is_keras_model(feature_columns) and src is None:
        feature_columns, src = None, feature_columns
    meta = {"source": "tensorflow", "exporter": "wisp.from_tensorflow"}
    tf = sys.modules.get("tensorflow")
    if tf is not None and getattr(tf, "__version__", None):
        meta["tensorflow"] = tf.__version__
    if isinstance(src, (str, os.PathLike)):
        path = os.fspath(src)
        if _is_keras_path(path):
            src = _load_keras(path)
            meta["keras_model"] = os.path.abspath(path)
        else:
            ckpt = path
            if os.path.isdir(path) and os.path.exists(os.path.join(path, "saved_model.pb")):
                ckpt = os.path.join(path, "variables", "variables")  # a SavedModel keeps its variables as a checkpoint
            if feature_columns is None:
                _fail("a checkpoint holds weights, not the feature columns: pass the columns the model was built with")
            spec, slices = describe(feature_columns, inputs, normalizers)
            reader = _TFReader(ckpt)
            w, b = _weights_from_reader(reader, slices, spec["num_features"], prefix, path)
            meta["checkpoint"] = os.path.abspath(path)
            return spec, w, b, meta
    if _is_keras_model(src):
        meta["source"] = "tensorflow-keras"
        meta.setdefault("keras_model", type(src).__name__)
        spec, w, b = _weights_from_keras(src, feature_columns, inputs, normalizers, meta["keras_model"])
        return spec, w, b, meta
    if hasattr(src, "keys") and hasattr(src, "__getitem__"):
        if feature_columns is None:
            _fail("weights by variable name need the feature columns they belong to")
        spec, slices = describe(feature_columns, inputs, normalizers)
        w, b = _weights_from_reader(_MappingReader(src), slices, spec["num_features"], prefix, "the weights given")
        return spec, w, b, meta
    _fail("checkpoint_or_saved_model must be a checkpoint (directory or prefix), a SavedModel directory, a Keras "
          "model (live, a SavedModel directory, .keras or .h5) or a mapping of variable names to arrays, not %s"
          % type(src).__name__)


def from_tensorflow(feature_columns, checkpoint_or_saved_model, path, dtype, inputs, normalizers, prefix,
                    sparse_combiner, write_model, load):
    """wisp.from_tensorflow's work: convert, write to a temporary file beside path, check that the engine
    reads the description (its parser names what it refuses), then rename it to path."""
    if not isinstance(path, (str, os.PathLike)):
        _fail("path must be the .wisp file to write, not %r" % (path,))
    path = os.fspath(path)
    spec, w, b, meta = convert(feature_columns, checkpoint_or_saved_model, prefix, inputs, normalizers,
                               sparse_combiner)
    meta["columns"] = str(len(spec["columns"]))
    tmp = "%s.tmp-%d" % (path, os.getpid())
    try:
        write_model(tmp, w, b, dtype, meta, json.dumps(spec, indent=1))
        m = load(tmp)
        try:
            m.session("cpu")._s.score_raw([], 0, np.empty(0, dtype=np.float32))   # parses the description
        except ValueError as e:
            _fail("the engine refuses the description written for these columns: %s" % e)
        del m
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return load(path)
