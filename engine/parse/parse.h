/* parse.h — private: what the text parsers share: the streaming line cut, CSV record ends and message excerpts
 * (the number parsing is parse/textnum.h, the JSON tokens parse/json.h). */
#ifndef WISP_PARSE_H
#define WISP_PARSE_H

#include "core/core.h"

/* The token at s (up to a blank or e) for a message: at most 40 bytes, non-printable
 * bytes as '?', "..." when cut; buf holds 44 bytes (libsvm.c; vw_text.c uses it too). */
const char *wisp__excerpt(const char *s, const char *e, char *buf);

/* CSV records (RFC 4180, csv.c): a quoted field may hold newlines, so a
 * record ends at the first '\n' outside quotes. From p, a record's start,
 * returns the '\n' that ends the first record ending at or after `want`
 * (want = p: p's own record), or NULL when the text [p, e) ends first
 * (inside a quoted field, or without a newline): the caller waits for more
 * text, or takes the rest as the last record. *inner (may be NULL): the
 * newlines inside quoted fields of the record it returns. The cut for
 * splitting CSV text into pieces (cli.c) and the CSV reader's record loop. */
const char *wisp__csv_record_end(const char *p, const char *e, const char *want, uint64_t *inner);

/* The streaming text parsers' line cut (libsvm.c, vw_text.c): the line starting at
 * text[pos] ends at *e (its '\n', or the end of the text when final) and the
 * next one starts at *next. Returns 1 for a line; 0 when the line is not
 * complete yet (the caller stops and waits for more text); WISP_ELIMIT, with
 * a message naming line ln + 1, when that unfinished line is already longer
 * than WISP_MAX_LINE_BYTES. */
static inline int wisp__next_line(const char *text, size_t len, size_t pos, int final, uint64_t ln,
                                  const char **e, size_t *next)
{
    const char *nl = memchr(text + pos, '\n', len - pos);
    if (nl) { *e = nl; *next = (size_t)(nl - text) + 1; return 1; }
    if (final) { *e = text + len; *next = len; return 1; }
    if (len - pos > WISP_MAX_LINE_BYTES)
        return wisp__fail(WISP_ELIMIT, "line %llu: no end of line within WISP_MAX_LINE_BYTES (%u bytes)",
                         (unsigned long long)(ln + 1), WISP_MAX_LINE_BYTES);
    return 0;
}

/* What a batch text parser does with one line s..e (its '\n' and a '\r' before it cut off; bytes up to
 * bufend may be read): first(s, e) says where the line's row starts, or NULL when it makes no row (blank, a
 * comment); row() appends the row of line number `line` whose text is p..e, and returns WISP_OK (with *bad
 * set and msg written, "line N: <what>, at column C", when the line is a bad row) or a failure with its
 * message. ctx is row()'s. */
typedef struct wisp__text_rows {
    const char *(*first)(const char *s, const char *e);
    int (*row)(void *ctx, wisp_batch *b, const char *s, const char *p, const char *e, const char *bufend,
               uint64_t line, int *bad, char *msg, size_t msg_len);
    void *ctx;
} wisp__text_rows;

/* The line loop of wisp_batch_parse_libsvm and wisp_batch_parse_vw (their streaming contract: wisp.h, section
 * 4): lines cut by wisp__next_line, an over-long or bad line made a bad row (no features, its message),
 * WISP_MAX_ROWS, *line_no and *consumed (libsvm.c). */
int wisp__parse_text_rows(wisp_batch *b, const char *text, size_t len, int final, size_t max_rows,
                          uint64_t *line_no, size_t *consumed, const wisp__text_rows *fn);

#endif /* WISP_PARSE_H */
