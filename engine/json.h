/* json.h — private: the small strict JSON reader's tree (engine/json.c), read by
 * the column description's builder (engine/columns.c). Descriptions are small,
 * so the reader builds a whole tree; the JSON-lines reader (engine/jsonl.c)
 * scans its rows with wisp_json__string / wisp_json__number_len (internal.h)
 * instead. */
#ifndef WISP_JSON_H
#define WISP_JSON_H

#include <stddef.h>

#define WISP_JSON_MAX_DEPTH 64

enum { J_NULL = 0, J_FALSE, J_TRUE, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct jv {
    int t;
    size_t off;                  /* byte offset of the value in the text */
    char *s;                     /* J_STR: decoded (NUL-terminated); J_NUM: the token */
    size_t len;
    struct jv *items;            /* J_ARR, J_OBJ values */
    char **keys;                 /* J_OBJ keys (NUL-terminated) */
    size_t *klen;
    size_t n, cap;
} jv;

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
int wisp__json_parse(const char *text, size_t len, jv *root, char *err, size_t errsz, size_t *err_off);
/* Free what v holds (not v itself); NULL is a no-op. */
void wisp__json_free(jv *v);
/* The member `key` of object o, or NULL (also when o is not an object). */
const jv *wisp__json_get(const jv *o, const char *key);
/* "null", "a number", "an object"... for messages. */
const char *wisp__json_type_name(int t);
/* The 1-based line and column of byte offset off in text. */
void wisp__json_line_col(const char *text, size_t off, size_t *line, size_t *col);

#endif
