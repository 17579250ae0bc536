#!/bin/sh
# serve.sh — render examples/openresty/nginx.conf into a prefix and run nginx there (foreground, or --render-only).
#
#   examples/openresty/serve.sh                       # the demo model (built by `make demo` if missing) on 127.0.0.1:8080
#   examples/openresty/serve.sh --models ctr=/srv/ctr.wisp --port 9000 --workers 4 --device gpu
#   examples/openresty/serve.sh --render-only --prefix /tmp/p ...   # write PREFIX/conf/nginx.conf, print the nginx command
#
# Options: --prefix DIR (default build/openresty), --port N (8080), --models name=path[,...]
# (default demo=build/demo/model.wisp unless --model-repository is given; each file is version 1
# of its name), --model-repository DIR (MODELS/name/N/model.wisp: every model directory served,
# new versions and models picked up while running), --version-policy latest[:N]|all|specific:V,...
# (latest:1; a model's MODELS/name/config.json "version_policy" overrides it), --workers N (2), --device auto|cpu|gpu|gpu:N (auto),
# --mode device|inline|thread|async|auto (device: inline on a CPU, auto on a GPU),
# --batching off|on|auto (off), --threads N (thread pool, 2),
# --max-body SIZE (8m), --max-rows N (10000), --build DIR ($WISP_BUILD or build),
# --header-buffer SIZE (client_header_buffer_size, 64k: a request up to that size is read at once),
# --cpu-affinity auto|off|"MASK ..." (worker_cpu_affinity: auto = one worker per core, in
# order; or one binary CPU mask a worker, rightmost digit CPU 0, e.g. "01 10"; off by default;
# scripts/bench/bench_nginx.sh --pin passes masks),
# --user NAME|auto (the workers' user: started as root, nginx runs them as nobody, who must
# read lua/, libwisp.so and the models; auto, the default, says root when started as root
# and a directory above the checkout or the build is closed to others).
# --admin-port N (a second listener on 127.0.0.1:N for the admin endpoints: :reload,
# /metrics and the v2 repository extension (/v2/repository/...) are then served there only,
# and answer 403 on --port; without it, the default, every endpoint is on --port).
# Works with Debian's nginx and with the same packages unpacked under /opt/devdeps.
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
prefix="$root/build/openresty"; port=8080; models=""; repository=""; policy="latest:1"; workers=2; device=auto; mode=device
batching=off; threads=2; user=auto; max_body=8m; max_rows=10000; header_buffer=64k; affinity=off; admin_port=""; build="${WISP_BUILD:-build}"; render_only=0
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix=$2; shift 2;; --port) port=$2; shift 2;; --models) models=$2; shift 2;;
        --model-repository) repository=$2; shift 2;; --version-policy) policy=$2; shift 2;;
        --workers) workers=$2; shift 2;; --device) device=$2; shift 2;; --mode) mode=$2; shift 2;;
        --batching) batching=$2; shift 2;; --threads) threads=$2; shift 2;; --max-body) max_body=$2; shift 2;;
        --max-rows) max_rows=$2; shift 2;; --build) build=$2; shift 2;; --render-only) render_only=1; shift;;
        --user) user=$2; shift 2;; --header-buffer) header_buffer=$2; shift 2;;
        --cpu-affinity) affinity=$2; shift 2;; --admin-port) admin_port=$2; shift 2;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0;;
        *) echo "serve.sh: unknown option '$1' (try --help)" >&2; exit 2;;
    esac
done
case "$build" in /*) ;; *) build="$root/$build";; esac
case "$prefix" in /*) ;; *) prefix="$(pwd)/$prefix";; esac

# nginx, its modules and lua-resty-core: Debian's, or /opt/devdeps (the GPU machine)
dd=/opt/devdeps
nginx_bin=$(command -v nginx 2>/dev/null || true)
[ -z "$nginx_bin" ] && [ -x /usr/sbin/nginx ] && nginx_bin=/usr/sbin/nginx
[ -z "$nginx_bin" ] && [ -x $dd/usr/sbin/nginx ] && nginx_bin=$dd/usr/sbin/nginx
[ -z "$nginx_bin" ] && { echo "serve.sh: nginx not found (apt-get install nginx libnginx-mod-http-lua lua-resty-core)" >&2; exit 1; }
moddir=""
for d in /usr/lib/nginx/modules $dd/usr/lib/nginx/modules; do
    [ -f "$d/ngx_http_lua_module.so" ] && { moddir=$d; break; }
done
[ -z "$moddir" ] && { echo "serve.sh: ngx_http_lua_module.so not found (libnginx-mod-http-lua)" >&2; exit 1; }
lua_path="$root/lua/?.lua;$root/lua/?/init.lua"
for d in /usr/share/lua/5.1 $dd/usr/share/lua/5.1; do
    [ -f "$d/resty/core.lua" ] && lua_path="$lua_path;$d/?.lua;$d/?/init.lua"
done
lua_path="$lua_path;;"
lua_cpath=""
for d in /usr/lib/x86_64-linux-gnu/lua/5.1 $dd/usr/lib/x86_64-linux-gnu/lua/5.1; do
    [ -d "$d" ] && lua_cpath="$lua_cpath$d/?.so;"
done
lua_cpath="$lua_cpath;"

if [ -n "$repository" ]; then
    case "$repository" in /*) ;; *) repository="$(pwd)/$repository";; esac
    [ -d "$repository" ] || { echo "serve.sh: --model-repository: $repository is not a directory" >&2; exit 2; }
fi
case "$policy" in
    latest|latest:[1-9]*|all|specific:[1-9]*) ;;
    *) echo "serve.sh: --version-policy: latest[:N], all or specific:V,V,... expected, got '$policy'" >&2; exit 2;;
esac
if [ -z "$models" ] && [ -z "$repository" ]; then
    if [ ! -f "$build/demo/model.wisp" ]; then
        echo "serve.sh: building the demo model (make demo)" >&2
        (cd "$root" && make -s demo BUILD="$build" >/dev/null)
    fi
    models="demo=$build/demo/model.wisp"
fi
[ -f "$build/libwisp.so" ] || { echo "serve.sh: $build/libwisp.so missing (run make)" >&2; exit 1; }

closed_to_others() {   # closed_to_others PATH: a directory on the way is not o+x
    p=$1
    while [ -n "$p" ] && [ "$p" != / ]; do
        [ -d "$p" ] && [ -z "$(find "$p" -maxdepth 0 -perm -o+x 2>/dev/null)" ] && return 0
        p=$(dirname "$p")
    done
    return 1
}
user_line=""
if [ "$user" = auto ]; then
    if [ "$(id -u)" = 0 ] && { closed_to_others "$root/lua/wisp" || closed_to_others "$build"; }; then user_line="user root;"; fi
elif [ -n "$user" ]; then user_line="user $user;"; fi
affinity_line=""
case "$affinity" in
    off|"") ;;
    auto|auto\ *) affinity_line="worker_cpu_affinity $affinity;";;
    *[!01\ ]*) echo "serve.sh: --cpu-affinity: auto, off or binary masks (\"01 10\") expected, got '$affinity'" >&2; exit 2;;
    *) affinity_line="worker_cpu_affinity $affinity;";;
esac
admin=open; admin_sed='/@ADMIN_BEGIN@/,/@ADMIN_END@/d'
if [ -n "$admin_port" ]; then
    case "$admin_port" in *[!0-9]*) echo "serve.sh: --admin-port: a port number expected, got '$admin_port'" >&2; exit 2;; esac
    [ "$admin_port" = "$port" ] && { echo "serve.sh: --admin-port must differ from --port" >&2; exit 2; }
    admin=separate; admin_sed='/@ADMIN_\(BEGIN\|END\)@/d'
fi
mkdir -p "$prefix/conf" "$prefix/logs" "$prefix/temp"
cp "$root/examples/openresty/errors.conf" "$prefix/conf/errors.conf"
sed -e "$admin_sed" -e "s|@ADMIN_PORT@|$admin_port|g" -e "s|@ADMIN@|$admin|g" -e "s|@MODULE_DIR@|$moddir|g" -e "s|@USER_LINE@|$user_line|g" -e "s|@AFFINITY_LINE@|$affinity_line|g" -e "s|@HEADER_BUFFER@|$header_buffer|g" -e "s|@WORKERS@|$workers|g" -e "s|@WISP_LIB@|$build/libwisp.so|g" \
    -e "s|@THREADS@|$threads|g" -e "s|@MAX_BODY@|$max_body|g" -e "s|@LUA_PATH@|$lua_path|g" \
    -e "s|@LUA_CPATH@|$lua_cpath|g" -e "s|@MODELS@|$models|g" -e "s|@MODEL_REPOSITORY@|$repository|g" -e "s|@VERSION_POLICY@|$policy|g" -e "s|@DEVICE@|$device|g" \
    -e "s|@MODE@|$mode|g" -e "s|@BATCHING@|$batching|g" -e "s|@MAX_ROWS@|$max_rows|g" -e "s|@PORT@|$port|g" \
    "$root/examples/openresty/nginx.conf" > "$prefix/conf/nginx.conf"
if [ "$render_only" = 1 ]; then
    echo "$nginx_bin -p $prefix -c conf/nginx.conf"
    exit 0
fi
echo "serve.sh: http://127.0.0.1:$port  (models $models${repository:+, repository $repository}; logs in $prefix/logs; Ctrl-C stops)" >&2
exec "$nginx_bin" -p "$prefix" -c conf/nginx.conf -g 'daemon off;'
