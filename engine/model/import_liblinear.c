/* import_liblinear.c — reads a LIBLINEAR binary logistic-regression model file and writes it as a .wisp model. */

/*
 * LIBLINEAR's model text (save_model in linear.cpp):
 *
 *     solver_type L2R_LR
 *     nr_class 2
 *     label 1 -1
 *     nr_feature 123
 *     bias 1                      (a value; < 0 means no bias feature)
 *     [rho 0]                     (one-class SVM only; accepted and ignored)
 *     w
 *     <w_1>                       one weight per line ("%.17g "), nr_feature
 *     ...                         lines, plus one more when bias >= 0
 *
 * Mapping to wisp: LIBLINEAR's feature index i (1-based) is wisp id i; table
 * slot 0 has weight 0 and num_features = nr_feature + 1. When bias >= 0,
 * LIBLINEAR appends a feature of value `bias` whose weight is the last w, so
 * the model bias is w_last * bias. LIBLINEAR's probability of label[0] is
 * 1 / (1 + exp(-dec_value)) with dec_value = sum w_i x_i (+ w_last * bias),
 * which is exactly wisp's score. liblinear-predict drops test features whose
 * index exceeds nr_feature, as wisp ignores ids >= num_features.
 *
 * Header keywords may come in any order (as LIBLINEAR's loader allows), each
 * once; blank lines are skipped in the header and after the last weight.
 * Numbers are parsed in the "C" locale, whatever the process's locale is.
 */

#include "model/model.h"
#include "parse/parse.h"

#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef unsigned long long ull;

struct reader {
    const char *path;
    char *buf;          /* the whole file, NUL-terminated; lines are cut in place */
    size_t len, pos;
    ull line;           /* number of the line last returned */
    locale_t c_locale;
};

/* Read the whole file into memory (NUL-terminated); `what` names what the file
 * should be, for the message about a directory. Shared with import_vw.c. */
int wisp__read_file(const char *path, const char *what, char **out, size_t *len)
{
    char eb[128];
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return wisp__fail(WISP_EIO, "%s: cannot open: %s", path, strerror_r(errno, eb, sizeof eb));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return wisp__fail(WISP_EIO, "%s: cannot stat: %s", path, strerror_r(e, eb, sizeof eb));
    }
    if (S_ISDIR(sb.st_mode)) { close(fd); return wisp__fail(WISP_EIO, "%s: is a directory, not a %s", path, what); }
    if (!S_ISREG(sb.st_mode)) { close(fd); return wisp__fail(WISP_EIO, "%s: not a regular file", path); }
    size_t cap = (size_t)sb.st_size + 1, n = 0;
    char *buf = wisp__malloc(cap);
    if (!buf) { close(fd); return wisp__fail(WISP_ENOMEM, "%s: out of memory for %zu bytes", path, cap); }
    for (;;) {
        if (n + 1 == cap) {     /* the file grew while we read it: keep going */
            char *nb = wisp__realloc(buf, cap * 2);
            if (!nb) { wisp__free(buf); close(fd); return wisp__fail(WISP_ENOMEM, "%s: out of memory", path); }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            wisp__free(buf);
            close(fd);
            return wisp__fail(WISP_EIO, "%s: cannot read: %s", path, strerror_r(e, eb, sizeof eb));
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return WISP_OK;
}

/* The next line (without '\n', trailing '\r', spaces and tabs cut), or NULL at
 * the end. Fails (returns NULL, *rc set) on a NUL byte or an over-long line. */
static char *next_line(struct reader *r, int *rc)
{
    *rc = WISP_OK;
    if (r->pos >= r->len) return NULL;
    char *s = r->buf + r->pos;
    char *nl = memchr(s, '\n', r->len - r->pos);
    size_t n = nl ? (size_t)(nl - s) : r->len - r->pos;
    r->pos += n + (nl ? 1 : 0);
    r->line++;
    if (n > WISP_MAX_LINE_BYTES) {
        *rc = wisp__fail(WISP_ELIMIT, "%s:%llu: line longer than %u bytes", r->path, r->line, WISP_MAX_LINE_BYTES);
        return NULL;
    }
    if (memchr(s, '\0', n)) {
        *rc = wisp__fail(WISP_EPARSE, "%s:%llu: contains a NUL byte", r->path, r->line);
        return NULL;
    }
    s[n] = '\0';
    while (n > 0 && (s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = '\0';
    return s;
}

static bool is_space(char c) { return c == ' ' || c == '\t'; }

/* Split off the next whitespace-separated token of *s (NUL-terminating it). */
static char *token(char **s)
{
    char *p = *s;
    while (is_space(*p)) p++;
    if (!*p) { *s = p; return NULL; }
    char *t = p;
    while (*p && !is_space(*p)) p++;
    if (*p) *p++ = '\0';
    *s = p;
    return t;
}

static int parse_double(struct reader *r, const char *tok, const char *what, double *out)
{
    char *end;
    errno = 0;
    double v = strtod_l(tok, &end, r->c_locale);
    if (end == tok || *end != '\0')
        return wisp__fail(WISP_EPARSE, "%s:%llu: %s: '%.40s' is not a number", r->path, r->line, what, tok);
    if (!isfinite(v))
        return wisp__fail(WISP_EPARSE, "%s:%llu: %s: '%.40s' is not a finite number", r->path, r->line, what, tok);
    *out = v;
    return WISP_OK;
}

static int parse_int(struct reader *r, const char *tok, const char *what, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(tok, &end, 10);
    if (end == tok || *end != '\0')
        return wisp__fail(WISP_EPARSE, "%s:%llu: %s: '%.40s' is not an integer", r->path, r->line, what, tok);
    if (errno == ERANGE)
        return wisp__fail(WISP_EPARSE, "%s:%llu: %s: '%.40s' is out of range", r->path, r->line, what, tok);
    *out = v;
    return WISP_OK;
}

/* The single value after a keyword; anything more is an error. */
static int one_value(struct reader *r, char **rest, const char *kw, char **val)
{
    *val = token(rest);
    if (!*val) return wisp__fail(WISP_EPARSE, "%s:%llu: '%s' needs a value", r->path, r->line, kw);
    if (token(rest)) return wisp__fail(WISP_EPARSE, "%s:%llu: '%s' takes one value", r->path, r->line, kw);
    return WISP_OK;
}

static const char *const lr_solvers[] = { "L2R_LR", "L1R_LR", "L2R_LR_DUAL" };
static const char *const other_solvers[] = {
    "L2R_L2LOSS_SVC_DUAL", "L2R_L2LOSS_SVC", "L2R_L1LOSS_SVC_DUAL", "MCSVM_CS", "L1R_L2LOSS_SVC",
    "L2R_L2LOSS_SVR", "L2R_L2LOSS_SVR_DUAL", "L2R_L1LOSS_SVR_DUAL", "ONECLASS_SVM",
};

static int import(struct reader *r, const char *out_path, int dtype)
{
    int rc;
    char *ln;
    char solver[32] = "", labels[96] = "", label0[48] = "";
    long long nr_class = -1, nr_feature = -1;
    double bias = 0;
    bool have_bias = false, have_rho = false, have_w = false, have_labels = false;

    /* header */
    while ((ln = next_line(r, &rc)) != NULL) {
        char *rest = ln, *kw = token(&rest), *val;
        if (!kw) continue;                                   /* blank line */
        if (strcmp(kw, "w") == 0) {
            if (token(&rest)) return wisp__fail(WISP_EPARSE, "%s:%llu: 'w' takes no value", r->path, r->line);
            have_w = true;
            break;
        }
        if (strcmp(kw, "solver_type") == 0) {
            if (solver[0]) return wisp__fail(WISP_EPARSE, "%s:%llu: a second 'solver_type' line", r->path, r->line);
            if ((rc = one_value(r, &rest, kw, &val))) return rc;
            bool ok = false, known = false;
            for (size_t i = 0; i < sizeof lr_solvers / sizeof *lr_solvers; i++)
                if (strcmp(val, lr_solvers[i]) == 0) ok = true;
            for (size_t i = 0; i < sizeof other_solvers / sizeof *other_solvers; i++)
                if (strcmp(val, other_solvers[i]) == 0) known = true;
            if (!ok && known)
                return wisp__fail(WISP_EPARSE, "%s:%llu: solver %s is not logistic regression; wisp imports "
                                 "L2R_LR, L1R_LR and L2R_LR_DUAL models", r->path, r->line, val);
            if (!ok)
                return wisp__fail(WISP_EPARSE, "%s:%llu: unknown solver '%.40s'; wisp imports L2R_LR, L1R_LR "
                                 "and L2R_LR_DUAL models", r->path, r->line, val);
            snprintf(solver, sizeof solver, "%s", val);
        } else if (strcmp(kw, "nr_class") == 0) {
            if (nr_class >= 0) return wisp__fail(WISP_EPARSE, "%s:%llu: a second 'nr_class' line", r->path, r->line);
            if ((rc = one_value(r, &rest, kw, &val)) || (rc = parse_int(r, val, "nr_class", &nr_class))) return rc;
            if (nr_class != 2)
                return wisp__fail(WISP_EPARSE, "%s:%llu: nr_class %lld: wisp imports binary models "
                                 "(nr_class 2) only", r->path, r->line, nr_class);
        } else if (strcmp(kw, "label") == 0) {
            if (have_labels) return wisp__fail(WISP_EPARSE, "%s:%llu: a second 'label' line", r->path, r->line);
            long long lab[2];
            int n = 0;
            for (char *t; (t = token(&rest)) != NULL; n++) {
                if (n >= 2)
                    return wisp__fail(WISP_EPARSE, "%s:%llu: more than 2 labels; wisp imports binary models",
                                     r->path, r->line);
                if ((rc = parse_int(r, t, "label", &lab[n]))) return rc;
            }
            if (n != 2)
                return wisp__fail(WISP_EPARSE, "%s:%llu: the label line has %d label%s, a binary model has 2",
                                 r->path, r->line, n, n == 1 ? "" : "s");
            snprintf(labels, sizeof labels, "%lld %lld", lab[0], lab[1]);
            snprintf(label0, sizeof label0, "%lld", lab[0]);
            have_labels = true;
        } else if (strcmp(kw, "nr_feature") == 0) {
            if (nr_feature >= 0)
                return wisp__fail(WISP_EPARSE, "%s:%llu: a second 'nr_feature' line", r->path, r->line);
            if ((rc = one_value(r, &rest, kw, &val)) || (rc = parse_int(r, val, "nr_feature", &nr_feature))) return rc;
            if (nr_feature < 0)
                return wisp__fail(WISP_EPARSE, "%s:%llu: nr_feature %lld is negative", r->path, r->line, nr_feature);
            if ((unsigned long long)nr_feature + 1 > WISP_MAX_FEATURES)
                return wisp__fail(WISP_ELIMIT, "%s:%llu: nr_feature %lld exceeds wisp's limit of %llu features",
                                 r->path, r->line, nr_feature, (ull)WISP_MAX_FEATURES - 1);
        } else if (strcmp(kw, "bias") == 0) {
            if (have_bias) return wisp__fail(WISP_EPARSE, "%s:%llu: a second 'bias' line", r->path, r->line);
            if ((rc = one_value(r, &rest, kw, &val)) || (rc = parse_double(r, val, "bias", &bias))) return rc;
            have_bias = true;
        } else if (strcmp(kw, "rho") == 0) {
            double rho;
            if (have_rho) return wisp__fail(WISP_EPARSE, "%s:%llu: a second 'rho' line", r->path, r->line);
            if ((rc = one_value(r, &rest, kw, &val)) || (rc = parse_double(r, val, "rho", &rho))) return rc;
            have_rho = true;
        } else {
            return wisp__fail(WISP_EPARSE, "%s:%llu: unknown keyword '%.40s' (expected solver_type, nr_class, "
                             "label, nr_feature, bias, rho or w)", r->path, r->line, kw);
        }
    }
    if (rc) return rc;
    const char *missing = !solver[0] ? "solver_type" : nr_class < 0 ? "nr_class" : !have_labels ? "label"
                        : nr_feature < 0 ? "nr_feature" : !have_bias ? "bias" : NULL;
    if (!have_w)
        return wisp__fail(WISP_EPARSE, "%s:%llu: the file ends before the 'w' line%s%s", r->path, r->line + 1,
                         missing ? "; also missing: " : "", missing ? missing : "");
    if (missing)
        return wisp__fail(WISP_EPARSE, "%s:%llu: 'w' comes before the '%s' line", r->path, r->line, missing);

    /* weights: nr_feature lines, then the bias feature's weight when bias >= 0 */
    uint64_t nw = (uint64_t)nr_feature + (bias >= 0 ? 1 : 0);
    uint64_t left = r->len - r->pos;
    if (nw > 0 && left / 2 + 1 < nw)    /* each weight line takes >= 2 bytes ("0\n"), the last >= 1 */
        return wisp__fail(WISP_EPARSE, "%s:%llu: expected %llu weight lines after 'w' but the file has only "
                         "%llu bytes left (truncated?)", r->path, r->line, (ull)nw, (ull)left);
    uint64_t nf = (uint64_t)nr_feature + 1;
    float *w = wisp__calloc((size_t)nf, sizeof *w);
    if (!w) return wisp__fail(WISP_ENOMEM, "%s: out of memory for %llu weights", r->path, (ull)nf);
    double w_last = 0;
    for (uint64_t i = 0; i < nw; i++) {
        ln = next_line(r, &rc);
        if (!ln) {
            if (!rc)
                rc = wisp__fail(WISP_EPARSE, "%s:%llu: the file ends after %llu of %llu weights (truncated?)",
                               r->path, r->line + 1, (ull)i, (ull)nw);
            wisp__free(w);
            return rc;
        }
        char *rest = ln, *t = token(&rest);
        double v;
        if (!t) rc = wisp__fail(WISP_EPARSE, "%s:%llu: expected weight %llu of %llu, found an empty line",
                               r->path, r->line, (ull)i + 1, (ull)nw);
        else if (token(&rest))
            rc = wisp__fail(WISP_EPARSE, "%s:%llu: expected one weight per line (a binary model), found more",
                           r->path, r->line);
        else rc = parse_double(r, t, "weight", &v);
        if (rc) { wisp__free(w); return rc; }
        if (i < (uint64_t)nr_feature) {
            if (fabs(v) > 3.4028234663852886e38) {
                wisp__free(w);
                return wisp__fail(WISP_EPARSE, "%s:%llu: weight %.17g does not fit in a 32-bit float",
                                 r->path, r->line, v);
            }
            w[i + 1] = (float)v;
        } else {
            w_last = v;
        }
    }
    while ((ln = next_line(r, &rc)) != NULL) {
        char *rest = ln;
        if (token(&rest)) {
            wisp__free(w);
            return wisp__fail(WISP_EPARSE, "%s:%llu: unexpected text after the last of %llu weights",
                             r->path, r->line, (ull)nw);
        }
    }
    if (rc) { wisp__free(w); return rc; }
    double model_bias = bias >= 0 ? w_last * bias : 0.0;
    if (!isfinite(model_bias)) {
        wisp__free(w);
        return wisp__fail(WISP_EPARSE, "%s: the bias term (weight %g x bias %g) is not finite", r->path, w_last, bias);
    }
    char meta[512];
    snprintf(meta, sizeof meta,
             "source=liblinear\nsolver=%s\nlabels=%s\nscore_label=%s\nliblinear_bias=%.17g\n"
             "liblinear_nr_feature=%lld\n", solver, labels, label0, bias, nr_feature);
    rc = wisp_model_write(out_path, w, nf, model_bias, dtype, meta, NULL);
    wisp__free(w);
    return rc;
}

int wisp_import_liblinear(const char *liblinear_path, const char *out_path, int dtype)
{
    if (!liblinear_path || !out_path)
        return wisp__fail(WISP_EINVAL, "wisp_import_liblinear: %s is NULL",
                          !liblinear_path ? "liblinear_path" : "out_path");
    if (!wisp_dtype_name(dtype))
        return wisp__fail(WISP_EINVAL, "%s: unknown weight dtype %d (f32 0, f16 1, i8 2)", out_path, dtype);
    struct reader r = { .path = liblinear_path };
    int rc = wisp__read_file(liblinear_path, "LIBLINEAR model", &r.buf, &r.len);
    if (rc) return rc;
    r.c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (r.c_locale == (locale_t)0) {
        wisp__free(r.buf);
        return wisp__fail(WISP_ENOMEM, "%s: cannot create the C locale", liblinear_path);
    }
    if (r.len == 0) rc = wisp__fail(WISP_EPARSE, "%s:1: empty file, not a LIBLINEAR model", liblinear_path);
    else rc = import(&r, out_path, dtype);
    freelocale(r.c_locale);
    wisp__free(r.buf);
    return rc;
}
