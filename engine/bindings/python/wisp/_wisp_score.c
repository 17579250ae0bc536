/* _wisp_score.c — the extension's scoring entries for CSR arrays (through wisp_batch_from_csr), dense rows and libsvm text, and the bad-row list they share. */
#include "_wisp.h"

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- the bad-row list ------------------------------------------------------------------- */

void wisp__py_bad_add(bad_list *l, size_t row, int why, const char *msg)
{
    if (l->n && l->v[l->n - 1].row == row) return;          /* one reason per row: the first */
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        bad_row *v = realloc(l->v, cap * sizeof *v);
        if (!v) { l->oom = 1; return; }
        l->v = v; l->cap = cap;
    }
    bad_row *r = &l->v[l->n++];
    r->row = row; r->why = why;
    r->msg = msg ? strdup(msg) : NULL;
}

static int cmp_bad(const void *a, const void *b)
{
    const bad_row *x = a, *y = b;
    return x->row < y->row ? -1 : x->row > y->row;
}

void wisp__py_bad_free(bad_list *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->v[i].msg);
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* The list as Python [(row, reason)], sorted by row, one entry per row. */
PyObject *wisp__py_bad_to_list(bad_list *l)
{
    if (l->oom) { PyErr_NoMemory(); return NULL; }
    if (l->n > 1) qsort(l->v, l->n, sizeof *l->v, cmp_bad);
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (size_t i = 0; i < l->n; i++) {
        bad_row *r = &l->v[i];
        if (i && l->v[i - 1].row == r->row) continue;
        char msg[256];
        if (r->why == BAD_NAN_SCORE) snprintf(msg, sizeof msg, "the score is NaN (a NaN or infinite weight or value)");
        else snprintf(msg, sizeof msg, "%s", r->msg ? r->msg : "bad row");
        PyObject *t = Py_BuildValue("(ns)", (Py_ssize_t)r->row, msg);
        if (!t || PyList_Append(out, t) < 0) { Py_XDECREF(t); Py_DECREF(out); return NULL; }
        Py_DECREF(t);
    }
    return out;
}

/* Mark the rows of `bad` NaN in out, and list the other NaN outputs. */
/* 1 if one of the NAN_BLOCK floats at p is a NaN: the bit patterns compared without a branch,
 * a fixed count, so the compiler vectorizes it at -O2 (a third of a one-at-a-time isnan loop's
 * time for 1M answers on the dev VM: 95 us against 275 us). */
enum { NAN_BLOCK = 256 };
static inline int block_has_nan(const float *p)
{
    uint32_t any = 0;
    for (int i = 0; i < NAN_BLOCK; i++) {
        uint32_t u;
        memcpy(&u, p + i, 4);
        any |= (uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
    }
    return any != 0;
}

void wisp__py_finish_bad(bad_list *bad, float *out, size_t rows)
{
    size_t listed = bad->n;
    for (size_t i = 0; i < listed; i++) out[bad->v[i].row] = NAN;
    if (listed > 1) qsort(bad->v, listed, sizeof *bad->v, cmp_bad);
    size_t j = 0;
    for (size_t r = 0; r < rows; r++) {
        if (r % NAN_BLOCK == 0 && r + NAN_BLOCK <= rows && !block_has_nan(out + r)) {
            r += NAN_BLOCK - 1;
            continue;
        }
        if (!isnan(out[r])) continue;
        while (j < listed && bad->v[j].row < r) j++;
        if (j < listed && bad->v[j].row == r) continue;
        wisp__py_bad_add(bad, r, BAD_NAN_SCORE, NULL);
    }
}

/* The rows b lists bad, with the engine's messages. */
static void add_batch_bad(bad_list *bad, const wisp_batch *b)
{
    const size_t nb = wisp_batch_bad_count(b);
    for (size_t i = 0; i < nb; i++) {
        size_t row; uint64_t line; const char *m;
        if (wisp_batch_bad_row(b, i, &row, &line, &m) == WISP_OK) wisp__py_bad_add(bad, row, BAD_ENGINE, m);
    }
}

/* Score a batch wrapped over (row_ptr, ids, vals) into out and list its bad rows. Runs without the GIL. */
static int score_wrapped(SessionObject *self, size_t rows, const uint32_t *row_ptr, const uint32_t *ids,
                         const float *vals, float *out, bad_list *bad, char *msg, size_t msglen)
{
    wisp_batch *b = NULL;
    int st = wisp_batch_wrap(wisp__py_engine(), rows, row_ptr, ids, NULL, vals, &b);
    if (st == WISP_OK) st = wisp_session_score(self->s, b, out);
    if (st != WISP_OK) wisp__py_copy_errmsg(msg, msglen, st);
    else add_batch_bad(bad, b);        /* a value that is not a finite float32, in the engine's words */
    wisp_batch_free(b);
    return st;
}

/* ---- CSR arrays ------------------------------------------------------------------------------------ */

/* The wisp_batch_from_csr element type of a buffer (role 0 indptr, 1 indices, 2 values), 0 for one it
 * does not take (the Python layer converts those with numpy first). */
static int csr_type(const arg_buf *b, int role)
{
    if (role == 2) return b->kind != K_FLOAT ? 0 : b->size == 4 ? WISP_CSR_FLOAT32 : WISP_CSR_FLOAT64;
    if (b->kind == K_INT) return b->size == 4 ? WISP_CSR_INT32 : b->size == 8 ? WISP_CSR_INT64 : 0;
    if (b->kind == K_UINT) return b->size == 4 ? WISP_CSR_UINT32 : b->size == 8 && role == 1 ? WISP_CSR_UINT64 : 0;
    return 0;
}

/* The CSR core over buffers already taken (score_csr's, score_fast's, and the DLPack host path's in
 * _wisp_dlpack.c): bp indptr, bi indices, bv values (have_vals) or unused, bo the output (at least
 * rows floats). The arrays go to wisp_batch_from_csr as they are, with scipy's rules
 * (WISP_CSR_STRICT); the batch is scored and its bad rows listed. The bad-row list (None instead
 * of an empty one when none_if_clean), or NULL with an exception. The buffers stay the caller's. */
PyObject *wisp__py_score_csr_bufs(SessionObject *self, const arg_buf *bp, const arg_buf *bi, const arg_buf *bv,
                                  int have_vals, const arg_buf *bo, int none_if_clean)
{
    const int it = csr_type(bp, 0), dt = csr_type(bi, 1), vt = have_vals ? csr_type(bv, 2) : 0;
    if (!it || !dt || (have_vals && !vt)) {
        PyErr_Format(PyExc_TypeError, "%s is not an array the engine reads (indptr int32, int64 or uint32; indices "
                     "int32, int64, uint32 or uint64; values float32 or float64)",
                     !it ? "indptr" : !dt ? "indices" : "values");
        return NULL;
    }
    if (bp->count < 1) return wisp__py_raise_status(WISP_EINVAL, "indptr is empty (it has rows + 1 entries)");
    const size_t rows = (size_t)bp->count - 1, nnz = (size_t)bi->count;
    if ((size_t)bo->count < rows) {
        PyErr_Format(PyExc_ValueError, "out: %zd elements for %zu rows", bo->count, rows);
        return NULL;
    }
    if (have_vals && bv->count != bi->count) {
        char m[160];
        snprintf(m, sizeof m, "values has %zd entries but indices has %zd", bv->count, bi->count);
        return wisp__py_raise_status(WISP_EINVAL, m);
    }
    wisp_engine *eng = wisp__py_engine();
    if (!eng || wisp__py_enter(self) < 0) return NULL;
    int st;
    char msg[1024] = "";
    bad_list bad = { 0 };
    float *out = bo->view.buf;
    Py_BEGIN_ALLOW_THREADS
    wisp_batch *b = NULL;
    st = wisp_batch_from_csr(eng, rows, bp->view.buf, it, bi->view.buf, dt, nnz, have_vals ? bv->view.buf : NULL, vt,
                             WISP_CSR_STRICT, &b);
    if (st == WISP_OK) st = wisp_session_score(self->s, b, out);
    if (st != WISP_OK) wisp__py_copy_errmsg(msg, sizeof msg, st);
    else {
        add_batch_bad(&bad, b);
        wisp__py_finish_bad(&bad, out, rows);
    }
    wisp_batch_free(b);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyObject *result = NULL;
    if (st != WISP_OK) wisp__py_raise_status(st, msg);
    else if (none_if_clean && bad.n == 0 && !bad.oom) { Py_INCREF(Py_None); result = Py_None; }
    else result = wisp__py_bad_to_list(&bad);
    wisp__py_bad_free(&bad);
    return result;
}

/* score_csr(indptr, indices, values or None, out) -> [(row, reason)]: 1-D C-contiguous buffers of the
 * types wisp_batch_from_csr takes (indptr int32/int64/uint32, indices int32/int64/uint32/uint64, values
 * float32/float64), in place when they are the engine's layout, else converted there (TypeError for
 * other element types: the Python layer converts them first). */
PyObject *wisp__py_score_csr(SessionObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* METH_FASTCALL: the 10-row path pays no argument tuple */
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "score_csr(indptr, indices, values|None, out): 4 arguments, %zd given", nargs);
        return NULL;
    }
    PyObject *o_val = args[2];
    arg_buf bp, bi, bv, bo;
    bp.held = bi.held = bv.held = bo.held = 0;
    PyObject *result = NULL;
    const int have_vals = o_val != Py_None;
    if (wisp__py_get_buf(args[0], "indptr", 0, 1, &bp) < 0) goto done;
    if (wisp__py_get_buf(args[1], "indices", 0, 1, &bi) < 0) goto done;
    if (have_vals && wisp__py_get_buf(o_val, "values", 0, 1, &bv) < 0) goto done;
    if (wisp__py_get_out(args[3], bp.count > 0 ? (size_t)bp.count - 1 : 0, &bo) < 0) goto done;
    result = wisp__py_score_csr_bufs(self, &bp, &bi, &bv, have_vals, &bo, 0);
done:
    wisp__py_rel_buf(&bp); wisp__py_rel_buf(&bi); wisp__py_rel_buf(&bv); wisp__py_rel_buf(&bo);
    return result;
}

/* score_dense(X, out) -> [(row, reason)]: X 2-D C-contiguous; the non-zero
 * entries of row i are its features (column j is id j), valued. NaN and
 * infinities make the row bad. Any integer, bool or float element type. */
PyObject *wisp__py_score_dense(SessionObject *self, PyObject *args)
{
    PyObject *o_x, *o_out;
    if (!PyArg_ParseTuple(args, "OO", &o_x, &o_out)) return NULL;
    arg_buf bx, bo;
    memset(&bo, 0, sizeof bo);
    PyObject *result = NULL;
    if (wisp__py_get_buf(o_x, "X", 0, 2, &bx) < 0) goto done;
    size_t rows = (size_t)bx.view.shape[0], cols = (size_t)bx.view.shape[1];
    if (wisp__py_get_out(o_out, rows, &bo) < 0) goto done;
    if (rows > WISP_MAX_ROWS) {
        wisp__py_raise_status(WISP_ELIMIT, "X has more rows than WISP_MAX_ROWS");
        goto done;
    }
    if (wisp__py_enter(self) < 0) goto done;
    int st = WISP_OK;
    char msg[1024] = "";
    bad_list bad = { 0 };
    uint32_t *row_ptr = NULL, *ids = NULL;
    float *vals = NULL;
    float *out = bo.view.buf;
    Py_BEGIN_ALLOW_THREADS
    row_ptr = malloc((rows + 1) * sizeof *row_ptr);
    if (!row_ptr) { st = WISP_ENOMEM; snprintf(msg, sizeof msg, "out of memory (%zu rows)", rows); goto unlocked; }
    uint64_t nnz = 0;
    row_ptr[0] = 0;
    for (size_t r = 0; r < rows; r++) {
        size_t n = 0;
        for (size_t j = 0; j < cols; j++) n += float_at(&bx, r * cols + j) != 0.0;
        if (n > WISP_MAX_ROW_FEATURES) {
            st = WISP_ELIMIT;
            snprintf(msg, sizeof msg, "row %zu has %zu non-zero columns, more than WISP_MAX_ROW_FEATURES (%u)", r, n,
                     WISP_MAX_ROW_FEATURES);
            goto unlocked;
        }
        nnz += n;
        if (nnz > WISP_MAX_NNZ) {
            st = WISP_ELIMIT;
            snprintf(msg, sizeof msg, "X has more than WISP_MAX_NNZ (%u) non-zero entries", WISP_MAX_NNZ);
            goto unlocked;
        }
        row_ptr[r + 1] = (uint32_t)nnz;
    }
    ids = malloc((nnz ? nnz : 1) * sizeof *ids);
    vals = malloc((nnz ? nnz : 1) * sizeof *vals);
    if (!ids || !vals) {
        st = WISP_ENOMEM;
        snprintf(msg, sizeof msg, "out of memory (%llu non-zero entries)", (unsigned long long)nnz);
        goto unlocked;
    }
    size_t k = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++) {
            double d = float_at(&bx, r * cols + j);
            if (d == 0.0) continue;
            ids[k] = j > UINT32_MAX ? UINT32_MAX : (uint32_t)j;
            vals[k++] = (float)d;
        }
    st = score_wrapped(self, rows, row_ptr, ids, vals, out, &bad, msg, sizeof msg);
    if (st == WISP_OK) wisp__py_finish_bad(&bad, out, rows);
unlocked:
    Py_END_ALLOW_THREADS
    self->busy = 0;
    free(row_ptr); free(ids); free(vals);
    if (st != WISP_OK) wisp__py_raise_status(st, msg);
    else result = wisp__py_bad_to_list(&bad);
    wisp__py_bad_free(&bad);
done:
    wisp__py_rel_buf(&bx); wisp__py_rel_buf(&bo);
    return result;
}

/* parse_libsvm(data) -> rows: parse libsvm text (bytes-like) into the
 * session's text batch; score_parsed(out) then scores it. The Python layer
 * calls the pair under the session's lock. */
PyObject *wisp__py_parse_libsvm(SessionObject *self, PyObject *arg)
{
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE) < 0) return NULL;
    if (wisp__py_enter(self) < 0) { PyBuffer_Release(&v); return NULL; }
    int st = WISP_OK;
    char msg[1024] = "";
    size_t rows = 0;
    Py_BEGIN_ALLOW_THREADS
    if (!self->text) st = wisp_batch_new(wisp__py_engine(), &self->text);
    else wisp_batch_clear(self->text);
    if (st == WISP_OK) {
        uint64_t line = 0;
        st = wisp_batch_parse_libsvm(self->text, v.buf, (size_t)v.len, 1, 0, &line, NULL);
    }
    if (st != WISP_OK) wisp__py_copy_errmsg(msg, sizeof msg, st);
    else rows = wisp_batch_rows(self->text);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyBuffer_Release(&v);
    if (st != WISP_OK) return wisp__py_raise_status(st, msg);
    return PyLong_FromSize_t(rows);
}

PyObject *wisp__py_score_parsed(SessionObject *self, PyObject *o_out)
{
    if (!self->text) { wisp__py_raise_status(WISP_ESTATE, "score_parsed: no text was parsed"); return NULL; }
    size_t rows = wisp_batch_rows(self->text);
    arg_buf bo;
    if (wisp__py_get_out(o_out, rows, &bo) < 0) { wisp__py_rel_buf(&bo); return NULL; }
    if (wisp__py_enter(self) < 0) { wisp__py_rel_buf(&bo); return NULL; }
    int st;
    char msg[1024] = "";
    bad_list bad = { 0 };
    float *out = bo.view.buf;
    Py_BEGIN_ALLOW_THREADS
    st = wisp_session_score(self->s, self->text, out);
    if (st != WISP_OK) wisp__py_copy_errmsg(msg, sizeof msg, st);
    else {
        add_batch_bad(&bad, self->text);
        wisp__py_finish_bad(&bad, out, rows);
    }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    wisp__py_rel_buf(&bo);
    PyObject *result = st != WISP_OK ? wisp__py_raise_status(st, msg) : wisp__py_bad_to_list(&bad);
    wisp__py_bad_free(&bad);
    return result;
}

/* ---- Session.score's CSR path -------------------------------------------------------------------- */

/* The fast path's helpers from the Python layer: numpy.empty, numpy.float32, is_scipy_csr(X). */
static PyObject *fast_empty, *fast_f32, *fast_is_csr;
static PyObject *s_indptr, *s_indices, *s_data;
#define CSR_TYPES 8
static PyTypeObject *csr_yes[CSR_TYPES], *csr_no[CSR_TYPES];    /* borrowed-forever: type objects seen */
static int csr_yes_n, csr_no_n;

PyObject *wisp__py_register_fast(PyObject *mod, PyObject *args)
{
    PyObject *e, *f, *c;
    if (!PyArg_ParseTuple(args, "OOO", &e, &f, &c)) return NULL;
    Py_INCREF(e); Py_INCREF(f); Py_INCREF(c);
    Py_XDECREF(fast_empty); Py_XDECREF(fast_f32); Py_XDECREF(fast_is_csr);
    fast_empty = e;
    fast_f32 = f;
    fast_is_csr = c;
    if (!s_indptr && !(s_indptr = PyUnicode_InternFromString("indptr"))) return NULL;
    if (!s_indices && !(s_indices = PyUnicode_InternFromString("indices"))) return NULL;
    if (!s_data && !(s_data = PyUnicode_InternFromString("data"))) return NULL;
    Py_RETURN_NONE;
}

/* 1: X's type is a scipy CSR matrix/array, 0: not, -1: error (asked of the Python layer once per type). */
static int is_csr_type(PyObject *X)
{
    PyTypeObject *t = Py_TYPE(X);
    for (int i = 0; i < csr_yes_n; i++) if (csr_yes[i] == t) return 1;
    for (int i = 0; i < csr_no_n; i++) if (csr_no[i] == t) return 0;
    PyObject *r = PyObject_CallFunctionObjArgs(fast_is_csr, X, NULL);
    if (!r) return -1;
    int yes = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (yes < 0) return -1;
    /* type objects stay referenced here, so a pointer never names another type */
    if (yes && csr_yes_n < CSR_TYPES) { Py_INCREF((PyObject *)t); csr_yes[csr_yes_n++] = t; }
    if (!yes && csr_no_n < CSR_TYPES) { Py_INCREF((PyObject *)t); csr_no[csr_no_n++] = t; }
    return yes;
}

/* score_fast(X) -> float32 array, or NotImplemented: Session.score's path for a (indptr, indices[,
 * values]) tuple or a scipy CSR. Everything a call needs happens here: the session lock, the output
 * array, the buffers, the engine (the GIL released), the bad rows kept for bad_rows().
 * NotImplemented (nothing scored, no error) for any other X, and for arrays that are not 1-D
 * C-contiguous buffers of a type the engine reads: Session.score converts those with numpy and calls
 * score_csr. Everything else (the engine's checks of the arrays, its failures) raises. */
PyObject *wisp__py_score_fast(SessionObject *self, PyObject *X)
{
    PyObject *a[3] = { NULL, NULL, NULL };
    int owned = 0;
    if (PyTuple_Check(X)) {
        Py_ssize_t n = PyTuple_Size(X);
        if (n != 2 && n != 3) Py_RETURN_NOTIMPLEMENTED;
        for (Py_ssize_t i = 0; i < n; i++) a[i] = PyTuple_GetItem(X, i);       /* borrowed */
        if (n == 3 && a[2] == Py_None) a[2] = NULL;
    } else {
        if (!fast_is_csr) Py_RETURN_NOTIMPLEMENTED;
        int yes = is_csr_type(X);
        if (yes < 0) return NULL;
        if (!yes) Py_RETURN_NOTIMPLEMENTED;
        owned = 1;
        a[0] = PyObject_GetAttr(X, s_indptr);
        a[1] = a[0] ? PyObject_GetAttr(X, s_indices) : NULL;
        a[2] = a[1] ? PyObject_GetAttr(X, s_data) : NULL;
        if (!a[2]) { Py_XDECREF(a[0]); Py_XDECREF(a[1]); return NULL; }
    }
    PyObject *result = NULL, *out = NULL;
    arg_buf bp, bi, bv, bo;
    bp.held = bi.held = bv.held = bo.held = 0;
    if (wisp__py_get_buf(a[0], "indptr", 0, 1, &bp) < 0 || wisp__py_get_buf(a[1], "indices", 0, 1, &bi) < 0 ||
        (a[2] && wisp__py_get_buf(a[2], "values", 0, 1, &bv) < 0)) {
        /* no buffer, not 1-D, an element type numpy converts: Session.score's conversion */
        if (PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_BufferError) ||
            PyErr_ExceptionMatches(PyExc_ValueError)) {
            PyErr_Clear();
            result = Py_NotImplemented;
            Py_INCREF(result);
        }
        goto done;
    }
    if (!csr_type(&bp, 0) || !csr_type(&bi, 1) || (a[2] && !csr_type(&bv, 2))) {
        result = Py_NotImplemented;
        Py_INCREF(result);
        goto done;
    }
    {
        PyObject *n = PyLong_FromSsize_t(bp.count > 0 ? bp.count - 1 : 0);
        if (!n) goto done;
        out = PyObject_CallFunctionObjArgs(fast_empty, n, fast_f32, NULL);
        Py_DECREF(n);
    }
    if (!out || wisp__py_get_out(out, bp.count > 0 ? (size_t)bp.count - 1 : 0, &bo) < 0) goto done;
    if (!self->s) { wisp__py_raise_status(WISP_ESTATE, "the session is closed"); goto done; }
    wisp__py_lock_take(self);
    PyObject *bad = wisp__py_score_csr_bufs(self, &bp, &bi, &bv, a[2] != NULL, &bo, 1);
    if (bad) {
        wisp__py_keep_bad_rows(self, bad == Py_None ? NULL : bad);
        Py_DECREF(bad);
        result = out;
        out = NULL;
    }
    PyThread_release_lock(self->lock);
done:
    wisp__py_rel_buf(&bp); wisp__py_rel_buf(&bi); wisp__py_rel_buf(&bv); wisp__py_rel_buf(&bo);
    Py_XDECREF(out);
    if (owned) { Py_XDECREF(a[0]); Py_XDECREF(a[1]); Py_XDECREF(a[2]); }
    return result;
}
