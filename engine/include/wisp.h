/* wisp.h — the one public header of wisp, an inference engine for sparse
 * wide (logistic-regression) models on CPUs and CUDA GPUs.
 *
 * Read it top to bottom as a tour:
 *   1. status codes and error messages
 *   2. the engine (threads, devices, logging)
 *   3. models (.wisp files: load, inspect, write, convert, import)
 *   4. batches (CSR rows built from arrays, from caller buffers, from text)
 *   5. sessions (placement on a device, scoring, per-stage statistics)
 *
 * A worked example (error checks shortened):
 *
 *     wisp_engine *eng;  wisp_model *m;  wisp_batch *b;  wisp_session *s;
 *     wisp_engine_new(0, &eng);                          // 0 = one thread per core
 *     if (wisp_model_load(eng, "ctr.wisp", &m) != WISP_OK)
 *         fprintf(stderr, "%s\n", wisp_errmsg());         // "ctr.wisp: checksum mismatch in section 'weights'"
 *     wisp_batch_new(eng, &b);
 *     uint64_t ids[] = {3, 17, 4096};  float vals[] = {0.5f, 1.0f, 2.0f};
 *     wisp_batch_add_row(b, ids, vals, 3);               // a valued row
 *     wisp_batch_add_row(b, ids, NULL, 2);               // a binary row (every value 1.0)
 *     wisp_session_new(eng, m, "auto", &s);              // GPU when one is usable, else CPU
 *     float p[2];
 *     wisp_session_score(s, b, p);                       // p[i] = sigmoid(bias + sum w[id]*value)
 *     wisp_session_free(s); wisp_batch_free(b); wisp_model_free(m); wisp_engine_free(eng);
 *
 * Conventions, everywhere:
 * - Every handle is opaque. Freeing NULL is a harmless no-op.
 * - Functions that can fail return an int status: WISP_OK (0) or a negative
 *   WISP_E* code. On failure the calling thread's message, wisp_errmsg(),
 *   says what went wrong and where (file, line, section); nothing the
 *   caller owns was changed unless the function says otherwise.
 * - wisp never aborts the process and never longjmps: a library inside a
 *   web server must not take the server down.
 * - Threading: the engine and a loaded model may be shared by any number
 *   of threads. A batch or a session is used by one thread at a time.
 *   Each function below states its own rule where it differs.
 * - Models, batches and sessions keep their engine (and sessions their
 *   model) alive: free them in any order.
 */
#ifndef WISP_H
#define WISP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WISP_VERSION_MAJOR 0
#define WISP_VERSION_MINOR 1
#define WISP_VERSION_PATCH 0

/* "0.1.0". Thread-safe. */
const char *wisp_version(void);

/* ---------------------------------------------------------------------------
 * 1. Status codes and error messages
 * ------------------------------------------------------------------------- */

enum {
    WISP_OK        =   0,  /* success */
    WISP_EINVAL    =  -1,  /* a bad argument: NULL handle, unknown device name, bad dtype */
    WISP_ENOMEM    =  -2,  /* host memory allocation failed */
    WISP_EIO       =  -3,  /* a file could not be opened, read, written or mapped */
    WISP_EFORMAT   =  -4,  /* a malformed model file: bad magic, offsets, sizes, counts */
    WISP_ECHECKSUM =  -5,  /* a model file section does not match its checksum */
    WISP_EVERSION  =  -6,  /* a model file of a version this build cannot read */
    WISP_EPARSE    =  -7,  /* malformed input text; the message names the line */
    WISP_ELIMIT    =  -8,  /* a documented limit was exceeded (see WISP_MAX_*) */
    WISP_ENODEV    =  -9,  /* the requested device does not exist or is not usable */
    WISP_EDEVICE   = -10,  /* a device failed (out of memory, sticky CUDA error) */
    WISP_ESTATE    = -11   /* the call does not fit the object's state */
};

/* The calling thread's message for its last failed call ("" if none).
 * Valid until that thread's next wisp call. Thread-safe (thread-local). */
const char *wisp_errmsg(void);

/* A fixed one-line description of a status code, and its name ("WISP_EPARSE").
 * Thread-safe; the strings are static. */
const char *wisp_strerror(int status);
const char *wisp_err_name(int status);

/* Documented limits, enforced with WISP_ELIMIT. */
#define WISP_MAX_ROWS          (1u << 26)          /* rows in one batch */
#define WISP_MAX_NNZ           0xFFFFFFF0u          /* features in one batch (32-bit offsets) */
#define WISP_MAX_ROW_FEATURES  (1u << 20)          /* features in one row */
#define WISP_MAX_LINE_BYTES    (64u << 20)         /* bytes in one text line */
#define WISP_MAX_FEATURES      0xFFFFFFFEull        /* weights in a model (ids are 32-bit on the device) */
#define WISP_MAX_GPUS          16

/* ---------------------------------------------------------------------------
 * 2. The engine: a thread pool, the devices, logging
 * ------------------------------------------------------------------------- */

typedef struct wisp_engine wisp_engine;

/* Create an engine with `threads` CPU worker threads (0: one per online
 * core; the calling thread counts as one). CUDA is NOT initialised here:
 * devices are discovered on first use (wisp_engine_gpu_count, or a session
 * placed on a GPU), so an engine may be created before fork().
 * Thread-safe. On failure *out is NULL. */
int  wisp_engine_new(int threads, wisp_engine **out);

/* Drop the caller's reference; the engine is destroyed when models,
 * batches and sessions made from it are gone too. */
void wisp_engine_free(wisp_engine *eng);

/* CPU threads the engine scores with. */
int  wisp_engine_threads(const wisp_engine *eng);

/* Usable CUDA devices (discovers them on the first call; thread-safe).
 * 0 is a normal answer: no device, no driver, or a build without CUDA;
 * wisp_engine_gpu_status() then says which, in words. */
int  wisp_engine_gpu_count(wisp_engine *eng);
const char *wisp_engine_gpu_status(wisp_engine *eng);

/* Facts about GPU i (0 <= i < gpu count); NULL / 0 when i is out of range.
 * The name string lives as long as the engine. */
const char *wisp_engine_gpu_name(wisp_engine *eng, int i);
uint64_t    wisp_engine_gpu_memory(wisp_engine *eng, int i);      /* bytes */
int         wisp_engine_gpu_capability(wisp_engine *eng, int i);  /* 90 for sm_90 */
/* 1 while GPU i is usable, 0 once it failed (a sticky error marks it unusable). */
int         wisp_engine_gpu_usable(wisp_engine *eng, int i);

/* Log levels; messages at or above the engine's level go to stderr as
 * "wisp: <level>: <text>" (the default level is WISP_LOG_WARN).
 * The last warning or error is kept and readable with wisp_engine_last_log. */
enum { WISP_LOG_DEBUG = 0, WISP_LOG_INFO = 1, WISP_LOG_WARN = 2, WISP_LOG_ERROR = 3, WISP_LOG_OFF = 4 };
void wisp_engine_set_log_level(wisp_engine *eng, int level);
/* Copies the last warning or error into buf (NUL-terminated, truncated to
 * len); returns its full length, 0 when none. Thread-safe. */
size_t wisp_engine_last_log(wisp_engine *eng, char *buf, size_t len);

/* ---------------------------------------------------------------------------
 * 3. Models: .wisp files
 *
 * A .wisp file is little-endian: a 64-byte header (magic "WISPMDL\0",
 * version, section count), a table of 64-byte section entries, and the
 * sections, each 64-byte aligned and carrying an XXH64 checksum. Sections:
 * "meta" (key=value text lines), "weights" (the table, fp32, fp16 or int8
 * with a per-table scale), and "columns" (the feature-column description,
 * optional). The loader maps the file read-only (processes share one copy
 * in the page cache) and validates every offset, size, count and checksum
 * before the model is used: a model file is untrusted input.
 *
 * Scoring: p = sigmoid(bias + sum over the row's features of w[id] * value).
 * Ids >= num_features are ignored (as LIBLINEAR does) and counted.
 * ------------------------------------------------------------------------- */

typedef struct wisp_model wisp_model;

typedef enum { WISP_F32 = 0, WISP_F16 = 1, WISP_I8 = 2 } wisp_dtype;

/* "f32", "f16", "i8"; NULL for an unknown value. And back: -1 if unknown
 * (accepts "fp32", "float32", "fp16", "half", "int8" too). */
const char *wisp_dtype_name(int dtype);
int         wisp_dtype_parse(const char *name);

/* Map and validate a .wisp file. Thread-safe. On failure *out is NULL and
 * wisp_errmsg() names the file and what is wrong with it. */
int  wisp_model_load(wisp_engine *eng, const char *path, wisp_model **out);

/* Flags for wisp_model_load_ex. */
enum {
    /* Copy the weights into private memory backed by transparent huge
     * pages (fewer TLB misses on CPU gathers, at the cost of one private
     * copy per process instead of the shared page cache). */
    WISP_LOAD_HUGEPAGES = 1u << 0
};
int  wisp_model_load_ex(wisp_engine *eng, const char *path, unsigned flags, wisp_model **out);

/* Drop the caller's reference (sessions keep their own). */
void wisp_model_free(wisp_model *m);

/* Read-only accessors; thread-safe. */
uint64_t    wisp_model_num_features(const wisp_model *m);
double      wisp_model_bias(const wisp_model *m);
int         wisp_model_dtype(const wisp_model *m);
float       wisp_model_scale(const wisp_model *m);        /* int8 scale; 1 otherwise */
const char *wisp_model_path(const wisp_model *m);
uint64_t    wisp_model_file_size(const wisp_model *m);
/* Weight of feature id, dequantized; 0 for ids out of range. */
float       wisp_model_weight(const wisp_model *m, uint64_t id);
/* The value of a "meta" key (e.g. "source", "labels", "solver"), or NULL.
 * The string lives as long as the model. */
const char *wisp_model_meta(const wisp_model *m, const char *key);
/* The whole "meta" text and the "columns" text ("" when absent). */
const char *wisp_model_meta_text(const wisp_model *m);
const char *wisp_model_columns(const wisp_model *m);

/* Write a model file atomically (a temporary file next to `path`, fsync,
 * rename), so a reader never sees half a file. `weights` holds
 * num_features fp32 values, stored as `dtype` (fp16: round to nearest even;
 * int8: scale = max|w| / 127, w ~ scale * round(w / scale)). `meta` is
 * "key=value\n" lines (may be NULL); `columns` may be NULL. Thread-safe. */
int  wisp_model_write(const char *path, const float *weights, uint64_t num_features,
                      double bias, int dtype, const char *meta, const char *columns);

/* Write `m` again with another weight dtype (the meta and columns kept). */
int  wisp_model_convert(const wisp_model *m, const char *path, int dtype);

/* Import a LIBLINEAR model file (binary logistic regression: solvers
 * L2R_LR, L1R_LR, L2R_LR_DUAL; 1-based feature indices; the bias term
 * folded into the model bias) and write it as a .wisp file. Scores are the
 * probability of the first label of LIBLINEAR's "label" line. */
int  wisp_import_liblinear(const char *liblinear_path, const char *out_path, int dtype);

/* ---------------------------------------------------------------------------
 * 4. Batches: rows of sparse features in CSR form
 *
 * Layout (what wisp_batch_wrap takes, and what the builders produce):
 *   row_ptr[rows+1]  uint32: row r's features are ids[row_ptr[r] .. row_ptr[r+1])
 *   ids[nnz]         uint32 feature ids (an id >= 2^32 is stored as
 *                    0xFFFFFFFF, which is out of range of every model)
 *   val_ptr[rows+1]  uint32, optional: row r's first (val_ptr[r+1]-val_ptr[r])
 *                    features are valued, their values are
 *                    vals[val_ptr[r] ..]; the row's remaining features are
 *                    binary (value 1.0). Binary features ship no values.
 *   vals[]           float values.
 * Value modes: no vals at all (every feature binary); vals without val_ptr
 * (every feature valued: vals[k] belongs to ids[k]); both (mixed, above).
 *
 * Builders reuse their memory across wisp_batch_clear; when a GPU is in
 * use, the memory is pinned (page-locked) so one copy moves it.
 * Malformed text rows are kept as rows with no features, marked bad, and
 * scored as NaN; the bad rows are listed with their line numbers.
 * ------------------------------------------------------------------------- */

typedef struct wisp_batch wisp_batch;

/* An empty, growable batch. */
int    wisp_batch_new(wisp_engine *eng, wisp_batch **out);
void   wisp_batch_free(wisp_batch *b);
/* Forget the rows, keep the memory. Not allowed on a wrapped batch. */
void   wisp_batch_clear(wisp_batch *b);

/* Append one row of n features; vals == NULL means every feature binary.
 * On failure (WISP_ELIMIT, WISP_ENOMEM) the batch is unchanged. */
int    wisp_batch_add_row(wisp_batch *b, const uint64_t *ids, const float *vals, size_t n);
/* Append one row with nv valued features and nb binary ones. */
int    wisp_batch_add_row_mixed(wisp_batch *b, const uint64_t *vids, const float *vals, size_t nv,
                                const uint64_t *bids, size_t nb);

/* A batch over caller memory, without copies: the arrays must stay valid
 * and unchanged while the batch is used. val_ptr and/or vals may be NULL
 * (see the value modes above). The arrays are checked (row_ptr monotone,
 * within limits) here, once. */
int    wisp_batch_wrap(wisp_engine *eng, size_t rows, const uint32_t *row_ptr, const uint32_t *ids,
                       const uint32_t *val_ptr, const float *vals, wisp_batch **out);

/* Parse libsvm-format text and append its rows: "[label] id:value id:value
 * ... [# comment]", ids decimal, values decimal floats; a bare "id" (no
 * ":value") after the label is a binary feature; the label is ignored;
 * blank lines and lines starting with '#' are skipped (no row).
 *
 * Parses whole lines from text[0..len) until `max_rows` rows were added
 * (0: no limit) or the text ends. The last line is parsed without its
 * '\n' only if `final` is non-zero; otherwise it is left for the next
 * call. *consumed (may be NULL) is the number of bytes used; *line_no
 * (may be NULL) counts lines: pass the number of lines before `text`, it
 * is advanced past the lines consumed.
 *
 * A malformed line does not fail the call: it becomes a bad row (see
 * wisp_batch_bad_row) and parsing goes on. Returns WISP_OK, or
 * WISP_ENOMEM / WISP_ELIMIT with the batch holding the rows added before. */
int    wisp_batch_parse_libsvm(wisp_batch *b, const char *text, size_t len, int final,
                               size_t max_rows, uint64_t *line_no, size_t *consumed);

size_t wisp_batch_rows(const wisp_batch *b);
size_t wisp_batch_nnz(const wisp_batch *b);
/* Number of valued features (those that carry a value). */
size_t wisp_batch_nvals(const wisp_batch *b);

/* Bad rows: how many, and the i-th (its row index, input line number and
 * message, valid until the batch changes). Returns WISP_EINVAL if i is out
 * of range. */
size_t wisp_batch_bad_count(const wisp_batch *b);
int    wisp_batch_bad_row(const wisp_batch *b, size_t i, size_t *row, uint64_t *line, const char **msg);

/* Read access to the CSR arrays (NULL where a mode has none); valid until
 * the batch changes. */
const uint32_t *wisp_batch_row_ptr(const wisp_batch *b);
const uint32_t *wisp_batch_ids(const wisp_batch *b);
const uint32_t *wisp_batch_val_ptr(const wisp_batch *b);
const float    *wisp_batch_vals(const wisp_batch *b);

/* ---------------------------------------------------------------------------
 * 5. Sessions: placement, scoring and statistics
 *
 * Device names: "cpu"; "gpu" (= "gpu:0"); "gpu:N"; "gpus" (every usable
 * GPU, the batch split across them); "auto" (every usable GPU if any, else
 * the CPU). A session placed on a GPU falls back to the CPU, logs why and
 * counts it, when the device is absent, out of memory or failed.
 * ------------------------------------------------------------------------- */

typedef struct wisp_session wisp_session;

int  wisp_session_new(wisp_engine *eng, wisp_model *m, const char *device, wisp_session **out);
void wisp_session_free(wisp_session *s);

/* Place the session on another device; takes effect on the next batch. */
int  wisp_session_set_device(wisp_session *s, const char *device);
/* The device asked for, and the device that scored the last batch
 * ("cpu", "gpu:0", "gpus:2"...). Valid until the next call on s. */
const char *wisp_session_device(const wisp_session *s);
const char *wisp_session_last_device(const wisp_session *s);

/* Score every row of b into out[0 .. rows): out[r] = sigmoid(bias + sum
 * w[id] * value); NaN for bad rows. Blocking. The result does not depend
 * on the number of threads. */
int  wisp_session_score(wisp_session *s, const wisp_batch *b, float *out);

/* Statistics, summed over the session's batches since the last reset.
 * Times are nanoseconds of wall time per stage. */
enum {
    WISP_STAT_BATCHES = 0,     /* batches scored */
    WISP_STAT_ROWS,            /* rows scored */
    WISP_STAT_NNZ,             /* features looked up */
    WISP_STAT_OUT_OF_RANGE,    /* ids >= num_features, ignored */
    WISP_STAT_BAD_ROWS,        /* rows scored as NaN because their input was malformed */
    WISP_STAT_FALLBACKS,       /* batches moved from a GPU to the CPU */
    WISP_STAT_NS_PARSE,        /* text -> batch (counted by callers that parse through the session) */
    WISP_STAT_NS_TRANSFORM,    /* raw columns -> features */
    WISP_STAT_NS_H2D,          /* host -> device copies */
    WISP_STAT_NS_KERNEL,       /* scoring work on the device (CPU gather+sum on "cpu") */
    WISP_STAT_NS_D2H,          /* device -> host copies */
    WISP_STAT_NS_SYNC,         /* waiting for the device */
    WISP_STAT_NS_OVERHEAD,     /* the engine's own bookkeeping */
    WISP_STAT_NS_TOTAL,        /* wall time inside wisp_session_score */
    WISP_STAT_BYTES_H2D,
    WISP_STAT_BYTES_D2H,
    WISP_STAT_COUNT
};
uint64_t    wisp_session_stat(const wisp_session *s, int which);
/* "batches", "rows", "nnz", "out_of_range", "bad_rows", "fallbacks",
 * "ns_parse", ... ; NULL when which is out of range. */
const char *wisp_stat_name(int which);
void        wisp_session_reset_stats(wisp_session *s);
/* Add to a stage counter (for callers that time their own stages, e.g. parse). */
void        wisp_session_add_stat(wisp_session *s, int which, uint64_t amount);

#ifdef __cplusplus
}
#endif
#endif /* WISP_H */
