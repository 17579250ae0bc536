/* raw.c — raw batches (wisp_raw): rows of raw column inputs, not yet transformed,
 * stored column by column in the layout a device ships. A dense input holds
 * exactly one value per row (value k is row k's; a missing one is filled with
 * the default when the row ends; a bad row keeps a placeholder); a sparse
 * input has row offsets. Values: float32, int64, or strings as byte offsets +
 * bytes. Bad rows are listed with their line and message. The text readers
 * (engine/parse/csv.c, engine/parse/jsonl.c) append straight into these arrays after one
 * capacity check per line (wisp__raw_reserve_line, batch/raw.h). */
#include "batch/raw.h"
#include "transform/columns_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RAW_MIN_ROWS 256
#define RAW_MIN_VALS 256

/* The arrays a device ships (each input's indptr, vals, str_off, bytes) come
 * from wisp__host_alloc: once an array reaches RAW_PIN_BYTES it is allocated
 * with the raw batch's engine, so it is pinned (page-locked, mapped) while the
 * GPU backend is live and engine/cuda/cuda_transform.c copies it to the device
 * straight from where it is; smaller arrays (and every array without a GPU)
 * are plain memory with the same header (wisp__host_alloc(NULL, ...)), so
 * wisp__host_free frees both. Pinning costs a system call per block, so the
 * small arrays of small batches (the Lua/FFI one-row path) stay pageable; a
 * device copy packs those. Growth is allocate + copy the used part + free,
 * so a failed growth leaves the array as it was. */
#define RAW_PIN_BYTES ((size_t)256 << 10)

static void *raw_alloc(wisp_engine *eng, size_t bytes)
{
    return wisp__host_alloc(bytes >= RAW_PIN_BYTES ? eng : NULL, bytes);
}

/* Resize a raw array to new_bytes, keeping its first used_bytes. NULL on failure (p unchanged). */
static void *raw_realloc(wisp_engine *eng, void *p, size_t used_bytes, size_t new_bytes)
{
    void *q = raw_alloc(eng, new_bytes);
    if (!q) return NULL;
    if (p && used_bytes) memcpy(q, p, used_bytes < new_bytes ? used_bytes : new_bytes);
    wisp__host_free(eng, p);
    return q;
}

int wisp_raw_new(wisp_engine *eng, wisp_columns *c, wisp_raw **out)
{
    if (out) *out = NULL;
    if (!eng || !c || !out) return wisp__fail(WISP_EINVAL, "wisp_raw_new: %s is NULL", !eng ? "engine" : !c ? "columns" : "out");
    wisp_raw *r = wisp__calloc(1, sizeof *r);
    if (!r) return wisp__fail(WISP_ENOMEM, "wisp_raw_new: out of memory");
    r->in = wisp__calloc(c->ninputs ? c->ninputs : 1, sizeof *r->in);
    if (!r->in) { wisp__free(r); return wisp__fail(WISP_ENOMEM, "wisp_raw_new: out of memory"); }
    r->eng = eng;
    r->cols = c;
    r->sparse_idx = wisp__malloc((c->ninputs ? c->ninputs : 1) * sizeof *r->sparse_idx);
    if (!r->sparse_idx) { wisp__free(r->in); wisp__free(r); return wisp__fail(WISP_ENOMEM, "wisp_raw_new: out of memory"); }
    for (size_t i = 0; i < c->ninputs; i++) {
        if (c->inputs[i].sparse) r->sparse_idx[r->nsparse++] = (uint32_t)i;
        if (c->inputs[i].def_len > r->max_def_len) r->max_def_len = c->inputs[i].def_len;
    }
    wisp__engine_retain(eng);
    wisp__columns_retain(c);
    *out = r;
    return WISP_OK;
}

void wisp_raw_free(wisp_raw *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->cols->ninputs; i++) {
        struct wisp_raw_input *in = &r->in[i];
        wisp__host_free(r->eng, in->indptr);
        wisp__host_free(r->eng, in->vals);
        wisp__host_free(r->eng, in->str_off);
        wisp__host_free(r->eng, in->bytes);
    }
    wisp__free(r->in);
    wisp__free(r->lines);
    wisp__free(r->bad);
    wisp__free(r->msgs);
    wisp__free(r->field_input);
    wisp__free(r->qbuf);
    wisp__free(r->sparse_idx);
    wisp_columns_free(r->cols);
    wisp_engine *eng = r->eng;
    wisp__free(r);
    wisp_engine_free(eng);
}

void wisp_raw_clear(wisp_raw *r)
{
    if (!r) return;
    r->rows = 0;
    r->nbad = 0;
    r->msgs_len = 0;
    r->open = false;
    for (size_t i = 0; i < r->cols->ninputs; i++) {
        struct wisp_raw_input *in = &r->in[i];
        in->n = 0;
        in->nbytes = 0;
        if (in->indptr) in->indptr[0] = 0;     /* sparse inputs only */
        if (in->str_off) in->str_off[0] = 0;
    }
}

size_t wisp_raw_rows(const wisp_raw *r) { return r ? r->rows : 0; }
size_t wisp_raw_bad_count(const wisp_raw *r) { return r ? r->nbad : 0; }

int wisp_raw_bad_row(const wisp_raw *r, size_t i, size_t *row, uint64_t *line, const char **msg)
{
    if (!r) return wisp__fail(WISP_EINVAL, "wisp_raw_bad_row: raw is NULL");
    if (i >= r->nbad) return wisp__fail(WISP_EINVAL, "wisp_raw_bad_row: index %zu out of range (%zu bad rows)", i, r->nbad);
    if (row) *row = r->bad[i].row;
    if (line) *line = r->bad[i].line;
    if (msg) *msg = r->msgs + r->bad[i].msg_off;
    return WISP_OK;
}

int wisp_raw_input(const wisp_raw *r, size_t i, const uint32_t **indptr, const void **values, const uint32_t **str_off)
{
    static const uint32_t zero[1] = { 0 };
    if (!r) return wisp__fail(WISP_EINVAL, "wisp_raw_input: raw is NULL");
    if (i >= r->cols->ninputs)
        return wisp__fail(WISP_EINVAL, "wisp_raw_input: input %zu out of range (%zu inputs)", i, r->cols->ninputs);
    const struct wisp_raw_input *in = &r->in[i];
    bool str = r->cols->inputs[i].dtype == WISP_INPUT_STRING;
    if (indptr) *indptr = r->cols->inputs[i].sparse ? (in->indptr ? in->indptr : zero) : NULL;
    if (values) *values = str ? (const void *)in->bytes : (const void *)in->vals;
    if (str_off) *str_off = str ? (in->str_off ? in->str_off : zero) : NULL;
    return WISP_OK;
}

/* Room for `need` elements in the raw array *p (of which `used` hold data). */
static int grow(wisp_engine *eng, void **p, size_t *cap, size_t used, size_t need, size_t elem, size_t min)
{
    if (need <= *cap && *p) return WISP_OK;
    size_t nc = *cap ? *cap : min;
    while (nc < need) nc *= 2;
    void *q = raw_realloc(eng, *p, (*p ? used : 0) * elem, nc * elem);
    if (!q) return wisp__fail(WISP_ENOMEM, "raw: cannot allocate %zu bytes", nc * elem);
    *p = q;
    *cap = nc;
    return WISP_OK;
}

static void raw_truncate(wisp_raw *r);

int wisp_raw_row_begin(wisp_raw *r, uint64_t line)
{
    if (!r) return wisp__fail(WISP_EINVAL, "wisp_raw_row_begin: raw is NULL");
    if (r->rows >= WISP_MAX_ROWS)
        return wisp__fail(WISP_ELIMIT, "wisp_raw_row_begin: the raw batch already holds WISP_MAX_ROWS (%u) rows", WISP_MAX_ROWS);
    if (r->rows + 1 > r->row_cap || !r->lines) {
        size_t nc = r->row_cap ? r->row_cap * 2 : RAW_MIN_ROWS;
        uint64_t *nl = wisp__realloc(r->lines, nc * sizeof *nl);
        if (!nl) return wisp__fail(WISP_ENOMEM, "wisp_raw_row_begin: out of memory for %zu rows", nc);
        r->lines = nl;
        for (size_t i = 0; i < r->cols->ninputs; i++) {
            struct wisp_raw_input *in = &r->in[i];
            if (!r->cols->inputs[i].sparse) continue;        /* dense: value k is row k's */
            uint32_t *np = raw_realloc(r->eng, in->indptr, in->indptr ? (r->rows + 1) * sizeof *np : 0, (nc + 1) * sizeof *np);
            if (!np) return wisp__fail(WISP_ENOMEM, "wisp_raw_row_begin: out of memory for %zu rows", nc);
            if (!in->indptr) np[0] = 0;
            in->indptr = np;
        }
        r->row_cap = nc;
    }
    if (r->open) raw_truncate(r);    /* drop what an abandoned row left */
    r->open = true;
    r->open_bad = false;
    r->open_line = line;
    return WISP_OK;
}

int wisp__raw_reject(wisp_raw *r, const char *fmt, ...)
{
    if (r->open_bad) return WISP_OK;          /* the first problem is the one reported */
    r->open_bad = true;
    size_t n = 0;
    if (r->open_line) n = (size_t)snprintf(r->open_msg, sizeof r->open_msg, "line %llu: ", (unsigned long long)r->open_line);
    else n = (size_t)snprintf(r->open_msg, sizeof r->open_msg, "row %zu: ", r->rows);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->open_msg + n, sizeof r->open_msg - n, fmt, ap);
    va_end(ap);
    return WISP_OK;
}

int wisp_raw_row_reject(wisp_raw *r, const char *msg)
{
    if (!r) return wisp__fail(WISP_EINVAL, "wisp_raw_row_reject: raw is NULL");
    if (!r->open) return wisp__fail(WISP_ESTATE, "wisp_raw_row_reject: no open row (call wisp_raw_row_begin)");
    return wisp__raw_reject(r, "%s", msg ? msg : "rejected");
}

/* The dense rule: a dense input takes one value per row. */
static inline bool dense_full(wisp_raw *r, size_t input)
{
    const struct wisp_raw_input *in = &r->in[input];
    return !r->cols->inputs[input].sparse && in->n > r->rows;
}

static int dense_twice(wisp_raw *r, size_t input)
{
    return wisp__raw_reject(r, "input '%s' is dense and takes one value per row (declare it sparse for lists)",
                            r->cols->inputs[input].name);
}

/* Room for one more fixed-size value of `input`: *slot points at it (the
 * caller stores the value and nothing else changes on failure), or NULL
 * when the row is already bad and the value is to be dropped. */
static int push_slot(wisp_raw *r, size_t input, size_t esize, void **slot)
{
    *slot = NULL;
    r->room_rows = 0;                    /* the text readers' reserve no longer holds */
    if (WISP_UNLIKELY(r->open_bad)) return WISP_OK;
    if (WISP_UNLIKELY(dense_full(r, input))) return dense_twice(r, input);
    struct wisp_raw_input *in = &r->in[input];
    if (WISP_UNLIKELY(in->n >= WISP_MAX_NNZ)) return wisp__fail(WISP_ELIMIT, "raw: input '%s' holds WISP_MAX_NNZ values", r->cols->inputs[input].name);
    if (WISP_UNLIKELY(in->n + 1 > in->val_cap)) {
        int st = grow(r->eng, &in->vals, &in->val_cap, in->n, in->n + 1, esize, RAW_MIN_VALS);
        if (st) { wisp__raw_reject(r, "out of memory"); return st; }
    }
    *slot = (char *)in->vals + esize * in->n++;
    return WISP_OK;
}

int wisp__raw_push_f32(wisp_raw *r, size_t input, float v)
{
    void *slot;
    int st = push_slot(r, input, sizeof v, &slot);
    if (slot) memcpy(slot, &v, sizeof v);
    return st;
}

int wisp__raw_push_i64(wisp_raw *r, size_t input, int64_t v)
{
    void *slot;
    int st = push_slot(r, input, sizeof v, &slot);
    if (slot) memcpy(slot, &v, sizeof v);
    return st;
}

int wisp__raw_push_str(wisp_raw *r, size_t input, const char *s, size_t len)
{
    r->room_rows = 0;                    /* the text readers' reserve no longer holds */
    if (WISP_UNLIKELY(r->open_bad)) return WISP_OK;
    if (WISP_UNLIKELY(dense_full(r, input))) return dense_twice(r, input);
    if (WISP_UNLIKELY(len > WISP_MAX_STRING_BYTES))
        return wisp__raw_reject(r, "input '%s': a string of %zu bytes, more than WISP_MAX_STRING_BYTES (%u)",
                                r->cols->inputs[input].name, len, WISP_MAX_STRING_BYTES);
    struct wisp_raw_input *in = &r->in[input];
    if (WISP_UNLIKELY(in->n >= WISP_MAX_NNZ || len > UINT32_MAX - in->nbytes))
        return wisp__fail(WISP_ELIMIT, "raw: input '%s' holds more than 4 GiB of strings or WISP_MAX_NNZ values",
                         r->cols->inputs[input].name);
    if (WISP_UNLIKELY(in->n + 2 > in->val_cap || !in->str_off)) {
        size_t cap = in->val_cap;
        int st = grow(r->eng, (void **)&in->str_off, &cap, in->n + 1, in->n + 2, sizeof(uint32_t), RAW_MIN_VALS);
        if (st) { wisp__raw_reject(r, "out of memory"); return st; }
        if (!in->val_cap) in->str_off[0] = 0;
        in->val_cap = cap;
    }
    if (WISP_UNLIKELY(in->nbytes + len > in->bytes_cap || !in->bytes)) {
        int st = grow(r->eng, (void **)&in->bytes, &in->bytes_cap, in->nbytes, in->nbytes + len + 1, 1, 4096);
        if (st) { wisp__raw_reject(r, "out of memory"); return st; }
    }
    memcpy(in->bytes + in->nbytes, s, len);
    in->nbytes += len;
    in->str_off[++in->n] = (uint32_t)in->nbytes;
    return WISP_OK;
}

void wisp__raw_abort(wisp_raw *r)
{
    if (r->open) raw_truncate(r);
    r->open = false;
}

#define ROOM_ROWS  256
#define ROOM_BYTES (64u << 10)

/* The reserve behind the text readers (wisp__raw_reserve_line, inline in
 * batch/raw.h): every input has room for room_rows more values and every
 * string input for room_bytes more bytes. A line takes at most one value and
 * (line length + longest default) bytes per input, so most lines only
 * decrement the counters. The checked push functions (the Lua/FFI path) set
 * room_rows to 0, so the next line reserves again. */
int wisp__raw_reserve_line_slow(wisp_raw *r, size_t bytes)
{
    const wisp_columns *c = r->cols;
    size_t want_bytes = bytes > ROOM_BYTES ? bytes : ROOM_BYTES;
    for (size_t i = 0; i < c->ninputs; i++) {
        struct wisp_raw_input *in = &r->in[i];
        if (WISP_UNLIKELY(in->n + ROOM_ROWS + 2 >= WISP_MAX_NNZ))
            return wisp__fail(WISP_ELIMIT, "raw: input '%s' holds WISP_MAX_NNZ values", c->inputs[i].name);
        if (c->inputs[i].dtype == WISP_INPUT_STRING) {
            if (in->n + ROOM_ROWS + 2 > in->val_cap || !in->str_off) {
                size_t cap = in->val_cap;
                int st = grow(r->eng, (void **)&in->str_off, &cap, in->n + 1, in->n + ROOM_ROWS + 2, sizeof(uint32_t), RAW_MIN_VALS);
                if (st) return st;
                if (!in->val_cap) in->str_off[0] = 0;
                in->val_cap = cap;
            }
            if (WISP_UNLIKELY(want_bytes > UINT32_MAX - in->nbytes))
                return wisp__fail(WISP_ELIMIT, "raw: input '%s' holds more than 4 GiB of strings", c->inputs[i].name);
            if (in->nbytes + want_bytes > in->bytes_cap || !in->bytes) {
                int st = grow(r->eng, (void **)&in->bytes, &in->bytes_cap, in->nbytes, in->nbytes + want_bytes, 1, 4096);
                if (st) return st;
            }
        } else if (in->n + ROOM_ROWS + 1 > in->val_cap || !in->vals) {
            int st = grow(r->eng, &in->vals, &in->val_cap, in->n, in->n + ROOM_ROWS + 1,
                          c->inputs[i].dtype == WISP_INPUT_FLOAT32 ? sizeof(float) : sizeof(int64_t), RAW_MIN_VALS);
            if (st) return st;
        }
    }
    r->room_rows = ROOM_ROWS - 1;
    r->room_bytes = want_bytes - bytes;
    return WISP_OK;
}

static int need_open(wisp_raw *r, size_t input, const char *fn)
{
    if (!r) return wisp__fail(WISP_EINVAL, "%s: raw is NULL", fn);
    if (!r->open) return wisp__fail(WISP_ESTATE, "%s: no open row (call wisp_raw_row_begin)", fn);
    if (input >= r->cols->ninputs) return wisp__fail(WISP_EINVAL, "%s: input %zu out of range (%zu inputs)", fn, input, r->cols->ninputs);
    return WISP_OK;
}

int wisp_raw_add_float(wisp_raw *r, size_t input, double v)
{
    int st = need_open(r, input, "wisp_raw_add_float");
    if (st) return st;
    const struct wisp_input *in = &r->cols->inputs[input];
    switch (in->dtype) {
    case WISP_INPUT_FLOAT32: return wisp__raw_push_f32(r, input, (float)v);
    case WISP_INPUT_INT64:
        if (v == floor(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0)
            return wisp__raw_push_i64(r, input, (int64_t)v);
        return wisp__raw_reject(r, "input '%s': %.17g where int64 is expected", in->name, v);
    default:
        return wisp__raw_reject(r, "input '%s': a number where a string is expected", in->name);
    }
}

int wisp_raw_add_int(wisp_raw *r, size_t input, int64_t v)
{
    int st = need_open(r, input, "wisp_raw_add_int");
    if (st) return st;
    const struct wisp_input *in = &r->cols->inputs[input];
    switch (in->dtype) {
    case WISP_INPUT_FLOAT32: return wisp__raw_push_f32(r, input, (float)v);
    case WISP_INPUT_INT64: return wisp__raw_push_i64(r, input, v);
    default: return wisp__raw_reject(r, "input '%s': a number where a string is expected", in->name);
    }
}

int wisp_raw_add_string(wisp_raw *r, size_t input, const char *s, size_t len)
{
    int st = need_open(r, input, "wisp_raw_add_string");
    if (st) return st;
    if (!s && len) return wisp__fail(WISP_EINVAL, "wisp_raw_add_string: s is NULL");
    const struct wisp_input *in = &r->cols->inputs[input];
    if (in->dtype != WISP_INPUT_STRING)
        return wisp__raw_reject(r, "input '%s': a string where %s is expected", in->name, wisp__input_type_name(in->dtype));
    return wisp__raw_push_str(r, input, s ? s : "", len);
}

static int raw_add_bad(wisp_raw *r, size_t row, uint64_t line, const char *msg)
{
    size_t len = strlen(msg) + 1;
    if (r->msgs_len + len > UINT32_MAX) return wisp__fail(WISP_ELIMIT, "raw: bad-row messages exceed 4 GiB");
    if (r->nbad == r->bad_cap) {
        size_t nc = r->bad_cap ? r->bad_cap * 2 : 16;
        struct wisp_bad_row *nb = wisp__realloc(r->bad, nc * sizeof *nb);
        if (!nb) return wisp__fail(WISP_ENOMEM, "raw: out of memory for the bad-row list");
        r->bad = nb;
        r->bad_cap = nc;
    }
    if (r->msgs_len + len > r->msgs_cap) {
        size_t nc = r->msgs_cap ? r->msgs_cap : 1024;
        while (nc < r->msgs_len + len) nc *= 2;
        char *nm = wisp__realloc(r->msgs, nc);
        if (!nm) return wisp__fail(WISP_ENOMEM, "raw: out of memory for bad-row messages");
        r->msgs = nm;
        r->msgs_cap = nc;
    }
    memcpy(r->msgs + r->msgs_len, msg, len);
    r->bad[r->nbad].row = row;
    r->bad[r->nbad].line = line;
    r->bad[r->nbad].msg_off = (uint32_t)r->msgs_len;
    r->nbad++;
    r->msgs_len += len;
    return WISP_OK;
}

/* Drop the open row's values. */
static void raw_truncate(wisp_raw *r)
{
    for (size_t i = 0; i < r->cols->ninputs; i++) {
        struct wisp_raw_input *in = &r->in[i];
        in->n = r->cols->inputs[i].sparse ? in->indptr[r->rows] : r->rows;
        if (in->str_off) in->nbytes = in->str_off[in->n];
    }
}

/* Append input i's default (or, for a bad row, a placeholder: the default or zero). */
static int push_default(wisp_raw *r, size_t i)
{
    const struct wisp_input *in = &r->cols->inputs[i];
    bool was_bad = r->open_bad;
    r->open_bad = false;                 /* the push functions skip values of bad rows */
    int st = in->dtype == WISP_INPUT_FLOAT32 ? wisp__raw_push_f32(r, i, in->has_default ? in->def_f : 0.0f)
           : in->dtype == WISP_INPUT_INT64 ? wisp__raw_push_i64(r, i, in->has_default ? in->def_i : 0)
           : wisp__raw_push_str(r, i, in->def_s ? in->def_s : "", in->def_s ? in->def_len : 0);
    r->open_bad = was_bad;
    return st;
}

int wisp_raw_row_end(wisp_raw *r)
{
    if (!r) return wisp__fail(WISP_EINVAL, "wisp_raw_row_end: raw is NULL");
    if (!r->open) return wisp__fail(WISP_ESTATE, "wisp_raw_row_end: no open row (call wisp_raw_row_begin)");
    const wisp_columns *c = r->cols;
    const size_t row = r->rows;
    int st = WISP_OK;
    /* a dense input without a value takes its default */
    for (size_t i = 0; i < c->ninputs && !r->open_bad; i++) {
        const struct wisp_input *in = &c->inputs[i];
        if (in->sparse || r->in[i].n > row) continue;
        if (!in->has_default) {
            wisp__raw_reject(r, "input '%s' is missing and has no default", in->name);
            break;
        }
        if ((st = push_default(r, i))) break;
    }
    if (st == WISP_OK && r->open_bad) {
        /* a bad row has no values, but a dense input keeps one placeholder (value k is row k's) */
        raw_truncate(r);
        for (size_t i = 0; i < c->ninputs && st == WISP_OK; i++)
            if (!c->inputs[i].sparse) st = push_default(r, i);
        if (st == WISP_OK) st = raw_add_bad(r, row, r->open_line, r->open_msg);
    }
    if (st != WISP_OK) {
        raw_truncate(r);
        r->open = false;
        return st;
    }
    for (size_t i = 0; i < c->ninputs; i++)
        if (c->inputs[i].sparse) r->in[i].indptr[row + 1] = (uint32_t)r->in[i].n;
    r->lines[row] = r->open_line;
    r->rows = row + 1;
    r->open = false;
    return WISP_OK;
}
