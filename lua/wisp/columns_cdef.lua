-- columns_cdef.lua — FFI declarations of section 6 of wisp.h (feature columns, raw inputs, the transform); returns the library namespace of wisp.cdef.
--
-- Written while wisp/cdef.lua had another owner. cdef.lua now declares
-- section 6 itself (spec/lua/cdef_spec.lua checks it against wisp.h), so
-- the block below only runs with an older cdef.lua; this module can go
-- once nothing requires it (wisp/columns.lua does today).

local ffi = require "ffi"
local C = require "wisp.cdef"          -- loads the library, declares wisp_engine, wisp_model, wisp_batch

if not pcall(ffi.typeof, "wisp_columns") then
ffi.cdef [[
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
int    wisp_raw_parse_jsonl(wisp_raw *r, const char *text, size_t len, int final, size_t max_rows,
                            uint64_t *line_no, size_t *consumed);
int    wisp_raw_input(const wisp_raw *r, size_t i, const uint32_t **row_ptr, const void **values,
                      const uint32_t **str_off);
int    wisp_transform(const wisp_raw *r, wisp_batch *b);
]]
end

return C
