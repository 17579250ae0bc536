# free_port.sh — sourced by spec/nginx/harness.sh and scripts/bench/bench_nginx_lib.sh (bash): free_port prints a
# loopback
# port nothing listens on (a random one in 20000-59999, probed with bash's /dev/tcp; up to 50 tries), or nothing.
free_port() {
    local p
    for _ in $(seq 1 50); do
        p=$((20000 + RANDOM % 40000))
        if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then echo "$p"; return 0; fi
    done
    return 1
}
