"""wisp_json_numbers (engine/parse/json_numbers.c) on both of its paths, through ctypes on $WISP_BUILD/libwisp.so:
the text ending with the list's ']' (the sentinel path, digit loops without a bound check: what the
service's Lua layer always hands over) and the text going on after it (the guarded path). On random
lists (compact, as a client's JSON encoder writes them, and with blanks) and on random token soup,
both give what json.loads + numpy give, or both refuse what json.loads refuses."""
import ctypes
import json
import random

import numpy as np
import pytest

NP = {(0, 32): np.int32, (0, 64): np.int64, (1, 32): np.float32, (1, 64): np.float64}


def read(lib, raw, is_float, bits, cap=10000):
    out = np.zeros(max(cap, 1), dtype=NP[(is_float, bits)])
    cnt, used = ctypes.c_size_t(), ctypes.c_size_t()
    rc = lib.wisp_json_numbers(
        raw, len(raw), is_float, bits, out.ctypes.data, cap, ctypes.byref(cnt), ctypes.byref(used)
    )
    return lib.wisp_err_name(rc).decode(), out[:cnt.value].copy(), used.value


def both(lib, text, is_float, bits, cap=10000):
    """(the sentinel path's answer, the guarded path's): text alone, then text + ' }'"""
    raw = text.encode()
    return read(lib, raw, is_float, bits, cap), read(lib, raw + b" }", is_float, bits, cap)


def want_of(text, is_float, bits):
    """json.loads + numpy's reading of text as a flat or nested list of numbers, or None (refused)"""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    flat = []

    def walk(v):
        if isinstance(v, list):
            for x in v:
                if not walk(x):
                    return False
            return True
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        flat.append(v)
        return True
    if not isinstance(doc, list) or not walk(doc):
        return None
    if is_float:
        return np.array([float(x) for x in flat], dtype=np.float64).astype(NP[(1, bits)])
    lo, hi = (-2 ** 31, 2 ** 31) if bits == 32 else (-2 ** 63, 2 ** 63)
    if any(isinstance(x, float) or not lo <= x < hi for x in flat):
        return None
    return np.array(flat, dtype=NP[(0, bits)])


def tok(rng, is_float):
    r = rng.random()
    if r < 0.35:
        return "1" if rng.random() < 0.5 else str(rng.randint(0, 10 ** rng.randint(1, 8)))     # ids, binary values
    if r < 0.5:
        return str(-rng.randint(0, 10 ** rng.randint(1, 9)))
    if r < 0.8 and is_float:
        return "%.*f" % (rng.randint(1, 9), rng.uniform(-1000, 1000))                           # short decimals
    if r < 0.9 and is_float:
        return repr(rng.uniform(-1e6, 1e6))
    if is_float:
        return rng.choice(["0", "-0", "0.0", "1e5", "2.5E-3", "12345678.12345678", "123456789", "0.000000001",
                           "9007199254740993", "1.7976931348623157e308", "4.9e-324"])
    return str(rng.choice([0, 2 ** 31 - 1, -2 ** 31, 2 ** 53 + 1, 2 ** 63 - 1, -2 ** 63, 12345678, 123456789]))


@pytest.mark.parametrize("seed", range(30))
def test_random_lists_both_paths(lib, seed):
    rng = random.Random(seed)
    for is_float, bits in ((0, 32), (0, 64), (1, 32), (1, 64)):
        toks = [tok(rng, is_float) for _ in range(rng.choice([0, 1, 2, 10, 100, 1000]))]
        if not is_float and bits == 32:
            toks = [t for t in toks if -2 ** 31 <= int(t) < 2 ** 31]
        sep = rng.choice([",", ",", ", ", ",\n  "])
        text = "[" + sep.join(toks) + "]"
        want = want_of(text, is_float, bits)
        for st, got, used in both(lib, text, is_float, bits):
            assert st == "WISP_OK" and used == len(text), (text[:200], st)
            if is_float:
                assert np.array_equal(got, want, equal_nan=True), text[:200]
            else:
                assert [int(x) for x in got] == [int(x) for x in want], text[:200]


SOUP = "0123456789" * 3 + "--..eE+,,[] \n"


@pytest.mark.parametrize("seed", range(10))
def test_token_soup_both_paths_agree_with_json_loads(lib, seed):
    """random bytes of the lists' alphabet: read as json.loads reads them, or refused, on both paths"""
    rng = random.Random(100 + seed)
    for _ in range(400):
        is_float, bits = rng.choice(((0, 32), (0, 64), (1, 32), (1, 64)))
        body = "".join(rng.choice(SOUP) for _ in range(rng.randint(0, 40)))
        if rng.random() < 0.5:                   # mostly valid: comma-separated tokens, one mutated
            toks = [tok(rng, is_float) for _ in range(rng.randint(1, 30))]
            k = rng.randrange(len(toks))
            toks[k] = toks[k][:rng.randint(0, len(toks[k]))] + rng.choice(SOUP) + toks[k][rng.randint(0, len(toks[k])):]
            body = ",".join(toks)
        text = "[" + body + "]"
        want = want_of(text, is_float, bits)
        for st, got, used in both(lib, text, is_float, bits):
            if want is None:
                # refused, or a shorter valid list followed by more ("[1]]"): it stops at its own ']'
                assert st != "WISP_OK" or used < len(text), (text, st)
            else:
                assert st == "WISP_OK" and used == len(text), (text, st)
                if is_float:
                    assert np.array_equal(got, want, equal_nan=True), text
                else:
                    assert [int(x) for x in got] == [int(x) for x in want], text


def test_cap_on_both_paths(lib):
    text = "[" + ",".join(["7"] * 300) + "]"
    for st, got, _ in both(lib, text, 0, 32, cap=299):
        assert st == "WISP_ELIMIT"
    for st, got, _ in both(lib, text, 0, 32, cap=300):
        assert st == "WISP_OK" and len(got) == 300 and set(got.tolist()) == {7}
