/* fuzz_libsvm.c — libFuzzer target: wisp_batch_parse_libsvm one-shot, non-final and chunked against an independent reference parser, then scored. */
/*
 * Input: two option bytes, then the text.
 *   byte 0: chunk size for the streaming pass (1 + byte % 97)
 *   byte 1: max_rows per call for the streaming pass (byte % 8; 0 = no limit)
 * Properties checked (any difference traps):
 *   1. one call with final=1 parses the whole text, returns WISP_OK, counts
 *      every line, and gives exactly the rows of the reference parser below
 *      (bad rows at the same line numbers; ids and value bits equal);
 *   2. final=0 then final=1 on the rest gives the same batch;
 *   3. feeding the text in chunks through a growing buffer, with max_rows,
 *      as a streaming reader would, gives the same batch;
 *   4. the batch's arrays are consistent (value mode, val_ptr, bad rows);
 *   5. scoring it on the CPU matches a float64 reference, NaN for bad rows;
 *   6. the reference rows added through wisp_batch_add_row(_mixed) (bad
 *      rows as empty rows marked bad) give the same batch again.
 * Buffers passed to the parser are exactly sized heap copies, so reading a
 * byte past the text is an ASan report.
 */
#include "fuzz_common.h"

#include <ctype.h>

/* ---- the reference parser: the grammar of engine/parse/libsvm.c, written plainly ---- */

typedef struct {
    int bad;
    uint64_t line;
    size_t nv, nb;
    uint32_t *vids, *bids;
    float *vals;
} ref_row;

typedef struct {
    ref_row *rows;
    size_t n, cap;
    uint64_t lines;
} ref_batch;

static int blank(char c) { return c == ' ' || c == '\t'; }

/* Is s[0..n) a number of the parser's syntax? Sets *v like strtod. Returns
 * 0 ok, 1 syntax, 2 too long (the parser's strtod fallback takes <= 511 bytes). */
static int ref_number(const char *s, size_t n, double *v)
{
    size_t i = 0, ndig = 0, nfrac = 0;
    uint64_t m = 0;
    int exact = 1;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    while (i < n && isdigit((unsigned char)s[i])) {
        if (ndig < 19) m = m * 10 + (uint64_t)(s[i] - '0'); else exact = 0;
        ndig++; i++;
    }
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && isdigit((unsigned char)s[i])) {
            if (ndig < 19) m = m * 10 + (uint64_t)(s[i] - '0'); else exact = 0;
            ndig++; nfrac++; i++;
        }
    }
    if (ndig == 0) return 1;
    long ex = 0;
    int eneg = 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) { eneg = s[i] == '-'; i++; }
        if (i >= n || !isdigit((unsigned char)s[i])) return 1;
        while (i < n && isdigit((unsigned char)s[i])) {
            if (ex < 100000) ex = ex * 10 + (s[i] - '0');
            i++;
        }
    }
    if (i != n) return 1;
    long exp10 = (eneg ? -ex : ex) - (long)nfrac;
    int fast = exact && ndig <= 19 && (m == 0 || (m < (1ull << 53) && exp10 >= -22 && exp10 <= 22));
    if (!fast && n > 511) return 2;
    char *buf = malloc(n + 1);
    memcpy(buf, s, n);
    buf[n] = '\0';
    *v = strtod(buf, NULL);
    free(buf);
    return 0;
}

static ref_row *ref_push(ref_batch *B, uint64_t line)
{
    if (B->n == B->cap) {
        B->cap = B->cap ? 2 * B->cap : 16;
        B->rows = realloc(B->rows, B->cap * sizeof *B->rows);
    }
    ref_row *r = &B->rows[B->n++];
    memset(r, 0, sizeof *r);
    r->line = line;
    return r;
}

/* One line s[0..n) (no '\n'): 1 when it makes a row. */
static void ref_line(ref_batch *B, const char *s, size_t n, uint64_t line)
{
    if (n && s[n - 1] == '\r') n--;
    size_t p = 0;
    while (p < n && blank(s[p])) p++;
    if (p == n || s[p] == '#') return;
    ref_row *r = ref_push(B, line);
    r->vids = malloc(n * sizeof *r->vids);
    r->bids = malloc(n * sizeof *r->bids);
    r->vals = malloc(n * sizeof *r->vals);
    /* the label: a first token with no ':' before its end */
    size_t t = p;
    while (t < n && !blank(s[t]) && s[t] != ':') t++;
    if (t == n || s[t] != ':') {
        double v;
        if (ref_number(s + p, t - p, &v) != 0 || !isfinite(v)) { r->bad = 1; return; }
        p = t;
        while (p < n && blank(s[p])) p++;
    }
    while (p < n) {
        if (s[p] == '#') break;
        if (!isdigit((unsigned char)s[p])) { r->bad = 1; return; }
        uint64_t id = 0;
        while (p < n && isdigit((unsigned char)s[p])) {
            if (__builtin_mul_overflow(id, 10, &id) || __builtin_add_overflow(id, (uint64_t)(s[p] - '0'), &id)) {
                r->bad = 1;
                return;
            }
            p++;
        }
        uint32_t id32 = id > UINT32_MAX ? WISP_ID_NONE : (uint32_t)id;
        if (p == n || blank(s[p])) {
            r->bids[r->nb++] = id32;
        } else if (s[p] == ':') {
            p++;
            size_t q = p;
            while (q < n && !blank(s[q])) q++;
            double v;
            if (q == p || ref_number(s + p, q - p, &v) != 0) { r->bad = 1; return; }
            float f = (float)v;
            if (!isfinite(f)) { r->bad = 1; return; }
            if (f == 1.0f) r->bids[r->nb++] = id32;
            else { r->vids[r->nv] = id32; r->vals[r->nv] = f; r->nv++; }
            p = q;
        } else {
            r->bad = 1;
            return;
        }
        while (p < n && blank(s[p])) p++;
    }
}

static void ref_parse(ref_batch *B, const char *text, size_t len)
{
    memset(B, 0, sizeof *B);
    size_t pos = 0;
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;
        B->lines++;
        ref_line(B, text + pos, n, B->lines);
        pos += n + (nl ? 1 : 0);
    }
}

static void ref_free(ref_batch *B)
{
    for (size_t i = 0; i < B->n; i++) { free(B->rows[i].vids); free(B->rows[i].bids); free(B->rows[i].vals); }
    free(B->rows);
}

/* ---- comparing a batch with the reference ------------------------------------- */

static void check_batch(const wisp_batch *b, const ref_batch *B, const char *pass)
{
    size_t rows = wisp_batch_rows(b);
    FUZZ_REQUIRE(rows == B->n, "%s: %zu rows, reference %zu", pass, rows, B->n);
    const uint32_t *rp = wisp_batch_indptr(b), *ids = wisp_batch_ids(b), *vp = wisp_batch_val_ptr(b);
    const float *vals = wisp_batch_vals(b);
    size_t nnz = wisp_batch_nnz(b), nvals = wisp_batch_nvals(b);
    FUZZ_REQUIRE(rp && rp[0] == 0 && rp[rows] == nnz, "%s: indptr ends at %u, nnz %zu", pass, rp ? rp[rows] : 0, nnz);
    FUZZ_REQUIRE((nvals == 0) == (vals == NULL), "%s: nvals %zu but vals %p", pass, nvals, (const void *)vals);
    FUZZ_REQUIRE((vp != NULL) == (nvals != 0 && nvals != nnz), "%s: val_ptr %p with nvals %zu of %zu", pass,
                 (const void *)vp, nvals, nnz);
    if (vp) FUZZ_REQUIRE(vp[0] == 0 && vp[rows] == nvals, "%s: val_ptr ends at %u, nvals %zu", pass, vp[rows], nvals);
    size_t nbad = wisp_batch_bad_count(b), bi = 0, want_bad = 0;
    for (size_t r = 0; r < rows; r++) {
        const ref_row *R = &B->rows[r];
        want_bad += R->bad != 0;
        size_t brow = SIZE_MAX;
        uint64_t bline = 0;
        const char *msg = NULL;
        if (bi < nbad) FUZZ_REQUIRE(wisp_batch_bad_row(b, bi, &brow, &bline, &msg) == WISP_OK, "%s: bad_row %zu", pass, bi);
        int is_bad = brow == r;
        FUZZ_REQUIRE(is_bad == R->bad, "%s: row %zu (line %llu) bad=%d, reference bad=%d%s%s", pass, r,
                     (unsigned long long)R->line, is_bad, R->bad, is_bad ? ": " : "", is_bad ? msg : "");
        FUZZ_REQUIRE(rp[r + 1] >= rp[r], "%s: indptr decreases at %zu", pass, r);
        size_t a = rp[r], z = rp[r + 1];
        size_t nv = vp ? vp[r + 1] - vp[r] : vals ? z - a : 0, v0 = vp ? vp[r] : a;
        if (is_bad) {
            bi++;
            FUZZ_REQUIRE(bline == R->line, "%s: bad row %zu at line %llu, reference line %llu", pass, r,
                         (unsigned long long)bline, (unsigned long long)R->line);
            char want[40];
            snprintf(want, sizeof want, "line %llu: ", (unsigned long long)R->line);
            FUZZ_REQUIRE(msg && strncmp(msg, want, strlen(want)) == 0, "%s: bad row message '%s'", pass, msg ? msg : "(null)");
            FUZZ_REQUIRE(z == a && nv == 0, "%s: bad row %zu has %zu features", pass, r, z - a);
            continue;
        }
        FUZZ_REQUIRE(nv == R->nv && z - a == R->nv + R->nb, "%s: row %zu (line %llu): %zu valued + %zu binary, "
                     "reference %zu + %zu", pass, r, (unsigned long long)R->line, nv, z - a - nv, R->nv, R->nb);
        for (size_t k = 0; k < R->nv; k++) {
            uint32_t fb, rb;
            memcpy(&fb, &vals[v0 + k], 4);
            memcpy(&rb, &R->vals[k], 4);
            FUZZ_REQUIRE(ids[a + k] == R->vids[k] && fb == rb, "%s: row %zu feature %zu: %u:%.9g, reference %u:%.9g",
                         pass, r, k, ids[a + k], (double)vals[v0 + k], R->vids[k], (double)R->vals[k]);
        }
        for (size_t k = 0; k < R->nb; k++)
            FUZZ_REQUIRE(ids[a + R->nv + k] == R->bids[k], "%s: row %zu binary feature %zu: %u, reference %u",
                         pass, r, k, ids[a + R->nv + k], R->bids[k]);
    }
    FUZZ_REQUIRE(nbad == want_bad, "%s: %zu bad rows, reference %zu", pass, nbad, want_bad);
}

/* ---- the target ------------------------------------------------------------------ */

static wisp_model *model;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_init_common();
    /* a small f32 model: ids 0..63 in range, the rest ignored */
    float w[64];
    for (int i = 0; i < 64; i++) w[i] = (float)((i * 37 % 29) - 14) / 8.0f;
    const char *path = fuzz_path("libsvm.wisp");
    if (wisp_model_write(path, w, 64, 0.25, WISP_F32, "source=fuzz", NULL) != WISP_OK ||
        wisp_model_load(fuzz_eng, path, &model) != WISP_OK) {
        fprintf(stderr, "fuzz_libsvm: %s\n", wisp_errmsg());
        abort();
    }
    return 0;
}

static wisp_batch *new_batch(void)
{
    wisp_batch *b = NULL;
    int st = wisp_batch_new(fuzz_eng, &b);
    FUZZ_REQUIRE(st == WISP_OK, "batch_new -> %d", st);
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    size_t chunk = 1 + data[0] % 97, max_rows = data[1] % 8;
    size_t len = size - 2;
    char *text = malloc(len ? len : 1);           /* exactly sized: no terminator to lean on */
    memcpy(text, data + 2, len);

    ref_batch R;
    ref_parse(&R, text, len);

    /* 1. one call, final */
    wisp_batch *b1 = new_batch();
    uint64_t ln = 0;
    size_t used = 0;
    int st = wisp_batch_parse_libsvm(b1, text, len, 1, 0, &ln, &used);
    FUZZ_REQUIRE(st == WISP_OK, "final parse -> %d", st);
    FUZZ_REQUIRE(used == len && ln == R.lines, "final parse used %zu of %zu bytes, %llu lines (reference %llu)",
                 used, len, (unsigned long long)ln, (unsigned long long)R.lines);
    check_batch(b1, &R, "one call");

    /* 2. not final, then final on the rest */
    wisp_batch *b2 = new_batch();
    ln = 0;
    st = wisp_batch_parse_libsvm(b2, text, len, 0, 0, &ln, &used);
    FUZZ_REQUIRE(st == WISP_OK && used <= len, "non-final parse -> %d, used %zu", st, used);
    const char *nl = len ? memchr(text, '\n', len) : NULL;
    size_t last_nl = 0;
    for (size_t i = len; i > 0; i--) if (text[i - 1] == '\n') { last_nl = i; break; }
    FUZZ_REQUIRE(used == last_nl, "non-final parse used %zu bytes, the last line ends at %zu (%s)", used, last_nl,
                 nl ? "has newlines" : "no newline");
    size_t rest = len - used;
    char *tail = malloc(rest ? rest : 1);
    memcpy(tail, text + used, rest);
    size_t used2 = 0;
    st = wisp_batch_parse_libsvm(b2, tail, rest, 1, 0, &ln, &used2);
    FUZZ_REQUIRE(st == WISP_OK && used2 == rest && ln == R.lines, "final rest -> %d, used %zu of %zu", st, used2, rest);
    free(tail);
    check_batch(b2, &R, "non-final + final");

    /* 3. streaming: chunks appended to a buffer, parsed with max_rows */
    wisp_batch *b3 = new_batch();
    char *buf = NULL;
    size_t have = 0, fed = 0;
    ln = 0;
    for (;;) {
        int final = fed == len;
        size_t u = 0;
        char *exact = malloc(have ? have : 1);     /* an exactly sized copy for every call */
        if (have) memcpy(exact, buf, have);
        st = wisp_batch_parse_libsvm(b3, exact, have, final, max_rows, &ln, &u);
        free(exact);
        FUZZ_REQUIRE(st == WISP_OK && u <= have, "streaming parse -> %d, used %zu of %zu", st, u, have);
        if (have > u) memmove(buf, buf + u, have - u);
        have -= u;
        if (final && have == 0) break;
        if (u > 0 && max_rows) continue;           /* maybe more whole lines in the buffer */
        if (final) FUZZ_REQUIRE(u > 0, "final streaming call made no progress with %zu bytes left", have);
        else {
            size_t k = len - fed < chunk ? len - fed : chunk;
            buf = realloc(buf, have + k + 1);
            memcpy(buf + have, text + fed, k);
            have += k;
            fed += k;
        }
    }
    free(buf);
    FUZZ_REQUIRE(ln == R.lines, "streaming counted %llu lines, reference %llu", (unsigned long long)ln,
                 (unsigned long long)R.lines);
    check_batch(b3, &R, "streaming");

    /* 4. scores, and the cleared batch refilled gives the same */
    fuzz_check_scores(model, b1);
    wisp_batch_clear(b3);
    FUZZ_REQUIRE(wisp_batch_rows(b3) == 0 && wisp_batch_nnz(b3) == 0 && wisp_batch_bad_count(b3) == 0, "clear");
    ln = 0;
    st = wisp_batch_parse_libsvm(b3, text, len, 1, 0, &ln, &used);
    FUZZ_REQUIRE(st == WISP_OK, "parse after clear -> %d", st);
    check_batch(b3, &R, "after clear");

    /* 5. the reference rows through the builders (bad rows: empty, marked bad) give the same batch */
    wisp_batch *b4 = new_batch();
    for (size_t r = 0; r < R.n; r++) {
        const ref_row *w = &R.rows[r];
        uint64_t *v64 = malloc((w->nv + w->nb + 1) * sizeof *v64), *b64 = v64 + w->nv;
        for (size_t k = 0; k < w->nv; k++) v64[k] = w->vids[k] == WISP_ID_NONE ? (uint64_t)1 << 40 : w->vids[k];
        for (size_t k = 0; k < w->nb; k++) b64[k] = w->bids[k] == WISP_ID_NONE ? UINT64_MAX : w->bids[k];
        if (w->bad) st = wisp_batch_add_row(b4, NULL, NULL, 0);
        else if (w->nv && !w->nb) st = wisp_batch_add_row(b4, v64, w->vals, w->nv);
        else if (!w->nv) st = wisp_batch_add_row(b4, b64, NULL, w->nb);
        else st = wisp_batch_add_row_mixed(b4, v64, w->vals, w->nv, b64, w->nb);
        FUZZ_REQUIRE(st == WISP_OK, "builder row %zu -> %d", r, st);
        if (w->bad) {
            char msg[40];
            snprintf(msg, sizeof msg, "line %llu: bad", (unsigned long long)w->line);
            st = wisp__batch_mark_bad(b4, r, w->line, msg);
            FUZZ_REQUIRE(st == WISP_OK, "mark_bad row %zu -> %d", r, st);
        }
        free(v64);
    }
    check_batch(b4, &R, "builders");
    wisp_batch_free(b4);

    wisp_batch_free(b1);
    wisp_batch_free(b2);
    wisp_batch_free(b3);
    ref_free(&R);
    free(text);
    return 0;
}
