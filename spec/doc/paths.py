#!/usr/bin/env python3
"""paths.py — checks that the file paths and markdown links of the documents resolve in the tree.

Every markdown link [text](target) that is not a URL or an anchor, and every path-like word in
`backticks` (a word with a '/' under a top-level folder of the repository, or a file name ending
in a source or document extension), must name a file or folder: relative to the repository root,
to the document's folder, or (for results files) to scripts/results/. Braces expand
(`transform_score_{f32,f16,i8}.cu`); `-run2.json` is a results file's suffix (the index shortens a
name given just before); words with placeholders (NAME, DIR, <x>, $VAR, *), build
outputs (build/...) and generated files (.wisp, .libsvm, ...) are skipped.

  python3 spec/doc/paths.py [DOC.md ...]      (default: the documents listed below)
prints one "not ok" line per path that does not resolve, then "paths: N passed, N failed".
"""
import os
import re
import sys

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOCS = ["README.md", "engine/README.md", "engine/COLUMNS.md", "kernels/README.md",
        "engine/bindings/spark/README.md", "scripts/README.md", "scripts/results/README.md",
        "scripts/results/SCHEMA.md"]
TOP = ("engine/", "kernels/", "lua/", "scripts/", "spec/", "examples/", "shared/")
EXT = (".c", ".h", ".cu", ".cuh", ".lua", ".py", ".sh", ".md", ".json", ".java", ".scala", ".mk",
       ".cpp", ".hpp", ".yaml", ".toml", ".rockspec", ".cc")
SKIP = re.compile(r"[<>$*]|^\.devdeps/|\b(NAME|DIR|FILE|MODEL|MODELS|OUT|IN|SCRIPT|TARGET|N)\b|^build[-/]|^/|^~")
GENERATED = (".wisp", ".libsvm", ".jsonl", ".csv", ".tsv", ".txt", ".pkl", ".onnx", ".vw")
PLACEHOLDERS = {"script.lua", "columns.json", "placement.json", "trace.json", "config.json"}


def expand(word):
    m = re.search(r"\{([^{}]*)\}", word)
    if not m:
        return [word]
    out = []
    for alt in m.group(1).split(","):
        out.extend(expand(word[:m.start()] + alt + word[m.end():]))
    return out


def candidates(text):
    """(line, path) for every link target and path-like word in backticks."""
    for n, line in enumerate(text.split("\n"), 1):
        for m in re.finditer(r"\]\(([^)\s]+)\)", line):
            target = m.group(1).split("#")[0]
            if target and not re.match(r"[a-z]+:", target):
                yield n, target
        for m in re.finditer(r"`([^`]+)`", line):
            for word in m.group(1).split():
                word = word.lstrip("('\"").rstrip(".,;:)'\"")
                word = re.sub(r":\d+(-\d+)?$", "", word)          # file.c:12
                if not word or SKIP.search(word) or word.endswith(GENERATED) or word in PLACEHOLDERS:
                    continue
                if word.startswith(TOP) or ("/" in word and word.endswith(EXT)) or \
                        (word.endswith(EXT) and re.match(r"^[\w.{},-]+$", word)):
                    yield n, word


def resolves(path, docdir):
    if path.startswith("-") and path.endswith(".json"):
        # the results index shortens a file named just before to its suffix: `-run2.json`
        results = os.path.join(ROOT, "scripts", "results")
        return any(f.endswith(path) for f in os.listdir(results))
    for base in (ROOT, docdir, os.path.join(ROOT, "scripts", "results")):
        if os.path.exists(os.path.join(base, path)):
            return True
    # a bare file name: somewhere in the tree (engine/README.md names files inside its folders)
    if "/" not in path.rstrip("/"):
        for d, _, files in os.walk(ROOT):
            if "/build" in d or "/.git" in d:
                continue
            if path in files:
                return True
    return False


def main(docs):
    passed = failed = 0
    for doc in docs:
        full = os.path.join(ROOT, doc)
        docdir = os.path.dirname(full)
        with open(full, encoding="utf-8") as f:
            text = f.read()
        seen = set()
        for n, word in candidates(text):
            for path in expand(word):
                if (path, n) in seen:
                    continue
                seen.add((path, n))
                if resolves(path, docdir):
                    passed += 1
                else:
                    failed += 1
                    print("not ok - %s:%d: %s does not resolve" % (doc, n, path))
    print("paths: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or DOCS))
