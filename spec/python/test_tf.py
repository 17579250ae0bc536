"""test_tf.py — wisp.from_tensorflow without TensorFlow: the description it writes from feature-column objects, the weight
slices it reads from a mapping of variable names and from a Keras-shaped model, the scores against a float64 reference,
and every refusal; the parity with TensorFlow itself is spec/interop/tf_parity.py (make test-interop), run here only
when TensorFlow is importable.

The columns are stand-ins with TensorFlow's class names and fields (what from_tensorflow reads: it never asks
TensorFlow about a column). They cover the columns whose semantics fit in a line of numpy (numeric with its
normalizer, bucketized, vocabulary_list, identity, indicator); hashing and crossing are checked against TensorFlow by
the parity script and by the golden vectors of spec/c/test_columns.c.
"""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import wisp
from wisp import _tf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fc(kind, **fields):
    """A stand-in feature column: an object of class `kind` with these fields."""
    return _with(type(kind, (), {})(), fields)


def _with(o, fields):
    for k, v in fields.items():
        setattr(o, k, v)
    return o


def numeric(key, default_value=None, normalizer_fn=None, dtype="float32", shape=(1,)):
    return fc("NumericColumn", key=key, shape=shape, default_value=default_value, dtype=dtype,
              normalizer_fn=normalizer_fn)


def bucketized(src, boundaries):
    return fc("BucketizedColumn", source_column=src, boundaries=tuple(boundaries))


def vocab(key, words, dtype="string", default_value=-1, num_oov_buckets=0):
    return fc("VocabularyListCategoricalColumn", key=key, vocabulary_list=tuple(words), dtype=dtype,
              default_value=default_value, num_oov_buckets=num_oov_buckets)


def identity(key, n, default_value=None):
    return fc("IdentityCategoricalColumn", key=key, number_buckets=n, default_value=default_value)


def hashed(key, n, dtype="string"):
    return fc("HashedCategoricalColumn", key=key, hash_bucket_size=n, dtype=dtype)


def crossed(keys, n, hash_key=None):
    return fc("CrossedColumn", keys=tuple(keys), hash_bucket_size=n, hash_key=hash_key)


def indicator(c):
    return fc("IndicatorColumn", categorical_column=c)


BOUNDS = [18.0, 30.0, 50.0]
STD = {"type": "standard", "mean": 40.0, "std": 12.5}


def columns():
    return [numeric("age", 35.0, lambda x: (x - 40.0) / 12.5),
            bucketized(numeric("age", 35.0), BOUNDS),
            vocab("device", ["ios", "android", "web"], num_oov_buckets=0),
            identity("hour", 24, default_value=0),
            indicator(identity("dow", 7)),
            numeric("clicks", dtype="int64")]


def weights(rng, prefix="linear_model/"):
    sizes = {"age": 1, "age_bucketized": 4, "device": 3, "hour": 24, "dow_indicator": 7, "clicks": 1}
    w = {prefix + n + "/weights": rng.normal(0, 0.5, (s, 1)).astype(np.float32) for n, s in sizes.items()}
    w[prefix + "bias_weights"] = np.array([-0.3], np.float32)
    return w


def reference(w, rows, prefix="linear_model/"):
    """float64 probabilities from the TensorFlow rules of engine/COLUMNS.md for these columns."""
    g = lambda n: w[prefix + n + "/weights"][:, 0].astype(np.float64)  # noqa: E731
    out = []
    for r in rows:
        age = np.float32(r.get("age") if r.get("age") is not None else 35.0)
        z = float(w[prefix + "bias_weights"][0])
        z += g("age")[0] * float((age - np.float32(40.0)) / np.float32(12.5))
        z += g("age_bucketized")[int(np.searchsorted(np.array(BOUNDS, np.float32), age, side="right"))]
        d = r.get("device")
        if d in ("ios", "android", "web"):
            z += g("device")[["ios", "android", "web"].index(d)]
        h = r.get("hour")
        if h is not None and h != -1:
            z += g("hour")[h if 0 <= h < 24 else 0]
        if r.get("dow") is not None and r["dow"] != -1:
            z += g("dow_indicator")[r["dow"]]
        z += g("clicks")[0] * float(np.float32(r["clicks"]))
        out.append(1.0 / (1.0 + math.exp(-z)))
    return np.array(out)


def random_rows(rng, n):
    rows = []
    for _ in range(n):
        r = {"clicks": int(rng.integers(-20, 20))}
        if rng.random() < 0.8:
            b = np.float32(rng.choice(BOUNDS))
            r["age"] = float(rng.choice([b, np.nextafter(b, np.float32(-1e9)), np.nextafter(b, np.float32(1e9)),
                                         np.float32(rng.normal(40, 15))]))
        if rng.random() < 0.8:
            r["device"] = str(rng.choice(["ios", "android", "web", "tv", "", "IOS"]))
        if rng.random() < 0.8:
            r["hour"] = int(rng.choice([0, 5, 23, 24, 99, -1]))
        if rng.random() < 0.8:
            r["dow"] = int(rng.integers(0, 7))
        rows.append(r)
    return rows


def as_columns(rows):
    return {k: [r.get(k) for r in rows] for k in ("age", "device", "hour", "dow", "clicks")}


# ---- the description --------------------------------------------------------------------------

def test_description_written_from_the_columns():
    hk = (1 << 63) + 5
    spec, slices = _tf.describe(
        columns() + [hashed("zip", 100, dtype="int64"), crossed(["city", vocab("device", ["ios"])], 50),
                     crossed([bucketized(numeric("age", 35.0), BOUNDS), "zip"], 30, hash_key=hk)],
        inputs={"city": {"dtype": "string", "sparse": True}}, normalizers={"age": STD})
    assert [c["name"] for c in spec["columns"]] == ["age", "age_bucketized", "device", "hour", "dow_indicator",
                                                     "clicks", "zip", "city_X_device", "age_bucketized_X_zip"]
    assert slices == [("age", 0, 1), ("age_bucketized", 1, 4), ("device", 5, 3), ("hour", 8, 24),
                      ("dow_indicator", 32, 7), ("clicks", 39, 1), ("zip", 40, 100), ("city_X_device", 140, 50),
                      ("age_bucketized_X_zip", 190, 30)]
    assert spec["num_features"] == 220
    assert spec["inputs"] == [{"name": "age", "dtype": "float32", "default": 35.0},
                              {"name": "device", "dtype": "string"}, {"name": "hour", "dtype": "int64"},
                              {"name": "dow", "dtype": "int64"}, {"name": "clicks", "dtype": "int64"},
                              {"name": "zip", "dtype": "int64"}, {"name": "city", "dtype": "string", "sparse": True}]
    c = {x["name"]: x for x in spec["columns"]}
    assert c["age"]["normalizer"] == STD and "normalizer" not in c["age_bucketized"]["source"]
    assert c["age_bucketized"]["boundaries"] == BOUNDS
    assert c["hour"] == {"name": "hour", "type": "identity", "key": "hour", "buckets": 24, "default_value": 0,
                         "offset": 8, "size": 24}
    assert c["dow_indicator"]["type"] == "identity" and "default_value" not in c["dow_indicator"]
    assert c["city_X_device"]["keys"][0] == "city" and c["city_X_device"]["keys"][1]["type"] == "vocabulary_list"
    assert "hash_key" not in c["city_X_device"] and c["age_bucketized_X_zip"]["hash_key"] == "0x%x" % hk
    assert c["zip"]["type"] == "hash_bucket" and c["device"]["vocabulary"] == ["ios", "android", "web"]


def test_imported_model_scores_as_the_reference(tmp_path, cli):
    rng = np.random.default_rng(3)
    w = weights(rng)
    m = wisp.from_tensorflow(columns(), w, str(tmp_path / "m.wisp"), normalizers={"age": STD})
    assert m.meta["source"] == "tensorflow" and m.meta["exporter"] == "wisp.from_tensorflow"
    assert m.num_features == 40 and m.bias == pytest.approx(-0.3)
    rows = random_rows(rng, 800)
    ref = reference(w, rows)
    got = m.score(as_columns(rows), device="cpu", errors="raise")
    assert np.max(np.abs(got - ref)) < 1e-6
    text = "".join(json.dumps(r) + "\n" for r in rows)
    out = subprocess.run([cli, "score", "-m", str(tmp_path / "m.wisp"), "-f", "jsonl", "-d", "cpu"],
                         input=text.encode(), capture_output=True, check=True).stdout.split()
    assert np.max(np.abs(np.array([float(x) for x in out]) - ref)) < 1e-6


def test_estimator_scope_and_partitioned_variables(tmp_path):
    rng = np.random.default_rng(4)
    w = weights(rng, "linear/linear_model/")
    hv = w.pop("linear/linear_model/hour/weights")
    w["linear/linear_model/hour/weights/part_0"], w["linear/linear_model/hour/weights/part_1"] = hv[:10], hv[10:]
    m = wisp.from_tensorflow(columns(), w, str(tmp_path / "e.wisp"), normalizers={"age": STD})
    rows = random_rows(rng, 200)
    assert np.max(np.abs(m.score(as_columns(rows), device="cpu") - reference({**w, "linear/linear_model/hour/weights": hv},
                                                                           rows, "linear/linear_model/"))) < 1e-6
    w2 = {k.replace("linear/linear_model/", "scope/"): v for k, v in w.items()}
    wisp.from_tensorflow(columns(), w2, str(tmp_path / "s.wisp"), normalizers={"age": STD}, prefix="scope")


# ---- a Keras-shaped model: inputs -> DenseFeatures -> Dense(1) ---------------------------------

class Dense:          # what from_tensorflow reads of a Keras Dense layer
    def __init__(self, kernel, bias, activation="sigmoid", use_bias=True):
        self.kernel, self.b, self.activation, self.use_bias = kernel, bias, activation, use_bias
        self.input = self.output = None

    def get_config(self):
        return {"activation": self.activation}

    def get_weights(self):
        return [self.kernel, self.b] if self.use_bias else [self.kernel]


class FakeTensor:
    def __init__(self, name, dtype, shape=(None, 1), spec="TensorSpec"):
        self.name, self.dtype, self.shape = name, dtype, shape
        self.type_spec = type(spec, (), {})()


def keras_model(cols, kernel, bias, extra_layers=(), activation="sigmoid", inputs=None):
    DenseFeatures = type("DenseFeatures", (), {})
    df = DenseFeatures()
    df._feature_columns = cols
    df.output = "features"
    d = Dense(kernel, bias, activation)
    d.input = "features"
    m = type("Functional", (), {})()
    m.layers = [type("InputLayer", (), {})(), df, d] + list(extra_layers)
    m.get_weights = lambda: []
    m.input = inputs if inputs is not None else {
        "age": FakeTensor("age", "float32"), "device": FakeTensor("device", "string"),
        "hour": FakeTensor("hour", "int64"), "dow": FakeTensor("dow", "int64"), "clicks": FakeTensor("clicks", "int64")}
    return m


def keras_columns():
    c = columns()
    return [c[0], c[1], indicator(c[2]), indicator(c[3]), c[4], c[5]]


def test_keras_kernel_rows_are_sorted_by_column_name(tmp_path):
    rng = np.random.default_rng(5)
    w = weights(rng)
    cols = keras_columns()
    # DenseFeatures' order: age, age_bucketized, clicks, device_indicator, dow_indicator, hour_indicator
    order = [("age", "age"), ("age_bucketized", "age_bucketized"), ("clicks", "clicks"), ("device_indicator", "device"),
             ("dow_indicator", "dow_indicator"), ("hour_indicator", "hour")]
    kernel = np.concatenate([w["linear_model/%s/weights" % n] for _, n in order])
    model = keras_model(cols, kernel, w["linear_model/bias_weights"])
    m = wisp.from_tensorflow(None, model, str(tmp_path / "k.wisp"), normalizers={"age": STD})
    assert m.meta["source"] == "tensorflow-keras"
    assert [c["name"] for c in m.columns["columns"]] == ["age", "age_bucketized", "device_indicator", "hour_indicator",
                                                         "dow_indicator", "clicks"]
    rows = random_rows(rng, 500)
    assert np.max(np.abs(m.score(as_columns(rows), device="cpu") - reference(w, rows))) < 1e-6
    # the same model given as (model, None), and its columns given explicitly
    wisp.from_tensorflow(model, None, str(tmp_path / "k2.wisp"), normalizers={"age": STD})
    wisp.from_tensorflow(keras_columns(), model, str(tmp_path / "k3.wisp"), normalizers={"age": STD})
    # tf_keras' premade LinearModel in place of Dense: [kernel, bias], its activation serialized
    lm = type("LinearModel", (Dense,), {"get_config": lambda self: {"activation": {"class_name": "function",
                                                                                 "config": {"name": "sigmoid"}}}})
    model.layers[2] = lm(kernel, w["linear_model/bias_weights"])
    model.layers[2].input = "features"
    m = wisp.from_tensorflow(None, model, str(tmp_path / "lm.wisp"), normalizers={"age": STD})
    assert np.max(np.abs(m.score(as_columns(rows), device="cpu") - reference(w, rows))) < 1e-6
    model.layers[2] = lm(kernel, w["linear_model/bias_weights"])
    model.layers[2].input = "features"
    model.layers[2].get_weights = lambda: [kernel, kernel, kernel]
    with pytest.raises(ValueError, match="3 weight arrays"):
        wisp.from_tensorflow(None, model, str(tmp_path / "lm3.wisp"), normalizers={"age": STD})
    model.layers[2] = Dense(kernel, w["linear_model/bias_weights"])
    model.layers[2].input = "features"
    # a sparse Input makes a sparse input; a ragged one is refused
    model.input["device"] = FakeTensor("device", "string", (None, None), "SparseTensorSpec")
    m = wisp.from_tensorflow(None, model, str(tmp_path / "k4.wisp"), normalizers={"age": STD})
    assert {"name": "device", "dtype": "string", "sparse": True} in m.columns["inputs"]
    with pytest.raises(ValueError, match="the Keras model's input is sparse"):
        wisp.from_tensorflow(None, model, str(tmp_path / "k6.wisp"), normalizers={"age": STD},
                             inputs={"device": {"sparse": False}})
    model.input["device"] = FakeTensor("device", "string", (None, None), "RaggedTensorSpec")
    with pytest.raises(ValueError, match="ragged"):
        wisp.from_tensorflow(None, model, str(tmp_path / "k5.wisp"), normalizers={"age": STD})


@pytest.mark.parametrize("case,match", [
    ("hidden", "layers are"), ("relu", "activation is 'relu'"), ("two_logits", "one logit"),
    ("short_kernel", "Dense kernel has"), ("embedding", "embedding"), ("other_columns", "columns are"),
    ("wide_input", "values a row")])
def test_keras_refusals(tmp_path, case, match):
    rng = np.random.default_rng(6)
    cols = keras_columns()
    kernel = rng.normal(size=(40, 1)).astype(np.float32)
    bias = np.zeros(1, np.float32)
    kw, given = {}, None
    if case == "hidden":
        kw["extra_layers"] = [Dense(kernel, bias)]
    elif case == "relu":
        kw["activation"] = "relu"
    elif case == "two_logits":
        kernel = np.zeros((40, 2), np.float32)
    elif case == "short_kernel":
        kernel = kernel[:39]
    elif case == "embedding":
        cols = cols + [fc("EmbeddingColumn", categorical_column=vocab("x", ["a"]), dimension=4, combiner="mean",
                          name="x_embedding")]
    elif case == "other_columns":
        given = keras_columns()[:-1]
    model = keras_model(cols, kernel, bias, **kw)
    if case == "wide_input":
        model.input["age"] = FakeTensor("age", "float32", (None, 3))
    with pytest.raises(ValueError, match=match):
        wisp.from_tensorflow(given, model, str(tmp_path / "r.wisp"), normalizers={"age": STD})
    assert not os.path.exists(tmp_path / "r.wisp")


# ---- refusals ---------------------------------------------------------------------------------

REFUSED = {
    "embedding": ([fc("EmbeddingColumn", categorical_column=vocab("d", ["a"]), dimension=4, combiner="mean")],
                  "learned vector"),
    "shared_embedding": ([fc("SharedEmbeddingColumn", categorical_column=vocab("d", ["a"]))], "shared embedding"),
    "weighted": ([fc("WeightedCategoricalColumn", categorical_column=vocab("d", ["a"]), weight_feature_key="w",
                     dtype="float32")], "per-id weights"),
    "vocab_file": ([fc("VocabularyFileCategoricalColumn", key="d", vocabulary_file="/v.txt", vocabulary_size=3,
                       num_oov_buckets=0, default_value=-1, dtype="string")], "vocabulary_list"),
    "sequence": ([fc("SequenceCategoricalColumn", categorical_column=vocab("d", ["a"]))], "sequence"),
    "unknown": ([fc("MysteryColumn", key="x")], "does not import"),
    "string": (["age"], "feature name, not a feature column"),
    "float64": ([numeric("x", dtype="float64")], "float64"),
    "shape": ([numeric("x", shape=(2,))], "shape"),
    "int_normalized": ([numeric("x", dtype="int64", normalizer_fn=lambda x: x * 2)], "normalizes float32"),
    "duplicate_boundaries": ([bucketized(numeric("x"), [1.0, 1.0, 2.0])], "repeat"),
    "nan_boundary": ([bucketized(numeric("x"), [1.0, float("nan")])], "finite"),
    "hash_in_cross": ([crossed([hashed("a", 10), "b"], 10)], "TensorFlow refuses"),
    "embedding_in_cross": ([crossed([fc("EmbeddingColumn", categorical_column=vocab("d", ["a"])), "b"], 10)],
                           "a key of a crossed column"),
    "raw_key_type": ([crossed(["a", "b"], 10)], "type is unknown"),
    "type_conflict": ([numeric("a"), hashed("a", 10)], "one input has one type"),
    "default_conflict": ([numeric("a", 1.0), bucketized(numeric("a", 2.0), [0.0])], "default"),
    "two_names": ([hashed("a", 10), vocab("a", ["x"])], "two columns are named"),
    "name_check": ([_with(hashed("a", 10), {"name": "b"})], "computes the name"),
    "oov_and_default": ([vocab("a", ["x"], num_oov_buckets=2, default_value=0)], "both num_oov_buckets"),
    "float_vocab": ([vocab("a", [1.5, 2.5], dtype="float32")], "string or integer"),
    "one_key_cross": ([crossed(["a"], 10)], "2 or more"),
    "weighted_indicator": ([indicator(fc("WeightedCategoricalColumn", categorical_column=vocab("d", ["a"])))],
                           "inside indicator_column"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_columns_refused_with_a_reason(tmp_path, case):
    cols, match = REFUSED[case]
    with pytest.raises(ValueError, match=match):
        wisp.from_tensorflow(cols, {"linear_model/bias_weights": np.zeros(1, np.float32)}, str(tmp_path / "x.wisp"))
    assert not os.listdir(tmp_path)


def test_normalizers(tmp_path):
    cols = [numeric("age", 35.0, lambda x: (x - 40.0) / 12.5)]
    w = {"linear_model/age/weights": np.ones((1, 1), np.float32), "linear_model/bias_weights": np.zeros(1, np.float32)}
    p = str(tmp_path / "n.wisp")
    with pytest.raises(ValueError, match="Python code wisp cannot read"):
        wisp.from_tensorflow(cols, w, p)
    with pytest.raises(ValueError, match=r"is not normalizers\['age'\]"):
        wisp.from_tensorflow(cols, w, p, normalizers={"age": {"type": "standard", "mean": 40.0, "std": 12.6}})
    with pytest.raises(ValueError, match="is not normalizers"):       # x * (1/12.5) is not x / 12.5 in float32
        wisp.from_tensorflow([numeric("age", 35.0, lambda x: (x - np.float32(40)) * np.float32(0.08))], w, p,
                             normalizers={"age": STD})
    with pytest.raises(ValueError, match="exactly the keys"):
        wisp.from_tensorflow(cols, w, p, normalizers={"age": {"type": "standard", "mean": 40.0}})
    with pytest.raises(ValueError, match="finite number"):
        wisp.from_tensorflow(cols, w, p, normalizers={"age": {"type": "standard", "mean": float("inf"), "std": 1}})
    with pytest.raises(ValueError, match="no numeric column"):
        wisp.from_tensorflow(cols, w, p, normalizers={"age": STD, "other": STD})
    assert not os.listdir(tmp_path)
    m = wisp.from_tensorflow([numeric("age", 0.0, lambda x: x * 0.001 + -0.5)], w, p,
                             normalizers={"age": {"type": "affine", "scale": 0.001, "shift": -0.5}})
    x = np.array([0.0, 1.0, 12345.678, -3.25], np.float32)
    ref = 1 / (1 + np.exp(-(x * np.float32(0.001) + np.float32(-0.5)).astype(np.float64)))
    assert np.max(np.abs(m.score({"age": x}, device="cpu") - ref)) < 1e-6
    # a saved model's column keeps only the function's name: the declaration is taken as given
    wisp.from_tensorflow([numeric("age", 35.0, "<lambda>")], w, p, normalizers={"age": STD})


def test_weights_refused(tmp_path):
    cols = [numeric("a"), vocab("d", ["x", "y"])]
    good = {"linear_model/a/weights": np.ones((1, 1), np.float32), "linear_model/d/weights": np.ones((2, 1), np.float32),
            "linear_model/bias_weights": np.zeros(1, np.float32)}
    p = str(tmp_path / "w.wisp")
    cases = [
        (dict(good, **{"linear_model/d/weights": np.ones((2, 2), np.float32)}), "one logit"),
        (dict(good, **{"linear_model/d/weights": np.ones((3, 1), np.float32)}), "has 3 rows"),
        (dict(good, **{"linear_model/d/weights": np.ones((2, 1), np.float64)}), "float64"),
        (dict(good, **{"linear_model/bias_weights": np.zeros(2, np.float32)}), "bias_weights has shape"),
        ({k: v for k, v in good.items() if k != "linear_model/d/weights"}, "no variable 'linear_model/d/weights'"),
        (dict(good, **{"linear_model/e/weights": np.ones((1, 1), np.float32)}), "columns not given"),
        (dict({k.replace("linear_model/", "x/"): v for k, v in good.items()}, **{"y/bias_weights": np.zeros(1, np.float32)}),
         "cannot find the linear model's bias_weights"),
    ]
    for w, match in cases:
        with pytest.raises(ValueError, match=match):
            wisp.from_tensorflow(cols, w, p)
    with pytest.raises(ValueError, match="sparse_combiner='mean'"):
        wisp.from_tensorflow(cols, good, p, sparse_combiner="mean")
    with pytest.raises(ValueError, match="no column reads"):
        wisp.from_tensorflow(cols, good, p, inputs={"zzz": {"sparse": True}})
    with pytest.raises(ValueError, match="sparse input has no default"):
        wisp.from_tensorflow(cols, good, p, inputs={"d": {"sparse": True, "default": "x"}})
    with pytest.raises(ValueError, match="its columns read it as string"):
        wisp.from_tensorflow(cols, good, p, inputs={"d": {"dtype": "int64"}})
    with pytest.raises(ValueError, match="feature columns"):
        wisp.from_tensorflow(None, good, p)
    with pytest.raises(ValueError, match="must be a checkpoint"):
        wisp.from_tensorflow(cols, 42, p)
    assert not os.listdir(tmp_path)
    wisp.from_tensorflow(cols, good, p)
    assert os.listdir(tmp_path) == ["w.wisp"]


def test_engine_refusal_leaves_no_file(tmp_path):
    """What only the engine's parser checks (an identity default beyond its buckets) is refused, and nothing is written."""
    cols = [identity("h", 4, default_value=9)]
    w = {"linear_model/h/weights": np.ones((4, 1), np.float32), "linear_model/bias_weights": np.zeros(1, np.float32)}
    with pytest.raises(ValueError, match="engine refuses the description"):
        wisp.from_tensorflow(cols, w, str(tmp_path / "e.wisp"))
    assert not os.listdir(tmp_path)


def test_checkpoint_path_needs_tensorflow(tmp_path):
    try:
        import tensorflow  # noqa: F401
        pytest.skip("TensorFlow is importable: the checkpoint path is covered by test_tensorflow_parity")
    except ImportError:
        pass
    with pytest.raises(ValueError, match="needs TensorFlow"):
        wisp.from_tensorflow([numeric("a")], str(tmp_path / "ckpt"), str(tmp_path / "m.wisp"))


def test_tensorflow_parity(cli):
    """Trains small TensorFlow models and compares (1e-6); skipped without TensorFlow (make test-interop runs it)."""
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        pytest.skip("TensorFlow is not installed in this venv: the parity with TensorFlow's own predictions is "
                    "`make test-interop` (spec/interop/tf_parity.py, tensorflow-cpu in $(BUILD)/interop-venv)")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "spec", "interop", "tf_parity.py"), "--train", "3000",
                        "--test", "400", "--steps", "40", "--no-keras", "--wisp", cli], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
