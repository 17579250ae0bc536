// score_device.cu — the checked CSR kernel of wisp_session_score_device: rows read straight from the caller's
// device memory (CuPy, PyTorch, a cuDF pipeline), each row validated on the device while it is scored.
//
// The host never sees the arrays (only indptr[rows], read before the launch to size it): so
// every check a host batch gets from wisp_batch_wrap happens here, per row, and a bad row is
// NaN plus one entry in a compact list (kernels/score_device.cuh), never an out-of-bounds read:
//   - row r's range [indptr[r], indptr[r + 1]) must lie inside [0, nnz] and be ordered, and
//     hold at most WISP_MAX_ROW_FEATURES features; otherwise no id is read for it;
//   - a negative id or a value that is not finite makes the row bad (its first such feature is
//     reported, the id winning over the value at the same position);
//   - an id at or beyond num_features is ignored and counted (good rows only), as on the CPU.
// Work split and arithmetic are score.cu's (a sub-warp of L lanes per row, UNROLL loads in
// flight, products and sum in double, the CPU's sigmoid), so the answers are the host path's.
// The weight loads, the sigmoid, the sum of a lane's products and the lanes' reduction are
// score.cu's, from kernels/score.cuh (namespace wisp_k).
#include "score.cuh"
#include "score_device.cuh"
#include "wisp.h"

#include <cuda_fp16.h>

namespace {

constexpr int BLOCK = WISP_K_BLOCK;
constexpr int UNROLL = 4;
constexpr uint32_t NONE = 0xFFFFFFFFu;

using wisp_k::weight;
using wisp_k::sigmoid;

template <typename W, int L>
__global__ void __launch_bounds__(BLOCK) checked_kernel(const wisp_kdev p)
{
    const uint32_t r = (blockIdx.x * static_cast<uint32_t>(BLOCK) + threadIdx.x) / L;
    const uint32_t lane = threadIdx.x & (L - 1);
    const bool active = r < p.rows;

    // the row's range, checked before any id is read (every lane of the row computes the same)
    uint32_t code = 0, start = 0, end = 0;
    if (active) {
        int64_t a, b;
        if (p.rp64) {
            a = __ldg(static_cast<const long long *>(p.indptr) + r);
            b = __ldg(static_cast<const long long *>(p.indptr) + r + 1);
        } else {
            a = __ldg(static_cast<const int32_t *>(p.indptr) + r);
            b = __ldg(static_cast<const int32_t *>(p.indptr) + r + 1);
        }
        if (a < 0 || b < a || b > static_cast<int64_t>(p.nnz)) code = WISP_KD_RANGE;
        else if (b - a > static_cast<int64_t>(WISP_MAX_ROW_FEATURES)) code = WISP_KD_WIDE;
        else { start = static_cast<uint32_t>(a); end = static_cast<uint32_t>(b); }
    }

    double acc = 0.0;
    uint32_t oor = 0, first_bad = NONE;             // this lane's first bad feature (lanes walk k upwards)
    for (uint32_t k0 = start + lane; k0 < end; k0 += UNROLL * L) {
        int32_t id[UNROLL];
        float v[UNROLL], w[UNROLL];
        bool ok[UNROLL], in[UNROLL];
#pragma unroll
        for (int j = 0; j < UNROLL; j++) {
            const uint32_t k = k0 + j * L;
            ok[j] = k < end;
            id[j] = ok[j] ? __ldg(p.ids + k) : 0;
            v[j] = (ok[j] && p.vals) ? __ldg(p.vals + k) : 1.f;
        }
#pragma unroll
        for (int j = 0; j < UNROLL; j++) {
            const uint32_t k = k0 + j * L;
            if (ok[j] && (id[j] < 0 || !isfinite(v[j])) && first_bad == NONE) first_bad = k - start;
            in[j] = ok[j] && id[j] >= 0 && static_cast<uint32_t>(id[j]) < p.num_features;
            w[j] = in[j] ? weight<W>::load(p.weights, static_cast<uint32_t>(id[j])) : 0.f;
            oor += (ok[j] && id[j] >= 0 && static_cast<uint32_t>(id[j]) >= p.num_features) ? 1u : 0u;
        }
        wisp_k::add_products(acc, in, w, v);
    }

    wisp_k::lanes_sum<L>(acc, oor);
#pragma unroll
    for (int off = L / 2; off > 0; off >>= 1)
        first_bad = min(first_bad, __shfl_xor_sync(0xffffffffu, first_bad, off, L));

    if (active && lane == 0) {
        if (code == 0 && first_bad == NONE) {
            p.out[r] = sigmoid(p.bias + acc * p.scale);
            if (oor) atomicAdd(p.cnt, static_cast<unsigned long long>(oor));
        } else {
            p.out[r] = __int_as_float(0x7fc00000);
            wisp_kdbad e = { r, code, 0, 0, 0.f };
            if (code == 0) {
                const uint32_t k = start + first_bad;
                e.pos = first_bad;
                e.id = __ldg(p.ids + k);
                e.val = p.vals ? __ldg(p.vals + k) : 1.f;
                e.code = e.id < 0 ? WISP_KD_NEG_ID : WISP_KD_NONFINITE;
            }
            const unsigned long long i = atomicAdd(p.cnt + 1, 1ull);
            if (i < p.rows) p.bad[i] = e;
        }
    }
}

template <typename W>
cudaError_t launch(const wisp_kdev &p, int lanes, cudaStream_t s)
{
    const uint64_t threads = static_cast<uint64_t>(p.rows) * static_cast<uint64_t>(lanes);
    const unsigned blocks = static_cast<unsigned>((threads + BLOCK - 1) / BLOCK);
    switch (lanes) {
    case 4:  checked_kernel<W, 4><<<blocks, BLOCK, 0, s>>>(p); break;
    case 8:  checked_kernel<W, 8><<<blocks, BLOCK, 0, s>>>(p); break;
    case 16: checked_kernel<W, 16><<<blocks, BLOCK, 0, s>>>(p); break;
    case 32: checked_kernel<W, 32><<<blocks, BLOCK, 0, s>>>(p); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

} // namespace

extern "C" int wisp_k_score_device(const wisp_kdev *p, int dtype, int lanes, cudaStream_t stream)
{
    if (!p || !p->indptr || !p->out || !p->bad || !p->cnt || (p->nnz && (!p->ids || !p->weights)))
        return cudaErrorInvalidValue;
    if (p->nnz > WISP_MAX_NNZ) return cudaErrorInvalidValue;
    if (p->rows == 0) return cudaSuccess;
    if (lanes == 0) lanes = wisp_k_lanes_for(static_cast<double>(p->nnz) / p->rows);
    switch (dtype) {
    case WISP_F32: return launch<float>(*p, lanes, stream);
    case WISP_F16: return launch<__half>(*p, lanes, stream);
    case WISP_I8:  return launch<int8_t>(*p, lanes, stream);
    default:       return cudaErrorInvalidValue;
    }
}
