/* _wisp.c — the CPython extension under the `wisp` package: the module, its errors, the engine, models and buffers, over wisp.h alone.
 *
 * Design (the extension's other files: _wisp_session.c the Session object, _wisp_score.c the CSR, dense
 * and text scoring entries and the bad-row list, _wisp_raw.c raw rows, _wisp_dlpack.c DLPack arrays):
 * - Built against the stable ABI (Py_LIMITED_API = 3.11, the first version
 *   whose limited API has the buffer protocol), so one abi3 wheel serves
 *   every CPython from 3.11 on; setup.py drops the define for older
 *   interpreters and the same source builds a version-specific module.
 * - Memory comes in through the buffer protocol only (no numpy C API). CSR
 *   arrays go to wisp_batch_from_csr as they are (it reads the engine's
 *   layout in place and converts the others, once, in C); the binding only
 *   turns Python objects into buffers. The output array is allocated by the
 *   Python layer (numpy.empty) and written through its buffer.
 * - The GIL is released for the whole engine call: checking, conversion,
 *   scoring. The Python objects' buffers stay exported (so nobody can resize
 *   them) until the GIL is taken back.
 * - A session is used by one thread at a time (wisp.h's rule). The Python
 *   layer serializes with a lock; a busy flag turns a caller who bypasses it
 *   into a WispError instead of a race.
 * - Errors: every failing status raises the class registered for it by
 *   wisp/__init__.py (register_errors), with wisp_errmsg()'s text, copied
 *   on the thread that failed before the GIL is taken back. Bad rows never
 *   raise here: they come back as a list of (row, reason) and their
 *   output is NaN; the Python layer decides (errors="nan" / "raise").
 * - One engine per process, created on first use (threads: one per core).
 */
#include "_wisp.h"

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

PyObject *wisp__py_model_type;

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
static PyObject *Model_path(ModelObject *self, PyObject *n)
{ return PyUnicode_DecodeFSDefault(wisp_model_path(self->m)); }
static PyObject *Model_file_size(ModelObject *self, PyObject *n)
{ return PyLong_FromUnsignedLongLong(wisp_model_file_size(self->m)); }
static PyObject *Model_meta_text(ModelObject *self, PyObject *n)
{ return PyUnicode_DecodeUTF8(wisp_model_meta_text(self->m),
                              (Py_ssize_t)strlen(wisp_model_meta_text(self->m)), "replace"); }
static PyObject *Model_columns_text(ModelObject *self, PyObject *n)
{ return PyUnicode_DecodeUTF8(wisp_model_columns(self->m),
                              (Py_ssize_t)strlen(wisp_model_columns(self->m)), "replace"); }
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
    { "weight",       (PyCFunction)Model_weight,       METH_O,
      "weight(id): the dequantized weight (0 out of range)." },
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
    if (ok && (b->kind == K_INT || b->kind == K_UINT) && b->size != 1 && b->size != 2 && b->size != 4 && b->size != 8)
        ok = 0;
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

static PyObject *py_clock_ns(PyObject *mod, PyObject *noargs) { return PyLong_FromUnsignedLongLong(wisp_clock_ns()); }

/* ---- module --------------------------------------------------------------------------- */

static PyMethodDef module_methods[] = {
    { "register_errors", py_register_errors, METH_VARARGS, "register_errors(base, {status: class})" },
    { "register_fast",   wisp__py_register_fast, METH_VARARGS,
      "register_fast(numpy.empty, numpy.float32, is_scipy_csr)" },
    { "devices",         py_devices,         METH_NOARGS,
      "devices() -> ([(name, memory, capability, usable)], gpu_status, threads)" },
    { "set_threads",     py_set_threads,     METH_O,
      "set_threads(n): CPU threads of the engine (before first use)" },
    { "version",         py_version,         METH_NOARGS,  "The engine's version string." },
    { "write_model",     py_write_model,     METH_VARARGS,
      "write_model(path, weights, bias, dtype, meta, columns=None)" },
    { "import_onnx",     py_import_onnx,     METH_VARARGS,
      "import_onnx(data, path, dtype): an ONNX-ML linear model as a .wisp file" },
    { "clock_ns",        py_clock_ns,        METH_NOARGS,
      "wisp_clock_ns(): the statistics' clock (CLOCK_MONOTONIC ns)" },
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
    PyObject *model_type = wisp__py_model_type = PyType_FromSpec(&Model_spec);
    if (!model_type) goto fail;
    Py_INCREF(model_type);
    if (PyModule_AddObject(m, "Model", model_type) < 0) { Py_DECREF(model_type); goto fail; }
    if (wisp__py_session_init(m) < 0) goto fail;
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
