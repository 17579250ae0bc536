// transform_rows.cuh — the GPU transform's per-row evaluator, shared by the translation units of the transform
// (kernels/transform.cu: fingerprints, count, fill, scan) and of the fused kernel
// (kernels/transform_score_{f32,f16,i8}.cu, one weight dtype each, so they build in parallel).
//
// The same per-row evaluator (columns in order; the fused kernel splits a row's columns
// over up to 16 lanes) serves three kernels through a visitor: counting a row's features, writing them (CSR, as
// wisp_transform lays a row out: numeric columns' valued features first, then
// the others in column order), and summing their weights straight into a
// probability (no ids in memory at all). It follows engine/transform/transform_cpu.c's
// row-wise reference (wisp__transform_rowwise) step by step, including the
// order in which a crossed column's keys are judged (a key with no value ends
// the cross before later keys can make the row bad), so a row is bad here
// exactly when it is bad there. Float arithmetic is float32 with explicit
// round-to-nearest intrinsics (no FMA contraction), as the CPU computes it.
// Everything here is in an anonymous namespace: each translation unit compiles only
// the templates it instantiates.
#ifndef WISP_KERNELS_TRANSFORM_ROWS_CUH
#define WISP_KERNELS_TRANSFORM_ROWS_CUH
#include "transform/farmhash.h" // Fingerprint64 (wisp__fingerprint64) and FingerprintCat64 (wisp__cat64), as on the CPU
#include "transform/bucketize.h" // bucketized columns' upper_bound (wisp__bucketize), as on the CPU
#include "score.cuh"
#include "transform.cuh"
#include "wisp.h"

#include <cuda_fp16.h>

namespace {

// transform/columns.h's enums (C headers with <stdatomic.h> do not compile as C++; cuda_transform.c checks these)
enum { NODE_NUMERIC = 0, NODE_BUCKETIZED, NODE_HASH, NODE_VOCAB, NODE_IDENTITY, NODE_CROSSED };
enum { NORM_NONE = 0, NORM_STANDARD = 1, NORM_AFFINE = 2 };

constexpr int BLOCK = 128;
constexpr uint32_t MAX_ROW = WISP_MAX_ROW_FEATURES;

// Fingerprint64 of the decimal string of v (TensorFlow's as_string before hashing an integer).
__device__ uint64_t fp_int(int64_t v)
{
    char tmp[24], buf[24];
    uint32_t n = 0;
    uint64_t u = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    do { tmp[n++] = static_cast<char>('0' + u % 10); u /= 10; } while (u);
    uint32_t k = 0;
    if (v < 0) buf[k++] = '-';
    while (n) buf[k++] = tmp[--n];
    return wisp__fingerprint64(buf, k);
}

__device__ __forceinline__ uint64_t mix64(uint64_t x)
{
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

// h % buckets by multiplication (engine/transform/columns_impl.h's fastmod_buckets, used by transform_cpu.c;
// Lemire et al.)
__device__ __forceinline__ uint64_t fastmod(uint64_t h, const wisp_tnode &nd)
{
    if (nd.pow2_mask) return h & nd.pow2_mask;
    // low = M * h mod 2^128, M = (magic_hi, magic_lo)
    const uint64_t low_lo = nd.magic_lo * h;
    const uint64_t low_hi = __umul64hi(nd.magic_lo, h) + nd.magic_hi * h;
    const uint64_t n = nd.buckets;
    const uint64_t bottom = __umul64hi(low_lo, n);
    const uint64_t top_lo = low_hi * n, top_hi = __umul64hi(low_hi, n);
    const uint64_t s = top_lo + bottom;
    return top_hi + (s < top_lo ? 1 : 0);
}

// ---- the per-row evaluator -------------------------------------------------------------

struct Row {
    const wisp_tplan &P;
    const wisp_tinput *in;
    uint32_t row;
};

__device__ __forceinline__ void span(const Row &R, uint32_t input, uint32_t &a, uint32_t &z)
{
    const wisp_tinput &ti = R.in[input];
    if (ti.sparse) { a = ti.indptr[R.row]; z = ti.indptr[R.row + 1]; if (z < a) z = a; }
    else { a = R.row; z = R.row + 1; }
}

__device__ __forceinline__ uint32_t str_len(const wisp_tinput &ti, uint32_t i)
{
    return ti.str_off[i + 1] - ti.str_off[i];
}

__device__ float numeric_value(const Row &R, const wisp_tnode &nd)
{
    const wisp_tinput &ti = R.in[nd.input];
    float x = ti.dtype == WISP_INPUT_FLOAT32 ? static_cast<const float *>(ti.vals)[R.row]
                                              : static_cast<float>(static_cast<const int64_t *>(ti.vals)[R.row]);
    if (nd.norm == NORM_STANDARD) { x = __fsub_rn(x, nd.norm_a); x = __fdiv_rn(x, nd.norm_b); }
    else if (nd.norm == NORM_AFFINE) { x = __fmul_rn(x, nd.norm_a); x = __fadd_rn(x, nd.norm_b); }
    return x;
}

__device__ int64_t vocab_lookup(const wisp_tplan &P, const wisp_tnode &nd, bool str, const char *s, uint32_t len,
                                uint64_t h, int64_t iv)
{
    const uint32_t *slots = P.vocab_slots + nd.vocab_slots_off;
    uint32_t slot = static_cast<uint32_t>(h) & nd.vocab_mask;
    for (uint32_t probe = 0; probe <= nd.vocab_mask; probe++) {
        uint32_t e = slots[slot];
        if (!e) return -1;
        e = e - 1 + nd.vocab_ent_off;
        if (P.vocab_hash[e] == h) {
            if (str) {
                if (P.vocab_slen[e] == len) {
                    const char *v = P.vocab_bytes + P.vocab_soff[e];
                    uint32_t i = 0;
                    while (i < len && v[i] == s[i]) i++;
                    if (i == len) return static_cast<int64_t>(e - nd.vocab_ent_off);
                }
            } else if (P.vocab_int[e] == iv) {
                return static_cast<int64_t>(e - nd.vocab_ent_off);
            }
        }
        slot = (slot + 1) & nd.vocab_mask;
    }
    return -1;
}

// The id of value i of a categorical node's input (hash, vocabulary, identity). bad: an
// identity value out of range with no default.
__device__ int64_t cat_id(const Row &R, const wisp_tnode &nd, uint32_t i, bool &bad)
{
    const wisp_tinput &ti = R.in[nd.input];
    if (ti.dtype == WISP_INPUT_STRING) {
        const uint64_t h = ti.fp[i];
        if (nd.kind == NODE_HASH) return static_cast<int64_t>(fastmod(h, nd));
        const char *s = static_cast<const char *>(ti.vals) + ti.str_off[i];
        int64_t id = vocab_lookup(R.P, nd, true, s, str_len(ti, i), h, 0);
        if (id < 0) id = nd.num_oov ? static_cast<int64_t>(nd.vocab_n + h % nd.num_oov) : nd.default_value;
        return id;
    }
    const int64_t x = static_cast<const int64_t *>(ti.vals)[i];
    if (nd.kind == NODE_HASH) return static_cast<int64_t>(fastmod(fp_int(x), nd));
    if (nd.kind == NODE_VOCAB) {
        int64_t id = vocab_lookup(R.P, nd, false, nullptr, 0, mix64(static_cast<uint64_t>(x)), x);
        if (id < 0) id = nd.num_oov ? static_cast<int64_t>(nd.vocab_n + fp_int(x) % nd.num_oov) : nd.default_value;
        return id;
    }
    if (x >= 0 && static_cast<uint64_t>(x) < nd.buckets) return x;
    if (nd.has_default) return nd.default_value;
    bad = true;
    return 0;
}

// A categorical node's values for this row: [a, a + count) of its input (dense: "" and -1 dropped).
__device__ __forceinline__ void cat_span(const Row &R, const wisp_tnode &nd, uint32_t &a, uint32_t &count)
{
    const wisp_tinput &ti = R.in[nd.input];
    uint32_t z;
    span(R, nd.input, a, z);
    count = z - a;
    if (!ti.sparse) {
        bool missing = ti.dtype == WISP_INPUT_STRING ? str_len(ti, a) == 0
                                                     : static_cast<const int64_t *>(ti.vals)[a] == -1;
        if (missing) count = 0;
    }
}

// A cross key for this row: how many values it has (false: the row is bad), and value i.
struct Key {
    uint32_t code;               // (raw << 31) | index
    uint32_t a, count;
};

__device__ bool key_open(const Row &R, uint32_t code, Key &k)
{
    k.code = code;
    const uint32_t idx = code & 0x7fffffffu;
    if (code >> 31) {
        uint32_t z;
        span(R, idx, k.a, z);
        k.count = z - k.a;
        const wisp_tinput &ti = R.in[idx];
        if (ti.dtype == WISP_INPUT_FLOAT32) {
            const float *v = static_cast<const float *>(ti.vals);
            for (uint32_t i = k.a; i < z; i++) {
                float x = v[i];
                if (!(x > -9223372036854775808.0f && x < 9223372036854775808.0f)) return false;
            }
        }
        return true;
    }
    const wisp_tnode &nd = R.P.nodes[idx];
    if (nd.kind == NODE_BUCKETIZED) { k.a = 0; k.count = 1; return true; }
    cat_span(R, nd, k.a, k.count);
    if (nd.kind == NODE_IDENTITY) {
        bool bad = false;
        for (uint32_t i = 0; i < k.count && !bad; i++) cat_id(R, nd, k.a + i, bad);
        if (bad) return false;
    }
    return true;
}

__device__ uint64_t key_value(const Row &R, const Key &k, uint32_t i)
{
    const uint32_t idx = k.code & 0x7fffffffu;
    if (k.code >> 31) {
        const wisp_tinput &ti = R.in[idx];
        if (ti.dtype == WISP_INPUT_STRING) return ti.fp[k.a + i];
        if (ti.dtype == WISP_INPUT_INT64) return static_cast<uint64_t>(static_cast<const int64_t *>(ti.vals)[k.a + i]);
        return static_cast<uint64_t>(static_cast<int64_t>(static_cast<const float *>(ti.vals)[k.a + i]));
    }
    const wisp_tnode &nd = R.P.nodes[idx];
    if (nd.kind == NODE_BUCKETIZED) {
        const wisp_tnode &src = R.P.nodes[nd.source];
        return wisp__bucketize(R.P.bounds + nd.bounds_off, nd.nbounds, numeric_value(R, src));
    }
    bool bad = false;
    return static_cast<uint64_t>(cat_id(R, nd, k.a + i, bad));
}

// Evaluate column c of the row into the visitor: v.valued(id, x), v.binary(id).
// Returns false when the row is bad.
template <class V>
__device__ bool eval_column(const Row &R, const wisp_tcol &col, V &v)
{
    const wisp_tnode &nd = R.P.nodes[col.node];
    switch (nd.kind) {
    case NODE_NUMERIC: {
        float x = numeric_value(R, nd);
        if (!isfinite(x)) return false;
        v.valued(col.offset, x);
        return true;
    }
    case NODE_BUCKETIZED: {
        const wisp_tnode &src = R.P.nodes[nd.source];
        v.binary(col.offset + wisp__bucketize(R.P.bounds + nd.bounds_off, nd.nbounds, numeric_value(R, src)));
        return true;
    }
    case NODE_HASH: case NODE_VOCAB: case NODE_IDENTITY: {
        uint32_t a, count;
        cat_span(R, nd, a, count);
        for (uint32_t i = 0; i < count; i++) {
            bool bad = false;
            int64_t id = cat_id(R, nd, a + i, bad);
            if (bad) return false;
            if (id >= 0) v.binary(col.offset + static_cast<uint64_t>(id));
        }
        return true;
    }
    case NODE_CROSSED: {
        const uint32_t *keys = R.P.keys + nd.keys_off;
        const uint32_t nk = nd.nkeys;
        uint64_t total = 1;
        Key k;
        for (uint32_t q = 0; q < nk; q++) {            // in order: a key with no value ends the cross
            if (!key_open(R, keys[q], k)) return false;
            total *= k.count;
            if (total == 0) return true;
            if (total > MAX_ROW) return false;
        }
        if (total == 1) {
            uint64_t h = nd.hash_key;
            for (uint32_t q = 0; q < nk; q++) {
                key_open(R, keys[q], k);
                h = wisp__cat64(h, key_value(R, k, 0));
            }
            v.binary(col.offset + fastmod(h, nd));
            return true;
        }
        for (uint64_t n = 0; n < total; n++) {         // the odometer, last key fastest
            uint64_t rem = n, div = total, h = nd.hash_key;
            for (uint32_t q = 0; q < nk; q++) {
                key_open(R, keys[q], k);
                div /= k.count;
                uint32_t i = static_cast<uint32_t>(rem / div);
                rem -= static_cast<uint64_t>(i) * div;
                h = wisp__cat64(h, key_value(R, k, i));
            }
            v.binary(col.offset + fastmod(h, nd));
        }
        return true;
    }
    }
    return false;
}

// The whole row; false when bad (including more than WISP_MAX_ROW_FEATURES features).
template <class V>
__device__ bool eval_row(const Row &R, V &v)
{
    for (uint32_t c = 0; c < R.P.ncols; c++)
        if (!eval_column(R, R.P.cols[c], v)) return false;
    return v.n <= MAX_ROW;
}

// ---- visitors --------------------------------------------------------------------------

template <typename W> struct wload;
template <> struct wload<float> {
    static __device__ __forceinline__ double at(const void *w, uint64_t i)
    {
        return __ldg(static_cast<const float *>(w) + i);
    }
};
template <> struct wload<__half> {
    static __device__ __forceinline__ double at(const void *w, uint64_t i)
    {
        return __half2float(__ldg(static_cast<const __half *>(w) + i));
    }
};
template <> struct wload<int8_t> {
    static __device__ __forceinline__ double at(const void *w, uint64_t i)
    {
        return __ldg(static_cast<const int8_t *>(w) + i);
    }
};

template <typename W>
struct ScoreV {
    const void *w;
    uint64_t nf;
    double acc;
    uint32_t n;
    uint32_t oor;
    __device__ void valued(uint64_t id, float x)
    {
        n++;
        // as the CPU (score_cpu.c): widened, multiplied and added in double, each rounded (no FMA)
        if (id < nf) acc = __dadd_rn(acc, __dmul_rn(wload<W>::at(w, id), static_cast<double>(x)));
        else oor++;
    }
    __device__ void binary(uint64_t id)
    {
        n++;
        if (id < nf) acc = __dadd_rn(acc, wload<W>::at(w, id));
        else oor++;
    }
};

struct CountV {
    uint32_t n, nv;
    __device__ void valued(uint64_t, float) { n++; nv++; }
    __device__ void binary(uint64_t) { n++; }
};

struct FillV {
    uint32_t *ids;               // the row's first id
    float *vals;                 // the row's first value
    uint32_t nv_total;           // valued features of the row (from the count pass)
    uint32_t n, nv;
    __device__ void valued(uint64_t id, float x) { ids[nv] = static_cast<uint32_t>(id); vals[nv] = x; nv++; n++; }
    __device__ void binary(uint64_t id) { ids[nv_total + (n - nv)] = static_cast<uint32_t>(id); n++; }
};

using wisp_k::sigmoid;           // the scoring kernels' (kernels/score.cuh): the CPU's sigmoid

__device__ __forceinline__ void block_add(unsigned long long v, unsigned long long *dst)
{
    // warp sum, one atomic a warp
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0 && v) atomicAdd(dst, v);
}

// ---- kernels ---------------------------------------------------------------------------

// LANES threads a row (a power of two <= 32): lane l evaluates columns l, l + LANES, ...;
// the partial sums, counts and bad flags meet by shuffles. With one thread a row, a
// chunk of a few ten thousand rows would leave most of the GPU idle (each row is a
// long serial chain of gathers); more lanes keep more gathers in flight.
template <typename W, int LANES>
__global__ void __launch_bounds__(BLOCK) score_kernel(const wisp_tplan P, const wisp_traw raw, const void *w,
                                                      uint64_t nf, double bias, double scale, float *out,
                                                      wisp_tcount *cnt)
{
    const uint32_t g = blockIdx.x * BLOCK + threadIdx.x;
    const uint32_t row = raw.row0 + g / LANES, lane = g % LANES;
    const bool live = row < raw.rows && !(raw.skip && raw.skip[row]);
    ScoreV<W> v{ w, nf, 0.0, 0, 0 };
    bool ok = true;
    if (live) {
        Row R{ P, raw.in, row };
        for (uint32_t c = lane; c < P.ncols && ok; c += LANES) ok = eval_column(R, P.cols[c], v);
    }
    double acc = v.acc;
    uint32_t n = v.n, oor = v.oor, bad = ok ? 0 : 1;
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) {
        acc += __shfl_xor_sync(0xffffffffu, acc, o);
        n += __shfl_xor_sync(0xffffffffu, n, o);
        oor += __shfl_xor_sync(0xffffffffu, oor, o);
        bad |= __shfl_xor_sync(0xffffffffu, bad, o);
    }
    unsigned long long cb = 0, co = 0, cn = 0;
    if (row < raw.rows && lane == 0) {
        if (!live) {
            out[row] = __int_as_float(0x7fc00000);
        } else if (bad || n > MAX_ROW) {
            out[row] = __int_as_float(0x7fc00000);
            cb = 1;
        } else {
            if (scale != 1.0) acc *= scale;
            out[row] = sigmoid(bias + acc);
            co = oor;
            cn = n;
        }
    }
    block_add(cb, &cnt->bad);
    block_add(co, &cnt->oor);
    block_add(cn, &cnt->nnz);
}

inline unsigned grid_for(uint64_t n) { return static_cast<unsigned>((n + BLOCK - 1) / BLOCK); }

// The fused kernel for weights of type W: LANES chosen by the number of columns.
template <typename W>
cudaError_t xf_score_launch(const wisp_tplan &plan, const wisp_traw &raw, const void *weights, uint64_t num_features,
                            double bias, double sc, float *out, wisp_tcount *cnt, cudaStream_t stream)
{
    const uint32_t nc = plan.ncols;
    const int lanes = nc >= 96 ? 16 : nc >= 24 ? 8 : nc >= 6 ? 4 : 1;
    const unsigned g = grid_for(static_cast<uint64_t>(raw.rows - raw.row0) * lanes);
    switch (lanes) {
    case 16: score_kernel<W, 16><<<g, BLOCK, 0, stream>>>(plan, raw, weights, num_features, bias, sc, out, cnt); break;
    case 8:  score_kernel<W, 8><<<g, BLOCK, 0, stream>>>(plan, raw, weights, num_features, bias, sc, out, cnt); break;
    case 4:  score_kernel<W, 4><<<g, BLOCK, 0, stream>>>(plan, raw, weights, num_features, bias, sc, out, cnt); break;
    default: score_kernel<W, 1><<<g, BLOCK, 0, stream>>>(plan, raw, weights, num_features, bias, sc, out, cnt); break;
    }
    return cudaGetLastError();
}

} // namespace

// The fused kernel's launchers, one translation unit each (kernels/transform_score_*.cu).
#define WISP_XF_SCORE_ARGS const wisp_tplan &plan, const wisp_traw &raw, const void *weights, uint64_t num_features, \
                           double bias, double sc, float *out, wisp_tcount *cnt, cudaStream_t stream
cudaError_t wisp__k_xf_score_f32(WISP_XF_SCORE_ARGS);
cudaError_t wisp__k_xf_score_f16(WISP_XF_SCORE_ARGS);
cudaError_t wisp__k_xf_score_i8(WISP_XF_SCORE_ARGS);

#endif // WISP_KERNELS_TRANSFORM_ROWS_CUH
