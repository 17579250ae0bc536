-- cdef.lua — the one module that declares wisp's C API (engine/include/wisp.h) to the FFI and loads the library.
--
-- Functions only, never struct layouts: every handle is an opaque
-- `typedef struct wisp_x wisp_x;` and sizes or fields come through
-- accessors. The numeric constants of wisp.h live in wisp/const.lua (a
-- plain Lua table, checked against the header by spec/lua/cdef_spec.lua).
--
-- Returns the library namespace, found in this order:
--   1. ffi.C, when the process already exports the wisp_* symbols (inside
--      the `wisp` CLI, which links the library statically with -rdynamic);
--   2. $WISP_LIB, a path to libwisp.so (when set, it must load);
--   3. <this file's dir>/../../build/libwisp.so (a source checkout after `make`);
--   4. <this file's dir>/../../../../lib/libwisp.so (PREFIX/lib next to
--      PREFIX/share/lua/5.1/wisp/, for a `make install` outside ldconfig's paths);
--   5. ffi.load("wisp"), then ffi.load("libwisp.so.0") (installed system-wide).
-- Raises an error naming everything tried when none works.

local ffi = require "ffi"

-- declared once per Lua state, even if this module is loaded again
if not pcall(ffi.typeof, "wisp_engine") then
ffi.cdef [[
const char *wisp_version(void);

/* 1. status codes and error messages */
const char *wisp_errmsg(void);
const char *wisp_strerror(int status);
const char *wisp_err_name(int status);

/* 2. the engine */
typedef struct wisp_engine wisp_engine;
int  wisp_engine_new(int threads, wisp_engine **out);
void wisp_engine_free(wisp_engine *eng);
int  wisp_engine_threads(const wisp_engine *eng);
typedef void (*wisp_task_fn)(void *ctx, size_t task);
int  wisp_engine_run(wisp_engine *eng, size_t ntasks, wisp_task_fn fn, void *ctx);
int  wisp_engine_gpu_count(wisp_engine *eng);
const char *wisp_engine_gpu_status(wisp_engine *eng);
int  wisp_engine_gpu_starting(wisp_engine *eng);
void wisp_engine_set_pinned_batches(wisp_engine *eng, int on);
const char *wisp_engine_gpu_name(wisp_engine *eng, int i);
uint64_t    wisp_engine_gpu_memory(wisp_engine *eng, int i);
int         wisp_engine_gpu_capability(wisp_engine *eng, int i);
int         wisp_engine_gpu_usable(wisp_engine *eng, int i);
void   wisp_engine_set_log_level(wisp_engine *eng, int level);
size_t wisp_engine_last_log(wisp_engine *eng, char *buf, size_t len);
int  wisp_engine_host_alloc(wisp_engine *eng, size_t bytes, void **out);
void wisp_engine_host_free(wisp_engine *eng, void *p);
int  wisp_engine_host_pinned(const wisp_engine *eng, const void *p);
int  wisp_file_id_read(const char *path, int64_t out[6]);
int  wisp_dir_list(const char *path, char *buf, size_t cap, size_t *len);

/* 3. models */
typedef struct wisp_model wisp_model;
const char *wisp_dtype_name(int dtype);
int         wisp_dtype_parse(const char *name);
int  wisp_model_load(wisp_engine *eng, const char *path, wisp_model **out);
int  wisp_model_load_ex(wisp_engine *eng, const char *path, unsigned flags, wisp_model **out);
void wisp_model_free(wisp_model *m);
uint64_t    wisp_model_num_features(const wisp_model *m);
double      wisp_model_bias(const wisp_model *m);
int         wisp_model_dtype(const wisp_model *m);
float       wisp_model_scale(const wisp_model *m);
const char *wisp_model_path(const wisp_model *m);
uint64_t    wisp_model_file_size(const wisp_model *m);
int         wisp_model_file_changed(const wisp_model *m, char *why, size_t why_len);
float       wisp_model_weight(const wisp_model *m, uint64_t id);
const char *wisp_model_meta(const wisp_model *m, const char *key);
const char *wisp_model_meta_text(const wisp_model *m);
const char *wisp_model_columns(const wisp_model *m);
int  wisp_model_write(const char *path, const float *weights, uint64_t num_features,
                      double bias, int dtype, const char *meta, const char *columns);
int  wisp_model_convert(const wisp_model *m, const char *path, int dtype);
int  wisp_import_liblinear(const char *liblinear_path, const char *out_path, int dtype);
int  wisp_import_onnx(const char *onnx_path, const char *out_path, int dtype);
int  wisp_import_onnx_memory(const void *data, size_t len, const char *out_path, int dtype);

/* 4. batches */
typedef struct wisp_batch wisp_batch;
int    wisp_batch_new(wisp_engine *eng, wisp_batch **out);
void   wisp_batch_free(wisp_batch *b);
void   wisp_batch_clear(wisp_batch *b);
int    wisp_batch_add_row(wisp_batch *b, const uint64_t *ids, const float *vals, size_t n);
int    wisp_batch_add_row_mixed(wisp_batch *b, const uint64_t *vids, const float *vals, size_t nv,
                                const uint64_t *bids, size_t nb);
int    wisp_batch_wrap(wisp_engine *eng, size_t rows, const uint32_t *indptr, const uint32_t *ids,
                       const uint32_t *val_ptr, const float *vals, wisp_batch **out);
int    wisp_batch_parse_libsvm(wisp_batch *b, const char *text, size_t len, int final,
                               size_t max_rows, uint64_t *line_no, size_t *consumed);
size_t wisp_batch_rows(const wisp_batch *b);
size_t wisp_batch_nnz(const wisp_batch *b);
size_t wisp_batch_nvals(const wisp_batch *b);
size_t wisp_batch_bad_count(const wisp_batch *b);
int    wisp_batch_bad_row(const wisp_batch *b, size_t i, size_t *row, uint64_t *line, const char **msg);
const uint32_t *wisp_batch_indptr(const wisp_batch *b);
const uint32_t *wisp_batch_row_ptr(const wisp_batch *b);
const uint32_t *wisp_batch_ids(const wisp_batch *b);
const uint32_t *wisp_batch_val_ptr(const wisp_batch *b);
const float    *wisp_batch_vals(const wisp_batch *b);

/* 5. sessions */
int  wisp_device_parse(const char *device, int *kind, int *n);
typedef struct wisp_session wisp_session;
int  wisp_session_new(wisp_engine *eng, wisp_model *m, const char *device, wisp_session **out);
void wisp_session_free(wisp_session *s);
int  wisp_session_set_device(wisp_session *s, const char *device);
const char *wisp_session_device(const wisp_session *s);
const char *wisp_session_last_device(const wisp_session *s);
int  wisp_session_auto_state(wisp_session *s, uint64_t *min_nnz_one, uint64_t *min_nnz_pool);
int  wisp_session_auto_points(wisp_session *s, size_t cap, size_t *n, uint64_t *rows, double *cpu_one,
                              double *cpu_pool, double *gpus);
int  wisp_placement_summarize(const double *passes, size_t n, double *q);
int  wisp_placement_acceptable(size_t ndevices, const double *ms, const double *lo, const double *hi,
                               int *fastest, int *acceptable);
int  wisp_placement_choose(size_t npoints, size_t ndevices, const uint64_t *rows, const double *ms,
                           const double *lo, const double *hi, int *chosen, uint64_t *breaks);
int  wisp_session_score(wisp_session *s, const wisp_batch *b, float *out);
int  wisp_session_submit(wisp_session *s, const wisp_batch *b, float *out);
int  wisp_session_wait(wisp_session *s, const wisp_batch **done);
uint64_t    wisp_session_stat(const wisp_session *s, int which);
const char *wisp_stat_name(int which);
void        wisp_session_reset_stats(wisp_session *s);
void        wisp_session_add_stat(wisp_session *s, int which, uint64_t amount);
void        wisp_session_set_profiling(wisp_session *s, int on);
int         wisp_session_profiling(const wisp_session *s);
uint64_t    wisp_session_last_stat(const wisp_session *s, int which);
uint64_t    wisp_session_last_start_ns(const wisp_session *s);
uint64_t    wisp_clock_ns(void);

/* 6. feature columns and the transform */
typedef struct wisp_columns wisp_columns;
typedef struct wisp_raw     wisp_raw;
uint64_t wisp_fingerprint64(const void *data, size_t len);
uint64_t wisp_fingerprint_cat64(uint64_t fp1, uint64_t fp2);
int  wisp_columns_parse(const char *text, size_t len, wisp_columns **out);
int  wisp_columns_from_model(const wisp_model *m, wisp_columns **out);
void wisp_columns_free(wisp_columns *c);
uint64_t    wisp_columns_num_features(const wisp_columns *c);
size_t      wisp_columns_count(const wisp_columns *c);
const char *wisp_columns_name(const wisp_columns *c, size_t i);
const char *wisp_columns_type(const wisp_columns *c, size_t i);
uint64_t    wisp_columns_offset(const wisp_columns *c, size_t i);
uint64_t    wisp_columns_size(const wisp_columns *c, size_t i);
size_t      wisp_columns_num_inputs(const wisp_columns *c);
const char *wisp_columns_input_name(const wisp_columns *c, size_t i);
int         wisp_columns_input_dtype(const wisp_columns *c, size_t i);
int         wisp_columns_input_sparse(const wisp_columns *c, size_t i);
long        wisp_columns_input_index(const wisp_columns *c, const char *name, size_t len);
int    wisp_raw_new(wisp_engine *eng, wisp_columns *c, wisp_raw **out);
void   wisp_raw_free(wisp_raw *r);
void   wisp_raw_clear(wisp_raw *r);
size_t wisp_raw_rows(const wisp_raw *r);
size_t wisp_raw_bad_count(const wisp_raw *r);
int    wisp_raw_bad_row(const wisp_raw *r, size_t i, size_t *row, uint64_t *line, const char **msg);
int    wisp_raw_row_begin(wisp_raw *r, uint64_t line);
int    wisp_raw_add_float(wisp_raw *r, size_t input, double v);
int    wisp_raw_add_int(wisp_raw *r, size_t input, int64_t v);
int    wisp_raw_add_string(wisp_raw *r, size_t input, const char *s, size_t len);
int    wisp_raw_row_reject(wisp_raw *r, const char *msg);
int    wisp_raw_row_end(wisp_raw *r);
int    wisp_raw_set_schema(wisp_raw *r, const char *schema, int delim);
int    wisp_raw_parse_tsv(wisp_raw *r, const char *text, size_t len, int final, size_t max_rows,
                          uint64_t *line_no, size_t *consumed);
const char *wisp_raw_csv_record_end(const char *text, const char *end, const char *want);
int    wisp_raw_parse_jsonl(wisp_raw *r, const char *text, size_t len, int final, size_t max_rows,
                            uint64_t *line_no, size_t *consumed);
int    wisp_raw_input(const wisp_raw *r, size_t i, const uint32_t **indptr, const void **values,
                      const uint32_t **str_off);
int    wisp_json_numbers(const char *text, size_t len, int is_float, int bits, void *out, size_t cap,
                         size_t *count, size_t *consumed);
int    wisp_batch_add_csr(wisp_batch *b, const void *indptr, int indptr_bits, size_t r0, size_t r1,
                          const void *ids, int id_bits, const float *vals, size_t *added, int64_t *bad_at);
int    wisp_batch_from_csr(wisp_engine *eng, size_t rows, const void *indptr, int indptr_type, const void *ids,
                           int id_type, size_t nnz, const void *values, int value_type, unsigned flags,
                           wisp_batch **out);
int    wisp_transform(const wisp_raw *r, wisp_batch *b);
int    wisp_session_transform(wisp_session *s, const wisp_raw *r, wisp_batch *b);
int    wisp_session_score_raw(wisp_session *s, const wisp_raw *r, float *out);
size_t wisp_session_bad_count(const wisp_session *s);
int    wisp_session_bad_row(const wisp_session *s, size_t i, size_t *row, uint64_t *line, const char **msg);
int    wisp_session_score_device(wisp_session *s, size_t rows, const void *indptr, int indptr_bits,
                                 const int32_t *ids, const float *vals, void *stream, float *out, int out_on_device);
int    wisp_session_score_device_n(wisp_session *s, size_t rows, const void *indptr, int indptr_bits,
                                   const int32_t *ids, const float *vals, size_t nnz, void *stream, float *out,
                                   int out_on_device);
int    wisp_device_alloc(int dev, size_t n, void **out);
void   wisp_device_free(int dev, void *p);
/* 7. Vowpal Wabbit */
typedef struct wisp_vw wisp_vw;
uint32_t wisp_vw_murmur3(const void *data, size_t len, uint32_t seed);
uint32_t wisp_vw_hashstring(const char *s, size_t len, uint32_t seed);
int  wisp_vw_new(const char *options, wisp_vw **out);
int  wisp_vw_from_model(const wisp_model *m, wisp_vw **out);
void wisp_vw_free(wisp_vw *v);
int         wisp_vw_bits(const wisp_vw *v);
const char *wisp_vw_options(const wisp_vw *v);
uint32_t wisp_vw_hash_namespace(const wisp_vw *v, const char *name, size_t len);
uint32_t wisp_vw_hash_feature(const wisp_vw *v, const char *name, size_t len, uint32_t ns_hash);
uint32_t wisp_vw_hash_quadratic(const wisp_vw *v, uint32_t h1, uint32_t h2);
int  wisp_batch_parse_vw(wisp_batch *b, const wisp_vw *v, const char *text, size_t len, int final,
                         size_t max_rows, uint64_t *line_no, size_t *consumed);
int  wisp_import_vw(const char *vw_path, const char *out_path, int dtype);
]]
end

-- The C library functions the Lua layer calls through ffi.C (functions, no struct layouts),
-- each declared unless this Lua state has it already (lua-resty-core declares some):
-- memchr (the v2 service's JSON scan), usleep (the batcher's sleeps outside nginx).
for _, decl in ipairs {
    "void *memchr(const void *s, int c, size_t n);",
    "int usleep(unsigned int usec);",
} do
    pcall(ffi.cdef, decl)
end

local function exists(path)
    local f = io.open(path, "rb")
    if f then f:close() return true end
    return false
end

-- the directory of this file, from the chunk name ("@lua/wisp/cdef.lua")
local function module_dir()
    local src = debug.getinfo(1, "S").source
    if src:sub(1, 1) ~= "@" then return nil end
    return src:sub(2):match("^(.*)/[^/]*$") or "."
end

local tried = {}

local function try_load(what)
    local ok, lib = pcall(ffi.load, what)
    if ok then return lib end
    tried[#tried + 1] = what .. " (" .. tostring(lib) .. ")"
    return nil
end

local function load_library()
    -- 1. the symbols are already in the process (the wisp CLI)
    if pcall(function() return ffi.C.wisp_version end) then
        return ffi.C, "process"
    end
    tried[#tried + 1] = "ffi.C (the process does not export wisp_version)"

    -- 2. $WISP_LIB: explicit, so a failure there is final
    local env = os.getenv("WISP_LIB")
    if env and env ~= "" then
        local lib = try_load(env)
        if lib then return lib, env end
        error("wisp: cannot load the library named by WISP_LIB: " .. table.concat(tried, "; "), 0)
    end
    tried[#tried + 1] = "$WISP_LIB (not set)"

    -- 3, 4. relative to this file: a source checkout, then an install prefix
    local dir = module_dir()
    if dir then
        for _, rel in ipairs { "/../../build/libwisp.so", "/../../../../lib/libwisp.so" } do
            local path = dir .. rel
            if exists(path) then
                local lib = try_load(path)
                if lib then return lib, path end
            else
                tried[#tried + 1] = path .. " (no such file)"
            end
        end
    end

    -- 5. the dynamic linker's search path
    for _, name in ipairs { "wisp", "libwisp.so.0" } do
        local lib = try_load(name)
        if lib then return lib, name end
    end

    error("wisp: cannot find libwisp; tried: " .. table.concat(tried, "; ")
          .. ". Build it with `make`, install it with `make install`, or set WISP_LIB=/path/to/libwisp.so", 0)
end

local lib = load_library()
return lib
