// score.cu — scoring kernels: gather + sum + bias + sigmoid over CSR rows (f32/f16/i8 tables), the random-read probe, a trap for fault tests.
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
#include "score.cuh"
#include "wisp.h"

#include <cuda_fp16.h>

namespace {

constexpr int BLOCK = 256;
constexpr int UNROLL = 4;

// ---- weights: one read-only load per dtype, dequantization outside the sum --

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

// ---- the score kernel ----------------------------------------------------------

template <typename W, int VM, int L>
__global__ void __launch_bounds__(BLOCK) score_kernel(const wisp_kparams p)
{
    static_assert(L == 4 || L == 8 || L == 16 || L == 32, "lanes per row");
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
    const bool active = r < rows;

    // the row's slice, clamped so a malformed batch never reads out of bounds
    uint32_t start = 0, end = 0, vstart = 0, nv = 0;
    if (active) {
        uint32_t a = min(__ldg(p.row_ptr + r) - ptr_base, nnz);
        uint32_t b = min(__ldg(p.row_ptr + r + 1) - ptr_base, nnz);
        start = a;
        end = b < a ? a : b;
        if (VM == WISP_KV_MIXED) {
            uint32_t va = min(__ldg(p.val_ptr + r) - val_base, nvals);
            uint32_t vb = min(__ldg(p.val_ptr + r + 1) - val_base, nvals);
            vstart = va;
            nv = vb < va ? 0 : min(vb - va, end - start);
        }
    }

    float acc = 0.f;
    uint32_t oor = 0;
    for (uint32_t k0 = start + lane; k0 < end; k0 += UNROLL * L) {
        uint32_t id[UNROLL];
        float v[UNROLL], w[UNROLL];
        bool ok[UNROLL], in[UNROLL];
#pragma unroll
        for (int j = 0; j < UNROLL; j++) {          // UNROLL coalesced id (and value) loads
            const uint32_t k = k0 + j * L;
            ok[j] = k < end;
            id[j] = ok[j] ? __ldg(p.ids + k) : 0u;
            if (VM == WISP_KV_ALL) {
                v[j] = ok[j] ? __ldg(p.vals + k) : 0.f;
            } else if (VM == WISP_KV_MIXED) {
                const uint32_t o = k - start;
                v[j] = (ok[j] && o < nv) ? __ldg(p.vals + vstart + o) : 1.f;
            } else {
                v[j] = 1.f;
            }
        }
#pragma unroll
        for (int j = 0; j < UNROLL; j++) {          // UNROLL independent random gathers
            const uint32_t rel = id[j] - p.id_lo;
            in[j] = ok[j] && rel < p.id_span;
            w[j] = in[j] ? weight<W>::load(p.weights, rel) : 0.f;
            oor += (ok[j] && id[j] >= p.num_features) ? 1u : 0u;
        }
#pragma unroll
        for (int j = 0; j < UNROLL; j++)
            if (in[j]) acc = fmaf(w[j], v[j], acc);
    }

#pragma unroll
    for (int off = L / 2; off > 0; off >>= 1) {
        acc += __shfl_xor_sync(0xffffffffu, acc, off, L);
        oor += __shfl_xor_sync(0xffffffffu, oor, off, L);
    }

    if (active && lane == 0) {
        const float z = acc * p.scale;
        p.out[r] = p.partial ? z : 1.f / (1.f + expf(-(p.bias + z)));
        if (p.oor_rows) p.oor_rows[r] = oor;
        if (p.oor && oor) atomicAdd(p.oor, static_cast<unsigned long long>(oor));
    }
}

template <typename W, int VM>
cudaError_t launch_lanes(const wisp_kparams &p, int lanes, cudaStream_t s)
{
    const uint64_t threads = static_cast<uint64_t>(p.rows) * static_cast<uint64_t>(lanes);
    const unsigned blocks = static_cast<unsigned>((threads + BLOCK - 1) / BLOCK);
    switch (lanes) {
    case 4:  score_kernel<W, VM, 4><<<blocks, BLOCK, 0, s>>>(p); break;
    case 8:  score_kernel<W, VM, 8><<<blocks, BLOCK, 0, s>>>(p); break;
    case 16: score_kernel<W, VM, 16><<<blocks, BLOCK, 0, s>>>(p); break;
    case 32: score_kernel<W, VM, 32><<<blocks, BLOCK, 0, s>>>(p); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

template <typename W>
cudaError_t launch_mode(const wisp_kparams &p, int value_mode, int lanes, cudaStream_t s)
{
    switch (value_mode) {
    case WISP_KV_NONE:  return launch_lanes<W, WISP_KV_NONE>(p, lanes, s);
    case WISP_KV_ALL:   return launch_lanes<W, WISP_KV_ALL>(p, lanes, s);
    case WISP_KV_MIXED: return launch_lanes<W, WISP_KV_MIXED>(p, lanes, s);
    default:            return cudaErrorInvalidValue;
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
    return w <= 12.0 ? 4 : w <= 40.0 ? 8 : w <= 112.0 ? 16 : 32;
}

extern "C" int wisp_k_score(const wisp_kparams *p, int dtype, int value_mode, int lanes, cudaStream_t stream)
{
    if (!p || !p->out || !p->row_ptr || (p->nnz && (!p->ids || !p->weights)))
        return cudaErrorInvalidValue;
    if (p->rows == 0) return cudaSuccess;
    if (value_mode == WISP_KV_ALL && p->nnz && !p->vals) return cudaErrorInvalidValue;
    if (value_mode == WISP_KV_MIXED && (!p->val_ptr || (p->nvals && !p->vals))) return cudaErrorInvalidValue;
    if (lanes == 0) lanes = wisp_k_lanes_for(static_cast<double>(p->nnz) / p->rows);
    switch (dtype) {
    case WISP_F32: return launch_mode<float>(*p, value_mode, lanes, stream);
    case WISP_F16: return launch_mode<__half>(*p, value_mode, lanes, stream);
    case WISP_I8:  return launch_mode<int8_t>(*p, value_mode, lanes, stream);
    default:       return cudaErrorInvalidValue;
    }
}

extern "C" int wisp_k_probe_blocks(void) { return probe_blocks(); }

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
