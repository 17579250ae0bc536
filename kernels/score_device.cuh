/* score_device.cuh — the contract between engine/cuda/cuda_device_batch.c (plain C) and the checked CSR kernel of
 * kernels/score_device.cu: a batch in the caller's device memory, validated row by row on the device as it is
 * scored. */
#ifndef WISP_KERNELS_SCORE_DEVICE_CUH
#define WISP_KERNELS_SCORE_DEVICE_CUH

#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A row the kernel refused: NaN in out, listed here (in no order; the host sorts). */
enum { WISP_KD_RANGE = 1,     /* indptr[r] .. indptr[r + 1] is not a range inside [0, nnz] */
       WISP_KD_WIDE = 2,      /* more than WISP_MAX_ROW_FEATURES features */
       WISP_KD_NEG_ID = 3,    /* feature #pos has a negative id (id) */
       WISP_KD_NONFINITE = 4  /* feature #pos (id) has a value that is not finite (val) */ };

typedef struct wisp_kdbad {
    uint32_t row, code, pos;
    int32_t id;
    float val;
} wisp_kdbad;

/* Rows [0, rows) of a CSR batch in the caller's memory, every access checked:
 * row r is scored only when 0 <= indptr[r] <= indptr[r + 1] <= nnz and it has at
 * most WISP_MAX_ROW_FEATURES features (no id of another row is ever read for it);
 * a negative id or a value that is not finite makes the row bad; an id at or beyond
 * num_features is ignored and counted in cnt[0] (good rows only). A bad row gets NaN
 * and one wisp_kdbad entry at bad[atomicAdd(&cnt[1], 1)] (cnt[1] <= rows). */
typedef struct wisp_kdev {
    const void    *indptr;     /* rows + 1 offsets: int32 (rp64 == 0) or int64 */
    int            rp64;
    const int32_t *ids;         /* nnz entries */
    const float   *vals;        /* nnz entries, or NULL: every value is 1 */
    const void    *weights;     /* the whole table, num_features entries of dtype */
    float         *out;         /* rows floats (device memory, or mapped host memory) */
    wisp_kdbad    *bad;         /* rows entries */
    unsigned long long *cnt;    /* [0] out-of-range ids of good rows, [1] bad rows; zeroed by the caller */
    uint32_t rows;
    uint32_t nnz;               /* indptr[rows], already read and checked (<= WISP_MAX_NNZ) by the host */
    uint32_t num_features;
    double   bias;
    double   scale;             /* int8 dequantization scale; 1 otherwise */
} wisp_kdev;

/* Launch on stream (lanes 4, 8, 16, 32 or 0: picked from nnz / rows). Returns a cudaError_t. */
int wisp_k_score_device(const wisp_kdev *p, int dtype, int lanes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
