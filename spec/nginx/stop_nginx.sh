# stop_nginx.sh — sourced by spec/nginx/*.sh: stop_nginx stops the nginx started under $prefix
# ($nginx_bin set once it is started): QUIT, up to 5 s for the workers to finish, then KILL.
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
