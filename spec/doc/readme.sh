#!/bin/sh
# readme.sh — the README's doc test: runs every ```sh block of README.md whose first line is
# "# doc-test" and compares what it prints (stdout; stderr only where the block says 2>&1) with
# the ```text block that follows it, byte for byte (so probabilities to the printed digits).
# The blocks run in order in one scratch directory laid out as the repository root after
# `make demo`: build/wisp (and wisp.jar, libwisp.so) are $WISP_BUILD's, examples/ the repository's, build/demo is a fresh `examples/demo.lua --out`
# (with fewer data rows: no marked block reads data.libsvm); later blocks see earlier blocks' files.
#
# A block may say what it needs on its second line, "# needs: python" or "# needs: java" (or both,
# "# needs: python java"); without that line a block needs only build/wisp and the demo.
#   python  the virtual environment of the python suite, $WISP_PY_VENV (default $WISP_BUILD/py-venv,
#           as spec/python/run.sh, which spec/run.sh runs before this test, makes it and installs the
#           package into it), linked into the scratch root as build/py-venv: blocks run
#           build/py-venv/bin/python. Its python must import wisp, sklearn and pandas, or the block fails
#           naming the command that makes it; WISP_PYTHON=0 (the python suite switched off) skips it.
#   java    build/wisp.jar and a java on the PATH, or the block fails; WISP_JAVA=0 skips it.
# A skipped block prints "ok N - README.md:LINE # SKIP why" and counts as skipped, not passed.
# usage: WISP_BUILD=build sh spec/doc/readme.sh [README]
#   prints "readme: N passed, N failed" last (", N skipped" follows when a block was skipped)
build=${WISP_BUILD:-build}
cd "$(dirname "$0")/../.." || exit 2
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac
readme=${1:-README.md}
case "$readme" in /*) ;; *) readme="$PWD/$readme" ;; esac
rname=$(basename "$readme")
[ -x "$build/wisp" ] || { echo "readme: $build/wisp is missing (make BUILD=$build first)"; echo "readme: 0 passed, 1 failed"; exit 1; }
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/root/build" "$tmp/blocks"
ln -s "$build/wisp" "$tmp/root/build/wisp"
[ -f "$build/libwisp.so" ] && ln -s "$build/libwisp.so" "$tmp/root/build/libwisp.so"
[ -f "$build/wisp.jar" ] && ln -s "$build/wisp.jar" "$tmp/root/build/wisp.jar"
ln -s "$PWD/examples" "$tmp/root/examples"

# the blocks: N.sh (the commands), N.txt (the expected output), N.line (where the block starts)
awk -v dir="$tmp/blocks" '
    /^```/ && state == "" {
        if ($0 == "```sh") { state = "sh"; first = 1; second = 0; start = NR; next }
        if ($0 == "```text" && pending) { state = "text"; printf "" > (dir "/" n ".txt"); next }
        state = "other"; next
    }
    /^```$/ && state != "" {
        if (state == "sh" && marked) { pending = 1 }
        else if (state == "text") { pending = 0; close(dir "/" n ".txt") }
        state = ""; marked = 0; next
    }
    state == "sh" {
        if (first) {
            first = 0
            if ($0 == "# doc-test") { marked = 1; n++; printf "%d\n", start > (dir "/" n ".line"); close(dir "/" n ".line"); printf "" > (dir "/" n ".sh"); second = 1 }
            next
        }
        if (second) {
            second = 0
            if (marked && $0 ~ /^# needs:/) { sub(/^# needs:[ \t]*/, ""); print > (dir "/" n ".needs"); close(dir "/" n ".needs"); next }
        }
        if (marked) print >> (dir "/" n ".sh")
        next
    }
    state == "text" { print >> (dir "/" n ".txt"); next }
    # prose between a marked block and its output keeps the block pending; another block ends it
' "$readme"

# what a block needs (its "# needs:" line): prints nothing when it is there, else "skip: why" or
# "fail: why" (one line); links the python venv into the scratch root on first use
venv=${WISP_PY_VENV:-$build/py-venv}
case "$venv" in /*) ;; *) venv="$PWD/$venv" ;; esac
makevenv="WISP_BUILD=$build${WISP_PY_VENV:+ WISP_PY_VENV=$venv} sh spec/python/run.sh"
needs_check() {
    for need in $1; do
        case "$need" in
        python)
            if [ "${WISP_PYTHON:-1}" = 0 ]; then echo "skip: needs python; WISP_PYTHON=0 switches the python suite off"; return; fi
            if [ ! -x "$venv/bin/python" ]; then
                echo "fail: needs python: $venv/bin/python is missing; make it (venv, pip install ., the specs) with: $makevenv"; return
            fi
            if ! missing=$(cd "$tmp" && "$venv/bin/python" -c '
import importlib.util
print(" ".join(m for m in ("wisp", "sklearn", "pandas") if importlib.util.find_spec(m) is None))' 2>&1) || [ -n "$missing" ]; then
                case " $missing " in
                *" wisp "*) how="the package: $makevenv" ;;
                *) how="$venv/bin/pip install scikit-learn pandas" ;;
                esac
                echo "fail: needs python: $venv/bin/python cannot import $missing; install $how"; return
            fi
            [ -e "$tmp/root/build/py-venv" ] || ln -s "$venv" "$tmp/root/build/py-venv" ;;
        java)
            if [ "${WISP_JAVA:-1}" = 0 ]; then echo "skip: needs java; WISP_JAVA=0 switches the java suite off"; return; fi
            if [ ! -f "$build/wisp.jar" ]; then echo "fail: needs java: $build/wisp.jar is missing; make it with: make BUILD=$build java"; return; fi
            command -v java >/dev/null 2>&1 || { echo "fail: needs java: no java on the PATH (Debian: apt-get install openjdk-17-jdk-headless)"; return; }
            ;;
        *) echo "fail: '# needs: $need' is not a need this test knows (python, java)"; return ;;
        esac
    done
}

passed=0 failed=0 skipped=0
blocks=$(ls "$tmp/blocks" | sed -n 's/^\([0-9]*\)\.sh$/\1/p' | sort -n)
if [ -z "$blocks" ]; then
    echo "not ok - $readme has no block marked # doc-test"; failed=1
else
    start=$(date +%s)
    if "$build/wisp" run examples/demo.lua --out "$tmp/root/build/demo" --rows 2000 >"$tmp/demo.log" 2>&1; then
        echo "# make demo (examples/demo.lua --rows 2000) into a scratch build/demo: $(( $(date +%s) - start )) s"
    else
        echo "not ok - examples/demo.lua failed:"; sed 's/^/#   /' "$tmp/demo.log"; failed=1
    fi
fi
for n in $blocks; do
    [ "$failed" -ne 0 ] && [ ! -d "$tmp/root/build/demo" ] && break
    line=$(cat "$tmp/blocks/$n.line")
    if [ ! -f "$tmp/blocks/$n.txt" ]; then
        echo "not ok $n - $rname:$line: a # doc-test block without a \`\`\`text block after it"
        failed=$((failed + 1)); continue
    fi
    if [ -f "$tmp/blocks/$n.needs" ]; then
        verdict=$(needs_check "$(cat "$tmp/blocks/$n.needs")")
        case "$verdict" in
        skip:*) echo "ok $n - $rname:$line # SKIP ${verdict#skip: }"; skipped=$((skipped + 1)); continue ;;
        fail:*) echo "not ok $n - $rname:$line: ${verdict#fail: }"; failed=$((failed + 1)); continue ;;
        esac
    fi
    (cd "$tmp/root" && sh "$tmp/blocks/$n.sh") >"$tmp/blocks/$n.got" 2>"$tmp/blocks/$n.err"
    if cmp -s "$tmp/blocks/$n.txt" "$tmp/blocks/$n.got"; then
        echo "ok $n - $rname:$line"; passed=$((passed + 1))
    else
        echo "not ok $n - $rname:$line: the output differs from the README's (- README, + got):"
        sed 's/^/#   $ /' "$tmp/blocks/$n.sh"
        diff -u "$tmp/blocks/$n.txt" "$tmp/blocks/$n.got" | tail -n +3 | head -n 40 | sed 's/^/#   /'
        [ -s "$tmp/blocks/$n.err" ] && { echo "#   stderr:"; head -n 10 "$tmp/blocks/$n.err" | sed 's/^/#   /'; }
        failed=$((failed + 1))
    fi
done
if [ "$skipped" -gt 0 ]; then echo "readme: $passed passed, $failed failed, $skipped skipped"; else echo "readme: $passed passed, $failed failed"; fi
[ "$failed" -eq 0 ]
