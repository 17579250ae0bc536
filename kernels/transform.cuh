/* transform.cuh — the contract between the host side of the GPU transform (engine/cuda/cuda_transform.c, plain C)
 * and its kernels (kernels/transform.cu). */
#ifndef WISP_KERNELS_TRANSFORM_CUH
#define WISP_KERNELS_TRANSFORM_CUH

#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A node of a feature-column description (transform/columns.h's struct wisp_node),
 * flattened into plain arrays the device reads. Offsets index the plan's
 * shared arrays (bounds, keys, vocabulary tables). */
typedef struct wisp_tnode {
    int32_t kind;                /* WISP_NODE_* */
    int32_t input;               /* numeric, hash, vocabulary, identity */
    int32_t norm;                /* WISP_NORM_* */
    int32_t source;              /* bucketized: its numeric node */
    float norm_a, norm_b;
    uint32_t bounds_off, nbounds;
    uint64_t buckets, magic_lo, magic_hi, pow2_mask;
    int64_t default_value;
    uint64_t num_oov;
    int32_t has_default;
    uint32_t vocab_n, vocab_mask, vocab_slots_off, vocab_ent_off;
    uint32_t keys_off, nkeys;
    uint32_t pad;
    uint64_t hash_key;
} wisp_tnode;

typedef struct wisp_tcol {
    uint32_t node;
    uint32_t pad;
    uint64_t offset;
} wisp_tcol;

/* One raw input on the device: the arrays of wisp_raw_input, and the
 * Fingerprint64 of every value of a string input that needs them. */
typedef struct wisp_tinput {
    int32_t dtype;               /* WISP_INPUT_* */
    int32_t sparse;
    int32_t need_fp;
    uint32_t n;                  /* values */
    const uint32_t *indptr;     /* sparse: rows + 1 */
    const void *vals;            /* float, int64_t, or the string bytes */
    const uint32_t *str_off;     /* strings: n + 1 */
    uint64_t *fp;                /* need_fp strings: n fingerprints */
} wisp_tinput;

/* Device pointers of a compiled description. keys[k] = (raw << 31) | index. */
typedef struct wisp_tplan {
    const wisp_tnode *nodes;
    const wisp_tcol *cols;
    const float *bounds;
    const uint32_t *keys;
    const uint32_t *vocab_slots; /* entry + 1, 0 = empty */
    const uint64_t *vocab_hash;
    const int64_t *vocab_int;
    const uint32_t *vocab_soff, *vocab_slen;
    const char *vocab_bytes;
    uint32_t nnodes, ncols, ninputs;
    uint32_t pad;
} wisp_tplan;

/* One batch of raw rows on the device. */
typedef struct wisp_traw {
    const wisp_tinput *in;       /* device array of ninputs */
    const uint8_t *skip;         /* rows bad in the raw batch (1), or NULL when none */
    uint32_t rows;               /* a launch covers rows [row0, rows) */
    uint32_t row0;
} wisp_traw;

/* Counters a launch adds to (device memory): bad rows, out-of-range ids, features. */
typedef struct wisp_tcount {
    unsigned long long bad, oor, nnz, pad;
} wisp_tcount;

/* Fingerprint64 of every value of the string inputs with need_fp. in_host
 * is the host copy of the device's input array (to read n and the pointers);
 * lo/hi (both NULL: every value) limit input i to values [lo[i], hi[i]). */
int wisp_k_fingerprints(const wisp_tinput *in_host, uint32_t ninputs, const uint32_t *lo, const uint32_t *hi,
                        cudaStream_t stream);

/* Raw rows -> probabilities, without materializing ids: out[r] =
 * sigmoid(bias + sum of w[id] (* value)), NaN for a bad row. weights in
 * dtype (WISP_F32/F16/I8, i8 times scale); ids >= num_features ignored and counted. */
int wisp_k_xf_score(const wisp_tplan *plan, const wisp_traw *raw, const void *weights, int dtype, float scale,
                    uint64_t num_features, double bias, float *out, wisp_tcount *cnt, cudaStream_t stream);

/* The transform into CSR: count (features and valued features per row, a bad flag),
 * scan, fill. nb_row[r] = all features of row r, nv_row[r] = its valued ones (numeric
 * columns), bad[r] = 1 for a row the transform finds bad (and skip rows: 2). */
int wisp_k_xf_count(const wisp_tplan *plan, const wisp_traw *raw, uint32_t *n_row, uint32_t *nv_row, uint8_t *bad,
                    cudaStream_t stream);
/* Exclusive prefix sums of n_row and nv_row into indptr[rows+1] and val_ptr[rows+1];
 * temp is scratch of wisp_k_scan_bytes(rows) bytes. */
size_t wisp_k_scan_bytes(uint32_t rows);
int wisp_k_scan(const uint32_t *n_row, const uint32_t *nv_row, uint32_t *indptr, uint32_t *val_ptr, uint32_t rows,
                void *temp, size_t temp_bytes, cudaStream_t stream);
/* Row r's features: valued ids at ids[indptr[r] ..] (values at vals[val_ptr[r] ..]), then binary ids. */
int wisp_k_xf_fill(const wisp_tplan *plan, const wisp_traw *raw, const uint32_t *indptr, const uint32_t *val_ptr,
                   uint32_t *ids, float *vals, cudaStream_t stream);

/* Test hook: Fingerprint64 of n strings (bytes + off[n+1]) on the device into fp. */
int wisp_k_fp_strings(const char *bytes, const uint32_t *off, uint32_t n, uint64_t *fp, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* WISP_KERNELS_TRANSFORM_CUH */
