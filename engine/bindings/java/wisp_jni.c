/* wisp_jni.c — the JNI shim under the Java package `wisp` (engine/bindings/java/src/wisp/Native.java): models, sessions, scoring over wisp.h alone.
 *
 * Design (the shape engine/bindings/python/wisp/_wisp.c settled):
 * - Every native method is static and takes raw handles (jlong) from the Java
 *   objects, which own them (AutoCloseable, a Cleaner as the net). The Java
 *   layer checks "closed" and "in use by another thread" before it gets here,
 *   so a handle passed in is live and used by this thread alone.
 * - Java arrays are read or written only for the length of one call: with
 *   Get/ReleasePrimitiveArrayCritical around the engine call (no JNI call, no
 *   Java monitor, no allocation inside), never kept. Direct buffers are read
 *   in place (GetDirectBufferAddress): that is the zero-copy path; the Java
 *   Batch keeps them reachable while they are used.
 * - Errors: a failing status throws wisp.WispException(status, message) with
 *   wisp_errmsg()'s text, copied on the failing thread right after the call.
 *   Argument errors found here (lengths, bounds) are WISP_EINVAL too, in the
 *   same exception, worded like the engine's. CSR arrays go to wisp_batch_from_csr
 *   as they are (Java's int32 and float32 are the engine's layout: read in place),
 *   which holds every check of them. Bad rows never throw: they come back as
 *   "ROW\tMESSAGE" strings and their output is NaN.
 * - One engine per process, created on first use and kept for the process's
 *   life (the JVM has no reliable point to free it, and models, batches and
 *   sessions keep it alive anyway).
 */
#include <jni.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wisp.h"

/* ---- errors ------------------------------------------------------------------ */

static jclass    exc_class;      /* wisp.WispException (global ref) */
static jmethodID exc_ctor;       /* (ILjava/lang/String;)V */

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM *vm, void *reserved)
{
    JNIEnv *env;
    if ((*vm)->GetEnv(vm, (void **)&env, JNI_VERSION_1_8) != JNI_OK) return JNI_ERR;
    jclass c = (*env)->FindClass(env, "wisp/WispException");
    if (!c) return JNI_ERR;
    exc_class = (*env)->NewGlobalRef(env, c);
    (*env)->DeleteLocalRef(env, c);
    exc_ctor = (*env)->GetMethodID(env, exc_class, "<init>", "(ILjava/lang/String;)V");
    if (!exc_class || !exc_ctor) return JNI_ERR;
    return JNI_VERSION_1_8;
}

/* Throw WispException(status, msg). Call with no critical region open. */
static void throw_status(JNIEnv *env, int status, const char *msg)
{
    if ((*env)->ExceptionCheck(env)) return;
    jstring js = (*env)->NewStringUTF(env, msg && msg[0] ? msg : wisp_strerror(status));
    if (!js) return;                               /* OutOfMemoryError pending */
    jobject e = (*env)->NewObject(env, exc_class, exc_ctor, (jint)status, js);
    if (e) (*env)->Throw(env, e);
}

/* The calling thread's wisp_errmsg() into buf: call right after the failure. */
static void copy_errmsg(char *buf, size_t len, int status)
{
    const char *m = wisp_errmsg();
    snprintf(buf, len, "%s", m && m[0] ? m : wisp_strerror(status));
}

static void throw_last(JNIEnv *env, int status)
{
    char msg[1024];
    copy_errmsg(msg, sizeof msg, status);
    throw_status(env, status, msg);
}

/* A Java string as modified UTF-8 (what file names and device names need). */
typedef struct { JNIEnv *env; jstring js; const char *s; } jstr;
static int jstr_get(JNIEnv *env, jstring js, jstr *out)
{
    out->env = env; out->js = js; out->s = NULL;
    if (!js) return 0;
    out->s = (*env)->GetStringUTFChars(env, js, NULL);
    return out->s ? 0 : -1;
}
static void jstr_rel(jstr *j) { if (j->s) (*j->env)->ReleaseStringUTFChars(j->env, j->js, j->s); j->s = NULL; }

static jstring new_str(JNIEnv *env, const char *s) { return s ? (*env)->NewStringUTF(env, s) : NULL; }

/* ---- the engine ----------------------------------------------------------------- */

static wisp_engine *engine;
static pthread_mutex_t engine_lock = PTHREAD_MUTEX_INITIALIZER;

static wisp_engine *get_engine(JNIEnv *env, int threads)
{
    wisp_engine *e = __atomic_load_n(&engine, __ATOMIC_ACQUIRE);
    if (e) return e;
    pthread_mutex_lock(&engine_lock);
    int st = WISP_OK;
    char msg[512] = "";
    if (!engine) {
        st = wisp_engine_new(threads, &e);
        if (st == WISP_OK) __atomic_store_n(&engine, e, __ATOMIC_RELEASE);
        else copy_errmsg(msg, sizeof msg, st);
    }
    e = engine;
    pthread_mutex_unlock(&engine_lock);
    if (!e) throw_status(env, st, msg);
    return e;
}

JNIEXPORT jlong JNICALL Java_wisp_Native_engine(JNIEnv *env, jclass cls, jint threads)
{
    return (jlong)(uintptr_t)get_engine(env, threads);
}

/* ---- host memory for Batch.allocate (wisp_engine_host_alloc: pinned when a GPU is usable) ---- */

/* A direct ByteBuffer over `bytes` bytes of the engine's host memory; Java frees it with hostFree(address). */
JNIEXPORT jobject JNICALL Java_wisp_Native_hostAlloc(JNIEnv *env, jclass cls, jlong bytes)
{
    wisp_engine *e = get_engine(env, 0);
    if (!e) return NULL;
    if (bytes < 0) {
        throw_status(env, WISP_EINVAL, "Batch.allocate: a negative size");
        return NULL;
    }
    void *p = NULL;
    int st = wisp_engine_host_alloc(e, (size_t)bytes, &p);
    if (st != WISP_OK) {
        throw_last(env, st);
        return NULL;
    }
    jobject b = (*env)->NewDirectByteBuffer(env, p, bytes);
    if (!b) wisp_engine_host_free(e, p);           /* an exception is pending */
    return b;
}

JNIEXPORT jlong JNICALL Java_wisp_Native_bufferAddress(JNIEnv *env, jclass cls, jobject buf)
{
    return (jlong)(uintptr_t)(*env)->GetDirectBufferAddress(env, buf);
}

JNIEXPORT jboolean JNICALL Java_wisp_Native_hostPinned(JNIEnv *env, jclass cls, jlong addr)
{
    return wisp_engine_host_pinned(engine, (const void *)(uintptr_t)addr) ? JNI_TRUE : JNI_FALSE;
}

JNIEXPORT void JNICALL Java_wisp_Native_hostFree(JNIEnv *env, jclass cls, jlong addr)
{
    wisp_engine_host_free(engine, (void *)(uintptr_t)addr);
}

JNIEXPORT jstring JNICALL Java_wisp_Native_version(JNIEnv *env, jclass cls) { return new_str(env, wisp_version()); }

JNIEXPORT jint JNICALL Java_wisp_Native_engineThreads(JNIEnv *env, jclass cls)
{
    wisp_engine *e = get_engine(env, 0);
    return e ? wisp_engine_threads(e) : 0;
}

/* devices(): "gpu_status" first, then one "name\tmemory\tcapability\tusable" per GPU */
JNIEXPORT jobjectArray JNICALL Java_wisp_Native_devices(JNIEnv *env, jclass cls)
{
    wisp_engine *e = get_engine(env, 0);
    if (!e) return NULL;
    int n = wisp_engine_gpu_count(e);
    jclass sc = (*env)->FindClass(env, "java/lang/String");
    if (!sc) return NULL;
    jobjectArray a = (*env)->NewObjectArray(env, n + 1, sc, NULL);
    if (!a) return NULL;
    jstring js = new_str(env, wisp_engine_gpu_status(e));
    if (!js) return NULL;
    (*env)->SetObjectArrayElement(env, a, 0, js);
    for (int i = 0; i < n; i++) {
        char line[512];
        const char *name = wisp_engine_gpu_name(e, i);
        snprintf(line, sizeof line, "%s\t%llu\t%d\t%d", name ? name : "", (unsigned long long)wisp_engine_gpu_memory(e, i),
                 wisp_engine_gpu_capability(e, i), wisp_engine_gpu_usable(e, i));
        js = new_str(env, line);
        if (!js) return NULL;
        (*env)->SetObjectArrayElement(env, a, i + 1, js);
        (*env)->DeleteLocalRef(env, js);
    }
    return a;
}

JNIEXPORT jobjectArray JNICALL Java_wisp_Native_statNames(JNIEnv *env, jclass cls)
{
    jclass sc = (*env)->FindClass(env, "java/lang/String");
    if (!sc) return NULL;
    jobjectArray a = (*env)->NewObjectArray(env, WISP_STAT_COUNT, sc, NULL);
    for (int i = 0; a && i < WISP_STAT_COUNT; i++) {
        jstring js = new_str(env, wisp_stat_name(i));
        if (!js) return NULL;
        (*env)->SetObjectArrayElement(env, a, i, js);
        (*env)->DeleteLocalRef(env, js);
    }
    return a;
}

JNIEXPORT jstring JNICALL Java_wisp_Native_errName(JNIEnv *env, jclass cls, jint status)
{
    return new_str(env, wisp_err_name(status));
}

/* ---- models ------------------------------------------------------------------------ */

#define MODEL(h) ((wisp_model *)(uintptr_t)(h))
#define SESSION(h) ((wisp_session *)(uintptr_t)(h))

JNIEXPORT jlong JNICALL Java_wisp_Native_modelLoad(JNIEnv *env, jclass cls, jstring jpath)
{
    wisp_engine *e = get_engine(env, 0);
    if (!e) return 0;
    jstr path;
    if (jstr_get(env, jpath, &path) < 0) return 0;
    wisp_model *m = NULL;
    int st = wisp_model_load(e, path.s, &m);
    jstr_rel(&path);
    if (st != WISP_OK) { throw_last(env, st); return 0; }
    return (jlong)(uintptr_t)m;
}

JNIEXPORT void JNICALL Java_wisp_Native_modelFree(JNIEnv *env, jclass cls, jlong m) { wisp_model_free(MODEL(m)); }

JNIEXPORT jlong JNICALL Java_wisp_Native_modelNumFeatures(JNIEnv *env, jclass cls, jlong m)
{
    return (jlong)wisp_model_num_features(MODEL(m));
}
JNIEXPORT jdouble JNICALL Java_wisp_Native_modelBias(JNIEnv *env, jclass cls, jlong m) { return wisp_model_bias(MODEL(m)); }
JNIEXPORT jstring JNICALL Java_wisp_Native_modelDtype(JNIEnv *env, jclass cls, jlong m)
{
    return new_str(env, wisp_dtype_name(wisp_model_dtype(MODEL(m))));
}
JNIEXPORT jstring JNICALL Java_wisp_Native_modelPath(JNIEnv *env, jclass cls, jlong m) { return new_str(env, wisp_model_path(MODEL(m))); }
JNIEXPORT jstring JNICALL Java_wisp_Native_modelMetaText(JNIEnv *env, jclass cls, jlong m)
{
    return new_str(env, wisp_model_meta_text(MODEL(m)));
}
JNIEXPORT jstring JNICALL Java_wisp_Native_modelColumns(JNIEnv *env, jclass cls, jlong m)
{
    return new_str(env, wisp_model_columns(MODEL(m)));
}
JNIEXPORT jstring JNICALL Java_wisp_Native_modelMeta(JNIEnv *env, jclass cls, jlong m, jstring jkey)
{
    jstr key;
    if (jstr_get(env, jkey, &key) < 0) return NULL;
    const char *v = wisp_model_meta(MODEL(m), key.s);
    jstr_rel(&key);
    return new_str(env, v);
}
JNIEXPORT jfloat JNICALL Java_wisp_Native_modelWeight(JNIEnv *env, jclass cls, jlong m, jlong id)
{
    return id < 0 ? 0.0f : wisp_model_weight(MODEL(m), (uint64_t)id);
}

JNIEXPORT void JNICALL Java_wisp_Native_modelWrite(JNIEnv *env, jclass cls, jstring jpath, jfloatArray jw, jdouble bias,
                                                   jstring jdtype, jstring jmeta, jstring jcols)
{
    jstr path, dt, meta, cols;
    if (jstr_get(env, jpath, &path) < 0) return;
    if (jstr_get(env, jdtype, &dt) < 0) { jstr_rel(&path); return; }
    if (jstr_get(env, jmeta, &meta) < 0) { jstr_rel(&path); jstr_rel(&dt); return; }
    if (jstr_get(env, jcols, &cols) < 0) { jstr_rel(&path); jstr_rel(&dt); jstr_rel(&meta); return; }
    int st = WISP_OK;
    char msg[1024] = "";
    int dtype = dt.s ? wisp_dtype_parse(dt.s) : WISP_F32;
    if (dtype < 0) {
        st = WISP_EINVAL;
        snprintf(msg, sizeof msg, "Model.write: unknown dtype '%s' (f32, f16 or i8)", dt.s);
    } else {
        jsize n = (*env)->GetArrayLength(env, jw);
        float *w = (*env)->GetFloatArrayElements(env, jw, NULL);   /* a file write: no critical region */
        if (!w) goto out;
        st = wisp_model_write(path.s, w, (uint64_t)n, bias, dtype, meta.s, cols.s);
        if (st != WISP_OK) copy_errmsg(msg, sizeof msg, st);
        (*env)->ReleaseFloatArrayElements(env, jw, w, JNI_ABORT);
    }
out:
    jstr_rel(&path); jstr_rel(&dt); jstr_rel(&meta); jstr_rel(&cols);
    if (st != WISP_OK) throw_status(env, st, msg);
}

/* ---- sessions ----------------------------------------------------------------------- */

JNIEXPORT jlong JNICALL Java_wisp_Native_sessionNew(JNIEnv *env, jclass cls, jlong m, jstring jdev)
{
    wisp_engine *e = get_engine(env, 0);
    if (!e) return 0;
    jstr dev;
    if (jstr_get(env, jdev, &dev) < 0) return 0;
    wisp_session *s = NULL;
    int st = wisp_session_new(e, MODEL(m), dev.s ? dev.s : "auto", &s);
    jstr_rel(&dev);
    if (st != WISP_OK) { throw_last(env, st); return 0; }
    return (jlong)(uintptr_t)s;
}

JNIEXPORT void JNICALL Java_wisp_Native_sessionFree(JNIEnv *env, jclass cls, jlong s) { wisp_session_free(SESSION(s)); }

JNIEXPORT jstring JNICALL Java_wisp_Native_sessionDevice(JNIEnv *env, jclass cls, jlong s)
{
    return new_str(env, wisp_session_device(SESSION(s)));
}
JNIEXPORT jstring JNICALL Java_wisp_Native_sessionLastDevice(JNIEnv *env, jclass cls, jlong s)
{
    return new_str(env, wisp_session_last_device(SESSION(s)));
}
JNIEXPORT void JNICALL Java_wisp_Native_sessionSetDevice(JNIEnv *env, jclass cls, jlong s, jstring jdev)
{
    jstr dev;
    if (jstr_get(env, jdev, &dev) < 0) return;
    int st = wisp_session_set_device(SESSION(s), dev.s);
    jstr_rel(&dev);
    if (st != WISP_OK) throw_last(env, st);
}
JNIEXPORT jlongArray JNICALL Java_wisp_Native_sessionStats(JNIEnv *env, jclass cls, jlong s)
{
    jlong v[WISP_STAT_COUNT];
    for (int i = 0; i < WISP_STAT_COUNT; i++) v[i] = (jlong)wisp_session_stat(SESSION(s), i);
    jlongArray a = (*env)->NewLongArray(env, WISP_STAT_COUNT);
    if (a) (*env)->SetLongArrayRegion(env, a, 0, WISP_STAT_COUNT, v);
    return a;
}
JNIEXPORT void JNICALL Java_wisp_Native_sessionResetStats(JNIEnv *env, jclass cls, jlong s) { wisp_session_reset_stats(SESSION(s)); }

/* ---- bad rows ------------------------------------------------------------------------- */

typedef struct { size_t row; char *msg; } bad_row;
typedef struct { bad_row *v; size_t n, cap; int oom; } bad_list;

static void bad_add(bad_list *l, size_t row, const char *msg)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        bad_row *v = realloc(l->v, cap * sizeof *v);
        if (!v) { l->oom = 1; return; }
        l->v = v; l->cap = cap;
    }
    char *m = strdup(msg ? msg : "");
    if (!m) { l->oom = 1; return; }
    l->v[l->n].row = row;
    l->v[l->n++].msg = m;
}

static void bad_free(bad_list *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->v[i].msg);
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* The list as String[] of "ROW\tMESSAGE" (NULL, no exception, when empty). */
static jobjectArray bad_to_java(JNIEnv *env, bad_list *l)
{
    if (l->n == 0) return NULL;
    jclass sc = (*env)->FindClass(env, "java/lang/String");
    if (!sc) return NULL;
    jobjectArray a = (*env)->NewObjectArray(env, (jsize)l->n, sc, NULL);
    for (size_t i = 0; a && i < l->n; i++) {
        size_t len = strlen(l->v[i].msg) + 32;
        char *line = malloc(len);
        if (!line) { throw_status(env, WISP_ENOMEM, "out of memory listing bad rows"); return NULL; }
        snprintf(line, len, "%zu\t%s", l->v[i].row, l->v[i].msg);
        jstring js = (*env)->NewStringUTF(env, line);
        free(line);
        if (!js) return NULL;
        (*env)->SetObjectArrayElement(env, a, (jsize)i, js);
        (*env)->DeleteLocalRef(env, js);
    }
    return a;
}

/* ---- CSR arrays: wisp_batch_from_csr --------------------------------------------------------------- */

/* The rows a batch lists as bad, with the engine's messages. */
static void list_bad(const wisp_batch *b, bad_list *bad)
{
    const size_t nb = wisp_batch_bad_count(b);
    for (size_t i = 0; i < nb; i++) {
        size_t row; uint64_t line; const char *m;
        if (wisp_batch_bad_row(b, i, &row, &line, &m) == WISP_OK) bad_add(bad, row, m);
    }
}

/* Java's int32 indptr and ids and float32 values (n_vals of them, or vals NULL) handed to
 * wisp_batch_from_csr with scipy's rules (WISP_CSR_STRICT: indptr from 0, never decreasing, ending at
 * n_ids), which checks them and reads them in place; the batch scored into out. */
static int score_arrays(wisp_session *s, size_t rows, const jint *indptr, size_t n_ids, const jint *ids, size_t n_vals,
                        const float *vals, float *out, bad_list *bad, char *msg, size_t msglen)
{
    if (vals && n_vals != n_ids) {
        snprintf(msg, msglen, "score: values has %zu entries but indices has %zu", n_vals, n_ids);
        return WISP_EINVAL;
    }
    wisp_batch *b = NULL;
    int st = wisp_batch_from_csr(engine, rows, indptr, WISP_CSR_INT32, ids, WISP_CSR_INT32, n_ids, vals,
                                 WISP_CSR_FLOAT32, WISP_CSR_STRICT, &b);
    if (st == WISP_OK) st = wisp_session_score(s, b, out);
    if (st != WISP_OK) copy_errmsg(msg, msglen, st);
    else list_bad(b, bad);
    wisp_batch_free(b);
    return st;
}

/* scoreArrays(s, indptr, indices, values or null, out) -> bad rows or null */
JNIEXPORT jobjectArray JNICALL Java_wisp_Native_scoreArrays(JNIEnv *env, jclass cls, jlong sh, jintArray jptr,
                                                            jintArray jidx, jfloatArray jval, jfloatArray jout)
{
    jsize np = (*env)->GetArrayLength(env, jptr);
    if (np < 1) { throw_status(env, WISP_EINVAL, "score: indptr is empty (it has rows + 1 entries)"); return NULL; }
    size_t rows = (size_t)np - 1;
    if ((size_t)(*env)->GetArrayLength(env, jout) < rows) {
        throw_status(env, WISP_EINVAL, "score: out is shorter than the rows");
        return NULL;
    }
    size_t n_ids = (size_t)(*env)->GetArrayLength(env, jidx);
    size_t n_vals = jval ? (size_t)(*env)->GetArrayLength(env, jval) : 0;
    bad_list bad = { 0 };
    char msg[1024] = "";
    int st;
    /* one critical region for the call: no JNI calls, no allocation of Java objects inside */
    jint *ptr = (*env)->GetPrimitiveArrayCritical(env, jptr, NULL);
    jint *ids = (*env)->GetPrimitiveArrayCritical(env, jidx, NULL);
    float *vals = jval ? (*env)->GetPrimitiveArrayCritical(env, jval, NULL) : NULL;
    float *out = (*env)->GetPrimitiveArrayCritical(env, jout, NULL);
    if (!ptr || !ids || (jval && !vals) || !out) {
        st = WISP_ENOMEM;
        snprintf(msg, sizeof msg, "score: the JVM could not give access to the arrays");
    } else {
        st = score_arrays(SESSION(sh), rows, ptr, n_ids, ids, n_vals, vals, out, &bad, msg, sizeof msg);
    }
    if (out) (*env)->ReleasePrimitiveArrayCritical(env, jout, out, st == WISP_OK ? 0 : JNI_ABORT);
    if (vals) (*env)->ReleasePrimitiveArrayCritical(env, jval, vals, JNI_ABORT);
    if (ids) (*env)->ReleasePrimitiveArrayCritical(env, jidx, ids, JNI_ABORT);
    if (ptr) (*env)->ReleasePrimitiveArrayCritical(env, jptr, ptr, JNI_ABORT);
    jobjectArray r = NULL;
    if (st != WISP_OK) throw_status(env, st, msg);
    else if (bad.oom) throw_status(env, WISP_ENOMEM, "out of memory listing bad rows");
    else r = bad_to_java(env, &bad);
    bad_free(&bad);
    return r;
}

/* The address of element `off` of a direct buffer of element size `esz`
 * holding at least `need` elements from there. */
static void *direct_at(JNIEnv *env, jobject buf, const char *what, jlong off, size_t esz, size_t need, char *msg,
                       size_t msglen)
{
    char *p = (*env)->GetDirectBufferAddress(env, buf);
    jlong cap = (*env)->GetDirectBufferCapacity(env, buf);
    if (!p || cap < 0) { snprintf(msg, msglen, "score: %s is not a direct buffer", what); return NULL; }
    if (off < 0 || (uint64_t)off + need > (uint64_t)cap) {
        snprintf(msg, msglen, "score: %s has %lld entries from its position, %zu needed", what,
                 (long long)(cap - off), need);
        return NULL;
    }
    return p + (size_t)off * esz;
}

/* scoreDirect(s, indptr, ptrOff, indices, idxOff, idxLen, values or null, valOff, valLen, rows, out[] or null,
 * outBuf or null, outOff): direct buffers, read in place; offsets and lengths in elements (a buffer's
 * position and remaining elements: indptr rows + 1 of them, indices and values exactly what indptr spans). */
JNIEXPORT jobjectArray JNICALL Java_wisp_Native_scoreDirect(JNIEnv *env, jclass cls, jlong sh, jobject jptr, jlong ptr_off,
                                                            jobject jidx, jlong idx_off, jlong idx_len, jobject jval,
                                                            jlong val_off, jlong val_len, jint jrows, jfloatArray jout,
                                                            jobject jout_buf, jlong out_off)
{
    char msg[1024] = "";
    size_t rows = (size_t)jrows;
    if (jrows < 0 || idx_len < 0 || val_len < 0) {
        throw_status(env, WISP_EINVAL, "score: rows or a length is negative");
        return NULL;
    }
    const jint *ptr = direct_at(env, jptr, "indptr", ptr_off, 4, rows + 1, msg, sizeof msg);
    if (!ptr) { throw_status(env, WISP_EINVAL, msg); return NULL; }
    const jint *ids = direct_at(env, jidx, "indices", idx_off, 4, (size_t)idx_len, msg, sizeof msg);
    if (!ids) { throw_status(env, WISP_EINVAL, msg); return NULL; }
    const float *vals = NULL;
    if (jval) {
        vals = direct_at(env, jval, "values", val_off, 4, (size_t)val_len, msg, sizeof msg);
        if (!vals) { throw_status(env, WISP_EINVAL, msg); return NULL; }
    }
    float *outb = NULL;
    if (jout_buf) {
        outb = direct_at(env, jout_buf, "out", out_off, 4, rows, msg, sizeof msg);
        if (!outb) { throw_status(env, WISP_EINVAL, msg); return NULL; }
    } else if ((size_t)(*env)->GetArrayLength(env, jout) < rows) {
        throw_status(env, WISP_EINVAL, "score: out is shorter than the rows");
        return NULL;
    }
    bad_list bad = { 0 };
    int st;
    float *out = outb ? outb : (*env)->GetPrimitiveArrayCritical(env, jout, NULL);
    if (!out) {
        st = WISP_ENOMEM;
        snprintf(msg, sizeof msg, "score: the JVM could not give access to out");
    } else {
        st = score_arrays(SESSION(sh), rows, ptr, (size_t)idx_len, ids, (size_t)val_len, vals, out, &bad, msg,
                          sizeof msg);
    }
    if (!outb && out) (*env)->ReleasePrimitiveArrayCritical(env, jout, out, st == WISP_OK ? 0 : JNI_ABORT);
    jobjectArray r = NULL;
    if (st != WISP_OK) throw_status(env, st, msg);
    else if (bad.oom) throw_status(env, WISP_ENOMEM, "out of memory listing bad rows");
    else r = bad_to_java(env, &bad);
    bad_free(&bad);
    return r;
}

/* ---- feature columns and raw batches ---------------------------------------------------------- */

#define COLUMNS(h) ((wisp_columns *)(uintptr_t)(h))
#define RAW(h) ((wisp_raw *)(uintptr_t)(h))

/* columnsNew(m) -> the model's description (0 and no exception when it has none) */
JNIEXPORT jlong JNICALL Java_wisp_Native_columnsNew(JNIEnv *env, jclass cls, jlong m)
{
    const char *text = wisp_model_columns(MODEL(m));
    if (!text || !text[0]) return 0;
    wisp_columns *c = NULL;
    int st = wisp_columns_from_model(MODEL(m), &c);
    if (st != WISP_OK) { throw_last(env, st); return 0; }
    return (jlong)(uintptr_t)c;
}
JNIEXPORT void JNICALL Java_wisp_Native_columnsFree(JNIEnv *env, jclass cls, jlong c) { wisp_columns_free(COLUMNS(c)); }

/* columnsInputs(c) -> String[] of "name\tinput type\tsparse" per input */
JNIEXPORT jobjectArray JNICALL Java_wisp_Native_columnsInputs(JNIEnv *env, jclass cls, jlong ch)
{
    wisp_columns *c = COLUMNS(ch);
    size_t n = wisp_columns_num_inputs(c);
    jclass sc = (*env)->FindClass(env, "java/lang/String");
    if (!sc) return NULL;
    jobjectArray a = (*env)->NewObjectArray(env, (jsize)n, sc, NULL);
    for (size_t i = 0; a && i < n; i++) {
        const char *name = wisp_columns_input_name(c, i);
        size_t len = strlen(name) + 16;
        char *line = malloc(len);
        if (!line) { throw_status(env, WISP_ENOMEM, "out of memory listing inputs"); return NULL; }
        snprintf(line, len, "%s\t%d\t%d", name, wisp_columns_input_dtype(c, i), wisp_columns_input_sparse(c, i));
        jstring js = (*env)->NewStringUTF(env, line);
        free(line);
        if (!js) return NULL;
        (*env)->SetObjectArrayElement(env, a, (jsize)i, js);
        (*env)->DeleteLocalRef(env, js);
    }
    return a;
}

JNIEXPORT jlong JNICALL Java_wisp_Native_rawNew(JNIEnv *env, jclass cls, jlong c)
{
    wisp_engine *e = get_engine(env, 0);
    if (!e) return 0;
    wisp_raw *r = NULL;
    int st = wisp_raw_new(e, COLUMNS(c), &r);
    if (st != WISP_OK) { throw_last(env, st); return 0; }
    return (jlong)(uintptr_t)r;
}
JNIEXPORT void JNICALL Java_wisp_Native_rawFree(JNIEnv *env, jclass cls, jlong r) { wisp_raw_free(RAW(r)); }

/* Value kinds of the flat encoding RawRows.java builds. */
enum { V_FLOAT = 0, V_INT = 1, V_STRING = 2 };

/* Fill r from the flat encoding: row i's values are [row_start[i], row_start[i+1]),
 * value k goes to input[k] (-1: the row is rejected with rejects[i]). */
static int raw_fill(wisp_raw *r, size_t rows, const jint *row_start, const jint *input, const jbyte *kind,
                    const jdouble *dv, const jlong *lv, const char *str, size_t str_len, const jint *str_off,
                    size_t nvalues, const char *const *rejects, char *msg, size_t msglen)
{
    wisp_raw_clear(r);
    for (size_t i = 0; i < rows; i++) {
        int st = wisp_raw_row_begin(r, i + 1);
        if (st != WISP_OK) goto fail;
        if (rejects && rejects[i]) {
            st = wisp_raw_row_reject(r, rejects[i]);
            if (st != WISP_OK) goto fail;
        } else {
            if (row_start[i] < 0 || row_start[i + 1] < row_start[i] || (size_t)row_start[i + 1] > nvalues) {
                snprintf(msg, msglen, "raw batch: bad encoding at row %zu", i);
                return WISP_EINVAL;
            }
            for (jint k = row_start[i]; k < row_start[i + 1]; k++) {
                switch (kind[k]) {
                case V_FLOAT: st = wisp_raw_add_float(r, (size_t)input[k], dv[k]); break;
                case V_INT: st = wisp_raw_add_int(r, (size_t)input[k], (int64_t)lv[k]); break;
                case V_STRING:
                    if (str_off[k] < 0 || str_off[k + 1] < str_off[k] || (size_t)str_off[k + 1] > str_len) {
                        snprintf(msg, msglen, "raw batch: bad string offsets at value %d", (int)k);
                        return WISP_EINVAL;
                    }
                    st = wisp_raw_add_string(r, (size_t)input[k], str + str_off[k], (size_t)(str_off[k + 1] - str_off[k]));
                    break;
                default:
                    snprintf(msg, msglen, "raw batch: unknown value kind %d", kind[k]);
                    return WISP_EINVAL;
                }
                if (st != WISP_OK) goto fail;
            }
        }
        st = wisp_raw_row_end(r);
        if (st != WISP_OK) goto fail;
        continue;
    fail:
        copy_errmsg(msg, msglen, st);
        return st;
    }
    return WISP_OK;
}

/* scoreRaw(s, raw, rows, rowStart[rows+1], input[], kind[], dv[], lv[], str[], strOff[], rejects[rows] or null, out)
 * -> bad rows or null */
JNIEXPORT jobjectArray JNICALL Java_wisp_Native_scoreRaw(JNIEnv *env, jclass cls, jlong sh, jlong rh, jint jrows,
                                                         jintArray jstart, jintArray jinput, jbyteArray jkind,
                                                         jdoubleArray jdv, jlongArray jlv, jbyteArray jstrs,
                                                         jintArray jstroff, jobjectArray jrejects, jfloatArray jout)
{
    size_t rows = jrows < 0 ? 0 : (size_t)jrows;
    if ((size_t)(*env)->GetArrayLength(env, jout) < rows || (size_t)(*env)->GetArrayLength(env, jstart) < rows + 1) {
        throw_status(env, WISP_EINVAL, "raw batch: arrays shorter than the rows");
        return NULL;
    }
    size_t nvalues = (size_t)(*env)->GetArrayLength(env, jkind);
    if ((size_t)(*env)->GetArrayLength(env, jinput) < nvalues || (size_t)(*env)->GetArrayLength(env, jdv) < nvalues ||
        (size_t)(*env)->GetArrayLength(env, jlv) < nvalues || (size_t)(*env)->GetArrayLength(env, jstroff) < nvalues + 1) {
        throw_status(env, WISP_EINVAL, "raw batch: value arrays of different lengths");
        return NULL;
    }
    size_t str_len = (size_t)(*env)->GetArrayLength(env, jstrs);
    /* the reject messages first (JNI calls: before any critical region) */
    const char **rejects = NULL;
    jstring *rej_js = NULL;
    if (jrejects) {
        rejects = calloc(rows ? rows : 1, sizeof *rejects);
        rej_js = calloc(rows ? rows : 1, sizeof *rej_js);
        if (!rejects || !rej_js) { free(rejects); free(rej_js); throw_status(env, WISP_ENOMEM, "out of memory"); return NULL; }
        for (size_t i = 0; i < rows; i++) {
            rej_js[i] = (*env)->GetObjectArrayElement(env, jrejects, (jsize)i);
            if (rej_js[i]) rejects[i] = (*env)->GetStringUTFChars(env, rej_js[i], NULL);
        }
    }
    char msg[1024] = "";
    bad_list bad = { 0 };
    int st;
    jint *start = (*env)->GetPrimitiveArrayCritical(env, jstart, NULL);
    jint *input = (*env)->GetPrimitiveArrayCritical(env, jinput, NULL);
    jbyte *kind = (*env)->GetPrimitiveArrayCritical(env, jkind, NULL);
    jdouble *dv = (*env)->GetPrimitiveArrayCritical(env, jdv, NULL);
    jlong *lv = (*env)->GetPrimitiveArrayCritical(env, jlv, NULL);
    jbyte *str = (*env)->GetPrimitiveArrayCritical(env, jstrs, NULL);
    jint *stroff = (*env)->GetPrimitiveArrayCritical(env, jstroff, NULL);
    float *out = (*env)->GetPrimitiveArrayCritical(env, jout, NULL);
    if (!start || !input || !kind || !dv || !lv || !str || !stroff || !out) {
        st = WISP_ENOMEM;
        snprintf(msg, sizeof msg, "raw batch: the JVM could not give access to the arrays");
    } else {
        wisp_raw *r = RAW(rh);
        st = raw_fill(r, rows, start, input, kind, dv, lv, (const char *)str, str_len, stroff, nvalues, rejects, msg,
                      sizeof msg);
        if (st == WISP_OK) {
            st = wisp_session_score_raw(SESSION(sh), r, out);
            if (st != WISP_OK) copy_errmsg(msg, sizeof msg, st);
        }
        if (st == WISP_OK) {
            size_t nb = wisp_raw_bad_count(r);
            for (size_t i = 0; i < nb; i++) {
                size_t row; uint64_t line; const char *m;
                if (wisp_raw_bad_row(r, i, &row, &line, &m) == WISP_OK) bad_add(&bad, row, m);
            }
            /* rows the transform refused are NaN too; name them when r did not */
            unsigned char *listed = calloc(rows ? rows : 1, 1);
            if (!listed) bad.oom = 1;
            for (size_t i = 0; listed && i < bad.n; i++)
                if (bad.v[i].row < rows) listed[bad.v[i].row] = 1;
            for (size_t i = 0; listed && i < rows; i++)
                if (isnan(out[i]) && !listed[i]) bad_add(&bad, i, "the transform refused this row");
            free(listed);
        }
    }
    if (out) (*env)->ReleasePrimitiveArrayCritical(env, jout, out, st == WISP_OK ? 0 : JNI_ABORT);
    if (stroff) (*env)->ReleasePrimitiveArrayCritical(env, jstroff, stroff, JNI_ABORT);
    if (str) (*env)->ReleasePrimitiveArrayCritical(env, jstrs, str, JNI_ABORT);
    if (lv) (*env)->ReleasePrimitiveArrayCritical(env, jlv, lv, JNI_ABORT);
    if (dv) (*env)->ReleasePrimitiveArrayCritical(env, jdv, dv, JNI_ABORT);
    if (kind) (*env)->ReleasePrimitiveArrayCritical(env, jkind, kind, JNI_ABORT);
    if (input) (*env)->ReleasePrimitiveArrayCritical(env, jinput, input, JNI_ABORT);
    if (start) (*env)->ReleasePrimitiveArrayCritical(env, jstart, start, JNI_ABORT);
    if (rejects) {
        for (size_t i = 0; i < rows; i++)
            if (rej_js[i]) {
                if (rejects[i]) (*env)->ReleaseStringUTFChars(env, rej_js[i], rejects[i]);
                (*env)->DeleteLocalRef(env, rej_js[i]);
            }
        free(rejects); free(rej_js);
    }
    jobjectArray res = NULL;
    if (st != WISP_OK) throw_status(env, st, msg);
    else if (bad.oom) throw_status(env, WISP_ENOMEM, "out of memory listing bad rows");
    else res = bad_to_java(env, &bad);
    bad_free(&bad);
    return res;
}
