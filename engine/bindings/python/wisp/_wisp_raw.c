/* _wisp_raw.c — raw rows from Python (numpy buffers, Arrow buffers, sequences) into a wisp_raw, scored by wisp_session_score_raw.
 *
 * Session.score_raw(cols, rows, out) -> [(row, reason)]
 *
 *   cols: a list of (input_index, source), one per input of the model's
 *   column description that X holds (the Python layer matches names,
 *   checks input types against the sources and leaves out what is not an
 *   input). A source is one of
 *     ("buf", array[, mask])   a 1-D C-contiguous buffer of numbers (numpy),
 *                              one value per row, read in place; mask: a
 *                              bool/uint8 buffer, nonzero = missing
 *     ("arrow", type, chunks)  an Arrow array read from its own buffers:
 *                              type "i1".."i8", "u1".."u8", "f4", "f8",
 *                              "b" (bit-packed bool), "s4"/"s8" (string or
 *                              binary with 32/64-bit offsets), "n" (null);
 *                              chunks a list of (length, offset, validity
 *                              or None, buffer 1, buffer 2 or None): for
 *                              numbers (values, None), for strings (offsets,
 *                              data). A null (validity bit 0) is missing.
 *     ("seq", sequence)        any Python sequence, one element per row:
 *                              None (missing), str (UTF-8), bytes, bool,
 *                              int, float (or what converts with __index__
 *                              or __float__), or a list/tuple/array of those
 *                              (a sparse input's values). Read with the GIL.
 *   Missing values follow the description's rules (wisp_raw_row_end: a
 *   dense input's default, or a bad row). A value of the wrong type, an
 *   unencodable str, an integer beyond int64 make THAT row bad (never an
 *   exception), as the text readers do.
 *
 * The raw batch is the session's (made on first use from the model's
 * description, cleared and reused per call). The GIL is released while the
 * rows are built when no source is a sequence, and always while scoring.
 */
#include "_wisp.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SRC_BUF, SRC_ARROW, SRC_SEQ };

typedef struct {
    size_t length, offset;
    Py_buffer valid, b1, b2;
    int has_valid, has_b1, has_b2;
} arrow_chunk;

typedef struct {
    size_t input;
    int kind;                       /* SRC_* */
    arg_buf buf;                    /* SRC_BUF */
    arg_buf mask;                   /* SRC_BUF, optional: nonzero = missing (pandas's NaN/NA) */
    PyObject *seq;                  /* SRC_SEQ: the sequence as a list (owned) */
    char atype;                     /* SRC_ARROW: 'i', 'u', 'f', 'b', 's', 'n' */
    int asize;                      /* bytes per value ('s': per offset) */
    arrow_chunk *chunks;
    size_t nchunks, ci, cstart;     /* the chunk of the current row, its first row */
} src;


/* The engine's messages for raw rows begin "row N: " (N the row's 0-based index); Session.bad_rows
 * pairs each reason with its row already, so that prefix goes when it names the same row. */
static const char *without_row_prefix(const char *m, size_t row)
{
    if (!m || strncmp(m, "row ", 4) != 0) return m;
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(m + 4, &end, 10);
    if (errno || end == m + 4 || n != (unsigned long long)row || end[0] != ':' || end[1] != ' ') return m;
    return end + 2;
}

static void src_free(src *s)
{
    wisp__py_rel_buf(&s->buf);
    wisp__py_rel_buf(&s->mask);
    Py_CLEAR(s->seq);
    for (size_t i = 0; i < s->nchunks; i++) {
        arrow_chunk *c = &s->chunks[i];
        if (c->has_valid) PyBuffer_Release(&c->valid);
        if (c->has_b1) PyBuffer_Release(&c->b1);
        if (c->has_b2) PyBuffer_Release(&c->b2);
    }
    free(s->chunks);
    memset(s, 0, sizeof *s);
}

static int get_simple(PyObject *o, Py_buffer *v, int *held)
{
    if (o == Py_None) return 0;
    if (PyObject_GetBuffer(o, v, PyBUF_SIMPLE) < 0) return -1;
    *held = 1;
    return 0;
}

/* Parse one ("arrow", type, chunks) source and check every buffer's size. */
static int parse_arrow(src *s, PyObject *type, PyObject *chunks, size_t rows, const char *name)
{
    const char *t = PyUnicode_AsUTF8AndSize(type, NULL);
    if (!t) return -1;
    s->atype = t[0];
    s->asize = t[0] && t[1] ? t[1] - '0' : 0;
    int ok = 0;
    switch (s->atype) {
    case 'i': case 'u': ok = s->asize == 1 || s->asize == 2 || s->asize == 4 || s->asize == 8; break;
    case 'f': ok = s->asize == 4 || s->asize == 8; break;
    case 's': ok = s->asize == 4 || s->asize == 8; break;
    case 'b': case 'n': ok = 1; break;
    }
    if (!ok) { PyErr_Format(PyExc_TypeError, "input '%s': unknown Arrow source type '%s'", name, t); return -1; }
    if (!PyList_Check(chunks)) { PyErr_SetString(PyExc_TypeError, "arrow chunks must be a list"); return -1; }
    Py_ssize_t n = PyList_Size(chunks);
    s->chunks = calloc(n ? (size_t)n : 1, sizeof *s->chunks);
    if (!s->chunks) { PyErr_NoMemory(); return -1; }
    size_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        arrow_chunk *c = &s->chunks[s->nchunks++];
        PyObject *o_valid, *o_b1, *o_b2;
        Py_ssize_t len, off;
        if (!PyArg_ParseTuple(PyList_GetItem(chunks, i), "nnOOO", &len, &off, &o_valid, &o_b1, &o_b2)) return -1;
        if (len < 0 || off < 0) { PyErr_Format(PyExc_ValueError, "input '%s': a negative Arrow length or offset", name); return -1; }
        c->length = (size_t)len; c->offset = (size_t)off;
        if (get_simple(o_valid, &c->valid, &c->has_valid) < 0 || get_simple(o_b1, &c->b1, &c->has_b1) < 0 ||
            get_simple(o_b2, &c->b2, &c->has_b2) < 0)
            return -1;
        size_t end = c->offset + c->length;
        int bad = c->has_valid && (size_t)c->valid.len < (end + 7) / 8;
        if (s->atype == 'b') bad |= !c->has_b1 || (size_t)c->b1.len < (end + 7) / 8;
        else if (s->atype == 's') bad |= !c->has_b1 || !c->has_b2 || (size_t)c->b1.len < (end + 1) * (size_t)s->asize;
        else if (s->atype != 'n') bad |= !c->has_b1 || (size_t)c->b1.len < end * (size_t)s->asize;
        if (bad) {
            PyErr_Format(PyExc_ValueError, "input '%s': Arrow chunk %zd has buffers too small for %zd values at offset %zd",
                         name, i, len, off);
            return -1;
        }
        total += c->length;
    }
    if (total != rows) {
        PyErr_Format(PyExc_ValueError, "input '%s': %zu values for %zu rows", name, total, rows);
        return -1;
    }
    return 0;
}

static inline int bit_at(const Py_buffer *v, size_t i) { return (((const uint8_t *)v->buf)[i >> 3] >> (i & 7)) & 1; }

/* Add row r's value of an Arrow source (rows are visited in order). */
static int add_arrow(wisp_raw *raw, src *s, size_t r, const char *name)
{
    while (s->ci < s->nchunks && r >= s->cstart + s->chunks[s->ci].length) s->cstart += s->chunks[s->ci++].length;
    arrow_chunk *c = &s->chunks[s->ci];
    size_t i = c->offset + (r - s->cstart);
    if (s->atype == 'n' || (c->has_valid && !bit_at(&c->valid, i))) return WISP_OK;     /* null: missing */
    const void *p = c->b1.buf;
    switch (s->atype) {
    case 'b': return wisp_raw_add_int(raw, s->input, bit_at(&c->b1, i));
    case 'f': return wisp_raw_add_float(raw, s->input, s->asize == 4 ? ((const float *)p)[i] : ((const double *)p)[i]);
    case 'i':
        switch (s->asize) {
        case 1: return wisp_raw_add_int(raw, s->input, ((const int8_t *)p)[i]);
        case 2: return wisp_raw_add_int(raw, s->input, ((const int16_t *)p)[i]);
        case 4: return wisp_raw_add_int(raw, s->input, ((const int32_t *)p)[i]);
        default: return wisp_raw_add_int(raw, s->input, ((const int64_t *)p)[i]);
        }
    case 'u': {
        uint64_t u;
        switch (s->asize) {
        case 1: u = ((const uint8_t *)p)[i]; break;
        case 2: u = ((const uint16_t *)p)[i]; break;
        case 4: u = ((const uint32_t *)p)[i]; break;
        default: u = ((const uint64_t *)p)[i]; break;
        }
        if (u > (uint64_t)INT64_MAX) {
            char m[160];
            snprintf(m, sizeof m, "input '%s': %llu is beyond int64", name, (unsigned long long)u);
            return wisp_raw_row_reject(raw, m);
        }
        return wisp_raw_add_int(raw, s->input, (int64_t)u);
    }
    default: {                                                         /* 's' */
        uint64_t a, z;
        if (s->asize == 4) {
            int32_t x = ((const int32_t *)p)[i], y = ((const int32_t *)p)[i + 1];
            if (x < 0 || y < x) goto bad_off;
            a = (uint64_t)x; z = (uint64_t)y;
        } else {
            int64_t x = ((const int64_t *)p)[i], y = ((const int64_t *)p)[i + 1];
            if (x < 0 || y < x) goto bad_off;
            a = (uint64_t)x; z = (uint64_t)y;
        }
        if (z > (uint64_t)c->b2.len) goto bad_off;
        return wisp_raw_add_string(raw, s->input, (const char *)c->b2.buf + a, (size_t)(z - a));
    bad_off: {
            char m[160];
            snprintf(m, sizeof m, "input '%s': an Arrow string offset out of its data", name);
            return wisp_raw_row_reject(raw, m);
        }
    }
    }
}

/* Add row r's value of a numpy buffer source. */
static int add_buf(wisp_raw *raw, src *s, size_t r)
{
    const arg_buf *b = &s->buf;
    if (s->mask.held && ((const uint8_t *)s->mask.view.buf)[r]) return WISP_OK;       /* missing */
    if (b->kind == K_FLOAT) return wisp_raw_add_float(raw, s->input, float_at(b, r));
    int neg;
    uint64_t u = int_at(b, r, &neg);
    if (!neg && u > (uint64_t)INT64_MAX) return wisp_raw_add_float(raw, s->input, (double)u);   /* bad for int64 */
    return wisp_raw_add_int(raw, s->input, (int64_t)u);
}

static int reject_type(wisp_raw *raw, const char *name, PyObject *v)
{
    char m[200];
    PyObject *tn = PyType_GetName(Py_TYPE(v));
    const char *t = tn ? PyUnicode_AsUTF8AndSize(tn, NULL) : NULL;
    snprintf(m, sizeof m, "input '%s': a value of type %s (want str, bytes, int, float or None)", name, t ? t : "?");
    Py_XDECREF(tn);
    PyErr_Clear();
    return wisp_raw_row_reject(raw, m);
}

/* Add one Python value (depth 0: a row's element; depth 1: inside a list). GIL held. */
static int add_obj(wisp_raw *raw, size_t input, const char *name, PyObject *v, int depth)
{
    if (v == Py_None) return WISP_OK;
    if (PyUnicode_Check(v)) {
        Py_ssize_t n;
        const char *p = PyUnicode_AsUTF8AndSize(v, &n);
        if (!p) {
            PyErr_Clear();
            char m[160];
            snprintf(m, sizeof m, "input '%s': a str that is not encodable as UTF-8", name);
            return wisp_raw_row_reject(raw, m);
        }
        return wisp_raw_add_string(raw, input, p, (size_t)n);
    }
    if (PyBytes_Check(v)) {
        char *p; Py_ssize_t n;
        if (PyBytes_AsStringAndSize(v, &p, &n) < 0) { PyErr_Clear(); return reject_type(raw, name, v); }
        return wisp_raw_add_string(raw, input, p, (size_t)n);
    }
    if (PyFloat_Check(v)) return wisp_raw_add_float(raw, input, PyFloat_AsDouble(v));
    if (PyLong_Check(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || (x == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            char m[160];
            snprintf(m, sizeof m, "input '%s': an integer beyond int64", name);
            return wisp_raw_row_reject(raw, m);
        }
        return wisp_raw_add_int(raw, input, x);
    }
    if (depth == 0 && (PyList_Check(v) || PyTuple_Check(v) || PySequence_Check(v))) {
        PyObject *f = PySequence_List(v);
        if (!f) { PyErr_Clear(); return reject_type(raw, name, v); }
        int st = WISP_OK;
        Py_ssize_t n = PyList_Size(f);
        for (Py_ssize_t k = 0; k < n && st == WISP_OK; k++)
            st = add_obj(raw, input, name, PyList_GetItem(f, k), 1);
        Py_DECREF(f);
        return st;
    }
    if (PyIndex_Check(v)) {                             /* numpy integers */
        PyObject *i = PyNumber_Index(v);
        if (!i) return reject_type(raw, name, v);
        int st = add_obj(raw, input, name, i, depth);
        Py_DECREF(i);
        return st;
    }
    PyObject *f = PyNumber_Float(v);                    /* numpy float32, Decimal, ... */
    if (!f) return reject_type(raw, name, v);
    double d = PyFloat_AsDouble(f);
    Py_DECREF(f);
    return wisp_raw_add_float(raw, input, d);
}

PyObject *wisp__py_score_raw(SessionObject *self, PyObject *args)
{
    PyObject *cols, *o_out;
    Py_ssize_t nrows;
    if (!PyArg_ParseTuple(args, "O!nO", &PyList_Type, &cols, &nrows, &o_out)) return NULL;
    if (nrows < 0) { PyErr_SetString(PyExc_ValueError, "rows must be >= 0"); return NULL; }
    size_t rows = (size_t)nrows;
    if (rows > WISP_MAX_ROWS) return wisp__py_raise_status(WISP_ELIMIT, "X has more rows than WISP_MAX_ROWS");
    arg_buf bo;
    memset(&bo, 0, sizeof bo);
    Py_ssize_t ncols = PyList_Size(cols);
    src *srcs = calloc(ncols ? (size_t)ncols : 1, sizeof *srcs);
    if (!srcs) return PyErr_NoMemory();
    PyObject *result = NULL;
    int need_gil = 0, entered = 0;
    wisp_columns *desc = NULL;         /* the model's description: input names for messages */
    if (wisp__py_get_out(o_out, rows, &bo) < 0) goto done;
    {
        int st = wisp_columns_from_model(((ModelObject *)self->model)->m, &desc);
        if (st == WISP_OK && !self->raw) st = wisp_raw_new(wisp__py_engine(), desc, &self->raw);
        if (st != WISP_OK) {
            char msg[1024];
            wisp__py_copy_errmsg(msg, sizeof msg, st);
            wisp__py_raise_status(st, msg);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < ncols; i++) {
        src *s = &srcs[i];
        PyObject *item = PyList_GetItem(cols, i), *o_src;
        Py_ssize_t input;
        if (!PyArg_ParseTuple(item, "nO!", &input, &PyTuple_Type, &o_src)) goto done;
        s->input = (size_t)input;
        if (input < 0 || (size_t)input >= wisp_columns_num_inputs(desc)) {
            PyErr_Format(PyExc_ValueError, "score_raw: %zd is not an input of the model's description", input);
            goto done;
        }
        const char *name = wisp_columns_input_name(desc, s->input);
        Py_ssize_t n = PyTuple_Size(o_src);
        const char *kind = n ? PyUnicode_AsUTF8AndSize(PyTuple_GetItem(o_src, 0), NULL) : NULL;
        if (!kind) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "score_raw: an empty source"); goto done; }
        if (!strcmp(kind, "buf") && (n == 2 || n == 3)) {
            s->kind = SRC_BUF;
            if (wisp__py_get_buf(PyTuple_GetItem(o_src, 1), name, 0, 1, &s->buf) < 0) goto done;
            if (n == 3 && PyTuple_GetItem(o_src, 2) != Py_None) {
                if (wisp__py_get_buf(PyTuple_GetItem(o_src, 2), name, 0, 1, &s->mask) < 0) goto done;
                if (s->mask.size != 1 || (size_t)s->mask.count != rows) {
                    PyErr_Format(PyExc_ValueError, "input '%s': the missing-value mask must be %zu bytes", name, rows);
                    goto done;
                }
            }
            if ((size_t)s->buf.count != rows) {
                PyErr_Format(PyExc_ValueError, "input '%s': %zd values for %zu rows", name, s->buf.count, rows);
                goto done;
            }
        } else if (!strcmp(kind, "arrow") && n == 3) {
            s->kind = SRC_ARROW;
            if (parse_arrow(s, PyTuple_GetItem(o_src, 1), PyTuple_GetItem(o_src, 2), rows, name) < 0) goto done;
        } else if (!strcmp(kind, "seq") && n == 2) {
            s->kind = SRC_SEQ;
            need_gil = 1;
            s->seq = PySequence_List(PyTuple_GetItem(o_src, 1));
            if (!s->seq) goto done;
            if ((size_t)PyList_Size(s->seq) != rows) {
                PyErr_Format(PyExc_ValueError, "input '%s': %zd values for %zu rows", name,
                             PyList_Size(s->seq), rows);
                goto done;
            }
        } else {
            PyErr_Format(PyExc_TypeError, "score_raw: unknown source '%s'", kind);
            goto done;
        }
    }
    if (wisp__py_enter(self) < 0) goto done;
    entered = 1;
    int st = WISP_OK;
    char msg[1024] = "";
    bad_list bad = { 0 };
    float *out = bo.view.buf;
    wisp_raw *raw = self->raw;
    PyThreadState *ts = need_gil ? NULL : PyEval_SaveThread();
    {
        wisp_raw_clear(raw);
        for (size_t r = 0; r < rows && st == WISP_OK; r++) {
            st = wisp_raw_row_begin(raw, 0);
            for (Py_ssize_t i = 0; i < ncols && st == WISP_OK; i++) {
                src *s = &srcs[i];
                const char *name = wisp_columns_input_name(desc, s->input);
                switch (s->kind) {
                case SRC_BUF: st = add_buf(raw, s, r); break;
                case SRC_ARROW: st = add_arrow(raw, s, r, name); break;
                default: st = add_obj(raw, s->input, name, PyList_GetItem(s->seq, (Py_ssize_t)r), 0);
                }
            }
            if (st == WISP_OK) st = wisp_raw_row_end(raw);
        }
    }
    if (st != WISP_OK) wisp__py_copy_errmsg(msg, sizeof msg, st);
    if (!ts && st == WISP_OK) ts = PyEval_SaveThread();
    if (st == WISP_OK) {
        st = wisp_session_score_raw(self->s, raw, out);
        if (st != WISP_OK) wisp__py_copy_errmsg(msg, sizeof msg, st);
        else {
            /* the raw batch's bad rows and the rows the transform refused, with the engine's messages */
            size_t nb = wisp_session_bad_count(self->s);
            for (size_t i = 0; i < nb; i++) {
                size_t row; uint64_t line; const char *m;
                if (wisp_session_bad_row(self->s, i, &row, &line, &m) == WISP_OK)
                    wisp__py_bad_add(&bad, row, BAD_ENGINE, without_row_prefix(m, row));
            }
            wisp__py_finish_bad(&bad, out, rows);
        }
        wisp_raw_clear(raw);       /* drop the rows (and nothing keeps pointers into X) */
    }
    if (ts) PyEval_RestoreThread(ts);
    self->busy = 0;
    entered = 0;
    if (st != WISP_OK) wisp__py_raise_status(st, msg);
    else result = wisp__py_bad_to_list(&bad);
    wisp__py_bad_free(&bad);
done:
    if (entered) self->busy = 0;
    for (Py_ssize_t i = 0; i < ncols; i++) src_free(&srcs[i]);
    free(srcs);
    wisp_columns_free(desc);
    wisp__py_rel_buf(&bo);
    return result;
}
