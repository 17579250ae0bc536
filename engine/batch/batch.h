/* batch.h — private: the CSR batch behind wisp_batch (batch.c), its bad rows, and the text parsers' row builders. */
#ifndef WISP_BATCH_H
#define WISP_BATCH_H

#include "core/core.h"

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
    /* CSR arrays; for owned batches, host memory from wisp__host_alloc */
    uint32_t *indptr;  size_t row_cap;   /* row_cap + 1 entries */
    uint32_t *ids;      size_t id_cap;
    uint32_t *val_ptr;                    /* same capacity as indptr; NULL until a valued row */
    float    *vals;     size_t val_cap;
    int value_mode;                       /* WISP_VALUES_* */
    /* owned batches: the four arrays are regions of ONE host block (pinned when
     * the GPU backend is live): val_ptr | indptr | vals | ids at these byte
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
int wisp__batch_reserve_line(wisp_batch *b, size_t nfeat, uint32_t **ids, float **vals, uint32_t **scratch);
int wisp__batch_commit_line(wisp_batch *b, size_t nv, size_t nb);

/* Mark row `row` (already appended, with no features) bad. */
int wisp__batch_mark_bad(wisp_batch *b, size_t row, uint64_t line, const char *msg);
/* List row `row` bad whatever it holds (a wrapped batch's rows keep their features: batch_csr.c);
 * row is after the last bad row. fn names the caller in a failure's message. */
int wisp__batch_list_bad(wisp_batch *b, size_t row, uint64_t line, const char *msg, const char *fn);
/* The values rule's message: "feature #k+1 (id N): value nan is not a finite float32". */
void wisp__batch_nonfinite_msg(char *buf, size_t cap, size_t k, uint64_t id, float v);

#endif /* WISP_BATCH_H */
