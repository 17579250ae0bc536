/* wisp.h — the one public header of wisp, an inference engine for sparse
 * wide (logistic-regression) models on CPUs and CUDA GPUs.
 *
 * Read it top to bottom as a tour:
 *   1. status codes and error messages
 *   2. the engine (threads, devices, logging)
 *   3. models (.wisp files: load, inspect, write, convert, import)
 *   4. batches (CSR rows built from arrays, from caller buffers, from text)
 *   5. sessions (placement on a device, scoring, per-stage statistics)
 *   6. feature columns and the transform (raw rows -> features, exact to TensorFlow)
 *   7. Vowpal Wabbit (its hashing, text format and models)
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
 *
 * Glossary (the same words in C, Lua, Python, Java, C++, the CLI, the
 * service and the README):
 *   batch        rows of feature ids (and values), ready to score (wisp_batch).
 *   indptr, ids, values
 *                a batch's CSR arrays: row r's features are ids[indptr[r] ..
 *                indptr[r + 1]), with values[k] the value of ids[k] (scipy's
 *                words; scipy calls the ids `indices`, and the Python package
 *                takes them under that name). wisp_batch_from_csr is the one
 *                checked way in for every binding.
 *   bad row      a row that cannot be scored as given (a malformed line, a
 *                negative id, a value that is not finite, a row a transform
 *                refuses): answered NaN, with a message, and never changing
 *                another row's answer. Listed as "bad rows" everywhere:
 *                wisp_batch_bad_row / wisp_session_bad_row here, :bad_rows()
 *                in Lua, Session.bad_rows in Python, badRows() in Java,
 *                "bad_rows" in the service's v1 and v2 answers, "bad rows" in
 *                the CLI's --stats.
 *   raw batch    rows of raw column inputs not yet transformed (wisp_raw);
 *                scoring one is "score raw" (wisp_session_score_raw,
 *                score_raw in Lua and Python, scoreRaw in Java).
 *   column description (short: description)
 *                the JSON in a model that says how raw inputs become ids:
 *                hashed, bucketized, crossed (wisp_columns; grammar in
 *                engine/COLUMNS.md). "schema" is only a CSV/TSV header mapping.
 *   node         one node of the description's graph (a column); never a
 *                pipeline stage.
 *   parse, transform, score
 *                the pipeline's three stages: text -> batch or raw batch,
 *                raw batch -> batch, batch -> probabilities. Placement puts
 *                each stage on a device.
 *   device       "cpu", "gpu", "gpu:N", "gpus" or "auto": one grammar,
 *                parsed once in C (wisp_device_parse), used by every binding.
 *   dtype        how a model stores its weights (f32, f16, int8).
 *   input type   the type of a column input (WISP_INPUT_*); never "dtype".
 *   session      one model placed on a device; scores batches.
 *   v1, v2       the service's two HTTP protocols: v1 (TensorFlow Serving's
 *                REST shape, /v1/models/NAME:predict) and v2 (the Open
 *                Inference Protocol of KServe and Triton, /v2/models/NAME/infer);
 *                "v2" is the one short name in code, folders and documents.
 * Names: public functions are wisp_<object>_<verb>. Internal functions with
 * external linkage are wisp__<subsystem>_<verb> (two underscores, as libuv's
 * uv__: wisp__batch_mark_bad, wisp__pool_run, wisp__cuda_score), declared in
 * their subsystem's private header (engine/SUBSYSTEM/NAME.h); the core's
 * error and allocation helpers, which every subsystem calls, are
 * wisp__fail, wisp__malloc, wisp__free, ... (as uv__malloc). Test and
 * benchmark hooks are declared in engine/core/wisp_test.h.
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

/* Run fn(ctx, task) once for each task in [0, ntasks) on the engine's CPU
 * threads (the calling thread works too) and return when all are done: the
 * pool the engine scores with, so a caller that splits its own work (the
 * CLI parses and scores pieces of a file this way) does not start threads
 * that compete with it. Callers from several threads are served one job at
 * a time; a task that calls wisp_engine_run (or scores on the CPU) on the
 * same engine runs that inner work on its own thread. Tasks must not fail
 * the call: each reports its own result through ctx. WISP_EINVAL for a NULL
 * eng or fn (nothing run). */
typedef void (*wisp_task_fn)(void *ctx, size_t task);
int  wisp_engine_run(wisp_engine *eng, size_t ntasks, wisp_task_fn fn, void *ctx);

/* Usable CUDA devices (discovers them on the first call; thread-safe).
 * 0 is a normal answer: no device, no driver, or a build without CUDA;
 * wisp_engine_gpu_status() then says which, in words. */
int  wisp_engine_gpu_count(wisp_engine *eng);
const char *wisp_engine_gpu_status(wisp_engine *eng);
/* 1 while an "auto" session's background bring-up of the GPUs is still running
 * (engine/score/autoplace.c); wisp_engine_free waits for it. A process about to exit
 * may skip that wait by ending without freeing the engine (the CLI does). */
int  wisp_engine_gpu_starting(wisp_engine *eng);

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

/* Whether the arrays a batch allocates for itself (wisp_batch_new and its
 * builders) are pinned while the engine has a usable GPU (on, the default:
 * a GPU session ships such a batch with one DMA) or plain memory (off:
 * cheaper to grow when many threads build batches at once; the CLI turns
 * it off). WISP_BATCH_PINNED=0 or 1 sets the default. Takes effect for
 * memory allocated afterwards. Thread-safe. */
void wisp_engine_set_pinned_batches(wisp_engine *eng, int on);

/* Host memory for batch arrays (wisp_batch_wrap, raw batches): `bytes`
 * bytes, 64-byte aligned, in *out. Page-locked (pinned) when the engine has
 * a usable GPU (devices are discovered first, as wisp_engine_gpu_count
 * does), so a GPU session copies a batch in it with one DMA and no staging
 * copy; without a GPU, or once the pinned budget (WISP_PINNED_MAX_MB) is
 * spent, plain memory, equally valid: wisp_engine_host_pinned says which.
 * 0 bytes gives a valid block of its own. The caller owns the block and
 * frees it with wisp_engine_host_free on the same engine, while the engine
 * lives (before its last reference is dropped); not with free(). Thread-
 * safe: any thread may allocate or free. Fails with WISP_EINVAL (eng or out
 * NULL) or WISP_ENOMEM (a size no memory holds), *out NULL and
 * wisp_errmsg() saying which. */
int  wisp_engine_host_alloc(wisp_engine *eng, size_t bytes, void **out);
/* Free a block from wisp_engine_host_alloc; p == NULL (or eng == NULL) does nothing. */
void wisp_engine_host_free(wisp_engine *eng, void *p);
/* 1 if p, a block from wisp_engine_host_alloc on eng, is page-locked; 0 if
 * plain memory (or p or eng is NULL). */
int  wisp_engine_host_pinned(const wisp_engine *eng, const void *p);

/* The identity of the file at `path` now (stat(2), following symbolic links),
 * the fields wisp_model_file_changed compares with the load's: out[0] the
 * device, out[1] the inode (both their unsigned bits), out[2] the size in
 * bytes, out[3] the mtime and out[4] the ctime in nanoseconds since the
 * epoch, out[5] 1 for a directory and 0 otherwise. Six integers rather than
 * a struct so that callers which declare no struct layouts (the Lua layer)
 * read them. Thread-safe; one stat() call. Fails with WISP_EINVAL (path or
 * out NULL) or WISP_EIO (missing, a dangling link, no permission: "PATH:
 * cannot stat: No such file or directory" in wisp_errmsg()); out is then
 * unchanged. */
int  wisp_file_id_read(const char *path, int64_t out[6]);

/* The names in directory `path`, without "." and "..", in readdir(3)'s
 * order, each followed by a NUL byte, written into buf while whole names
 * fit in its cap bytes; *len receives the bytes all of them take. *len >
 * cap: buf holds only the names that fit; call again with *len bytes (or
 * more: the directory may have grown). Thread-safe. Fails with WISP_EINVAL
 * (path or len NULL, or buf NULL with cap > 0) or WISP_EIO (the directory
 * cannot be opened or read, wisp_errmsg() saying why), *len then 0. */
int  wisp_dir_list(const char *path, char *buf, size_t cap, size_t *len);

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

/* Read and validate a .wisp file. Thread-safe. The whole file is read into
 * private read-only memory and validated there; the model serves only that
 * copy, never the file again, so changing the file afterwards (rename over it,
 * cp over it in place, truncate, corrupt) cannot change or crash what a loaded
 * model answers. A file that changes while it is being read is refused
 * ("changed while being read" / "changed while loading"). Memory: one private
 * copy of the file per process (no page-cache sharing). On failure *out is
 * NULL and wisp_errmsg() names the file and what is wrong with it. */
int  wisp_model_load(wisp_engine *eng, const char *path, wisp_model **out);

/* Flags for wisp_model_load_ex. */
enum {
    /* Ask for transparent huge pages for the private copy even below
     * 2 MiB (at 2 MiB and above they are always asked for). Kept for
     * compatibility: every load is private now. */
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
uint64_t    wisp_model_file_size(const wisp_model *m);   /* bytes read and verified */

/* Whether the file at the model's path is still the one loaded (same device,
 * inode, size, mtime and ctime as at the load). Returns 0 when it is, 1 when
 * it changed, with `why` (may be NULL; truncated to why_len) saying how: the
 * path, then "replaced (another file, e.g. renamed over it)", "rewritten in
 * place", "truncated in place", "changed in place" or "removed". The model
 * itself is unaffected either way (it holds the bytes it verified). A
 * negative status when the path cannot be examined (wisp_errmsg() says why).
 * Thread-safe; one stat() call. */
int         wisp_model_file_changed(const wisp_model *m, char *why, size_t why_len);
/* Weight of feature id, dequantized; 0 for ids out of range. */
float       wisp_model_weight(const wisp_model *m, uint64_t id);
/* The value of a "meta" key (e.g. "source", "labels", "solver"), or NULL.
 * The string lives as long as the model. */
const char *wisp_model_meta(const wisp_model *m, const char *key);
/* The whole "meta" text and the "columns" text ("" when absent). */
const char *wisp_model_meta_text(const wisp_model *m);
const char *wisp_model_columns(const wisp_model *m);

/* Write a model file atomically (a temporary file next to `path`, fsync,
 * rename), so a reader never sees half a file. A symbolic link at `path`
 * is kept: the file it names is replaced. A character device or a FIFO at
 * `path` (/dev/stdout, a named pipe) is written directly, in order, without
 * a rename. A directory, a socket or a block device is refused (WISP_EINVAL)
 * before anything is written; every failed or short write, fsync or close is
 * WISP_EIO and leaves no temporary file behind. `weights` holds
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

/* Import an ONNX-ML model (one LinearClassifier, binary, post_transform
 * LOGISTIC or NONE; or one LinearRegressor with one target, the score then
 * sigmoid(w.x + b)), as skl2onnx writes it, as a .wisp file: column j of
 * the ONNX input is feature id j, the score is sigmoid(class 1's score),
 * ONNX Runtime's probabilities[:, 1] under LOGISTIC. Anything else (other
 * nodes than Cast/ZipMap/Identity after the linear one, a preprocessing
 * node before it, more classes, SOFTMAX/PROBIT) is refused with
 * WISP_EPARSE naming the reason; the rules are at the top of
 * engine/model/import_onnx.c. The _memory form reads a serialized ModelProto. */
int  wisp_import_onnx(const char *onnx_path, const char *out_path, int dtype);
int  wisp_import_onnx_memory(const void *data, size_t len, const char *out_path, int dtype);

/* ---------------------------------------------------------------------------
 * 4. Batches: rows of sparse features in CSR form
 *
 * Layout (what wisp_batch_wrap takes, and what the builders produce):
 *   indptr[rows+1]  uint32: row r's features are ids[indptr[r] .. indptr[r+1])
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
 *
 * Values, one rule for every input path (builders, wrap, libsvm, VW, the
 * Lua layer, the service; with feature columns, every numeric column's
 * value: see wisp_raw_set_schema): a value that is not a finite
 * float32 (NaN, +-inf, or a number whose float32 rounding overflows: 1e39,
 * 3.4028236e38; FLT_MAX itself, subnormals and values that underflow to 0
 * are kept) makes THAT row bad, with a message naming the feature and the
 * value; the other rows are unaffected, and the call still returns WISP_OK
 * (a bad value is data, not a caller mistake). The builders add the row
 * empty, as a bad row; wisp_batch_wrap scans the caller's values once (no
 * copy) and lists such rows as bad (they keep their features; every device
 * answers them NaN).
 * ------------------------------------------------------------------------- */

typedef struct wisp_batch wisp_batch;

/* An empty, growable batch. */
int    wisp_batch_new(wisp_engine *eng, wisp_batch **out);
void   wisp_batch_free(wisp_batch *b);
/* Forget the rows, keep the memory. Not allowed on a wrapped batch. */
void   wisp_batch_clear(wisp_batch *b);

/* Append one row of n features; vals == NULL means every feature binary.
 * A value that is not finite makes the row a bad row (see Values above):
 * WISP_OK. On failure (WISP_ELIMIT, WISP_ENOMEM) the batch is unchanged. */
int    wisp_batch_add_row(wisp_batch *b, const uint64_t *ids, const float *vals, size_t n);
/* Append one row with nv valued features and nb binary ones. */
int    wisp_batch_add_row_mixed(wisp_batch *b, const uint64_t *vids, const float *vals, size_t nv,
                                const uint64_t *bids, size_t nb);

/* A batch over caller memory, without copies: the arrays must stay valid
 * and unchanged while the batch is used. val_ptr and/or vals may be NULL
 * (see the value modes above). The arrays are checked (indptr monotone,
 * within limits) here, once, and the values are read once (see Values:
 * a row holding a value that is not finite is listed bad); ids are not read. */
int    wisp_batch_wrap(wisp_engine *eng, size_t rows, const uint32_t *indptr, const uint32_t *ids,
                       const uint32_t *val_ptr, const float *vals, wisp_batch **out);

/* CSR arrays as a binding holds them (numpy/scipy, Java arrays and direct buffers, Arrow, a
 * decoded JSON tensor), checked once, into a batch: the one way in for every binding.
 *   indptr    rows + 1 entries of indptr_type (WISP_CSR_INT32, _INT64 or _UINT32): row r's
 *             features are ids[indptr[r] .. indptr[r + 1]); NULL only for 0 rows
 *   ids       nnz feature ids of id_type (WISP_CSR_INT32, _INT64, _UINT32 or _UINT64); NULL
 *             only when nnz is 0
 *   nnz       the length of ids (and of values): nothing past it is read
 *   values    nnz values of value_type (WISP_CSR_FLOAT32 or _FLOAT64), values[k] for ids[k];
 *             or NULL: every feature binary (value_type is then not looked at)
 *   flags     0 or WISP_CSR_STRICT
 * Arrays need no alignment (an unaligned one is read, and copied).
 *
 * Memory: each array that already is the engine's layout (indptr int32/uint32 with
 * indptr[0] == 0, ids int32/uint32, values float32, naturally aligned) is used in place, no
 * copy (wisp_batch_indptr/_ids/_vals point into it); the others are converted into memory
 * the batch holds (indptr rebased to 0, ids to uint32, float64 values rounded to float32).
 * Either way the caller keeps its arrays alive and unchanged until wisp_batch_free. The batch
 * is a wrapped one: it cannot grow (wisp_batch_add_row: WISP_ESTATE; wisp_batch_clear: nothing).
 *
 * Bad rows (the call returns WISP_OK; the row is listed by wisp_batch_bad_row with one
 * message and answered NaN by every device; the other rows are untouched):
 *   a negative id (int32 or int64 ids): "feature #2: a negative feature index (-1)";
 *   a value that is not a finite float32 (NaN, +-inf, a float64 beyond float32's range):
 *     wisp_batch_wrap's message, "feature #2 (id 7): value inf is not a finite float32";
 *   a row with more than WISP_MAX_ROW_FEATURES features: "N features, more than
 *     WISP_MAX_ROW_FEATURES (1048576)", the row scored empty;
 *   without WISP_CSR_STRICT, a row whose range is not ordered inside [0, nnz] (indptr
 *     decreasing there, past the end, negative): "indptr[3] .. indptr[4] = 5 .. 2 is not a
 *     range inside [0, 9] (the ids' length)", the row scored empty. indptr[0] > 0 is a slice
 *     (the ids before it are not read); so are ids after indptr[rows].
 * A row is listed once, with its first bad entry. Ids >= 2^32 (int64/uint64) are out of range
 * of every model (stored as 0xFFFFFFFF): ignored and counted (WISP_STAT_OUT_OF_RANGE), not bad.
 * The ids are read in one pass, 16 at a time without a branch, with the values.
 *
 * WISP_CSR_STRICT: scipy's rules for indptr, as call failures (WISP_EINVAL, nothing made, *out
 * NULL, the message naming the arrays): indptr[0] != 0 ("indptr[0] = 1, must be 0"), indptr
 * decreasing ("indptr decreases at row 1 (indptr[2] = 2 < indptr[1] = 3)"), indptr[rows] !=
 * nnz ("indptr[-1] = 9 but indices has 3 entries"). The Python and Java packages use it; the
 * service's v2 tensors do not (client data: one bad row never changes another row's answer).
 *
 * Failures (nothing made, *out NULL): WISP_EINVAL for a NULL eng or out, a NULL indptr or
 * ids where entries are due, an unknown type or flag; WISP_ELIMIT for rows > WISP_MAX_ROWS or
 * nnz > WISP_MAX_NNZ (or, without STRICT, overlapping rows holding more than WISP_MAX_NNZ
 * features in all); WISP_ENOMEM. Thread-safe (the caller's arrays are only read). */
enum { WISP_CSR_INT32 = 1, WISP_CSR_INT64, WISP_CSR_UINT32, WISP_CSR_UINT64, WISP_CSR_FLOAT32, WISP_CSR_FLOAT64 };
enum { WISP_CSR_STRICT = 1u << 0 };
int    wisp_batch_from_csr(wisp_engine *eng, size_t rows, const void *indptr, int indptr_type, const void *ids,
                           int id_type, size_t nnz, const void *values, int value_type, unsigned flags,
                           wisp_batch **out);

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
const uint32_t *wisp_batch_indptr(const wisp_batch *b);
const uint32_t *wisp_batch_ids(const wisp_batch *b);
const uint32_t *wisp_batch_val_ptr(const wisp_batch *b);
const float    *wisp_batch_vals(const wisp_batch *b);
/* An alias of wisp_batch_indptr (its earlier name), kept through 0.1.x and removed in 0.2. */
const uint32_t *wisp_batch_row_ptr(const wisp_batch *b);

/* ---------------------------------------------------------------------------
 * 5. Sessions: placement, scoring and statistics
 *
 * Device names: "cpu"; "gpu" (= "gpu:0"); "gpu:N"; "gpus" (every usable
 * GPU, the batch split across them); "gpus:N" (the first N GPUs); "auto"
 * (the default: the CPU while the GPUs start in the background, then, batch
 * by batch, the GPUs for a batch large enough to be faster there and the CPU
 * for the others, by a crossover calibrated on the model; the CPU when no GPU
 * is usable: engine/score/autoplace.c, wisp_session_auto_state). A session placed
 * on a GPU falls back to the CPU, logs why and counts it, when the device is
 * absent, out of memory or failed.
 * Batches are scored one call at a time (wisp_session_score) or as a
 * stream (wisp_session_submit / wisp_session_wait, double-buffered).
 * ------------------------------------------------------------------------- */

/* The device grammar, parsed in one place for every caller (sessions, the Lua
 * placement layer, the CLI, the service): checks a name's spelling only, not
 * whether the machine has that GPU (wisp_session_new says that). On WISP_OK
 * *kind is a WISP_DEVICE_* and *n the N of "gpu:N" or "gpus:N" (0 for "gpu",
 * and for "gpus", meaning every GPU); either pointer may be NULL. On
 * WISP_EINVAL (empty, too long, unknown, N out of range) wisp_errmsg() says
 * why, in the words session creation uses. Thread-safe, no engine needed. */
enum {
    WISP_DEVICE_CPU  = 0,   /* "cpu" */
    WISP_DEVICE_GPU  = 1,   /* "gpu", "gpu:N" */
    WISP_DEVICE_GPUS = 2,   /* "gpus", "gpus:N" */
    WISP_DEVICE_AUTO = 3,   /* "auto" */
};
int  wisp_device_parse(const char *device, int *kind, int *n);

typedef struct wisp_session wisp_session;

int  wisp_session_new(wisp_engine *eng, wisp_model *m, const char *device, wisp_session **out);
void wisp_session_free(wisp_session *s);

/* Place the session on another device; takes effect on the next batch. */
int  wisp_session_set_device(wisp_session *s, const char *device);
/* The device asked for, and the device that scored the last batch
 * ("cpu", "gpu:0", "gpus:2"...). Valid until the next call on s. */
const char *wisp_session_device(const wisp_session *s);
const char *wisp_session_last_device(const wisp_session *s);

/* Where an "auto" session stands: WISP_AUTO_STARTING while the GPUs are still
 * being brought up and the model calibrated (its batches go to the CPU
 * meanwhile), WISP_AUTO_CPU when no GPU is usable or none was faster at any
 * calibrated size, WISP_AUTO_ROUTING when a batch with at least *min_nnz_one
 * nonzeros (scored from a task of the engine's pool, such as the CLI's) or
 * *min_nnz_pool (from any other thread) goes to the GPUs; WISP_AUTO_FIXED for
 * a session placed on a named device. The minima are UINT64_MAX when unknown
 * or never; either pointer may be NULL. WISP_AUTO_MIN_NNZ=N fixes both at N,
 * WISP_AUTO_WAIT=1 makes the first auto session wait for the bring-up. */
enum { WISP_AUTO_FIXED = 0, WISP_AUTO_STARTING = 1, WISP_AUTO_CPU = 2, WISP_AUTO_ROUTING = 3 };
int  wisp_session_auto_state(wisp_session *s, uint64_t *min_nnz_one, uint64_t *min_nnz_pool);

/* The "auto" calibration of s's model as measured (any session of the model): the
 * probes of 1, 2, 4 ... 16384 rows of 39 features (13 valued), and for probe k
 * rows[k] and, three doubles each, the median, first and third quartile in ms of
 * a call of the CPU on one thread (cpu_one[3k ..]), of the CPU's pool (cpu_pool,
 * estimated from cpu_one) and of the GPUs (gpus), over interleaved passes. At most
 * cap probes are written; *n is the number measured (0 when nothing was: no GPU
 * answered, or WISP_AUTO_MIN_NNZ fixed the crossover). Any output may be NULL.
 * The crossover wisp_session_auto_state reports is wisp_placement_choose's last
 * break from the CPU to the GPUs over these points (cpu_one or cpu_pool against
 * gpus), times 39. WISP_ESTATE while the model is not calibrated yet (its first
 * "auto" session calibrates it once the GPUs are up). Thread-safe. */
int  wisp_session_auto_points(wisp_session *s, size_t cap, size_t *n, uint64_t *rows, double *cpu_one,
                              double *cpu_pool, double *gpus);

/* The CPU/GPU crossover's one rule (engine/score/autoplace.c, which also calibrates
 * the "auto" device with it; Lua's wisp.calibrate, policy:check() and a pipeline's
 * live re-check call the same three functions). Pure functions: thread-safe, no
 * engine needed; on WISP_EINVAL (a NULL array, no points, a time that is negative,
 * NaN or infinite, lo > median or median > hi, sizes not increasing) wisp_errmsg()
 * says which.
 *
 * wisp_placement_summarize: n timed passes (any unit) -> q[0..4] = minimum, first
 * quartile (lo), median, third quartile (hi), maximum; quantiles linear between
 * order statistics. A measured point keeps the median and (lo, hi), its band.
 *
 * wisp_placement_acceptable: one point of ndevices devices (ms[k], lo[k], hi[k];
 * lo and hi may be NULL: no spread, lo = hi = ms). *fastest = the device of the
 * smallest median (ties: the first), acceptable[k] = 1 when device k's band reaches
 * the fastest's (lo[k] <= hi[fastest]: slower by no more than the two devices'
 * spread), else 0. Returns how many are acceptable (>= 1), or a negative status.
 * Either output may be NULL.
 *
 * wisp_placement_choose: npoints measured sizes rows[i] (increasing), with
 * ms/lo/hi[i * ndevices + k] the times of device k at rows[i] (lo, hi may be
 * NULL). chosen[i] = the device for rows[i]: every size gets an acceptable device,
 * with the fewest switches, then the least total relative excess over the fastest
 * median (ties: the first device). breaks[i] (i < npoints - 1; breaks may be NULL)
 * = the first row count of chosen[i + 1] when it differs from chosen[i] (where the
 * two medians, linear between rows[i] and rows[i + 1], cross, else their geometric
 * middle; kept in rows[i] + 1 .. rows[i + 1]), 0 where the choice does not change.
 * Below rows[0] chosen[0] holds; above the last size, the last choice. */
int  wisp_placement_summarize(const double *passes, size_t n, double *q);
int  wisp_placement_acceptable(size_t ndevices, const double *ms, const double *lo, const double *hi,
                               int *fastest, int *acceptable);
int  wisp_placement_choose(size_t npoints, size_t ndevices, const uint64_t *rows, const double *ms,
                           const double *lo, const double *hi, int *chosen, uint64_t *breaks);

/* Score every row of b into out[0 .. rows): out[r] = sigmoid(bias + sum
 * w[id] * value); NaN for bad rows. Blocking. The result does not depend
 * on the number of threads. */
int  wisp_session_score(wisp_session *s, const wisp_batch *b, float *out);

/* Asynchronous scoring: a stream of batches keeps the device busy, batch
 * i+1 crossing PCIe while batch i is scored and batch i-1 comes back.
 *
 *     for (i = 0; i < n; i++) {
 *         if (i >= 2) wisp_session_wait(s, NULL);      // batch i-2 is done: its arrays are free again
 *         wisp_session_submit(s, b[i % 3], out[i % 3]);
 *     }
 *     while (wisp_session_wait(s, NULL) != WISP_ESTATE) {}
 *
 * wisp_session_submit starts scoring b into out[0 .. rows) and returns.
 * Until the matching wisp_session_wait returns, b (its arrays too, for a
 * wrapped batch, pinned or pageable) and out belong to wisp: do not
 * change, clear or free them, and do not read out. Batches complete in
 * the order they were submitted. At most WISP_MAX_IN_FLIGHT batches are on
 * the device at once; submitting another first waits for the oldest one
 * on the device (its answers land in its out; its wait then returns at
 * once). At most WISP_MAX_PENDING batches may be submitted and not yet
 * waited for: one more fails with WISP_ELIMIT and changes nothing.
 * Fails with WISP_EINVAL (a NULL argument, as for score) and nothing is
 * submitted. A batch that cannot go to the device (a CPU session, no GPU,
 * a device failure at submit) is scored on the CPU before submit
 * returns, so the pair works everywhere. Batches in pinned memory (the
 * builders' memory when a GPU is in use) and a pinned out travel without
 * host copies; pageable ones are packed into pinned staging memory.
 *
 * wisp_session_wait waits for the OLDEST submitted batch and returns its
 * status (WISP_OK once its answers are in out, as score: NaN for bad rows,
 * statistics counted); *done (done may be NULL) is set to that batch.
 * A device failure found here moves that batch to the CPU (logged and
 * counted as a fallback, as score does), so it still returns WISP_OK.
 * WISP_ESTATE (and *done = NULL) when nothing is submitted.
 *
 * wisp_session_score is submit + wait of one batch; it may be called with
 * batches in flight (they stay owed a wait; they are finished first).
 * wisp_session_set_device and wisp_session_free finish every batch in
 * flight first (their answers land in their outs). The session is still
 * used by one thread at a time: submit and wait from the same thread, or
 * with your own lock. */
#define WISP_MAX_IN_FLIGHT  3     /* batches on the device at once, per session */
#define WISP_MAX_PENDING    64    /* batches submitted and not yet waited for */
int  wisp_session_submit(wisp_session *s, const wisp_batch *b, float *out);
int  wisp_session_wait(wisp_session *s, const wisp_batch **done);

/* Statistics, summed over the session's batches since the last reset.
 * Times are nanoseconds of wall time per stage. A batch is counted when
 * it completes (score, or its wait). With submit/wait the device stages
 * (h2d, kernel, d2h: from CUDA events, per batch) of successive batches
 * overlap each other and the caller's own work, so they may add up to
 * more than ns_total; ns_sync is then the time wait spent blocked. */
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
    WISP_STAT_NS_TOTAL,        /* wall time inside wisp_session_score, _submit and _wait */
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

/* The profile of the last call (what wisp.profile and `session:last_stats()`
 * read). Off by default. With profiling on, each wisp_session_score, _submit
 * and _wait records what it added to every statistic above (its own stages,
 * bytes, rows; for a wait, the device stages of the batch it completed) and
 * when it started, on the clock of wisp_clock_ns. wisp_session_last_stat
 * reads that record: 0 when profiling is off or before the first call.
 * Off, a call pays one predictable branch for it and nothing else; on, a
 * copy of WISP_STAT_COUNT counters per call. wisp_session_reset_stats
 * clears the record too. */
void        wisp_session_set_profiling(wisp_session *s, int on);
int         wisp_session_profiling(const wisp_session *s);
uint64_t    wisp_session_last_stat(const wisp_session *s, int which);
uint64_t    wisp_session_last_start_ns(const wisp_session *s);
/* Nanoseconds of CLOCK_MONOTONIC: the clock of every statistic. Thread-safe. */
uint64_t    wisp_clock_ns(void);

/* ---------------------------------------------------------------------------
 * 6. Feature columns and the transform
 *
 *   rows ──parse──► raw columns (wisp_raw) ──transform──► CSR features (wisp_batch)
 *
 * A feature-column description (the "columns" section of a .wisp file,
 * written by lua/wisp/columns.lua or scripts/tools/tf_export.py) says how raw
 * inputs become feature ids, exactly as TensorFlow's tf.feature_column
 * does, so a wide model trained in TensorFlow scores the same here:
 *
 *   numeric          one valued feature: the input as float32, optionally
 *                    normalized ((x - mean) / std, or x * scale + shift,
 *                    in float32 like TensorFlow's normalizer_fn)
 *   bucketized       a numeric source cut by float32 boundaries; a bucket
 *                    holds its left edge (std::upper_bound, as Bucketize)
 *   hash_bucket      Fingerprint64(value) % buckets (integers hashed as
 *                    their decimal strings)
 *   vocabulary_list  the index in a list, or an out-of-vocabulary bucket
 *                    (vocabulary size + Fingerprint64 % num_oov_buckets),
 *                    or default_value (-1: no feature)
 *   identity         the integer itself, in [0, buckets)
 *   crossed          FingerprintCat64 over the keys from hash_key
 *                    (default 0xDECAFCAFFE), % buckets; keys are raw
 *                    inputs (strings: Fingerprint64; integers: the value)
 *                    or categorical columns (their ids), one feature per
 *                    combination of the keys' values
 * Each column owns the slice [offset, offset + size) of the weight table.
 *
 * The text is JSON; its grammar, the input rules (dense and sparse
 * inputs, defaults, what counts as missing) and every TensorFlow fact it
 * relies on are written in engine/COLUMNS.md.
 *
 * Raw inputs are typed: float32, int64 or string. Missing values follow
 * TensorFlow's dense-input rules: a dense input left out of a row takes
 * its declared default (a row missing a dense input without a default is
 * bad); categorical columns drop "" and -1 (TensorFlow's "missing"
 * markers); a sparse input may hold any number of values per row.
 *
 * Bad input never fails a call: the row is kept, marked bad with its line
 * number and a message (an unknown input name, a wrong type, a malformed
 * number, NaN or an infinity in a numeric column, an over-long string,
 * invalid UTF-8 in JSON, a line with the wrong number of fields), becomes
 * a batch row with no features, and scores NaN, as for libsvm text.
 * ------------------------------------------------------------------------- */

typedef struct wisp_columns wisp_columns;   /* a parsed description; immutable */
typedef struct wisp_raw     wisp_raw;       /* raw inputs of a batch of rows; reusable */

/* Raw input types. */
enum { WISP_INPUT_FLOAT32 = 0, WISP_INPUT_INT64 = 1, WISP_INPUT_STRING = 2 };

#define WISP_MAX_STRING_BYTES  (1u << 16)   /* bytes in one string value */
#define WISP_MAX_COLUMNS       65536u       /* columns, inputs or boundaries (vocabularies: x64) */
#define WISP_MAX_SPEC_BYTES    (1u << 30)   /* bytes of description text */

/* TensorFlow's Fingerprint64 (FarmHash's farmhashna::Hash64) and
 * FingerprintCat64. Pure functions; thread-safe. */
uint64_t wisp_fingerprint64(const void *data, size_t len);
uint64_t wisp_fingerprint_cat64(uint64_t fp1, uint64_t fp2);

/* Parse and validate a description (JSON text of len bytes, need not be
 * NUL-terminated). On failure *out is NULL and wisp_errmsg() names the
 * place ("columns: column 3 'city_X_age': ...") and what is wrong
 * (WISP_EPARSE for the text, WISP_ELIMIT, WISP_ENOMEM). Thread-safe. */
int  wisp_columns_parse(const char *text, size_t len, wisp_columns **out);
/* Parse the "columns" section of m, checking that every slice lies inside
 * m's weight table. WISP_ESTATE when m has no columns section. */
int  wisp_columns_from_model(const wisp_model *m, wisp_columns **out);
/* Drop the caller's reference (raw batches keep their own). */
void wisp_columns_free(wisp_columns *c);

/* Read-only accessors; thread-safe. Strings live as long as c; NULL (or
 * 0, -1) for an index out of range. */
uint64_t    wisp_columns_num_features(const wisp_columns *c);   /* max over columns of offset + size */
size_t      wisp_columns_count(const wisp_columns *c);
const char *wisp_columns_name(const wisp_columns *c, size_t i);
const char *wisp_columns_type(const wisp_columns *c, size_t i);  /* "numeric", "crossed", ... */
uint64_t    wisp_columns_offset(const wisp_columns *c, size_t i);
uint64_t    wisp_columns_size(const wisp_columns *c, size_t i);
size_t      wisp_columns_num_inputs(const wisp_columns *c);
const char *wisp_columns_input_name(const wisp_columns *c, size_t i);
int         wisp_columns_input_dtype(const wisp_columns *c, size_t i);   /* WISP_INPUT_* */
int         wisp_columns_input_sparse(const wisp_columns *c, size_t i);  /* 1 sparse, 0 dense */
/* The index of the input called name[0..len), or -1. */
long        wisp_columns_input_index(const wisp_columns *c, const char *name, size_t len);

/* An empty raw batch for the inputs of c (kept alive by it). Memory is
 * reused across wisp_raw_clear. A raw batch is used by one thread at a time. */
int    wisp_raw_new(wisp_engine *eng, wisp_columns *c, wisp_raw **out);
void   wisp_raw_free(wisp_raw *r);
void   wisp_raw_clear(wisp_raw *r);   /* forget the rows (the TSV schema stays) */
size_t wisp_raw_rows(const wisp_raw *r);
/* Bad rows, as wisp_batch_bad_row: valid until r changes. */
size_t wisp_raw_bad_count(const wisp_raw *r);
int    wisp_raw_bad_row(const wisp_raw *r, size_t i, size_t *row, uint64_t *line, const char **msg);

/* Building rows one value at a time (the Lua-table and FFI path):
 *   wisp_raw_row_begin(r, line); wisp_raw_add_*(r, input, ...) ...; wisp_raw_row_end(r);
 * `line` is reported with a bad row (0 when there is none). Each add
 * appends one value to the input (a dense input takes one value per
 * row; more is a bad row). Conversions: add_float to an int64 input needs
 * an integral value in range; add_int to a float32 input rounds to
 * float32; add_float rounds a double to float32 (as numpy does); a
 * number for a string input, or a string for a numeric input, is a bad
 * row ("input 'age': a string where float32 is expected"). A failed
 * value marks the row bad and later adds to it are ignored; call
 * wisp_raw_row_reject to mark it bad yourself (an unknown input name).
 * These return WISP_OK for a bad row; WISP_EINVAL for a NULL r, an input
 * index out of range or no open row (WISP_ESTATE); WISP_ENOMEM, WISP_ELIMIT.
 * wisp_raw_row_end fills in dense defaults and commits the row; on
 * failure (ENOMEM) the row is dropped and r holds the rows before. */
int    wisp_raw_row_begin(wisp_raw *r, uint64_t line);
int    wisp_raw_add_float(wisp_raw *r, size_t input, double v);
int    wisp_raw_add_int(wisp_raw *r, size_t input, int64_t v);
int    wisp_raw_add_string(wisp_raw *r, size_t input, const char *s, size_t len);
int    wisp_raw_row_reject(wisp_raw *r, const char *msg);
int    wisp_raw_row_end(wisp_raw *r);

/* Delimited text. The schema names the fields of a line in order:
 *   "criteo"            label, I1..I13, C1..C26 (tab-separated Criteo layout)
 *   "header"            the first line of the text is the header
 *   "a,b,,c"            the names, comma-separated (an empty name skips a field)
 * Fields whose name is not an input are skipped (the label); every dense
 * input must be a field (a sparse one may be absent: it has no values).
 * delim is '\t' or ','; with ',' double-quoted fields ("a,b", "say ""hi""",
 * and newlines inside quotes: RFC 4180, a record then spans lines and is
 * reported at its first line) are understood; so are CRLF line ends and a
 * UTF-8 byte order mark at a line's start (the input's, or where files were
 * concatenated). Empty fields are missing
 * (Spark writes null as an empty field and "" as a quoted empty one:
 * both are missing). Numbers are parsed as
 * TensorFlow's decode_csv parses them (float32 fields rounded once,
 * directly to float32; "nan", "inf" and decimals beyond float32 such as
 * 1e39 read as NaN/inf, as there: a numeric column then makes the row bad
 * (see Values, batches), a bucketized one uses TensorFlow's bucket); a
 * field of another type, or a line with another number of fields, makes
 * a bad row. Strings are taken byte for byte (TensorFlow
 * hashes bytes: no UTF-8 check). WISP_EINVAL for a bad delimiter or
 * schema (a dense input of the description missing from it, or named twice). */
int    wisp_raw_set_schema(wisp_raw *r, const char *schema, int delim);
/* Parse lines into rows, with the contract of wisp_batch_parse_libsvm
 * (final, max_rows, *line_no, *consumed). Blank lines make no row.
 * Fails with WISP_EPARSE (nothing consumed) for a malformed header and
 * WISP_ESTATE when no schema was set. */
int    wisp_raw_parse_tsv(wisp_raw *r, const char *text, size_t len, int final, size_t max_rows,
                          uint64_t *line_no, size_t *consumed);
/* Where to cut CSV text between records, for a caller that parses pieces
 * of one text in parallel: the '\n' that ends the record in force at
 * `want` or the first one after it, scanning from `text` (a record's start)
 * to `end`; a quoted field's newlines are data (RFC 4180). NULL when the
 * text ends first (the record is unfinished). TSV and JSON lines end every
 * record at the next '\n' (memchr). Thread-safe, allocates nothing. */
const char *wisp_raw_csv_record_end(const char *text, const char *end, const char *want);
/* JSON lines: one object per line, {"age": 37, "city": "Paris", "tags": ["a", "b"]};
 * null is a missing value, an array holds a sparse input's values; an
 * unknown key, a value of the wrong type, invalid JSON or invalid UTF-8
 * make a bad row. Same contract as wisp_raw_parse_tsv. */
int    wisp_raw_parse_jsonl(wisp_raw *r, const char *text, size_t len, int final, size_t max_rows,
                            uint64_t *line_no, size_t *consumed);

/* Read access to input i's values (for devices and tests), valid until r
 * changes. A dense input holds exactly one value per row, value k being
 * row k's (a bad row holds a placeholder), and *indptr is NULL; a sparse
 * input has indptr[rows+1]: row k's values are [indptr[k], indptr[k+1]).
 * values: float[] (float32), int64_t[] (int64), or the string bytes, with
 * str_off[n+1] byte offsets (strings only; NULL otherwise). */
int    wisp_raw_input(const wisp_raw *r, size_t i, const uint32_t **indptr, const void **values,
                      const uint32_t **str_off);

/* A JSON list of numbers, text[0..len) from its '[' (nested lists flattened in row-major
 * order, as the Open Inference Protocol's JSON tensors allow; engine/parse/json_numbers.c), read into out:
 * up to cap int32/int64 (is_float 0, bits 32 or 64: integer tokens only, in range) or
 * float/double (is_float 1: each number as strtod reads it, rounded to float32 for bits 32).
 * *count: the elements read; *consumed: the bytes up to and including the closing ']'.
 * WISP_EPARSE for anything else in the list (a string, null, a fraction or an exponent for
 * an integer, an integer out of range, invalid JSON), WISP_ELIMIT for more than cap
 * elements, WISP_EINVAL for bad arguments; wisp_errmsg is not set. Thread-safe. */
int    wisp_json_numbers(const char *text, size_t len, int is_float, int bits, void *out, size_t cap,
                         size_t *count, size_t *consumed);

/* Superseded by wisp_batch_from_csr (section 4), kept through 0.1.x and removed in 0.2.
 * Rows r0..r1-1 of CSR tensors appended to the growable batch b (engine/batch/batch_csr.c): row r
 * holds ids[indptr[r] .. indptr[r+1]) (int32 or int64 as indptr_bits / id_bits say; unaligned
 * pointers allowed) with vals over the same range, or vals NULL (every feature binary), each row
 * added as wisp_batch_add_row adds it. It stops
 * before the first row holding a negative id: *bad_at is that id's index into ids (else -1),
 * and the caller makes the row what it wants (a bad row). *added: the rows added. WISP_EINVAL
 * for bad arguments or decreasing offsets, else wisp_batch_add_row's status (ELIMIT, ENOMEM). */
int    wisp_batch_add_csr(wisp_batch *b, const void *indptr, int indptr_bits, size_t r0, size_t r1,
                          const void *ids, int id_bits, const float *vals, size_t *added, int64_t *bad_at);

/* The transform on the CPU: append one batch row per raw row to b (bad
 * rows as bad rows with their line and message). Numeric columns give
 * valued features, the others binary ones, in column order. Runs on the
 * calling thread; r is not changed; b must be a growable batch
 * (WISP_ESTATE for a wrapped one). On failure (WISP_ENOMEM, WISP_ELIMIT)
 * b holds the rows appended before. */
int    wisp_transform(const wisp_raw *r, wisp_batch *b);

/* The transform on a session's device (the placement of the transform node).
 * On "cpu", or without a usable GPU, it is wisp_transform. On a GPU the raw
 * columns are copied to the device (only they cross PCIe), fingerprinted,
 * hashed, bucketized and crossed there, and the ids come back into b: the
 * same batch, byte for byte, as wisp_transform's (spec/c/test_transform_gpu.c).
 * Rows the device finds bad (a NaN numeric value, an identity value out of
 * range, ...) send the whole call to wisp_transform, so the messages are the
 * CPU's. A device failure moves the call to the CPU (logged, counted as a
 * fallback). The time goes to ns_transform (copies to ns_h2d/ns_d2h, bytes
 * counted); batches/rows are not counted (nothing is scored). Same contract
 * as wisp_transform otherwise. */
int    wisp_session_transform(wisp_session *s, const wisp_raw *r, wisp_batch *b);

/* Raw rows straight to probabilities on the session's device: out[i] for
 * raw row i, NaN for a bad row (bad in r, or found bad by the transform),
 * as wisp_transform followed by wisp_session_score would give. On a GPU the
 * transform and the scoring are one kernel: each row's ids are hashed and
 * their weights gathered and summed where they are computed; no id is ever
 * written to memory, and only the raw columns cross PCIe. Elsewhere (cpu,
 * no GPU, a device failure: logged and counted as a fallback) it runs
 * wisp_transform into a batch the session keeps, then scores that batch on
 * the session's device. r's columns must fit the session's model (ids
 * beyond its table are ignored and counted, as in scoring). Statistics:
 * as wisp_session_score, plus ns_transform (on a GPU: the fingerprint pass;
 * the fused kernel is ns_kernel). r is not changed. WISP_EINVAL for a NULL
 * argument (out may be NULL only for an empty r), WISP_ESTATE for an open
 * row; submitted batches are finished first. */
int    wisp_session_score_raw(wisp_session *s, const wisp_raw *r, float *out);

/* The bad rows of s's last wisp_session_score_raw (or wisp_session_score_device)
 * call, on whichever device it ran: r's own (parse) bad rows and the rows its transform refused, in
 * row order, each with its raw row index, input line and message (the CPU
 * transform's words: on a GPU, a call whose transform refused rows runs the
 * CPU transform once more to find them). Same shape as wisp_batch_bad_row.
 * The session keeps a copy: valid until the next wisp_session_score_raw or
 * wisp_session_score_device on s (r may change or be freed meanwhile). Every
 * such call starts the list afresh (a failed call leaves it empty, a NULL s reads 0).
 * wisp_session_bad_row returns WISP_EINVAL if i is out of range. Same
 * threading as the session: one thread at a time. */
size_t wisp_session_bad_count(const wisp_session *s);
int    wisp_session_bad_row(const wisp_session *s, size_t i, size_t *row, uint64_t *line, const char **msg);

/* A CSR batch whose arrays are already CUDA device memory (CuPy, PyTorch, a
 * cuDF pipeline), scored with the session's model: out[i] for row i.
 *   indptr   rows + 1 offsets, int32 (indptr_bits 32) or int64 (64); row r's features
 *             are [indptr[r], indptr[r + 1]) (indptr[0] may be > 0: a slice of a CSR)
 *   ids       indptr[rows] int32 feature ids
 *   vals      indptr[rows] float32 values (one per feature), or NULL: binary features
 *   stream    the caller's cudaStream_t (NULL: the legacy default stream); every read and
 *             write is enqueued on it, after the work queued on it before the call
 *   out       rows floats: device memory when out_on_device is 1, host memory when 0
 * The arrays (and a device out) live on one GPU, found from indptr; they stay the
 * caller's: wisp reads them during the call only and keeps no pointer. The call is
 * blocking: when it returns, the answers are in out and the stream is synchronized.
 * Checks, row by row, with nothing read outside [0, indptr[rows]): a row whose range
 * is not ordered inside [0, indptr[rows]] (a negative offset, a decrease), that holds
 * more than WISP_MAX_ROW_FEATURES features, a negative id, or a value that is not
 * finite is a bad row: NaN, counted (bad_rows) and listed by wisp_session_bad_row with
 * the reason; the other rows are scored. An id at or beyond the model's table is
 * ignored and counted (out_of_range) as in wisp_session_score. indptr[rows] negative
 * or beyond WISP_MAX_NNZ: WISP_EINVAL / WISP_ELIMIT, nothing scored.
 * Where: a session placed on a GPU that holds the arrays scores them there, on the
 * caller's stream (kernels/score_device.cu: the checks above run in the kernel; only
 * indptr[rows] and the answers, for a host out, cross PCIe). Elsewhere (a "cpu"
 * session, a session on another GPU, batches submitted and not waited for, a device
 * failure: logged and counted as a fallback) the arrays are copied to pinned host
 * memory on the caller's stream, checked by the same rules and scored on the
 * session's device. Both give the same answers, bad rows and messages.
 * Statistics as wisp_session_score (nnz: the good rows' features).
 * WISP_ENODEV without a usable GPU or in a build without CUDA; WISP_EINVAL for
 * a NULL s/indptr/out, indptr_bits not 32 or 64, or an array that is not device
 * memory; WISP_EDEVICE for a CUDA failure. A session is used by one thread at a time. */
int    wisp_session_score_device(wisp_session *s, size_t rows, const void *indptr, int indptr_bits,
                                 const int32_t *ids, const float *vals, void *stream, float *out, int out_on_device);
/* As wisp_session_score_device, for a caller who knows how long ids (and vals) are:
 * indptr[rows] beyond nnz refuses the call (WISP_EINVAL, nothing scored), so arrays that
 * disagree are never read past their end (the Python package passes len(indices)). */
int    wisp_session_score_device_n(wisp_session *s, size_t rows, const void *indptr, int indptr_bits,
                                   const int32_t *ids, const float *vals, size_t nnz, void *stream, float *out,
                                   int out_on_device);

/* Device memory for answers that stay on the GPU (wisp_session_score_device's out with
 * out_on_device; the Python package's out="device" arrays), for callers with no CUDA
 * headers of their own: n bytes (at least 1) of CUDA device dev's memory, 256-byte aligned,
 * in *out; wisp_device_free(dev, p) gives it back (p NULL: nothing). Not ordered with any
 * stream: the memory is usable at once, and freed only after the device's queued work is
 * done. WISP_EINVAL for a NULL out or a device that does not exist, WISP_EDEVICE when the
 * device has no memory left, WISP_ENODEV with no CUDA device or in a build without CUDA.
 * Thread-safe. */
int    wisp_device_alloc(int dev, size_t n, void **out);
void   wisp_device_free(int dev, void *p);

/* ---------------------------------------------------------------------------
 * 7. Vowpal Wabbit: its hashing, its text format, its models
 *
 * A logistic model trained with `vw --loss_function logistic` scores here
 * exactly as `vw -t -i model --link logistic -p preds` predicts:
 *
 *     wisp import vw model.readable.txt model.wisp    (--readable_model or --invert_hash file)
 *     wisp score --format vw -m model.wisp data.vw
 *
 * The hashing options (-b bits, -q pairs, --hash_seed, --hash all,
 * --noconstant, --ignore, --keep, --ignore_linear) live in the model's meta
 * ("vw_options"), so the text needs nothing else. The weights sit at VW's
 * own indices in a table of 2^bits (the constant's weight at 11650396 &
 * mask, bias 0), and the score is sigmoid(VW's sum). The rules are written
 * at the top of engine/transform/vw_hash.c (VW's MurmurHash3 hashstring,
 * namespaces, quadratic interactions) and of engine/parse/vw_text.c
 * (values, labels, tags, and where wisp is stricter than VW).
 * ------------------------------------------------------------------------- */

typedef struct wisp_vw wisp_vw;   /* hashing options; immutable, thread-safe */

/* VW's hashing, pure functions (thread-safe): MurmurHash3_x86_32; VW's
 * hashstring (bytes <= 0x20 trimmed; a name made only of digits is
 * the integer + seed, else murmur3 with that seed). */
uint32_t wisp_vw_murmur3(const void *data, size_t len, uint32_t seed);
uint32_t wisp_vw_hashstring(const char *s, size_t len, uint32_t seed);

/* Options from VW's command-line spelling: "-b 18 -q ab --hash_seed 7
 * --noconstant" (also --bit_precision, --quadratic, --interactions of two
 * namespaces, --hash strings|all, --leave_duplicate_interactions, --ignore,
 * --keep, --ignore_linear; --link and --loss_function are accepted and
 * ignored). Anything else, cubic interactions and the ':' wildcard fail
 * with WISP_EINVAL naming the option. Bits: 1..31, default 18. */
int  wisp_vw_new(const char *options, wisp_vw **out);
/* The options kept in a model imported by wisp_import_vw (meta
 * "vw_options"); WISP_ESTATE when m is not a VW model. */
int  wisp_vw_from_model(const wisp_model *m, wisp_vw **out);
void wisp_vw_free(wisp_vw *v);
int         wisp_vw_bits(const wisp_vw *v);
/* The canonical option string ("-b 18 -q ab"); lives as long as v. */
const char *wisp_vw_options(const wisp_vw *v);
/* Hashes under v's options: a namespace's hash ("" or " " is the default
 * namespace), a feature's weight index (masked to v's bits), and the index
 * of the quadratic feature of two (unmasked) hashes. */
uint32_t wisp_vw_hash_namespace(const wisp_vw *v, const char *name, size_t len);
uint32_t wisp_vw_hash_feature(const wisp_vw *v, const char *name, size_t len, uint32_t ns_hash);
uint32_t wisp_vw_hash_quadratic(const wisp_vw *v, uint32_t h1, uint32_t h2);

/* Parse VW text ("label [weight] ['tag]|ns[:w] feat[:value] ... |ns2 ...")
 * into rows of feature indices under v's options (linear features, the
 * quadratic ones, the constant), with the contract of
 * wisp_batch_parse_libsvm (final, max_rows, *line_no, *consumed; blank
 * lines make no row; a malformed line becomes a bad row, "line N: <what>,
 * at column C"). v may be shared by threads; b is the caller's. */
int  wisp_batch_parse_vw(wisp_batch *b, const wisp_vw *v, const char *text, size_t len, int final,
                         size_t max_rows, uint64_t *line_no, size_t *consumed);

/* Import a VW --readable_model or --invert_hash file (gd, VW 8 or 9) as a
 * .wisp file of 2^bits weights with meta source=vw, vw_options, vw_link,
 * vw_loss ("logistic" when the file's label range is VW's logistic -50..50,
 * else "unknown": the score is still sigmoid(sum), which is a probability
 * only for a logistic model). Refused (WISP_EPARSE, naming the line):
 * reductions and options that change a prediction (--oaa, --nn, --lrq,
 * cubic interactions, n-grams, LDA, ...). */
int  wisp_import_vw(const char *vw_path, const char *out_path, int dtype);

#ifdef __cplusplus
}
#endif
#endif /* WISP_H */
