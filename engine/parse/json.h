/* json.h — private: the small strict JSON reader's tree (engine/parse/json.c), read by
 * the column description's builder (engine/transform/columns.c). Descriptions are small,
 * so the reader builds a whole tree; the JSON-lines reader (engine/parse/jsonl.c)
 * scans its rows with the token functions below instead. */
#ifndef WISP_JSON_H
#define WISP_JSON_H

#include <stdbool.h>
#include <stddef.h>

#define WISP_JSON_MAX_DEPTH 64

/* The JSON string at *p (at its opening quote), decoded into out (room for
 * end - *p bytes suffices); *p moves past the closing quote. Returns NULL, or
 * a static message ("invalid UTF-8", "bad escape"...). */
const char *wisp__json_string(const char **p, const char *end, char *out, size_t *out_len);
/* Length of the number token at p (JSON grammar), 0 if none. */
size_t wisp__json_number_len(const char *p, const char *end);
/* UTF-8 validity of s[0..len) (no overlongs, surrogates or code points past U+10FFFF). */
bool wisp__utf8_valid(const char *s, size_t len);

enum { WISP_JSON_NULL = 0, WISP_JSON_FALSE, WISP_JSON_TRUE, WISP_JSON_NUM, WISP_JSON_STR, WISP_JSON_ARR, WISP_JSON_OBJ };

typedef struct wisp_jv {
    int t;
    size_t off;                  /* byte offset of the value in the text */
    char *s;                     /* WISP_JSON_STR: decoded (NUL-terminated); WISP_JSON_NUM: the token */
    size_t len;
    struct wisp_jv *items;            /* WISP_JSON_ARR, WISP_JSON_OBJ values */
    char **keys;                 /* WISP_JSON_OBJ keys (NUL-terminated) */
    size_t *klen;
    size_t n, cap;
} wisp_jv;

/* The value of hexadecimal digit c, or -1. */
static inline int wisp__json_hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    c = (char)(c | 0x20);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Parse text[0..len) as exactly one JSON value (surrounding white space
 * allowed) into *root. Returns WISP_OK, or a status (WISP_EPARSE, WISP_ELIMIT
 * deeper than WISP_JSON_MAX_DEPTH, WISP_ENOMEM) with a message in err and the
 * byte offset of the fault in *err_off; on failure *root holds nothing to free. */
int wisp__json_parse(const char *text, size_t len, wisp_jv *root, char *err, size_t errsz, size_t *err_off);
/* Free what v holds (not v itself); NULL is a no-op. */
void wisp__json_free(wisp_jv *v);
/* The member `key` of object o, or NULL (also when o is not an object). */
const wisp_jv *wisp__json_get(const wisp_jv *o, const char *key);
/* "null", "a number", "an object"... for messages. */
const char *wisp__json_type_name(int t);
/* The 1-based line and column of byte offset off in text. */
void wisp__json_line_col(const char *text, size_t off, size_t *line, size_t *col);

#endif
