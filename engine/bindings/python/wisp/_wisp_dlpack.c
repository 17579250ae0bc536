/* _wisp_dlpack.c — arrays that come through DLPack (__dlpack__/__dlpack_device__) or __cuda_array_interface__: CuPy arrays, PyTorch tensors, any producer; GPU-resident CSR scored with wisp_session_score_device_n, host ones with the CSR core of _wisp.c; and wisp.DeviceArray, the answers left on the GPU.
 *
 * Design:
 * - The DLPack structures are declared here (the ABI of dlpack.h v0.8 and v1.x: the
 *   legacy DLManagedTensor in a "dltensor" capsule, DLManagedTensorVersioned in a
 *   "dltensor_versioned" one); no header of the producer's is needed.
 * - Importing: __dlpack_device__() first; a CUDA (or managed) array is asked for
 *   __dlpack__(stream=S), S the stream the engine then works on (1, the legacy default
 *   stream, unless Session.score got stream=): the producer makes its data ready on S
 *   (the array API's rule), so nothing is read before it is written. A CPU array is
 *   asked for __dlpack__(). The capsule is renamed "used_dltensor" (the producer's
 *   destructor then leaves it alone) and its deleter is called when the call is done.
 * - __cuda_array_interface__ (v2/v3) is the fallback: shape, typestr, data, strides
 *   and "stream" (v3): a producer's stream is the one the engine works on, so its reads
 *   are ordered after the producer's writes (the call is blocking, so every later user
 *   of any stream sees the answers).
 * - GPU arrays must already be the engine's layout (indptr int32/int64, indices int32,
 *   values float32, 1-D, contiguous): anything else is a TypeError that names the
 *   conversion (the Python layer converts with the producer's own library first).
 *   The ids' length bounds every read (wisp_session_score_device_n).
 * - DeviceArray owns its device memory (wisp_device_alloc); every DLPack export holds a
 *   reference to it, dropped in the export's deleter (taking the GIL: a consumer may call
 *   it from any thread), so the memory is released when the last of them goes.
 * - The output pools (not a cudaMalloc + cudaFree per call: cudaFree synchronizes the
 *   device): a DeviceArray that is gone puts its block in a small pool that the next
 *   out="device" call takes it from; a host output of POOL_MIN_BYTES or more is a numpy
 *   array over a pinned block (wisp_engine_host_alloc; wisp.HostBlock is its base) that
 *   goes back to a pool when the array is gone, so the answers cross PCIe in one DMA at
 *   pinned speed. A block is handed out again only after every user of it is gone; one
 *   that anybody else could have used (a DeviceArray exported through DLPack,
 *   __cuda_array_interface__ or .ptr; every pinned host block, which another library may
 *   still be copying from asynchronously) is reused only after wisp__device_sync: what
 *   cudaFree/cudaFreeHost would have waited for. Bounded: POOL_SLOTS blocks and
 *   POOL_MAX_BYTES per pool, pinned outputs alive at most PINNED_OUT_MAX bytes (then
 *   numpy's own memory). Under the GIL.
 */
#include "_wisp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the DLPack ABI -------------------------------------------------------------------- */

enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13 };
enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBool = 6 };

typedef struct { int32_t device_type, device_id; } DLDevice;
typedef struct { uint8_t code, bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;        /* in elements; NULL: compact */
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
typedef struct { uint32_t major, minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* ---- one imported array ------------------------------------------------------------------ */

typedef struct {
    int dev_type, dev_id;    /* kDL*; dev_id -1: not said (a __cuda_array_interface__) */
    char *data;              /* the first element */
    int kind, size;          /* K_*, bytes per element */
    Py_ssize_t count;
    PyObject *capsule;       /* a consumed capsule: its deleter is ours to call */
    void *managed;
    int versioned;
    PyObject *owner;         /* a __cuda_array_interface__ producer, kept alive */
    int has_stream;
    uintptr_t stream;        /* its "stream" */
} dl_view;

static void dl_release(dl_view *v)
{
    /* the producer's deleter may run Python code: never with our exception pending */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (v->managed) {
        if (v->versioned) {
            DLManagedTensorVersioned *m = v->managed;
            if (m->deleter) m->deleter(m);
        } else {
            DLManagedTensor *m = v->managed;
            if (m->deleter) m->deleter(m);
        }
    }
    v->managed = NULL;
    Py_CLEAR(v->capsule);
    Py_CLEAR(v->owner);
    if (PyErr_Occurred()) PyErr_WriteUnraisable(NULL);     /* the deleter's own failure: reported, not raised */
    PyErr_Restore(et, ev, tb);
}

static int kind_of(int code, int bits, int *kind)
{
    switch (code) {
    case kDLInt:   *kind = K_INT; break;
    case kDLUInt:  *kind = K_UINT; break;
    case kDLFloat: *kind = K_FLOAT; if (bits != 32 && bits != 64) return -1; break;
    case kDLBool:  *kind = K_BOOL; break;
    default: return -1;
    }
    return bits == 8 || bits == 16 || bits == 32 || bits == 64 ? 0 : -1;
}

static int from_capsule(PyObject *cap, const char *what, dl_view *v)
{
    DLTensor *t;
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (!m) return -1;
        if (m->version.major > 1) {
            PyErr_Format(PyExc_TypeError, "%s: DLPack %u.%u is newer than this build reads (1.x)", what,
                         m->version.major, m->version.minor);
            return -1;
        }
        if (PyCapsule_SetName(cap, "used_dltensor_versioned") < 0) return -1;
        v->managed = m;
        v->versioned = 1;
        t = &m->dl_tensor;
    } else if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        if (!m) return -1;
        if (PyCapsule_SetName(cap, "used_dltensor") < 0) return -1;
        v->managed = m;
        t = &m->dl_tensor;
    } else {
        PyErr_Format(PyExc_TypeError, "%s: __dlpack__ returned no DLPack capsule", what);
        return -1;
    }
    if (t->ndim != 1) {
        PyErr_Format(PyExc_ValueError, "%s: a %d-D array was given, 1-D expected", what, (int)t->ndim);
        return -1;
    }
    if (t->dtype.lanes != 1 || kind_of(t->dtype.code, t->dtype.bits, &v->kind) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: unsupported DLPack element type (code %d, %d bits, %d lanes)", what,
                     t->dtype.code, t->dtype.bits, t->dtype.lanes);
        return -1;
    }
    v->count = (Py_ssize_t)t->shape[0];
    if (t->strides && t->strides[0] != 1 && v->count > 1) {
        PyErr_Format(PyExc_ValueError, "%s: not contiguous (stride %lld elements): make it contiguous first", what,
                     (long long)t->strides[0]);
        return -1;
    }
    v->size = t->dtype.bits / 8;
    v->dev_type = t->device.device_type;
    v->dev_id = t->device.device_id;
    v->data = (char *)t->data + t->byte_offset;
    return 0;
}

/* An integer item of a dict, -1 with no exception when absent or None. */
static int cai_stream(PyObject *d, dl_view *v)
{
    PyObject *s = PyDict_GetItemString(d, "stream");          /* borrowed */
    if (!s || s == Py_None) return 0;
    unsigned long long x = PyLong_AsUnsignedLongLong(s);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    if (x == 0) {
        PyErr_SetString(PyExc_ValueError, "__cuda_array_interface__: stream 0 is ambiguous (the protocol forbids it)");
        return -1;
    }
    v->has_stream = 1;
    v->stream = (uintptr_t)x;
    return 0;
}

static int from_cai(PyObject *obj, PyObject *d, const char *what, dl_view *v)
{
    if (!PyDict_Check(d)) { PyErr_Format(PyExc_TypeError, "%s: __cuda_array_interface__ is not a dict", what); return -1; }
    PyObject *shape = PyDict_GetItemString(d, "shape"), *typestr = PyDict_GetItemString(d, "typestr");
    PyObject *data = PyDict_GetItemString(d, "data"), *strides = PyDict_GetItemString(d, "strides");
    PyObject *mask = PyDict_GetItemString(d, "mask");
    if (!shape || !PyTuple_Check(shape) || !typestr || !PyUnicode_Check(typestr) || !data || !PyTuple_Check(data) ||
        PyTuple_Size(data) != 2) {
        PyErr_Format(PyExc_TypeError, "%s: __cuda_array_interface__ lacks shape, typestr or data", what);
        return -1;
    }
    if (mask && mask != Py_None) { PyErr_Format(PyExc_TypeError, "%s: masked arrays are not read", what); return -1; }
    if (PyTuple_Size(shape) != 1) {
        PyErr_Format(PyExc_ValueError, "%s: a %zd-D array was given, 1-D expected", what, PyTuple_Size(shape));
        return -1;
    }
    Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GetItem(shape, 0));
    if (n < 0) { if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s: negative shape", what); return -1; }
    const char *ts = PyUnicode_AsUTF8AndSize(typestr, NULL);
    if (!ts) return -1;
    int bits = ts[0] && ts[1] ? atoi(ts + 2) * 8 : 0, code;
    switch (ts[0] && ts[1] ? ts[1] : 0) {
    case 'i': code = kDLInt; break;
    case 'u': code = kDLUInt; break;
    case 'f': code = kDLFloat; break;
    case 'b': code = kDLBool; break;
    default: code = -1;
    }
    if ((ts[0] != '<' && ts[0] != '|') || code < 0 || kind_of(code, bits, &v->kind) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: unsupported element type '%s' (want little-endian integers or floats)", what, ts);
        return -1;
    }
    v->size = bits / 8;
    if (strides && strides != Py_None) {
        if (!PyTuple_Check(strides) || PyTuple_Size(strides) != 1) {
            PyErr_Format(PyExc_ValueError, "%s: bad strides", what);
            return -1;
        }
        Py_ssize_t st = PyLong_AsSsize_t(PyTuple_GetItem(strides, 0));
        if (st == -1 && PyErr_Occurred()) return -1;
        if (st != v->size && n > 1) {
            PyErr_Format(PyExc_ValueError, "%s: not contiguous (stride %zd bytes): make it contiguous first", what, st);
            return -1;
        }
    }
    unsigned long long ptr = PyLong_AsUnsignedLongLong(PyTuple_GetItem(data, 0));
    if (ptr == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    if (cai_stream(d, v) < 0) return -1;
    v->data = (char *)(uintptr_t)ptr;
    v->count = n;
    v->dev_type = kDLCUDA;
    v->dev_id = -1;
    Py_INCREF(obj);
    v->owner = obj;
    return 0;
}

/* obj as a dl_view: __dlpack__ (asked for stream `dlstream` when it is on a GPU), else
 * __cuda_array_interface__. */
static int dl_get(PyObject *obj, const char *what, PyObject *dlstream, dl_view *v)
{
    memset(v, 0, sizeof *v);
    v->dev_id = -1;
    PyObject *meth = PyObject_GetAttrString(obj, "__dlpack__");
    if (meth) {
        PyObject *dev = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
        int dt = 0, di = 0;
        if (!dev || !PyArg_ParseTuple(dev, "ii", &dt, &di)) {
            Py_XDECREF(dev);
            Py_DECREF(meth);
            if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%s: __dlpack_device__ is not (type, id)", what);
            return -1;
        }
        Py_DECREF(dev);
        PyObject *cap;
        if (dt == kDLCUDA || dt == kDLCUDAManaged) {
            PyObject *noargs = PyTuple_New(0), *kw = Py_BuildValue("{sO}", "stream", dlstream);
            cap = noargs && kw ? PyObject_Call(meth, noargs, kw) : NULL;
            Py_XDECREF(noargs);
            Py_XDECREF(kw);
        } else {
            cap = PyObject_CallNoArgs(meth);
        }
        Py_DECREF(meth);
        if (!cap) return -1;
        v->capsule = cap;
        if (from_capsule(cap, what, v) < 0) { dl_release(v); return -1; }
        return 0;
    }
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    PyObject *cai = PyObject_GetAttrString(obj, "__cuda_array_interface__");
    if (!cai) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: neither __dlpack__ nor __cuda_array_interface__", what);
        }
        return -1;
    }
    int r = from_cai(obj, cai, what, v);
    Py_DECREF(cai);
    if (r < 0) dl_release(v);
    return r;
}

static int on_gpu(const dl_view *v) { return v->dev_type == kDLCUDA || v->dev_type == kDLCUDAManaged; }
static int on_host(const dl_view *v) { return v->dev_type == kDLCPU || v->dev_type == kDLCUDAHost; }

/* A host view as the CSR core's buffer (not held: the view keeps the memory). */
static void as_buf(const dl_view *v, arg_buf *b)
{
    memset(b, 0, sizeof *b);
    b->view.buf = v->data;
    b->view.len = v->count * v->size;
    b->view.itemsize = v->size;
    b->view.ndim = 1;
    b->kind = v->kind;
    b->size = v->size;
    b->count = v->count;
}

/* ---- DeviceArray ------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    void *ptr;           /* wisp_device_alloc's (or the device pool's) */
    int dev;
    Py_ssize_t n;        /* float32 elements */
    size_t cap;          /* the block's bytes (>= 4 n) */
    int exported;        /* handed out (DLPack, __cuda_array_interface__, .ptr): another stream may have used it */
} DeviceArrayObject;

static PyObject *DeviceArrayType;

/* ---- the output pools --------------------------------------------------------------------------- */

enum { POOL_SLOTS = 8 };
#define POOL_MAX_BYTES ((size_t)512 << 20)    /* per pool */
#define POOL_MIN_BYTES ((size_t)256 << 10)    /* host outputs smaller than this: numpy's memory */
#define PINNED_OUT_MAX ((size_t)1 << 30)      /* pinned host outputs alive (arrays and pool) */

typedef struct { void *p; int dev; size_t cap; int dirty; } pool_ent;
typedef struct { pool_ent e[POOL_SLOTS]; int n; size_t bytes; unsigned long long taken, kept, synced; } out_pool;
static out_pool dev_pool, host_pool;
static size_t pinned_out_live;
static int pool_any_memory;     /* WISP_PY_POOL_ANY_MEMORY=1 (specs without a GPU): host outputs pooled in plain memory too */

/* The block's size for n bytes: 1/8 more, in 4 KiB pages, so a slightly larger batch reuses it. */
static size_t pool_round(size_t n)
{
    size_t c = n + n / 8;
    return c < n ? n : (c + 4095) & ~(size_t)4095;
}

/* A pooled block of at least need bytes on dev (wasting at most 2 need + 64 KiB): one that
 * needs no sync first, then the smallest; 0 when none. */
static int pool_take(out_pool *pl, int dev, size_t need, pool_ent *out)
{
    int best = -1;
    for (int i = 0; i < pl->n; i++) {
        const pool_ent *x = &pl->e[i];
        if (x->dev != dev || x->cap < need || (x->cap - need) / 2 > need + (32 << 10)) continue;
        if (best < 0 || x->dirty < pl->e[best].dirty || (x->dirty == pl->e[best].dirty && x->cap < pl->e[best].cap))
            best = i;
    }
    if (best < 0) return 0;
    *out = pl->e[best];
    pl->e[best] = pl->e[--pl->n];
    pl->bytes -= out->cap;
    pl->taken++;
    return 1;
}

/* Keep x for later (1), or 0: the pool is full, the caller frees it. */
static int pool_put(out_pool *pl, pool_ent x)
{
    if (pl->n == POOL_SLOTS || x.cap > POOL_MAX_BYTES - pl->bytes) return 0;
    pl->e[pl->n++] = x;
    pl->bytes += x.cap;
    pl->kept++;
    return 1;
}

/* HostBlock: pinned host memory for one host output, the base of the numpy array over it. */
typedef struct {
    PyObject_HEAD
    void *ptr;          /* wisp_engine_host_alloc's (pinned) */
    size_t cap;
    Py_ssize_t nbytes;  /* what the buffer shows: 4 * rows */
} HostBlockObject;

static PyObject *HostBlockType;

static int HostBlock_getbuffer(PyObject *o, Py_buffer *view, int flags)
{
    HostBlockObject *self = (HostBlockObject *)o;
    return PyBuffer_FillInfo(view, o, self->ptr, self->nbytes, 0, flags);
}

static void HostBlock_dealloc(PyObject *o)
{
    HostBlockObject *self = (HostBlockObject *)o;
    PyTypeObject *tp = Py_TYPE(o);
    if (self->ptr && !pool_put(&host_pool, (pool_ent){ self->ptr, -1, self->cap, 1 })) {
        wisp_engine *eng = wisp__py_engine();
        if (eng) wisp_engine_host_free(eng, self->ptr);
        else PyErr_Clear();
        pinned_out_live -= self->cap;
    }
    self->ptr = NULL;
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(o);
    Py_DECREF(tp);
}

static PyObject *HostBlock_new_refused(PyTypeObject *t, PyObject *a, PyObject *k)
{
    PyErr_SetString(PyExc_TypeError, "wisp.HostBlock is made by Session.score (the base of a host output)");
    return NULL;
}

static PyType_Slot HostBlock_slots[] = {
    { Py_tp_doc, "Pinned host memory under a numpy array of answers (Session.score of GPU arrays with a host out): "
                 "the answers cross PCIe in one DMA. Back to wisp's pool when the array is gone." },
    { Py_tp_new, HostBlock_new_refused },
    { Py_tp_dealloc, HostBlock_dealloc },
    { Py_bf_getbuffer, HostBlock_getbuffer },
    { 0, NULL }
};
static PyType_Spec HostBlock_spec = { "wisp.HostBlock", sizeof(HostBlockObject), 0, Py_TPFLAGS_DEFAULT, HostBlock_slots };

/* host_out(rows) -> HostBlock of 4 * rows bytes of pinned memory, or None (small, no GPU, the
 * pinned budget spent: the caller makes a numpy array) */
static PyObject *py_host_out(PyObject *mod, PyObject *arg)
{
    Py_ssize_t rows = PyLong_AsSsize_t(arg);
    if (rows == -1 && PyErr_Occurred()) return NULL;
    if (rows < 0) { PyErr_SetString(PyExc_ValueError, "host_out: rows < 0"); return NULL; }
    const size_t need = (size_t)rows * 4;
    if (need < POOL_MIN_BYTES || (size_t)rows > WISP_MAX_ROWS) Py_RETURN_NONE;
    wisp_engine *eng = wisp__py_engine();
    if (!eng) return NULL;
    pool_ent x;
    void *p = NULL;
    size_t cap = 0;
    if (pool_take(&host_pool, -1, need, &x)) {
        int st;
        Py_BEGIN_ALLOW_THREADS
        st = wisp__device_sync(-1);      /* an asynchronous copy from it may still be in flight */
        if (st == WISP_ENODEV) st = WISP_OK;   /* no CUDA device: no copy can be */
        Py_END_ALLOW_THREADS
        host_pool.synced++;
        if (st != WISP_OK) {             /* the device failed: this block is not reused, numpy's memory serves */
            wisp_engine_host_free(eng, x.p);
            pinned_out_live -= x.cap;
            Py_RETURN_NONE;
        }
        p = x.p;
        cap = x.cap;
    } else {
        cap = pool_round(need);
        if (cap > PINNED_OUT_MAX - pinned_out_live || (!pool_any_memory && wisp_engine_gpu_count(eng) == 0))
            Py_RETURN_NONE;
        int st;
        Py_BEGIN_ALLOW_THREADS
        st = wisp_engine_host_alloc(eng, cap, &p);
        if (st == WISP_OK && !pool_any_memory && !wisp_engine_host_pinned(eng, p)) { wisp_engine_host_free(eng, p); p = NULL; }
        Py_END_ALLOW_THREADS
        if (!p) Py_RETURN_NONE;         /* no pinned memory left: numpy's */
        pinned_out_live += cap;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot((PyTypeObject *)HostBlockType, Py_tp_alloc);
    HostBlockObject *b = (HostBlockObject *)alloc((PyTypeObject *)HostBlockType, 0);
    if (!b) {
        if (!pool_put(&host_pool, (pool_ent){ p, -1, cap, 1 })) { wisp_engine_host_free(eng, p); pinned_out_live -= cap; }
        return NULL;
    }
    b->ptr = p;
    b->cap = cap;
    b->nbytes = (Py_ssize_t)need;
    return (PyObject *)b;
}

/* pool_stats() -> dict: what the output pools hold and did (the specs read it) */
static PyObject *py_pool_stats(PyObject *mod, PyObject *noargs)
{
    return Py_BuildValue("{sisnsKsKsKsisnsKsKsKsn}",
                         "device_blocks", dev_pool.n, "device_bytes", (Py_ssize_t)dev_pool.bytes,
                         "device_taken", dev_pool.taken, "device_kept", dev_pool.kept, "device_synced", dev_pool.synced,
                         "host_blocks", host_pool.n, "host_bytes", (Py_ssize_t)host_pool.bytes,
                         "host_taken", host_pool.taken, "host_kept", host_pool.kept, "host_synced", host_pool.synced,
                         "pinned_out_live", (Py_ssize_t)pinned_out_live);
}

typedef struct {
    DLManagedTensor t;
    int64_t shape[1];
} export_ctx;

static void export_deleter(DLManagedTensor *t)
{
    export_ctx *x = (export_ctx *)t;
    PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF((PyObject *)x->t.manager_ctx);
    PyGILState_Release(g);
    free(x);
}

static void capsule_destructor(PyObject *cap)
{
    /* never consumed: the export is ours to end */
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *t = PyCapsule_GetPointer(cap, "dltensor");
        if (t && t->deleter) t->deleter(t);
    }
}

static PyObject *DeviceArray_dlpack(PyObject *o, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "stream", "max_version", "dl_device", "copy", NULL };
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO", kwlist, &stream, &max_version, &dl_device, &copy)) return NULL;
    DeviceArrayObject *self = (DeviceArrayObject *)o;
    if (copy == Py_True) {
        PyErr_SetString(PyExc_BufferError, "wisp.DeviceArray: __dlpack__(copy=True) is not supported (export it, then copy)");
        return NULL;
    }
    if (dl_device != Py_None) {
        int dt = 0, di = 0;
        if (!PyArg_ParseTuple(dl_device, "ii", &dt, &di)) return NULL;
        if (dt != kDLCUDA || di != self->dev) {
            PyErr_Format(PyExc_BufferError, "wisp.DeviceArray lives on (%d, %d), not (%d, %d)", kDLCUDA, self->dev, dt, di);
            return NULL;
        }
    }
    /* the answers were complete and the stream synchronized when score returned: every
     * consumer stream may read them at once, nothing to wait for */
    self->exported = 1;
    export_ctx *x = calloc(1, sizeof *x);
    if (!x) return PyErr_NoMemory();
    x->shape[0] = self->n;
    x->t.dl_tensor.data = self->ptr;
    x->t.dl_tensor.device.device_type = kDLCUDA;
    x->t.dl_tensor.device.device_id = self->dev;
    x->t.dl_tensor.ndim = 1;
    x->t.dl_tensor.dtype.code = kDLFloat;
    x->t.dl_tensor.dtype.bits = 32;
    x->t.dl_tensor.dtype.lanes = 1;
    x->t.dl_tensor.shape = x->shape;
    x->t.dl_tensor.strides = NULL;
    x->t.manager_ctx = self;
    x->t.deleter = export_deleter;
    Py_INCREF(o);
    PyObject *cap = PyCapsule_New(&x->t, "dltensor", capsule_destructor);
    if (!cap) { Py_DECREF(o); free(x); return NULL; }
    return cap;
}

static PyObject *DeviceArray_dlpack_device(PyObject *o, PyObject *n)
{
    return Py_BuildValue("(ii)", kDLCUDA, ((DeviceArrayObject *)o)->dev);
}

static PyObject *DeviceArray_cai(PyObject *o, void *closure)
{
    DeviceArrayObject *self = (DeviceArrayObject *)o;
    self->exported = 1;
    return Py_BuildValue("{s(n)sss(KO)sOsisO}", "shape", self->n, "typestr", "<f4", "data",
                         (unsigned long long)(uintptr_t)self->ptr, Py_False, "strides", Py_None, "version", 3,
                         "stream", Py_None);
}

static PyObject *DeviceArray_shape(PyObject *o, void *c) { return Py_BuildValue("(n)", ((DeviceArrayObject *)o)->n); }
static PyObject *DeviceArray_device(PyObject *o, void *c) { return PyLong_FromLong(((DeviceArrayObject *)o)->dev); }
static PyObject *DeviceArray_ptr(PyObject *o, void *c)
{
    ((DeviceArrayObject *)o)->exported = 1;
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)((DeviceArrayObject *)o)->ptr);
}
static PyObject *DeviceArray_dtype(PyObject *o, void *c) { return PyUnicode_FromString("float32"); }
static Py_ssize_t DeviceArray_len(PyObject *o) { return ((DeviceArrayObject *)o)->n; }

static PyObject *DeviceArray_repr(PyObject *o)
{
    DeviceArrayObject *self = (DeviceArrayObject *)o;
    return PyUnicode_FromFormat("<wisp.DeviceArray float32[%zd] on gpu:%d>", self->n, self->dev);
}

static void DeviceArray_dealloc(PyObject *o)
{
    DeviceArrayObject *self = (DeviceArrayObject *)o;
    PyTypeObject *tp = Py_TYPE(o);
    /* every export is gone: the block goes to the pool (reused after a device sync when it
     * was exported), or is freed (cudaFree waits for the device's queued work) */
    if (self->ptr && !pool_put(&dev_pool, (pool_ent){ self->ptr, self->dev, self->cap, self->exported }))
        wisp_device_free(self->dev, self->ptr);
    self->ptr = NULL;
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(o);
    Py_DECREF(tp);
}

static PyObject *DeviceArray_new_refused(PyTypeObject *t, PyObject *a, PyObject *k)
{
    PyErr_SetString(PyExc_TypeError, "wisp.DeviceArray is made by Session.score(X, out=\"device\")");
    return NULL;
}

static PyMethodDef DeviceArray_methods[] = {
    { "__dlpack__", (PyCFunction)(void (*)(void))DeviceArray_dlpack, METH_VARARGS | METH_KEYWORDS,
      "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None): a DLPack capsule of the answers "
      "(no copy; the array stays alive while the export does)" },
    { "__dlpack_device__", DeviceArray_dlpack_device, METH_NOARGS, "(2, device): kDLCUDA and the GPU's index" },
    { NULL, NULL, 0, NULL }
};

static PyGetSetDef DeviceArray_getset[] = {
    { "__cuda_array_interface__", DeviceArray_cai, NULL, "The CUDA array interface (v3) of the answers", NULL },
    { "shape", DeviceArray_shape, NULL, "(n,)", NULL },
    { "dtype", DeviceArray_dtype, NULL, "'float32'", NULL },
    { "device", DeviceArray_device, NULL, "The CUDA device's index", NULL },
    { "ptr", DeviceArray_ptr, NULL, "The device address", NULL },
    { NULL, NULL, NULL, NULL, NULL }
};

static PyType_Slot DeviceArray_slots[] = {
    { Py_tp_doc, "Answers left in GPU memory (Session.score(X, out=\"device\")): float32, shape (n,). Hand it to "
                 "cupy.from_dlpack / torch.from_dlpack (no copy), or read __cuda_array_interface__. It owns its memory, "
                 "freed when it and every DLPack export of it are gone." },
    { Py_tp_new, DeviceArray_new_refused },
    { Py_tp_dealloc, DeviceArray_dealloc },
    { Py_tp_methods, DeviceArray_methods },
    { Py_tp_getset, DeviceArray_getset },
    { Py_tp_repr, DeviceArray_repr },
    { Py_sq_length, DeviceArray_len },
    { 0, NULL }
};
static PyType_Spec DeviceArray_spec = { "wisp.DeviceArray", sizeof(DeviceArrayObject), 0, Py_TPFLAGS_DEFAULT,
                                        DeviceArray_slots };

int wisp__py_dlpack_init(PyObject *module)
{
    DeviceArrayType = PyType_FromSpec(&DeviceArray_spec);
    if (!DeviceArrayType) return -1;
    Py_INCREF(DeviceArrayType);
    if (PyModule_AddObject(module, "DeviceArray", DeviceArrayType) < 0) { Py_DECREF(DeviceArrayType); return -1; }
    const char *any = getenv("WISP_PY_POOL_ANY_MEMORY");
    pool_any_memory = any && any[0] == '1';
    HostBlockType = PyType_FromSpec(&HostBlock_spec);
    if (!HostBlockType) return -1;
    Py_INCREF(HostBlockType);
    if (PyModule_AddObject(module, "HostBlock", HostBlockType) < 0) { Py_DECREF(HostBlockType); return -1; }
    static PyMethodDef fns[] = {
        { "host_out", py_host_out, METH_O, "host_out(rows) -> HostBlock (pinned, 4 * rows bytes) or None: a host output's memory" },
        { "pool_stats", py_pool_stats, METH_NOARGS, "pool_stats() -> dict: the output pools' blocks, bytes and counts" },
        { NULL, NULL, 0, NULL }
    };
    return PyModule_AddFunctions(module, fns);
}

/* ---- Session.score_dlpack --------------------------------------------------------------------- */

static int is_idx32(const dl_view *v) { return v->kind == K_INT && v->size == 4; }

static PyObject *score_gpu(SessionObject *self, dl_view *vp, dl_view *vi, dl_view *vv, PyObject *o_out,
                           PyObject *o_stream, int dev_hint)
{
    const char *what = NULL;
    if (!(vp->kind == K_INT && (vp->size == 4 || vp->size == 8))) what = "indptr must be int32 or int64";
    else if (!is_idx32(vi)) what = "indices must be int32";
    else if (vv && !(vv->kind == K_FLOAT && vv->size == 4)) what = "values must be float32";
    if (what) {
        PyErr_Format(PyExc_TypeError, "GPU arrays: %s (convert on the device first, e.g. x.astype('int32'))", what);
        return NULL;
    }
    const int dev = vp->dev_id >= 0 ? vp->dev_id : vi->dev_id >= 0 ? vi->dev_id : dev_hint;
    if ((vi->dev_id >= 0 && vi->dev_id != dev) || (vv && vv->dev_id >= 0 && vv->dev_id != dev)) {
        PyErr_SetString(PyExc_ValueError, "indptr, indices and values are on different GPUs");
        return NULL;
    }
    if (vp->count < 1) { PyErr_SetString(PyExc_ValueError, "indptr is empty (it has rows + 1 entries)"); return NULL; }
    const size_t rows = (size_t)vp->count - 1;
    size_t cap = (size_t)vi->count;
    if (vv && (size_t)vv->count < cap) cap = (size_t)vv->count;
    /* the stream the engine works on: a __cuda_array_interface__ producer's (its writes come
     * first on it), else the one given, else the legacy default stream */
    uintptr_t stream = 0;
    int have = 0;
    dl_view *views[3] = { vp, vi, vv };
    for (int i = 0; i < 3; i++) {
        if (!views[i] || !views[i]->has_stream) continue;
        if (have && views[i]->stream != stream) {
            PyErr_SetString(PyExc_ValueError, "indptr, indices and values were made on different CUDA streams: "
                            "synchronize them first");
            return NULL;
        }
        stream = views[i]->stream;
        have = 1;
    }
    if (!have && o_stream != Py_None) {
        unsigned long long x = PyLong_AsUnsignedLongLong(o_stream);
        if (x == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
        stream = x == 1 ? 0 : (uintptr_t)x;
    }
    if (stream == 1) stream = 0;                     /* 1: the legacy default stream, NULL to the engine */
    /* out: the caller's host array, or a new DeviceArray on the arrays' GPU */
    arg_buf bo;
    memset(&bo, 0, sizeof bo);
    DeviceArrayObject *da = NULL;
    float *out;
    int on_dev = o_out == Py_None;
    if (on_dev) {
        if (dev < 0) {
            PyErr_SetString(PyExc_ValueError, "out=\"device\": the arrays' GPU is not known (a __cuda_array_interface__ "
                            "without .device); pass arrays with __dlpack__");
            return NULL;
        }
        allocfunc alloc = (allocfunc)PyType_GetSlot((PyTypeObject *)DeviceArrayType, Py_tp_alloc);
        da = (DeviceArrayObject *)alloc((PyTypeObject *)DeviceArrayType, 0);
        if (!da) return NULL;
        da->dev = dev;
        da->n = (Py_ssize_t)rows;
        pool_ent x;
        int st, pooled = pool_take(&dev_pool, dev, rows * 4, &x), dirty = pooled && x.dirty;
        if (pooled) {
            da->ptr = x.p;
            da->cap = x.cap;
            da->exported = x.dirty;      /* until the sync below succeeds */
        }
        char msg[512] = "";
        Py_BEGIN_ALLOW_THREADS
        if (!pooled) {
            da->cap = pool_round(rows * 4);
            st = wisp_device_alloc(dev, da->cap, &da->ptr);
        } else {
            /* an exported block: its users' work done first, on every device (a consumer may
             * have copied it to another GPU on that GPU's stream) */
            st = dirty ? wisp__device_sync(-1) : WISP_OK;
        }
        if (st != WISP_OK) wisp__py_copy_errmsg(msg, sizeof msg, st);
        Py_END_ALLOW_THREADS
        if (dirty) dev_pool.synced++;
        if (st != WISP_OK) { if (!pooled) da->ptr = NULL; Py_DECREF((PyObject *)da); return wisp__py_raise_status(st, msg); }
        da->exported = 0;
        out = da->ptr;
    } else {
        if (wisp__py_get_out(o_out, rows, &bo) < 0) { wisp__py_rel_buf(&bo); return NULL; }
        out = bo.view.buf;
    }
    if (wisp__py_enter(self) < 0) { wisp__py_rel_buf(&bo); Py_XDECREF((PyObject *)da); return NULL; }
    int st;
    char msg[1024] = "";
    bad_list bad = { 0 };
    Py_BEGIN_ALLOW_THREADS
    st = wisp_session_score_device_n(self->s, rows, vp->data, vp->size * 8, (const int32_t *)vi->data,
                                     vv ? (const float *)vv->data : NULL, cap, (void *)stream, out, on_dev);
    if (st != WISP_OK) wisp__py_copy_errmsg(msg, sizeof msg, st);
    else {
        /* the engine's bad rows, in row order, already NaN in out; no other row can be NaN (no
         * scan of the answers, which the C caller does not pay either): a good row's weights and
         * bias are finite (checked when the model is loaded), its values are checked finite, and
         * the products and their sum are taken in double (kernels/score_device.cu, and the
         * CPU's), which no float32 inputs overflow */
        size_t nb = wisp_session_bad_count(self->s);
        for (size_t i = 0; i < nb; i++) {
            size_t row; uint64_t line; const char *m;
            if (wisp_session_bad_row(self->s, i, &row, &line, &m) == WISP_OK) wisp__py_bad_add(&bad, row, BAD_ENGINE, m);
        }
    }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (st != WISP_OK && da) da->exported = 1;      /* a failed call may have left work queued on it */
    wisp__py_rel_buf(&bo);
    PyObject *result = NULL;
    if (st != WISP_OK) wisp__py_raise_status(st, msg);
    else {
        PyObject *l = wisp__py_bad_to_list(&bad);
        if (l) {
            result = Py_BuildValue("(NO)", l, on_dev ? (PyObject *)da : o_out);
            if (!result) Py_DECREF(l);
        }
    }
    wisp__py_bad_free(&bad);
    Py_XDECREF((PyObject *)da);
    return result;
}

/* score_dlpack(indptr, indices, values|None, out|None, stream|None, device|None) -> (bad rows, out) */
PyObject *wisp__py_score_dlpack(SessionObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "score_dlpack(indptr, indices, values|None, out|None, stream|None, device|None): "
                     "6 arguments, %zd given", nargs);
        return NULL;
    }
    PyObject *o_val = args[2], *o_out = args[3], *o_stream = args[4], *o_dev = args[5];
    int dev_hint = -1;
    if (o_dev != Py_None) {
        dev_hint = (int)PyLong_AsLong(o_dev);
        if (dev_hint == -1 && PyErr_Occurred()) return NULL;
    }
    PyObject *dlstream = o_stream;
    PyObject *one = NULL;
    if (dlstream == Py_None) dlstream = one = PyLong_FromLong(1);     /* the legacy default stream */
    if (!dlstream) return NULL;
    dl_view vp, vi, vv;
    memset(&vi, 0, sizeof vi);
    memset(&vv, 0, sizeof vv);
    PyObject *result = NULL;
    const int have_vals = o_val != Py_None;
    if (dl_get(args[0], "indptr", dlstream, &vp) < 0) goto fail_p;
    if (dl_get(args[1], "indices", dlstream, &vi) < 0) goto fail_i;
    if (have_vals && dl_get(o_val, "values", dlstream, &vv) < 0) goto fail_v;
    if (on_gpu(&vp) && on_gpu(&vi) && (!have_vals || on_gpu(&vv))) {
        result = score_gpu(self, &vp, &vi, have_vals ? &vv : NULL, o_out, o_stream, dev_hint);
    } else if (on_host(&vp) && on_host(&vi) && (!have_vals || on_host(&vv))) {
        if (o_out == Py_None) {
            PyErr_SetString(PyExc_ValueError, "out=\"device\" needs GPU arrays; these are in host memory");
        } else {
            arg_buf bp, bi, bv, bo;
            as_buf(&vp, &bp);
            as_buf(&vi, &bi);
            if (have_vals) as_buf(&vv, &bv);
            else memset(&bv, 0, sizeof bv);
            if (wisp__py_get_out(o_out, vp.count > 0 ? (size_t)vp.count - 1 : 0, &bo) == 0) {
                PyObject *l = wisp__py_score_csr_bufs(self, &bp, &bi, &bv, have_vals, &bo, 0);
                if (l) {
                    result = Py_BuildValue("(NO)", l, o_out);
                    if (!result) Py_DECREF(l);
                }
            }
            wisp__py_rel_buf(&bo);
        }
    } else if (vp.dev_type == vi.dev_type && (!have_vals || vv.dev_type == vp.dev_type)) {
        PyErr_Format(PyExc_TypeError, "arrays on DLPack device type %d are not read (CPU, CUDA host, CUDA or CUDA managed "
                     "memory only)", vp.dev_type);
    } else {
        PyErr_Format(PyExc_ValueError, "indptr, indices and values are on different devices (DLPack device types %d, %d, %d)",
                     vp.dev_type, vi.dev_type, have_vals ? vv.dev_type : vi.dev_type);
    }
    if (have_vals) dl_release(&vv);
fail_v:
    dl_release(&vi);
fail_i:
    dl_release(&vp);
fail_p:
    Py_XDECREF(one);
    return result;
}
