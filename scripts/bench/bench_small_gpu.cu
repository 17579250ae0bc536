/* bench_small_gpu.cu — a tiny batch end to end, timed from C, with the floors beside it
 * (the C half of issue 20's small-batch figure; scripts/bench/bench_gpu.py runs it, and the lead's bisect did).
 *
 *   bench_small_gpu [--lib LIBWISP.so] [--device gpu] [--rows 10] [--calls 20000] [--floors]
 *                   [--model PATH] [--log2-features 26] [--values mixed|all|none] [--wrap-each]
 *
 * The batch is bench_gpu.py's: ROWS rows of 39 features (13 valued, 26 binary: value mode MIXED),
 * uniform ids over a 2^26-weight fp32 table, wrapped once (wisp_batch_wrap) and scored CALLS times
 * with wisp_session_score into one host array; each call is timed with CLOCK_MONOTONIC.
 * --values all: the same rows with a value for every entry (1.0 for the binary ones: the layout a
 * scipy CSR or the Python package's (indptr, indices, values) tuple hands the engine); none: no
 * values at all (every entry binary). --wrap-each: wisp_batch_wrap + wisp_batch_free inside each
 * timed call (what the Python package does per call).
 * The library is opened with dlopen, so one binary times any commit's libwisp.so (the calls it
 * uses have kept their signatures since fb769f3).
 *
 * --floors: what the hardware costs for the same job, timed the same way in the same process:
 *   launch_sync      an empty kernel, then cudaStreamSynchronize
 *   param_flag_spin  a kernel with a 3,840-byte __grid_constant__ parameter (the size wisp's tiny
 *                    batch carries) that writes one word to mapped host memory, the host spinning
 *                    on it (the design of wisp's inline path, with no scoring)
 *   copy_round_trip  a 2 KB host->device copy, an empty kernel, a 40-byte copy back, a sync
 *                    (the plain-launch path's floor)
 *   piece_*          the inline path's pieces on 10 rows (see piece_kernel): the answers written
 *                    to mapped host memory, with or without a gather of 39 random weights a row
 *                    from a 2^26-float device table, then fence + flag (the inline path's way)
 *                    or one 8-byte {answer, seq} store a row the host spins on (LL)
 *   resident_mailbox_ll  no launch: a resident kernel spins on a mailbox in mapped host memory,
 *                    reads the batch's 542 words from there, gathers, answers LL (resident_kernel)
 * Prints one JSON object on stdout.
 */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <vector>

typedef struct wisp_engine wisp_engine;
typedef struct wisp_model wisp_model;
typedef struct wisp_batch wisp_batch;
typedef struct wisp_session wisp_session;

static struct {
    int (*engine_new)(int, wisp_engine **);
    int (*model_write)(const char *, const float *, uint64_t, double, int, const char *, const char *);
    int (*model_load)(wisp_engine *, const char *, wisp_model **);
    int (*batch_wrap)(wisp_engine *, size_t, const uint32_t *, const uint32_t *, const uint32_t *, const float *,
                      wisp_batch **);
    void (*batch_free)(wisp_batch *);
    int (*session_new)(wisp_engine *, wisp_model *, const char *, wisp_session **);
    int (*session_score)(wisp_session *, const wisp_batch *, float *);
    uint64_t (*session_stat)(const wisp_session *, int);
    void (*session_reset_stats)(wisp_session *);
    const char *(*session_last_device)(const wisp_session *);
    const char *(*errmsg)(void);
} W;

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void *sym(void *h, const char *name)
{
    void *p = dlsym(h, name);
    if (!p) { fprintf(stderr, "bench_small_gpu: %s has no %s\n", "the library", name); exit(2); }
    return p;
}

static void ok(int st, const char *what)
{
    if (st != 0) { fprintf(stderr, "bench_small_gpu: %s: %d %s\n", what, st, W.errmsg()); exit(1); }
}

struct summary { double median, p90, p99, min, mean; };

static summary summarize(std::vector<double> &t)
{
    std::sort(t.begin(), t.end());
    summary s;
    size_t n = t.size();
    s.median = t[n / 2];
    s.p90 = t[(size_t)(0.90 * (double)(n - 1))];
    s.p99 = t[(size_t)(0.99 * (double)(n - 1))];
    s.min = t[0];
    double sum = 0;
    for (double x : t) sum += x;
    s.mean = sum / (double)n;
    return s;
}

static void print_summary(const char *name, const summary &s, int comma)
{
    printf("\"%s\": {\"median_us\": %.3f, \"p90_us\": %.3f, \"p99_us\": %.3f, \"min_us\": %.3f, \"mean_us\": %.3f}%s\n",
           name, s.median, s.p90, s.p99, s.min, s.mean, comma ? "," : "");
}

#define TINY_WORDS 960
struct tiny_param { uint32_t words[TINY_WORDS]; volatile uint32_t *flag; uint32_t seq; };

__global__ void empty_kernel(void) {}

__global__ void param_flag_kernel(const __grid_constant__ tiny_param p)
{
    __shared__ uint32_t sw[TINY_WORDS];
    for (uint32_t i = threadIdx.x; i < TINY_WORDS; i += blockDim.x) sw[i] = p.words[i];
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence_system();
        *p.flag = p.seq + (sw[0] & 0u);
    }
}

/* The inline path's pieces, one at a time (what the 4 us between param_flag_spin and wisp are):
 * ROWS answers written to mapped host memory by lane 0 of each row's 16 lanes, after an optional
 * gather of the row's 39 random weights from a device table; then either the inline path's
 * __threadfence_system + one flag (FENCE) or, with no fence, one 8-byte {answer, seq} store a
 * row that the host spins on (LL: NCCL's low-latency protocol's idea, an aligned 8-byte store
 * reaching host memory whole). */
struct piece_param { uint32_t words[TINY_WORDS]; const float *table; uint32_t mask; float *out;
                     unsigned long long *ll; volatile uint32_t *flag; uint32_t seq, rows, gather, ll_mode; };

__global__ void piece_kernel(const __grid_constant__ piece_param p)
{
    __shared__ uint32_t sw[TINY_WORDS];
    for (uint32_t i = threadIdx.x; i < TINY_WORDS; i += blockDim.x) sw[i] = p.words[i];
    __syncthreads();
    const uint32_t r = threadIdx.x / 16, lane = threadIdx.x & 15;
    float acc = 0.f;
    if (p.gather && r < p.rows)
        for (uint32_t k = lane; k < 39; k += 16) acc += __ldg(p.table + (sw[(r * 39 + k) % TINY_WORDS] & p.mask));
    for (int off = 8; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off, 16);
    if (lane == 0 && r < p.rows) {
        if (p.ll_mode) {
            p.ll[r] = (unsigned long long)__float_as_uint(acc) | ((unsigned long long)p.seq << 32);
        } else {
            p.out[r] = acc;
            p.out[64 + r] = 0.f;            /* the inline path's second word a row (out-of-range count) */
        }
    }
    if (!p.ll_mode) {
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) *p.flag = p.seq;
    }
}

/* A resident kernel instead of a launch a batch: one block spins on a mailbox in mapped host
 * memory (seq, then the batch's words), reads the words over PCIe, gathers 39 weights a row,
 * answers through one 8-byte slot a row; seq 0xffffffff ends it. The host writes the words,
 * then seq (release), then spins on the slots: no launch at all on the path. */
struct mailbox { uint32_t seq, nwords, rows, pad; uint32_t words[TINY_WORDS]; };

__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__global__ void resident_kernel(const mailbox *mb, unsigned long long *slots, const float *table, uint32_t mask)
{
    __shared__ uint32_t sw[TINY_WORDS];
    __shared__ uint32_t cur, nw, nrows;
    uint32_t last = 0;
    for (;;) {
        if (threadIdx.x == 0) {
            uint32_t q;
            while ((q = ld_acquire_sys(&mb->seq)) == last) { }
            cur = q;
            nw = ((volatile const mailbox *)mb)->nwords;
            nrows = ((volatile const mailbox *)mb)->rows;
        }
        __syncthreads();
        const uint32_t q = cur, n = min(nw, (uint32_t)TINY_WORDS), rows = nrows;
        if (q == 0xffffffffu) return;
        last = q;
        for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) sw[i] = ((volatile const uint32_t *)mb->words)[i];
        __syncthreads();
        const uint32_t r = threadIdx.x / 16, lane = threadIdx.x & 15;
        float acc = 0.f;
        if (r < rows)
            for (uint32_t k = lane; k < 39; k += 16) acc += __ldg(table + (sw[(r * 39 + k) % TINY_WORDS] & mask));
        for (int off = 8; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off, 16);
        if (lane == 0 && r < rows)
            *(volatile unsigned long long *)(slots + r) = (unsigned long long)__float_as_uint(acc) | ((unsigned long long)q << 32);
        __syncthreads();
    }
}

static void cu(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) { fprintf(stderr, "bench_small_gpu: %s: %s\n", what, cudaGetErrorString(e)); exit(1); }
}

static void floors(long calls)
{
    cudaStream_t st;
    cu(cudaSetDevice(0), "cudaSetDevice");
    cu(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
    std::vector<double> t((size_t)calls);
    for (long i = -200; i < calls; i++) {
        uint64_t t0 = now_ns();
        empty_kernel<<<1, 32, 0, st>>>();
        cu(cudaStreamSynchronize(st), "sync");
        if (i >= 0) t[(size_t)i] = (double)(now_ns() - t0) / 1e3;
    }
    summary a = summarize(t);

    uint32_t *hflag, *dflag;
    cu(cudaHostAlloc((void **)&hflag, 64, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc");
    cu(cudaHostGetDevicePointer((void **)&dflag, hflag, 0), "cudaHostGetDevicePointer");
    static tiny_param p;
    for (int i = 0; i < TINY_WORDS; i++) p.words[i] = (uint32_t)i;
    p.flag = dflag;
    *(volatile uint32_t *)hflag = 0;
    for (long i = -200; i < calls; i++) {
        uint64_t t0 = now_ns();
        p.seq = (uint32_t)(i + 1000);
        param_flag_kernel<<<1, 256, 0, st>>>(p);   /* wisp's tiny kernel's block */
        while (*(volatile uint32_t *)hflag != p.seq) { }
        if (i >= 0) t[(size_t)i] = (double)(now_ns() - t0) / 1e3;
    }
    cu(cudaStreamSynchronize(st), "sync");
    summary b = summarize(t);

    void *hin, *hout, *din;
    cu(cudaHostAlloc(&hin, 2048, 0), "cudaHostAlloc");
    cu(cudaHostAlloc(&hout, 64, 0), "cudaHostAlloc");
    cu(cudaMalloc(&din, 4096), "cudaMalloc");
    memset(hin, 1, 2048);
    for (long i = -200; i < calls; i++) {
        uint64_t t0 = now_ns();
        cu(cudaMemcpyAsync(din, hin, 2048, cudaMemcpyHostToDevice, st), "h2d");
        empty_kernel<<<1, 32, 0, st>>>();
        cu(cudaMemcpyAsync(hout, din, 40, cudaMemcpyDeviceToHost, st), "d2h");
        cu(cudaStreamSynchronize(st), "sync");
        if (i >= 0) t[(size_t)i] = (double)(now_ns() - t0) / 1e3;
    }
    summary c = summarize(t);

    /* the pieces: 10 rows, {no gather, gather} x {fence + flag, LL} */
    static piece_param q;
    float *table;
    const uint32_t tsize = 1u << 26;
    cu(cudaMalloc((void **)&table, (size_t)tsize * 4), "cudaMalloc table");
    cu(cudaMemset(table, 0, (size_t)tsize * 4), "cudaMemset table");
    uint32_t *hbuf, *dbuf;
    cu(cudaHostAlloc((void **)&hbuf, 4096, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc");
    cu(cudaHostGetDevicePointer((void **)&dbuf, hbuf, 0), "cudaHostGetDevicePointer");
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < TINY_WORDS; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; q.words[i] = (uint32_t)x; }
    q.table = table;
    q.mask = tsize - 1;
    q.rows = 10;
    q.out = (float *)dbuf;
    q.ll = (unsigned long long *)(dbuf + 256);
    q.flag = dbuf + 512;
    volatile uint32_t *hflag2 = hbuf + 512;
    volatile unsigned long long *hll = (volatile unsigned long long *)(hbuf + 256);
    summary pc[4];
    for (int v = 0; v < 4; v++) {
        q.gather = (uint32_t)(v >> 1);
        q.ll_mode = (uint32_t)(v & 1);
        for (long i = -200; i < calls; i++) {
            const uint32_t seq = (uint32_t)(i + 1000 + v * 10000000);
            for (uint32_t r = 0; r < q.rows; r++) hll[r] = 0;      /* as the inline path clears its flags */
            uint64_t t0 = now_ns();
            q.seq = seq;
            piece_kernel<<<1, 256, 0, st>>>(q);
            if (q.ll_mode) {
                for (uint32_t r = 0; r < q.rows; r++)
                    while ((uint32_t)(hll[r] >> 32) != seq) { }
            } else {
                while (*hflag2 != seq) { }
            }
            if (i >= 0) t[(size_t)i] = (double)(now_ns() - t0) / 1e3;
        }
        cu(cudaStreamSynchronize(st), "sync");
        pc[v] = summarize(t);
    }
    /* the resident kernel: 10 rows of 39 ids + 11 row offsets + 11 value offsets + 130 values (542 words) */
    mailbox *hmb, *dmb;
    unsigned long long *hsl, *dsl;
    cu(cudaHostAlloc((void **)&hmb, sizeof(mailbox), cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc");
    cu(cudaHostGetDevicePointer((void **)&dmb, hmb, 0), "cudaHostGetDevicePointer");
    cu(cudaHostAlloc((void **)&hsl, 4096, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc");
    cu(cudaHostGetDevicePointer((void **)&dsl, hsl, 0), "cudaHostGetDevicePointer");
    memset(hmb, 0, sizeof *hmb);
    memset(hsl, 0, 4096);
    cudaStream_t rs;
    cu(cudaStreamCreateWithFlags(&rs, cudaStreamNonBlocking), "stream");
    resident_kernel<<<1, 256, 0, rs>>>(dmb, dsl, table, tsize - 1);
    cu(cudaGetLastError(), "resident launch");
    volatile unsigned long long *vsl = hsl;
    const uint32_t rrows = 10, rwords = 542;
    for (long i = -200; i < calls; i++) {
        const uint32_t seq = (uint32_t)(i + 1000);
        for (uint32_t r = 0; r < rrows; r++) vsl[r] = 0;
        uint64_t t0 = now_ns();
        memcpy(hmb->words, q.words, rwords * 4);
        hmb->nwords = rwords;
        hmb->rows = rrows;
        __atomic_store_n(&hmb->seq, seq, __ATOMIC_RELEASE);
        for (uint32_t r = 0; r < rrows; r++)
            while ((uint32_t)(vsl[r] >> 32) != seq) { }
        if (i >= 0) t[(size_t)i] = (double)(now_ns() - t0) / 1e3;
    }
    summary rz = summarize(t);
    __atomic_store_n(&hmb->seq, 0xffffffffu, __ATOMIC_RELEASE);
    cu(cudaStreamSynchronize(rs), "resident end");
    cudaStreamDestroy(rs);
    cudaFreeHost(hmb);
    cudaFreeHost(hsl);
    cudaFree(table);
    cudaFreeHost(hbuf);
    printf("\"floors\": {\n");
    print_summary("launch_sync", a, 1);
    print_summary("param_flag_spin", b, 1);
    print_summary("copy_round_trip", c, 1);
    print_summary("piece_write_fence_flag", pc[0], 1);
    print_summary("piece_write_ll", pc[1], 1);
    print_summary("piece_gather_write_fence_flag", pc[2], 1);
    print_summary("piece_gather_write_ll", pc[3], 1);
    print_summary("resident_mailbox_ll", rz, 0);
    printf("},\n");
    cudaFreeHost(hin); cudaFreeHost(hout); cudaFreeHost(hflag); cudaFree(din);
    cudaStreamDestroy(st);
}

int main(int argc, char **argv)
{
    const char *lib = "build/libwisp.so", *device = "gpu", *model = NULL;
    long rows = 10, calls = 20000;
    int want_floors = 0, log2nf = 26, wrap_each = 0;
    const char *values = "mixed";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--floors")) { want_floors = 1; continue; }
        if (!strcmp(a, "--wrap-each")) { wrap_each = 1; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: bench_small_gpu [--lib LIBWISP.so] [--device gpu] [--rows 10] [--calls 20000] [--floors]\n"
                   "                       [--model PATH] [--log2-features 26] [--values mixed|all|none] [--wrap-each]\n");
            return 0;
        }
        if (!v) { fprintf(stderr, "bench_small_gpu: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--lib")) lib = v;
        else if (!strcmp(a, "--device")) device = v;
        else if (!strcmp(a, "--rows")) rows = atol(v);
        else if (!strcmp(a, "--calls")) calls = atol(v);
        else if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--log2-features")) log2nf = atoi(v);
        else if (!strcmp(a, "--values")) values = v;
        else { fprintf(stderr, "bench_small_gpu: unknown option %s (try --help)\n", a); return 2; }
        i++;
    }
    if (strcmp(values, "mixed") && strcmp(values, "all") && strcmp(values, "none")) {
        fprintf(stderr, "bench_small_gpu: --values is mixed, all or none, not %s\n", values);
        return 2;
    }
    if (rows < 1 || rows > 4096 || calls < 10 || log2nf < 10 || log2nf > 30) {
        fprintf(stderr, "bench_small_gpu: --rows 1..4096, --calls >= 10, --log2-features 10..30\n");
        return 2;
    }
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "bench_small_gpu: %s\n", dlerror()); return 2; }
    *(void **)&W.engine_new = sym(h, "wisp_engine_new");
    *(void **)&W.model_write = sym(h, "wisp_model_write");
    *(void **)&W.model_load = sym(h, "wisp_model_load");
    *(void **)&W.batch_wrap = sym(h, "wisp_batch_wrap");
    *(void **)&W.batch_free = sym(h, "wisp_batch_free");
    *(void **)&W.session_new = sym(h, "wisp_session_new");
    *(void **)&W.session_score = sym(h, "wisp_session_score");
    *(void **)&W.session_stat = sym(h, "wisp_session_stat");
    *(void **)&W.session_reset_stats = sym(h, "wisp_session_reset_stats");
    *(void **)&W.session_last_device = sym(h, "wisp_session_last_device");
    *(void **)&W.errmsg = sym(h, "wisp_errmsg");

    const uint64_t nf = (uint64_t)1 << log2nf;
    const int K = 39, KV = 13;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    auto next = [&rng]() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; };
    char tmp[] = "/tmp/bench_small_gpu.XXXXXX.wisp";
    if (!model) {
        int fd = mkstemps(tmp, 5);
        if (fd < 0) { perror("mkstemps"); return 1; }
        std::vector<float> w(nf);
        for (uint64_t i = 0; i < nf; i++) w[i] = (float)((double)(next() >> 11) / 9007199254740992.0 - 0.5) * 0.1f;
        ok(W.model_write(tmp, w.data(), nf, 0.25, 0, "source=bench_small_gpu\n", NULL), "wisp_model_write");
        model = tmp;
    }
    wisp_engine *eng;
    wisp_model *m;
    wisp_session *s;
    wisp_batch *b;
    ok(W.engine_new(0, &eng), "wisp_engine_new");
    ok(W.model_load(eng, model, &m), "wisp_model_load");
    if (model == tmp) unlink(tmp);
    std::vector<uint32_t> indptr(rows + 1), val_ptr(rows + 1), ids(rows * K);
    std::vector<float> vals(rows * KV), out(rows);
    for (long r = 0; r <= rows; r++) { indptr[r] = (uint32_t)(r * K); val_ptr[r] = (uint32_t)(r * KV); }
    for (auto &x : ids) x = (uint32_t)(next() % nf);
    for (auto &x : vals) x = (float)((double)(next() >> 11) / 9007199254740992.0 * 2 - 1);
    /* --values all: each row's 13 values first, then 1.0 for its 26 binary entries (the same products) */
    std::vector<float> all_vals(rows * K);
    for (long r = 0; r < rows; r++)
        for (int k = 0; k < K; k++) all_vals[r * K + k] = k < KV ? vals[r * KV + k] : 1.0f;
    const int vmode = !strcmp(values, "mixed") ? 0 : !strcmp(values, "all") ? 1 : 2;
    const uint32_t *vp_arg = vmode == 0 ? val_ptr.data() : NULL;
    const float *v_arg = vmode == 0 ? vals.data() : vmode == 1 ? all_vals.data() : NULL;
    ok(W.batch_wrap(eng, (size_t)rows, indptr.data(), ids.data(), vp_arg, v_arg, &b), "wisp_batch_wrap");
    ok(W.session_new(eng, m, device, &s), "wisp_session_new");
    for (int i = 0; i < 200; i++) ok(W.session_score(s, b, out.data()), "wisp_session_score");
    W.session_reset_stats(s);
    std::vector<double> t((size_t)calls);
    int failed = 0;
    for (long i = 0; i < calls; i++) {
        uint64_t t0 = now_ns();
        if (wrap_each) {
            wisp_batch *bb;
            failed |= W.batch_wrap(eng, (size_t)rows, indptr.data(), ids.data(), vp_arg, v_arg, &bb);
            failed |= W.session_score(s, bb, out.data());
            W.batch_free(bb);
        } else {
            failed |= W.session_score(s, b, out.data());
        }
        t[(size_t)i] = (double)(now_ns() - t0) / 1e3;
    }
    ok(failed, "wisp_session_score (timed loop)");
    /* the library's own time: WISP_STAT_NS_TOTAL (13) over WISP_STAT_BATCHES (0), indices unchanged since fb769f3 */
    const double inside_us = (double)W.session_stat(s, 13) / (double)(W.session_stat(s, 0) ? W.session_stat(s, 0) : 1) / 1e3;
    /* the answers against a CPU session's */
    wisp_session *cs;
    std::vector<float> ref(rows);
    ok(W.session_new(eng, m, "cpu", &cs), "wisp_session_new cpu");
    ok(W.session_score(cs, b, ref.data()), "wisp_session_score cpu");
    double maxdiff = 0;
    for (long r = 0; r < rows; r++) maxdiff = std::max(maxdiff, (double)std::fabs(out[r] - ref[r]));
    summary e = summarize(t);
    printf("{\n\"lib\": \"%s\", \"device\": \"%s\", \"ran_on\": \"%s\", \"rows\": %ld, \"calls\": %ld,\n", lib, device,
           W.session_last_device(s), rows, calls);
    printf("\"values\": \"%s\", \"wrap_each\": %d,\n", values, wrap_each);
    printf("\"inside_wisp_us\": %.3f, \"max_abs_diff_vs_cpu\": %.3g,\n", inside_us, maxdiff);
    if (want_floors) floors(calls);
    print_summary("wisp_session_score", e, 0);
    printf("}\n");
    return 0;
}
