#!/usr/bin/env python3
"""tf_golden.py — golden vectors for wisp's feature columns, computed by a real TensorFlow.

Usage: spec/data/gen/tf_golden.py [--out spec/data]
Writes (small, committed; the specs read them, TensorFlow is not needed to test):
  tf_golden_fingerprint.json  Fingerprint64 of strings of every length 0..300 (random bytes,
                              UTF-8, NUL), recovered exactly from tf.strings.to_hash_bucket_fast;
                              sparse_cross_hashed of string and int64 inputs (num_buckets 0 = the
                              raw hash mod 2^63-1, and others), hash keys, the published vector.
                              One vector per line: the C test reads it line by line.
  tf_golden_columns.json      Cases: a column description, raw rows, and the ids (or values)
                              TensorFlow's tf.feature_column gives each column for each row.
Every fact listed under "TensorFlow facts" in engine/COLUMNS.md has a case here.
"""
import argparse
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [os.path.join(ROOT, "scripts", "tools"), os.path.join(ROOT, "scripts", "lib")]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.feature_column import feature_column_v2 as fc2  # noqa: E402

import tf_export  # noqa: E402

M63 = 2**63 - 1


def fingerprint64(b):
    """Fingerprint64(b) exactly, from two hash buckets: b mod (2^63-1) and mod 3 (CRT)."""
    a = int(tf.strings.to_hash_bucket_fast([b], M63).numpy()[0])
    r = int(tf.strings.to_hash_bucket_fast([b], 3).numpy()[0])
    for k in range(3):
        v = a + k * M63
        if v < 2**64 and v % 3 == r:
            return v
    raise AssertionError("no fingerprint for %r" % b)


def fingerprints(rng):
    out = []
    # every length up to 140 (each branch of farmhashna::Hash64 and its edges: 0, 1-3, 4-7,
    # 8-16, 17-32, 33-64, and 65+: one, two loop rounds), then longer ones
    for n in list(range(0, 141)) + list(range(150, 301, 13)):
        b = bytes(rng.randrange(256) for _ in range(n))
        out.append(b)
    out += [b"", b"a", b"ab", b"abc", b"Paris", "Zürich".encode(), "日本語のテキスト".encode(), b"\x00", b"a\x00b",
            b"68fd1e64", b"batch1-FC1-F1", b"-1", b"0", b"9223372036854775807", b"-9223372036854775808"]
    # every length again, printable, to catch fetch/endianness slips on text
    out += [("".join(rng.choice("0123456789abcdef") for _ in range(n))).encode() for n in range(0, 70, 3)]
    return [[b.hex(), str(fingerprint64(b))] for b in out]


def crosses(rng):
    """sparse_cross_hashed vectors: string and int64 inputs, one value per input."""
    vecs = []

    def run(vals, buckets, key):
        inputs = []
        for v in vals:
            if isinstance(v, bytes):
                inputs.append(tf.constant([[v]], dtype=tf.string))
            else:
                inputs.append(tf.constant([[v]], dtype=tf.int64))
        st = tf.sparse.cross_hashed(inputs, num_buckets=buckets, hash_key=key)
        res = st.values.numpy().tolist()
        assert len(res) == 1
        enc = [("s:" + v.hex()) if isinstance(v, bytes) else ("i:%d" % v) for v in vals]
        vecs.append([enc, buckets, str((key or 0) % 2**64), str(res[0])])

    run([b"batch1-FC1-F1", b"batch1-FC2-F1", b"batch1-FC3-F1"], 0, None)   # the published vector
    run([b"batch1-FC1-F1", b"batch1-FC2-F1", b"batch1-FC3-F1"], 100, None)
    for _ in range(40):
        k = rng.randrange(2, 5)
        vals = []
        for _ in range(k):
            if rng.random() < 0.5:
                vals.append(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 80))))
            else:
                vals.append(rng.choice([0, -1, 1, 7, -7, 2**40 + 3, -(2**62), 2**63 - 1, -(2**63), rng.randrange(-10**6, 10**6)]))
        buckets = rng.choice([0, 1, 2, 100, 1000003, 2**31 - 1, 10**12, 2**62 + 1])
        key = rng.choice([None, None, 1, 12345, 2**53 + 1, 2**63 - 25, -5, -(2**63)])
        run(vals, buckets, key)
    return vecs


# ---- feature-column cases ---------------------------------------------------------------

def spec(inputs, columns):
    s = {"format": "wisp-columns", "version": 1, "inputs": inputs, "columns": columns}
    tf_export.assign_offsets(s)
    return s


def _from_json(x):
    if isinstance(x, dict) and "hex" in x:
        return bytes.fromhex(x["hex"])
    if isinstance(x, dict) and "int" in x:
        return int(x["int"])
    return x


def to_tf_row(row):
    """Golden rows hold JSON: {"hex": ...} for raw bytes, {"int": "..."} for integers beyond 2^53."""
    out = {}
    for k, v in row.items():
        out[k] = [_from_json(x) for x in v] if isinstance(v, list) else _from_json(v)
    return out


def big_ints(rows):
    def enc(x):
        if isinstance(x, int) and not isinstance(x, bool) and abs(x) > 2**53:
            return {"int": str(x)}
        return x
    return [{k: ([enc(x) for x in v] if isinstance(v, list) else enc(v)) for k, v in r.items()} for r in rows]


def f32(x):
    x = float(np.float32(x))
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    return x


def run_case(name, s, rows, note):
    cols = tf_export.tf_columns(s)
    feats = tf_export.tf_features(s, [to_tf_row(r) for r in rows])
    cache = fc2.FeatureTransformationCache(feats)
    expect = {}
    for c, tc in zip(s["columns"], cols):
        if c["type"] == "numeric":
            v = tc.get_dense_tensor(cache, None).numpy().reshape(-1)
            expect[c["name"]] = [f32(x) for x in v]
            continue
        st = tc.get_sparse_tensors(cache, None).id_tensor
        per = [[] for _ in rows]
        for (r, _), v in zip(st.indices.numpy().tolist(), st.values.numpy().tolist()):
            per[r].append(int(v))
        expect[c["name"]] = per
    return {"name": name, "note": note, "description": json.dumps(s), "rows": big_ints(rows), "expect": expect}


def cases(rng):
    out = []
    hexes = ["68fd1e64", "80e26c9b", "fb936136", "7b4723c4", "25c83c98", "7e0ccccf", "de7995b8", "1f89b562"]

    # 1. hash buckets over dense strings: "" is missing, others hashed; several bucket counts
    rows = [{"s": h} for h in hexes] + [{"s": ""}, {}, {"s": "Zürich"}, {"s": {"hex": "ff00fe"}},
                                         {"s": "x" * 100}, {"s": "a\tb"}]
    out.append(run_case("hash_bucket_dense_string", spec(
        [{"name": "s", "dtype": "string"}],
        [{"name": "s", "type": "hash_bucket", "key": "s", "buckets": 1000},
         {"name": "s2", "type": "hash_bucket", "key": "s", "buckets": 2},
         {"name": "sbig", "type": "hash_bucket", "key": "s", "buckets": 2**31 - 1}]), rows,
        "dense string: '' dropped; bytes hashed as they are (non-UTF-8 included)"))
    # TF names: every column on key "s" would be called "s"; the names here are wisp's.

    # 2. hash buckets over dense int64: -1 is missing; integers hashed as decimal strings
    rows = [{"i": v} for v in [0, 1, -1, -2, 7, 123456789, 2**62, -(2**62), 2**63 - 1, -(2**63)]] + [{}]
    out.append(run_case("hash_bucket_dense_int64", spec(
        [{"name": "i", "dtype": "int64"}],
        [{"name": "i", "type": "hash_bucket", "key": "i", "buckets": 1000003}]), rows,
        "dense int64: -1 dropped; as_string then Fingerprint64"))

    # 3. sparse strings: any count per row, "" kept
    rows = [{"t": ["a", "b", "c"]}, {"t": []}, {}, {"t": [""]}, {"t": ["a", "a"]}, {"t": "solo"}]
    out.append(run_case("hash_bucket_sparse_string", spec(
        [{"name": "t", "dtype": "string", "sparse": True}],
        [{"name": "t", "type": "hash_bucket", "key": "t", "buckets": 97}]), rows,
        "sparse: every value hashed, '' included, duplicates kept"))

    # 4. vocabularies: string with OOV buckets, with default_value, int64 with OOV
    rows = [{"c": v, "k": k} for v, k in [("red", 1), ("green", 5), ("blue", 9), ("mauve", -1), ("", 42),
                                            ("Red", 0), ("teal", -7), ("green", 3)]] + [{}]
    out.append(run_case("vocabulary", spec(
        [{"name": "c", "dtype": "string"}, {"name": "k", "dtype": "int64"}],
        [{"name": "c_oov", "type": "vocabulary_list", "key": "c", "vocabulary": ["red", "green", "blue"],
          "num_oov_buckets": 5},
         {"name": "c_def", "type": "vocabulary_list", "key": "c", "vocabulary": ["red", "green", "blue"],
          "default_value": 2},
         {"name": "c_neg", "type": "vocabulary_list", "key": "c", "vocabulary": ["red", "green", "blue"]},
         {"name": "k_oov", "type": "vocabulary_list", "key": "k", "vocabulary": [1, 3, 5, 9],
          "num_oov_buckets": 3}]), rows,
        "OOV: size + Fingerprint64 % k (ints as decimal strings); default_value; -1 kept as an id"))

    # 5. identity with a default
    rows = [{"u": v} for v in [0, 3, 9, 10, -5, -1, 1000]] + [{}]
    out.append(run_case("identity", spec(
        [{"name": "u", "dtype": "int64"}],
        [{"name": "u", "type": "identity", "key": "u", "buckets": 10, "default_value": 7}]), rows,
        "identity: in range kept, out of range -> default_value, dense -1 dropped"))

    # 6. bucketized and numeric with normalizers; boundaries rounded to float32; NaN, inf
    bnd = [-1.0, 0.0, 0.1, 0.5, 1.0, 2.5, 1e6]
    vals = [-2.0, -1.0, -0.5, 0.0, -0.0, float(np.float32(0.1)), 0.1000000015, 0.3, 0.5, 0.99999994, 1.0, 2.5, 3.0, 1e6,
            1e7, "inf", "-inf", "nan"]
    rows = [{"x": f32(v)} for v in vals]
    out.append(run_case("bucketized", spec(
        [{"name": "x", "dtype": "float32", "default": 0.25}],
        [{"name": "x_bucketized", "type": "bucketized",
          "source": {"type": "numeric", "key": "x"}, "boundaries": bnd},
         {"name": "x_std_bucketized", "type": "bucketized",
          "source": {"type": "numeric", "key": "x", "normalizer": {"type": "standard", "mean": 0.3, "std": 0.7}},
          "boundaries": [-1.0, 0.0, 1.0 / 3.0, 1.0]}]), rows + [{}],
        "upper_bound over float32 boundaries: left edge included; NaN and +inf last, -inf first"))

    rows = [{"x": f32(v)} for v in [0.0, 1.0, -3.25, 0.1, 1234.5678, 3.0e-5, -1e10, 7.0]] + [{}]
    out.append(run_case("numeric", spec(
        [{"name": "x", "dtype": "float32", "default": -2.5}],
        [{"name": "x", "type": "numeric", "key": "x"},
         {"name": "x_std", "type": "numeric", "key": "x", "normalizer": {"type": "standard", "mean": 0.3, "std": 0.7}},
         {"name": "x_aff", "type": "numeric", "key": "x", "normalizer": {"type": "affine", "scale": 0.1, "shift": -1.1}}]),
        rows, "float32 arithmetic: (x - mean) / std, x * scale + shift; missing -> the input's default"))

    # 7. crosses: dense raw strings ("" hashed), order, sparse-first reordering, ints, floats, nesting
    rows = [{"a": a, "b": b, "i": i, "f": f, "x": x}
            for a, b, i, f, x in [("x", "p", 3, 2.75, 0.5), ("", "q", -1, -2.75, 3.0), ("y", "", 5, 0.0, -1.0),
                                  ("", "", 0, 1e3, 7.5), ("Zürich", "p", 2**40, -0.5, 2.0)]] + [{}]
    bk = {"type": "bucketized", "source": {"type": "numeric", "key": "x"}, "boundaries": [0.0, 1.0, 5.0]}
    voc = {"type": "vocabulary_list", "key": "a", "vocabulary": ["x", "y"]}
    ident = {"type": "identity", "key": "i", "buckets": 10, "default_value": 0}
    out.append(run_case("crossed", spec(
        [{"name": "a", "dtype": "string"}, {"name": "b", "dtype": "string"}, {"name": "i", "dtype": "int64"},
         {"name": "f", "dtype": "float32", "default": 0.0}, {"name": "x", "dtype": "float32", "default": 0.0}],
        [{"name": "a_X_b", "type": "crossed", "keys": ["a", "b"], "buckets": 1000},
         {"name": "b_X_a", "type": "crossed", "keys": ["b", "a"], "buckets": 1000},
         {"name": "a_X_x_bk", "type": "crossed", "keys": ["a", bk], "buckets": 1000},
         {"name": "x_bk_X_a", "type": "crossed", "keys": [bk, "a"], "buckets": 1000},
         {"name": "i_X_a", "type": "crossed", "keys": ["i", "a"], "buckets": 10**8},
         {"name": "a_X_f", "type": "crossed", "keys": ["a", "f"], "buckets": 1000},
         {"name": "voc_X_b", "type": "crossed", "keys": [voc, "b"], "buckets": 1000},
         {"name": "ident_X_bk", "type": "crossed", "keys": [ident, bk], "buckets": 1000},
         {"name": "nested", "type": "crossed", "keys": [{"type": "crossed", "keys": ["a", "b"], "buckets": 5},
                                                         "i", bk], "buckets": 100000},
         {"name": "a_X_b_key", "type": "crossed", "keys": ["a", "b"], "buckets": 1000, "hash_key": 12345},
         {"name": "a_X_b_key0", "type": "crossed", "keys": ["a", "b"], "buckets": 1000, "hash_key": 0},
         {"name": "a_X_b_X_i", "type": "crossed", "keys": ["a", "b", "i"], "buckets": 2**31 - 1}]), rows,
        "dense raw keys drop nothing ('' and -1 are hashed); sparse keys (columns) go first; floats truncate to int64; "
        "vocabulary -1 is crossed; nested crosses flatten; hash_key 0 = default"))

    # 8. crosses with sparse multivalent inputs: one id per combination, empty -> none
    rows = [{"t": ["a", "b"], "u": ["p", "q", "r"], "d": "z"}, {"t": [], "u": ["p"], "d": "z"},
            {"t": ["a"], "u": ["p"]}, {"t": ["a", "a"], "u": ["q"], "d": ""}, {"u": ["p"]}]
    out.append(run_case("crossed_sparse", spec(
        [{"name": "t", "dtype": "string", "sparse": True}, {"name": "u", "dtype": "string", "sparse": True},
         {"name": "d", "dtype": "string"}],
        [{"name": "t_X_u", "type": "crossed", "keys": ["t", "u"], "buckets": 10007},
         {"name": "d_X_t", "type": "crossed", "keys": ["d", "t"], "buckets": 10007},
         {"name": "t_X_u_X_d", "type": "crossed", "keys": ["t", "u", "d"], "buckets": 10007}]), rows,
        "product of the keys' values; a sparse raw key goes before a dense one"))

    # 9. random Criteo-like rows through hashed, bucketized and crossed columns
    rows = []
    for _ in range(64):
        r = {}
        for k in range(1, 4):
            if rng.random() < 0.85:
                r["I%d" % k] = f32(round(rng.lognormvariate(1, 2)) if rng.random() < 0.7 else rng.uniform(-5, 50))
        for k in range(1, 5):
            if rng.random() < 0.9:
                r["C%d" % k] = "%08x" % rng.getrandbits(32)
            elif rng.random() < 0.5:
                r["C%d" % k] = ""
        rows.append(r)
    inputs = [{"name": "I%d" % k, "dtype": "float32", "default": 0.0} for k in range(1, 4)] + \
             [{"name": "C%d" % k, "dtype": "string"} for k in range(1, 5)]
    cols = []
    for k in range(1, 4):
        cols.append({"name": "I%d" % k, "type": "numeric", "key": "I%d" % k,
                     "normalizer": {"type": "standard", "mean": 3.5, "std": 12.25}})
        cols.append({"name": "I%d_bucketized" % k, "type": "bucketized", "source": {"type": "numeric", "key": "I%d" % k},
                     "boundaries": [0, 1, 2, 4, 8, 16, 32, 64, 128]})
    for k in range(1, 5):
        cols.append({"name": "C%d" % k, "type": "hash_bucket", "key": "C%d" % k, "buckets": 100000})
    cols.append({"name": "C1_X_C2", "type": "crossed", "keys": ["C1", "C2"], "buckets": 1000000})
    cols.append({"name": "C3_X_I1_bucketized", "type": "crossed",
                 "keys": ["C3", {"type": "bucketized", "source": {"type": "numeric", "key": "I1"},
                                 "boundaries": [0, 1, 2, 4, 8, 16, 32, 64, 128]}], "buckets": 1000000})
    out.append(run_case("criteo_like", spec(inputs, cols), rows, "random rows, Criteo-like columns"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "spec", "data"))
    ap.add_argument("--seed", type=int, default=20261129)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    header = {"generator": "spec/data/gen/tf_golden.py --seed %d" % a.seed, "tensorflow": tf.__version__}
    fp = fingerprints(rng)
    cr = crosses(rng)
    path = os.path.join(a.out, "tf_golden_fingerprint.json")
    with open(path, "w") as f:
        f.write("{\"generator\": %s, \"tensorflow\": %s,\n" % (json.dumps(header["generator"]), json.dumps(tf.__version__)))
        f.write("\"fingerprint64\": [\n")
        f.write(",\n".join(json.dumps(v) for v in fp))
        f.write("\n],\n\"cross\": [\n")
        f.write(",\n".join(json.dumps(v) for v in cr))
        f.write("\n]}\n")
    print("tf_golden: %s: %d fingerprints, %d crosses" % (path, len(fp), len(cr)))
    cs = cases(rng)
    path = os.path.join(a.out, "tf_golden_columns.json")
    with open(path, "w") as f:
        json.dump(dict(header, cases=cs), f, indent=None, separators=(",", ":"), ensure_ascii=True)
        f.write("\n")
    print("tf_golden: %s: %d cases" % (path, len(cs)))


if __name__ == "__main__":
    main()
