/* _wisp.h — what the extension's C files share: the object layouts, buffers, bad-row lists, error raising and the entries each file gives the Session type (not installed). */
#ifndef WISP_PY_INTERNAL_H
#define WISP_PY_INTERNAL_H

#ifndef WISP_NO_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>

#include <stdint.h>
#include <stddef.h>

#include "wisp.h"

enum { K_INT, K_UINT, K_FLOAT, K_BOOL };

typedef struct {
    Py_buffer view;
    int held;          /* view must be released */
    int kind;          /* K_* */
    Py_ssize_t size;   /* itemsize */
    Py_ssize_t count;  /* elements */
} arg_buf;

/* Element i of an integer buffer, widened; *neg set for a negative value. */
static inline uint64_t int_at(const arg_buf *b, size_t i, int *neg)
{
    const void *p = b->view.buf;
    int64_t v;
    if (b->kind == K_UINT || b->kind == K_BOOL) {
        *neg = 0;
        switch (b->size) {
        case 1: return ((const uint8_t *)p)[i];
        case 2: return ((const uint16_t *)p)[i];
        case 4: return ((const uint32_t *)p)[i];
        default: return ((const uint64_t *)p)[i];
        }
    }
    switch (b->size) {
    case 1: v = ((const int8_t *)p)[i]; break;
    case 2: v = ((const int16_t *)p)[i]; break;
    case 4: v = ((const int32_t *)p)[i]; break;
    default: v = ((const int64_t *)p)[i]; break;
    }
    *neg = v < 0;
    return (uint64_t)v;
}

static inline double float_at(const arg_buf *b, size_t i)
{
    if (b->kind == K_FLOAT) return b->size == 4 ? ((const float *)b->view.buf)[i] : ((const double *)b->view.buf)[i];
    int neg;
    uint64_t u = int_at(b, i, &neg);
    return neg ? (double)(int64_t)u : (double)u;
}

enum { BAD_NAN_SCORE = 1, BAD_ENGINE };

typedef struct {
    size_t row;
    int why;          /* BAD_* */
    char *msg;        /* BAD_ENGINE: the engine's message (owned) */
} bad_row;

typedef struct {
    bad_row *v;
    size_t n, cap;
    int oom;
} bad_list;

typedef struct {
    PyObject_HEAD
    wisp_model *m;
} ModelObject;

typedef struct {
    PyObject_HEAD
    wisp_session *s;
    wisp_batch *text;      /* the builder libsvm text is parsed into (reused) */
    PyObject *model;       /* the ModelObject, kept alive */
    wisp_raw *raw;         /* raw rows of a model with feature columns (reused; _wisp_raw.c) */
    int busy;              /* a call is running on another thread */
    PyThread_type_lock lock;   /* the Python layer's session lock (`with session._s:`), also taken by score_fast */
    PyObject *bad_rows;    /* the last call's bad rows (a list), NULL for none */
} SessionObject;

/* The Model type (_wisp.c); the Session type added to the module (_wisp_session.c). */
extern PyObject *wisp__py_model_type;
int wisp__py_session_init(PyObject *module);

/* The process's engine, created on first use (NULL and an exception set on failure). */
wisp_engine *wisp__py_engine(void);

/* Raise the class registered for status with msg. Returns NULL. */
PyObject *wisp__py_raise_status(int status, const char *msg);
/* The calling thread's wisp_errmsg() copied into buf (call right after the failure). */
void wisp__py_copy_errmsg(char *buf, size_t len, int status);

/* A C-contiguous buffer of obj with its element type classified (TypeError
 * naming `what` for other formats); release with wisp__py_rel_buf. */
int  wisp__py_get_buf(PyObject *obj, const char *what, int writable, int ndim_want, arg_buf *b);
void wisp__py_rel_buf(arg_buf *b);
/* The output buffer: writable C-contiguous float32 of at least n elements. */
int  wisp__py_get_out(PyObject *o, size_t n, arg_buf *b);

/* The bad-row list (_wisp_score.c). */
void      wisp__py_bad_add(bad_list *l, size_t row, int why, const char *msg);
void      wisp__py_bad_free(bad_list *l);
/* The list as Python [(row, reason)], sorted by row, one entry per row. */
PyObject *wisp__py_bad_to_list(bad_list *l);
/* Mark the rows of `bad` NaN in out, and list the other NaN outputs. */
void      wisp__py_finish_bad(bad_list *bad, float *out, size_t rows);

/* Mark the session busy (ESTATE raised when another thread is inside it). _wisp_session.c, as the two below. */
int wisp__py_enter(SessionObject *self);
/* Take the session's lock (the Python layer's `with session._s:`), waiting without the GIL. */
void wisp__py_lock_take(SessionObject *self);
/* Keep list (a new reference is taken; NULL: none) as what bad_rows() answers. */
void wisp__py_keep_bad_rows(SessionObject *self, PyObject *list);

/* _wisp_raw.c: Session.score_raw(cols, rows, out) -> bad rows. */
PyObject *wisp__py_score_raw(SessionObject *self, PyObject *args);

/* The CSR core of Session.score_csr over buffers already taken (bv used when have_vals;
 * bo: at least rows floats), through wisp_batch_from_csr: the bad-row list (None instead of an
 * empty one when none_if_clean), or NULL with an exception. _wisp_score.c, as the entries below. */
PyObject *wisp__py_score_csr_bufs(SessionObject *self, const arg_buf *bp, const arg_buf *bi, const arg_buf *bv,
                                  int have_vals, const arg_buf *bo, int none_if_clean);
/* Session.score_fast(X), score_csr(indptr, indices, values|None, out), score_dense(X, out),
 * parse_libsvm(data), score_parsed(out); the module's register_fast(empty, float32, is_csr). */
PyObject *wisp__py_score_fast(SessionObject *self, PyObject *X);
PyObject *wisp__py_score_csr(SessionObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *wisp__py_score_dense(SessionObject *self, PyObject *args);
PyObject *wisp__py_parse_libsvm(SessionObject *self, PyObject *arg);
PyObject *wisp__py_score_parsed(SessionObject *self, PyObject *o_out);
PyObject *wisp__py_register_fast(PyObject *mod, PyObject *args);

/* _wisp_dlpack.c: Session.score_dlpack(indptr, indices, values|None, out|None, stream|None,
 * device|None) -> (bad rows, out): arrays through DLPack or __cuda_array_interface__;
 * and the DeviceArray type (out=None: the answers on the arrays' GPU). */
PyObject *wisp__py_score_dlpack(SessionObject *self, PyObject *const *args, Py_ssize_t nargs);
int       wisp__py_dlpack_init(PyObject *module);

/* Not in wisp.h: an internal hook of libwisp.a (engine/cuda/cuda_device_batch.c; engine/cuda/cuda_stub.c
 * answers WISP_ENODEV), which the extension links statically: wait until the work queued on
 * CUDA device dev (every device for -1) is done, what cudaFree would wait for, before a
 * pooled output block is handed out again (_wisp_dlpack.c). */
int       wisp__device_sync(int dev);

#endif
