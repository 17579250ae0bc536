/* score.cuh — the scoring kernels' contract with the CUDA host code (engine/cuda/, plain C), and their shared
 * device code. */
#ifndef WISP_KERNELS_SCORE_CUH
#define WISP_KERNELS_SCORE_CUH

#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One launch scores rows [0, rows) of a CSR slice that lives in memory the
 * device can read (device memory, or mapped pinned host memory in the
 * zero-copy mode). Offsets in indptr/val_ptr are the batch's own; the
 * slice's first id is at ids[0], so the kernel subtracts ptr_base (and
 * val_base for vals in the mixed mode). Every index is clamped to nnz /
 * nvals: a malformed slice can never make the kernel read out of bounds. */
typedef struct wisp_kparams {
    const uint32_t *indptr;    /* rows + 1 entries */
    const uint32_t *ids;        /* nnz entries */
    const uint32_t *val_ptr;    /* rows + 1 entries; value mode MIXED only */
    const float    *vals;       /* ALL: nnz entries; MIXED: nvals entries; NONE: NULL */
    const void     *weights;    /* the table (or a shard of it): element i is the weight of id id_lo + i */
    float          *out;        /* rows floats: probabilities (partial == 0) */
    double         *part;       /* rows doubles: partial sums scale * sum (partial != 0) */
    unsigned long long *oor;    /* if not NULL: atomically += ids >= num_features */
    uint32_t       *oor_rows;   /* if not NULL: oor_rows[r] = out-of-range ids of row r (zero-copy mode) */
    /* if not NULL: rows, nnz, nvals, ptr_base, val_base are read from hdr[0..4]
     * on the device (a CUDA graph captured for a bucket of sizes); rows above
     * is then the bucket's largest row count and sizes the grid */
    const uint32_t *hdr;
    uint32_t rows;
    uint32_t ptr_base;          /* indptr value of the slice's first id */
    uint32_t val_base;          /* val_ptr value of the slice's first value (MIXED) */
    uint32_t nnz;               /* ids in the slice */
    uint32_t nvals;             /* values in the slice (MIXED) */
    uint32_t id_lo;             /* ids in [id_lo, id_lo + id_span) are looked up */
    uint32_t id_span;
    uint32_t num_features;      /* ids >= num_features are out of range (counted, skipped) */
    int   partial;              /* 0: out = sigmoid(bias + scale * sum); 1: part = scale * sum */
    /* The sum is the CPU's (score_cpu.c): each weight and value widened to
     * double, their product and the running sum in double, the int8 scale
     * applied to the double sum, the sigmoid in double, rounded to float
     * once. So a product that overflows float (3e38 * 10) or a scale near
     * FLT_MAX gives the CPU's finite answer, never 0, 1 or NaN by overflow. */
    double bias;
    double scale;               /* int8 dequantization scale; 1 otherwise */
} wisp_kparams;

/* A table split by id range over devices that read each other's memory
 * (peer access over NVLink, or one device): shard i holds the weights of ids
 * [i << shift, (i + 1) << shift) at w[i], which may be another GPU's memory.
 * Rows are not sent to the shards: the kernel reads each weight where it lives. */
#define WISP_K_MAX_SHARDS 8
typedef struct wisp_kshards {
    const void *w[WISP_K_MAX_SHARDS];
    uint32_t n;                 /* shards in use, 1 .. WISP_K_MAX_SHARDS */
    uint32_t shift;             /* 0 .. 31 */
} wisp_kshards;

/* A tiny batch carried inside the launch itself (kernel parameters, under
 * 4 KB): indptr, ids, val_ptr, vals packed in words[] at the given word
 * offsets; p's pointers to them are ignored, p.out / p.oor_rows point at
 * mapped pinned host memory. No copy in, no copy out: one launch. */
#define WISP_TINY_WORDS 960
/* A tiny row has at most WISP_TINY_WORDS ids, so its out-of-range count fits in 12 bits. */
#define WISP_TINY_OOR_BITS 12
#define WISP_TINY_SEQ_MASK ((1u << (32 - WISP_TINY_OOR_BITS)) - 1u)
typedef struct wisp_ktiny {
    wisp_kparams p;
    /* if not NULL (mapped host memory, 8-byte aligned, rows entries): instead of p.out and
     * p.oor_rows, row r's answer is ONE aligned 8-byte store slots[r] = float bits of the
     * probability | (seq << 12 | out-of-range ids) << 32, which reaches host memory whole
     * (the idea of NCCL's low-latency protocol: data and flag in one store). The host clears
     * the slots, launches, and spins until every slot carries seq (1 .. WISP_TINY_SEQ_MASK):
     * no __threadfence_system, no separate flag (on the H200, 1.2 us less than fence + flag:
     * bench_small_gpu --floors, piece_write_ll against piece_write_fence_flag) */
    unsigned long long *slots;
    uint32_t seq;
    uint32_t nwords, rp_off, ids_off, vp_off, vals_off;
    uint32_t words[WISP_TINY_WORDS];
} wisp_ktiny;

/* Threads a block of every kernel here; the tiny kernel runs ceil(rows * lanes / WISP_K_BLOCK) blocks. */
#define WISP_K_BLOCK 256

/* Value modes (the same numbers as WISP_VALUES_* in engine/batch/batch.h). */
enum { WISP_KV_NONE = 0, WISP_KV_ALL = 1, WISP_KV_MIXED = 2 };

/* The lanes per row the kernel would pick for a mean row width. */
int wisp_k_lanes_for(double mean_row_width);

/* Launch the score kernel for dtype (WISP_F32/F16/I8), value mode and
 * lanes (4, 8, 16 or 32; 0 = pick from nnz / rows) on stream. Returns a
 * cudaError_t (cudaSuccess = 0); checks its arguments, launches nothing
 * for rows == 0. */
int wisp_k_score(const wisp_kparams *p, int dtype, int value_mode, int lanes, cudaStream_t stream);

/* As wisp_k_score, with the weights read from the shards t: p->weights,
 * id_lo and id_span are ignored, every id below num_features is looked up. */
int wisp_k_score_shards(const wisp_kparams *p, const wisp_kshards *t, int dtype, int value_mode, int lanes,
                        cudaStream_t stream);

/* Launch the tiny-batch kernel (see wisp_ktiny); lanes as for wisp_k_score. */
int wisp_k_tiny(const wisp_ktiny *t, int dtype, int value_mode, int lanes, cudaStream_t stream);

/* The ceiling probe: read weights[ids[k] mod span] for every k, nothing
 * else (the same random reads as scoring, no rows, no values); one float
 * per block goes to sink[blockIdx] so the reads cannot be optimised away.
 * sink needs wisp_k_probe_blocks() floats. */
int wisp_k_probe(const uint32_t *ids, uint32_t nnz, const void *weights, int dtype, uint32_t span,
                 float *sink, cudaStream_t stream);
int wisp_k_probe_blocks(void);
/* The oldest compute capability the kernels were built for (major * 10 + minor: 90 for
 * sm_90), from nvcc's __CUDA_ARCH_LIST__ (the Makefile's CUDA_ARCHS). A device below it
 * has no kernel image (PTX runs only on its own architecture and newer). */
int wisp_k_min_capability(void);

/* Test hook: a kernel that traps, leaving a sticky error on the device. */
int wisp_k_trap(cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
/* ---- device code the scoring kernels share (score.cu, score_device.cu; transform_rows.cuh's sigmoid) ---- */
#include <cuda_fp16.h>

namespace wisp_k {

// The weights: one read-only load per dtype, dequantization outside the sum.
template <typename W> struct weight;
template <> struct weight<float> {
    static __device__ __forceinline__ float load(const void *w, uint32_t i)
    {
        return __ldg(static_cast<const float *>(w) + i);
    }
};
template <> struct weight<__half> {
    static __device__ __forceinline__ float load(const void *w, uint32_t i)
    {
        return __half2float(__ushort_as_half(__ldg(static_cast<const unsigned short *>(w) + i)));
    }
};
template <> struct weight<int8_t> {
    // the int8 scale multiplies the row's sum once, after the loop
    static __device__ __forceinline__ float load(const void *w, uint32_t i)
    {
        return static_cast<float>(__ldg(static_cast<const signed char *>(w) + i));
    }
};

// The CPU's sigmoid (score_cpu.c): exp of a non-positive number only, in double,
// rounded to float once; NaN stays NaN.
__device__ __forceinline__ float sigmoid(double z)
{
    if (z >= 0) return static_cast<float>(1.0 / (1.0 + exp(-z)));
    const double e = exp(z);
    return static_cast<float>(e / (1.0 + e));
}

// Adds to acc the products w[j] * v[j] of the features j with in[j], in order: widen, multiply, add,
// each rounded as the CPU does (no fused multiply-add).
template <int N>
__device__ __forceinline__ void add_products(double &acc, const bool (&in)[N], const float (&w)[N],
                                             const float (&v)[N])
{
#pragma unroll
    for (int j = 0; j < N; j++)
        if (in[j]) acc = __dadd_rn(acc, __dmul_rn(static_cast<double>(w[j]), static_cast<double>(v[j])));
}

// The L lanes of a row meet (a shuffle reduction): each ends with the row's sum and out-of-range
// count. Every thread of the warp calls it (the shuffles use the full mask).
template <int L>
__device__ __forceinline__ void lanes_sum(double &acc, uint32_t &oor)
{
#pragma unroll
    for (int off = L / 2; off > 0; off >>= 1) {
        acc += __shfl_xor_sync(0xffffffffu, acc, off, L);
        oor += __shfl_xor_sync(0xffffffffu, oor, off, L);
    }
}

} // namespace wisp_k
#endif /* __CUDACC__ */
#endif
