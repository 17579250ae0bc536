/* _wisp_session.c — the extension's Session object: a model placed on a device, its lock, its last bad rows, statistics and device. */
#include "_wisp.h"

#include <stdio.h>
#include <string.h>

/* ---- Session ------------------------------------------------------------------------ */

static PyObject *Session_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *model;
    const char *device = "auto";
    static char *kwlist[] = { "model", "device", NULL };
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|s", kwlist, &model, &device)) return NULL;
    if (!PyObject_TypeCheck(model, (PyTypeObject *)wisp__py_model_type)) {
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
    Py_CLEAR(self->bad_rows);
    if (self->lock) PyThread_free_lock(self->lock);
    self->lock = NULL;
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(o);
    Py_DECREF(tp);
}

int wisp__py_enter(SessionObject *self)
{
    if (self->busy) {
        wisp__py_raise_status(WISP_ESTATE,
                              "the session is in use by another thread (a session is used by one thread at a time)");
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

/* ---- the session lock and the last bad rows ---------------------------------------------------- */

/* Take the session's lock: at once when free, else waiting with the GIL released. */
void wisp__py_lock_take(SessionObject *self)
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
    wisp__py_lock_take(self);
    Py_INCREF((PyObject *)self);
    return (PyObject *)self;
}

static PyObject *Session_exit(SessionObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyThread_release_lock(self->lock);
    Py_RETURN_FALSE;
}

/* bad_rows() -> [(row, reason)]: score_fast's (or set_bad_rows') last list, a new empty list for none */
static PyObject *Session_bad_rows(SessionObject *self, PyObject *n)
{
    if (!self->bad_rows) return PyList_New(0);
    Py_INCREF(self->bad_rows);
    return self->bad_rows;
}

static PyObject *Session_set_bad_rows(SessionObject *self, PyObject *v)
{
    if (v == Py_None || (PyList_Check(v) && PyList_Size(v) == 0)) v = NULL;
    wisp__py_keep_bad_rows(self, v);
    Py_RETURN_NONE;
}

void wisp__py_keep_bad_rows(SessionObject *self, PyObject *list)
{
    Py_XINCREF(list);
    PyObject *old = self->bad_rows;
    self->bad_rows = list;
    Py_XDECREF(old);
}

static PyObject *Session_has_bad_rows(SessionObject *self, PyObject *n)
{ return PyBool_FromLong(self->bad_rows != NULL); }

static PyMethodDef Session_methods[] = {
    { "score_fast",   (PyCFunction)wisp__py_score_fast,  METH_O,
      "score_fast(X) -> float32 array, or NotImplemented (Session.score's CSR path; _wisp_score.c)" },
    { "bad_rows",     (PyCFunction)Session_bad_rows,     METH_NOARGS,
      "bad_rows() -> the last call's [(row, reason)]" },
    { "set_bad_rows", (PyCFunction)Session_set_bad_rows, METH_O,
      "set_bad_rows(list): what bad_rows() returns next" },
    { "has_bad_rows", (PyCFunction)Session_has_bad_rows, METH_NOARGS,  "True when the last call had bad rows" },
    { "__enter__",    (PyCFunction)Session_enter,        METH_NOARGS,  "Take the session's lock" },
    { "__exit__",     (PyCFunction)(void (*)(void))Session_exit, METH_FASTCALL, "Release the session's lock" },
    { "score_csr",    (PyCFunction)(void (*)(void))wisp__py_score_csr, METH_FASTCALL,
      "score_csr(indptr, indices, values|None, out) -> bad rows (_wisp_score.c)" },
    { "score_dlpack", (PyCFunction)(void (*)(void))wisp__py_score_dlpack, METH_FASTCALL,
      "score_dlpack(indptr, indices, values|None, out|None, stream|None, device|None) -> (bad rows, out) "
      "(_wisp_dlpack.c)" },
    { "score_dense",  (PyCFunction)wisp__py_score_dense, METH_VARARGS,
      "score_dense(X, out) -> bad rows (_wisp_score.c)" },
    { "score_raw",    (PyCFunction)wisp__py_score_raw,   METH_VARARGS,
      "score_raw(cols, rows, out) -> bad rows (raw rows; _wisp_raw.c)" },
    { "parse_libsvm", (PyCFunction)wisp__py_parse_libsvm, METH_O,      "parse_libsvm(data) -> rows (_wisp_score.c)" },
    { "score_parsed", (PyCFunction)wisp__py_score_parsed, METH_O,
      "score_parsed(out) -> bad rows (_wisp_score.c)" },
    { "stats",        (PyCFunction)Session_stats,        METH_NOARGS,  "The statistics as a dict." },
    { "reset_stats",  (PyCFunction)Session_reset_stats,  METH_NOARGS,  "Zero the statistics." },
    { "set_profiling", (PyCFunction)Session_set_profiling, METH_O,
      "set_profiling(on): record each call's statistics." },
    { "last_stats",   (PyCFunction)Session_last_stats,   METH_NOARGS,
      "(start_ns, stats) of the last call (profiling on)." },
    { "in_use",       (PyCFunction)Session_in_use,       METH_NOARGS,
      "True while a call on this session runs in the engine." },
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

int wisp__py_session_init(PyObject *module)
{
    PyObject *t = PyType_FromSpec(&Session_spec);
    if (!t) return -1;
    if (PyModule_AddObject(module, "Session", t) < 0) { Py_DECREF(t); return -1; }
    return 0;
}
