// score.cu — scoring kernels: gather + sum + bias + sigmoid over CSR rows (f32/f16/i8 tables), the random-read probe, a
// trap for fault tests.
//
// Layers, ggml style: __global__ kernels -> static launchers taking a stream ->
// extern "C" entry points (score.cuh) that check their arguments. One kernel
// template serves every dtype and value mode; the dtype is dispatched once per
// launch, never by macro copies.
//
// Work split: a sub-warp of L lanes (4, 8, 16 or 32, picked from the mean row
// width) scores one row. Each lane takes features lane, lane+L, ... and keeps
// UNROLL independent id loads and then UNROLL independent weight gathers in
// flight before it uses any of them; the L partial sums meet through a
// shuffle reduction. Lanes whose row is past the end do no loads but still
// join the shuffles (every shuffle uses the full mask), so no thread exits
// early.
//
// Arithmetic: the CPU's (score_cpu.c), so the GPU is safe for every table the
// loader accepts: each weight and value widened to double, product and sum in
// double (__dmul_rn/__dadd_rn: no contraction into an FMA, as on the CPU),
// the int8 scale applied to the double sum, the sigmoid in double. A float sum
// would overflow for products beyond FLT_MAX (weights ~3e38 times values ~10) and
// give 0, 1 or NaN where the CPU is finite; the broadcast shards' partial sums
// are doubles for the same reason. Cost (estimated, not measured): the
// kernel is bound by random weight reads (~0.85 ms for 1M rows x 39 features,
// kernels/README.md); 39M FP64 multiplies and adds are ~2 us at the H200's FP64
// rate (34 TFLOP/s vector, 67 tensor), the FP64 exp is once a row: no
// measurable change at 1M rows.
#include "score.cuh"
#include "wisp.h"

#include <cuda_fp16.h>

namespace {

constexpr int BLOCK = WISP_K_BLOCK;
constexpr int UNROLL = 4;

using wisp_k::weight;
using wisp_k::sigmoid;

// ---- the score kernel ----------------------------------------------------------

// Where the batch's arrays are read from: global memory through the read-only
// path, or shared memory (the tiny kernel copies its launch parameters there).
struct from_global {
    template <typename T> static __device__ __forceinline__ T ld(const T *p) { return __ldg(p); }
};
struct from_shared {
    template <typename T> static __device__ __forceinline__ T ld(const T *p) { return *p; }
};

// Row r, lane `lane` of its sub-warp. Every thread of the warp must call this
// (the shuffles use the full mask); rows past the end do no loads.
// SH: the weights are in shards t (wisp_kshards), picked per id by its high bits with
// selects over constant indices (a dynamic index into kernel parameters would go
// through local memory); else one table at p.weights for ids [id_lo, id_lo + id_span).
template <typename W, int VM, int L, bool SH, typename LD>
__device__ __forceinline__ void score_rows(const wisp_kparams &p, const wisp_kshards *t, uint32_t r, uint32_t lane,
                                           uint32_t rows, uint32_t nnz, uint32_t nvals, uint32_t ptr_base,
                                           uint32_t val_base, unsigned long long *slots = nullptr, uint32_t seq = 0)
{
    static_assert(L == 4 || L == 8 || L == 16 || L == 32, "lanes per row");
    const bool active = r < rows;

    // the row's slice, clamped so a malformed batch never reads out of bounds
    uint32_t start = 0, end = 0, vstart = 0, nv = 0;
    if (active) {
        uint32_t a = min(LD::ld(p.indptr + r) - ptr_base, nnz);
        uint32_t b = min(LD::ld(p.indptr + r + 1) - ptr_base, nnz);
        start = a;
        end = b < a ? a : b;
        if (VM == WISP_KV_MIXED) {
            uint32_t va = min(LD::ld(p.val_ptr + r) - val_base, nvals);
            uint32_t vb = min(LD::ld(p.val_ptr + r + 1) - val_base, nvals);
            vstart = va;
            nv = vb < va ? 0 : min(vb - va, end - start);
        }
    }

    double acc = 0.0;                               // as the CPU: products and sum in double
    uint32_t oor = 0;
    for (uint32_t k0 = start + lane; k0 < end; k0 += UNROLL * L) {
        uint32_t id[UNROLL];
        float v[UNROLL], w[UNROLL];
        bool ok[UNROLL], in[UNROLL];
#pragma unroll
        for (int j = 0; j < UNROLL; j++) {          // UNROLL coalesced id (and value) loads
            const uint32_t k = k0 + j * L;
            ok[j] = k < end;
            id[j] = ok[j] ? LD::ld(p.ids + k) : 0u;
            if (VM == WISP_KV_ALL) {
                v[j] = ok[j] ? LD::ld(p.vals + k) : 0.f;
            } else if (VM == WISP_KV_MIXED) {
                const uint32_t o = k - start;
                v[j] = (ok[j] && o < nv) ? LD::ld(p.vals + vstart + o) : 1.f;
            } else {
                v[j] = 1.f;
            }
        }
#pragma unroll
        for (int j = 0; j < UNROLL; j++) {          // UNROLL independent random gathers
            if (SH) {
                in[j] = ok[j] && id[j] < p.num_features;
                const uint32_t q = id[j] >> t->shift;
                const void *base = t->w[0];
#pragma unroll
                for (int s = 1; s < WISP_K_MAX_SHARDS; s++)
                    if (q == static_cast<uint32_t>(s)) base = t->w[s];
                w[j] = in[j] ? weight<W>::load(base, id[j] - (q << t->shift)) : 0.f;
            } else {
                const uint32_t rel = id[j] - p.id_lo;
                in[j] = ok[j] && rel < p.id_span;
                w[j] = in[j] ? weight<W>::load(p.weights, rel) : 0.f;
            }
            oor += (ok[j] && id[j] >= p.num_features) ? 1u : 0u;
        }
        wisp_k::add_products(acc, in, w, v);
    }

    wisp_k::lanes_sum<L>(acc, oor);

    if (active && lane == 0 && slots) {
        // the tiny kernel's answer: one aligned 8-byte store to mapped host memory, {probability,
        // seq << 12 | out-of-range ids}, which the host sees whole (no fence, no flag; see wisp_ktiny)
        const float y = sigmoid(p.bias + acc * p.scale);
        const uint32_t hi = (seq << WISP_TINY_OOR_BITS) | min(oor, (1u << WISP_TINY_OOR_BITS) - 1u);
        *reinterpret_cast<volatile unsigned long long *>(slots + r) =
            static_cast<unsigned long long>(__float_as_uint(y)) | (static_cast<unsigned long long>(hi) << 32);
    } else if (active && lane == 0) {
        const double z = acc * p.scale;
        if (p.partial) p.part[r] = z;
        else p.out[r] = sigmoid(p.bias + z);
        if (p.oor_rows) p.oor_rows[r] = oor;
        if (p.oor && oor) atomicAdd(p.oor, static_cast<unsigned long long>(oor));
    }
}

template <typename W, int VM, int L, bool SH>
__global__ void __launch_bounds__(BLOCK) score_kernel(const wisp_kparams p, const __grid_constant__ wisp_kshards t)
{
    const uint32_t r = (blockIdx.x * static_cast<uint32_t>(BLOCK) + threadIdx.x) / L;
    const uint32_t lane = threadIdx.x & (L - 1);
    uint32_t rows = p.rows, nnz = p.nnz, nvals = p.nvals, ptr_base = p.ptr_base, val_base = p.val_base;
    if (p.hdr) {                                    // sizes of this batch, not of the graph's bucket
        rows = min(__ldg(p.hdr), p.rows);
        nnz = min(__ldg(p.hdr + 1), p.nnz);          // p.nnz, p.nvals: the bucket's capacities
        nvals = min(__ldg(p.hdr + 2), p.nvals);
        ptr_base = __ldg(p.hdr + 3);
        val_base = __ldg(p.hdr + 4);
    }
    score_rows<W, VM, L, SH, from_global>(p, &t, r, lane, rows, nnz, nvals, ptr_base, val_base);
}

// The tiny batch arrives in the launch's parameters: copy it to shared memory, then score.
template <typename W, int VM, int L>
__global__ void __launch_bounds__(BLOCK) tiny_kernel(const __grid_constant__ wisp_ktiny t)
{
    __shared__ uint32_t sw[WISP_TINY_WORDS];
    const uint32_t n = min(t.nwords, static_cast<uint32_t>(WISP_TINY_WORDS));
    for (uint32_t i = threadIdx.x; i < n; i += BLOCK) sw[i] = t.words[i];
    __syncthreads();
    wisp_kparams p = t.p;
    p.indptr = sw + t.rp_off;
    p.ids = sw + t.ids_off;
    p.val_ptr = sw + t.vp_off;
    p.vals = reinterpret_cast<const float *>(sw + t.vals_off);
    const uint32_t r = (blockIdx.x * static_cast<uint32_t>(BLOCK) + threadIdx.x) / L;
    score_rows<W, VM, L, false, from_shared>(p, nullptr, r, threadIdx.x & (L - 1), p.rows, p.nnz, p.nvals,
                                             p.ptr_base, p.val_base, t.slots, t.seq);
}

template <typename W, int VM>
cudaError_t launch_tiny(const wisp_ktiny &t, int lanes, cudaStream_t s)
{
    const uint64_t threads = static_cast<uint64_t>(t.p.rows) * static_cast<uint64_t>(lanes);
    const unsigned blocks = static_cast<unsigned>((threads + BLOCK - 1) / BLOCK);
    switch (lanes) {
    case 4:  tiny_kernel<W, VM, 4><<<blocks, BLOCK, 0, s>>>(t); break;
    case 8:  tiny_kernel<W, VM, 8><<<blocks, BLOCK, 0, s>>>(t); break;
    case 16: tiny_kernel<W, VM, 16><<<blocks, BLOCK, 0, s>>>(t); break;
    case 32: tiny_kernel<W, VM, 32><<<blocks, BLOCK, 0, s>>>(t); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

template <typename W>
cudaError_t launch_tiny_mode(const wisp_ktiny &t, int value_mode, int lanes, cudaStream_t s)
{
    switch (value_mode) {
    case WISP_KV_NONE:  return launch_tiny<W, WISP_KV_NONE>(t, lanes, s);
    case WISP_KV_ALL:   return launch_tiny<W, WISP_KV_ALL>(t, lanes, s);
    case WISP_KV_MIXED: return launch_tiny<W, WISP_KV_MIXED>(t, lanes, s);
    default:            return cudaErrorInvalidValue;
    }
}

template <typename W, int VM, bool SH>
cudaError_t launch_lanes(const wisp_kparams &p, const wisp_kshards &t, int lanes, cudaStream_t s)
{
    const uint64_t threads = static_cast<uint64_t>(p.rows) * static_cast<uint64_t>(lanes);
    const unsigned blocks = static_cast<unsigned>((threads + BLOCK - 1) / BLOCK);
    switch (lanes) {
    case 4:  score_kernel<W, VM, 4, SH><<<blocks, BLOCK, 0, s>>>(p, t); break;
    case 8:  score_kernel<W, VM, 8, SH><<<blocks, BLOCK, 0, s>>>(p, t); break;
    case 16: score_kernel<W, VM, 16, SH><<<blocks, BLOCK, 0, s>>>(p, t); break;
    case 32: score_kernel<W, VM, 32, SH><<<blocks, BLOCK, 0, s>>>(p, t); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

template <typename W, bool SH>
cudaError_t launch_mode(const wisp_kparams &p, const wisp_kshards &t, int value_mode, int lanes, cudaStream_t s)
{
    switch (value_mode) {
    case WISP_KV_NONE:  return launch_lanes<W, WISP_KV_NONE, SH>(p, t, lanes, s);
    case WISP_KV_ALL:   return launch_lanes<W, WISP_KV_ALL, SH>(p, t, lanes, s);
    case WISP_KV_MIXED: return launch_lanes<W, WISP_KV_MIXED, SH>(p, t, lanes, s);
    default:            return cudaErrorInvalidValue;
    }
}

template <bool SH>
cudaError_t launch_dtype(const wisp_kparams &p, const wisp_kshards &t, int dtype, int value_mode, int lanes,
                         cudaStream_t s)
{
    if (lanes == 0) lanes = wisp_k_lanes_for(static_cast<double>(p.nnz) / p.rows);
    switch (dtype) {
    case WISP_F32: return launch_mode<float, SH>(p, t, value_mode, lanes, s);
    case WISP_F16: return launch_mode<__half, SH>(p, t, value_mode, lanes, s);
    case WISP_I8:  return launch_mode<int8_t, SH>(p, t, value_mode, lanes, s);
    default:       return cudaErrorInvalidValue;
    }
}

// ---- the probe: the same random reads, nothing else ----------------------------

template <typename W>
__global__ void __launch_bounds__(BLOCK) probe_kernel(const uint32_t *ids, uint32_t nnz, const void *w,
                                                      uint32_t span, float *sink)
{
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * BLOCK;
    uint64_t k = static_cast<uint64_t>(blockIdx.x) * BLOCK + threadIdx.x;
    const uint32_t last = span - 1;
    float acc = 0.f;
    for (; k + 3 * stride < nnz; k += 4 * stride) {
        uint32_t i[4];
#pragma unroll
        for (int j = 0; j < 4; j++) i[j] = min(__ldg(ids + k + j * stride), last);
        float x[4];
#pragma unroll
        for (int j = 0; j < 4; j++) x[j] = weight<W>::load(w, i[j]);
#pragma unroll
        for (int j = 0; j < 4; j++) acc += x[j];
    }
    for (; k < nnz; k += stride) acc += weight<W>::load(w, min(__ldg(ids + k), last));
    if (acc == -1.2345e-30f) sink[blockIdx.x] = acc;   // never true in practice; keeps the reads alive
}

__global__ void trap_kernel(void) { __trap(); }

int probe_blocks(void)
{
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0)
        sms = 132;
    return sms * (2048 / BLOCK);
}

} // namespace

// ---- entry points ----------------------------------------------------------------

extern "C" int wisp_k_lanes_for(double w)
{
    // measured on the H200 at 39 features a row (kernels/README.md): 16 lanes 0.845 ms,
    // 32: 0.845, 8: 0.873, 4: 0.916 -- more rows in flight per warp beat fuller lanes
    return w <= 8.0 ? 4 : w <= 24.0 ? 8 : w <= 96.0 ? 16 : 32;
}

// the arrays a launch of p needs (t: the shards, or NULL for p->weights)
static bool params_ok(const wisp_kparams *p, const wisp_kshards *t, int value_mode)
{
    if (!p || (p->partial ? !p->part : !p->out) || !p->indptr || (p->nnz && !p->ids)) return false;
    if (value_mode == WISP_KV_ALL && p->nnz && !p->vals) return false;
    if (value_mode == WISP_KV_MIXED && (!p->val_ptr || (p->nvals && !p->vals))) return false;
    if (!t) return !p->nnz || p->weights;
    if (t->n == 0 || t->n > WISP_K_MAX_SHARDS || t->shift > 31) return false;
    // every id below num_features must land in a shard that exists
    if (p->num_features && (static_cast<uint64_t>(p->num_features) - 1) >> t->shift >= t->n) return false;
    for (uint32_t i = 0; i < t->n; i++)
        if (!t->w[i]) return false;
    return true;
}

extern "C" int wisp_k_score(const wisp_kparams *p, int dtype, int value_mode, int lanes, cudaStream_t stream)
{
    if (!params_ok(p, nullptr, value_mode)) return cudaErrorInvalidValue;
    if (p->rows == 0) return cudaSuccess;
    const wisp_kshards none = {};
    return launch_dtype<false>(*p, none, dtype, value_mode, lanes, stream);
}

extern "C" int wisp_k_score_shards(const wisp_kparams *p, const wisp_kshards *t, int dtype, int value_mode,
                                   int lanes, cudaStream_t stream)
{
    if (!t || !params_ok(p, t, value_mode)) return cudaErrorInvalidValue;
    if (p->rows == 0) return cudaSuccess;
    wisp_kshards u = *t;
    for (uint32_t i = t->n; i < WISP_K_MAX_SHARDS; i++) u.w[i] = t->w[0];   // never picked; no NULL bases
    return launch_dtype<true>(*p, u, dtype, value_mode, lanes, stream);
}

extern "C" int wisp_k_tiny(const wisp_ktiny *t, int dtype, int value_mode, int lanes, cudaStream_t stream)
{
    if (!t || !t->p.out || (t->p.nnz && !t->p.weights) || t->nwords > WISP_TINY_WORDS) return cudaErrorInvalidValue;
    // every array must lie inside words[]
    const uint64_t rp_end = static_cast<uint64_t>(t->rp_off) + t->p.rows + 1;
    const uint64_t ids_end = static_cast<uint64_t>(t->ids_off) + t->p.nnz;
    const uint64_t vp_end = value_mode == WISP_KV_MIXED ? static_cast<uint64_t>(t->vp_off) + t->p.rows + 1 : 0;
    const uint64_t vals_end = value_mode == WISP_KV_NONE ? 0 : static_cast<uint64_t>(t->vals_off) + t->p.nvals;
    if (rp_end > t->nwords || ids_end > t->nwords || vp_end > t->nwords || vals_end > t->nwords)
        return cudaErrorInvalidValue;
    if (t->p.rows == 0) return cudaSuccess;
    if (lanes == 0) lanes = wisp_k_lanes_for(static_cast<double>(t->p.nnz) / t->p.rows);
    switch (dtype) {
    case WISP_F32: return launch_tiny_mode<float>(*t, value_mode, lanes, stream);
    case WISP_F16: return launch_tiny_mode<__half>(*t, value_mode, lanes, stream);
    case WISP_I8:  return launch_tiny_mode<int8_t>(*t, value_mode, lanes, stream);
    default:       return cudaErrorInvalidValue;
    }
}

extern "C" int wisp_k_probe_blocks(void) { return probe_blocks(); }

extern "C" int wisp_k_min_capability(void)
{
#ifdef __CUDA_ARCH_LIST__
    static const int archs[] = { __CUDA_ARCH_LIST__ };   // sorted ascending: 900 for sm_90
    return archs[0] / 10;
#else
    return 80;
#endif
}

extern "C" int wisp_k_probe(const uint32_t *ids, uint32_t nnz, const void *weights, int dtype, uint32_t span,
                            float *sink, cudaStream_t stream)
{
    if (!ids || !weights || !sink || span == 0) return cudaErrorInvalidValue;
    if (nnz == 0) return cudaSuccess;
    const int blocks = probe_blocks();
    switch (dtype) {
    case WISP_F32: probe_kernel<float><<<blocks, BLOCK, 0, stream>>>(ids, nnz, weights, span, sink); break;
    case WISP_F16: probe_kernel<__half><<<blocks, BLOCK, 0, stream>>>(ids, nnz, weights, span, sink); break;
    case WISP_I8:  probe_kernel<int8_t><<<blocks, BLOCK, 0, stream>>>(ids, nnz, weights, span, sink); break;
    default:       return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" int wisp_k_trap(cudaStream_t stream)
{
    trap_kernel<<<1, 1, 0, stream>>>();
    return cudaGetLastError();
}
