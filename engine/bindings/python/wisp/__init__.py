"""wisp — score sparse wide (logistic-regression) models on CPUs and CUDA GPUs, from Python.

    import wisp
    model = wisp.load("ctr.wisp")
    p = model.score(X)                      # float32 probabilities, shape (n,)
    s = model.session("gpu")                # a session placed on a device
    p = s.score(X)                          # X: scipy CSR, 2-D numpy, (indptr, indices[, values]), libsvm text,
                                            #    raw rows (DataFrame, Arrow, dict) for a model with feature columns
    s.bad_rows                              # [(row, reason)] of the rows scored NaN

The probability of row i is sigmoid(bias + sum over its features of
w[id] * value), what `wisp score` prints for the same row; ids beyond the
model's table are ignored (as LIBLINEAR does) and counted in stats().

Memory: CSR arrays go to the engine's one checked entry for CSR input
(wisp_batch_from_csr) as they are: those whose type and layout already match
the engine's batch (indptr int32/uint32 starting at 0, indices int32/uint32,
values float32, C-contiguous) are read in place, without a copy; int64 indptr
and indices, uint64 indices and float64 values are converted once, in C.
Other dtypes (int8/16, bool or integer values, float16), non-contiguous and
big-endian arrays are first converted by numpy (a copy). indptr follows
scipy's rules: indptr[0] == 0, never decreasing, indptr[-1] == len(indices)
(== len(values)); anything else raises InvalidArgumentError naming the
arrays. The GIL is released for the whole time the engine works, so other
Python threads run meanwhile.

Errors: a bad row (a negative index, a value that is not a finite float32:
NaN, +-inf, a float64 beyond float32's range; a malformed libsvm line) scores
NaN and is listed in Session.bad_rows (errors="nan", the default), or raises
BadRowError naming the first one (errors="raise"). A failing engine call
raises a WispError subclass per status code, with the engine's message.
Nothing aborts the interpreter.

For a model with feature columns, raw rows (a pandas DataFrame, a pyarrow
Table/RecordBatch, a dict of columns) are transformed as TensorFlow does
and scored (Session.score's docstring says how each is read).

GPU-resident inputs (CuPy arrays, PyTorch CUDA tensors, CuPy/PyTorch sparse
CSR: DLPack or the CUDA array interface) are scored on their GPU without a
round trip through host memory, the answers to host memory or, with
out="device", left on the GPU as a wisp.DeviceArray (Session.score).
"""
import asyncio
import concurrent.futures
import json
import threading

import numpy as np

from . import _profile, _raw, _wisp

__all__ = ["DeviceArray", "load", "devices", "version", "set_threads", "write_model", "from_sklearn", "from_onnx", "from_tensorflow", "profile", "Model", "Session", "WispError", "BadRowError",
           "InvalidArgumentError", "OutOfMemoryError", "WispIOError", "FormatError", "ChecksumError",
           "VersionError", "ParseError", "LimitError", "NoDeviceError", "DeviceError", "StateError"]

__version__ = _wisp.version()
DeviceArray = _wisp.DeviceArray
HostBlock = _wisp.HostBlock      # the base of a GPU batch's host output over pooled pinned memory


# ---- errors ------------------------------------------------------------------------

class WispError(Exception):
    """A failing engine call: .status is the engine's status code (negative),
    .message the engine's message (which names the file, line or row)."""
    status = None

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class InvalidArgumentError(WispError, ValueError):
    """WISP_EINVAL: a bad argument (unknown device name, malformed arrays)."""
    status = _wisp.EINVAL


class OutOfMemoryError(WispError, MemoryError):
    """WISP_ENOMEM: host memory allocation failed."""
    status = _wisp.ENOMEM


class WispIOError(WispError, OSError):
    """WISP_EIO: a file could not be opened, read, written or mapped."""
    status = _wisp.EIO


class FormatError(WispError):
    """WISP_EFORMAT: a malformed model file (bad magic, offsets, sizes, counts)."""
    status = _wisp.EFORMAT


class ChecksumError(FormatError):
    """WISP_ECHECKSUM: a model file section does not match its checksum."""
    status = _wisp.ECHECKSUM


class VersionError(FormatError):
    """WISP_EVERSION: a model file of a version this build cannot read."""
    status = _wisp.EVERSION


class ParseError(WispError, ValueError):
    """WISP_EPARSE: malformed input text; the message names the line."""
    status = _wisp.EPARSE


class LimitError(WispError, ValueError):
    """WISP_ELIMIT: a documented limit was exceeded (rows, features per row, ...)."""
    status = _wisp.ELIMIT


class NoDeviceError(WispError):
    """WISP_ENODEV: the requested device does not exist or is not usable."""
    status = _wisp.ENODEV


class DeviceError(WispError):
    """WISP_EDEVICE: a device failed (out of memory, sticky CUDA error)."""
    status = _wisp.EDEVICE


class StateError(WispError):
    """WISP_ESTATE: the call does not fit the object's state."""
    status = _wisp.ESTATE


class BadRowError(WispError, ValueError):
    """A bad input row under errors="raise": .row is its index in X, .reason
    what is wrong with it, .errors every bad row as [(row, reason)]."""

    def __init__(self, row, reason, errors=()):
        super().__init__("row %d: %s" % (row, reason))
        self.row = row
        self.reason = reason
        self.errors = list(errors)


_wisp.register_errors(WispError, {c.status: c for c in (
    InvalidArgumentError, OutOfMemoryError, WispIOError, FormatError, ChecksumError, VersionError,
    ParseError, LimitError, NoDeviceError, DeviceError, StateError)})


# ---- module functions -----------------------------------------------------------------

def version():
    """The engine's version string ("0.1.0")."""
    return _wisp.version()


def set_threads(threads):
    """The number of CPU threads the process's engine scores with (0, the
    default: one per core; the calling thread counts as one). Must be
    called before the engine starts (the first load() or devices()): a
    server forking N workers may want 1 each. StateError afterwards."""
    _wisp.set_threads(threads)


def devices():
    """The devices wisp can score on, as a list of dicts: first the CPU
    ({"device": "cpu", "threads": N}), then each CUDA device found
    ({"device": "gpu:I", "name", "memory" (bytes), "capability" (90 for
    sm_90), "usable"}). Also, under "gpu_status" of the CPU entry, the
    engine's words for why there is no GPU ("" when there are some)."""
    gpus, status, threads = _wisp.devices()
    out = [{"device": "cpu", "threads": threads, "gpu_status": status}]
    for i, (name, memory, capability, usable) in enumerate(gpus):
        out.append({"device": "gpu:%d" % i, "name": name, "memory": memory,
                    "capability": capability, "usable": bool(usable)})
    return out


def profile(path=None, max_records=1_000_000):
    """Start a profile: until .stop() (or the end of a `with` block), every
    Session.score records what it added to each statistic (parse,
    transform, h2d, kernel, d2h, sync, overhead, rows, bytes) and when it
    started. Returns the Profile: .records, .table() (the stage breakdown),
    .trace() and .write(path) (Chrome/Perfetto trace JSON, the layout
    lua/wisp/profile.lua writes: open it in https://ui.perfetto.dev);
    path given: written on stop. One profile at a time (RuntimeError)."""
    return _profile.start(path, max_records)


def load(path):
    """Map and validate a .wisp model file; returns a Model. Raises a
    WispError subclass naming the file and the problem (WispIOError for a
    missing file, FormatError/ChecksumError/VersionError for a bad one)."""
    return Model(path)


def write_model(path, weights, bias, dtype="f32", meta=None, columns=None):
    """Write a .wisp model file atomically (a temporary file, fsync, rename).

    weights: 1-D array of the table (id j's weight at j; converted to
    float32 once), bias: the intercept, dtype: how to store the weights
    ("f32", "f16": round to nearest even, "i8": scale = max|w| / 127),
    meta: a dict of str to str (no newlines; keys without '='), columns:
    the feature-column description (a JSON text or a JSON-able object)."""
    w = np.ascontiguousarray(weights, dtype=np.float32)
    if w.ndim != 1:
        raise ValueError("weights must be 1-D (id j's weight at j), not %d-D" % w.ndim)
    text = ""
    for k, v in (meta or {}).items():
        k, v = str(k), str(v)
        if "=" in k or "\n" in k or "\n" in v or not k:
            raise ValueError("meta %r=%r: keys must be non-empty without '=', values without newlines" % (k, v))
        text += "%s=%s\n" % (k, v)
    if columns is not None and not isinstance(columns, str):
        columns = json.dumps(columns)
    _wisp.write_model(path, w, float(bias), dtype, text, columns)


def from_sklearn(estimator, path, dtype="f32"):
    """Write a fitted binary scikit-learn linear classifier as a .wisp model
    at path and return it loaded (a Model).

    Accepted: LogisticRegression and SGDClassifier(loss="log_loss") with
    two classes. The model's score is the probability of classes_[1], so
    Model.predict_proba(X) matches the estimator's predict_proba(X) (to
    float32 rounding of the weights: 1e-6 in probability for ordinary
    models), with classes_ kept. Column j of the estimator's input is
    feature id j. Refused with the reason (ValueError): estimators without
    probabilities (LinearSVC, SGDClassifier with another loss), more than
    two classes, unfitted estimators, anything else.

    A Pipeline is imported when every step before its classifier is
    "passthrough" (or None). A FeatureHasher or HashingVectorizer step is
    refused with the reason: the column description has no node for
    sklearn's hashing (signed MurmurHash3_x86_32 of the feature name, seed
    0, index |h| % n_features, value times the sign of h), so the engine
    could not reproduce it exactly; import the classifier alone
    (pipeline[-1]) and score the hashed matrix (pipeline[:-1].transform(X))
    instead. Any other transformer is refused likewise."""
    name = type(estimator).__name__
    if name == "Pipeline":
        return _from_pipeline(estimator, path, dtype)
    if name == "LinearSVC":
        raise ValueError("from_sklearn: LinearSVC gives no probabilities (its decision function is not a "
                         "logistic model); train LogisticRegression or SGDClassifier(loss='log_loss')")
    if name == "SGDClassifier":
        loss = getattr(estimator, "loss", None)
        if loss not in ("log_loss", "log"):
            raise ValueError("from_sklearn: SGDClassifier(loss=%r) gives no probabilities; "
                             "only loss='log_loss' is a logistic model" % (loss,))
    elif name != "LogisticRegression":
        raise ValueError("from_sklearn: %s is not supported (LogisticRegression, "
                         "SGDClassifier(loss='log_loss'))" % name)
    if not hasattr(estimator, "coef_") or not hasattr(estimator, "classes_"):
        raise ValueError("from_sklearn: the %s is not fitted (no coef_)" % name)
    classes = list(estimator.classes_)
    if len(classes) != 2:
        raise ValueError("from_sklearn: the %s has %d classes; wisp scores binary models" % (name, len(classes)))
    coef = estimator.coef_
    if hasattr(coef, "toarray"):
        coef = coef.toarray()
    coef = np.asarray(coef, dtype=np.float64)
    if coef.ndim != 2 or coef.shape[0] != 1:
        raise ValueError("from_sklearn: coef_ of shape %s; a binary model has (1, n_features)" % (coef.shape,))
    intercept = float(np.asarray(estimator.intercept_, dtype=np.float64).reshape(-1)[0]) \
        if getattr(estimator, "fit_intercept", True) else 0.0
    plain = [c.item() if hasattr(c, "item") else c for c in classes]
    try:
        classes_json = json.dumps(plain)
    except TypeError:
        raise ValueError("from_sklearn: classes_ %r are not numbers or strings" % (classes,))
    meta = {"source": "sklearn", "estimator": name, "classes_json": classes_json,
            "score_class": "1", "n_features_in": str(coef.shape[1])}
    write_model(path, coef[0], intercept, dtype, meta)
    return load(path)


def from_tensorflow(feature_columns, checkpoint_or_saved_model, path, dtype="f32", inputs=None, normalizers=None,
                    prefix=None, sparse_combiner="sum"):
    """Write a TensorFlow binary linear model over tf.feature_column objects
    as a .wisp model at path, its column description (engine/COLUMNS.md)
    written from the columns, and return it loaded (a Model): raw rows
    (DataFrame, Arrow, dict; `wisp score --format tsv/csv/jsonl`) then
    score as TensorFlow does (spec/interop/tf_parity.py: 1e-6).

    feature_columns: the user's own columns (tf.feature_column or
    tf.compat.v1.feature_column): numeric_column (float32 or integer,
    shape (1,)), bucketized_column, categorical_column_with_hash_bucket,
    _with_vocabulary_list, _with_identity, crossed_column, and
    indicator_column of one of them (what DenseFeatures needs).
    checkpoint_or_saved_model: the weights, as
      - a checkpoint (directory or prefix) or SavedModel directory of
        tf.compat.v1.feature_column.linear_model / tf.estimator's
        LinearClassifier (variables "<scope>/<column name>/weights",
        "<scope>/bias_weights"; the scope is found, or prefix= names it;
        partitioned variables are joined);
      - a Keras 2 (tf_keras) model, live or saved (SavedModel directory,
        .keras, .h5), inputs -> DenseFeatures -> Dense(1, sigmoid or linear)
        (or tf_keras.experimental.LinearModel in place of the Dense):
        feature_columns may then be None (the layer's own columns) and the
        inputs' types and sparseness are the model's Inputs';
      - a mapping of those variable names to arrays.
    inputs: {name: {"dtype": "string"|"int64"|"float32", "sparse": bool,
    "default": value}} for what the columns do not say: every input is
    dense (one value a row: a DataFrame column, a CSV field; a missing
    string is "", a missing integer -1, TensorFlow's markers) unless
    "sparse" (a SparseTensor, any number of values); a numeric column's
    default_value is its input's default; a raw crossed key no other
    column reads needs its "dtype".
    normalizers: {key: {"type": "standard", "mean": m, "std": s}} ((x - m) / s)
    or {"type": "affine", "scale": a, "shift": b} (x * a + b) for each
    numeric column with a normalizer_fn (Python code wisp cannot read); the
    function is run on ~520 float32 values and must agree bit for bit.
    sparse_combiner: linear_model's (only "sum", the default, is a sum of
    weights). dtype: "f32", "f16", "i8" as write_model.

    Refused with the reason (ValueError), never approximated: embedding,
    shared-embedding, weighted, sequence and vocabulary-file columns,
    normalizer_fns without a declaration or that disagree with it,
    float64 inputs, boundaries that repeat, several logits, hidden
    layers, non-float32 weights, columns missing from the checkpoint."""
    from . import _tf
    return _tf.from_tensorflow(feature_columns, checkpoint_or_saved_model, path, dtype, inputs, normalizers, prefix,
                               sparse_combiner, write_model, load)


def from_onnx(path_or_model, path, dtype="f32"):
    """Write an ONNX-ML linear model as a .wisp model at path and return it
    loaded (a Model). path_or_model: a .onnx file name, the serialized
    bytes, or an onnx.ModelProto (onnx itself is needed only for that).

    Imported by the engine's own reader (engine/model/import_onnx.c, the same as
    `wisp import onnx`): one LinearClassifier (ai.onnx.ml; two class
    labels; post_transform LOGISTIC or NONE), or one LinearRegressor (one
    target; the score is sigmoid(w.x + b)), optionally followed by Cast,
    ZipMap or Identity nodes, as skl2onnx writes them. Column j of the
    ONNX input is feature id j; the score is sigmoid(class 1's score):
    ONNX Runtime's probabilities[:, 1] under LOGISTIC (classes_ are the
    model's class labels, predict_proba's columns in their order).
    Anything else is refused with the reason (wisp.ParseError, a
    ValueError): other nodes (a Scaler before the model, skl2onnx's
    MatMul/Sigmoid graph for SGDClassifier: use from_sklearn for that),
    more classes, SOFTMAX or PROBIT transforms."""
    if isinstance(path_or_model, (bytes, bytearray, memoryview)):
        data = path_or_model
    elif hasattr(path_or_model, "SerializeToString"):
        data = path_or_model.SerializeToString()
    else:
        with open(path_or_model, "rb") as f:
            data = f.read()
    _wisp.import_onnx(data, path, dtype)
    return load(path)


def _from_pipeline(pipe, path, dtype):
    steps = list(getattr(pipe, "steps", []))
    if not steps:
        raise ValueError("from_sklearn: the Pipeline has no steps")
    for step_name, step in steps[:-1]:
        if step is None or step == "passthrough":
            continue
        kind = type(step).__name__
        if kind in ("FeatureHasher", "HashingVectorizer"):
            raise ValueError(
                "from_sklearn: Pipeline step %r (%s) hashes with sklearn's signed MurmurHash3 (seed 0, index "
                "|h| %% n_features, the value times the sign of h); wisp's column description has no such node "
                "(its hash_bucket is TensorFlow's Fingerprint64), so the hashing cannot be kept exactly. Import "
                "the classifier alone, from_sklearn(pipeline[-1], path), and score pipeline[:-1].transform(X)"
                % (step_name, kind))
        raise ValueError("from_sklearn: Pipeline step %r (%s) is not imported: wisp keeps only hashing it can "
                         "reproduce exactly; import pipeline[-1] and score pipeline[:-1].transform(X)" % (step_name, kind))
    return from_sklearn(steps[-1][1], path, dtype)


# ---- input forms -----------------------------------------------------------------------

# the element types wisp_batch_from_csr takes (numpy's type chars; 'l'/'q' are int64, 'L'/'Q' uint64)
_PTR_OK = {"i", "I", "l", "q"}
_IDX_OK = {"i", "I", "l", "L", "q", "Q"}
_VAL_OK = {"f", "d"}
_NUM_OK = {"i", "I", "l", "L", "q", "Q", "b", "B", "h", "H", "f", "d", "?"}     # score_dense's


def _native(a, kinds, what, values=False):
    """a as a C-contiguous native-order numpy array of a type _wisp reads (no copy when it
    already is one): other integers (and, for indices, bools) as int64, other floats as float32
    or float64; values of integer or bool type as float64."""
    a = np.asarray(a)
    if a.dtype.char not in kinds or not a.dtype.isnative:
        if a.dtype.kind in "iub":
            a = a.astype(np.float64 if values else np.int64)
        elif a.dtype.kind == "f":
            a = a.astype(np.float64 if a.dtype.itemsize > 4 else np.float32)
        else:
            raise TypeError("%s: arrays of %s are not numbers wisp can read" % (what, a.dtype))
    return np.ascontiguousarray(a)


_sparse_types = {}       # type -> whether it is a scipy.sparse matrix/array (asked once per type)


_csr_types = {}          # type -> whether it is a scipy.sparse CSR matrix/array (asked once per type)
_empty = np.empty
_f32 = np.dtype(np.float32)     # a dtype object: np.empty(n, it) skips the type-to-dtype lookup (~75 ns a call)
_ndarray = np.ndarray


def _is_scipy_csr(X):
    t = type(X)
    known = _csr_types.get(t)
    if known is None:
        known = _csr_types[t] = _is_scipy_sparse(X) and getattr(X, "format", None) == "csr"
    return known


def _is_scipy_sparse(X):
    t = type(X)
    known = _sparse_types.get(t)
    if known is None:
        mod = t.__module__ or ""
        known = _sparse_types[t] = mod.startswith("scipy.sparse") and hasattr(X, "tocsr") and hasattr(X, "format")
    return known


_wisp.register_fast(np.empty, _f32, _is_scipy_csr)   # Session.score's fast path (score_fast) in C


# ---- GPU-resident inputs (DLPack, __cuda_array_interface__; _wisp_dlpack.c) -----------------

def _dl_like(a):
    """An array that comes through DLPack or the CUDA array interface (not numpy's own path)."""
    return not isinstance(a, np.ndarray) and (hasattr(a, "__dlpack__") or hasattr(a, "__cuda_array_interface__"))


def _device_csr(X):
    """(indptr, indices, data) of a CuPy (cupyx.scipy.sparse) or PyTorch sparse CSR matrix, else None."""
    mod = type(X).__module__ or ""
    if mod.startswith("cupyx.scipy.sparse"):
        if getattr(X, "format", None) != "csr":
            X = X.tocsr()
        return X.indptr, X.indices, X.data
    if mod.startswith("torch") and str(getattr(X, "layout", "")) == "torch.sparse_csr":
        return X.crow_indices(), X.col_indices(), X.values()
    return None


def _stream_handle(stream):
    """A cudaStream_t as an int: an int, a CuPy Stream (.ptr) or a torch.cuda.Stream (.cuda_stream)."""
    if stream is None or isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr"):
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h
    raise TypeError("stream must be an int (a cudaStream_t), a cupy.cuda.Stream or a torch.cuda.Stream, not %r"
                    % type(stream).__name__)


def _device_index(a):
    d = getattr(a, "device", None)
    for attr in ("id", "index"):            # cupy.cuda.Device.id, torch.device.index
        v = getattr(d, attr, None)
        if isinstance(v, int):
            return v
    return d if isinstance(d, int) else None


def _length(a):
    try:
        return len(a)
    except TypeError:
        shape = getattr(a, "shape", None)
        if shape is None:
            cai = getattr(a, "__cuda_array_interface__", None)
            shape = cai.get("shape") if isinstance(cai, dict) else None
        if not shape:
            raise TypeError("indptr (a %s) has no len() or shape" % type(a).__name__)
        return int(shape[0])


def _host_out(rows):
    """The numpy array a GPU batch's answers come back to: over pooled pinned memory
    (_wisp.host_out: one DMA at pinned speed, the block back to the pool when the array is
    gone) from 64k rows on, else (small, no pinned memory left) numpy's own."""
    blk = _wisp.host_out(rows)
    return _empty(rows, _f32) if blk is None else np.frombuffer(blk, _f32, rows)


def _dev_convert(indptr, indices, values):
    """CuPy/PyTorch arrays in the engine's GPU layout (indptr int32/int64, indices int32, values
    float32, contiguous), converted on their device by their own library; None for others.
    Indices beyond int32 are clipped to 2^31 - 1 (beyond any table a device reads: ignored and
    counted), negative ones stay negative (bad rows)."""
    mod = type(indices).__module__ or ""
    big = 2 ** 31 - 1
    if mod.startswith("cupy"):
        import cupy
        ip = indptr if str(indptr.dtype) in ("int32", "int64") else indptr.astype(cupy.int64)
        ix = indices if str(indices.dtype) == "int32" else indices.clip(-big - 1, big).astype(cupy.int32)
        vs = None if values is None else values.astype(cupy.float32, copy=False)
        return (cupy.ascontiguousarray(ip), cupy.ascontiguousarray(ix),
                None if vs is None else cupy.ascontiguousarray(vs))
    if mod.startswith("torch"):
        import torch
        ip = indptr if indptr.dtype in (torch.int32, torch.int64) else indptr.to(torch.int64)
        ix = indices if indices.dtype == torch.int32 else indices.clamp(-big - 1, big).to(torch.int32)
        vs = None if values is None else values.to(torch.float32)
        return ip.contiguous(), ix.contiguous(), None if vs is None else vs.contiguous()
    return None


# ---- Session ---------------------------------------------------------------------------

class Session:
    """A model placed on a device. Create with Model.session(device).

    Device names: "cpu", "gpu" (= "gpu:0"), "gpu:N", "gpus" (every usable
    GPU), "gpus:N", "auto" (the CPU while the GPUs start in the background,
    then each batch on the device a crossover calibrated on the model picks
    for its size; the CPU without a GPU), the grammar of the CLI's --device. A session on a GPU falls back to the
    CPU (logged, counted in stats()["fallbacks"]) when the device is absent,
    out of memory or failed.

    Thread-safety: any thread may call a session; calls on one session are
    serialized (a lock), calls on different sessions run in parallel. The
    GIL is released while the engine works. Arrays read in place must not
    be changed (by another thread) while a call on them runs.

    Attributes:
      model        the Model
      bad_rows     [(row, reason)] of the last score's bad rows (scored NaN)
      last_errors  the same list: bad_rows' name in 0.1.0, kept through 0.1.x"""

    def __init__(self, model, device="auto"):
        if not isinstance(model, Model):
            raise TypeError("Session(model, device): model must be a wisp.Model")
        self.model = model
        self._s = _wisp.Session(model._m, device)
        # the C session's own lock (`with self._lock`), the one score's fast path takes too
        self._lock = self._s
        self._fast = self._s.score_fast
        self._executor = None

    @property
    def bad_rows(self):
        """[(row, reason)] of the last score's bad rows (scored NaN), in row order."""
        return self._lock.bad_rows()

    @bad_rows.setter
    def bad_rows(self, bad):
        self._lock.set_bad_rows(bad)

    # bad_rows' name in 0.1.0, kept through 0.1.x (removed in 0.2)
    last_errors = bad_rows

    def __repr__(self):
        return "<wisp.Session %s on %r>" % (self.model.path, self.device)

    @property
    def device(self):
        """The device asked for ("auto", "gpu:0", ...)."""
        return self._s.device()

    @property
    def last_device(self):
        """The device that scored the last batch ("cpu", "gpu:0", "gpus:2", ...)."""
        return self._s.last_device()

    def set_device(self, device):
        """Place the session on another device (takes effect on the next batch)."""
        with self._lock:
            self._s.set_device(device)

    def score(self, X, errors="nan", out=None, stream=None):
        """Probabilities of the rows of X, a float32 numpy array of shape (n,)
        (out="device": a wisp.DeviceArray on the GPU of X's arrays).

        X may be:
          - a scipy.sparse matrix or array (CSR read in place; other formats
            are converted with .tocsr()): row i, column j is feature id j;
          - a 2-D numpy array (dense rows: the non-zero entries are the
            features, column j is id j, valued);
          - a tuple (indptr, indices) (binary features, value 1) or
            (indptr, indices, values) of 1-D arrays, CSR layout;
          - libsvm text (str or bytes): "[label] id:value id ...", one row
            per line (blank and '#' lines make no row), as `wisp score` reads.
        Zero-copy: indptr int32/uint32 (starting at 0), indices int32/uint32,
        values float32, C-contiguous are read in place; int64 indptr/indices,
        float64 or integer values are converted once in C; other dtypes and
        layouts are converted by numpy first.

        GPU-resident X: a tuple of CuPy arrays or PyTorch CUDA tensors (any
        object with __dlpack__/__dlpack_device__, else __cuda_array_interface__),
        a cupyx.scipy.sparse CSR matrix or a torch sparse CSR tensor is
        scored on its GPU without a copy through host memory
        (wisp_session_score_device_n: every row checked on the device). The
        producer's stream is respected: __dlpack__(stream=S) is asked for the
        stream S the engine works on (stream=: an int cudaStream_t, a
        cupy.cuda.Stream or a torch.cuda.Stream; default the legacy default
        stream), a __cuda_array_interface__ "stream" is worked on directly.
        On the GPU: indptr int32/int64, indices int32, values float32, 1-D
        contiguous, read in place; other dtypes are converted once on the
        device by CuPy/PyTorch (indices clipped to int32). out="device"
        leaves the answers on that GPU (a wisp.DeviceArray: cupy.from_dlpack
        / torch.from_dlpack take it without a copy; its memory comes from a
        pool and goes back to it once it and every export are gone). A host
        out of 64k rows or more is a numpy array over pooled pinned memory
        (its .base a wisp.HostBlock): one DMA. On a "cpu" session (or
        one on another GPU) the arrays are copied to host memory first;
        without a usable GPU: NoDeviceError. Host DLPack producers (a torch
        CPU tensor) are read in place as numpy arrays are. A negative index
        or a broken indptr range on the GPU makes a bad row (NaN, listed).

        errors="nan" (default): bad rows score NaN and are listed in
        self.bad_rows as (row, reason); errors="raise": BadRowError for
        the first bad row (self.bad_rows still lists them all)."""
        fast = self._fast
        if fast is not None and out is None and stream is None and _profile.active is None and \
                (errors == "nan" or errors == "raise"):
            # CSR arrays, all in C (_wisp_score.c score_fast): a CSR tuple or scipy CSR whose arrays the
            # engine reads as they are; NotImplemented for anything else (the general path below)
            res = fast(X)
            if res is not NotImplemented:
                if errors == "raise" and self._lock.has_bad_rows():
                    bad = self._lock.bad_rows()
                    raise BadRowError(bad[0][0], bad[0][1], bad)
                return res
        if errors != "nan" and errors != "raise":
            raise ValueError('errors must be "nan" or "raise", not %r' % (errors,))
        if out is not None or stream is not None:
            return self._score_dl_call(X, errors, out, stream)
        prof = _profile.active
        if prof is not None:
            prof._begin(self)
        if type(X) is tuple and 2 <= len(X) <= 3:
            csr = (X[0], X[1], X[2] if len(X) == 3 else None)
        elif _is_scipy_csr(X):
            csr = (X.indptr, X.indices, X.data)
        else:
            csr = None
        with self._lock:
            if csr is not None and type(csr[0]) is not _ndarray and _dl_like(csr[0]):
                out, bad = self._score_dl(csr, None, None)        # GPU arrays, or a DLPack host producer
            elif csr is not None:
                out, bad = self._csr(*csr)                        # numpy converts what the engine does not read
            else:
                out, bad = self._score_locked(X)
            self.bad_rows = bad
        if prof is not None:
            prof._record(self, "score")
        if bad and errors == "raise":
            row, reason = bad[0]
            raise BadRowError(row, reason, bad)
        return out

    def _score_dl_call(self, X, errors, out, stream):
        if out is not None and out != "device":
            raise ValueError('out must be None (a numpy array) or "device", not %r' % (out,))
        if type(X) is tuple and 2 <= len(X) <= 3:
            csr = (X[0], X[1], X[2] if len(X) == 3 else None)
        else:
            csr = _device_csr(X)
        if csr is None or not _dl_like(csr[0]):
            raise ValueError("out=\"device\" and stream= take GPU arrays: a tuple of CuPy arrays or PyTorch CUDA "
                             "tensors, or a CuPy/PyTorch sparse CSR matrix; got %s" % type(X).__name__)
        prof = _profile.active
        if prof is not None:
            prof._begin(self)
        with self._lock:
            res, bad = self._score_dl(csr, out, stream)
            self.bad_rows = bad
        if prof is not None:
            prof._record(self, "score")
        if bad and errors == "raise":
            raise BadRowError(bad[0][0], bad[0][1], bad)
        return res

    def _score_dl(self, csr, out, stream):
        s = self._s
        if s is None:
            raise StateError("the session is closed")
        indptr, indices, values = csr
        handle = _stream_handle(stream)
        dev = _device_index(indptr)
        host = None if out == "device" else _host_out(max(_length(indptr) - 1, 0))
        try:
            bad, res = s.score_dlpack(indptr, indices, values, host, handle, dev)
        except TypeError as e:
            if isinstance(e, WispError):
                raise
            conv = _dev_convert(indptr, indices, values)
            if conv is None:
                raise
            bad, res = s.score_dlpack(conv[0], conv[1], conv[2], host, handle, dev)
        return res, bad

    def _score_locked(self, X):
        s = self._s
        if s is None:
            raise StateError("the session is closed")
        dl = _device_csr(X)
        if dl is not None:
            return self._score_dl(dl, None, None)
        if type(X) is tuple:
            raise ValueError("a tuple X is (indptr, indices) or (indptr, indices, values)")
        if isinstance(X, (str, bytes, bytearray, memoryview)):
            data = X.encode("utf-8") if isinstance(X, str) else X
            rows = s.parse_libsvm(data)
            out = np.empty(rows, dtype=np.float32)
            return out, s.score_parsed(out)
        if _is_scipy_sparse(X):
            if X.format != "csr":
                X = X.tocsr()
            # duplicates and unsorted indices are scored as given (each entry counts)
            return self._csr(X.indptr, X.indices, X.data)
        if _raw.is_raw(X):
            return self._raw(X)
        A = np.asarray(X)
        if A.ndim != 2:
            raise ValueError("X must be 2-D (rows x columns), a scipy.sparse matrix, a CSR tuple or libsvm "
                             "text; got a %d-D array" % A.ndim)
        out = np.empty(A.shape[0], dtype=np.float32)
        try:
            return out, s.score_dense(A, out)
        except (TypeError, BufferError, ValueError) as e:
            # a layout or type the C side does not read (Fortran order, float16,
            # big-endian): numpy converts it, once; a real error is raised again
            if isinstance(e, WispError):
                raise
            B = _native(A, _NUM_OK, "X")
            if B is A:
                raise
        return out, s.score_dense(B, out)

    def _raw(self, X):
        columns = self.model.columns
        if not isinstance(columns, dict):
            raise TypeError("X is raw rows (%s) but the model %s has no feature-column description: score "
                            "it with feature ids (scipy CSR, a CSR tuple, libsvm text)" % (type(X).__name__, self.model.path))
        cols, rows = _raw.sources(X, columns)
        out = np.empty(rows, dtype=np.float32)
        return out, self._s.score_raw(cols, rows, out)

    def _csr(self, indptr, indices, values):
        # the arrays as numpy arrays of types the engine reads (the same objects when they are), one
        # call: the engine checks them (wisp_batch_from_csr, scipy's rules)
        s = self._s
        if s is None:
            raise StateError("the session is closed")
        indptr, indices = _native(indptr, _PTR_OK, "indptr"), _native(indices, _IDX_OK, "indices")
        if values is not None:
            values = _native(values, _VAL_OK, "values", values=True)
        out = np.empty(max(indptr.shape[0] - 1, 0) if indptr.ndim == 1 else 0, dtype=np.float32)
        return out, s.score_csr(indptr, indices, values, out)

    def submit(self, X, errors="nan"):
        """Score X on a worker thread of this session; returns a
        concurrent.futures.Future of score(X, errors). Calls complete in the
        order they were submitted."""
        if self._executor is None:
            with self._lock:
                if self._executor is None:
                    self._executor = concurrent.futures.ThreadPoolExecutor(1, "wisp-session")
        return self._executor.submit(self.score, X, errors)

    async def score_async(self, X, errors="nan"):
        """`await session.score_async(X)`: score(X) without blocking the
        event loop (the engine works on a worker thread, the GIL released)."""
        return await asyncio.wrap_future(self.submit(X, errors))

    def stats(self):
        """The statistics summed since the last reset_stats(), as a dict:
        batches, rows, nnz, out_of_range, bad_rows, fallbacks, and the
        per-stage wall times in nanoseconds (ns_parse, ns_transform, ns_h2d,
        ns_kernel, ns_d2h, ns_sync, ns_overhead, ns_total) and bytes_h2d,
        bytes_d2h."""
        with self._lock:
            return self._s.stats()

    def reset_stats(self):
        """Zero the statistics."""
        with self._lock:
            self._s.reset_stats()

    def close(self):
        """Finish and free the session now (also done when it is collected)."""
        ex, self._executor = self._executor, None
        if ex is not None:
            ex.shutdown(wait=True)
        with self._lock:
            self._fast = None
            self._s = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- Model -----------------------------------------------------------------------------

class Model:
    """A loaded .wisp model (wisp.load(path)). Thread-safe; its sessions keep
    it alive. Scores are the probability of one class: for a LIBLINEAR
    import the first label of its "label" line, for from_sklearn classes_[1].

    Attributes:
      num_features  weights in the table (ids 0 .. num_features-1)
      dtype         "f32", "f16" or "i8"
      bias          the intercept
      meta          the "meta" section as a dict of str to str
      columns       None, or the feature-column description (parsed JSON)
      classes_      numpy array of the two class labels, sorted as
                    scikit-learn sorts them ([0, 1] when the model names none);
                    predict_proba's columns follow it"""

    def __init__(self, path):
        self._m = _wisp.Model(path)
        self._sessions = {}
        self._sessions_lock = threading.Lock()
        self.meta = {}
        """The "meta" section as a dict of str to str (source, labels, solver, ...)."""
        for line in self._m.meta_text().splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                self.meta[k] = v
        text = self._m.columns_text()
        if not text:
            cols = None
        else:
            try:
                cols = json.loads(text)
            except ValueError:
                cols = text
        self.columns = cols
        """The feature-column description: None when the model has none,
        else the parsed JSON (or the text if it is not JSON)."""
        self.classes_, self._positive = self._classes()

    def _classes(self):
        if "classes_json" in self.meta:              # written by from_sklearn: classes_[score_class] is scored
            try:
                classes = json.loads(self.meta["classes_json"])
                pos = int(self.meta.get("score_class", "1"))
                if isinstance(classes, list) and len(classes) == 2 and pos in (0, 1):
                    return np.array(classes), pos
            except ValueError:
                pass
        labels = self.meta.get("labels", "").split()
        if len(labels) == 2:
            try:
                vals = [int(x) for x in labels]
            except ValueError:
                vals = labels
            pos = vals[0]
            score_label = self.meta.get("score_label")
            if score_label is not None:
                try:
                    pos = int(score_label) if isinstance(vals[0], int) else score_label
                except ValueError:
                    pass
            classes = np.array(sorted(vals))
            return classes, int(np.flatnonzero(classes == pos)[0]) if pos in vals else 1
        return np.array([0, 1]), 1

    def __repr__(self):
        return "<wisp.Model %s: %d features, %s>" % (self.path, self.num_features, self.dtype)

    @property
    def num_features(self):
        """Weights in the table: ids 0 .. num_features-1 (others are ignored)."""
        return self._m.num_features()

    @property
    def dtype(self):
        """How the weights are stored: "f32", "f16" or "i8"."""
        return self._m.dtype()

    @property
    def bias(self):
        """The model bias (intercept)."""
        return self._m.bias()

    @property
    def path(self):
        """The file the model was loaded from."""
        return self._m.path()

    def weight(self, id):
        """The weight of feature id, dequantized (0.0 for ids out of range)."""
        return self._m.weight(id)

    def session(self, device="auto"):
        """A new Session on device ("cpu", "gpu", "gpu:N", "gpus", "gpus:N", "auto")."""
        return Session(self, device)

    def _session(self, device):
        with self._sessions_lock:
            s = self._sessions.get(device)
            if s is None:
                s = self._sessions[device] = Session(self, device)
            return s

    def score(self, X, device="auto", errors="nan"):
        """Session.score(X) on a session of this model kept per device (made
        on first use). Threads calling it take turns on that session; for
        parallel scoring give each thread its own model.session()."""
        return self._session(device).score(X, errors=errors)

    def predict_proba(self, X, device="auto", errors="nan"):
        """Shape (n, 2): column k is the probability of classes_[k], as
        scikit-learn's predict_proba. Bad rows are NaN (errors="nan")."""
        p = self.score(X, device=device, errors=errors).astype(np.float64)
        out = np.empty((p.shape[0], 2), dtype=np.float64)
        out[:, self._positive] = p
        out[:, 1 - self._positive] = 1.0 - p
        return out

    def predict(self, X, device="auto", errors="raise"):
        """The predicted class of each row (classes_[positive] where its
        probability is > 0.5, as LIBLINEAR's decision value > 0). A bad row
        has no class: errors="raise" (the default here) raises BadRowError."""
        p = self.score(X, device=device, errors=errors)
        return np.where(p > 0.5, self.classes_[self._positive], self.classes_[1 - self._positive])
