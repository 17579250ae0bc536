"""quickstart.py — the Python package (wisp) in one page, on the files `make demo` writes into build/demo:
train a scikit-learn LogisticRegression, import it, score with a Session, check it against scikit-learn,
score raw rows of a feature-column model from pandas and from a dict, see a bad row, and serve the model.

    make demo
    python3 -m venv build/py-venv && build/py-venv/bin/pip install scikit-learn pandas . && \
        build/py-venv/bin/python examples/quickstart.py

Run from the repository root (the paths are relative to it). The output is the same on every run
(fixed solver, fixed digits); the README's tour shows it and spec/doc/readme.sh checks it.
"""
import numpy as np
import pandas
from sklearn.datasets import load_svmlight_files
from sklearn.linear_model import LogisticRegression

import wisp

demo = "build/demo"

# 1. Train. The demo's train/test files number features from 1, as LIBLINEAR does, and wisp reads the ids as
# written (a model's id j is the id j of a libsvm line). zero_based=True keeps them so: column j of X is id j
# (column 0 stays empty), so the model scores the same text files. scikit-learn's default, zero_based="auto",
# would shift every id down by one. load_svmlight_files gives both matrices the same number of columns.
X_train, y_train, X_test, y_test = load_svmlight_files(
    [demo + "/train.libsvm", demo + "/test.libsvm"], zero_based=True, dtype=np.float32)
for X in (X_train, X_test):                           # this reader may hand out int64 indices; LIBLINEAR
    X.indices, X.indptr = X.indices.astype(np.int32), X.indptr.astype(np.int32)   # and wisp read int32 in place
y_train, y_test = y_train.astype(int), y_test.astype(int)   # the labels +1 / -1
# LIBLINEAR's L2R_LR (as liblinear-train -s 0 -B 1), run to tol=1e-6: the digits printed below are then those of the
# optimum (tol 1e-7, 1e-8 print the same), not of wherever a solver version happens to stop.
est = LogisticRegression(solver="liblinear", C=1.0, tol=1e-6)
est.fit(X_train, y_train)
print("trained on %d rows x %d columns, classes_ %s, %d non-zero weights"
      % (X_train.shape[0], X_train.shape[1], est.classes_.tolist(), np.count_nonzero(est.coef_)))

# 2. Import: a .wisp file (float32 weights, the bias, classes_), returned loaded.
model = wisp.from_sklearn(est, demo + "/sklearn.wisp")
print("wrote %s: %d features, %s, classes_ %s" % (model.path, model.num_features, model.dtype, model.classes_.tolist()))

# 3. Score with a Session: "auto" is a GPU where one is usable, else the CPU. The libsvm text is parsed by the
# engine (labels are read and ignored), as `build/wisp score -m build/demo/sklearn.wisp build/demo/test.libsvm` does.
session = model.session("auto")
with open(demo + "/test.libsvm", "rb") as f:
    p = session.score(f.read())                       # float32, shape (5000,): P(classes_[1]) = P(1)
print("test.libsvm: %d rows on %s, the first 3: %s" % (p.shape[0], session.last_device, " ".join("%.4f" % v for v in p[:3])))

# The same rows as a scipy CSR matrix (read in place: int32 indices, float32 values), through predict_proba of both.
ours, theirs = model.predict_proba(X_test), est.predict_proba(X_test)
print("predict_proba: wisp and scikit-learn agree to 1e-6: %s; Session.score(text) is its column 1: %s"
      % (bool(np.max(np.abs(ours - theirs)) < 1e-6), bool(np.max(np.abs(ours[:, 1] - p)) < 1e-6)))
print("accuracy on test.libsvm: %.4f (wisp's predict), %.4f (scikit-learn's)"
      % (np.mean(model.predict(X_test) == y_test), est.score(X_test, y_test)))

# 4. Raw rows: columns.wisp carries a feature-column description (engine/COLUMNS.md), so it scores columns by
# name, hashed, bucketized and crossed as TensorFlow would, from a pandas DataFrame, a pyarrow Table or a dict.
cols = wisp.load(demo + "/columns.wisp")
print("columns.wisp: inputs %s" % ", ".join(i["name"] for i in cols.columns["inputs"]))
frame = pandas.read_csv(demo + "/rows.csv")           # what `build/wisp score -m build/demo/columns.wisp build/demo/rows.csv` prints
print("rows.csv (a DataFrame):", " ".join("%.9f" % v for v in cols.score(frame)))
rows = {"age": [23.0, 51.5], "income": [1800.0, 5200.0], "city": ["c00042", "c00007"],
        "device": ["ios", "web"], "hour": [9, 22], "tags": [["t1", "t7"], []]}
print("a dict of columns:     ", " ".join("%.9f" % v for v in cols.score(rows)))

# 5. A bad row does not stop the batch or spoil its neighbours: it scores NaN and Session.bad_rows says why
# (errors="raise" raises wisp.BadRowError instead).
bad = dict(rows, age=[23.0, float("nan")])
cs = cols.session("auto")
print("age NaN in row 1:      ", " ".join("%.9f" % v for v in cs.score(bad)))
print("  bad_rows: %r" % (cs.bad_rows,))        # [(row, reason)]

# 6. Serve: the OpenResty service loads the same file (examples/openresty/README.md).
print("serve it: examples/openresty/serve.sh --models ctr=%s --port 8080" % model.path)
print("then:     curl -s -H 'Content-Type: text/x-libsvm' --data-binary @%s/test.libsvm localhost:8080/v1/models/ctr:predict"
      % demo)
