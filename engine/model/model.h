/* model.h — private: the model object behind wisp_model (model.c), the fp16 codecs, and the importers' file reader. */
#ifndef WISP_MODEL_H
#define WISP_MODEL_H

#include "core/core.h"

/* ---- model (model.c) ------------------------------------------------------- */

#define WISP_MAGIC "WISPMDL"     /* 8 bytes with the NUL */
#define WISP_FORMAT_VERSION 1
#define WISP__AUTO_PROBES 15     /* the "auto" calibration's probes: 1, 2, 4 ... 16384 rows (autoplace.c) */

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
    /* the calibration's measured points (autoplace.c, wisp_session_auto_points), written
     * before auto_cal turns 2: auto_cal_n probes of auto_cal_rows[k] rows; auto_cal_ns[k][d]
     * = median, lo, hi (ns) of d: 0 the CPU on one thread, 1 the CPU's pool, 2 the GPUs */
    int auto_cal_n;
    uint64_t auto_cal_rows[WISP__AUTO_PROBES];
    double auto_cal_ns[WISP__AUTO_PROBES][3][3];
};

void wisp__model_retain(wisp_model *m);

/* fp16 <-> fp32 (round to nearest even). */
float    wisp__half_to_float(uint16_t h);
uint16_t wisp__float_to_half(float f);


/* Read a whole file into memory, NUL-terminated (import_liblinear.c; the
 * importers use it). `what` names what the file should be ("LIBLINEAR
 * model"), for the message about a directory. *out is wisp__free'd by the caller. */
int  wisp__read_file(const char *path, const char *what, char **out, size_t *len);

#endif /* WISP_MODEL_H */
