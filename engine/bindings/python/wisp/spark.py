"""wisp.spark — wisp inside Apache Spark: WispModel, a pyspark.ml Transformer that scores a DataFrame column by column over Arrow.

    from wisp.spark import WispModel
    scored = WispModel("ctr.wisp", inputCol="features").transform(df)
    # df + "probability" (float, null for a bad row) + "probability_error" (string, null when fine)

What it reads (inputCol's Spark type decides):
  - an MLlib vector column (pyspark.ml.linalg SparseVector/DenseVector, what
    FeatureHasher, VectorAssembler and MLlib's pipelines make): vector index j
    is feature id j, with its value (a dense vector's zero entries are skipped,
    as Session.score does for dense rows);
  - an array<int> or array<bigint> column of feature ids (binary features), or
    with valuesCol an array<float>/array<double> column of their values;
  - for a model with feature columns, the raw input columns by name (strings,
    numbers, arrays for sparse inputs): inputCols, or by default every input
    of the model's description that the DataFrame has.

How: one Arrow UDF (pyspark's arrow_udf, Spark >= 4.1) over the input
column(s) only: Spark sends those columns to the Python worker as Arrow
batches and keeps the others in the JVM. A vector column arrives as its
storage struct (type, size, indices, values); the CSR arrays that
Session.score reads are cut from the Arrow buffers with numpy (offsets,
child arrays: no Python loop over rows). What stays per row in Python: the
raw-row path's list (sparse) inputs, which wisp._raw reads element by
element, and the reason strings of bad rows.

The model is shipped once (SparkContext.addFile under a name carrying its
checksum, so two models or two versions of one file never collide; shipModel=False
reads modelPath on every executor, a shared path) and opened once per
executor Python process (a module-level cache keyed by the file and its
checksum; Spark reuses Python workers across tasks). opens() counts the
opens of this process, what the specs check.

device="auto": the GPU Spark assigned to the task
(TaskContext.resources()["gpu"], spark.task.resource.gpu.amount or a
resource profile), "gpu:N" for its address (its position in
CUDA_VISIBLE_DEVICES when that variable lists it); the CPU when Spark gave
the task no GPU (wisp's own "auto" would take every GPU of the host from
every task). Any other device name is used as given. The engine scores with
spark.task.cpus threads per Python worker (threads=0) unless threads is set.

Bad rows stay rows: a null probability and the reason in errorCol
(outputCol + "_error" by default): a null vector or ids array, a null id or
value inside one, ids and values of different lengths, and what the engine
refuses (a negative id, a value that is not a finite float32, a raw value the
columns refuse). errors="raise" fails the task instead (wisp.BadRowError).
Ids at or beyond the model's table are ignored, as everywhere in wisp.

engine="jvm" scores in the executor JVM instead (vector and ids columns; not raw
columns): wisp.spark.WispScorer (engine/bindings/spark, wisp.jar and wisp-spark.jar in
spark.jars) over the DataFrame's internal rows, batchRows rows (4096 when 0) a
Batch of direct buffers and one engine call each, the model opened once per
executor JVM; no Python worker. The same columns, float32 results and reasons.
Its engine threads are the JVM's (-Dwisp.threads; threads is ignored).
"""
import hashlib
import os
import shutil
import tempfile
import threading

import numpy as np

import wisp

__all__ = ["WispModel", "task_device", "opens", "process_stats"]

# ---- executor side: the per-process model cache ----------------------------------------

_lock = threading.Lock()
_models = {}          # (path, checksum) -> wisp.Model
_sessions = {}        # (path, checksum, device) -> wisp.Session
_opens = {}           # (path, checksum) -> how many times this process opened it
_stats = {"batches": 0, "rows": 0, "bad_rows": 0, "devices": {}}
_threads_set = [False]


def opens(path=None):
    """How many times this process opened models: {(path, checksum): count}, or the count for one path."""
    with _lock:
        if path is None:
            return dict(_opens)
        return sum(n for (p, _), n in _opens.items() if p == path)


def process_stats():
    """This process's counters: pid, opens, batches and rows scored, bad rows, the devices asked for."""
    with _lock:
        return {"pid": os.getpid(), "opens": {"%s#%s" % k: n for k, n in _opens.items()},
                "batches": _stats["batches"], "rows": _stats["rows"], "bad_rows": _stats["bad_rows"],
                "devices": dict(_stats["devices"])}


def _dump_stats():
    """With WISP_SPARK_STATS_DIR set (the specs set it), this process's counters go to DIR/PID.json after
    each batch: how the specs count opens per executor process without asking a worker Spark may not pick."""
    d = os.environ.get("WISP_SPARK_STATS_DIR")
    if not d:
        return
    import json
    tmp = os.path.join(d, ".%d.json.tmp" % os.getpid())
    with open(tmp, "w") as f:
        json.dump(process_stats(), f)
    os.replace(tmp, os.path.join(d, "%d.json" % os.getpid()))


def _file_checksum(path):
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 22)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def _set_threads(threads):
    """Once per process, before its first load: the engine's CPU threads (0: the task's cpus)."""
    if _threads_set[0]:
        return
    _threads_set[0] = True
    n = int(threads or 0)
    if n <= 0:
        try:
            from pyspark import TaskContext
            tc = TaskContext.get()
            n = int(tc.cpus()) if tc is not None else 0
        except Exception:
            n = 0
    if n > 0:
        try:
            wisp.set_threads(n)
        except wisp.StateError:
            pass                      # the engine already started in this process: its thread count stays


def _session(cfg, device):
    key = (cfg["path"], cfg["checksum"])
    with _lock:
        s = _sessions.get(key + (device,))
        if s is not None:
            return s
        m = _models.get(key)
        if m is None:
            _set_threads(cfg["threads"])
            path = _local_path(cfg)
            if cfg["verify"]:
                got = _file_checksum(path)
                if got != cfg["checksum"]:
                    raise wisp.FormatError("wisp.spark: %s on this executor has checksum %s, the driver's "
                                           "model %s has %s: not the same file" % (path, got, cfg["path"], cfg["checksum"]))
            m = _models[key] = wisp.load(path)
            _opens[key] = _opens.get(key, 0) + 1
        s = _sessions[key + (device,)] = m.session(device)
        return s


def _local_path(cfg):
    name = cfg["shipped"]
    if name:
        from pyspark import SparkFiles
        p = SparkFiles.get(name)
        if os.path.exists(p):
            return p
    return cfg["path"]


def task_device(device="auto", resources=None, env=None):
    """The device a task scores on. device other than "auto": itself. "auto":
    "gpu:N" for the first GPU address Spark assigned to the task (resources:
    TaskContext.get().resources() by default, a dict name -> object with
    .addresses), N = the address's position in CUDA_VISIBLE_DEVICES when that
    lists it, else the address itself; "cpu" when the task has no GPU."""
    if device != "auto":
        return device
    if resources is None:
        from pyspark import TaskContext
        tc = TaskContext.get()
        resources = tc.resources() if tc is not None else {}
    gpu = resources.get("gpu") if resources else None
    addrs = list(getattr(gpu, "addresses", None) or []) if gpu is not None else []
    if not addrs:
        return "cpu"
    addr = str(addrs[0]).strip()
    visible = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if visible:
        listed = [v.strip() for v in visible.split(",")]
        if addr in listed:
            return "gpu:%d" % listed.index(addr)
    try:
        return "gpu:%d" % int(addr)
    except ValueError:
        raise ValueError("wisp.spark: Spark assigned GPU address %r, which is not a device number "
                         "(and CUDA_VISIBLE_DEVICES=%r does not list it)" % (addr, visible))


# ---- Arrow arrays -> CSR ---------------------------------------------------------------------

def _list_parts(arr):
    """(offsets int32/int64 numpy from 0, flat child array, lengths, null mask) of a list array,
    null slots as empty lists (flatten() drops what a null slot may hold)."""
    import pyarrow as pa
    n = len(arr)
    nulls = np.asarray(arr.is_null(), dtype=bool) if arr.null_count else np.zeros(n, dtype=bool)
    if not arr.null_count:
        off = np.asarray(arr.offsets)
        if off[0] != 0:
            off = off - off[0]
        flat = arr.flatten()
        return off, flat, np.diff(off), nulls
    lens = np.asarray(arr.value_lengths().fill_null(0), dtype=np.int64)
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    if off[-1] <= np.iinfo(np.int32).max:
        off = off.astype(np.int32)
    flat = arr.flatten()
    assert len(flat) == off[-1], (len(flat), off[-1])
    _ = pa
    return off, flat, lens, nulls


def _np(flat, dtype=None):
    """A child array as numpy (no copy for a null-free numeric array); its null mask or None."""
    mask = np.asarray(flat.is_null(), dtype=bool) if flat.null_count else None
    if mask is not None:
        flat = flat.fill_null(0)
    a = flat.to_numpy(zero_copy_only=False)
    if dtype is not None and a.dtype != dtype:
        a = a.astype(dtype)
    return a, mask


def _rows_with(mask_entries, off, n):
    """Which rows own at least one True entry of mask_entries (entries laid out by off), or None."""
    if mask_entries is None or not mask_entries.any():
        return None
    rows = np.zeros(n, dtype=bool)
    rows[np.repeat(np.arange(n), np.diff(np.asarray(off, dtype=np.int64)))[mask_entries]] = True
    return rows


def _csr_from_vectors(struct):
    """CSR (indptr, ids, values) and per-row reasons from an MLlib vector column's storage struct
    (type int8: 0 sparse, 1 dense; size; indices list<int32>; values list<double>)."""
    n = len(struct)
    reasons = {}
    fields = {struct.type.field(i).name: a for i, a in enumerate(struct.flatten())}
    vnull = np.asarray(struct.is_null(), dtype=bool) if struct.null_count else np.zeros(n, bool)
    typ = fields["type"].fill_null(0).to_numpy(zero_copy_only=False).astype(np.int8)
    dense = (typ == 1) & ~vnull
    voff, vflat, vlens, _ = _list_parts(fields["values"])
    vals, _ = _np(vflat)
    if not dense.any():
        ioff, iflat, ilens, _ = _list_parts(fields["indices"])
        ids, _ = _np(iflat)
        if not np.array_equal(ilens, vlens):
            for r in np.flatnonzero(ilens != vlens):
                reasons[int(r)] = "vector: %d indices but %d values" % (ilens[r], vlens[r])
        else:
            for r in np.flatnonzero(vnull):
                reasons[int(r)] = "null vector"
            return ioff, ids, vals, reasons
    # mixed or dense rows: every row's values are in vals (row order); sparse rows' ids come from
    # indices, dense rows' ids are 0..len-1, and a dense row's zero entries are dropped
    ioff, iflat, ilens, _ = _list_parts(fields["indices"])
    sparse_ids, _ = _np(iflat, np.int64)
    sparse_rows = ~dense & ~vnull
    bad_len = sparse_rows & (ilens != vlens)
    for r in np.flatnonzero(bad_len):
        reasons[int(r)] = "vector: %d indices but %d values" % (ilens[r], vlens[r])
    for r in np.flatnonzero(vnull):
        reasons[int(r)] = "null vector"
    if bad_len.any():
        raise _Unaligned(reasons)
    total = int(voff[-1])
    row_of = np.repeat(np.arange(n), vlens)
    is_dense = dense[row_of]
    ids = np.empty(total, dtype=np.int64)
    ids[~is_dense] = sparse_ids[np.repeat(sparse_rows, ilens)] if len(sparse_ids) else sparse_ids
    pos = np.arange(total, dtype=np.int64) - np.asarray(voff, dtype=np.int64)[row_of]
    ids[is_dense] = pos[is_dense]
    keep = ~(is_dense & (vals == 0))
    if not keep.all():
        ids, vals, row_of = ids[keep], vals[keep], row_of[keep]
        lens = np.bincount(row_of, minlength=n)
        voff = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=voff[1:])
    return voff, ids, vals, reasons


class _Unaligned(Exception):
    """Rows whose parts do not line up: they are scored as empty rows, then nulled."""

    def __init__(self, reasons):
        super().__init__("unaligned rows")
        self.reasons = reasons


def _csr_from_ids(ids_arr, vals_arr):
    """CSR and reasons from an array<int|bigint> ids column and an optional array<float|double> values column."""
    n = len(ids_arr)
    reasons = {}
    off, iflat, ilens, inull = _list_parts(ids_arr)
    ids, idmask = _np(iflat)
    for r in np.flatnonzero(inull):
        reasons[int(r)] = "null ids"
    bad = _rows_with(idmask, off, n)
    if bad is not None:
        for r in np.flatnonzero(bad):
            reasons.setdefault(int(r), "a null id")
    vals = None
    if vals_arr is not None:
        voff, vflat, vlens, vnull = _list_parts(vals_arr)
        vals, vmask = _np(vflat)
        for r in np.flatnonzero(vnull & ~inull):
            reasons.setdefault(int(r), "null values")
        mism = (vlens != ilens) & ~vnull & ~inull
        for r in np.flatnonzero(mism):
            reasons.setdefault(int(r), "%d ids but %d values" % (ilens[r], vlens[r]))
        badv = _rows_with(vmask, voff, n)
        if badv is not None:
            for r in np.flatnonzero(badv):
                reasons.setdefault(int(r), "a null value")
        if mism.any() or (vnull & ~inull).any():
            # keep only the rows whose ids and values line up; the others become empty rows
            ok = ~mism & ~vnull & ~inull
            lens = np.where(ok, ilens, 0)
            noff = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(lens, out=noff[1:])
            take_i = np.repeat(ok, ilens)
            take_v = np.repeat(ok, vlens)
            return noff, ids[take_i], vals[take_v], reasons
    return off, ids, vals, reasons


def _score_csr(session, indptr, ids, vals, n):
    # the arrays as Arrow holds them: the engine checks and converts them (wisp_batch_from_csr)
    out = session.score((indptr, ids, vals) if vals is not None else (indptr, ids))
    assert len(out) == n
    return out, session.bad_rows


# ---- the UDF body (runs in the executor's Python worker) -----------------------------------------

def _score_arrays(cfg, arrays):
    """Score one batch: arrays are the pyarrow arrays of the UDF's columns; returns the struct array
    (p float, e string)."""
    import pyarrow as pa
    device = task_device(cfg["device"])
    session = _session(cfg, device)
    mode = cfg["mode"]
    n = len(arrays[0])
    reasons = {}
    if mode == "vector":
        try:
            indptr, ids, vals, reasons = _csr_from_vectors(arrays[0])
        except _Unaligned as u:
            reasons = u.reasons
            keep = np.ones(n, bool)
            keep[list(reasons)] = False
            struct = arrays[0].filter(pa.array(keep))
            indptr, ids, vals, more = _csr_from_vectors(struct)
            out_k, bad_k = _score_csr(session, indptr, ids, vals, int(keep.sum()))
            rows = np.flatnonzero(keep)
            out = np.full(n, np.nan, dtype=np.float32)
            out[rows] = out_k
            bad = [(int(rows[r]), why) for r, why in bad_k]
            return _result(out, bad, reasons, n, cfg, session)
        out, bad = _score_csr(session, indptr, ids, vals, n)
    elif mode == "ids":
        indptr, ids, vals, reasons = _csr_from_ids(arrays[0], arrays[1] if len(arrays) > 1 else None)
        out, bad = _score_csr(session, indptr, ids, vals, n)
    else:
        batch = pa.RecordBatch.from_arrays(list(arrays), names=list(cfg["names"]))
        out = session.score(batch)
        bad = session.bad_rows
    return _result(out, bad, reasons, n, cfg, session)


def _result(out, bad, reasons, n, cfg, session):
    import pyarrow as pa
    for r, why in bad:
        reasons.setdefault(int(r), why)
    with _lock:
        _stats["batches"] += 1
        _stats["rows"] += n
        _stats["bad_rows"] += len(reasons)
        d = session.device
        _stats["devices"][d] = _stats["devices"].get(d, 0) + 1
    _dump_stats()
    if reasons and cfg["errors"] == "raise":
        r = min(reasons)
        raise wisp.BadRowError(r, reasons[r], sorted(reasons.items()))
    if reasons:
        mask = np.zeros(n, dtype=bool)
        mask[list(reasons)] = True
        p = pa.array(out, type=pa.float32(), mask=mask)
        e = pa.array([reasons.get(i) for i in range(n)], type=pa.string()) if len(reasons) * 4 > n else \
            _sparse_strings(reasons, n)
    else:
        p = pa.array(out, type=pa.float32())
        e = pa.nulls(n, type=pa.string())
    return pa.StructArray.from_arrays([p, e], names=["p", "e"])


def _sparse_strings(reasons, n):
    import pyarrow as pa
    idx = np.full(n, -1, dtype=np.int32)
    keys = sorted(reasons)
    idx[keys] = np.arange(len(keys), dtype=np.int32)
    dictionary = pa.array([reasons[k] for k in keys], type=pa.string())
    ind = pa.array(idx, mask=idx < 0)
    return pa.DictionaryArray.from_arrays(ind, dictionary).dictionary_decode()


def _batches(it, rows):
    """Arrow batches regrouped to at most rows rows per engine call (0: as Spark sends them)."""
    import pyarrow as pa
    if not rows:
        yield from it
        return
    pending, have = [], 0
    for item in it:
        arrays = item if isinstance(item, tuple) else (item,)
        n = len(arrays[0])
        start = 0
        while start < n:
            take = min(rows - have, n - start)
            pending.append(tuple(a.slice(start, take) for a in arrays))
            have += take
            start += take
            if have == rows:
                yield _concat(pending, pa)
                pending, have = [], 0
    if pending:
        yield _concat(pending, pa)


def _concat(parts, pa):
    if len(parts) == 1:
        return parts[0]
    return tuple(pa.concat_arrays([p[i] for p in parts]) for i in range(len(parts[0])))


def _run_udf(cfg, it):
    for item in _batches(it, cfg["batch_rows"]):
        arrays = item if isinstance(item, tuple) else (item,)
        yield _score_arrays(cfg, arrays)


# ---- driver side: the Transformer --------------------------------------------------------------

try:
    from pyspark import keyword_only
    from pyspark.ml import Transformer
    from pyspark.ml.param.shared import HasInputCol, HasInputCols, HasOutputCol, Param, Params, TypeConverters
    from pyspark.ml.util import DefaultParamsReadable, DefaultParamsWritable
except ImportError as _e:          # the rest of wisp works without Spark
    _IMPORT_ERROR = _e

    class WispModel:                                  # noqa: D101
        def __init__(self, *a, **k):
            raise ImportError("wisp.spark needs pyspark (pip install pyspark pyarrow): %s" % _IMPORT_ERROR)
else:
    _shipped_lock = threading.Lock()
    _shipped = {}                 # (SparkContext id, path, checksum) -> the name given to addFile
    _checksums = {}               # (path, size, mtime_ns, inode) -> checksum (driver)

    class WispModel(Transformer, HasInputCol, HasInputCols, HasOutputCol, DefaultParamsReadable, DefaultParamsWritable):
        """Scores a DataFrame with a .wisp model: transform(df) = df + outputCol (float, the
        probability; null for a bad row) + errorCol (string: why the row is bad, else null).

        modelPath   the .wisp file (on the driver; shipped to executors unless shipModel=False)
        inputCol    an MLlib vector column, or an array<int|bigint> ids column (default "features")
        valuesCol   with an ids column: an array<float|double> column of their values (default: binary)
        inputCols   for a model with feature columns: the raw input columns (default: every input of the
                    model's description that the DataFrame has, when inputCol is not one of its columns)
        outputCol   default "probability"; errorCol default outputCol + "_error"
        device      "auto" (the GPU Spark assigned to the task, else the CPU), "cpu", "gpu:N", ...
        batchRows   rows per engine call (0: one call per Arrow batch Spark sends,
                    spark.sql.execution.arrow.maxRecordsPerBatch rows, 10,000 by default)
        errors      "null" (bad rows: null + reason) or "raise" (a bad row fails its task)
        engine      "python" (the Arrow UDF in Python workers) or "jvm" (wisp.spark.WispScorer in the
                    executor JVM: batchRows rows a JNI call, 4096 when 0; needs wisp.jar and
                    wisp-spark.jar in spark.jars; vector and ids columns only)
        threads     the engine's CPU threads per executor Python process (0: spark.task.cpus)
        shipModel   ship the file with SparkContext.addFile (True) or read modelPath on every executor
        verifyChecksum  check, when an executor opens the file, that it is the driver's (True)
        """

        modelPath = Param(Params._dummy(), "modelPath", "the .wisp model file", typeConverter=TypeConverters.toString)
        valuesCol = Param(Params._dummy(), "valuesCol", "array<float> values of an ids column ('' for binary)",
                          typeConverter=TypeConverters.toString)
        errorCol = Param(Params._dummy(), "errorCol", "the bad-row reason column (default outputCol + '_error')",
                         typeConverter=TypeConverters.toString)
        device = Param(Params._dummy(), "device", "auto, cpu, gpu:N, ...", typeConverter=TypeConverters.toString)
        batchRows = Param(Params._dummy(), "batchRows", "rows per engine call (0: per Arrow batch)",
                          typeConverter=TypeConverters.toInt)
        errors = Param(Params._dummy(), "errors", "null or raise", typeConverter=TypeConverters.toString)
        threads = Param(Params._dummy(), "threads", "engine threads per Python worker (0: spark.task.cpus)",
                        typeConverter=TypeConverters.toInt)
        shipModel = Param(Params._dummy(), "shipModel", "ship the model with SparkContext.addFile",
                          typeConverter=TypeConverters.toBoolean)
        verifyChecksum = Param(Params._dummy(), "verifyChecksum", "executors check the file's checksum",
                               typeConverter=TypeConverters.toBoolean)
        engine = Param(Params._dummy(), "engine", "python (Arrow UDF) or jvm (WispScorer in the executor JVM)",
                       typeConverter=TypeConverters.toString)

        @keyword_only
        def __init__(self, modelPath=None, inputCol="features", outputCol="probability", device="auto",
                     batchRows=0, valuesCol="", inputCols=None, errorCol="", errors="null", threads=0,
                     shipModel=True, verifyChecksum=True, engine="python"):
            super().__init__()
            self._setDefault(inputCol="features", outputCol="probability", device="auto", batchRows=0,
                             valuesCol="", errorCol="", errors="null", threads=0, shipModel=True,
                             verifyChecksum=True, engine="python")
            kwargs = self._input_kwargs
            self._set(**{k: v for k, v in kwargs.items() if v is not None})

        @keyword_only
        def setParams(self, **kwargs):
            return self._set(**{k: v for k, v in self._input_kwargs.items() if v is not None})

        def setModelPath(self, v):
            return self._set(modelPath=v)

        def setInputCol(self, v):
            return self._set(inputCol=v)

        def setInputCols(self, v):
            return self._set(inputCols=v)

        def setOutputCol(self, v):
            return self._set(outputCol=v)

        def setValuesCol(self, v):
            return self._set(valuesCol=v)

        def setDevice(self, v):
            return self._set(device=v)

        def setBatchRows(self, v):
            return self._set(batchRows=v)

        def setErrors(self, v):
            return self._set(errors=v)

        def setEngine(self, v):
            return self._set(engine=v)

        def getModelPath(self):
            return self.getOrDefault(self.modelPath)

        def getErrorCol(self):
            e = self.getOrDefault(self.errorCol)
            return e or self.getOutputCol() + "_error"

        def _checksum(self, path):
            st = os.stat(path)
            key = (os.path.abspath(path), st.st_size, st.st_mtime_ns, st.st_ino)
            c = _checksums.get(key)
            if c is None:
                c = _checksums[key] = _file_checksum(path)
            return c

        def _ship(self, sc, path, checksum):
            key = (id(sc), path, checksum)
            with _shipped_lock:
                name = _shipped.get(key)
                if name is None:
                    name = "%s-%s" % (checksum[:16], os.path.basename(path))
                    stage = tempfile.mkdtemp(prefix="wisp-spark-")
                    dst = os.path.join(stage, name)
                    try:
                        os.link(path, dst)
                    except OSError:
                        shutil.copyfile(path, dst)
                    sc.addFile(dst)
                    _shipped[key] = name
                return name

        def _mode(self, df, model):
            from pyspark.ml.linalg import VectorUDT
            from pyspark.sql import types as T
            cols = self.getOrDefault(self.inputCols) if self.isSet(self.inputCols) else None
            inp = self.getInputCol()
            schema = {f.name: f.dataType for f in df.schema.fields}
            if cols:
                missing = [c for c in cols if c not in schema]
                if missing:
                    raise ValueError("WispModel: inputCols %s are not columns of the DataFrame" % missing)
                if not isinstance(model.columns, dict):
                    raise ValueError("WispModel: inputCols (raw rows) need a model with feature columns; %s has none"
                                     % model.path)
                return "raw", list(cols)
            if inp in schema:
                t = schema[inp]
                if isinstance(t, VectorUDT):
                    if self.getOrDefault(self.valuesCol):
                        raise ValueError("WispModel: valuesCol goes with an ids column, not the vector column %r" % inp)
                    return "vector", [inp]
                if isinstance(t, T.ArrayType) and isinstance(t.elementType, (T.IntegerType, T.LongType, T.ShortType,
                                                                               T.ByteType)):
                    vc = self.getOrDefault(self.valuesCol)
                    if not vc:
                        return "ids", [inp]
                    vt = schema.get(vc)
                    if vt is None:
                        raise ValueError("WispModel: valuesCol %r is not a column of the DataFrame" % vc)
                    if not (isinstance(vt, T.ArrayType) and isinstance(vt.elementType, (T.FloatType, T.DoubleType))):
                        raise ValueError("WispModel: valuesCol %r is %s; it must be array<float> or array<double>"
                                         % (vc, vt.simpleString()))
                    return "ids", [inp, vc]
                if not isinstance(model.columns, dict):
                    raise ValueError("WispModel: inputCol %r is %s; it must be an MLlib vector or array<int> ids "
                                     "(or the model must have feature columns, to read raw columns)"
                                     % (inp, t.simpleString()))
            if isinstance(model.columns, dict):
                names = [i["name"] for i in model.columns.get("inputs", []) if i["name"] in schema]
                if not names:
                    raise ValueError("WispModel: the DataFrame has none of the model's inputs %s"
                                     % [i["name"] for i in model.columns.get("inputs", [])])
                return "raw", names
            raise ValueError("WispModel: inputCol %r is not a column of the DataFrame (columns: %s)"
                             % (inp, list(schema)))

        def _transform(self, df):
            from pyspark.sql import functions as F
            path = self.getModelPath()
            if not path:
                raise ValueError("WispModel: modelPath is not set")
            errors = self.getOrDefault(self.errors)
            if errors not in ("null", "raise"):
                raise ValueError('WispModel: errors must be "null" or "raise", not %r' % (errors,))
            out_col, err_col = self.getOutputCol(), self.getErrorCol()
            for c in (out_col, err_col):
                if c in df.columns:
                    raise ValueError("WispModel: output column %r already exists" % c)
            engine = self.getOrDefault(self.engine)
            if engine not in ("python", "jvm"):
                raise ValueError('WispModel: engine must be "python" or "jvm", not %r' % (engine,))
            path = os.path.abspath(path)
            model = wisp.load(path)                    # validates the file on the driver, tells its columns
            mode, names = self._mode(df, model)
            if engine == "jvm":
                return self._transform_jvm(df, path, mode, names, out_col, err_col, errors)
            checksum = self._checksum(path)
            shipped = self._ship(df.sparkSession.sparkContext, path, checksum) if self.getOrDefault(self.shipModel) else ""
            cfg = {"path": path, "checksum": checksum, "shipped": shipped, "mode": mode, "names": names,
                   "device": self.getOrDefault(self.device), "batch_rows": max(self.getOrDefault(self.batchRows), 0),
                   "errors": errors, "threads": self.getOrDefault(self.threads),
                   "verify": self.getOrDefault(self.verifyChecksum)}
            udf = _make_udf(cfg, len(names))
            tmp = "__wisp_%s" % checksum[:8]
            while tmp in df.columns:
                tmp += "_"
            keep = [F.col("`%s`" % c.replace("`", "``")) for c in df.columns]
            scored = df.withColumn(tmp, udf(*[F.col("`%s`" % c.replace("`", "``")) for c in names]))
            return scored.select(*keep, F.col(tmp + ".p").alias(out_col), F.col(tmp + ".e").alias(err_col))


        def _transform_jvm(self, df, path, mode, names, out_col, err_col, errors):
            from pyspark.sql import DataFrame
            if mode == "raw":
                raise ValueError('WispModel: engine="jvm" scores vector and ids columns; raw columns (%s) need '
                                 'engine="python"' % names)
            spark = df.sparkSession
            jvm = spark.sparkContext._jvm
            try:
                scorer = jvm.wisp.spark.WispScorer
                scorer.opens(path)
            except Exception as e:
                raise RuntimeError('WispModel: engine="jvm" needs wisp.jar and wisp-spark.jar in spark.jars '
                                   '(wisp.spark.WispScorer is not on the driver\'s class path): %s' % e)
            opts = jvm.java.util.HashMap()
            for k, v in (("valuesCol", names[1] if len(names) > 1 else ""), ("errorCol", err_col),
                         ("device", self.getOrDefault(self.device)), ("errors", errors),
                         ("batchRows", str(max(self.getOrDefault(self.batchRows), 0))),
                         ("ship", "true" if self.getOrDefault(self.shipModel) else "false")):
                opts.put(k, v)
            return DataFrame(scorer.transform(df._jdf, path, names[0], out_col, opts), spark)


def _make_udf(cfg, ncols):
    """The arrow_udf (iterator form) that scores cfg's columns; its body is the module's _run_udf,
    so the worker imports wisp.spark (and its cache) by reference."""
    from typing import Iterator, Tuple
    import pyarrow as pa
    from pyspark.sql.functions import arrow_udf

    if ncols == 1:
        def score(it: Iterator[pa.Array]) -> Iterator[pa.Array]:
            return _run_udf(cfg, it)
    else:
        def score(it: Iterator[Tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
            return _run_udf(cfg, it)
    return arrow_udf(score, "p float, e string")
