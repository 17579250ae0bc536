/* internal.h — the struct bodies and cross-file helpers behind wisp.h; never installed. */
#ifndef WISP_INTERNAL_H
#define WISP_INTERNAL_H

#include "wisp.h"
#include "farmhash.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#if defined(__GNUC__)
#define WISP_LIKELY(x)   __builtin_expect(!!(x), 1)
#define WISP_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define WISP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define WISP_LIKELY(x) (x)
#define WISP_UNLIKELY(x) (x)
#define WISP_PRINTF(a, b)
#endif

/* The id a batch stores for input ids >= 2^32: out of range of any model. */
#define WISP_ID_NONE 0xFFFFFFFFu

/* ---- errors (error.c) ---------------------------------------------------- */

/* Set the calling thread's message and return status (for `return wisp_fail(...)`). */
int  wisp_fail(int status, const char *fmt, ...) WISP_PRINTF(2, 3);
int  wisp_failv(int status, const char *fmt, va_list ap);
/* Prefix the current message with "context: " and return status. */
int  wisp_fail_context(int status, const char *fmt, ...) WISP_PRINTF(2, 3);
void wisp_clear_error(void);

/* ---- allocation (error.c) -------------------------------------------------
 * Every allocation of the library goes through these, so a test build can
 * make the Nth one fail (WISP_FAULT_ALLOC, see spec/c) and the CUDA backend
 * can supply pinned host memory. */
void *wisp_malloc(size_t n);
void *wisp_calloc(size_t n, size_t size);
void *wisp_realloc(void *p, size_t n);
void  wisp_free(void *p);
char *wisp_strdup(const char *s);
/* Test hooks (wisp_fault_alloc_after, wisp_model_read_hook, the CUDA benchmark hooks): wisp_test.h */
#include "wisp_test.h"

/* Monotonic nanoseconds. */
uint64_t wisp_now_ns(void);

/* ---- thread pool (threadpool.c) ---------------------------------------- */

typedef struct wisp_pool wisp_pool;
/* fn(ctx, task) (wisp_task_fn, wisp.h) is called once for each task in
 * [0, ntasks), spread over the pool's threads and the calling thread;
 * returns when all are done. wisp_engine_run is the public door. */
int  wisp_pool_new(int threads, wisp_pool **out);
void wisp_pool_free(wisp_pool *p);
int  wisp_pool_threads(const wisp_pool *p);
/* true when the calling thread is running a task of p (work it starts runs inline) */
bool wisp_pool_inside(const wisp_pool *p);
/* Runs the tasks; concurrent callers are serialised. Never fails. */
void wisp_pool_run(wisp_pool *p, size_t ntasks, wisp_task_fn fn, void *ctx);

/* ---- backends -------------------------------------------------------------
 * A device backend is a table of functions plus a context pointer, in the
 * ggml style. The CPU backend is built in; the CUDA backend (engine/cuda_*.c)
 * is present when the library was built with nvcc. Optional entries say
 * what happens when they are NULL. */

typedef struct wisp_backend {
    int version;                 /* WISP_BACKEND_VERSION */
    const char *name;            /* "cuda" */
    /* Discover devices. Returns the number of usable devices (>= 0); on 0
     * writes the reason into why. Called once, under the engine's lock. */
    int  (*init)(wisp_engine *eng, void **ctx, char *why, size_t whylen);
    void (*shutdown)(void *ctx);
    const char *(*device_name)(void *ctx, int dev);
    uint64_t    (*device_memory)(void *ctx, int dev);
    int         (*device_capability)(void *ctx, int dev);
    int         (*device_usable)(void *ctx, int dev);
    /* Per-session state for scoring on devices devs[0..ndev). */
    int  (*session_open)(void *ctx, const int *devs, int ndev, void **sctx);
    void (*session_close)(void *sctx);
    /* Score b into out (host memory). Adds its stage times and bytes into
     * stats[WISP_STAT_*]. On failure the caller falls back to the CPU. */
    int  (*score)(void *sctx, wisp_model *m, const wisp_batch *b, float *out, uint64_t *stats);
    /* Asynchronous scoring (optional: both NULL, and session.c scores with
     * `score` at submit time). submit enqueues b -> out and returns; wait
     * completes the OLDEST submitted batch (first in, first out) and adds
     * its stage times and bytes into stats. session.c keeps at most
     * WISP_MAX_IN_FLIGHT batches submitted and not yet waited for, calls
     * wait exactly once for each submit that returned WISP_OK, and calls
     * `score` or session_close only with nothing in flight. A failed submit
     * leaves nothing in flight (its device work, if any, finished);
     * a failed wait means b's answers are not (all) in out, and the caller
     * scores b on the CPU. b and out stay untouched until the wait. */
    int  (*submit)(void *sctx, wisp_model *m, const wisp_batch *b, float *out, uint64_t *stats);
    int  (*wait)(void *sctx, uint64_t *stats);
    /* Release device copies of a model being freed. Optional (NULL: nothing to release). */
    void (*model_release)(void *ctx, wisp_model *m);
    /* Pinned host memory for batches. Optional (NULL: plain memory). */
    void *(*host_alloc)(void *ctx, size_t n);
    void  (*host_free)(void *ctx, void *p);
    /* The transform on the device (optional: NULL, and session.c runs
     * wisp_transform). transform appends r's rows to b as wisp_transform
     * does; score_raw scores r's rows into out (transform and score fused
     * on the device; it counts batches, rows, nnz and bad rows itself).
     * Both add their stage times and bytes into stats; called with nothing
     * in flight. On a device failure (WISP_EDEVICE, before b changed) the
     * caller falls back to the CPU; any other failure is the call's. */
    int  (*transform)(void *sctx, const wisp_raw *r, wisp_batch *b, uint64_t *stats);
    int  (*score_raw)(void *sctx, wisp_model *m, const wisp_raw *r, float *out, uint64_t *stats);
} wisp_backend;

#define WISP_BACKEND_VERSION 2   /* 2: submit/wait */

/* The CUDA backend, or NULL in a build without CUDA (engine/cuda_stub.c). */
const wisp_backend *wisp_cuda_backend(void);

/* The backend's own structures and its GPU transform: engine/cuda_internal.h (CUDA builds only). */

/* ---- engine (engine.c) ----------------------------------------------------- */

struct wisp_engine {
    atomic_int refs;
    wisp_pool *pool;
    int log_level;
    pthread_mutex_t lock;        /* guards last_log */
    char last_log[512];
    /* GPUs */
    pthread_mutex_t gpu_lock;    /* guards discovery; held while CUDA starts (a quarter of a second) */
    atomic_int gpu_state;        /* 0: not discovered yet, 1: discovered */
    /* the background bring-up an "auto" session starts (engine/autoplace.c): 0 none, 1 running, 2 done */
    atomic_int bring;
    pthread_t bring_thread;
    atomic_int pinned_batches;   /* a batch's own arrays pinned while a GPU is live (hostmem.c) */
    int gpu_count;
    char gpu_status[256];
    const wisp_backend *gpu;     /* NULL when no GPU backend is usable */
    void *gpu_ctx;
};

void wisp_engine_retain(wisp_engine *eng);
/* Discover the devices now (wisp_engine_gpu_count without the count). */
void wisp__engine_discover(wisp_engine *eng);
/* 1 once discovery is done and no background bring-up is still running: the GPU facts are final. */
int  wisp__engine_gpu_settled(wisp_engine *eng);
/* Log through the engine (stderr by default) and keep warnings/errors. */
void wisp_log(wisp_engine *eng, int level, const char *fmt, ...) WISP_PRINTF(3, 4);
/* Host memory for batch arrays: pinned when the GPU backend is live. */
void *wisp_host_alloc(wisp_engine *eng, size_t n);
/* A batch's own arrays: as wisp_host_alloc unless the engine says plain (wisp_engine_set_pinned_batches; why: hostmem.c). */
void *wisp_host_alloc_batch(wisp_engine *eng, size_t n);
void  wisp_host_free(wisp_engine *eng, void *p);

/* ---- model (model.c) ------------------------------------------------------- */

#define WISP_MAGIC "WISPMDL"     /* 8 bytes with the NUL */
#define WISP_FORMAT_VERSION 1

struct wisp_model {
    atomic_int refs;
    wisp_engine *eng;
    char *path;
    void *map;                   /* a private read-only copy of the whole verified file (model.c) */
    size_t map_size;             /* the verified file size */
    size_t map_len;              /* the copy's mapping length (map_size rounded up) */
    struct { uint64_t dev, ino, size; int64_t mtime_s, mtime_ns, ctime_s, ctime_ns; } file_id;  /* at load */
    const void *weights;         /* num_features elements of dtype */
    uint64_t num_features;
    double bias;
    int dtype;
    float scale;                 /* int8 dequantization scale; 1 otherwise */
    char *meta;                  /* NUL-terminated copies */
    char *columns;
    char **meta_kv;              /* key, value, key, value, ..., NULL */
    /* Device copies, owned by the GPU backend (freed via model_release). */
    pthread_mutex_t dev_lock;
    void *dev[WISP_MAX_GPUS];
    /* the "auto" device's crossover for this model (autoplace.c): auto_cal 0 not
     * calibrated, 1 calibrating, 2 done; the fewest nonzeros a batch needs to go to
     * the GPU, scored from a pool task / from another thread (UINT64_MAX: never) */
    atomic_int auto_cal;
    _Atomic uint64_t auto_nnz_one, auto_nnz_pool;
    /* what batches past the crossover really cost here (autoplace.c, "measured"): ns per
     * 1024 nonzeros, [context: 0 pool task, 1 other][device: 0 cpu, 1 gpu]; 0 unknown */
    _Atomic uint64_t auto_rate[2][2];
    atomic_uint auto_tick[2];            /* batches past the crossover routed, per context */
    _Atomic uint64_t auto_probe[2];      /* when a first GPU batch of a context went (ns), 0 none */
};

void wisp_model_retain(wisp_model *m);

/* fp16 <-> fp32 (round to nearest even). */
float    wisp_half_to_float(uint16_t h);
uint16_t wisp_float_to_half(float f);

/* ---- batch (batch.c) ------------------------------------------------------- */

struct wisp_bad_row {
    size_t row;
    uint64_t line;
    uint32_t msg_off;            /* offset into the batch's message buffer */
};

struct wisp_batch {
    wisp_engine *eng;
    bool wrapped;                /* arrays are the caller's */
    size_t rows;
    size_t nnz;
    size_t nvals;
    /* CSR arrays; for owned batches, host memory from wisp_host_alloc */
    uint32_t *row_ptr;  size_t row_cap;   /* row_cap + 1 entries */
    uint32_t *ids;      size_t id_cap;
    uint32_t *val_ptr;                    /* same capacity as row_ptr; NULL until a valued row */
    float    *vals;     size_t val_cap;
    int value_mode;                       /* WISP_VALUES_* */
    /* owned batches: the four arrays are regions of ONE host block (pinned when
     * the GPU backend is live): val_ptr | row_ptr | vals | ids at these byte
     * offsets (256-aligned; see batch.c). NULL for wrapped batches. */
    void *arena; size_t arena_bytes;
    size_t off_vp, off_rp, off_vals, off_ids;
    /* bad rows */
    struct wisp_bad_row *bad; size_t nbad, bad_cap;
    char *msgs; size_t msgs_len, msgs_cap;
    /* scratch for the libsvm parser (binary features of the current line) */
    uint32_t *scratch; size_t scratch_cap;
};

enum { WISP_VALUES_NONE = 0, WISP_VALUES_ALL = 1, WISP_VALUES_MIXED = 2 };

/* For the text parsers: reserve room for one line of up to nfeat features
 * (valued ids and values go to ids[] and vals[], binary ids to scratch[]), then commit
 * nv valued and nb binary features as one row. */
int wisp_batch__reserve_line(wisp_batch *b, size_t nfeat, uint32_t **ids, float **vals, uint32_t **scratch);
int wisp_batch__commit_line(wisp_batch *b, size_t nv, size_t nb);

/* Mark row `row` (already appended, with no features) bad. */
int wisp_batch_mark_bad(wisp_batch *b, size_t row, uint64_t line, const char *msg);

/* ---- CPU scoring (score_cpu.c) ------------------------------------------- */

/* Score rows [0, rows) of b on the engine's pool; adds out-of-range ids to
 * *out_of_range. Bad rows get NaN. */
void wisp_score_cpu(wisp_engine *eng, const wisp_model *m, const wisp_batch *b, float *out,
                    uint64_t *out_of_range);
/* Score rows [r0, r1) on the calling thread only (the reference and the
 * building block). Returns the out-of-range count. */
uint64_t wisp_score_cpu_rows(const wisp_model *m, const wisp_batch *b, size_t r0, size_t r1, float *out);

/* ---- session (session.c) ---------------------------------------------------- */

struct wisp_session {
    wisp_engine *eng;
    wisp_model *model;
    char device[32];             /* as asked */
    char last_device[32];        /* what scored the last batch */
    char gpu_label[32];          /* "gpu:N" / "gpus:N" for the session's GPUs, made when they change */
    int gpu_label_key;           /* which GPUs gpu_label names (0: not made yet) */
    int kind;                    /* WISP_PLACE_* resolved from device */
    int ngpu;
    int gpus[WISP_MAX_GPUS];
    void *gpu_sctx;              /* backend session state, opened lazily */
    bool gpu_open_failed;
    bool auto_pending;           /* "auto" before the engine's GPUs settled: gpus not filled in yet */
    uint64_t stats[WISP_STAT_COUNT];
    /* batches submitted and not yet waited for (wisp_session_submit/wait):
     * a ring of WISP_MAX_PENDING, oldest at pend_head */
    struct wisp_pending {
        const wisp_batch *b;
        float *out;
        int on_gpu;              /* 1: in the backend, not yet completed; 0: answers in out */
        int status;              /* what wait returns once completed */
    } pend[WISP_MAX_PENDING];
    int pend_head, npend;
    int ngpu_pend;               /* entries with on_gpu (they are the backend's in-flight batches, in order) */
    int max_in_flight;           /* 1..WISP_MAX_IN_FLIGHT (WISP_MAX_IN_FLIGHT env to lower it) */
    /* the profile (issue 5, wisp_session_set_profiling): off by default; when on,
     * what the last score/submit/wait call added to each statistic, and its start */
    int profiling;
    uint64_t last_start_ns;
    uint64_t last[WISP_STAT_COUNT];
    /* wisp_session_score_raw on the CPU path: the transform's batch, reused */
    wisp_batch *raw_batch;
    /* the last wisp_session_score_raw call's bad rows (wisp_session_bad_row): a copy,
     * so they outlive the raw batch; msg_off into bad_msgs */
    struct wisp_bad_row *bad; size_t nbad, bad_cap;
    char *bad_msgs; size_t bad_msgs_len, bad_msgs_cap;
};

enum { WISP_PLACE_CPU = 0, WISP_PLACE_GPU = 1, WISP_PLACE_AUTO = 2 };

/* The "auto" device (autoplace.c): start the GPUs' bring-up in the background (once per
 * engine; calibrates m there too), and whether a batch of nnz nonzeros goes to the GPU now. */
void wisp__auto_bring_up(wisp_engine *eng, wisp_model *m);
int  wisp__auto_route(wisp_session *s, uint64_t nnz, bool gpu_open);
/* What a batch of nnz nonzeros cost on the CPU (gpu 0) or the GPUs (1), wall ns: auto learns from it. */
void wisp__auto_observe(wisp_session *s, int gpu, uint64_t nnz, uint64_t ns);
/* An "auto" session takes the GPUs its engine discovered since (wait: discover now). */
void wisp__session_auto_refresh(wisp_session *s, bool wait);

/* Make b's bad rows the session's (wisp_session_bad_row), a copy; for the scoring paths
 * that own a batch the caller never sees (wisp_session_score_device). */
int wisp__session_keep_bad(wisp_session *s, const wisp_batch *b);


/* ---- feature columns and raw inputs (columns.c, raw.c, transform_cpu.c, csv.c, jsonl.c, farmhash.c) ------------
 * Added for issue 4 (feature columns). The description is parsed once into
 * an immutable wisp_columns; a wisp_raw holds raw inputs column by column
 * (the layout a device transform would ship: per input, row offsets and
 * values; strings as byte offsets + bytes). */

enum { WISP_NODE_NUMERIC = 0, WISP_NODE_BUCKETIZED, WISP_NODE_HASH, WISP_NODE_VOCAB,
       WISP_NODE_IDENTITY, WISP_NODE_CROSSED };
enum { WISP_NORM_NONE = 0, WISP_NORM_STANDARD = 1, WISP_NORM_AFFINE = 2 };

struct wisp_input {
    char *name;
    size_t name_len;
    int dtype;                   /* WISP_INPUT_* */
    bool sparse;
    bool has_default;            /* dense inputs: the value of a missing cell */
    float def_f;
    int64_t def_i;
    char *def_s;
    uint32_t def_len;
    bool need_fp;                /* a string input whose fingerprints a column uses */
};

/* A crossed column's key: a raw input, or a categorical node. */
struct wisp_cross_key {
    bool raw;
    uint32_t index;              /* input index (raw) or node index */
};

struct wisp_node {
    int kind;                    /* WISP_NODE_* */
    bool scalar;                 /* at most one id (or value) per row: every input it reads is dense */
    uint32_t input;              /* numeric, hash, vocabulary, identity */
    /* numeric: y = (x - a) / b (standard) or x * a + b (affine), in float32 */
    int norm;
    float norm_a, norm_b;
    /* bucketized */
    uint32_t source;             /* a numeric node */
    float *bounds;
    uint32_t nbounds;
    /* hash, identity, crossed: the bucket count; vocabulary: size + oov */
    uint64_t buckets;
    uint64_t magic_lo, magic_hi; /* 2^128 / buckets + 1, for h % buckets without a division */
    uint64_t pow2_mask;          /* buckets - 1 when buckets is a power of two (> 1), else 0 */
    /* vocabulary, identity */
    bool has_default;
    int64_t default_value;
    uint64_t num_oov;
    uint32_t vocab_n;
    int64_t *vocab_int;          /* int64 vocabularies */
    char **vocab_str;            /* string vocabularies */
    uint32_t *vocab_len;
    uint64_t *vocab_hash;        /* per entry: the key's hash (strings: Fingerprint64) */
    uint32_t *vocab_slots;       /* open addressing: entry + 1, 0 = empty */
    uint32_t vocab_mask;
    /* crossed: keys in TensorFlow's order (sparse ones first, then dense raw inputs) */
    struct wisp_cross_key *keys;
    uint32_t nkeys;
    uint64_t hash_key;
};

struct wisp_column {
    char *name;
    uint32_t node;
    uint64_t offset, size;
};

struct wisp_columns {
    atomic_int refs;
    struct wisp_input *inputs;  size_t ninputs;
    struct wisp_node *nodes;    size_t nnodes;
    struct wisp_column *cols;   size_t ncols;
    uint64_t num_features;
    uint32_t *name_slots;        /* input names, open addressing: index + 1 */
    uint32_t name_mask;
};

void wisp_columns_retain(wisp_columns *c);

struct wisp_raw_input {
    uint32_t *row_ptr;           /* row_cap + 1 */
    void *vals;                  /* float or int64_t, val_cap entries */
    size_t n, val_cap;
    uint32_t *str_off;           /* strings: val_cap + 1 byte offsets */
    char *bytes;
    size_t nbytes, bytes_cap;
};

struct wisp_raw {
    wisp_engine *eng;
    wisp_columns *cols;
    size_t rows, row_cap;
    struct wisp_raw_input *in;   /* one per input of cols */
    uint64_t *lines;             /* row_cap */
    /* bad rows */
    struct wisp_bad_row *bad; size_t nbad, bad_cap;
    char *msgs; size_t msgs_len, msgs_cap;
    /* the open row */
    bool open, open_bad;
    uint64_t open_line;
    char open_msg[256];
    /* delimited text */
    int delim;                   /* 0 until a schema is set */
    bool want_header;
    int32_t *field_input;        /* per field: input index or -1 */
    size_t nfields;
    char *qbuf; size_t qbuf_cap; /* unquoted CSV field */
    /* the text readers' reserve (wisp_raw__reserve_line) */
    size_t room_rows, room_bytes, max_def_len;
    uint32_t *sparse_idx; size_t nsparse;
};

/* TensorFlow's Fingerprint64 and FingerprintCat64 (farmhash.h): wisp__cat64
 * and wisp__fp64_short (at most 16 bytes) inline for the transform's loops;
 * wisp_fingerprint64/wisp_fingerprint_cat64 (farmhash.c) are the same, exported.
 * Longer strings call the exported function. */
static inline uint64_t wisp__fp64(const char *s, size_t len)
{
    return len <= 16 ? wisp__fp64_short(s, len) : wisp_fingerprint64(s, len);
}

/* Input name -> index (-1). */
long wisp_columns__find_input(const wisp_columns *c, const char *name, size_t len);
/* Mark the open row bad (printf-style message, kept with its line); later
 * values of the row are ignored. Returns WISP_OK. */
int  wisp_raw__reject(wisp_raw *r, const char *fmt, ...) WISP_PRINTF(2, 3);
/* Append a value already converted to the input's type (no checks beyond
 * the dense rule): float32, int64, or a string of len bytes. */
int  wisp_raw__push_f32(wisp_raw *r, size_t input, float v);
int  wisp_raw__push_i64(wisp_raw *r, size_t input, int64_t v);
int  wisp_raw__push_str(wisp_raw *r, size_t input, const char *s, size_t len);
/* Room for one more value in every input and `bytes` (+16 of slack for
 * word-sized copies) more string bytes, so a text reader may append the
 * values of a line without further checks. */
int  wisp_raw__reserve_line_slow(wisp_raw *r, size_t bytes);
static inline int wisp_raw__reserve_line(wisp_raw *r, size_t bytes)
{
    bytes += r->max_def_len + 16;
    if (WISP_LIKELY(r->room_rows > 0 && bytes <= r->room_bytes)) {
        r->room_rows--;
        r->room_bytes -= bytes;
        return WISP_OK;
    }
    return wisp_raw__reserve_line_slow(r, bytes);
}
/* Open a row (wisp_raw_row_begin, with its common case inline). */
static inline int wisp_raw__row_begin(wisp_raw *r, uint64_t line)
{
    if (WISP_LIKELY(r->rows < r->row_cap && !r->open && r->lines)) {
        r->open = true;
        r->open_bad = false;
        r->open_line = line;
        return WISP_OK;
    }
    return wisp_raw_row_begin(r, line);
}
/* Drop the open row's values and close it (a reader's failure path). */
void wisp_raw__abort(wisp_raw *r);
/* Commit the open, good row whose dense inputs all hold a value. */
static inline void wisp_raw__commit_row(wisp_raw *r)
{
    const size_t row = r->rows;
    for (size_t q = 0; q < r->nsparse; q++) {
        size_t i = r->sparse_idx[q];
        r->in[i].row_ptr[row + 1] = (uint32_t)r->in[i].n;
    }
    r->lines[row] = r->open_line;
    r->rows = row + 1;
    r->open = false;
}

/* The text readers' number parsing is engine/textnum.h, the JSON tokens engine/json.h. */
/* The reference transform, one row at a time (wisp_transform goes column by
 * column over chunks of rows); the tests check that both give the same batch. */
int  wisp_transform__rowwise(const wisp_raw *r, wisp_batch *b);

/* Read a whole file into memory, NUL-terminated (import_liblinear.c; the
 * importers use it). `what` names what the file should be ("LIBLINEAR
 * model"), for the message about a directory. *out is wisp_free'd by the caller. */
int  wisp__read_file(const char *path, const char *what, char **out, size_t *len);

/* The token at s (up to a blank or e) for a message: at most 40 bytes, non-printable
 * bytes as '?', "..." when cut; buf holds 44 bytes (libsvm.c; vw.c uses it too). */
const char *wisp__excerpt(const char *s, const char *e, char *buf);

/* CSV records (RFC 4180, csv.c): a quoted field may hold newlines, so a
 * record ends at the first '\n' outside quotes. From p, a record's start,
 * returns the '\n' that ends the first record ending at or after `want`
 * (want = p: p's own record), or NULL when the text [p, e) ends first
 * (inside a quoted field, or without a newline): the caller waits for more
 * text, or takes the rest as the last record. *inner (may be NULL): the
 * newlines inside quoted fields of the record it returns. The cut for
 * splitting CSV text into pieces (cli.c) and the CSV reader's record loop. */
const char *wisp__csv_record_end(const char *p, const char *e, const char *want, uint64_t *inner);

/* The streaming text parsers' line cut (libsvm.c, vw.c): the line starting at
 * text[pos] ends at *e (its '\n', or the end of the text when final) and the
 * next one starts at *next. Returns 1 for a line; 0 when the line is not
 * complete yet (the caller stops and waits for more text); WISP_ELIMIT, with
 * a message naming line ln + 1, when that unfinished line is already longer
 * than WISP_MAX_LINE_BYTES. */
static inline int wisp__next_line(const char *text, size_t len, size_t pos, int final, uint64_t ln,
                                  const char **e, size_t *next)
{
    const char *nl = memchr(text + pos, '\n', len - pos);
    if (nl) { *e = nl; *next = (size_t)(nl - text) + 1; return 1; }
    if (final) { *e = text + len; *next = len; return 1; }
    if (len - pos > WISP_MAX_LINE_BYTES)
        return wisp_fail(WISP_ELIMIT, "line %llu: no end of line within WISP_MAX_LINE_BYTES (%u bytes)",
                         (unsigned long long)(ln + 1), WISP_MAX_LINE_BYTES);
    return 0;
}

#endif /* WISP_INTERNAL_H */
