/* cli_lua.c — `wisp run SCRIPT.lua` and `wisp repl`: LuaJIT embedded, the wisp module on its path. */
#include "wisp.h"

#include <editline/readline.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Where the Lua modules are: $WISP_LUA_PATH, the source tree next to the
 * binary (build/wisp -> lua/), the install prefix next to the binary
 * (bin/wisp -> share/lua/5.1), ./lua, then the configured install directory. */
static void find_lua_dir(char *out, size_t len)
{
    const char *env = getenv("WISP_LUA_PATH");
    if (env && *env) { snprintf(out, len, "%s", env); return; }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        static const char *rel[] = { "/../lua", "/../share/lua/5.1" };
        for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
            char cand[PATH_MAX + 32], probe[PATH_MAX + 64];
            snprintf(cand, sizeof cand, "%s%s", exe, rel[i]);
            snprintf(probe, sizeof probe, "%s/wisp", cand);
            if (is_dir(probe)) { snprintf(out, len, "%s", cand); return; }
        }
    }
    if (is_dir("lua/wisp")) { snprintf(out, len, "lua"); return; }   /* run from a source tree */
    snprintf(out, len, "%s", WISP_LUA_DIR);
}

static int traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (!msg) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    luaL_traceback(L, L, msg, 1);
    return 1;
}

static lua_State *new_state(void)
{
    lua_State *L = luaL_newstate();
    if (!L) { fprintf(stderr, "wisp: cannot create a Lua state (out of memory)\n"); return NULL; }
    luaL_openlibs(L);
    char dir[PATH_MAX];
    find_lua_dir(dir, sizeof dir);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "path");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", dir, dir, lua_tostring(L, -1));
    lua_setfield(L, -3, "path");
    lua_pop(L, 2);
    return L;
}

static int docall(lua_State *L, int nargs, int nres)
{
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, traceback);
    lua_insert(L, base);
    int st = lua_pcall(L, nargs, nres, base);
    lua_remove(L, base);
    return st;
}

static int report(lua_State *L, int st)
{
    if (st && !lua_isnil(L, -1)) {
        const char *msg = lua_tostring(L, -1);
        fprintf(stderr, "wisp: %s\n", msg ? msg : "(error object is not a string)");
        lua_pop(L, 1);
    }
    return st;
}

int wisp__cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));   /* cli.c */

int wisp__cli_run(int argc, char **argv)
{
    if (argc < 2) return wisp__cli_usage_error("a SCRIPT.lua is required");
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs("usage: wisp run SCRIPT.lua [ARGS...]\n\n"
              "Runs a Lua script under LuaJIT with `require \"wisp\"` available; the script\n"
              "sees its arguments in the global `arg` (arg[0] is the script, as with luajit).\n", stdout);
        return 0;
    }
    lua_State *L = new_state();
    if (!L) return 1;
    lua_createtable(L, argc, 1);
    for (int i = 1; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - 1);
    }
    lua_setglobal(L, "arg");
    int st = luaL_loadfile(L, argv[1]);
    if (st == 0) {
        for (int i = 2; i < argc; i++) lua_pushstring(L, argv[i]);
        st = docall(L, argc - 2, 0);
    }
    report(L, st);
    lua_close(L);
    return st ? 1 : 0;
}

static const char repl_prelude[] =
    "wisp = require 'wisp'\n"
    /* tables print as {k = v, ...} (sorted keys, two levels deep), everything else as tostring */
    "local function show(v, depth)\n"
    "  if type(v) == 'string' then return string.format('%q', v) end\n"
    "  if type(v) ~= 'table' or depth > 2 then return tostring(v) end\n"
    "  local keys, parts = {}, {}\n"
    "  for k in pairs(v) do keys[#keys + 1] = k end\n"
    "  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)\n"
    "  for _, k in ipairs(keys) do\n"
    "    local key = type(k) == 'number' and '' or (tostring(k) .. ' = ')\n"
    "    parts[#parts + 1] = key .. show(v[k], depth + 1)\n"
    "  end\n"
    "  return '{' .. table.concat(parts, ', ') .. '}'\n"
    "end\n"
    "function __wisp_repl_print(...)\n"
    "  local out = {}\n"
    "  for i = 1, select('#', ...) do out[i] = show((select(i, ...)), 1) end\n"
    "  print(table.concat(out, '\\t'))\n"
    "end\n"
    "local path = ...\n"
    "if path then\n"
    "  local m, err = wisp.load(path)\n"
    "  if not m then return tostring(err) end\n"
    "  model = m\n"
    "  session = m:session('auto')\n"
    "end\n"
    /* the ':' commands (lua/wisp/repl.lua); a missing module leaves plain Lua working */
    "local ok, repl = pcall(require, 'wisp.repl')\n"
    "if ok then\n"
    "  repl.setup(_G)\n"
    "  function __wisp_repl_command(line) repl.command(line, _G) end\n"
    "else\n"
    "  function __wisp_repl_command() print('wisp repl: commands unavailable: ' .. tostring(repl)) end\n"
    "end\n";

/* Evaluate one chunk: a ':' command (lua/wisp/repl.lua), else as an expression first
 * ("return <line>"), then as a statement. */
/* An unfinished statement: the chunk's syntax error is at its end (the message
 * ends in '<eof>'), the test luajit's own REPL makes before it reads another
 * line. Pops the message when so. */
static int incomplete(lua_State *L, int st)
{
    if (st != LUA_ERRSYNTAX) return 0;
    size_t n;
    const char *msg = lua_tolstring(L, -1, &n);
    static const char mark[] = "'<eof>'";
    if (!msg || n < sizeof mark - 1 || strcmp(msg + n - (sizeof mark - 1), mark)) return 0;
    lua_pop(L, 1);
    return 1;
}

/* Evaluate a chunk (one line or several, joined by '\n'). Returns 1 when it is
 * an unfinished statement and `last` is 0: the caller reads another line and
 * calls again with the longer chunk; at the input's end (last) the syntax
 * error is reported as luajit reports it. */
static int repl_eval(lua_State *L, const char *line, int last)
{
    lua_settop(L, 0);
    if (line[0] == ':') {
        lua_getglobal(L, "__wisp_repl_command");
        lua_pushstring(L, line);
        report(L, docall(L, 1, 0));
        return 0;
    }
    char *ret = malloc(strlen(line) + 8);
    if (!ret) return 0;
    sprintf(ret, "return %s", line);
    int st = luaL_loadbuffer(L, ret, strlen(ret), "=stdin");
    free(ret);
    if (st) {
        lua_pop(L, 1);
        st = luaL_loadbuffer(L, line, strlen(line), "=stdin");
        if (!last && incomplete(L, st)) return 1;
    }
    if (st == 0) st = docall(L, 0, LUA_MULTRET);
    if (st) { report(L, st); return 0; }
    int n = lua_gettop(L);
    if (n > 0) {
        lua_getglobal(L, "__wisp_repl_print");
        lua_insert(L, 1);
        if (lua_pcall(L, n, 0, 0)) report(L, 1);
    }
    return 0;
}

int wisp__cli_repl(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs("usage: wisp repl [MODEL]\n\n"
              "An interactive LuaJIT prompt with `wisp` loaded; with MODEL, `model` and\n"
              "`session` (placed on 'auto') are ready too, and `pipeline` (the session with a\n"
              "per-batch placement). Plain Lua works; an expression prints its value.\n"
              "Lines starting with ':' are commands: :devices, :model, :placement [DEV|calibrate],\n"
              ":batcher, :bench [ROWS] [CALLS], :trace FILE, :stats, :help.\n"
              "History is kept in ~/.wisp_history. Ctrl-D quits.\n", stdout);
        return 0;
    }
    if (argc > 2) return wisp__cli_usage_error("one MODEL at most (got %d)", argc - 1);
    lua_State *L = new_state();
    if (!L) return 1;
    int st = luaL_loadbuffer(L, repl_prelude, sizeof repl_prelude - 1, "=repl");
    if (st == 0) {
        int nargs = 0;
        if (argc == 2) { lua_pushstring(L, argv[1]); nargs = 1; }
        st = docall(L, nargs, 1);
    }
    if (report(L, st)) { lua_close(L); return 1; }
    if (lua_isstring(L, -1)) {        /* the model did not load: one line, no traceback, exit 1 */
        fprintf(stderr, "wisp repl: %s\n", lua_tostring(L, -1));
        lua_close(L);
        return 1;
    }
    lua_settop(L, 0);

    int tty = isatty(STDIN_FILENO);
    char hist[PATH_MAX] = "";
    const char *home = getenv("HOME");
    if (tty && home) {
        snprintf(hist, sizeof hist, "%s/.wisp_history", home);
        using_history();
        read_history(hist);
        printf("wisp %s — LuaJIT REPL. `wisp`%s are loaded; :help lists commands; Ctrl-D quits.\n", wisp_version(),
               argc == 2 ? ", `model` and `session`" : "");
    }
    char *chunk = NULL;             /* an unfinished statement's lines so far */
    size_t chunk_len = 0;
    for (;;) {
        char *line = NULL;
        if (tty) {
            line = readline(chunk ? "wisp>> " : "wisp> ");
        } else {
            size_t cap = 0;
            ssize_t n = getline(&line, &cap, stdin);
            if (n < 0) { free(line); line = NULL; }
            else if (n > 0 && line[n - 1] == '\n') line[n - 1] = '\0';
        }
        if (!line) {
            if (chunk) repl_eval(L, chunk, 1);      /* the input ended mid-statement: say why */
            break;
        }
        if (*line || chunk) {
            if (tty && *line) add_history(line);
            size_t n = strlen(line);
            char *nc = realloc(chunk, chunk_len + n + 2);
            if (!nc) { fprintf(stderr, "wisp repl: out of memory\n"); free(line); break; }
            if (chunk) nc[chunk_len++] = '\n';
            memcpy(nc + chunk_len, line, n + 1);
            chunk = nc;
            chunk_len += n;
            if (!repl_eval(L, chunk, 0)) { free(chunk); chunk = NULL; chunk_len = 0; }
        }
        free(line);
        fflush(stdout);
    }
    free(chunk);
    if (tty && hist[0]) write_history(hist);
    if (tty) putchar('\n');
    lua_close(L);
    return 0;
}
