/* json.c — the small strict JSON reader: UTF-8 validation, string and number
 * tokens (shared with the JSON-lines reader, engine/parse/jsonl.c), and a parser into
 * a tree for the column description (engine/transform/columns.c). RFC 8259 strict: no
 * comments, no trailing commas, no duplicate keys, valid UTF-8 only. */
#include "core/core.h"
#include "parse/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


typedef struct {
    const char *text, *p, *end;
    char err[256];
    size_t err_off;
    int status;
} jparser;

void wisp__json_free(wisp_jv *v)
{
    if (!v) return;
    for (size_t i = 0; i < v->n; i++) {
        wisp__json_free(&v->items[i]);
        if (v->keys) wisp__free(v->keys[i]);
    }
    wisp__free(v->items);
    wisp__free(v->keys);
    wisp__free(v->klen);
    wisp__free(v->s);
}

static int jfail(jparser *jp, int status, const char *msg)
{
    if (!jp->status) {
        jp->status = status;
        jp->err_off = (size_t)(jp->p - jp->text);
        snprintf(jp->err, sizeof jp->err, "%s", msg);
    }
    return status;
}

static void jskip(jparser *jp)
{
    while (jp->p < jp->end && (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' || *jp->p == '\r')) jp->p++;
}

static int utf8_seq(const unsigned char *s, const unsigned char *e)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int n;
    unsigned min;
    if ((c & 0xE0) == 0xC0) { n = 2; min = 0x80; c &= 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 3; min = 0x800; c &= 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 4; min = 0x10000; c &= 0x07; }
    else return 0;
    if (e - s < n) return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    return n;
}

bool wisp__utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s, *e = p + len;
    while (p < e) {
        if (*p < 0x80) { p++; continue; }
        int n = utf8_seq(p, e);
        if (!n) return false;
        p += n;
    }
    return true;
}

static int hex4(const char *p, const char *end, unsigned *out)
{
    if (end - p < 4) return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = wisp__json_hex_digit(p[i]);
        if (h < 0) return -1;
        v = v << 4 | (unsigned)h;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned c)
{
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | c >> 6); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | c >> 12); o[1] = (char)(0x80 | ((c >> 6) & 0x3F)); o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | c >> 18); o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

const char *wisp__json_string(const char **pp, const char *end, char *out, size_t *out_len)
{
    const char *p = *pp;
    size_t n = 0;
    if (p >= end || *p != '"') return "expected a string";
    p++;
    for (;;) {
        /* a run of plain bytes */
        const char *s = p;
        while (p < end && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20 && (unsigned char)*p < 0x80) p++;
        memcpy(out + n, s, (size_t)(p - s));
        n += (size_t)(p - s);
        if (p >= end) { *pp = p; return "unterminated string"; }
        unsigned char c = (unsigned char)*p;
        if (c == '"') { p++; break; }
        if (c < 0x20) { *pp = p; return "control character in a string"; }
        if (c >= 0x80) {
            int k = utf8_seq((const unsigned char *)p, (const unsigned char *)end);
            if (!k) { *pp = p; return "invalid UTF-8 in a string"; }
            memcpy(out + n, p, (size_t)k);
            n += (size_t)k;
            p += k;
            continue;
        }
        /* an escape */
        if (end - p < 2) { *pp = p; return "unterminated string"; }
        char e = p[1];
        p += 2;
        switch (e) {
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case '/': out[n++] = '/'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            unsigned u;
            if (hex4(p, end, &u)) { *pp = p; return "bad \\u escape"; }
            p += 4;
            if (u >= 0xD800 && u <= 0xDBFF) {
                unsigned lo;
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, end, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                    *pp = p;
                    return "unpaired surrogate in a \\u escape";
                }
                p += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            } else if (u >= 0xDC00 && u <= 0xDFFF) {
                *pp = p;
                return "unpaired surrogate in a \\u escape";
            }
            n += put_utf8(out + n, u);
            break;
        }
        default: *pp = p - 2; return "bad escape in a string";
        }
    }
    *pp = p;
    *out_len = n;
    return NULL;
}

size_t wisp__json_number_len(const char *p, const char *end)
{
    const char *s = p;
    if (p < end && *p == '-') p++;
    if (p >= end) return 0;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (p < end && *p >= '0' && *p <= '9') p++;
    else return 0;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9') return 0;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return 0;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    return (size_t)(p - s);
}

static int jparse_value(jparser *jp, wisp_jv *v, int depth);

static int jpush(jparser *jp, wisp_jv *v, size_t *idx, bool obj)
{
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 8;
        wisp_jv *ni = wisp__realloc(v->items, nc * sizeof *ni);
        if (!ni) return jfail(jp, WISP_ENOMEM, "out of memory");
        v->items = ni;
        if (obj) {
            char **nk = wisp__realloc(v->keys, nc * sizeof *nk);
            if (!nk) return jfail(jp, WISP_ENOMEM, "out of memory");
            v->keys = nk;
            size_t *nl = wisp__realloc(v->klen, nc * sizeof *nl);
            if (!nl) return jfail(jp, WISP_ENOMEM, "out of memory");
            v->klen = nl;
        }
        v->cap = nc;
    }
    *idx = v->n;
    memset(&v->items[v->n], 0, sizeof v->items[0]);
    if (obj) { v->keys[v->n] = NULL; v->klen[v->n] = 0; }
    v->n++;
    return 0;
}

static int jstring(jparser *jp, char **out, size_t *len)
{
    /* decoded length <= raw length: scan to the closing quote first */
    const char *q = jp->p + 1;
    while (q < jp->end && *q != '"') q += (*q == '\\' && q + 1 < jp->end) ? 2 : 1;
    size_t cap = (size_t)(q - jp->p) + 1;
    char *buf = wisp__malloc(cap);
    if (!buf) return jfail(jp, WISP_ENOMEM, "out of memory");
    const char *err = wisp__json_string(&jp->p, jp->end, buf, len);
    if (err) { wisp__free(buf); return jfail(jp, WISP_EPARSE, err); }
    buf[*len] = '\0';
    *out = buf;
    return 0;
}

static int jparse_value(jparser *jp, wisp_jv *v, int depth)
{
    jskip(jp);
    v->off = (size_t)(jp->p - jp->text);
    if (jp->p >= jp->end) return jfail(jp, WISP_EPARSE, "unexpected end of text");
    char c = *jp->p;
    if (c == '{' || c == '[') {
        if (depth >= WISP_JSON_MAX_DEPTH) return jfail(jp, WISP_ELIMIT, "nested deeper than 64 levels");
        bool obj = c == '{';
        v->t = obj ? WISP_JSON_OBJ : WISP_JSON_ARR;
        jp->p++;
        jskip(jp);
        if (jp->p < jp->end && *jp->p == (obj ? '}' : ']')) { jp->p++; return 0; }
        for (;;) {
            size_t i;
            if (jpush(jp, v, &i, obj)) return jp->status;
            if (obj) {
                jskip(jp);
                if (jp->p >= jp->end || *jp->p != '"') return jfail(jp, WISP_EPARSE, "expected a key string");
                if (jstring(jp, &v->keys[i], &v->klen[i])) return jp->status;
                for (size_t k = 0; k < i; k++)
                    if (v->klen[k] == v->klen[i] && !memcmp(v->keys[k], v->keys[i], v->klen[i]))
                        return jfail(jp, WISP_EPARSE, "duplicate key in an object");
                jskip(jp);
                if (jp->p >= jp->end || *jp->p != ':') return jfail(jp, WISP_EPARSE, "expected ':'");
                jp->p++;
            }
            if (jparse_value(jp, &v->items[i], depth + 1)) return jp->status;
            jskip(jp);
            if (jp->p < jp->end && *jp->p == ',') { jp->p++; continue; }
            if (jp->p < jp->end && *jp->p == (obj ? '}' : ']')) { jp->p++; return 0; }
            return jfail(jp, WISP_EPARSE, obj ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    if (c == '"') {
        v->t = WISP_JSON_STR;
        return jstring(jp, &v->s, &v->len);
    }
    static const struct { const char *w; int t; } words[] = { { "null", WISP_JSON_NULL }, { "true", WISP_JSON_TRUE }, { "false", WISP_JSON_FALSE } };
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(words[i].w);
        if ((size_t)(jp->end - jp->p) >= n && !memcmp(jp->p, words[i].w, n)) {
            v->t = words[i].t;
            jp->p += n;
            return 0;
        }
    }
    size_t n = wisp__json_number_len(jp->p, jp->end);
    if (!n) return jfail(jp, WISP_EPARSE, "expected a value");
    v->t = WISP_JSON_NUM;
    v->s = wisp__malloc(n + 1);
    if (!v->s) return jfail(jp, WISP_ENOMEM, "out of memory");
    memcpy(v->s, jp->p, n);
    v->s[n] = '\0';
    v->len = n;
    jp->p += n;
    return 0;
}

const wisp_jv *wisp__json_get(const wisp_jv *o, const char *key)
{
    if (!o || o->t != WISP_JSON_OBJ) return NULL;
    size_t kl = strlen(key);
    for (size_t i = 0; i < o->n; i++)
        if (o->klen[i] == kl && !memcmp(o->keys[i], key, kl)) return &o->items[i];
    return NULL;
}

const char *wisp__json_type_name(int t)
{
    static const char *n[] = { "null", "false", "true", "a number", "a string", "an array", "an object" };
    return t >= WISP_JSON_NULL && t <= WISP_JSON_OBJ ? n[t] : "?";
}

void wisp__json_line_col(const char *text, size_t off, size_t *line, size_t *col)
{
    size_t l = 1, c = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') { l++; c = 1; } else c++;
    }
    *line = l;
    *col = c;
}

int wisp__json_parse(const char *text, size_t len, wisp_jv *root, char *err, size_t errsz, size_t *err_off)
{
    jparser jp = { .text = text ? text : "", .p = text ? text : "", .end = (text ? text : "") + len };
    memset(root, 0, sizeof *root);
    int st = jparse_value(&jp, root, 0);
    if (!st) {
        jskip(&jp);
        if (jp.p != jp.end) st = jfail(&jp, WISP_EPARSE, "text after the JSON value");
    }
    if (!st) return WISP_OK;
    wisp__json_free(root);
    memset(root, 0, sizeof *root);
    if (err && errsz) snprintf(err, errsz, "%s", jp.err);
    if (err_off) *err_off = jp.err_off;
    return jp.status;
}
