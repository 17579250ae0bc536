/* wisp_test.h — every test and benchmark hook of the engine, declared once: not part of
 * the public API (wisp.h), exported by libwisp.so only for specs and benchmarks (the
 * Makefile's TEST_HOOKS list). The specs in spec/c include this header; the Lua and Python
 * FFI declarations of the same hooks (engine/bindings/python/wisp/_capi.py reads this header;
 * the spec/lua specs) mirror it: change them together. */
#ifndef WISP_TEST_H
#define WISP_TEST_H

#include "wisp.h"

#include <stddef.h>
#include <stdint.h>

/* Allocation failure injection (engine/core/error.c): fail the allocation numbered `nth`
 * (1-based) from now; 0 disables. Returns the number of allocations seen since the
 * last call. */
uint64_t wisp_fault_alloc_after(uint64_t nth);

/* The model loader's hook (engine/model/model.c, for spec/c/test_filechange.c): called
 * between the loader's first fstat and its read of the file, to change the file under
 * the loader. NULL normally. */
extern void (*wisp_model_read_hook)(const char *path);

/* The CUDA backend's benchmark hooks (engine/cuda/cuda_hooks.c; in a build without CUDA,
 * engine/cuda/cuda_stub.c answers WISP_ESTATE "this build has no CUDA backend").
 *
 * wisp_cuda_time_resident: run only the score kernel (what = 0) or the random-read probe
 * (what = 1) over batch b held on the device, iters times, each launch timed with CUDA
 * events into ms[i]. The session must have scored a batch on a GPU; its first device is
 * used. lanes: 0 = automatic. out (may be NULL) receives the last run's probabilities
 * (what = 0). */
int wisp_cuda_time_resident(wisp_session *ws, const wisp_batch *b, int what, int lanes, int iters, float *ms, float *out);
/* The timeline (scripts/bench/bench_gpu.py): wisp_cuda_timeline_start keeps up to cap
 * batches' stage times from now on (measured from an event recorded now on the session's
 * first device; call it with nothing in flight, after the session scored on a GPU once);
 * wisp_cuda_timeline_read copies up to cap batches' times into ms and returns how many
 * were kept (see engine/cuda/cuda_hooks.c for the layout). */
int wisp_cuda_timeline_start(wisp_session *ws, size_t cap);
int wisp_cuda_timeline_read(wisp_session *ws, float *ms, size_t cap);
/* The last batch scored, unit by unit (scripts/bench/bench_multigpu.py): up to cap units,
 * 12 doubles each (engine/cuda/cuda_hooks.c lists them); returns the number of units. */
int wisp_cuda_units_read(wisp_session *ws, double *v, size_t cap);
/* Device memory for specs compiled without the CUDA headers (wisp_session_score_device's
 * tests): cudaMalloc of n bytes on device dev, cudaMemcpy in either direction
 * (cudaMemcpyDefault), cudaFree (NULL: nothing). engine/cuda/cuda_device_batch.c. */
int  wisp_cuda_test_alloc(int dev, size_t n, void **out);
int  wisp_cuda_test_copy(void *dst, const void *src, size_t n);
void wisp_cuda_test_free(void *p);

#endif /* WISP_TEST_H */
