/* raw.h — private: the raw batch behind wisp_raw (raw.c): raw column inputs row by row, and the helpers
 * its text readers (parse/csv.c, parse/jsonl.c) append values with. */
#ifndef WISP_RAW_H
#define WISP_RAW_H

#include "batch/batch.h"
#include "transform/columns.h"

struct wisp_raw_input {
    uint32_t *indptr;           /* row_cap + 1 */
    void *vals;                  /* float or int64_t, val_cap entries */
    size_t n, val_cap;
    uint32_t *str_off;           /* strings: val_cap + 1 byte offsets */
    char *bytes;
    size_t nbytes, bytes_cap;
};

struct wisp_raw {
    wisp_engine *eng;
    wisp_columns *cols;
    size_t rows, row_cap;
    struct wisp_raw_input *in;   /* one per input of cols */
    uint64_t *lines;             /* row_cap */
    /* bad rows */
    struct wisp_bad_row *bad; size_t nbad, bad_cap;
    char *msgs; size_t msgs_len, msgs_cap;
    /* the open row */
    bool open, open_bad;
    uint64_t open_line;
    char open_msg[256];
    /* delimited text */
    int delim;                   /* 0 until a schema is set */
    bool want_header;
    int32_t *field_input;        /* per field: input index or -1 */
    size_t nfields;
    char *qbuf; size_t qbuf_cap; /* unquoted CSV field */
    /* the text readers' reserve (wisp__raw_reserve_line) */
    size_t room_rows, room_bytes, max_def_len;
    uint32_t *sparse_idx; size_t nsparse;
};

/* Mark the open row bad (printf-style message, kept with its line); later
 * values of the row are ignored. Returns WISP_OK. */
int  wisp__raw_reject(wisp_raw *r, const char *fmt, ...) WISP_PRINTF(2, 3);
/* Append a value already converted to the input's type (no checks beyond
 * the dense rule): float32, int64, or a string of len bytes. */
int  wisp__raw_push_f32(wisp_raw *r, size_t input, float v);
int  wisp__raw_push_i64(wisp_raw *r, size_t input, int64_t v);
int  wisp__raw_push_str(wisp_raw *r, size_t input, const char *s, size_t len);
/* Room for one more value in every input and `bytes` (+16 of slack for
 * word-sized copies) more string bytes, so a text reader may append the
 * values of a line without further checks. */
int  wisp__raw_reserve_line_slow(wisp_raw *r, size_t bytes);
static inline int wisp__raw_reserve_line(wisp_raw *r, size_t bytes)
{
    bytes += r->max_def_len + 16;
    if (WISP_LIKELY(r->room_rows > 0 && bytes <= r->room_bytes)) {
        r->room_rows--;
        r->room_bytes -= bytes;
        return WISP_OK;
    }
    return wisp__raw_reserve_line_slow(r, bytes);
}
/* Open a row (wisp_raw_row_begin, with its common case inline). */
static inline int wisp__raw_row_begin(wisp_raw *r, uint64_t line)
{
    if (WISP_LIKELY(r->rows < r->row_cap && !r->open && r->lines)) {
        r->open = true;
        r->open_bad = false;
        r->open_line = line;
        return WISP_OK;
    }
    return wisp_raw_row_begin(r, line);
}
/* Drop the open row's values and close it (a reader's failure path). */
void wisp__raw_abort(wisp_raw *r);
/* Commit the open, good row whose dense inputs all hold a value. */
static inline void wisp__raw_commit_row(wisp_raw *r)
{
    const size_t row = r->rows;
    for (size_t q = 0; q < r->nsparse; q++) {
        size_t i = r->sparse_idx[q];
        r->in[i].indptr[row + 1] = (uint32_t)r->in[i].n;
    }
    r->lines[row] = r->open_line;
    r->rows = row + 1;
    r->open = false;
}

#endif /* WISP_RAW_H */
