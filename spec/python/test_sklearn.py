"""test_sklearn.py — wisp.from_sklearn: binary LogisticRegression / SGDClassifier(log_loss) score as their predict_proba (1e-6); the rest refused with the reason."""
import numpy as np
import pytest
import scipy.sparse as sp

import wisp

sklearn = pytest.importorskip("sklearn")
from sklearn.linear_model import LogisticRegression, SGDClassifier  # noqa: E402
from sklearn.svm import LinearSVC  # noqa: E402


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    n, d = 600, 300
    X = sp.random(n, d, density=0.05, format="csr", random_state=3, dtype=np.float64)
    w = rng.normal(0, 2, size=d)
    y = (X @ w + rng.normal(0, 0.5, size=n) > 0).astype(int)
    return X, y


@pytest.mark.parametrize("labels", [(0, 1), (-1, 1), (7, 3), ("no", "yes")])
def test_logistic_regression_parity(data, labels, tmp_path):
    X, y = data
    yl = np.array(labels, dtype=object if isinstance(labels[0], str) else int)[y]
    est = LogisticRegression(C=10.0, max_iter=2000).fit(X, yl)
    m = wisp.from_sklearn(est, str(tmp_path / "lr.wisp"))
    assert list(m.classes_) == list(est.classes_)
    assert m.meta["source"] == "sklearn" and m.num_features == X.shape[1]
    want = est.predict_proba(X)
    got = m.predict_proba(X, device="cpu")
    assert np.max(np.abs(got - want)) < 1e-6
    assert np.max(np.abs(want[:, 1] - 0.5)) > 0.4          # not a trivial model
    np.testing.assert_array_equal(m.predict(X.toarray(), device="cpu"), est.predict(X))
    # the same through the other input forms, and after a reload
    m2 = wisp.load(str(tmp_path / "lr.wisp"))
    assert list(m2.classes_) == list(est.classes_)
    assert np.max(np.abs(m2.predict_proba(X.toarray(), device="cpu") - want)) < 1e-6


def test_no_intercept_and_sgd(data, tmp_path):
    X, y = data
    est = LogisticRegression(fit_intercept=False, max_iter=2000).fit(X, y)
    m = wisp.from_sklearn(est, str(tmp_path / "ni.wisp"))
    assert m.bias == 0.0
    assert np.max(np.abs(m.predict_proba(X, device="cpu") - est.predict_proba(X))) < 1e-6
    sgd = SGDClassifier(loss="log_loss", random_state=0, max_iter=50, tol=None).fit(X, y)
    m = wisp.from_sklearn(sgd, str(tmp_path / "sgd.wisp"))
    assert np.max(np.abs(m.predict_proba(X, device="cpu") - sgd.predict_proba(X))) < 1e-6


def test_refused_with_reason(data, tmp_path):
    X, y = data
    p = str(tmp_path / "x.wisp")
    with pytest.raises(ValueError, match="LinearSVC gives no probabilities"):
        wisp.from_sklearn(LinearSVC().fit(X, y), p)
    with pytest.raises(ValueError, match="loss='hinge'"):
        wisp.from_sklearn(SGDClassifier(loss="hinge").fit(X, y), p)
    y3 = np.arange(X.shape[0]) % 3
    with pytest.raises(ValueError, match="3 classes"):
        wisp.from_sklearn(LogisticRegression(max_iter=500).fit(X, y3), p)
    with pytest.raises(ValueError, match="not fitted"):
        wisp.from_sklearn(LogisticRegression(), p)
    with pytest.raises(ValueError, match="not supported"):
        wisp.from_sklearn(object(), p)


def test_write_model_checks(tmp_path):
    with pytest.raises(ValueError, match="unknown weight dtype"):
        wisp.write_model(str(tmp_path / "a.wisp"), np.ones(3), 0.0, dtype="f64")
    with pytest.raises(ValueError, match="newlines"):
        wisp.write_model(str(tmp_path / "a.wisp"), np.ones(3), 0.0, meta={"k": "a\nb"})
    with pytest.raises(wisp.WispIOError):
        wisp.write_model("/nonexistent/dir/a.wisp", np.ones(3), 0.0)
    wisp.write_model(str(tmp_path / "b.wisp"), [0.5, -1.0, 2.0], 0.25, dtype="f16", meta={"who": "spec"})
    m = wisp.load(str(tmp_path / "b.wisp"))
    assert m.dtype == "f16" and m.num_features == 3 and m.bias == 0.25 and m.meta["who"] == "spec"
    assert [m.weight(i) for i in range(4)] == [0.5, -1.0, 2.0, 0.0]


def test_columns_attribute(tmp_path):
    desc = {"columns": [{"name": "age", "type": "numeric", "offset": 0, "size": 1}]}
    wisp.write_model(str(tmp_path / "c.wisp"), np.zeros(4), 0.0, columns=desc)
    assert wisp.load(str(tmp_path / "c.wisp")).columns == desc
    wisp.write_model(str(tmp_path / "t.wisp"), np.zeros(4), 0.0, columns="not json")
    assert wisp.load(str(tmp_path / "t.wisp")).columns == "not json"
    wisp.write_model(str(tmp_path / "n.wisp"), np.zeros(4), 0.0)
    assert wisp.load(str(tmp_path / "n.wisp")).columns is None


def test_pipelines(data, tmp_path):
    from sklearn.feature_extraction import FeatureHasher
    from sklearn.feature_extraction.text import HashingVectorizer
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import StandardScaler
    X, y = data
    p = str(tmp_path / "p.wisp")
    # passthrough steps: the classifier is imported, scores as the pipeline's predict_proba
    pipe = Pipeline([("id", "passthrough"), ("lr", LogisticRegression(max_iter=1000))]).fit(X, y)
    m = wisp.from_sklearn(pipe, p)
    assert np.max(np.abs(m.predict_proba(X, device="cpu") - pipe.predict_proba(X))) < 1e-6
    rows = [{"city=%d" % (i % 7): 1, "age": float(i % 50)} for i in range(len(y))]
    hashed = make_pipeline(FeatureHasher(n_features=256), LogisticRegression(max_iter=500)).fit(rows, y)
    with pytest.raises(ValueError, match="MurmurHash3.*no such node"):
        wisp.from_sklearn(hashed, p)
    texts = ["w%d w%d" % (i % 5, i % 11) for i in range(len(y))]
    hv = make_pipeline(HashingVectorizer(n_features=512), SGDClassifier(loss="log_loss")).fit(texts, y)
    with pytest.raises(ValueError, match="HashingVectorizer"):
        wisp.from_sklearn(hv, p)
    # the documented way round: the classifier alone on the hashed matrix
    m = wisp.from_sklearn(hashed[-1], p)
    H = hashed[:-1].transform(rows).astype(np.float32)
    assert np.max(np.abs(m.predict_proba(H.tocsr(), device="cpu") - hashed.predict_proba(rows))) < 1e-6
    with pytest.raises(ValueError, match="StandardScaler"):
        wisp.from_sklearn(make_pipeline(StandardScaler(with_mean=False), LogisticRegression()).fit(X, y), p)
