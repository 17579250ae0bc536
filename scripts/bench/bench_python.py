#!/usr/bin/env python3
"""bench_python.py — the Python package's call overhead and large-batch cost against the C API, with peers in the same run.

    python scripts/bench/bench_python.py [--build build] [--record] [--repeats 7]

Run with the Python of a venv where the package is installed (spec/python/run.sh
makes one: $WISP_BUILD/py-venv/bin/python). Measured, interleaved so machine load
hits every contender alike (best of --repeats rounds each):
  - 10 rows x 39 features (float32 values, int32 CSR), a 2^16-weight model:
    C (scripts/bench/bench_python_c.c, compiled here against $BUILD/libwisp.a:
    wisp_batch_wrap + wisp_session_score in a C loop), Session.score(csr) from
    Python, scikit-learn predict_proba on the same CSR (a LogisticRegression
    holding the same weights), ONNX Runtime's LinearClassifier (dense input: its
    only form) and TensorFlow's predict when tensorflow is importable;
  - 200k rows from a scipy CSR (int32 indices, float32 data): C vs Python, and the
    bytes Python allocates during the call (tracemalloc peak: the output array
    and nothing proportional to the input means no copy).
Writes build/results/bench_python.json, or scripts/results/bench_python.json with --record
(scripts/lib/record.py: the machine, commit, date and command around the figures).

    python scripts/bench/bench_python.py --gpu [--build build] [--record] [--rows 1000000]

On a CUDA machine (a CUDA build of the package, CuPy and/or PyTorch): 1M rows x 39
features already in GPU memory, a 2^20-weight model, interleaved rounds: the
device-resident C figure (bench_python_c --device: wisp_session_score_device on the
arrays put on gpu:0 from C, answers to device memory, to pageable host memory (one reused
malloc'd buffer) and to pinned host memory (wisp_engine_host_alloc)), Session.score of the
same arrays as CuPy arrays and as PyTorch CUDA tensors (out="device" and host out: the host
out is a numpy array over pooled pinned memory, compared with both C host figures), the
DLPack export alone (__dlpack_device__ + __dlpack__(stream=1) of the three arrays: the
producer's share of the Python overhead), and
PyTorch's EmbeddingBag(mode="sum", per_sample_weights) + sigmoid on the same tensors
(the framework peer; no id is beyond the table: EmbeddingBag has no such rule). Parity:
every GPU answer against the CPU session on the host arrays. Writes
bench_python_gpu.json (build/results/, or scripts/results/ with --record).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc

import numpy as np

import wisp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "lib"))
import record  # noqa: E402  scripts/lib/record.py: the commit (WISP_COMMIT first), the machine, the schema
NF = 1 << 16
K = 39


def rows_csr(n, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, NF, size=(n, K), dtype=np.int32)
    ids.sort(axis=1)
    indptr = np.arange(0, n * K + 1, K, dtype=np.int32)
    data = rng.random(n * K, dtype=np.float32) + 0.5
    import scipy.sparse as sp           # here: the --gpu run needs no scipy (the GPU machine may lack it)
    return sp.csr_matrix((data, ids.reshape(-1), indptr), shape=(n, NF))


def best_per_call(f, iters, rounds=1):
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            f()
        best = min(best, (time.perf_counter_ns() - t0) / iters)
    return best


def static_libs(build):
    """libwisp.a and what it needs, CUDA's runtime (static) when nvcc built it: the C peer then
    loads nothing at run time that the machine's loader might not find."""
    libs = [os.path.join(build, "libwisp.a"), "-lxxhash", "-lm", "-lpthread", "-ldl", "-lrt"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        cu = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
        libs = libs[:1] + ["-L" + os.path.join(cu, "lib64"), "-L" + os.path.join(cu, "targets/x86_64-linux/lib"),
                           "-lcudart_static", "-lstdc++"] + libs[1:]
    return libs


def c_timer(build, tmp):
    exe = os.path.join(tmp, "bench_python_c")
    subprocess.run(["cc", "-O2", "-I" + os.path.join(ROOT, "engine/include"), "-I" + os.path.join(ROOT, "engine"),
                    os.path.join(ROOT, "scripts/bench/bench_python_c.c")] + static_libs(build) + ["-o", exe], check=True)

    def run(model, X, iters):
        base = os.path.join(tmp, "x%d" % X.shape[0])
        X.indptr.astype(np.uint32).tofile(base + ".rp")
        X.indices.astype(np.uint32).tofile(base + ".id")
        X.data.astype(np.float32).tofile(base + ".v")
        r = subprocess.run([exe, model, base + ".rp", base + ".id", base + ".v", str(iters), "3", "0"],
                           check=True, capture_output=True, text=True)
        return json.loads(r.stdout)["best_ns_per_call"]
    return run


def gpu_main(args, command, rec):
    """1M device-resident rows: C, CuPy, PyTorch, and PyTorch's EmbeddingBag, interleaved."""
    build = os.path.abspath(args.build)
    gpus = [d for d in wisp.devices() if d["device"] != "cpu" and d["usable"]]
    if not gpus:
        sys.exit("bench_python --gpu: no usable GPU (%s); is the package built with nvcc?" % wisp.devices()[0]["gpu_status"])
    tmp = tempfile.mkdtemp(prefix="bench_python_gpu.")
    nf, n = 1 << 20, args.rows
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.3, nf).astype(np.float32)
    model_path = os.path.join(tmp, "m.wisp")
    wisp.write_model(model_path, w, 0.1)
    model = wisp.load(model_path)
    sg, sc = model.session("gpu"), model.session("cpu")
    ids = rng.integers(0, nf, size=(n, K), dtype=np.int32)
    indptr = np.arange(0, n * K + 1, K, dtype=np.int32)
    indices = ids.reshape(-1)
    values = (rng.random(n * K, dtype=np.float32) + 0.5).astype(np.float32)
    want = sc.score((indptr, indices, values))
    exe = os.path.join(tmp, "bench_python_c")
    subprocess.run(["cc", "-O2", "-I" + os.path.join(ROOT, "engine/include"), "-I" + os.path.join(ROOT, "engine"),
                    os.path.join(ROOT, "scripts/bench/bench_python_c.c")] + static_libs(build) + ["-o", exe], check=True)
    base = os.path.join(tmp, "x")
    indptr.astype(np.uint32).tofile(base + ".rp")
    indices.astype(np.uint32).tofile(base + ".id")
    values.tofile(base + ".v")

    def c_run(mapped=False):
        env = dict(os.environ, WISP_DEVICE_OUT_MAPPED="1") if mapped else None
        r = subprocess.run([exe, "--device", model_path, base + ".rp", base + ".id", base + ".v", str(args.iters), "3", "0"],
                           capture_output=True, text=True, env=env)
        if r.returncode != 0:
            if mapped:                           # the experiment may fail; the run goes on without it
                notes.append("the C peer with WISP_DEVICE_OUT_MAPPED=1 failed (exit %d): %s" % (r.returncode, r.stderr.strip()[-500:]))
                return None
            sys.exit("bench_python --gpu: the C peer failed (exit %d): %s" % (r.returncode, r.stderr.strip()[-2000:]))
        c = json.loads(r.stdout)
        if mapped and c.get("checksum") == -1.0:
            notes.append("the C peer with WISP_DEVICE_OUT_MAPPED=1: pinned and pageable answers differ")
        return c

    contenders, parity, notes = {}, {}, []

    def timed(f, sync):
        f()
        sync()
        t0 = time.perf_counter_ns()
        for _ in range(args.iters):
            f()
        sync()
        return (time.perf_counter_ns() - t0) / args.iters

    try:
        import cupy as cp
        X = (cp.asarray(indptr), cp.asarray(indices), cp.asarray(values))
        got_host = sg.score(X)
        got_dev = cp.asnumpy(cp.from_dlpack(sg.score(X, out="device")))
        parity["cupy_host_out_max_abs_diff"] = float(np.max(np.abs(got_host - want)))
        parity["cupy_device_out_max_abs_diff"] = float(np.max(np.abs(got_dev - want)))
        assert sg.last_device.startswith("gpu"), sg.last_device
        sync = cp.cuda.runtime.deviceSynchronize
        contenders["python_cupy_device_out"] = (lambda: sg.score(X, out="device"), sync)
        contenders["python_cupy_host_out"] = (lambda: sg.score(X), sync)
        # as a user takes it: exported, so its block is reused after a device sync
        contenders["python_cupy_from_dlpack_device_out"] = (lambda: cp.from_dlpack(sg.score(X, out="device")), sync)
    except ImportError:
        notes.append("cupy not installed: no CuPy contender")
    try:
        import torch
        T = (torch.from_numpy(indptr).cuda(), torch.from_numpy(indices).cuda(), torch.from_numpy(values).cuda())
        got = torch.from_dlpack(sg.score(T, out="device")).cpu().numpy()
        parity["torch_device_out_max_abs_diff"] = float(np.max(np.abs(got - want)))
        sync = torch.cuda.synchronize
        contenders["python_torch_device_out"] = (lambda: sg.score(T, out="device"), sync)
        contenders["python_torch_host_out"] = (lambda: sg.score(T), sync)
        contenders["python_torch_from_dlpack_device_out"] = (lambda: torch.from_dlpack(sg.score(T, out="device")), sync)
        W = torch.from_numpy(w).cuda().reshape(-1, 1)
        eb_ids, eb_off = T[1], T[0][:-1]

        def embag():
            z = torch.nn.functional.embedding_bag(eb_ids, W, eb_off, mode="sum", per_sample_weights=T[2])
            return torch.sigmoid(z.reshape(-1) + 0.1)
        try:
            first = embag()
        except RuntimeError as e:                # an older torch: int64 indices and offsets only
            notes.append("EmbeddingBag refused int32 (%s): it gets int64 copies, made before timing" % str(e)[:120])
            eb_ids, eb_off = T[1].to(torch.int64), T[0][:-1].to(torch.int64)
            first = embag()
        parity["torch_embedding_bag_max_abs_diff"] = float(np.max(np.abs(first.cpu().numpy() - want)))
        contenders["torch_embedding_bag_sum_sigmoid"] = (embag, sync)
    except ImportError:
        notes.append("torch not installed: no PyTorch contender and no EmbeddingBag peer")
    def exports(arrays):
        def f():
            for a in arrays:
                a.__dlpack_device__()
                a.__dlpack__(stream=1)            # what score_dlpack asks; the capsule dropped unconsumed
        return f
    if "python_cupy_device_out" in contenders:
        contenders["cupy_dlpack_export_x3"] = (exports(X), cp.cuda.runtime.deviceSynchronize)
        host_base = type(sg.score(X).base).__name__
        notes.append("the CuPy host out's memory: %s (HostBlock: pooled pinned memory)" % host_base)
    if "python_torch_device_out" in contenders:
        contenders["torch_dlpack_export_x3"] = (exports(T), torch.cuda.synchronize)
    rounds = {k: [] for k in contenders}
    rounds["c_device_out_ns"], rounds["c_host_out_ns"], rounds["c_host_pinned_out_ns"] = [], [], []
    rounds["c_host_pinned_mapped_out_ns"] = []
    for _ in range(args.repeats):
        c = c_run()
        rounds["c_device_out_ns"].append(c["device_out_best_ns"])
        rounds["c_host_out_ns"].append(c["host_out_best_ns"])
        rounds["c_host_pinned_out_ns"].append(c["host_pinned_out_best_ns"])
        if not c.get("host_pinned"):
            notes.append("the C peer's wisp_engine_host_alloc out was not pinned this round")
        # the experiment: the kernel writes a mapped pinned host out itself (no copy after it)
        cm = c_run(mapped=True) if not any("MAPPED=1 failed" in n for n in notes) else None
        if cm:
            rounds["c_host_pinned_mapped_out_ns"].append(cm["host_pinned_out_best_ns"])
        for k, (f, sync) in contenders.items():
            rounds[k].append(timed(f, sync))
    best = {k: min(v) for k, v in rounds.items() if v}
    ratios = {}
    for k in best:
        if k.startswith("python_"):
            if k.endswith("device_out"):
                ratios[k + "_over_c"] = best[k] / best["c_device_out_ns"]
            else:
                ratios[k + "_over_c_pageable"] = best[k] / best["c_host_out_ns"]
                ratios[k + "_over_c_pinned"] = best[k] / best["c_host_pinned_out_ns"]
    from wisp import _wisp
    pools = _wisp.pool_stats() if hasattr(_wisp, "pool_stats") else {}
    out = {
        "script": "scripts/bench/bench_python.py", "command": command, "issue": 15, "wisp_version": wisp.version(),
        "commit": record.commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "peers": "in results.best_ns_per_call: the device-resident C call (bench_python_c --device), and PyTorch's "
                 "EmbeddingBag + sigmoid on the same tensors, interleaved in the same run",
        "model": {"num_features": nf, "dtype": "f32"}, "device": gpus[0]["name"],
        "rows": n, "features_per_row": K, "iters_per_round": args.iters,
        "best_ns_per_call": best, "python_over_c": ratios, "target": "python within 1.1x of the device-resident C figure",
        "parity_vs_cpu_session": parity, "rounds": rounds, "notes": notes, "output_pools": pools,
        "like_with_like": "python host out: a numpy array over pooled pinned memory; c_host_out_ns: pageable (a reused "
                          "malloc'd buffer), c_host_pinned_out_ns: wisp_engine_host_alloc (pinned); python device out: "
                          "a DeviceArray from the pool, c_device_out_ns: one cudaMalloc'd buffer reused; "
                          "c_host_pinned_mapped_out_ns (an experiment, WISP_DEVICE_OUT_MAPPED=1 in the C peer only): "
                          "the kernel writes the pinned host out itself, no copy after it",
    }
    path = record.out_path("bench_python_gpu.json", rec)
    record.write(path, out, indent=1)
    print(json.dumps({"best_ns_per_call": best, "python_over_c": ratios, "parity": parity}, indent=1))


def main():
    command = " ".join(["python"] + sys.argv)
    rec = record.take_record_flag(sys.argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("WISP_BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--gpu", action="store_true", help="the GPU benchmark (1M device-resident rows) instead")
    ap.add_argument("--rows", type=int, default=1_000_000, help="--gpu: rows")
    ap.add_argument("--iters", type=int, default=20, help="--gpu: calls per round")
    args = ap.parse_args()
    if args.gpu:
        return gpu_main(args, command, rec)
    build = os.path.abspath(args.build)
    tmp = tempfile.mkdtemp(prefix="bench_python.")
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.3, NF).astype(np.float32)
    model_path = os.path.join(tmp, "m.wisp")
    wisp.write_model(model_path, w, 0.1)
    session = wisp.load(model_path).session("cpu")
    crun = c_timer(build, tmp)
    small, big = rows_csr(10, 1), rows_csr(200_000, 2)

    peers = {}
    try:
        from sklearn.linear_model import LogisticRegression
        lr = LogisticRegression()
        lr.coef_, lr.intercept_, lr.classes_ = w[None, :].astype(np.float64), np.array([0.1]), np.array([0, 1])
        assert np.max(np.abs(lr.predict_proba(small)[:, 1] - session.score(small))) < 1e-5
        peers["sklearn_predict_proba_csr"] = lambda: lr.predict_proba(small)
    except ImportError:
        pass
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper
        node = helper.make_node("LinearClassifier", ["X"], ["label", "p"], domain="ai.onnx.ml",
                                coefficients=np.concatenate([-w, w]).tolist(), intercepts=[-0.1, 0.1],
                                classlabels_ints=[0, 1], post_transform="LOGISTIC")
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, NF])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
                               helper.make_tensor_value_info("p", TensorProto.FLOAT, [None, 2])])
        onx = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        osess = ort.InferenceSession(onx.SerializeToString(), so, providers=["CPUExecutionProvider"])
        dense = small.toarray()
        assert np.max(np.abs(osess.run(["p"], {"X": dense})[0][:, 1] - session.score(small))) < 1e-5
        peers["onnxruntime_linear_classifier_dense"] = lambda: osess.run(["p"], {"X": dense})
    except ImportError:
        pass
    tf_note = None
    try:
        import tensorflow as tf  # noqa: F401
        tf_note = "tensorflow importable but its peer is not written yet"
    except ImportError:
        tf_note = "tensorflow not installed in this venv: no framework-session peer"

    res = {"c_ns": [], "python_ns": [], "python_tuple_ns": []}
    res.update({k + "_ns": [] for k in peers})
    big_c, big_py = [], []
    tuple_small = (small.indptr, small.indices, small.data)
    for _ in range(args.repeats):
        res["c_ns"].append(crun(model_path, small, 20000))
        # best of 3 runs of 20000 calls, as the C side takes (bench_python_c's REPEATS 3)
        res["python_ns"].append(best_per_call(lambda: session.score(small), 20000, 3))
        res["python_tuple_ns"].append(best_per_call(lambda: session.score(tuple_small), 20000, 3))
        for k, f in peers.items():
            res[k + "_ns"].append(best_per_call(f, 200))
        big_c.append(crun(model_path, big, 5))
        big_py.append(best_per_call(lambda: session.score(big), 5))
    tracemalloc.start()
    session.score(big)
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    session.score(big)
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()

    best = {k: min(v) for k, v in res.items()}
    out = {
        "script": "scripts/bench/bench_python.py", "command": command, "issue": 15,
        "wisp_version": wisp.version(),
        "commit": record.commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "peers": "in results.small.best_ns_per_call and results.large: the same calls from C (scripts/bench/bench_python_c.c) and, where installed, scikit-learn and onnxruntime, interleaved in the same run",
        "model": {"num_features": NF, "dtype": "f32"},
        "small": {"rows": 10, "features_per_row": K, "best_ns_per_call": best,
                  "python_minus_c_ns": best["python_ns"] - best["c_ns"], "target": "python within 1500 ns of C",
                  "rounds": res},
        "large": {"rows": big.shape[0], "nnz": int(big.nnz), "c_best_ns": min(big_c), "python_best_ns": min(big_py),
                  "python_over_c": min(big_py) / min(big_c), "target": "within 1.05x of C",
                  "python_bytes_allocated_during_call": int(peak), "output_bytes": 4 * big.shape[0],
                  "input_bytes": int(big.indptr.nbytes + big.indices.nbytes + big.data.nbytes),
                  "rounds_c_ns": big_c, "rounds_python_ns": big_py},
        "notes": [tf_note, "interleaved rounds, best of each; C and Python use one engine thread per core",
                  "onnxruntime's LinearClassifier takes dense rows only (10 x 65536 float32 per call)"],
    }
    path = record.out_path("bench_python.json", rec)
    record.write(path, out, indent=1)   # scripts/results/SCHEMA.md's envelope
    print(json.dumps({"small_best_ns": best, "large": {k: out["large"][k] for k in
                      ("c_best_ns", "python_best_ns", "python_over_c", "python_bytes_allocated_during_call")}}, indent=1))


if __name__ == "__main__":
    main()
