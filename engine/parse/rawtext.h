/* rawtext.h — private: what the raw batch's text readers (engine/parse/csv.c,
 * engine/parse/jsonl.c) share: the line loop (record cutting, byte order marks,
 * over-long lines, the streaming contract of wisp_raw_parse_tsv) and the
 * field excerpt of their messages. */
#ifndef WISP_RAWTEXT_H
#define WISP_RAWTEXT_H

#include "batch/raw.h"

/* One line (record) p..e of the text (e excludes the line end; bytes up to
 * bufend may be read), numbered `line`: appends one row to r. */
typedef int (*wisp__line_fn)(wisp_raw *r, const char *p, const char *e, const char *bufend, uint64_t line, void *ctx);

/* Cut text[0..len) into lines and call fn on each (the contract of
 * wisp_raw_parse_tsv in wisp.h; fname names the caller in messages).
 * delimited: the delimited reader's lines (CSV records may span lines;
 * a header line names the fields when the schema asks for one). */
int wisp__raw_text_lines(wisp_raw *r, const char *text, size_t len, int final, size_t max_rows, uint64_t *line_no,
                         size_t *consumed, wisp__line_fn fn, void *ctx, const char *fname, bool delimited);

/* The text of a field for messages: at most 40 bytes (then "..."),
 * unprintable bytes as '?'; buf holds at least 44 bytes. */
const char *wisp__text_excerpt(const char *s, size_t len, char *buf);

/* Turn the delimited reader's field plan off (0) or on (1); returns the old
 * setting. spec/c/test_parse_fast.c compares both paths. */
int wisp__csv_plan(int on);

#endif
