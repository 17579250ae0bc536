/* score.h — private: CPU scoring (score_cpu.c), the session object (session.c) and the "auto" device (autoplace.c). */
#ifndef WISP_SCORE_H
#define WISP_SCORE_H

#include "batch/batch.h"
#include "model/model.h"

/* ---- CPU scoring (score_cpu.c) ------------------------------------------- */

/* Score rows [0, rows) of b on the engine's pool; adds out-of-range ids to
 * *out_of_range. Bad rows get NaN. */
void wisp__cpu_score(wisp_engine *eng, const wisp_model *m, const wisp_batch *b, float *out,
                    uint64_t *out_of_range);
/* Score rows [r0, r1) on the calling thread only (the reference and the
 * building block). Returns the out-of-range count. */
uint64_t wisp__cpu_score_rows(const wisp_model *m, const wisp_batch *b, size_t r0, size_t r1, float *out);

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

#endif /* WISP_SCORE_H */
