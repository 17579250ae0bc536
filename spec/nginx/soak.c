/* soak.c — the concurrent reload soak (issue 14, classes 2 and 3): clients check every answer while a reloader renames, copies over, truncates and corrupts the served model file.
 *
 *   soak --port P --dir D --served PATH [--seconds 30] [--conns 6] [--seed N] [--reload-ms 200] [--model ctr]
 *
 * D holds v1.wisp v2.wisp v3.wisp (the same columns, three weight sets: v3 plays "a different
 * model"), trunc.wisp (v1 cut short), badsum.wisp (v1 with a flipped weight byte), rows.json /
 * rows.libsvm / rows.ndjson (the same 60 rows), v1.txt v2.txt v3.txt (`wisp score -d cpu` of the
 * rows under each version). spec/nginx/soak.sh makes them and starts nginx.
 * Clients (--conns threads, one request a connection) send the 60 rows or one of them, as JSON,
 * libsvm or JSON lines; 1 in 8 sends its body in three pieces 30-120 ms apart (a body arriving
 * while the file changes). Every 200 answer is checked row by row: each probability must be one
 * version's (printed as the CLI prints it) and one version must hold for every row of the answer
 * (else a "mixed" answer). Any other answer is a failed request (the model is loaded before the
 * soak starts, so no 503 is allowed: a failed reload must change nothing that serves). The
 * reloader, every --reload-ms: renames v1/v2/v3 in, copies one over the served file in place,
 * writes one over it without truncating (same size: the bytes change under a mapping), truncates
 * it in place, overwrites 8 bytes in place, renames a broken file in, or POSTs :reload.
 * At the end v1 is renamed in and, once 8 answers in a row are v1's (12 s at most), 20 more must all
 * be v1's (the service recovers; every worker has reloaded).
 * Prints the failures (the first 10 of each kind), "SOAK_JSON {...}" (the counts) and
 * "soak: N passed, N failed" (checks: no wrong answer, no mixed answer, no failed request,
 * recovered); exits 1 on a failure.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "svchttp.h"
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

static int port = 0, conns = 6, reload_ms = 200;
static double seconds = 30;
static unsigned long long seed = 1;
static const char *dir = NULL, *served = NULL, *model = "ctr";

#define NROWS_MAX 256
#define NVER 3
static char *ref[NVER][NROWS_MAX];     /* the CLI's lines */
static int nrows = 0;
static char *body_json, *body_libsvm, *body_nd;
static size_t len_json, len_libsvm, len_nd;
static char *line_libsvm[NROWS_MAX], *line_nd[NROWS_MAX];

static atomic_long n_req, n_ok, n_slow, n_wrong, n_mixed, n_failed, n_transport, n_v[NVER], n_ambiguous;
static atomic_int stop_flag;
static pthread_mutex_t print_mu = PTHREAD_MUTEX_INITIALIZER;
static int printed_wrong, printed_failed;

enum { R_V1, R_V2, R_V3, R_CP, R_OVERWRITE, R_TRUNC, R_CORRUPT, R_BROKEN_TRUNC, R_BROKEN_SUM, R_POST, R_N };
static const char *rname[R_N] = { "rename_v1", "rename_v2", "rename_v3_different_model", "copy_in_place",
                                  "overwrite_in_place", "truncate_in_place", "corrupt_in_place", "rename_truncated", "rename_bad_checksum",
                                  "post_reload" };
static long n_reload[R_N];

static uint64_t rnd(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }

static void fmt_prob(char *p, float v)       /* engine/cli/cli.c's fmt_prob, without the newline */
{
    if (isnan(v)) { strcpy(p, "nan"); return; }
    if (v >= 0.001f && v <= 1.0f) {
        uint64_t x = (uint64_t)llround((double)v * 1e9);
        if (x >= 1000000000ull) { strcpy(p, "1.000000000"); return; }
        sprintf(p, "0.%09llu", (unsigned long long)x);
        return;
    }
    sprintf(p, "%.9g", (double)v);
}

static char **split_lines(char *text, int *n)
{
    static char *tmp[NROWS_MAX + 1];
    int k = 0;
    for (char *p = text; *p && k < NROWS_MAX;) {
        char *e = strchr(p, '\n');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        tmp[k] = strndup(p, l);
        k++;
        if (!e) break;
        p = e + 1;
    }
    *n = k;
    return tmp;
}

static char *need_file(const char *name, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t l = 0;
    char *b = svc_slurp(path, &l);
    if (!b) { fprintf(stderr, "soak: cannot read %s\n", path); exit(2); }
    if (len) *len = l;
    return b;
}

/* one request; returns the status (0: transport error) and the answer in *a */
static int do_request(const char *method, const char *path, const char *ctype, const char *body, size_t blen,
                      bool slow, uint64_t *rs, svc_answer *a)
{
    memset(a, 0, sizeof *a);
    int fd = svc_connect(port);
    if (fd < 0) { a->why = "connect failed"; return 0; }
    char hdr[512];
    int hl = snprintf(hdr, sizeof hdr, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%s%sContent-Length: %zu\r\n\r\n",
                      method, path, ctype ? "Content-Type: " : "", ctype ? ctype : "", ctype ? "\r\n" : "", blen);
    int rc = svc_send(fd, hdr, (size_t)hl, 5000);
    if (rc == 0 && blen) {
        if (slow && blen >= 3) {
            size_t third = blen / 3;
            for (int k = 0; k < 3 && rc == 0; k++) {
                size_t off = third * (size_t)k, n = k == 2 ? blen - off : third;
                rc = svc_send(fd, body + off, n, 5000);
                if (k < 2) usleep((useconds_t)(30000 + rnd(rs) % 90000));
            }
        } else rc = svc_send(fd, body, blen, 5000);
    }
    if (rc != 0) { close(fd); a->why = "send failed"; return 0; }
    svc_read_answer(fd, a, 15000, false, 1 << 22);
    close(fd);
    return a->complete ? a->status : 0;
}

/* check a 200 answer for rows [first, first + n): 0 ok (*ver = the version), 1 wrong, 2 mixed */
static int check_answer(const svc_answer *a, int first, int n, int *ver, char *why, size_t wl)
{
    const char *p = strstr(a->body, "\"predictions\":");
    if (!p) { snprintf(why, wl, "no predictions in %.200s", a->body); return 1; }
    p = strchr(p, '[');
    if (!p) { snprintf(why, wl, "no predictions list"); return 1; }
    p++;
    unsigned all = (1u << NVER) - 1;
    for (int i = 0; i < n; i++) {
        while (*p == ' ') p++;
        char *q;
        double d = strtod(p, &q);
        if (q == p) { snprintf(why, wl, "row %d: prediction '%.20s' is not a number", first + i, p); return 1; }
        char got[64];
        fmt_prob(got, (float)d);
        unsigned m = 0;
        for (int v = 0; v < NVER; v++) if (strcmp(got, ref[v][first + i]) == 0) m |= 1u << v;
        if (!m) {
            snprintf(why, wl, "row %d: %.*s (prints %s) is no version's (v1 %s, v2 %s, v3 %s)", first + i, (int)(q - p), p, got,
                     ref[0][first + i], ref[1][first + i], ref[2][first + i]);
            return 1;
        }
        all &= m;
        p = q;
        while (*p == ' ') p++;
        if (i + 1 < n) {
            if (*p != ',') { snprintf(why, wl, "predictions: %d numbers for %d rows", i + 1, n); return 1; }
            p++;
        }
    }
    while (*p == ' ') p++;
    if (*p != ']') { snprintf(why, wl, "predictions: more than %d numbers", n); return 1; }
    if (!all) { snprintf(why, wl, "the %d rows mix versions", n); return 2; }
    *ver = (all & 1) ? 0 : (all & 2) ? 1 : 2;
    if (all & (all - 1)) *ver = -1;                 /* more than one version fits every row */
    return 0;
}

static void *client(void *arg)
{
    uint64_t rs = seed * 0x9E3779B97F4A7C15ull + (uint64_t)(uintptr_t)arg * 7919 + 1;
    char path[256], why[512], one[8192];
    snprintf(path, sizeof path, "/v1/models/%s:predict", model);
    while (!atomic_load(&stop_flag)) {
        int kind = (int)(rnd(&rs) % 6);            /* 0-2: all 60 rows as json/libsvm/ndjson; 3-5: one row */
        bool slow = rnd(&rs) % 8 == 0;
        const char *ct, *b; size_t bl; int first = 0, n = nrows;
        if (kind < 3) {
            ct = kind == 0 ? "application/json" : kind == 1 ? "text/x-libsvm" : "application/x-ndjson";
            b = kind == 0 ? body_json : kind == 1 ? body_libsvm : body_nd;
            bl = kind == 0 ? len_json : kind == 1 ? len_libsvm : len_nd;
        } else {
            first = (int)(rnd(&rs) % (uint64_t)nrows); n = 1;
            if (kind == 3) { ct = "application/json"; bl = (size_t)snprintf(one, sizeof one, "{\"instances\": [%s]}", line_nd[first]); }
            else if (kind == 4) { ct = "text/x-libsvm"; bl = (size_t)snprintf(one, sizeof one, "%s\n", line_libsvm[first]); }
            else { ct = "application/x-ndjson"; bl = (size_t)snprintf(one, sizeof one, "%s\n", line_nd[first]); }
            b = one;
        }
        svc_answer a;
        int st = do_request("POST", path, ct, b, bl, slow, &rs, &a);
        if (a.body) for (size_t z = a.body_len; z > 0 && (a.body[z - 1] == '\n' || a.body[z - 1] == '\r'); z--) a.body[z - 1] = '\0';
        atomic_fetch_add(&n_req, 1);
        if (slow) atomic_fetch_add(&n_slow, 1);
        if (st == 200) {
            int ver = -1;
            int r = check_answer(&a, first, n, &ver, why, sizeof why);
            if (r == 0) {
                atomic_fetch_add(&n_ok, 1);
                if (ver >= 0) atomic_fetch_add(&n_v[ver], 1); else atomic_fetch_add(&n_ambiguous, 1);
            } else {
                atomic_fetch_add(r == 2 ? &n_mixed : &n_wrong, 1);
                pthread_mutex_lock(&print_mu);
                if (printed_wrong++ < 10) printf("WRONG %s answer (%s, %d rows from row %d%s): %s\n", r == 2 ? "mixed" : "wrong", ct, n, first, slow ? ", slow body" : "", why);
                pthread_mutex_unlock(&print_mu);
            }
        } else {
            atomic_fetch_add(st == 0 ? &n_transport : &n_failed, 1);
            pthread_mutex_lock(&print_mu);
            if (printed_failed++ < 10)
                printf("FAILED request (%s, %d rows%s): %s%d %.200s\n", ct, n, slow ? ", slow body" : "",
                       st ? "HTTP " : "no answer: ", st, st ? a.body : (a.why ? a.why : "?"));
            pthread_mutex_unlock(&print_mu);
        }
        svc_answer_free(&a);
    }
    return NULL;
}

/* in_place: 0 rename a copy in, 1 open with O_TRUNC and write (cp), 2 write over without truncating (dd conv=notrunc) */
static void put_file(const char *dst, const char *src, int in_place)
{
    size_t len;
    char name[256];
    snprintf(name, sizeof name, "%s", src);
    char *b = need_file(name, &len);
    if (in_place) {
        int fd = open(dst, O_WRONLY | (in_place == 1 ? O_TRUNC : 0));   /* 1: what cp does over an existing file */
        if (fd >= 0) { if (write(fd, b, len) != (ssize_t)len) perror("soak: write"); close(fd); }
    } else {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.soaktmp", dst);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) { if (write(fd, b, len) != (ssize_t)len) perror("soak: write"); close(fd); }
        if (rename(tmp, dst) != 0) perror("soak: rename");
    }
    free(b);
}

static void *reloader(void *arg)
{
    (void)arg;
    uint64_t rs = seed * 31 + 17;
    const char *vers[NVER] = { "v1.wisp", "v2.wisp", "v3.wisp" };
    char path[256];
    snprintf(path, sizeof path, "/v1/models/%s:reload", model);
    while (!atomic_load(&stop_flag)) {
        usleep((useconds_t)reload_ms * 1000);
        int k = (int)(rnd(&rs) % R_N);
        switch (k) {
        case R_V1: case R_V2: case R_V3: put_file(served, vers[k], 0); break;
        case R_CP: put_file(served, vers[rnd(&rs) % NVER], 1); break;
        case R_OVERWRITE: put_file(served, vers[rnd(&rs) % NVER], 2); break;
        case R_TRUNC: { struct stat st; if (stat(served, &st) == 0) { if (truncate(served, st.st_size / 2) != 0) perror("soak: truncate"); } break; }
        case R_CORRUPT: {
            int fd = open(served, O_WRONLY);
            struct stat st;
            if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 128) {
                char junk[8];
                for (int i = 0; i < 8; i++) junk[i] = (char)rnd(&rs);
                off_t off = 64 + (off_t)(rnd(&rs) % (uint64_t)(st.st_size - 72));
                if (pwrite(fd, junk, sizeof junk, off) != (ssize_t)sizeof junk) perror("soak: pwrite");
            }
            if (fd >= 0) close(fd);
            break;
        }
        case R_BROKEN_TRUNC: put_file(served, "trunc.wisp", 0); break;
        case R_BROKEN_SUM: put_file(served, "badsum.wisp", 0); break;
        case R_POST: {
            svc_answer a;
            int st = do_request("POST", path, NULL, "", 0, false, &rs, &a);
            if (st != 200 && st != 500) {
                pthread_mutex_lock(&print_mu);
                printf("FAILED POST :reload: %s%d %.200s\n", st ? "HTTP " : "no answer: ", st, st ? a.body : (a.why ? a.why : "?"));
                pthread_mutex_unlock(&print_mu);
                atomic_fetch_add(st ? &n_failed : &n_transport, 1);
            } else if (!svc_is_json(a.body, a.body_len)) {
                pthread_mutex_lock(&print_mu);
                printf("FAILED POST :reload: HTTP %d, the body is not JSON: %.200s\n", st, a.body);
                pthread_mutex_unlock(&print_mu);
                atomic_fetch_add(&n_failed, 1);
            }
            svc_answer_free(&a);
            break;
        }
        }
        n_reload[k]++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--port")) port = atoi(v);
        else if (!strcmp(k, "--dir")) dir = v;
        else if (!strcmp(k, "--served")) served = v;
        else if (!strcmp(k, "--seconds")) seconds = atof(v);
        else if (!strcmp(k, "--conns")) conns = atoi(v);
        else if (!strcmp(k, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--reload-ms")) reload_ms = atoi(v);
        else if (!strcmp(k, "--model")) model = v;
        else { fprintf(stderr, "soak: unknown option %s\n", k); return 2; }
    }
    if (!port || !dir || !served || conns < 1 || conns > 64 || seed == 0) {
        fprintf(stderr, "usage: soak --port P --dir D --served PATH [--seconds S] [--conns N] [--seed N>0] [--reload-ms MS] [--model NAME]\n");
        return 2;
    }
    const char *vt[NVER] = { "v1.txt", "v2.txt", "v3.txt" };
    for (int v = 0; v < NVER; v++) {
        int n;
        char **l = split_lines(need_file(vt[v], NULL), &n);
        if (n && l[n - 1][0] == '\0') n--;
        for (int i = 0; i < n; i++) ref[v][i] = l[i];
        if (v == 0) nrows = n;
        else if (n != nrows) { fprintf(stderr, "soak: %s has %d lines, v1.txt %d\n", vt[v], n, nrows); return 2; }
    }
    body_json = need_file("rows.json", &len_json);
    body_libsvm = need_file("rows.libsvm", &len_libsvm);
    body_nd = need_file("rows.ndjson", &len_nd);
    int n1, n2;
    char **l1 = split_lines(strdup(body_libsvm), &n1);
    for (int i = 0; i < n1; i++) line_libsvm[i] = l1[i];
    char **l2 = split_lines(strdup(body_nd), &n2);
    for (int i = 0; i < n2; i++) line_nd[i] = l2[i];
    if (n1 < nrows || n2 < nrows || nrows == 0) { fprintf(stderr, "soak: rows files hold %d/%d lines for %d answers\n", n1, n2, nrows); return 2; }
    int same = 0;
    for (int i = 0; i < nrows; i++) same += !strcmp(ref[0][i], ref[1][i]) || !strcmp(ref[0][i], ref[2][i]) || !strcmp(ref[1][i], ref[2][i]);
    printf("soak: seed %llu, %d connections, %.0f s, a file change every %d ms, %d rows (%d alike in two versions)\n",
           seed, conns, seconds, reload_ms, nrows, same);
    fflush(stdout);

    pthread_t th[64], rt;
    for (int i = 0; i < conns; i++) pthread_create(&th[i], NULL, client, (void *)(uintptr_t)i);
    pthread_create(&rt, NULL, reloader, NULL);
    double t0 = svc_now();
    while (svc_now() - t0 < seconds) usleep(100000);
    atomic_store(&stop_flag, 1);
    pthread_join(rt, NULL);
    for (int i = 0; i < conns; i++) pthread_join(th[i], NULL);
    double took = svc_now() - t0;

    /* recovery: v1 renamed in; after two reload checks every answer is v1's */
    put_file(served, "v1.wisp", 0);
    int recovered = 0;
    uint64_t rs = seed;
    char path[256], why[512];
    snprintf(path, sizeof path, "/v1/models/%s:predict", model);
    /* wait (up to 12 s on a loaded machine) until 8 answers in a row, 2 s, are v1's: both workers check every second */
    for (int t = 0, run = 0; t < 48 && run < 8; t++) {
        usleep(250000);
        svc_answer a;
        int st = do_request("POST", path, "application/json", body_json, len_json, false, &rs, &a);
        int ver = -2;
        run = st == 200 && check_answer(&a, 0, nrows, &ver, why, sizeof why) == 0 && (ver == 0 || ver == -1) ? run + 1 : 0;
        svc_answer_free(&a);
    }
    for (int i = 0; i < 20; i++) {
        svc_answer a;
        int st = do_request("POST", path, "application/json", body_json, len_json, false, &rs, &a);
        int ver = -2;
        if (st == 200 && check_answer(&a, 0, nrows, &ver, why, sizeof why) == 0 && (ver == 0 || ver == -1)) recovered++;
        else if (i == 0 || recovered == i) printf("FAILED recovery answer %d: HTTP %d, version %d %s\n", i, st, ver + 1, st == 200 ? why : a.body);
        svc_answer_free(&a);
    }

    printf("SOAK_JSON {\"seconds\": %.1f, \"connections\": %d, \"requests\": %ld, \"answers_right\": %ld, \"slow_bodies\": %ld, "
           "\"answers_by_version\": {\"v1\": %ld, \"v2\": %ld, \"v3\": %ld, \"alike\": %ld}, \"reloads\": {",
           took, conns, atomic_load(&n_req), atomic_load(&n_ok), atomic_load(&n_slow), atomic_load(&n_v[0]), atomic_load(&n_v[1]),
           atomic_load(&n_v[2]), atomic_load(&n_ambiguous));
    long total = 0;
    for (int k = 0; k < R_N; k++) { printf("%s\"%s\": %ld", k ? ", " : "", rname[k], n_reload[k]); total += n_reload[k]; }
    printf("}, \"file_changes\": %ld, \"wrong_answers\": %ld, \"mixed_answers\": %ld, \"failed_requests\": %ld, \"transport_errors\": %ld, "
           "\"recovered\": %s}\n", total, atomic_load(&n_wrong), atomic_load(&n_mixed), atomic_load(&n_failed), atomic_load(&n_transport),
           recovered == 20 ? "true" : "false");
    int pass = 0, fail = 0;
    if (atomic_load(&n_wrong) == 0) pass++; else { fail++; printf("FAIL %ld wrong answers (a probability of no version)\n", atomic_load(&n_wrong)); }
    if (atomic_load(&n_mixed) == 0) pass++; else { fail++; printf("FAIL %ld answers mix versions\n", atomic_load(&n_mixed)); }
    if (atomic_load(&n_failed) + atomic_load(&n_transport) == 0) pass++;
    else { fail++; printf("FAIL %ld failed requests (non-200), %ld without an answer\n", atomic_load(&n_failed), atomic_load(&n_transport)); }
    if (recovered == 20) pass++; else { fail++; printf("FAIL recovery: %d/20 answers are v1's after v1 was renamed back\n", recovered); }
    if (atomic_load(&n_ok) > 0) pass++; else { fail++; printf("FAIL no right answer at all\n"); }
    printf("soak: %d passed, %d failed\n", pass, fail);
    return fail ? 1 : 0;
}
