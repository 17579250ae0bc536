// transform.cu — the transform on the GPU: Fingerprint64 of the raw strings, the count -> scan -> fill passes that
// write CSR ids, and the fused kernel's entry point (its instantiations build in kernels/transform_score_*.cu).
//
// The per-row evaluator all of them share is kernels/transform_rows.cuh.
#include "transform_rows.cuh"

#include <cub/device/device_scan.cuh>

namespace {

__global__ void __launch_bounds__(BLOCK) count_kernel(const wisp_tplan P, const wisp_traw raw, uint32_t *n_row,
                                                      uint32_t *nv_row, uint8_t *bad)
{
    const uint32_t row = raw.row0 + blockIdx.x * BLOCK + threadIdx.x;
    if (row >= raw.rows) return;
    if (raw.skip && raw.skip[row]) { n_row[row] = 0; nv_row[row] = 0; bad[row] = 2; return; }
    Row R{ P, raw.in, row };
    CountV v{ 0, 0 };
    bool ok = eval_row(R, v);
    n_row[row] = ok ? v.n : 0;
    nv_row[row] = ok ? v.nv : 0;
    bad[row] = ok ? 0 : 1;
}

__global__ void __launch_bounds__(BLOCK) fill_kernel(const wisp_tplan P, const wisp_traw raw, const uint32_t *indptr,
                                                     const uint32_t *val_ptr, uint32_t *ids, float *vals)
{
    const uint32_t row = raw.row0 + blockIdx.x * BLOCK + threadIdx.x;
    if (row >= raw.rows) return;
    const uint32_t s = indptr[row], e = indptr[row + 1];
    if (s == e) return;                                  // bad, skipped, or no features
    FillV v{ ids + s, vals + val_ptr[row], val_ptr[row + 1] - val_ptr[row], 0, 0 };
    Row R{ P, raw.in, row };
    eval_row(R, v);
}

// Fingerprints of every value of the inputs listed: a flat index over their values.
struct FpJob { const char *bytes; const uint32_t *off; uint64_t *fp; uint32_t start, n; };
constexpr int MAX_FP_JOBS = 64;
struct FpJobs { FpJob j[MAX_FP_JOBS]; uint32_t njobs, total; };

__global__ void __launch_bounds__(BLOCK) fp_kernel(const FpJobs jobs)
{
    const uint32_t stride = gridDim.x * BLOCK;
    for (uint32_t g = blockIdx.x * BLOCK + threadIdx.x; g < jobs.total; g += stride) {
        uint32_t lo = 0, hi = jobs.njobs;
        while (hi - lo > 1) {
            uint32_t mid = (lo + hi) >> 1;
            if (jobs.j[mid].start <= g) lo = mid; else hi = mid;
        }
        const FpJob &jb = jobs.j[lo];
        const uint32_t i = g - jb.start;
        const uint32_t a = jb.off[i], z = jb.off[i + 1];
        jb.fp[i] = wisp__fingerprint64(jb.bytes + a, z > a ? z - a : 0);
    }
}

} // namespace

// ---- entry points ----------------------------------------------------------------------

extern "C" int wisp_k_fingerprints(const wisp_tinput *in, uint32_t ninputs, const uint32_t *lo, const uint32_t *hi,
                                   cudaStream_t stream)
{
    FpJobs jobs;
    jobs.njobs = 0;
    jobs.total = 0;
    for (uint32_t i = 0; i < ninputs; i++) {
        if (in[i].dtype != WISP_INPUT_STRING || !in[i].need_fp || in[i].n == 0) continue;
        const uint32_t a = lo ? lo[i] : 0, z = hi ? (hi[i] < in[i].n ? hi[i] : in[i].n) : in[i].n;
        if (z <= a) continue;
        if (jobs.njobs == MAX_FP_JOBS || static_cast<uint64_t>(jobs.total) + (z - a) > 0xFFFFFFFFull) {
            fp_kernel<<<grid_for(jobs.total < 1u << 22 ? jobs.total : 1u << 22), BLOCK, 0, stream>>>(jobs);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) return e;
            jobs.njobs = 0;
            jobs.total = 0;
        }
        jobs.j[jobs.njobs++] = FpJob{ static_cast<const char *>(in[i].vals), in[i].str_off + a, in[i].fp + a,
                                     jobs.total, z - a };
        jobs.total += z - a;
    }
    if (jobs.total) {
        fp_kernel<<<grid_for(jobs.total < 1u << 22 ? jobs.total : 1u << 22), BLOCK, 0, stream>>>(jobs);
        return cudaGetLastError();
    }
    return cudaSuccess;
}

extern "C" int wisp_k_fp_strings(const char *bytes, const uint32_t *off, uint32_t n, uint64_t *fp, cudaStream_t stream)
{
    if (!n) return cudaSuccess;
    FpJobs jobs;
    jobs.njobs = 1;
    jobs.total = n;
    jobs.j[0] = FpJob{ bytes, off, fp, 0, n };
    fp_kernel<<<grid_for(n), BLOCK, 0, stream>>>(jobs);
    return cudaGetLastError();
}

extern "C" int wisp_k_xf_score(const wisp_tplan *plan, const wisp_traw *raw, const void *weights, int dtype,
                               float scale, uint64_t num_features, double bias, float *out, wisp_tcount *cnt,
                               cudaStream_t stream)
{
    if (!plan || !raw || !out || !cnt) return cudaErrorInvalidValue;
    if (raw->rows <= raw->row0) return cudaSuccess;
    const double sc = dtype == WISP_I8 ? static_cast<double>(scale) : 1.0;
    switch (dtype) {
    case WISP_F32: return wisp__k_xf_score_f32(*plan, *raw, weights, num_features, bias, sc, out, cnt, stream);
    case WISP_F16: return wisp__k_xf_score_f16(*plan, *raw, weights, num_features, bias, sc, out, cnt, stream);
    case WISP_I8:  return wisp__k_xf_score_i8(*plan, *raw, weights, num_features, bias, sc, out, cnt, stream);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" int wisp_k_xf_count(const wisp_tplan *plan, const wisp_traw *raw, uint32_t *n_row, uint32_t *nv_row,
                               uint8_t *bad, cudaStream_t stream)
{
    if (!plan || !raw) return cudaErrorInvalidValue;
    if (raw->rows <= raw->row0) return cudaSuccess;
    count_kernel<<<grid_for(raw->rows - raw->row0), BLOCK, 0, stream>>>(*plan, *raw, n_row, nv_row, bad);
    return cudaGetLastError();
}

extern "C" size_t wisp_k_scan_bytes(uint32_t rows)
{
    size_t bytes = 0;
    if (cub::DeviceScan::ExclusiveSum(nullptr, bytes, static_cast<const uint32_t *>(nullptr),
                                      static_cast<uint32_t *>(nullptr), static_cast<int>(rows) + 1) != cudaSuccess)
        return 0;
    return bytes;
}

// the scans run over rows + 1 entries: n_row / nv_row hold rows + 1 (the last one 0)
extern "C" int wisp_k_scan(const uint32_t *n_row, const uint32_t *nv_row, uint32_t *indptr, uint32_t *val_ptr,
                           uint32_t rows, void *temp, size_t temp_bytes, cudaStream_t stream)
{
    cudaError_t e = cub::DeviceScan::ExclusiveSum(temp, temp_bytes, n_row, indptr, static_cast<int>(rows) + 1, stream);
    if (e == cudaSuccess)
        e = cub::DeviceScan::ExclusiveSum(temp, temp_bytes, nv_row, val_ptr, static_cast<int>(rows) + 1, stream);
    return e;
}

extern "C" int wisp_k_xf_fill(const wisp_tplan *plan, const wisp_traw *raw, const uint32_t *indptr,
                              const uint32_t *val_ptr, uint32_t *ids, float *vals, cudaStream_t stream)
{
    if (!plan || !raw) return cudaErrorInvalidValue;
    if (raw->rows <= raw->row0) return cudaSuccess;
    fill_kernel<<<grid_for(raw->rows - raw->row0), BLOCK, 0, stream>>>(*plan, *raw, indptr, val_ptr, ids, vals);
    return cudaGetLastError();
}
