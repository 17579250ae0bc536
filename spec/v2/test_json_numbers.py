"""test_json_numbers.py — wisp_json_numbers (engine/parse/json_numbers.c), the C reader of the v2 JSON tensors'
number lists, through ctypes on $WISP_BUILD/libwisp.so: on random lists it reads what json.loads + numpy read
(int32, int64 exactly, float32 as float(strtod) rounded, float64), nested lists flattened; it refuses (EPARSE) what is not a
list of numbers of that kind, and says ELIMIT past cap."""

import ctypes
import json
import random

import numpy as np
import pytest

WISP_OK, WISP_EPARSE, WISP_ELIMIT = 0, None, None
NP = {(0, 32): np.int32, (0, 64): np.int64, (1, 32): np.float32, (1, 64): np.float64}


def read(lib, text, is_float, bits, cap=None, tail=b" }"):
    raw = text.encode() + tail
    cap = cap if cap is not None else 10000
    out = np.zeros(max(cap, 1), dtype=NP[(is_float, bits)])
    cnt, used = ctypes.c_size_t(), ctypes.c_size_t()
    rc = lib.wisp_json_numbers(
        raw, len(raw), is_float, bits, out.ctypes.data, cap, ctypes.byref(cnt), ctypes.byref(used)
    )
    return lib.wisp_err_name(rc).decode(), out[:cnt.value], used.value


def rand_num(rng, kind):
    if kind == "int":
        return str(
            rng.choice([0, 1, -1, 7, 2**31 - 1, -(2**31), 2**53 + 1, 2**63 - 1, -(2**63), rng.randint(-(10**9), 10**9)])
        )
    r = rng.random()
    if r < 0.3:
        return repr(round(rng.uniform(-5, 5), rng.randint(0, 8)))
    if r < 0.5:
        return "%de%d" % (rng.randint(-999, 999), rng.randint(-40, 40))
    if r < 0.6:
        return "%.17g" % rng.uniform(-1e30, 1e30)
    if r < 0.7:
        return str(rng.randint(-10 ** 20, 10 ** 20))
    return repr(rng.uniform(-1, 1))


@pytest.mark.parametrize("seed", range(20))
def test_random_lists_equal_json_loads(lib, seed):
    rng = random.Random(seed)
    for is_float, bits in ((0, 32), (0, 64), (1, 32), (1, 64)):
        kind = "float" if is_float else "int"
        toks = [rand_num(rng, kind) for _ in range(rng.randint(0, 60))]
        if not is_float and bits == 32:
            toks = [t for t in toks if -2 ** 31 <= int(t) < 2 ** 31]
        seps = [rng.choice([",", ", ", " ,\n", ","]) for _ in toks]
        text = "[" + "".join(t + (s if i < len(toks) - 1 else "") for i, (t, s) in enumerate(zip(toks, seps))) + "]"
        st, got, used = read(lib, text, is_float, bits)
        assert st == "WISP_OK", (text, st)
        assert used == len(text)
        want = np.array([json.loads(t) for t in toks], dtype=object)
        if is_float:
            want = np.array([float(x) for x in want], dtype=np.float64).astype(NP[(1, bits)])
            assert np.array_equal(got, want, equal_nan=True), (text, got, want)
        else:
            assert [int(x) for x in got] == [int(x) for x in want], text


def test_nested_and_empty(lib):
    st, got, used = read(lib, "[[1, 2], [], [3, [4]]]", 0, 64)
    assert st == "WISP_OK" and list(got) == [1, 2, 3, 4] and used == len("[[1, 2], [], [3, [4]]]")
    st, got, _ = read(lib, "[]", 1, 32)
    assert st == "WISP_OK" and len(got) == 0
    st, got, _ = read(lib, "[ [ ] ]", 1, 32)
    assert st == "WISP_OK" and len(got) == 0


@pytest.mark.parametrize("text,is_float,bits", [
    ("[1.5]", 0, 64), ("[1e3]", 0, 64), ("[2.0]", 0, 32), ("[2147483648]", 0, 32), ("[-2147483649]", 0, 32),
    ("[9223372036854775808]", 0, 64), ("[-9223372036854775809]", 0, 64), ("[18446744073709551616]", 0, 64),
    ("[01]", 0, 64), ("[-]", 0, 64), ("[1,]", 0, 64), ("[,1]", 1, 32), ("[1 2]", 1, 32), ("[null]", 1, 32),
    ('["1"]', 1, 32), ("[true]", 0, 64), ("[1", 0, 64), ("[1.]", 1, 64), ("[.5]", 1, 64), ("[+1]", 0, 64),
    ("[[1]", 0, 64), ("{1}", 0, 64), ("[1]]", None, None),
])
def test_refuses(lib, text, is_float, bits):
    if is_float is None:      # a list followed by more: it stops at its own ']'
        st, got, used = read(lib, text, 0, 64)
        assert st == "WISP_OK" and used == 3
        return
    st, _, _ = read(lib, text, is_float, bits, tail=b"")
    assert st == "WISP_EPARSE", (text, st)


def test_cap(lib):
    st, got, _ = read(lib, "[1, 2, 3]", 0, 64, cap=2)
    assert st == "WISP_ELIMIT"
    st, got, _ = read(lib, "[1, 2, 3]", 0, 64, cap=3)
    assert st == "WISP_OK" and list(got) == [1, 2, 3]
