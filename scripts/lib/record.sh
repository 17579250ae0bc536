# record.sh — what every shell benchmark records and where (the shell one of three: record.lua,
# record.py); sourced from the project's root: `. scripts/lib/record.sh`.
#   record_take_flag "$@"; set -- $RECORD_ARGS   (or test "$1" = --record yourself): sets RECORD=1
#   record_commit            WISP_COMMIT when set, else git's short HEAD (+uncommitted), else "unknown (why)"
#   record_dir               scripts/results when RECORD=1 or WISP_RECORD=1, else build/results (made)
#   record_envelope WISP IN OUT   IN's JSON brought to scripts/results/SCHEMA.md (record.lua, run by WISP)
record_commit() {
    if [ -n "${WISP_COMMIT:-}" ]; then echo "$WISP_COMMIT"; return; fi
    _c=$(git rev-parse --short HEAD 2>/dev/null) || _c=""
    if [ -z "$_c" ]; then echo "unknown (WISP_COMMIT not set and no git checkout)"; return; fi
    if [ -n "$(git status --porcelain --untracked-files=no -- . ':!scripts/results' 2>/dev/null)" ]; then _c="$_c+uncommitted"; fi
    echo "$_c"
}
record_dir() {
    if [ "${RECORD:-0}" = 1 ] || [ "${WISP_RECORD:-0}" = 1 ]; then _d=scripts/results; else _d=build/results; fi
    mkdir -p "$_d" && echo "$_d"
}
record_envelope() {  # WISP IN OUT
    "$1" run scripts/lib/record.lua envelope "$2" "$3"
}
