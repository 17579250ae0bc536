/* cuda_device_batch.c — wisp_session_score_device: a CSR batch whose arrays are already CUDA device memory, read on the caller's stream, checked as a host batch is, scored, the answers written to host or device memory (CUDA builds; engine/cuda_stub.c answers WISP_ENODEV otherwise). */
/*
 * This first version is the reference path of the contract in wisp.h: the arrays are
 * copied to pinned host memory on the caller's stream, checked and scored exactly as
 * wisp_batch_wrap + wisp_session_score do (so every guarantee of a host batch holds
 * by construction: row_ptr checked, ids beyond the table ignored and counted, a value
 * that is not finite makes its row bad), and the answers are copied back when out is
 * device memory. Its cost is the PCIe round trip the fused device path will remove
 * (ids validated on the device by the score kernel itself); the contract does not change.
 */
#ifdef WISP_HAVE_CUDA

#include "internal.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

static int cuda_fail(cudaError_t e, const char *what)
{
    cudaGetLastError();
    return wisp_fail(WISP_EDEVICE, "wisp_session_score_device: %s failed: %s (%s)", what, cudaGetErrorString(e),
                     cudaGetErrorName(e));
}

/* The CUDA device that owns p, or -1 (host memory, or not CUDA's). */
static int device_of(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? a.device : -1;
}

int wisp_session_score_device(wisp_session *s, size_t rows, const void *row_ptr, int row_ptr_bits, const int32_t *ids,
                              const float *vals, void *stream, float *out, int out_on_device)
{
    static const char fn[] = "wisp_session_score_device";
    if (s) s->nbad = 0;
    if (!s) return wisp_fail(WISP_EINVAL, "%s: session is NULL", fn);
    if (row_ptr_bits != 32 && row_ptr_bits != 64)
        return wisp_fail(WISP_EINVAL, "%s: row_ptr_bits is %d (32 or 64)", fn, row_ptr_bits);
    if (rows > WISP_MAX_ROWS) return wisp_fail(WISP_ELIMIT, "%s: %zu rows, more than WISP_MAX_ROWS (%u)", fn, rows, WISP_MAX_ROWS);
    if (rows == 0) return WISP_OK;
    if (!row_ptr || !out) return wisp_fail(WISP_EINVAL, "%s: %s is NULL", fn, !row_ptr ? "row_ptr" : "out");
    if (wisp_engine_gpu_count(s->eng) == 0)
        return wisp_fail(WISP_ENODEV, "%s: no usable GPU (%s)", fn, wisp_engine_gpu_status(s->eng));
    const int dev = device_of(row_ptr);
    if (dev < 0) return wisp_fail(WISP_EINVAL, "%s: row_ptr is not CUDA device memory", fn);
    if (out_on_device && device_of(out) < 0) return wisp_fail(WISP_EINVAL, "%s: out is not CUDA device memory", fn);
    cudaStream_t st = (cudaStream_t)stream;
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess) cudaGetLastError();
    cudaError_t e = cudaSetDevice(dev);
    if (e != cudaSuccess) return cuda_fail(e, "selecting the arrays' device");
    /* row_ptr first: it says how many ids and values follow */
    const size_t esz = row_ptr_bits == 64 ? 8 : 4;
    int status = WISP_OK;
    void *hrp = wisp_host_alloc(s->eng, (rows + 1) * esz);
    uint32_t *rp32 = row_ptr_bits == 64 ? wisp_host_alloc(s->eng, (rows + 1) * 4) : hrp;
    void *hids = NULL, *hvals = NULL;
    float *hout = NULL;
    wisp_batch *b = NULL;
    if (!hrp || !rp32) { status = wisp_fail(WISP_ENOMEM, "%s: out of host memory for %zu rows", fn, rows); goto done; }
    e = cudaMemcpyAsync(hrp, row_ptr, (rows + 1) * esz, cudaMemcpyDeviceToHost, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) { status = cuda_fail(e, "reading row_ptr"); goto done; }
    if (row_ptr_bits == 64) {
        const int64_t *r64 = hrp;
        for (size_t r = 0; r <= rows; r++) {
            if (r64[r] < 0 || r64[r] > (int64_t)WISP_MAX_NNZ) {
                status = wisp_fail(r64[r] < 0 ? WISP_EINVAL : WISP_ELIMIT, "%s: row_ptr[%zu] = %lld is %s", fn, r,
                                   (long long)r64[r], r64[r] < 0 ? "negative" : "beyond WISP_MAX_NNZ");
                goto done;
            }
            rp32[r] = (uint32_t)r64[r];
        }
    }
    /* row_ptr passes wisp_batch_wrap's checks before any id is read (it bounds what is
     * copied); wrap reads no id, so row_ptr itself stands in for the ids here */
    const size_t nnz = rp32[rows];
    if (nnz && !ids) { status = wisp_fail(WISP_EINVAL, "%s: ids is NULL for %zu features", fn, nnz); goto done; }
    if ((status = wisp_batch_wrap(s->eng, rows, rp32, rp32, NULL, NULL, &b)) != WISP_OK) goto done;
    wisp_batch_free(b);
    b = NULL;
    if (nnz) {
        hids = wisp_host_alloc(s->eng, nnz * 4);
        hvals = vals ? wisp_host_alloc(s->eng, nnz * 4) : NULL;
        if (!hids || (vals && !hvals)) { status = wisp_fail(WISP_ENOMEM, "%s: out of host memory for %zu features", fn, nnz); goto done; }
        e = cudaMemcpyAsync(hids, ids, nnz * 4, cudaMemcpyDeviceToHost, st);
        if (e == cudaSuccess && vals) e = cudaMemcpyAsync(hvals, vals, nnz * 4, cudaMemcpyDeviceToHost, st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(st);
        if (e != cudaSuccess) { status = cuda_fail(e, "reading ids and values"); goto done; }
    }
    /* values: every feature carries one (val_ptr = row_ptr), or none */
    if ((status = wisp_batch_wrap(s->eng, rows, rp32, hids, vals ? rp32 : NULL, hvals, &b)) != WISP_OK) goto done;
    hout = out_on_device ? wisp_host_alloc(s->eng, rows * 4) : out;
    if (!hout) { status = wisp_fail(WISP_ENOMEM, "%s: out of host memory for %zu answers", fn, rows); goto done; }
    if (cur >= 0 && cudaSetDevice(cur) != cudaSuccess) cudaGetLastError();
    if ((status = wisp_session_score(s, b, hout)) != WISP_OK) goto done;
    if ((status = wisp__session_keep_bad(s, b)) != WISP_OK) goto done;
    if (out_on_device) {
        e = cudaSetDevice(dev);
        if (e == cudaSuccess) e = cudaMemcpyAsync(out, hout, rows * 4, cudaMemcpyHostToDevice, st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(st);
        if (e != cudaSuccess) status = cuda_fail(e, "writing the answers");
    }
done:
    if (status != WISP_OK) s->nbad = 0;
    wisp_batch_free(b);
    if (hout && hout != out) wisp_host_free(s->eng, hout);
    if (rp32 && rp32 != hrp) wisp_host_free(s->eng, rp32);
    wisp_host_free(s->eng, hrp);
    wisp_host_free(s->eng, hids);
    wisp_host_free(s->eng, hvals);
    if (cur >= 0 && cudaSetDevice(cur) != cudaSuccess) cudaGetLastError();
    return status == WISP_OK ? WISP_OK : wisp_fail_context(status, "%s", fn);
}

/* ---- test hooks (wisp_test.h): device memory for specs that have no CUDA headers ---- */

int wisp_cuda_test_alloc(int dev, size_t n, void **out)
{
    if (!out) return wisp_fail(WISP_EINVAL, "wisp_cuda_test_alloc: out is NULL");
    *out = NULL;
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaMalloc(out, n ? n : 1);
    if (e != cudaSuccess) { *out = NULL; return cuda_fail(e, "wisp_cuda_test_alloc"); }
    return WISP_OK;
}

int wisp_cuda_test_copy(void *dst, const void *src, size_t n)
{
    cudaError_t e = cudaMemcpy(dst, src, n, cudaMemcpyDefault);
    return e == cudaSuccess ? WISP_OK : cuda_fail(e, "wisp_cuda_test_copy");
}

void wisp_cuda_test_free(void *p)
{
    if (p && cudaFree(p) != cudaSuccess) cudaGetLastError();
}

#endif /* WISP_HAVE_CUDA */
