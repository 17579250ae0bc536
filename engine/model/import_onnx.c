/* import_onnx.c — ONNX-ML LinearClassifier / LinearRegressor models (as skl2onnx writes them) into .wisp files, through
 * a small protobuf reader.
 *
 * What is read (onnx/onnx.proto3, onnx/onnx-ml.proto3; field numbers):
 *   ModelProto      7 graph
 *   GraphProto      1 node (repeated), 11 input (repeated ValueInfoProto: 1 name)
 *   NodeProto       1 input, 2 output (repeated strings), 4 op_type, 5 attribute, 7 domain
 *   AttributeProto  1 name, 2 f, 3 i, 4 s, 7 floats (packed or not), 8 ints, 9 strings
 * Every other field is skipped by its wire type. The file is untrusted:
 * every varint, length and count is checked against what is left.
 *
 * Accepted graphs: exactly one LinearClassifier or LinearRegressor node of
 * domain ai.onnx.ml whose input is a graph input; the other nodes may only
 * post-process its outputs (Cast, ZipMap, Identity: skl2onnx's). Anything
 * else is refused with the reason (WISP_EPARSE naming the node).
 *   LinearClassifier: two class labels (classlabels_ints or _strings),
 *     post_transform LOGISTIC or NONE, coefficients of 2 x n (a row per
 *     class: skl2onnx writes -w, w) or 1 x n (the second class's score),
 *     intercepts to match. wisp's score is sigmoid(class 1's score): ONNX
 *     Runtime's probabilities[:, 1] under LOGISTIC (each class score goes
 *     through the sigmoid on its own); under NONE its raw scores[:, 1],
 *     here made a probability with the sigmoid. Other transforms (SOFTMAX,
 *     SOFTMAX_ZERO, PROBIT) and more than two classes are refused.
 *   LinearRegressor: targets 1, post_transform NONE; the score is
 *     sigmoid(w . x + b) (a logistic model exported as a regressor).
 * Feature j (column j of the ONNX input X) is id j. Meta: source=onnx,
 * onnx_op, classes_json (the labels, JSON), score_class=1 (what the Python
 * package's classes_ and predict_proba read).
 */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const uint8_t *p, *end; } pb;

static int pb_varint(pb *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return -1;
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) { *v = x; return 0; }
    }
    return -1;
}

/* Next field: its number, wire type and, for length-delimited fields, the bytes. */
static int pb_field(pb *r, uint32_t *field, int *wire, uint64_t *v, pb *sub)
{
    uint64_t key;
    if (pb_varint(r, &key) || key >> 32 || (key >> 3) == 0) return -1;
    *field = (uint32_t)(key >> 3);
    *wire = (int)(key & 7);
    switch (*wire) {
    case 0: return pb_varint(r, v);
    case 1: if (r->end - r->p < 8) return -1; memcpy(v, r->p, 8); r->p += 8; return 0;
    case 5: { uint32_t x; if (r->end - r->p < 4) return -1; memcpy(&x, r->p, 4); r->p += 4; *v = x; return 0; }
    case 2:
        if (pb_varint(r, v) || *v > (uint64_t)(r->end - r->p)) return -1;
        sub->p = r->p; sub->end = r->p + *v; r->p += *v;
        return 0;
    default: return -1;        /* groups (3, 4) are not in ONNX */
    }
}

static int pb_streq(pb s, const char *lit)
{
    size_t n = strlen(lit);
    return (size_t)(s.end - s.p) == n && (n == 0 || !memcmp(s.p, lit, n));
}

typedef struct {
    pb op, domain, name;
    pb inputs[4], outputs[4];
    int ninputs, noutputs;
    pb attrs[32];
    int nattrs;
} node;

enum { MAX_NODES = 64, MAX_GRAPH_INPUTS = 16 };

typedef struct {
    const char *path;
    node nodes[MAX_NODES];
    int nnodes;
    pb ginputs[MAX_GRAPH_INPUTS];
    int nginputs;
} graph;

static int bad(const char *path, const char *what) { return wisp__fail(WISP_EPARSE, "%s: %s", path, what); }

static int read_node(graph *g, pb r)
{
    if (g->nnodes == MAX_NODES)
        return wisp__fail(WISP_EPARSE, "%s: more than %d nodes: not a linear model", g->path, MAX_NODES);
    node *n = &g->nodes[g->nnodes++];
    memset(n, 0, sizeof *n);
    while (r.p < r.end) {
        uint32_t f; int w; uint64_t v; pb s = { 0 };
        if (pb_field(&r, &f, &w, &v, &s)) return bad(g->path, "malformed protobuf in a graph node");
        if (w != 2) continue;
        switch (f) {
        case 1: if (n->ninputs < 4) n->inputs[n->ninputs] = s; n->ninputs++; break;
        case 2: if (n->noutputs < 4) n->outputs[n->noutputs] = s; n->noutputs++; break;
        case 3: n->name = s; break;
        case 4: n->op = s; break;
        case 5:
            if (n->nattrs == 32) return bad(g->path, "a node with more than 32 attributes");
            n->attrs[n->nattrs++] = s;
            break;
        case 7: n->domain = s; break;
        }
    }
    return WISP_OK;
}

static int read_graph(graph *g, pb r)
{
    while (r.p < r.end) {
        uint32_t f; int w; uint64_t v; pb s = { 0 };
        if (pb_field(&r, &f, &w, &v, &s)) return bad(g->path, "malformed protobuf in the graph");
        if (w != 2) continue;
        if (f == 1) {
            int rc = read_node(g, s);
            if (rc) return rc;
        } else if (f == 11 && g->nginputs < MAX_GRAPH_INPUTS) {
            pb vi = s;                           /* ValueInfoProto: 1 name */
            while (vi.p < vi.end) {
                uint32_t f2; int w2; uint64_t v2; pb s2 = { 0 };
                if (pb_field(&vi, &f2, &w2, &v2, &s2)) return bad(g->path, "malformed protobuf in a graph input");
                if (f2 == 1 && w2 == 2) g->ginputs[g->nginputs++] = s2;
            }
        }
    }
    return WISP_OK;
}

/* An attribute's parts. floats/ints are counted and copied on demand. */
typedef struct {
    pb name, s;
    double f;
    int64_t i;
    int has_f, has_i, has_s;
    pb body;               /* the whole attribute, to walk again for lists */
} attr;

static int read_attr(const char *path, pb r, attr *a)
{
    memset(a, 0, sizeof *a);
    a->body = r;
    while (r.p < r.end) {
        uint32_t f; int w; uint64_t v; pb s = { 0 };
        if (pb_field(&r, &f, &w, &v, &s)) return bad(path, "malformed protobuf in a node attribute");
        if (f == 1 && w == 2) a->name = s;
        else if (f == 2 && w == 5) { float x; uint32_t u = (uint32_t)v; memcpy(&x, &u, 4); a->f = x; a->has_f = 1; }
        else if (f == 3 && w == 0) { a->i = (int64_t)v; a->has_i = 1; }
        else if (f == 4 && w == 2) { a->s = s; a->has_s = 1; }
    }
    return WISP_OK;
}

/* The floats (field 7) of an attribute: count them (out NULL) or copy them. */
static int attr_floats(const char *path, const attr *a, float *out, size_t *n)
{
    pb r = a->body;
    size_t k = 0;
    while (r.p < r.end) {
        uint32_t f; int w; uint64_t v; pb s = { 0 };
        if (pb_field(&r, &f, &w, &v, &s)) return bad(path, "malformed protobuf in a float list");
        if (f != 7) continue;
        if (w == 5) {
            if (out) { uint32_t u = (uint32_t)v; memcpy(&out[k], &u, 4); }
            k++;
        } else if (w == 2) {
            if ((s.end - s.p) % 4) return bad(path, "a packed float list of a length not a multiple of 4");
            size_t m = (size_t)(s.end - s.p) / 4;
            if (out) memcpy(out + k, s.p, m * 4);
            k += m;
        }
    }
    *n = k;
    return WISP_OK;
}

/* Class labels: ints (field 8) or strings (field 9) as a JSON array text. */
static int attr_labels_json(const char *path, const attr *a, int strings, char *out, size_t cap, size_t *count)
{
    pb r = a->body;
    size_t k = 0, o = 0;
    out[o++] = '[';
    while (r.p < r.end) {
        uint32_t f; int w; uint64_t v; pb s = { 0 };
        if (pb_field(&r, &f, &w, &v, &s)) return bad(path, "malformed protobuf in a label list");
        if (!strings && f == 8 && (w == 0 || w == 2)) {
            pb q = s;
            do {
                uint64_t x = v;
                if (w == 2) {
                    if (q.p >= q.end) break;
                    if (pb_varint(&q, &x)) return bad(path, "malformed packed ints");
                }
                if (o + 24 >= cap) return bad(path, "class labels too long");
                o += (size_t)snprintf(out + o, cap - o, "%s%lld", k ? ", " : "", (long long)(int64_t)x);
                k++;
            } while (w == 2);
        } else if (strings && f == 9 && w == 2) {
            if (o + 8 + 6 * (size_t)(s.end - s.p) >= cap) return bad(path, "class labels too long");
            o += (size_t)snprintf(out + o, cap - o, "%s\"", k ? ", " : "");
            for (const uint8_t *c = s.p; c < s.end; c++) {
                if (*c == '"' || *c == '\\') { out[o++] = '\\'; out[o++] = (char)*c; }
                else if (*c < 0x20) o += (size_t)snprintf(out + o, cap - o, "\\u%04x", *c);
                else out[o++] = (char)*c;
            }
            out[o++] = '"';
            k++;
        }
    }
    out[o++] = ']';
    out[o] = 0;
    *count = k;
    return WISP_OK;
}

static int is_graph_input(const graph *g, pb name)
{
    for (int i = 0; i < g->nginputs; i++)
        if (g->ginputs[i].end - g->ginputs[i].p == name.end - name.p && name.end > name.p &&
            !memcmp(g->ginputs[i].p, name.p, (size_t)(name.end - name.p)))
            return 1;
    return 0;
}

static void pb_copy(pb s, char *buf, size_t cap)
{
    size_t n = (size_t)(s.end - s.p);
    if (n >= cap) n = cap - 1;
    if (n) memcpy(buf, s.p, n);           /* an absent field is {NULL, NULL} */
    buf[n] = 0;
}

static int import(const char *path, const uint8_t *data, size_t len, const char *out_path, int dtype)
{
    graph *g = wisp__malloc(sizeof *g);
    if (!g) return wisp__fail(WISP_ENOMEM, "%s: out of memory", path);
    memset(g, 0, sizeof *g);
    g->path = path;
    pb r = { data, data + len };
    int have_graph = 0, rc = WISP_OK;
    float *coef = NULL;
    while (r.p < r.end && rc == WISP_OK) {
        uint32_t f; int w; uint64_t v; pb s = { 0 };
        if (pb_field(&r, &f, &w, &v, &s)) { rc = bad(path, "not an ONNX model (malformed protobuf)"); break; }
        if (f == 7 && w == 2) { rc = read_graph(g, s); have_graph = 1; }
    }
    if (rc) goto out;
    if (!have_graph) { rc = bad(path, "not an ONNX model (no graph)"); goto out; }
    node *lin = NULL;
    int foreign = -1;
    char op[64], dom[64];
    for (int i = 0; i < g->nnodes; i++) {
        node *n = &g->nodes[i];
        pb_copy(n->op, op, sizeof op);
        pb_copy(n->domain, dom, sizeof dom);
        if ((!strcmp(op, "LinearClassifier") || !strcmp(op, "LinearRegressor")) && !strcmp(dom, "ai.onnx.ml")) {
            if (lin) { rc = bad(path, "more than one linear node: not one linear model"); goto out; }
            lin = n;
        } else if (foreign < 0 && strcmp(op, "Cast") && strcmp(op, "ZipMap") && strcmp(op, "Identity")) {
            foreign = i;          /* reported after the linear node's own checks (they say more) */
        }
    }
    if (!lin && foreign >= 0) {
        pb_copy(g->nodes[foreign].op, op, sizeof op);
        pb_copy(g->nodes[foreign].domain, dom, sizeof dom);
        rc = wisp__fail(WISP_EPARSE, "%s: no LinearClassifier or LinearRegressor node (ai.onnx.ml); node %d is %s%s%s "
                       "(wisp imports one linear model node, not a graph of operators)", path, foreign, dom,
                       dom[0] ? "." : "", op);
        goto out;
    }
    if (!lin) { rc = bad(path, "no LinearClassifier or LinearRegressor node (ai.onnx.ml)"); goto out; }
    pb_copy(lin->op, op, sizeof op);
    int classifier = !strcmp(op, "LinearClassifier");
    if (lin->ninputs != 1 || !is_graph_input(g, lin->inputs[0])) {
        char pre[64] = "another node";
        for (int i = 0; lin->ninputs == 1 && i < g->nnodes; i++)
            for (int k = 0; k < g->nodes[i].noutputs && k < 4; k++)
                if (pb_streq(g->nodes[i].outputs[k], "") == 0 &&
                    g->nodes[i].outputs[k].end - g->nodes[i].outputs[k].p == lin->inputs[0].end - lin->inputs[0].p &&
                    !memcmp(g->nodes[i].outputs[k].p, lin->inputs[0].p,
                            (size_t)(lin->inputs[0].end - lin->inputs[0].p)))
                    pb_copy(g->nodes[i].op, pre, sizeof pre);
        rc = wisp__fail(WISP_EPARSE, "%s: the %s's input is not the graph's input but %s's output (a preprocessing "
                       "step before the linear model is not imported)", path, op, pre);
        goto out;
    }
    attr a;
    attr coefs = { 0 }, inter = { 0 }, labels = { 0 };
    int have_coefs = 0, have_inter = 0, have_labels = 0, label_strings = 0;
    char post[32] = "NONE";
    int64_t targets = 1;
    for (int i = 0; i < lin->nattrs; i++) {
        if ((rc = read_attr(path, lin->attrs[i], &a))) goto out;
        if (pb_streq(a.name, "coefficients")) { coefs = a; have_coefs = 1; }
        else if (pb_streq(a.name, "intercepts")) { inter = a; have_inter = 1; }
        else if (pb_streq(a.name, "classlabels_ints")) { labels = a; have_labels = 1; label_strings = 0; }
        else if (pb_streq(a.name, "classlabels_strings")) { labels = a; have_labels = 1; label_strings = 1; }
        else if (pb_streq(a.name, "post_transform") && a.has_s) pb_copy(a.s, post, sizeof post);
        else if (pb_streq(a.name, "targets") && a.has_i) targets = a.i;
        else if (pb_streq(a.name, "multi_class") && a.has_i && a.i != 0) {
            rc = wisp__fail(WISP_EPARSE, "%s: LinearClassifier multi_class=%lld: wisp imports binary models", path,
                            (long long)a.i);
            goto out;
        }
    }
    if (!have_coefs) { rc = wisp__fail(WISP_EPARSE, "%s: the %s has no coefficients", path, op); goto out; }
    size_t ncoef = 0, ninter = 0, nlabels = 2;
    if ((rc = attr_floats(path, &coefs, NULL, &ncoef))) goto out;
    if (have_inter && (rc = attr_floats(path, &inter, NULL, &ninter))) goto out;
    coef = wisp__malloc((ncoef ? ncoef : 1) * sizeof *coef);
    float interc[2] = { 0, 0 };
    if (!coef) { rc = wisp__fail(WISP_ENOMEM, "%s: out of memory for %zu coefficients", path, ncoef); goto out; }
    if ((rc = attr_floats(path, &coefs, coef, &ncoef))) goto out;
    if (ninter > 2) {
        rc = wisp__fail(WISP_EPARSE, "%s: %zu intercepts: wisp imports a binary classifier or one regression target",
                        path, ninter);
        goto out;
    }
    if (have_inter && (rc = attr_floats(path, &inter, interc, &ninter))) goto out;
    char labels_json[4096] = "[0, 1]";
    size_t rows, nf;
    const float *w;
    double bias;
    if (classifier) {
        if (strcmp(post, "LOGISTIC") && strcmp(post, "NONE")) {
            rc = wisp__fail(WISP_EPARSE, "%s: LinearClassifier post_transform %s: wisp imports LOGISTIC or NONE (its "
                           "score is the sigmoid of class 1's score)", path, post);
            goto out;
        }
        if (have_labels
            && (rc = attr_labels_json(path, &labels, label_strings, labels_json, sizeof labels_json, &nlabels)))
            goto out;
        if (!have_labels || nlabels != 2) {
            rc = wisp__fail(WISP_EPARSE, "%s: LinearClassifier with %zu class labels: wisp imports binary models", path,
                           have_labels ? nlabels : 0);
            goto out;
        }
        rows = ninter == 2 ? 2 : 1;
        if (ninter == 0) rows = ncoef % 2 == 0 && ncoef ? 2 : 1;
        if (ncoef % rows) {
            rc = wisp__fail(WISP_EPARSE, "%s: %zu coefficients for %zu classes", path, ncoef, rows);
            goto out;
        }
        nf = ncoef / rows;
        w = coef + (rows - 1) * nf;                     /* class 1's row */
        bias = ninter ? interc[ninter - 1] : 0.0;
    } else {
        if (targets != 1 || ninter > 1) {
            rc = wisp__fail(WISP_EPARSE, "%s: LinearRegressor with %lld targets: wisp imports one", path,
                            (long long)targets);
            goto out;
        }
        if (strcmp(post, "NONE")) {
            rc = wisp__fail(WISP_EPARSE, "%s: LinearRegressor post_transform %s: wisp imports NONE (it applies the "
                           "sigmoid itself)", path, post);
            goto out;
        }
        nf = ncoef;
        w = coef;
        bias = ninter ? interc[0] : 0.0;
    }
    if (foreign >= 0) {
        char fop[64], fdom[64];
        pb_copy(g->nodes[foreign].op, fop, sizeof fop);
        pb_copy(g->nodes[foreign].domain, fdom, sizeof fdom);
        rc = wisp__fail(WISP_EPARSE, "%s: node %d is %s%s%s, not a LinearClassifier/LinearRegressor or a "
                       "post-processing node (Cast, ZipMap, Identity): wisp imports one linear model over the raw "
                       "input columns", path, foreign, fdom, fdom[0] ? "." : "", fop);
        goto out;
    }
    if (nf == 0) { rc = wisp__fail(WISP_EPARSE, "%s: the %s has no coefficients", path, op); goto out; }
    for (size_t j = 0; j < nf; j++)
        if (!isfinite(w[j])) { rc = wisp__fail(WISP_EPARSE, "%s: coefficient %zu is %g", path, j, w[j]); goto out; }
    if (!isfinite(bias)) { rc = wisp__fail(WISP_EPARSE, "%s: the intercept is %g", path, bias); goto out; }
    char meta[4400];
    snprintf(meta, sizeof meta, "source=onnx\nonnx_op=%s\nonnx_post_transform=%s\nclasses_json=%s\nscore_class=1\n"
             "n_features_in=%zu\n", op, classifier ? post : "NONE", labels_json, nf);
    rc = wisp_model_write(out_path, w, nf, bias, dtype, meta, NULL);
out:
    wisp__free(coef);
    wisp__free(g);
    return rc;
}

int wisp_import_onnx_memory(const void *data, size_t len, const char *out_path, int dtype)
{
    if (!data || !out_path)
        return wisp__fail(WISP_EINVAL, "wisp_import_onnx_memory: %s is NULL", !data ? "data" : "out_path");
    if (!wisp_dtype_name(dtype))
        return wisp__fail(WISP_EINVAL, "%s: unknown weight dtype %d (f32 0, f16 1, i8 2)", out_path, dtype);
    return import("ONNX model", data, len, out_path, dtype);
}

int wisp_import_onnx(const char *onnx_path, const char *out_path, int dtype)
{
    if (!onnx_path || !out_path)
        return wisp__fail(WISP_EINVAL, "wisp_import_onnx: %s is NULL", !onnx_path ? "onnx_path" : "out_path");
    if (!wisp_dtype_name(dtype))
        return wisp__fail(WISP_EINVAL, "%s: unknown weight dtype %d (f32 0, f16 1, i8 2)", out_path, dtype);
    char *buf; size_t len;
    int rc = wisp__read_file(onnx_path, "ONNX model", &buf, &len);
    if (rc) return rc;
    rc = import(onnx_path, (const uint8_t *)buf, len, out_path, dtype);
    wisp__free(buf);
    return rc;
}
