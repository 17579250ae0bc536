#!/usr/bin/env python3
"""vw_golden.py — golden vectors for wisp's Vowpal Wabbit support, computed by the real VW (the vowpalwabbit PyPI package).

Usage: spec/data/gen/vw_golden.py [--out spec/data]      (pip install vowpalwabbit)

Writes spec/data/vw_golden.json, read by spec/c/test_vw.c:
  murmur3      MurmurHash3_x86_32 of byte strings under seeds: VW's hash_feature
               with "--hash all -b 32 --sparse_weights" (uniform_hash, no mask)
  hashstring   VW's default hasher (hash_feature with "--hash strings"):
               digit strings as integers + seed, trimming, everything else murmur3
  namespaces   hash_space(name) under several --hash_seed / --hash values
  lines        VW's own parse of text lines: every (index, value) of the
               example's feature groups (indices / stride, masked to -b 31),
               constant included, after setup_example
  predictions  VW's raw prediction (--loss_function logistic, no link, so the
               sum itself) of lines under option sets with -q interactions,
               every weight i of the 2^16 table set to weight(i) below; the
               C test recomputes the sum from wisp's parse with the same weights
weight(i) = float32(((i * 2654435761) mod 2^32) / 2^32 * 0.2 - 0.1)
"""
import argparse
import json
import os
import random
import struct
import sys

import vowpalwabbit
import pylibvw


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def weight(i):
    return f32(((i * 2654435761) % 2**32) / 2**32 * 0.2 - 0.1)


def workspace(args):
    return vowpalwabbit.Workspace("--quiet " + args)


def rand_name(rng):
    kind = rng.random()
    if kind < 0.25:
        return str(rng.randrange(0, 10**rng.randrange(1, 12)))
    if kind < 0.3:
        return "0" + str(rng.randrange(0, 999))
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+.=/^*#@!~"
    name = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 24)))
    if rng.random() < 0.05:
        name += "é" if rng.random() < 0.5 else "日本"
    return name


def rand_value(rng):
    k = rng.random()
    if k < 0.3:
        return "%d" % rng.randrange(-50, 50)
    if k < 0.6:
        return "%.*f" % (rng.randrange(1, 8), rng.uniform(-20, 20))
    if k < 0.75:
        return "%.3e" % rng.uniform(-1e3, 1e3)
    if k < 0.8:
        return "." + str(rng.randrange(1, 99999))
    if k < 0.85:
        return "+%d" % rng.randrange(0, 9)          # strtof path in VW
    if k < 0.9:
        return "%.2E" % rng.uniform(-1, 1)
    return "%.12f" % rng.uniform(-3, 3)           # more than float precision


def rand_line(rng, namespaces):
    label = rng.choice(["1", "-1", "0", "1 2.5", "-1 0.5", "1 1 'tag%d" % rng.randrange(100), "", "'t",
                        "1 2 0", "-1 0.5 0 'tag%d" % rng.randrange(10)])
    parts = [label]
    for _ in range(rng.randrange(0, 5)):
        ns = rng.choice(namespaces)
        head = "|" + ns
        if ns and rng.random() < 0.3:
            head += ":" + rand_value(rng)
        feats = []
        for _ in range(rng.randrange(0, 9)):
            r = rng.random()
            if r < 0.45:
                feats.append(rand_name(rng))
            elif r < 0.85:
                feats.append(rand_name(rng) + ":" + rand_value(rng))
            elif r < 0.92:
                feats.append(":" + rand_value(rng))                  # anonymous
            else:
                feats.append(rand_name(rng) + ":" + rng.choice(["abc", "x1", "red", "Q"]))   # string value
        sep = rng.choice([" ", " ", "\t", "  "])
        parts.append(head + (sep + sep.join(feats) if feats else ""))
    glue = rng.choice([" ", ""]) if parts[0] else ""
    line = parts[0] + glue + " ".join(parts[1:])
    return line if line.strip() else "1 |a blank"     # a blank line is no example


EDGE_LINES = [
    "1 |b:2 m",
    "1 |5 k 3",
    "1 |12 k",
    "1 |b m:0 n:1e2 o:-.5 q",
    "1 |b m:2|c n",
    "1 |b x |b y",
    "1 |bb x |bc y",
    "1 |b x x",
    "1 |b -7 +7 4294967296 4294967295 99999999999 007",
    "1 |b:2 p:abc q:3",
    "1 |b :3 :4 |c :5",
    "1 |b p:abc|c n",
    "1 |b 0.3:0.3 x:1e-3 y:123456789 z:.7e2 w:1e-45 u:3.4e18 t:0.000000000000000000000000000000000000000001",
    "1 2 0 'tag|b m",
    "1|b m",
    "|b m",
    "| a b c",
    "|a| b",
    "1 |a 1 2 3 |b 4 5 |c 6",
    "1 |a x:1.5 y:2.5 |b p:0.5 q:-2",
    "1\t|a\tx\ty",
    "\ufeff1 |a x",
    "-1 |a x:3.14159265358979 y:1e-10 z:-0.000001",
    "1 |a big:3487541014 big2:4159906722 neg:-2858633299 dec:2978940490.5 e:29789404.90e2",   # float accumulation order
    "1",
    "1 |",
    "1 |a",
]

PRED_OPTIONS = [
    "-b 16 -q ab",
    "-b 16 -q ab -q bc -q ca",
    "-b 16 -q aa -q ba --hash_seed 7",
    "-b 16 --noconstant --hash all -q bc",
    "-b 16 -q ab -q ba",
    "-b 16 --leave_duplicate_interactions -q ab -q ba",
    "-b 16 -q ab --ignore_linear a",
    "-b 16 --ignore c -q ab",
    "-b 16 --keep ab -q ab",
    "-b 16 --hash_seed 123456789 -q aa",
    "-b 16 --interactions ab",
]


def features(ws, line, mask):
    ex = ws.parse(line)
    stride = ws.get_stride()
    out = []
    for k in range(pylibvw.example.num_namespaces(ex)):
        o = pylibvw.example.namespace(ex, k)
        for i in range(pylibvw.example.num_features_in(ex, o)):
            idx = pylibvw.example.feature(ex, o, i) // stride
            out.append([idx & mask, pylibvw.example.feature_weight(ex, o, i)])
    ws.finish_example(ex)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--seed", type=int, default=20261129)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    gold = {"generator": "spec/data/gen/vw_golden.py", "vw_version": vowpalwabbit.__version__,
            "weight": "float32(((i * 2654435761) mod 2^32) / 2^32 * 0.2 - 0.1)"}

    # murmur3 (hash all, no mask)
    ws = workspace("-b 32 --sparse_weights --hash all")
    strings = ["", "a", "ab", "abc", "abcd", "abcde", "Constant", " ", " a ", "0", "123", "hello world",
               "é", "日本語", "\x01\x7f", "a" * 100]
    for n in range(0, 40):
        strings.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 _-") for _ in range(n)))
    seeds = [0, 1, 7, 0x9747b28c, 0xFFFFFFFF, 1009084850]
    gold["murmur3"] = [{"hex": s.encode().hex(), "seed": sd, "hash": ws.hash_feature(s, sd)}
                       for s in strings for sd in seeds]
    ws.finish()

    # hashstring (the default hasher)
    ws = workspace("-b 32 --sparse_weights")
    hs = ["0", "7", "123", "0123", "00", "4294967295", "4294967296", "99999999999", "18446744073709551617",
          " 12", "12 ", "\t5\t", "-7", "+7", "1.5", "1e3", "12a", "a12", "", " ", "x", "Constant", "é1"]
    gold["hashstring"] = [{"hex": s.encode().hex(), "seed": sd, "hash": ws.hash_feature(s, sd)}
                          for s in hs for sd in [0, 7, 1009084850, 0xFFFFFFF0]]
    ws.finish()

    # namespace hashes (VW's hash_space: the hasher with hash_seed; the default namespace is checked in "lines")
    gold["namespaces"] = []
    for opts in ["", "--hash_seed 7", "--hash all", "--hash all --hash_seed 99"]:
        ws = workspace("-b 32 --sparse_weights " + opts)
        for name in ["a", "b", "abc", "user", "5", "12", "0x", "é"]:
            gold["namespaces"].append({"options": opts, "hex": name.encode().hex(), "hash": ws.hash_space(name)})
        ws.finish()

    # parsed lines (linear features + constant), under several options
    lines = list(EDGE_LINES) + [rand_line(rng, ["a", "b", "c", "", "user", "5"]) for _ in range(150)]
    gold["lines"] = []
    for opts in ["-b 31", "-b 31 --hash_seed 7", "-b 31 --hash all", "-b 20 --noconstant"]:
        bits = int(opts.split()[1])
        ws = workspace(opts + " --sparse_weights")
        for ln in lines:
            gold["lines"].append({"options": opts, "line": ln, "features": features(ws, ln, (1 << bits) - 1)})
        ws.finish()

    # predictions with interactions
    plines = list(EDGE_LINES) + [rand_line(rng, ["a", "b", "c", "", "abc", "bz"]) for _ in range(100)]
    gold["predictions"] = []
    for opts in PRED_OPTIONS:
        ws = workspace(opts + " --loss_function logistic")
        n = 1 << 16
        for i in range(n):
            ws.set_weight(i, 0, weight(i))
        for ln in plines:
            ex = ws.example(ln)
            p = ws.predict(ex)
            ws.finish_example(ex)
            gold["predictions"].append({"options": opts, "line": ln, "raw": p})
        ws.finish()

    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "vw_golden.json")
    with open(path, "w") as f:            # JSON, one record per line
        items = []
        for k, v in gold.items():
            if isinstance(v, list):
                items.append("%s: [\n%s\n]" % (json.dumps(k), ",\n".join(json.dumps(r) for r in v)))
            else:
                items.append("%s: %s" % (json.dumps(k), json.dumps(v)))
        f.write("{\n" + ",\n".join(items) + "\n}\n")
    print("vw_golden: wrote %s: %d murmur3, %d hashstring, %d namespaces, %d lines, %d predictions (VW %s)" % (
        path, len(gold["murmur3"]), len(gold["hashstring"]), len(gold["namespaces"]), len(gold["lines"]),
        len(gold["predictions"]), gold["vw_version"]), file=sys.stderr)


if __name__ == "__main__":
    main()
