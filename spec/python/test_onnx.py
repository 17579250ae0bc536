"""test_onnx.py — wisp.from_onnx and `wisp import onnx` (engine/model/import_onnx.c) against ONNX Runtime's own output, 1e-6."""
import subprocess

import numpy as np
import pytest

import wisp

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
skl2onnx = pytest.importorskip("skl2onnx")
from onnx import helper, TensorProto  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression, SGDClassifier  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402


def data(n=400, d=30, seed=0):
    rng = np.random.default_rng(seed)
    X = (rng.random((n, d)) * (rng.random((n, d)) < 0.3)).astype(np.float32)
    y = (X @ rng.normal(size=d) + rng.normal(0, 0.3, n) > 0.3).astype(int)
    return X, y


def ort_run(model, X):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: X})


@pytest.mark.parametrize("zipmap", [False, True])
def test_logistic_regression_matches_onnxruntime(tmp_path, zipmap):
    X, y = data()
    onx = skl2onnx.to_onnx(LogisticRegression(max_iter=500).fit(X, y), X[:1],
                           options={"zipmap": zipmap}, target_opset={"": 17, "ai.onnx.ml": 3})
    out = ort_run(onx, X)
    probs = np.array([[r[0], r[1]] for r in out[1]]) if zipmap else out[1]
    m = wisp.from_onnx(onx, str(tmp_path / "lr.wisp"))
    assert m.meta["source"] == "onnx" and list(m.classes_) == [0, 1]
    got = m.predict_proba(X, device="cpu")
    assert np.max(np.abs(got - probs)) < 1e-6
    assert (m.predict(X, device="cpu") == out[0]).mean() > 0.99     # ties at 0.5 may differ


def test_string_labels_and_file_and_cli(tmp_path, cli):
    X, y = data(seed=1)
    labels = np.where(y == 1, "yes", "no")
    onx = skl2onnx.to_onnx(LogisticRegression(max_iter=500).fit(X, labels), X[:1], options={"zipmap": False})
    f = tmp_path / "s.onnx"
    f.write_bytes(onx.SerializeToString())
    probs = ort_run(onx, X)[1]
    m = wisp.from_onnx(str(f), str(tmp_path / "s.wisp"))
    assert list(m.classes_) == ["no", "yes"]
    assert np.max(np.abs(m.predict_proba(X, device="cpu") - probs)) < 1e-6
    # the CLI imports the same file to the same weights
    r = subprocess.run([cli, "import", "onnx", str(f), str(tmp_path / "c.wisp")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    c = wisp.load(str(tmp_path / "c.wisp"))
    assert c.bias == m.bias and all(c.weight(j) == m.weight(j) for j in range(X.shape[1]))


def linear_classifier(coefs, intercepts, d, post="LOGISTIC", labels=(0, 1)):
    node = helper.make_node("LinearClassifier", ["X"], ["label", "scores"], domain="ai.onnx.ml",
                            coefficients=list(coefs), intercepts=list(intercepts), classlabels_ints=list(labels),
                            post_transform=post)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, d])],
                          [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
                           helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, 2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])


def test_post_transform_none_is_the_sigmoid_of_class_1(tmp_path):
    X, _ = data(seed=2, d=8)
    rng = np.random.default_rng(3)
    w = rng.normal(size=8).astype(np.float32)
    onx = linear_classifier(np.concatenate([-w, w]), [-0.2, 0.2], 8, post="NONE")
    scores = ort_run(onx, X)[1]
    p = wisp.from_onnx(onx, str(tmp_path / "n.wisp")).score(X, device="cpu")
    assert np.max(np.abs(p - 1 / (1 + np.exp(-scores[:, 1].astype(np.float64))))) < 1e-6


def test_linear_regressor_is_sigmoid_of_its_output(tmp_path):
    X, y = data(seed=4)
    onx = skl2onnx.to_onnx(LinearRegression().fit(X, y.astype(np.float32)), X[:1])
    v = ort_run(onx, X)[0].reshape(-1).astype(np.float64)
    p = wisp.from_onnx(onx, str(tmp_path / "r.wisp")).score(X, device="cpu")
    assert np.max(np.abs(p - 1 / (1 + np.exp(-v)))) < 1e-6


def test_refusals(tmp_path):
    X, y = data(seed=5)
    out = str(tmp_path / "x.wisp")
    pipe = skl2onnx.to_onnx(make_pipeline(StandardScaler(), LogisticRegression()).fit(X, y), X[:1])
    with pytest.raises(wisp.ParseError, match="Scaler"):
        wisp.from_onnx(pipe, out)
    sgd = skl2onnx.to_onnx(SGDClassifier(loss="log_loss").fit(X, y), X[:1])
    with pytest.raises(wisp.ParseError, match="MatMul"):
        wisp.from_onnx(sgd, out)
    y3 = np.arange(len(y)) % 3
    with pytest.raises(wisp.ParseError, match="binary|multi_class|3 class"):
        wisp.from_onnx(skl2onnx.to_onnx(LogisticRegression(max_iter=300).fit(X, y3), X[:1]), out)
    with pytest.raises(wisp.ParseError, match="SOFTMAX"):
        wisp.from_onnx(linear_classifier([1.0, -1.0], [0, 0], 1, post="SOFTMAX"), out)
    with pytest.raises(wisp.ParseError, match="malformed|not an ONNX"):
        wisp.from_onnx(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", out)
    with pytest.raises(wisp.ParseError):
        wisp.from_onnx(b"", out)
    good = linear_classifier([1.0, -1.0], [0, 0], 1).SerializeToString()
    for cut in range(0, len(good), 7):                  # every truncation refused or imported, never a crash
        try:
            wisp.from_onnx(good[:cut], out)
        except wisp.WispError:
            pass


@pytest.mark.parametrize("post", ["LOGISTIC", "NONE"])
def test_one_coefficient_row_is_class_1(tmp_path, post):
    X = np.random.default_rng(6).random((50, 4)).astype(np.float32)
    onx = linear_classifier(np.array([1, -2, 0.5, 3], np.float32), [0.3], 4, post=post)
    s1 = ort_run(onx, X)[1][:, 1].astype(np.float64)
    ref = s1 if post == "LOGISTIC" else 1 / (1 + np.exp(-s1))
    p = wisp.from_onnx(onx, str(tmp_path / "one.wisp")).score(X, device="cpu")
    assert np.max(np.abs(p - ref)) < 1e-6
