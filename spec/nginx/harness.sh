# harness.sh — what spec/nginx's scripts (run.sh, property.sh, svcfuzz.sh, soak.sh) share, sourced by bash from the
# checkout's root with SUITE set: the build and its CLI ($build, $W), the device ($device: WISP_NGINX_DEVICE, or gpu
# with WISP_TEST_GPU=1), the counts (ok, bad; finish prints $replay_cmd when something failed, then the last line
# "SUITE: N passed, N failed"), the scratch folders $tmp, $d (models) and $prefix (nginx's), removed on exit unless
# WISP_KEEP is set (a script's on_exit runs first), need TOOL... (each there, and nginx: $nginx_bin), stop_nginx and
# free_port (spec/nginx/free_port.sh).
root=$(pwd)
build=${WISP_BUILD:-build}
case "$build" in /*) ;; *) build="$root/$build";; esac
W="$build/wisp"
device=${WISP_NGINX_DEVICE:-cpu}
[ "${WISP_TEST_GPU:-0}" = 1 ] && [ -z "${WISP_NGINX_DEVICE:-}" ] && device=gpu
pass=0; fail=0; replay_cmd=""
ok()  { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
finish() {
    [ "$fail" -ne 0 ] && [ -n "$replay_cmd" ] && echo "$replay_cmd"
    echo "$SUITE: $pass passed, $fail failed"
}

tmp=$(mktemp -d "/tmp/wisp-$SUITE.XXXXXX")
chmod 755 "$tmp"     # nginx workers run as an unprivileged user when started by root: they read the models here
prefix="$tmp/prefix"
d="$tmp/m"; mkdir -p "$d"; chmod 755 "$d"
nginx_bin=""

# stop_nginx: the nginx started under $prefix ($nginx_bin set once it is started) stopped: QUIT, up to 5 s for
# the workers to finish, then KILL
stop_nginx() {
    if [ -n "$nginx_bin" ] && [ -f "$prefix/logs/nginx.pid" ]; then
        pid=$(cat "$prefix/logs/nginx.pid" 2>/dev/null)
        if [ -n "$pid" ]; then
            kill -QUIT "$pid" 2>/dev/null
            for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null
        fi
        rm -f "$prefix/logs/nginx.pid"
    fi
}
harness_exit() {
    if type on_exit >/dev/null 2>&1; then on_exit; fi
    stop_nginx
    if [ -n "${WISP_KEEP:-}" ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap harness_exit EXIT
trap 'exit 1' INT TERM

# need TOOL...: each tool on the PATH (or a path that exists), and nginx; else the run ends, failed
need() {
    for t in "$@"; do
        if ! command -v "$t" >/dev/null 2>&1; then bad "missing $t (make BUILD=... all test-tools)"; finish; exit 1; fi
    done
    nginx_bin=$(command -v nginx 2>/dev/null || ls /usr/sbin/nginx /opt/devdeps/usr/sbin/nginx 2>/dev/null | head -n 1)
    if [ -z "$nginx_bin" ]; then bad "nginx not installed (make deps-test installs it)"; finish; exit 1; fi
}

. "$root/spec/nginx/free_port.sh"
