"""_raw.py — raw rows for models with feature columns: pandas DataFrames, pyarrow Tables/RecordBatches and dicts of columns
turned into the sources _wisp_raw.c reads (numpy buffers and Arrow buffers in place, other sequences element by element).

Which input a column feeds: its name. Columns that are not inputs of the
model's description (a label) are skipped, as `wisp score` skips such
fields. An input that X does not hold: a sparse input has no values; a
dense input takes its default ("" for strings, -1 for int64 when the
description gives none); a dense float32 input without a default is
refused (ValueError naming it), since every row would be bad.

Missing values: an Arrow null; None in a list or an object column; in a
pandas DataFrame, whatever pandas calls missing (NaN, None, NA, NaT:
read_csv's empty fields), exactly as an empty CSV field is missing for
`wisp score`. In a dict of numpy arrays NaN is a value (numpy has no
missing marker): a numeric column then makes the row bad, as "nan" in a CSV.
"""
import numpy as np

_NUM_KINDS = "iufb"


def is_raw(X):
    """Whether X is one of the raw-row forms (a dict, a DataFrame, an Arrow Table/RecordBatch)."""
    if isinstance(X, dict):
        return True
    mod = type(X).__module__ or ""
    if mod.startswith("pandas") and type(X).__name__ == "DataFrame":
        return True
    return mod.startswith("pyarrow") and type(X).__name__ in ("Table", "RecordBatch")


def inputs_of(columns):
    """[(name, dtype, sparse, has_default)] of a parsed description, in the description's input order."""
    out = []
    for inp in columns.get("inputs", []) if isinstance(columns, dict) else []:
        dtype = inp.get("dtype", "float32")
        has_default = inp.get("default") is not None or dtype in ("string", "int64")
        out.append((inp["name"], dtype, bool(inp.get("sparse", False)), has_default))
    return out


def _arrow_source(arr, name, dtype):
    import pyarrow as pa
    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    t = arr.type
    if pa.types.is_dictionary(t):                       # pandas categoricals: decoded (a copy)
        chunks = [c.dictionary_decode() for c in chunks]
        t = t.value_type
    if pa.types.is_float16(t):
        chunks, t = [c.cast(pa.float32()) for c in chunks], pa.float32()
    elif hasattr(pa.types, "is_string_view") and (pa.types.is_string_view(t) or pa.types.is_binary_view(t)):
        chunks, t = [c.cast(pa.large_binary()) for c in chunks], pa.large_binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return ("seq", [v for c in chunks for v in c.to_pylist()])      # a sparse input's lists
    if pa.types.is_null(t):
        code = "n"
    elif pa.types.is_boolean(t):
        code = "b"
    elif pa.types.is_integer(t):
        code = ("i" if pa.types.is_signed_integer(t) else "u") + str(t.bit_width // 8)
    elif pa.types.is_floating(t):
        code = "f" + str(t.bit_width // 8)
    elif pa.types.is_string(t) or pa.types.is_binary(t):
        code = "s4"
    elif pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        code = "s8"
    else:
        raise TypeError("column %r: Arrow type %s is not an input wisp reads (numbers, bool, strings, "
                        "binary, dictionaries of those, lists for sparse inputs)" % (name, t))
    if code != "n" and (code[0] == "s") != (dtype == "string"):
        raise TypeError("column %r: the model's input is %s, the Arrow column is %s" % (name, dtype, t))
    out = []
    for c in chunks:
        bufs = c.buffers()
        out.append((len(c), c.offset, bufs[0], bufs[1] if code != "n" else None,
                    bufs[2] if code[0] == "s" else None))
    return ("arrow", code, out)


def _numpy_source(a, name, dtype, mask=None):
    if a.ndim != 1:
        raise ValueError("column %r: a %d-D array; a column is 1-D (one value per row)" % (name, a.ndim))
    if a.dtype.kind in _NUM_KINDS:
        if dtype == "string":
            raise TypeError("column %r: the model's input is string, the column holds %s" % (name, a.dtype))
        if not a.dtype.isnative or a.dtype.char == "e":
            a = a.astype(np.float32 if a.dtype.kind == "f" else np.int64)
        return ("buf", np.ascontiguousarray(a), mask)
    if a.dtype.kind in "USO":
        if mask is not None:
            a = a.astype(object)
            a[mask.astype(bool)] = None
        return ("seq", a.tolist() if a.dtype.kind != "O" else a)
    raise TypeError("column %r: arrays of %s are not inputs wisp reads" % (name, a.dtype))


def _pandas_source(s, name, dtype):
    if isinstance(s.dtype, np.dtype):
        a = s.to_numpy()
        mask = None
        if a.dtype.kind in "fO" and s.hasnans:
            mask = np.ascontiguousarray(s.isna().to_numpy(), dtype=np.uint8)
        return _numpy_source(a, name, dtype, mask)
    try:                                                # extension dtypes: Arrow-backed, nullable, categorical
        import pyarrow as pa
        return _arrow_source(pa.array(s, from_pandas=True), name, dtype)
    except ImportError:
        return ("seq", s.to_numpy(dtype=object, na_value=None))


def sources(X, columns):
    """(cols, rows): cols [(input index, source)] for Session.score_raw, rows the row count."""
    inputs = inputs_of(columns)
    kind = "dict" if isinstance(X, dict) else ("pandas" if type(X).__module__.startswith("pandas") else "arrow")
    if kind == "dict":
        names = X
        get = X.__getitem__
    elif kind == "pandas":
        names = set(X.columns)
        get = X.__getitem__
    else:
        names = set(X.schema.names)
        get = X.column
    cols, rows = [], None
    for i, (name, dtype, sparse, has_default) in enumerate(inputs):
        if name not in names:
            if not sparse and not has_default:
                raise ValueError("X has no column %r: a dense %s input of the model's description without a "
                                 "default (every row would be bad)" % (name, dtype))
            continue
        v = get(name)
        mod = type(v).__module__ or ""
        if mod.startswith("pyarrow"):
            src = _arrow_source(v, name, dtype)
        elif mod.startswith("pandas"):
            src = _pandas_source(v, name, dtype)
        elif isinstance(v, np.ndarray):
            src = _numpy_source(v, name, dtype)
        elif isinstance(v, (list, tuple)):
            src = ("seq", v)
        elif isinstance(v, (str, bytes)) or not hasattr(v, "__len__"):
            raise TypeError("column %r: a column is a sequence of values (one per row), not %s" % (name, type(v).__name__))
        else:
            src = _numpy_source(np.asarray(v), name, dtype)
        n = len(v)
        if rows is None:
            rows = n
        elif n != rows:
            raise ValueError("column %r has %d values, an earlier column %d" % (name, n, rows))
        cols.append((i, src))
    if rows is None:
        if kind == "pandas" or kind == "arrow":
            rows = len(X)
        else:
            lens = {len(v) for v in X.values() if hasattr(v, "__len__")}
            rows = lens.pop() if len(lens) == 1 else 0
    return cols, rows
