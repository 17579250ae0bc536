/* import_vw.c — Vowpal Wabbit --readable_model and --invert_hash files imported as .wisp models (wisp_import_vw). */
#include "model/model.h"
#include "parse/textnum.h"

#include <float.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the importer: --readable_model and --invert_hash files ------------------
 *
 * VW 9 writes (gd's save_load_regressor, text mode):
 *     Version 9.11.9
 *     Id <id>
 *     Min label:-50                    logistic loss sets -50 / 50; others the labels seen
 *     Max label:50
 *     bits:18
 *     lda:0
 *     0 ngram:
 *     0 skip:
 *     options: --link logistic --quadratic ab
 *     Checksum: 3432043552
 *     ...                              learner state ("initial_t 0", "t 5", ":1", ...)
 *     7880:0.0180065 1.34637 2         index:weight [per-weight learner state]
 *     a^x*b^p:537:0.0486315 2.33 2     (--invert_hash: name:index:weight ...)
 * The index is the weight's position in VW's table without its stride, so
 * weights land at index in a table of 2^bits, the constant included (at
 * 11650396 & mask, like any feature), and the model bias is 0: wisp then
 * computes exactly VW's sum, and p = sigmoid(sum) is VW's -p output with
 * --link logistic for a model trained with --loss_function logistic
 * (VW also clips the sum to [min label, max label] = [-50, 50] first:
 * sigmoid(-50) = 2e-22, so the difference is below 1e-21).
 * Options that change what a prediction is (reductions such as --oaa,
 * --nn, --lrq, cubic interactions, n-grams, ...) are refused with a message.
 */

static bool all_digits(const char *s, size_t n)
{
    if (n == 0 || n > 10) return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned)(s[i] - '0') > 9) return false;
    return true;
}

/* A weight line: "index:weight[ extra...]" or "name:index:weight[ extra...]".
 * Returns 1 with *index and *wt, 0 when the line is not one. */
static int weight_line(const char *ln, uint64_t *index, double *wt)
{
    size_t t = strcspn(ln, " \t");
    const char *c2 = NULL, *c1 = NULL;         /* the last and second-last ':' within the first token */
    for (const char *p = ln; p < ln + t; p++)
        if (*p == ':') { c1 = c2; c2 = p; }
    if (!c2) return 0;
    const char *is = c1 ? c1 + 1 : ln;
    if (!all_digits(is, (size_t)(c2 - is))) return 0;
    char *end;
    double w = strtod_l(c2 + 1, &end, wisp__textnum_c_locale());
    if (end == c2 + 1 || end != ln + t) return 0;
    *index = strtoull(is, NULL, 10);
    *wt = w;
    return 1;
}

static const char *const vw_refuse_hint =
    "wisp imports linear models (gd, the default learner) with quadratic interactions";

/* The header is complete: parse its options with bits: first, check that an
 * option -b (if any) says the same as bits: (bits: sizes the table; a model whose
 * options disagree would hash into a smaller table than it has), and allocate
 * the zeroed table of 2^bits weights. */
static int vw_header_table(const char *vw_path, long bits, const char *options, unsigned long long opt_line,
                           wisp_vw **v, float **w)
{
    char vopts[4200];
    snprintf(vopts, sizeof vopts, "-b %ld %s", bits, options);
    int rc = wisp_vw_new(vopts, v);
    if (rc != WISP_OK) {
        const char *m = wisp_errmsg();
        if (!strncmp(m, "wisp_vw_new: ", 13)) m += 13;
        char copy[512];
        snprintf(copy, sizeof copy, "%s", m);
        return wisp__fail(rc, "%s:%llu: %s; %s", vw_path, opt_line, copy, vw_refuse_hint);
    }
    if (wisp_vw_bits(*v) != bits)
        return wisp__fail(WISP_EFORMAT, "%s:%llu: the options say -b %d but the header says bits:%ld", vw_path,
                         opt_line, wisp_vw_bits(*v), bits);
    *w = wisp__calloc((size_t)1 << bits, sizeof **w);
    if (!*w) return wisp__fail(WISP_ENOMEM, "%s: out of memory for 2^%ld weights", vw_path, bits);
    return WISP_OK;
}

int wisp_import_vw(const char *vw_path, const char *out_path, int dtype)
{
    if (!vw_path || !out_path)
        return wisp__fail(WISP_EINVAL, "wisp_import_vw: %s is NULL", !vw_path ? "vw_path" : "out_path");
    if (!wisp_dtype_name(dtype))
        return wisp__fail(WISP_EINVAL, "%s: unknown weight dtype %d (f32 0, f16 1, i8 2)", out_path, dtype);
    if (!wisp__textnum_c_locale()) return wisp__fail(WISP_ENOMEM, "wisp_import_vw: cannot create the C locale");
    char *buf = NULL;
    size_t len = 0;
    int rc = wisp__read_file(vw_path, "Vowpal Wabbit model", &buf, &len);
    if (rc) return rc;
    if (memchr(buf, '\0', len)) {
        wisp__free(buf);
        return wisp__fail(WISP_EPARSE, "%s: contains a NUL byte: not a VW text model", vw_path);
    }

    char version[64] = "", options[4096] = "", link[32] = "identity";
    double min_label = NAN, max_label = NAN;
    long bits = -1;
    unsigned long long lineno = 0, opt_line = 0, nweights = 0;
    bool in_weights = false, have_version = false;
    float *w = NULL;
    wisp_vw *v = NULL;
    for (char *p = buf, *end = buf + len; p < end;) {
        char *ln = p, *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        p = nl ? nl + 1 : end;
        ln[n] = '\0';
        lineno++;
        while (n && (ln[n - 1] == '\r' || ln[n - 1] == ' ' || ln[n - 1] == '\t')) ln[--n] = '\0';
        if (n == 0) continue;
        uint64_t index;
        double wt;
        if (weight_line(ln, &index, &wt)) {
            if (!in_weights) {
                /* the header is complete: check it, make the table */
                if (!have_version || bits < 0) {
                    rc = wisp__fail(WISP_EPARSE, "%s:%llu: a weight line before the header's %s line: not a VW "
                                   "--readable_model or --invert_hash file", vw_path, lineno,
                                   !have_version ? "'Version'" : "'bits:'");
                    goto out;
                }
                if ((rc = vw_header_table(vw_path, bits, options, opt_line, &v, &w)) != WISP_OK) goto out;
                in_weights = true;
            }
            if (index >> bits) {
                rc = wisp__fail(WISP_EFORMAT, "%s:%llu: index %llu is outside the table of 2^%ld weights (bits:%ld)",
                               vw_path, lineno, (unsigned long long)index, bits, bits);
                goto out;
            }
            if (!isfinite(wt) || fabs(wt) > FLT_MAX) {
                rc = wisp__fail(WISP_EPARSE, "%s:%llu: weight %.17g is not a finite 32-bit float", vw_path, lineno, wt);
                goto out;
            }
            float f = (float)wt;
            if (w[index] != 0.0f && w[index] != f) {
                rc = wisp__fail(WISP_EFORMAT, "%s:%llu: index %llu appears twice with different weights (%.9g, %.9g)",
                               vw_path, lineno, (unsigned long long)index, (double)w[index], (double)f);
                goto out;
            }
            w[index] = f;
            nweights++;
            continue;
        }
        if (in_weights) {
            rc = wisp__fail(WISP_EPARSE, "%s:%llu: expected a weight line (index:weight or name:index:weight), "
                           "found '%.40s'", vw_path, lineno, ln);
            goto out;
        }
        /* header lines */
        if (!strncmp(ln, "Version ", 8)) {
            snprintf(version, sizeof version, "%s", ln + 8);
            have_version = true;
        } else if (!strncmp(ln, "bits:", 5)) {
            char *bend;
            bits = strtol(ln + 5, &bend, 10);
            if (bend == ln + 5 || *bend || bits < 1 || bits > 31) {
                rc = wisp__fail(bits > 31 && *bend == '\0' ? WISP_ELIMIT : WISP_EPARSE,
                               "%s:%llu: '%s': wisp imports models of 1 to 31 bits", vw_path, lineno, ln);
                goto out;
            }
        } else if (!strncmp(ln, "Min label:", 10)) {
            min_label = strtod_l(ln + 10, NULL, wisp__textnum_c_locale());
        } else if (!strncmp(ln, "Max label:", 10)) {
            max_label = strtod_l(ln + 10, NULL, wisp__textnum_c_locale());
        } else if (!strncmp(ln, "lda:", 4)) {
            if (strtol(ln + 4, NULL, 10) != 0) {
                rc = wisp__fail(WISP_EPARSE, "%s:%llu: an LDA model (%s) is not supported; %s", vw_path, lineno, ln,
                               vw_refuse_hint);
                goto out;
            }
        } else if (strstr(ln, " ngram:") || strstr(ln, " skip:")) {
            if (strtol(ln, NULL, 10) != 0) {
                rc = wisp__fail(WISP_EPARSE, "%s:%llu: '%s': n-grams and skips (--ngram, --skips) are not "
                               "supported; %s", vw_path, lineno, ln, vw_refuse_hint);
                goto out;
            }
        } else if (!strncmp(ln, "options:", 8)) {
            if (strlen(ln + 8) >= sizeof options) {
                rc = wisp__fail(WISP_ELIMIT, "%s:%llu: the options line is too long", vw_path, lineno);
                goto out;
            }
            snprintf(options, sizeof options, "%s", ln + 8);
            opt_line = lineno;
            const char *l = strstr(options, "--link ");
            if (l) sscanf(l + 7, "%31s", link);
        }
    }
    if (!in_weights) {
        if (!have_version || bits < 0)
            rc = wisp__fail(WISP_EPARSE, "%s: not a VW --readable_model or --invert_hash file (no %s line)", vw_path,
                           !have_version ? "'Version'" : "'bits:'");
        else {
            /* a model whose weights are all 0: still a model */
            rc = vw_header_table(vw_path, bits, options, opt_line, &v, &w);
        }
        if (rc) goto out;
    }
    {
        bool logistic = min_label == -50 && max_label == 50;
        char meta[4800];
        snprintf(meta, sizeof meta,
                 "source=vw\nvw_version=%s\nvw_options=%s\nvw_link=%s\nvw_loss=%s\nvw_min_label=%.9g\n"
                 "vw_max_label=%.9g\nvw_weights=%llu\n",
                 version, wisp_vw_options(v), link, logistic ? "logistic" : "unknown", min_label, max_label, nweights);
        rc = wisp_model_write(out_path, w, (uint64_t)1 << bits, 0.0, dtype, meta, NULL);
    }
out:
    wisp__free(w);
    wisp_vw_free(v);
    wisp__free(buf);
    return rc;
}
