/* _wisp.c — the CPython extension under the `wisp` package: models, sessions and scoring over wisp.h alone.
 *
 * Design:
 * - Built against the stable ABI (Py_LIMITED_API = 3.11, the first version
 *   whose limited API has the buffer protocol), so one abi3 wheel serves
 *   every CPython from 3.11 on; setup.py drops the define for older
 *   interpreters and the same source builds a version-specific module.
 * - Memory comes in through the buffer protocol only (no numpy C API):
 *   arrays whose type and layout already match the engine's batch layout
 *   (wisp_batch_wrap: uint32 row_ptr, uint32 ids, float vals) are read in
 *   place; the others are converted here, once, in C. The output array is
 *   allocated by the Python layer (numpy.empty) and written through its
 *   buffer.
 * - The GIL is released for the whole engine call: validation, conversion,
 *   wrapping, scoring. The Python objects' buffers stay exported (so
 *   nobody can resize them) until the GIL is taken back.
 * - A session is used by one thread at a time (wisp.h's rule). The Python
 *   layer serializes with a lock; a busy flag here turns a caller who
 *   bypasses it into a WispError instead of a race.
 * - Errors: every failing status raises the class registered for it by
 *   wisp/__init__.py (register_errors), with wisp_errmsg()'s text, copied
 *   on the thread that failed before the GIL is taken back. Bad rows never
 *   raise here: they come back as a list of (row, reason) and their
 *   output is NaN; the Python layer decides (errors="nan" / "raise").
 * - One engine per process, created on first use (threads: one per core).
 */
#include "_wisp.h"

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------------ */

static PyObject *error_base;      /* wisp.WispError */
static PyObject *error_classes;   /* dict: status (int) -> class */

/* Raise the class registered for status with msg. Returns NULL. */
PyObject *wisp__py_raise_status(int status, const char *msg)
{
    PyObject *cls = NULL;
    if (error_classes) {
        PyObject *key = PyLong_FromLong(status);
        if (!key) return NULL;
        cls = PyDict_GetItemWithError(error_classes, key);   /* borrowed */
        Py_DECREF(key);
        if (!cls && PyErr_Occurred()) return NULL;
    }
    if (!cls) cls = error_base ? error_base : PyExc_RuntimeError;
    PyObject *exc = PyObject_CallFunction(cls, "si", msg && msg[0] ? msg : wisp_strerror(status), status);
    if (!exc) return NULL;
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

/* The calling thread's wisp_errmsg() copied into buf (call right after the failure). */
void wisp__py_copy_errmsg(char *buf, size_t len, int status)
{
    const char *m = wisp_errmsg();
    snprintf(buf, len, "%s", m && m[0] ? m : wisp_strerror(status));
}

static PyObject *py_register_errors(PyObject *mod, PyObject *args)
{
    PyObject *base, *classes;
    if (!PyArg_ParseTuple(args, "OO!", &base, &PyDict_Type, &classes)) return NULL;
    Py_INCREF(base);
    Py_INCREF(classes);
    Py_XDECREF(error_base);
    Py_XDECREF(error_classes);
    error_base = base;
    error_classes = classes;
    Py_RETURN_NONE;
}

/* ---- the engine ----------------------------------------------------------------- */

static wisp_engine *engine;
static int engine_threads;        /* for the engine not yet created; 0: one per core */

wisp_engine *wisp__py_engine(void)
{
    if (engine) return engine;
    int st = wisp_engine_new(engine_threads, &engine);
    if (st != WISP_OK) {
        char msg[512];
        wisp__py_copy_errmsg(msg, sizeof msg, st);
        wisp__py_raise_status(st, msg);
        return NULL;
    }
    return engine;
}

static PyObject *py_devices(PyObject *mod, PyObject *noargs)
{
    wisp_engine *eng = wisp__py_engine();
    if (!eng) return NULL;
    int n;
    Py_BEGIN_ALLOW_THREADS
    n = wisp_engine_gpu_count(eng);          /* discovery may take a while: no GIL */
    Py_END_ALLOW_THREADS
    PyObject *gpus = PyList_New(0);
    if (!gpus) return NULL;
    for (int i = 0; i < n; i++) {
        const char *name = wisp_engine_gpu_name(eng, i);
        PyObject *t = Py_BuildValue("(sKii)", name ? name : "", (unsigned long long)wisp_engine_gpu_memory(eng, i),
                                    wisp_engine_gpu_capability(eng, i), wisp_engine_gpu_usable(eng, i));
        if (!t || PyList_Append(gpus, t) < 0) { Py_XDECREF(t); Py_DECREF(gpus); return NULL; }
        Py_DECREF(t);
    }
    const char *status = wisp_engine_gpu_status(eng);
    return Py_BuildValue("(Nsi)", gpus, status ? status : "", wisp_engine_threads(eng));
}

static PyObject *py_set_threads(PyObject *mod, PyObject *arg)
{
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0 || n > 1024) {
        PyErr_Format(PyExc_ValueError, "threads must be 0 (one per core) .. 1024, not %ld", n);
        return NULL;
    }
    if (engine) {
        char msg[160];
        snprintf(msg, sizeof msg, "the engine already runs with %d threads: call wisp.set_threads before the "
                 "first wisp.load or wisp.devices", wisp_engine_threads(engine));
        return wisp__py_raise_status(WISP_ESTATE, msg);
    }
    engine_threads = (int)n;
    Py_RETURN_NONE;
}

static PyObject *py_version(PyObject *mod, PyObject *noargs)
{
    return PyUnicode_FromString(wisp_version());
}

static PyObject *py_stat_names(PyObject *mod, PyObject *noargs)
{
    PyObject *l = PyList_New(0);
    if (!l) return NULL;
    for (int i = 0; i < WISP_STAT_COUNT; i++) {
        PyObject *s = PyUnicode_FromString(wisp_stat_name(i));
        if (!s || PyList_Append(l, s) < 0) { Py_XDECREF(s); Py_DECREF(l); return NULL; }
        Py_DECREF(s);
    }
    return l;
}

/* ---- Model ---------------------------------------------------------------------- */


static PyObject *ModelType;

static PyObject *Model_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *path_obj;
    static char *kwlist[] = { "path", NULL };
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&", kwlist, PyUnicode_FSConverter, &path_obj)) return NULL;
    wisp_engine *eng = wisp__py_engine();
    if (!eng) { Py_DECREF(path_obj); return NULL; }
    const char *path = PyBytes_AsString(path_obj);
    if (!path) { Py_DECREF(path_obj); return NULL; }
    wisp_model *m = NULL;
    int st;
    char msg[1024];
    Py_BEGIN_ALLOW_THREADS
    st = wisp_model_load(eng, path, &m);
    if (st != WISP_OK) wisp__py_copy_errmsg(msg, sizeof msg, st);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_obj);
    if (st != WISP_OK) return wisp__py_raise_status(st, msg);
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    ModelObject *self = (ModelObject *)alloc(type, 0);
    if (!self) { wisp_model_free(m); return NULL; }
    self->m = m;
    return (PyObject *)self;
}

static void Model_dealloc(PyObject *o)
{
    ModelObject *self = (ModelObject *)o;
    PyTypeObject *tp = Py_TYPE(o);
    wisp_model_free(self->m);
    self->m = NULL;
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(o);
    Py_DECREF(tp);
}

static PyObject *Model_num_features(ModelObject *self, PyObject *n)
{ return PyLong_FromUnsignedLongLong(wisp_model_num_features(self->m)); }
static PyObject *Model_bias(ModelObject *self, PyObject *n) { return PyFloat_FromDouble(wisp_model_bias(self->m)); }
static PyObject *Model_dtype(ModelObject *self, PyObject *n)
{ return PyUnicode_FromString(wisp_dtype_name(wisp_model_dtype(self->m))); }
static PyObject *Model_scale(ModelObject *self, PyObject *n) { return PyFloat_FromDouble(wisp_model_scale(self->m)); }
static PyObject *Model_path(ModelObject *self, PyObject *n) { return PyUnicode_DecodeFSDefault(wisp_model_path(self->m)); }
static PyObject *Model_file_size(ModelObject *self, PyObject *n)
{ return PyLong_FromUnsignedLongLong(wisp_model_file_size(self->m)); }
static PyObject *Model_meta_text(ModelObject *self, PyObject *n)
{ return PyUnicode_DecodeUTF8(wisp_model_meta_text(self->m), (Py_ssize_t)strlen(wisp_model_meta_text(self->m)), "replace"); }
static PyObject *Model_columns_text(ModelObject *self, PyObject *n)
{ return PyUnicode_DecodeUTF8(wisp_model_columns(self->m), (Py_ssize_t)strlen(wisp_model_columns(self->m)), "replace"); }
static PyObject *Model_weight(ModelObject *self, PyObject *arg)
{
    unsigned long long id = PyLong_AsUnsignedLongLong(arg);
    if (id == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    return PyFloat_FromDouble(wisp_model_weight(self->m, id));
}

static PyMethodDef Model_methods[] = {
    { "num_features", (PyCFunction)Model_num_features, METH_NOARGS, "Weights in the table (ids 0 .. num_features-1)." },
    { "bias",         (PyCFunction)Model_bias,         METH_NOARGS, "The model bias (intercept)." },
    { "dtype",        (PyCFunction)Model_dtype,        METH_NOARGS, "Weight storage: 'f32', 'f16' or 'i8'." },
    { "scale",        (PyCFunction)Model_scale,        METH_NOARGS, "The int8 scale (1.0 for other dtypes)." },
    { "path",         (PyCFunction)Model_path,         METH_NOARGS, "The file the model was loaded from." },
    { "file_size",    (PyCFunction)Model_file_size,    METH_NOARGS, "Bytes of the model file." },
    { "meta_text",    (PyCFunction)Model_meta_text,    METH_NOARGS, "The 'meta' section (key=value lines)." },
    { "columns_text", (PyCFunction)Model_columns_text, METH_NOARGS, "The 'columns' section ('' when absent)." },
    { "weight",       (PyCFunction)Model_weight,       METH_O,      "weight(id): the dequantized weight (0 out of range)." },
    { NULL, NULL, 0, NULL }
};

static PyType_Slot Model_slots[] = {
    { Py_tp_doc, "A loaded .wisp model (low level; use wisp.load)." },
    { Py_tp_new, Model_new },
    { Py_tp_dealloc, Model_dealloc },
    { Py_tp_methods, Model_methods },
    { 0, NULL }
};
static PyType_Spec Model_spec = { "wisp._wisp.Model", sizeof(ModelObject), 0, Py_TPFLAGS_DEFAULT, Model_slots };

/* ---- buffers ---------------------------------------------------------------------- */


/* Get a C-contiguous buffer of obj and classify its element type. Unknown
 * formats (big-endian, float16, structs) fail with TypeError naming `what`;
 * the Python layer converts those with numpy before calling. */
int wisp__py_get_buf(PyObject *obj, const char *what, int writable, int ndim_want, arg_buf *b)
{
    memset(b, 0, sizeof *b);
    int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &b->view, flags) < 0) return -1;
    b->held = 1;
    const char *f = b->view.format ? b->view.format : "B";
    if (*f == '@' || *f == '=' || *f == '<') f++;
    int ok = f[0] && !f[1];
    switch (ok ? f[0] : 0) {
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n': b->kind = K_INT; break;
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N': b->kind = K_UINT; break;
    case 'f': case 'd': b->kind = K_FLOAT; break;
    case '?': b->kind = K_BOOL; break;
    default: ok = 0;
    }
    b->size = b->view.itemsize;
    if (ok && b->kind == K_FLOAT && b->size != 4 && b->size != 8) ok = 0;
    if (ok && (b->kind == K_INT || b->kind == K_UINT) && b->size != 1 && b->size != 2 && b->size != 4 && b->size != 8) ok = 0;
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s: unsupported element type '%s' (want integers or floats, native byte order)",
                     what, b->view.format ? b->view.format : "B");
        return -1;
    }
    if (ndim_want && b->view.ndim != ndim_want) {
        PyErr_Format(PyExc_ValueError, "%s: a %d-D array was given, %d-D expected", what, b->view.ndim, ndim_want);
        return -1;
    }
    b->count = b->size ? b->view.len / b->size : 0;
    return 0;
}

void wisp__py_rel_buf(arg_buf *b)
{
    if (b->held) PyBuffer_Release(&b->view);
    b->held = 0;
}


/* write_model(path, weights (float32 buffer), bias, dtype, meta, columns|None):
 * wisp_model_write, the GIL released (it fsyncs). */
static PyObject *py_write_model(PyObject *mod, PyObject *args)
{
    PyObject *path_obj, *o_w;
    double bias;
    const char *dtype_name, *meta, *columns = NULL;
    if (!PyArg_ParseTuple(args, "O&Odss|z", PyUnicode_FSConverter, &path_obj, &o_w, &bias, &dtype_name, &meta,
                          &columns))
        return NULL;
    int dtype = wisp_dtype_parse(dtype_name);
    if (dtype < 0) {
        Py_DECREF(path_obj);
        PyErr_Format(PyExc_ValueError, "unknown weight dtype '%s' (use f32, f16 or i8)", dtype_name);
        return NULL;
    }
    arg_buf bw;
    if (wisp__py_get_buf(o_w, "weights", 0, 1, &bw) < 0 || bw.kind != K_FLOAT || bw.size != 4) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "weights: must be a float32 array");
        wisp__py_rel_buf(&bw);
        Py_DECREF(path_obj);
        return NULL;
    }
    const char *path = PyBytes_AsString(path_obj);
    int st;
    char msg[1024] = "";
    Py_BEGIN_ALLOW_THREADS
    st = wisp_model_write(path, bw.view.buf, (uint64_t)bw.count, bias, dtype, meta, columns);
    if (st != WISP_OK) wisp__py_copy_errmsg(msg, sizeof msg, st);
    Py_END_ALLOW_THREADS
    wisp__py_rel_buf(&bw);
    Py_DECREF(path_obj);
    if (st != WISP_OK) return wisp__py_raise_status(st, msg);
    Py_RETURN_NONE;
}

/* import_onnx(data (bytes-like: a serialized ModelProto), path, dtype):
 * wisp_import_onnx_memory, the GIL released. */
static PyObject *py_import_onnx(PyObject *mod, PyObject *args)
{
    Py_buffer v;
    PyObject *path_obj;
    const char *dtype_name;
    if (!PyArg_ParseTuple(args, "y*O&s", &v, PyUnicode_FSConverter, &path_obj, &dtype_name)) return NULL;
    int dtype = wisp_dtype_parse(dtype_name), st = WISP_EINVAL;
    char msg[1024] = "";
    if (dtype < 0) snprintf(msg, sizeof msg, "unknown weight dtype '%s' (use f32, f16 or i8)", dtype_name);
    else {
        const char *path = PyBytes_AsString(path_obj);
        Py_BEGIN_ALLOW_THREADS
        st = wisp_import_onnx_memory(v.buf, (size_t)v.len, path, dtype);
        if (st != WISP_OK) wisp__py_copy_errmsg(msg, sizeof msg, st);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&v);
    Py_DECREF(path_obj);
    if (st != WISP_OK) return wisp__py_raise_status(st, msg);
    Py_RETURN_NONE;
}

/* ---- bad rows found here ------------------------------------------------------------ */


void wisp__py_bad_add(bad_list *l, size_t row, int why, int64_t value, const char *msg)
{
    if (l->n && l->v[l->n - 1].row == row) return;          /* one reason per row: the first */
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        bad_row *v = realloc(l->v, cap * sizeof *v);
        if (!v) { l->oom = 1; return; }
        l->v = v; l->cap = cap;
    }
    bad_row *r = &l->v[l->n++];
    r->row = row; r->why = why; r->value = value;
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
        switch (r->why) {
        case BAD_NEG_INDEX:
            snprintf(msg, sizeof msg, "a negative feature index (%lld)", (long long)r->value); break;
        case BAD_NAN_SCORE:
            snprintf(msg, sizeof msg, "the score is NaN (a NaN or infinite weight or value)"); break;
        default:
            snprintf(msg, sizeof msg, "%s", r->msg ? r->msg : "bad row");
        }
        PyObject *t = Py_BuildValue("(ns)", (Py_ssize_t)r->row, msg);
        if (!t || PyList_Append(out, t) < 0) { Py_XDECREF(t); Py_DECREF(out); return NULL; }
        Py_DECREF(t);
    }
    return out;
}

/* ---- Session ------------------------------------------------------------------------ */


static PyObject *SessionType;

static PyObject *Session_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *model;
    const char *device = "auto";
    static char *kwlist[] = { "model", "device", NULL };
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|s", kwlist, &model, &device)) return NULL;
    if (!PyObject_TypeCheck(model, (PyTypeObject *)ModelType)) {
        PyErr_SetString(PyExc_TypeError, "Session(model, device): model must be a wisp model");
        return NULL;
    }
    wisp_engine *eng = wisp__py_engine();
    if (!eng) return NULL;
    wisp_session *s = NULL;
    int st;
    char msg[1024];
    Py_BEGIN_ALLOW_THREADS
    st = wisp_session_new(eng, ((ModelObject *)model)->m, device, &s);
    if (st != WISP_OK) wisp__py_copy_errmsg(msg, sizeof msg, st);
    Py_END_ALLOW_THREADS
    if (st != WISP_OK) return wisp__py_raise_status(st, msg);
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    SessionObject *self = (SessionObject *)alloc(type, 0);
    if (!self) { wisp_session_free(s); return NULL; }
    self->s = s;
    Py_INCREF(model);
    self->model = model;
    self->lock = PyThread_allocate_lock();
    if (!self->lock) { Py_DECREF((PyObject *)self); return PyErr_NoMemory(); }
    return (PyObject *)self;
}

static void Session_dealloc(PyObject *o)
{
    SessionObject *self = (SessionObject *)o;
    PyTypeObject *tp = Py_TYPE(o);
    wisp_session *s = self->s;
    wisp_batch *b = self->text;
    wisp_raw *raw = self->raw;
    self->s = NULL; self->text = NULL; self->raw = NULL;
    Py_BEGIN_ALLOW_THREADS
    wisp_session_free(s);                 /* finishes batches in flight */
    wisp_batch_free(b);
    wisp_raw_free(raw);
    Py_END_ALLOW_THREADS
    Py_CLEAR(self->model);
    Py_CLEAR(self->errors);
    if (self->lock) PyThread_free_lock(self->lock);
    self->lock = NULL;
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(o);
    Py_DECREF(tp);
}

int wisp__py_enter(SessionObject *self)
{
    if (self->busy) {
        wisp__py_raise_status(WISP_ESTATE, "the session is in use by another thread (a session is used by one thread at a time)");
        return -1;
    }
    self->busy = 1;
    return 0;
}

/* Get the output buffer: writable C-contiguous float32 of at least n elements. */
int wisp__py_get_out(PyObject *o, size_t n, arg_buf *b)
{
    if (wisp__py_get_buf(o, "out", 1, 1, b) < 0) return -1;
    if (b->kind != K_FLOAT || b->size != 4) {
        PyErr_SetString(PyExc_TypeError, "out: must be a float32 array");
        return -1;
    }
    if ((size_t)b->count < n) {
        PyErr_Format(PyExc_ValueError, "out: %zd elements for %zu rows", b->count, n);
        return -1;
    }
    return 0;
}

/* Score a batch wrapped over (row_ptr, ids, vals) into out, list NaN rows not
 * already listed, and mark listed rows NaN. Runs without the GIL. */
static int score_wrapped(SessionObject *self, size_t rows, const uint32_t *row_ptr, const uint32_t *ids,
                         const float *vals, float *out, bad_list *bad, char *msg, size_t msglen)
{
    wisp_batch *b = NULL;
    int st = wisp_batch_wrap(engine, rows, row_ptr, ids, NULL, vals, &b);
    if (st == WISP_OK) st = wisp_session_score(self->s, b, out);
    if (st != WISP_OK) wisp__py_copy_errmsg(msg, msglen, st);
    else {
        /* the rows wrap found bad (a value that is not a finite float32),
         * with the engine's message naming the feature and the value */
        size_t nb = wisp_batch_bad_count(b);
        for (size_t i = 0; i < nb; i++) {
            size_t row; uint64_t line; const char *m;
            if (wisp_batch_bad_row(b, i, &row, &line, &m) == WISP_OK) wisp__py_bad_add(bad, row, BAD_ENGINE, 0, m);
        }
    }
    wisp_batch_free(b);
    return st;
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
        wisp__py_bad_add(bad, r, BAD_NAN_SCORE, 0, NULL);
    }
}

/* The CSR core over buffers already taken (score_csr's, and the DLPack host path's in
 * _wisp_dlpack.c): bp indptr, bi indices, bv values (have_vals) or unused, bo the output
 * (at least rows floats); checks, converts, scores. The bad-row list, or NULL with an
 * exception. The buffers stay the caller's to release. */
PyObject *wisp__py_score_csr_bufs(SessionObject *self, const arg_buf *bp, const arg_buf *bi, const arg_buf *bv,
                                  int have_vals, const arg_buf *bo, int none_if_clean)
{
    PyObject *result = NULL;
    if (bp->kind == K_FLOAT || bi->kind == K_FLOAT || bp->kind == K_BOOL || bi->kind == K_BOOL) {
        PyErr_SetString(PyExc_TypeError, "indptr and indices must be integer arrays");
        return NULL;
    }
    if (bp->count < 1) { PyErr_SetString(PyExc_ValueError, "indptr is empty (it has rows + 1 entries)"); return NULL; }
    size_t rows = (size_t)bp->count - 1;
    if ((size_t)bo->count < rows) {
        PyErr_Format(PyExc_ValueError, "out: %zd elements for %zu rows", bo->count, rows);
        return NULL;
    }
    if (wisp__py_enter(self) < 0) goto done;

    int st = WISP_OK, user_err = 0;
    char msg[1024] = "";
    bad_list bad = { 0 };
    uint32_t *ptr_tmp = NULL, *ids_tmp = NULL;
    float *vals_tmp = NULL;
    float *out = bo->view.buf;
    uint64_t nf = wisp_model_num_features(((ModelObject *)self->model)->m);
    Py_BEGIN_ALLOW_THREADS
    const uint32_t *row_ptr, *ids;
    const float *vals = NULL;
    int neg;
    uint64_t base = int_at(bp, 0, &neg);
    if (neg) { user_err = 1; snprintf(msg, sizeof msg, "indptr[0] is negative"); goto unlocked; }
    /* row_ptr */
    if (bp->size == 4 && base == 0 && bp->kind != K_BOOL) {
        row_ptr = bp->view.buf;
        /* an int32 indptr with negative entries reads as huge uint32: the
         * wrap's monotonicity check and the bound below refuse it */
    } else {
        ptr_tmp = malloc((rows + 1) * sizeof *ptr_tmp);
        if (!ptr_tmp) { st = WISP_ENOMEM; snprintf(msg, sizeof msg, "out of memory converting indptr (%zu rows)", rows); goto unlocked; }
        uint64_t prev = base;
        for (size_t r = 0; r <= rows; r++) {
            uint64_t v = int_at(bp, r, &neg);
            if (neg || v < prev) {
                user_err = 1;
                snprintf(msg, sizeof msg, "indptr decreases at row %zu (indptr[%zu] = %lld < indptr[%zu] = %lld)", r - 1,
                         r, (long long)v, r - 1, (long long)prev);
                goto unlocked;
            }
            if (v - base > WISP_MAX_NNZ) {
                st = WISP_ELIMIT;
                snprintf(msg, sizeof msg, "indptr[%zu] = %llu: more than WISP_MAX_NNZ (%u) features in one call",
                         r, (unsigned long long)(v - base), WISP_MAX_NNZ);
                goto unlocked;
            }
            ptr_tmp[r] = (uint32_t)(v - base);
            prev = v;
        }
        row_ptr = ptr_tmp;
    }
    {
        /* bounds: the rows' features lie inside indices (and values) */
        uint64_t nnz = row_ptr[rows];
        for (size_t r = 0; r < rows && row_ptr == (const uint32_t *)bp->view.buf; r++)
            if (row_ptr[r + 1] < row_ptr[r]) {       /* the wrap says it too; say it in indptr's words */
                user_err = 1;
                snprintf(msg, sizeof msg, "indptr decreases at row %zu (indptr[%zu] = %u < indptr[%zu] = %u)", r, r + 1,
                         row_ptr[r + 1], r, row_ptr[r]);
                goto unlocked;
            }
        if (base + nnz > (uint64_t)bi->count) {
            user_err = 1;
            snprintf(msg, sizeof msg, "indptr[-1] = %llu but indices has %zd entries",
                     (unsigned long long)(base + nnz), bi->count);
            goto unlocked;
        }
        if (have_vals && base + nnz > (uint64_t)bv->count) {
            user_err = 1;
            snprintf(msg, sizeof msg, "indptr[-1] = %llu but values has %zd entries",
                     (unsigned long long)(base + nnz), bv->count);
            goto unlocked;
        }
        /* ids */
        int ids_in_place = bi->size == 4;
        if (ids_in_place) {
            ids = (const uint32_t *)bi->view.buf + base;
        } else {
            ids_tmp = malloc((nnz ? nnz : 1) * sizeof *ids_tmp);
            if (!ids_tmp) { st = WISP_ENOMEM; snprintf(msg, sizeof msg, "out of memory converting indices (%llu)", (unsigned long long)nnz); goto unlocked; }
            for (size_t r = 0; r < rows; r++)
                for (uint32_t k = row_ptr[r]; k < row_ptr[r + 1]; k++) {
                    uint64_t v = int_at(bi, base + k, &neg);
                    if (neg) { wisp__py_bad_add(&bad, r, BAD_NEG_INDEX, (int64_t)v, NULL); v = UINT32_MAX; }
                    ids_tmp[k] = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
                }
            ids = ids_tmp;
        }
        /* values */
        if (have_vals) {
            if (bv->kind == K_FLOAT && bv->size == 4) {
                vals = (const float *)bv->view.buf + base;     /* wisp_batch_wrap lists non-finite ones */
            } else {
                vals_tmp = malloc((nnz ? nnz : 1) * sizeof *vals_tmp);
                if (!vals_tmp) { st = WISP_ENOMEM; snprintf(msg, sizeof msg, "out of memory converting values"); goto unlocked; }
                for (size_t r = 0; r < rows; r++)
                    for (uint32_t k = row_ptr[r]; k < row_ptr[r + 1]; k++) {
                        double d = float_at(bv, base + k);
                        vals_tmp[k] = (float)d;       /* 1e39 becomes inf: wrap lists the row */
                    }
                vals = vals_tmp;
            }
        }
        uint64_t oor0 = wisp_session_stat(self->s, WISP_STAT_OUT_OF_RANGE);
        st = score_wrapped(self, rows, row_ptr, ids, vals, out, &bad, msg, sizeof msg);
        int any_oor = st == WISP_OK && wisp_session_stat(self->s, WISP_STAT_OUT_OF_RANGE) != oor0;
        if (st == WISP_OK && ids_in_place && bi->kind == K_INT && (nf > 0x80000000ull || any_oor))
            for (size_t r = 0; r < rows; r++)
                for (uint32_t k = row_ptr[r]; k < row_ptr[r + 1]; k++)
                    if ((int32_t)ids[k] < 0) { wisp__py_bad_add(&bad, r, BAD_NEG_INDEX, (int32_t)ids[k], NULL); break; }
        if (st == WISP_OK) wisp__py_finish_bad(&bad, out, rows);
    }
unlocked:
    Py_END_ALLOW_THREADS
    self->busy = 0;
    free(ptr_tmp); free(ids_tmp); free(vals_tmp);
    if (user_err) PyErr_SetString(PyExc_ValueError, msg);
    else if (st != WISP_OK) wisp__py_raise_status(st, msg);
    else if (none_if_clean && bad.n == 0 && !bad.oom) { Py_INCREF(Py_None); result = Py_None; }
    else result = wisp__py_bad_to_list(&bad);
    wisp__py_bad_free(&bad);
done:
    return result;
}


/* score_csr(indptr, indices, values or None, out) -> [(row, reason)]
 *
 * In place (no copy): indptr int32/uint32 with indptr[0] == 0; indices
 * int32/uint32; values float32. Converted once here: indptr of other
 * integer types (or not starting at 0: a slice of a larger CSR), indices of
 * other integer types (negative: a bad row; >= 2^32: out of range),
 * values of float64 or integer types. */
static PyObject *Session_score_csr(SessionObject *self, PyObject *const *args, Py_ssize_t nargs)
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
static PyObject *Session_score_dense(SessionObject *self, PyObject *args)
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
    if (!ids || !vals) { st = WISP_ENOMEM; snprintf(msg, sizeof msg, "out of memory (%llu non-zero entries)", (unsigned long long)nnz); goto unlocked; }
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
static PyObject *Session_parse_libsvm(SessionObject *self, PyObject *arg)
{
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE) < 0) return NULL;
    if (wisp__py_enter(self) < 0) { PyBuffer_Release(&v); return NULL; }
    int st = WISP_OK;
    char msg[1024] = "";
    size_t rows = 0;
    Py_BEGIN_ALLOW_THREADS
    if (!self->text) st = wisp_batch_new(engine, &self->text);
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

static PyObject *Session_score_parsed(SessionObject *self, PyObject *o_out)
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
        size_t nb = wisp_batch_bad_count(self->text);
        for (size_t i = 0; i < nb; i++) {
            size_t row; uint64_t line; const char *m;
            if (wisp_batch_bad_row(self->text, i, &row, &line, &m) == WISP_OK)
                wisp__py_bad_add(&bad, row, BAD_ENGINE, 0, m);
        }
        wisp__py_finish_bad(&bad, out, rows);
    }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    wisp__py_rel_buf(&bo);
    PyObject *result = st != WISP_OK ? wisp__py_raise_status(st, msg) : wisp__py_bad_to_list(&bad);
    wisp__py_bad_free(&bad);
    return result;
}

static PyObject *Session_stats(SessionObject *self, PyObject *n)
{
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (int i = 0; i < WISP_STAT_COUNT; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(wisp_session_stat(self->s, i));
        if (!v || PyDict_SetItemString(d, wisp_stat_name(i), v) < 0) { Py_XDECREF(v); Py_DECREF(d); return NULL; }
        Py_DECREF(v);
    }
    return d;
}

static PyObject *Session_reset_stats(SessionObject *self, PyObject *n)
{
    if (wisp__py_enter(self) < 0) return NULL;
    wisp_session_reset_stats(self->s);
    self->busy = 0;
    Py_RETURN_NONE;
}

/* set_profiling(on): the C profile of each call (wisp_session_set_profiling). */
static PyObject *Session_set_profiling(SessionObject *self, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    wisp_session_set_profiling(self->s, on);
    Py_RETURN_NONE;
}

/* last_stats() -> (start_ns, {stat: value}): what the last call added (profiling on), on wisp_clock_ns's clock. */
static PyObject *Session_last_stats(SessionObject *self, PyObject *n)
{
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (int i = 0; i < WISP_STAT_COUNT; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(wisp_session_last_stat(self->s, i));
        if (!v || PyDict_SetItemString(d, wisp_stat_name(i), v) < 0) { Py_XDECREF(v); Py_DECREF(d); return NULL; }
        Py_DECREF(v);
    }
    return Py_BuildValue("(KN)", (unsigned long long)wisp_session_last_start_ns(self->s), d);
}

static PyObject *py_clock_ns(PyObject *mod, PyObject *noargs) { return PyLong_FromUnsignedLongLong(wisp_clock_ns()); }

/* 1 while a call on this session is inside the engine (GIL released):
 * what the GIL spec watches from another thread. */
static PyObject *Session_in_use(SessionObject *self, PyObject *n) { return PyBool_FromLong(self->busy); }

static PyObject *Session_device(SessionObject *self, PyObject *n)
{ return PyUnicode_FromString(wisp_session_device(self->s)); }
static PyObject *Session_last_device(SessionObject *self, PyObject *n)
{ return PyUnicode_FromString(wisp_session_last_device(self->s)); }

static PyObject *Session_set_device(SessionObject *self, PyObject *args)
{
    const char *device;
    if (!PyArg_ParseTuple(args, "s", &device)) return NULL;
    if (wisp__py_enter(self) < 0) return NULL;
    int st;
    char msg[1024] = "";
    Py_BEGIN_ALLOW_THREADS
    st = wisp_session_set_device(self->s, device);
    if (st != WISP_OK) wisp__py_copy_errmsg(msg, sizeof msg, st);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (st != WISP_OK) return wisp__py_raise_status(st, msg);
    Py_RETURN_NONE;
}

/* ---- the session lock and the small-batch fast path ------------------------------------------- */

/* Take the session's lock: at once when free, else waiting with the GIL released. */
static void lock_take(SessionObject *self)
{
    if (PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) return;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    Py_END_ALLOW_THREADS
}

/* `with session._s:` is the Python layer's session lock (wisp/__init__.py's Session._lock):
 * the same lock score_fast takes, so every call on a session takes turns. Not reentrant. */
static PyObject *Session_enter(SessionObject *self, PyObject *n)
{
    lock_take(self);
    Py_INCREF((PyObject *)self);
    return (PyObject *)self;
}

static PyObject *Session_exit(SessionObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyThread_release_lock(self->lock);
    Py_RETURN_FALSE;
}

/* errors() -> [(row, reason)]: score_fast's (or set_errors') last list, a new empty list for none */
static PyObject *Session_errors(SessionObject *self, PyObject *n)
{
    if (!self->errors) return PyList_New(0);
    Py_INCREF(self->errors);
    return self->errors;
}

static PyObject *Session_set_errors(SessionObject *self, PyObject *v)
{
    if (v == Py_None || (PyList_Check(v) && PyList_Size(v) == 0)) v = NULL;
    Py_XINCREF(v);
    PyObject *old = self->errors;
    self->errors = v;
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

static PyObject *Session_has_errors(SessionObject *self, PyObject *n) { return PyBool_FromLong(self->errors != NULL); }

/* The fast path's helpers from the Python layer: numpy.empty, numpy.float32, is_scipy_csr(X). */
static PyObject *fast_empty, *fast_f32, *fast_is_csr;
static PyObject *s_indptr, *s_indices, *s_data;
#define CSR_TYPES 8
static PyTypeObject *csr_yes[CSR_TYPES], *csr_no[CSR_TYPES];    /* borrowed-forever: type objects seen */
static int csr_yes_n, csr_no_n;

static PyObject *py_register_fast(PyObject *mod, PyObject *args)
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

/* score_fast(X) -> float32 array, or NotImplemented: Session.score's path for a
 * (indptr, indices[, values]) tuple or a scipy CSR whose arrays the CSR core reads (in
 * place or converting in C). Everything a call needs happens here: the session lock, the
 * output array, the buffers, the engine (the GIL released), the bad rows kept for
 * errors(). NotImplemented (nothing scored, no error) for any other X or for arrays the
 * core cannot read or refuses (a TypeError, BufferError or ValueError): Session.score's
 * general path then converts them or raises the error. Engine failures raise. */
static PyObject *Session_score_fast(SessionObject *self, PyObject *X)
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
    PyObject *result = NULL, *out = NULL, *bad = NULL;
    arg_buf bp, bi, bv, bo;
    bp.held = bi.held = bv.held = bo.held = 0;
    if (wisp__py_get_buf(a[0], "indptr", 0, 1, &bp) < 0 || wisp__py_get_buf(a[1], "indices", 0, 1, &bi) < 0 ||
        (a[2] && wisp__py_get_buf(a[2], "values", 0, 1, &bv) < 0))
        goto done;
    {
        PyObject *n = PyLong_FromSsize_t(bp.count > 0 ? bp.count - 1 : 0);
        if (!n) goto done;
        out = PyObject_CallFunctionObjArgs(fast_empty, n, fast_f32, NULL);
        Py_DECREF(n);
    }
    if (!out || wisp__py_get_out(out, bp.count > 0 ? (size_t)bp.count - 1 : 0, &bo) < 0) goto done;
    if (!self->s) { wisp__py_raise_status(WISP_ESTATE, "the session is closed"); goto done; }
    lock_take(self);
    bad = wisp__py_score_csr_bufs(self, &bp, &bi, &bv, a[2] != NULL, &bo, 1);
    if (bad) {
        PyObject *old = self->errors;
        self->errors = bad == Py_None ? NULL : bad;
        Py_XDECREF(old);
        if (bad == Py_None) Py_DECREF(bad);
        bad = NULL;
        result = out;
        out = NULL;
    }
    PyThread_release_lock(self->lock);
done:
    wisp__py_rel_buf(&bp); wisp__py_rel_buf(&bi); wisp__py_rel_buf(&bv); wisp__py_rel_buf(&bo);
    Py_XDECREF(out);
    if (owned) { Py_XDECREF(a[0]); Py_XDECREF(a[1]); Py_XDECREF(a[2]); }
    if (!result && (PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_BufferError) ||
                    PyErr_ExceptionMatches(PyExc_ValueError)) && !(error_base && PyErr_ExceptionMatches(error_base))) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    return result;
}

static PyMethodDef Session_methods[] = {
    { "score_fast",   (PyCFunction)Session_score_fast,   METH_O,       "score_fast(X) -> float32 array, or NotImplemented (Session.score's small-batch path)" },
    { "errors",       (PyCFunction)Session_errors,       METH_NOARGS,  "errors() -> the last call's [(row, reason)]" },
    { "set_errors",   (PyCFunction)Session_set_errors,   METH_O,       "set_errors(list): what errors() returns next" },
    { "has_errors",   (PyCFunction)Session_has_errors,   METH_NOARGS,  "True when the last call had bad rows" },
    { "__enter__",    (PyCFunction)Session_enter,        METH_NOARGS,  "Take the session's lock" },
    { "__exit__",     (PyCFunction)(void (*)(void))Session_exit, METH_FASTCALL, "Release the session's lock" },
    { "score_csr",    (PyCFunction)(void (*)(void))Session_score_csr, METH_FASTCALL, "score_csr(indptr, indices, values|None, out) -> bad rows" },
    { "score_dlpack", (PyCFunction)(void (*)(void))wisp__py_score_dlpack, METH_FASTCALL,
      "score_dlpack(indptr, indices, values|None, out|None, stream|None, device|None) -> (bad rows, out) (_wisp_dlpack.c)" },
    { "score_dense",  (PyCFunction)Session_score_dense,  METH_VARARGS, "score_dense(X, out) -> bad rows" },
    { "score_raw",    (PyCFunction)wisp__py_score_raw,   METH_VARARGS, "score_raw(cols, rows, out) -> bad rows (raw rows; _wisp_raw.c)" },
    { "parse_libsvm", (PyCFunction)Session_parse_libsvm, METH_O,       "parse_libsvm(data) -> rows" },
    { "score_parsed", (PyCFunction)Session_score_parsed, METH_O,       "score_parsed(out) -> bad rows" },
    { "stats",        (PyCFunction)Session_stats,        METH_NOARGS,  "The statistics as a dict." },
    { "reset_stats",  (PyCFunction)Session_reset_stats,  METH_NOARGS,  "Zero the statistics." },
    { "set_profiling", (PyCFunction)Session_set_profiling, METH_O,     "set_profiling(on): record each call's statistics." },
    { "last_stats",   (PyCFunction)Session_last_stats,   METH_NOARGS,  "(start_ns, stats) of the last call (profiling on)." },
    { "in_use",       (PyCFunction)Session_in_use,       METH_NOARGS,  "True while a call on this session runs in the engine." },
    { "device",       (PyCFunction)Session_device,       METH_NOARGS,  "The device asked for." },
    { "last_device",  (PyCFunction)Session_last_device,  METH_NOARGS,  "The device that scored the last batch." },
    { "set_device",   (PyCFunction)Session_set_device,   METH_VARARGS, "set_device(name)" },
    { NULL, NULL, 0, NULL }
};

static PyType_Slot Session_slots[] = {
    { Py_tp_doc, "A scoring session (low level; use Model.session)." },
    { Py_tp_new, Session_new },
    { Py_tp_dealloc, Session_dealloc },
    { Py_tp_methods, Session_methods },
    { 0, NULL }
};
static PyType_Spec Session_spec = { "wisp._wisp.Session", sizeof(SessionObject), 0, Py_TPFLAGS_DEFAULT, Session_slots };

/* ---- module --------------------------------------------------------------------------- */

static PyMethodDef module_methods[] = {
    { "register_errors", py_register_errors, METH_VARARGS, "register_errors(base, {status: class})" },
    { "register_fast",   py_register_fast,   METH_VARARGS, "register_fast(numpy.empty, numpy.float32, is_scipy_csr)" },
    { "devices",         py_devices,         METH_NOARGS,  "devices() -> ([(name, memory, capability, usable)], gpu_status, threads)" },
    { "set_threads",     py_set_threads,     METH_O,       "set_threads(n): CPU threads of the engine (before first use)" },
    { "version",         py_version,         METH_NOARGS,  "The engine's version string." },
    { "write_model",     py_write_model,     METH_VARARGS, "write_model(path, weights, bias, dtype, meta, columns=None)" },
    { "import_onnx",     py_import_onnx,     METH_VARARGS, "import_onnx(data, path, dtype): an ONNX-ML linear model as a .wisp file" },
    { "clock_ns",        py_clock_ns,        METH_NOARGS,  "wisp_clock_ns(): the statistics' clock (CLOCK_MONOTONIC ns)" },
    { "stat_names",      py_stat_names,      METH_NOARGS,  "The statistics' names, in order." },
    { NULL, NULL, 0, NULL }
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "wisp._wisp", "The C core of the wisp package (use the package `wisp`).", -1,
    module_methods, NULL, NULL, NULL, NULL
};

PyMODINIT_FUNC PyInit__wisp(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    ModelType = PyType_FromSpec(&Model_spec);
    SessionType = PyType_FromSpec(&Session_spec);
    if (!ModelType || !SessionType) goto fail;
    Py_INCREF(ModelType);
    if (PyModule_AddObject(m, "Model", ModelType) < 0) { Py_DECREF(ModelType); goto fail; }
    Py_INCREF(SessionType);
    if (PyModule_AddObject(m, "Session", SessionType) < 0) { Py_DECREF(SessionType); goto fail; }
    if (wisp__py_dlpack_init(m) < 0) goto fail;
    static const struct { const char *name; int v; } consts[] = {
        { "OK", WISP_OK }, { "EINVAL", WISP_EINVAL }, { "ENOMEM", WISP_ENOMEM }, { "EIO", WISP_EIO },
        { "EFORMAT", WISP_EFORMAT }, { "ECHECKSUM", WISP_ECHECKSUM }, { "EVERSION", WISP_EVERSION },
        { "EPARSE", WISP_EPARSE }, { "ELIMIT", WISP_ELIMIT }, { "ENODEV", WISP_ENODEV },
        { "EDEVICE", WISP_EDEVICE }, { "ESTATE", WISP_ESTATE },
    };
    for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++)
        if (PyModule_AddIntConstant(m, consts[i].name, consts[i].v) < 0) goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
