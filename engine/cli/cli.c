/* cli.c — the `wisp` command: score, import, convert, info, devices, run, repl.
 * It uses wisp.h only, as any embedder does. Its one need beyond scoring, a
 * thread per piece of a large input, is met by the engine's own pool made
 * public (wisp_engine_run) rather than by threads of its own: the pool is
 * already sized to the cores the engine scores with, starting a second set
 * would oversubscribe them, and other callers that split their own work
 * (the Python package, a Spark executor) want the same door. Cutting CSV
 * text between records is public too (wisp_raw_csv_record_end). */
#include "wisp.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

int wisp__cli_run(int argc, char **argv);    /* cli_lua.c */
int wisp__cli_repl(int argc, char **argv);   /* cli_lua.c */

static const char *prog = "wisp";

#if defined(__GNUC__)
#define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLI_PRINTF(a, b)
#endif

static int die(const char *fmt, ...) CLI_PRINTF(1, 2);
static int die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

/* A usage error: one line that says what is wrong and one that points at the
 * command's --help (not the whole usage); the exit status is 2. cli_lua.c's
 * commands (run, repl) use it too. */
int wisp__cli_usage_error(const char *fmt, ...) CLI_PRINTF(1, 2);
int wisp__cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\ntry '%s --help'\n", prog);
    va_end(ap);
    return 2;
}

static const char usage_main[] =
    "usage: wisp COMMAND [OPTIONS]\n"
    "\n"
    "wisp scores sparse logistic-regression (\"wide\") models on CPUs and CUDA GPUs.\n"
    "\n"
    "commands:\n"
    "  score    score rows (libsvm, Vowpal Wabbit, TSV/CSV/JSON lines) with a model, a probability a line\n"
    "  import   convert a trained model (LIBLINEAR, Vowpal Wabbit) into a .wisp file\n"
    "  convert  rewrite a .wisp file with another weight dtype (f32, f16, i8)\n"
    "  info     describe a .wisp file\n"
    "  devices  list the devices wisp can score on\n"
    "  run      run a Lua script with the wisp module loaded\n"
    "  repl     an interactive Lua prompt with wisp loaded\n"
    "\n"
    "`wisp COMMAND --help` describes each command. `wisp --version` prints the version.\n"
    "Exit status: 0 on success, 1 on errors (a message names the file and line; a failed\n"
    "write to a file or to standard output counts), 2 on a usage error (also an output that\n"
    "is a directory or the same file as one of the command's inputs, refused before anything\n"
    "is written). An output that is a symbolic link is written through (the link is kept);\n"
    "a character device or FIFO (/dev/stdout, a named pipe) is written directly.\n"
    "Model files are read into private memory and verified there: a model file replaced,\n"
    "rewritten or truncated while wisp runs cannot change what it scores with.\n"
    "\n"
    "environment:\n"
    "  WISP_LOG=debug|info|warn|error|off  what the engine logs on stderr (default warn)\n"
    "  WISP_NO_GPU=1                       never use a GPU\n"
    "  WISP_PINNED_MAX_MB=N                pinned host memory wisp may hold (default: a quarter of RAM)\n"
    "  WISP_GPU_TABLE_MB=N                 one GPU's share of a model's weights; a larger table is split\n"
    "                                      by id range over the GPUs of --device gpus (default: 80% of memory)\n"
    "  WISP_GPU_SHARDING=peer|broadcast    peer: the rows are split and each GPU reads the other shards\n"
    "                                      over NVLink (the default where the GPUs have peer access);\n"
    "                                      broadcast: every GPU scores every row, partial sums added on the host\n"
    "  WISP_GPU_ZEROCOPY=1|all             small (or all) batches read from host memory by the kernel\n"
    "  WISP_IN_FLIGHT=1..3                 batches a session keeps on the device (submit/wait)\n"
    "  WISP_GPU_SHARDS, _PARTS, _CHUNKS, _LANES, _GRAPHS, _INLINE, _TIMING, _XF_DIRECT\n"
    "                                      tuning and A/B switches (engine/cuda/cuda_score.c's first comment;\n"
    "                                      cuda_session.c, cuda_transform.c read them)\n"
    "  WISP_LUA_PATH                       where `wisp run` and `wisp repl` find the Lua modules\n";

static const char usage_score[] =
    "usage: wisp score -m MODEL [--format auto|libsvm|vw|tsv|csv|jsonl] [--schema SCHEMA]\n"
    "                  [--device DEV] [--batch N] [--threads N] [--hugepages] [--stats] [-o OUT] [FILE|-]\n"
    "\n"
    "Reads rows from FILE or standard input and prints one probability per row, in order.\n"
    "A malformed row prints \"nan\" in its place, is reported on stderr as FILE:LINE: reason,\n"
    "and makes the exit status 1; the other rows are kept. Blank lines make no row.\n"
    "\n"
    "libsvm: \"[label] id:value id:value ...\" (the label is ignored, a bare id is a binary\n"
    "feature; '#' comments make no row); the probability is sigmoid(bias + sum w[id]*value).\n"
    "For LIBLINEAR models that is the probability of the first label of the model's \"label\" line.\n"
    "\n"
    "vw: Vowpal Wabbit text (\"label [weight] ['tag]|ns[:w] feat[:value] ... |ns2 ...\"), hashed\n"
    "as VW hashes it with the options kept in the model (made by `wisp import vw`: -b, -q,\n"
    "--hash_seed, --noconstant, ...); the probability is sigmoid(VW's sum), what\n"
    "`vw -t -i MODEL --link logistic -p PREDS` prints for a model trained with --loss_function logistic.\n"
    "\n"
    "tsv, csv, jsonl: raw rows for a model with feature columns (a \"columns\" section, written by\n"
    "lua/wisp/columns.lua or scripts/tools/tf_export.py): the columns turn each row into features\n"
    "exactly as TensorFlow's feature columns do (on a GPU the transform and the scoring are\n"
    "one kernel). tsv and csv fields are named by --schema: \"header\" (the default: the first\n"
    "non-blank line names the fields), \"criteo\" (label, I1..I13, C1..C26) or a list \"a,b,,c\"\n"
    "(an empty name skips a field); fields that are not inputs (the label) are skipped. csv\n"
    "understands double-quoted fields. jsonl: one object per line, {\"age\": 37, \"tags\": [\"a\"]}.\n"
    "A missing value, a malformed number, a wrong field count or a value the columns refuse\n"
    "(NaN in a numeric column, ...) makes a bad row; a header that lacks an input is an error.\n"
    "\n"
    "auto (the default) picks by the model: a model with feature columns reads tsv, or csv\n"
    "for FILE.csv, jsonl for FILE.jsonl/.ndjson/.json, libsvm for FILE.libsvm/.svm; a model\n"
    "imported from Vowpal Wabbit reads vw; any other model reads libsvm.\n"
    "\n"
    "  -m, --model MODEL   the .wisp model file (required)\n"
    "  -f, --format FMT    input format: auto (the default), libsvm, vw, tsv, csv or jsonl\n"
    "  -s, --schema S      tsv/csv field names: header (the default), criteo, or \"a,b,,c\"\n"
    "  -d, --device DEV    cpu, gpu, gpu:N, gpus, gpus:N (the first N) or auto (the default: the CPU while the\n"
    "                      GPUs start in the background, then each batch where it is faster, by a crossover\n"
    "                      calibrated on the model; --stats says which)\n"
    "  -b, --batch N       rows per batch (default 65536)\n"
    "  -t, --threads N     CPU threads (default: one per core)\n"
    "      --hugepages     ask for huge pages for a model below 2 MiB too (larger ones always get them)\n"
    "  -o, --output OUT    write probabilities to OUT instead of standard output\n"
    "      --stats         print per-stage time and throughput on stderr at the end\n";

static const char usage_import[] =
    "usage: wisp import liblinear MODEL.txt OUT.wisp [--dtype f32|f16|i8]\n"
    "       wisp import vw MODEL.txt OUT.wisp [--dtype f32|f16|i8]\n"
    "       wisp import onnx MODEL.onnx OUT.wisp [--dtype f32|f16|i8]   (ONNX-ML LinearClassifier/LinearRegressor)\n"
    "\n"
    "liblinear: converts a LIBLINEAR binary logistic-regression model (solvers L2R_LR,\n"
    "L1R_LR, L2R_LR_DUAL; saved by liblinear-train -s 0, 6 or 7) into a .wisp file. Feature\n"
    "indices keep their 1-based numbering; the bias term becomes the model bias.\n"
    "\n"
    "vw: converts a Vowpal Wabbit linear model saved with --readable_model or --invert_hash\n"
    "(train with --loss_function logistic for probabilities) into a .wisp file of 2^bits\n"
    "weights at VW's own indices (the constant's weight included, bias 0). The header's\n"
    "bits and options (-q/--quadratic, --hash_seed, --hash, --noconstant, --ignore, --keep,\n"
    "--ignore_linear) are kept in the model, so `wisp score --format vw -m OUT.wisp` hashes\n"
    "VW text as VW does. Refused: reductions and options that change a prediction (--oaa,\n"
    "--nn, --lrq, cubic interactions, the ':' wildcard, n-grams, LDA, ...).\n";

static const char usage_convert[] =
    "usage: wisp convert IN.wisp OUT.wisp --dtype f32|f16|i8\n"
    "\n"
    "Rewrites a model with another weight dtype: f16 halves the table, i8 quarters it\n"
    "(one scale per table, max|w|/127). The model's meta and columns are kept.\n";

static const char usage_info[] =
    "usage: wisp info MODEL\n"
    "\n"
    "Validates a .wisp file (every offset and checksum) and describes it.\n";

static const char usage_devices[] =
    "usage: wisp devices\n"
    "\n"
    "Lists the CPU and every CUDA device, or says why there is none.\n";

/* ---- probability formatting: fast fixed point, %.9g for tiny values --------- */

static char *fmt_prob(char *p, float v)
{
    if (isnan(v)) { memcpy(p, "nan\n", 4); return p + 4; }
    if (v >= 0.001f && v <= 1.0f) {
        uint64_t x = (uint64_t)llround((double)v * 1e9);
        if (x >= 1000000000ull) { memcpy(p, "1.000000000\n", 12); return p + 12; }
        p[0] = '0'; p[1] = '.';
        for (int i = 10; i >= 2; i--) { p[i] = (char)('0' + x % 10); x /= 10; }
        p[11] = '\n';
        return p + 12;
    }
    return p + sprintf(p, "%.9g\n", (double)v);
}

/* ---- input: a growing buffer fed by read() ------------------------------------
 * Every input, a regular file too, is read with read(), never mapped: a mapped
 * file truncated while it is scored would SIGBUS the process with no message.
 * A regular file is read in large blocks (the buffer filled up to what the
 * pieces want); a pipe or terminal gives what one read() returns, so rows
 * arriving slowly are scored as they come. At the end of a regular file the
 * bytes read are compared with its size when opened and now: a file that
 * shrank while being read is an error (its last rows may be cut). */

typedef struct {
    const char *name;
    int fd;
    int regular;                        /* a regular file: fill the buffer to what is wanted */
    uint64_t size0, total;              /* regular files: size when opened, bytes read */
    char *buf; size_t len, cap, pos;
    int eof;
} input;

static int input_open(input *in, const char *path)
{
    memset(in, 0, sizeof *in);
    in->name = path && strcmp(path, "-") ? path : "<stdin>";
    in->fd = path && strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : STDIN_FILENO;
    if (in->fd < 0) return die("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(in->fd, &st) == 0 && S_ISDIR(st.st_mode)) return die("%s: is a directory", in->name);
    if (fstat(in->fd, &st) == 0 && S_ISREG(st.st_mode)) {
        in->regular = 1;
        in->size0 = (uint64_t)st.st_size;
        posix_fadvise(in->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    }
    return 0;
}

/* At the end of a regular file: did it shrink while being read? 0, or 1 after the message. */
static int input_check_end(input *in)
{
    struct stat st;
    if (!in->regular) return 0;
    if (in->total < in->size0)
        return die("%s: the file changed while being read: it was truncated (%llu of the %llu bytes it had when "
                   "opened were read); its last rows may be cut, the scores above are not the whole file's", in->name,
                   (unsigned long long)in->total, (unsigned long long)in->size0);
    if (fstat(in->fd, &st) == 0 && (uint64_t)st.st_size < in->total)
        return die("%s: the file changed while being read: it was truncated to %llu bytes after %llu were read",
                   in->name, (unsigned long long)st.st_size, (unsigned long long)in->total);
    return 0;
}

/* Make more stream text available; 0 on success (or EOF reached), 1 on error. */
static int input_fill(input *in)
{
    if (in->pos > 0 && in->pos == in->len) in->pos = in->len = 0;
    if (in->pos > (in->cap >> 1)) {
        memmove(in->buf, in->buf + in->pos, in->len - in->pos);
        in->len -= in->pos;
        in->pos = 0;
    }
    if (in->cap - in->len < (1u << 20)) {
        size_t ncap = in->cap ? in->cap * 2 : (4u << 20);
        char *nb = realloc(in->buf, ncap);
        if (!nb) return die("%s: out of memory reading input", in->name);
        in->buf = nb;
        in->cap = ncap;
    }
    ssize_t n;
    do n = read(in->fd, in->buf + in->len, in->cap - in->len);
    while (n < 0 && errno == EINTR);
    if (n < 0) return die("%s: read error: %s", in->name, strerror(errno));
    if (n == 0) { in->eof = 1; return input_check_end(in); }
    in->len += (size_t)n;
    in->total += (uint64_t)n;
    return 0;
}

static void input_close(input *in)
{
    if (in->fd > STDIN_FILENO) close(in->fd);
    free(in->buf);
}

/* ---- outputs ---------------------------------------------------------------------
 * Every command that writes: OUT may be a new file, a regular file (replaced:
 * import/convert by rename, score by truncating it), a symbolic link (the
 * file it names is written, the link kept), a character device or a FIFO
 * (written directly). OUT may not be a directory, nor the same file as one of
 * the command's inputs (also through a link or a hard link, or standard
 * output redirected to the input): both are refused with exit status 2 before
 * anything is read or written. Every failed write, fsync or close is an
 * error (exit status 1). Standard output closed early by its reader (EPIPE):
 * wisp dies of SIGPIPE like other filters (the shell sees 141), or, when the
 * caller ignores SIGPIPE, says "Broken pipe" and exits 1. */

typedef struct { const char *name; int fd; } named_input;   /* fd >= 0: fstat it, else stat(name) */

/* 0, or 2 after the message. `out` NULL or "-": standard output (checked against the inputs when a regular file). */
static int check_output(const char *out, const named_input *in, size_t n)
{
    struct stat so, si;
    int to_stdout = !out || !strcmp(out, "-");
    if (to_stdout ? fstat(STDOUT_FILENO, &so) != 0 || !S_ISREG(so.st_mode) : stat(out, &so) != 0)
        return 0;                                 /* a new file (or a dangling link's target): nothing to clobber */
    if (S_ISDIR(so.st_mode)) return die("%s is a directory; name the file to write", out), 2;
    for (size_t i = 0; i < n; i++) {
        if (!in[i].name || (in[i].fd >= 0 ? fstat(in[i].fd, &si) : stat(in[i].name, &si)) != 0) continue;
        if (si.st_dev == so.st_dev && si.st_ino == so.st_ino && (S_ISREG(si.st_mode) || S_ISBLK(si.st_mode)))
            return die("the output %s is the same file as the input %s; write to another file (and rename "
                       "it over the input if that is what you want)", to_stdout ? "(standard output)" : out,
                       in[i].name), 2;
    }
    return 0;
}

/* Flush and close an output stream: every error counts. 0, or 1 after the message. */
static int close_output(FILE *f, const char *name)
{
    int failed = ferror(f), e = failed ? EIO : 0;
    if (fflush(f) != 0) { failed = 1; e = errno; }
    struct stat st;
    if (!failed && fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && fsync(fileno(f)) != 0
        && errno != EINVAL && errno != EROFS) { failed = 1; e = errno; }
    if (fclose(f) != 0 && !failed && errno != EBADF) { failed = 1; e = errno; }
    if (failed) return die("%s: write error: %s", name, strerror(e));
    return 0;
}

/* ---- wisp score ---------------------------------------------------------------
 * The work is split into pieces of the input, cut at line ends, one or more per
 * thread. Each piece is parsed (by its format's parse function, into a batch of
 * feature ids or, for tsv/csv/jsonl, into raw columns), scored (by its own
 * session; raw columns through wisp_session_score_raw: transform + score, fused
 * on a GPU) and formatted on one thread of the engine's pool, while its rows
 * are still in that core's cache; the main thread then reports bad lines and
 * writes the pieces' text in order. Line numbers are counted per piece and made
 * absolute when reported. */

enum { FMT_AUTO, FMT_LIBSVM, FMT_VW, FMT_TSV, FMT_CSV, FMT_JSONL };
static const char *const fmt_names[] = { "auto", "libsvm", "vw", "tsv", "csv", "jsonl" };

typedef struct piece piece;
typedef int (*piece_parse_fn)(piece *pc);

struct piece {
    wisp_batch *batch;              /* libsvm/vw rows; NULL for raw formats */
    wisp_raw *raw;                  /* tsv/csv/jsonl rows; NULL otherwise */
    wisp_session *session;          /* one per piece: a session is one thread's at a time */
    piece_parse_fn parse;           /* the format's parse function */
    float *probs;                   /* max_rows */
    char *obuf; size_t olen;        /* the piece's formatted output */
    const char *text; size_t len;   /* the piece */
    int final;                      /* the piece may end without '\n' */
    const wisp_vw *vw;              /* --format vw: the model's hashing options */
    size_t max_rows;
    size_t used;                    /* bytes consumed */
    uint64_t lines;                 /* lines consumed */
    size_t rows;                    /* rows parsed */
    int scored_raw;                 /* raw formats: scored, so the session lists the bad rows */
    uint64_t ns_parse, ns_format;
    int status; char err[256];
};

typedef struct { piece *p; } parse_job;

static char *fmt_prob(char *p, float v);

static int parse_libsvm_piece(piece *pc)
{
    return wisp_batch_parse_libsvm(pc->batch, pc->text, pc->len, pc->final, pc->max_rows, &pc->lines, &pc->used);
}

static int parse_vw_piece(piece *pc)
{
    return wisp_batch_parse_vw(pc->batch, pc->vw, pc->text, pc->len, pc->final, pc->max_rows, &pc->lines, &pc->used);
}

static int parse_tsv_piece(piece *pc)
{
    return wisp_raw_parse_tsv(pc->raw, pc->text, pc->len, pc->final, pc->max_rows, &pc->lines, &pc->used);
}

static int parse_jsonl_piece(piece *pc)
{
    return wisp_raw_parse_jsonl(pc->raw, pc->text, pc->len, pc->final, pc->max_rows, &pc->lines, &pc->used);
}

/* Raw rows: transform and score; the session then lists every bad row of
 * the call, the reader's and those its transform refused (a NaN in a numeric
 * column, an identity value out of range, ...), with their messages. */
static int score_raw_piece(piece *pc)
{
    int st = wisp_session_score_raw(pc->session, pc->raw, pc->probs);
    if (st == WISP_OK) pc->scored_raw = 1;
    return st;
}

static void parse_piece(void *ctx, size_t i)
{
    piece *pc = &((parse_job *)ctx)->p[i];
    if (pc->raw) wisp_raw_clear(pc->raw);
    else wisp_batch_clear(pc->batch);
    pc->lines = 0;
    pc->used = 0;
    pc->olen = 0;
    pc->scored_raw = 0;
    uint64_t t0 = wisp_clock_ns();
    pc->status = pc->parse(pc);
    uint64_t t1 = wisp_clock_ns();
    pc->ns_parse += t1 - t0;
    pc->rows = pc->raw ? wisp_raw_rows(pc->raw) : wisp_batch_rows(pc->batch);
    if (pc->status == WISP_OK && pc->rows)
        pc->status = pc->raw ? score_raw_piece(pc) : wisp_session_score(pc->session, pc->batch, pc->probs);
    if (pc->status != WISP_OK) { snprintf(pc->err, sizeof pc->err, "%s", wisp_errmsg()); return; }
    uint64_t t2 = wisp_clock_ns();
    char *o = pc->obuf;
    for (size_t r = 0; r < pc->rows; r++) o = fmt_prob(o, pc->probs[r]);
    pc->olen = (size_t)(o - pc->obuf);
    pc->ns_format += wisp_clock_ns() - t2;
}

/* The piece's bad rows: from its batch (libsvm, vw), from its session's last
 * score_raw (raw formats: the reader's and the transform's), or, for a raw
 * piece not scored (no rows), from its raw batch. */
static size_t piece_bad_count(const piece *p)
{
    if (!p->raw) return wisp_batch_bad_count(p->batch);
    return p->scored_raw ? wisp_session_bad_count(p->session) : wisp_raw_bad_count(p->raw);
}

static int piece_bad_row(const piece *p, size_t i, uint64_t *line, const char **msg)
{
    size_t row;
    if (!p->raw) return wisp_batch_bad_row(p->batch, i, &row, line, msg);
    return p->scored_raw ? wisp_session_bad_row(p->session, i, &row, line, msg)
                         : wisp_raw_bad_row(p->raw, i, &row, line, msg);
}

static int parse_count(const char *s, const char *what, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return wisp__cli_usage_error("bad %s '%s': expected a number from %ld to %ld", what, s, lo, hi);
    *out = v;
    return 0;
}

static int write_all(FILE *f, const char *p, size_t n, const char *name)
{
    if (fwrite(p, 1, n, f) != n) return die("%s: write error: %s", name, strerror(errno));
    return 0;
}

/* Cut text[0..len) into at most n pieces ending at line ends (csv: at record
 * ends, never inside a quoted field: wisp_raw_csv_record_end). The last piece
 * takes the rest when `final`, else it ends at the last '\n'. Returns the count. */
static size_t cut_pieces(piece *pc, size_t n, const char *text, size_t len, int final, size_t piece_bytes, int csv)
{
    size_t k = 0, pos = 0;
    while (k < n && pos < len) {
        size_t want = pos + piece_bytes < len ? pos + piece_bytes : len, end;
        if (want >= len && final) end = len;
        else {
            const char *nl = csv ? wisp_raw_csv_record_end(text + pos, text + len, text + want - (want > pos ? 1 : 0))
                                 : memchr(text + want - (want > pos ? 1 : 0), '\n', len - want + (want > pos ? 1 : 0));
            if (!nl) {
                if (!final) break;                  /* an incomplete last line: wait for more text */
                end = len;
            } else end = (size_t)(nl - text) + 1;
        }
        pc[k].text = text + pos;
        pc[k].len = end - pos;
        pc[k].final = end == len && final;
        k++;
        pos = end;
    }
    return k;
}

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcasecmp(s + a - b, suf);
}

/* --format auto: by the model, then by the file name (see usage_score). */
static int auto_format(const wisp_model *m, const char *in_path)
{
    const char *cols = wisp_model_columns(m);
    if (cols && *cols) {
        if (has_suffix(in_path, ".csv")) return FMT_CSV;
        if (has_suffix(in_path, ".jsonl") || has_suffix(in_path, ".ndjson") || has_suffix(in_path, ".json")) return FMT_JSONL;
        if (has_suffix(in_path, ".libsvm") || has_suffix(in_path, ".svm")) return FMT_LIBSVM;
        return FMT_TSV;
    }
    return wisp_model_meta(m, "vw_options") ? FMT_VW : FMT_LIBSVM;
}

/* The text available now: the buffer, read into first when less than `want`
 * bytes are buffered (a regular file: until `want` or the end; a stream: one
 * read). 1 on a read error. */
static int input_text(input *in, size_t want, const char **text, size_t *len, int *final)
{
    do {
        if (!in->eof && in->len - in->pos < want && input_fill(in)) return 1;
    } while (in->regular && !in->eof && in->len - in->pos < want);
    *text = in->buf + in->pos; *len = in->len - in->pos; *final = in->eof;
    return 0;
}

/* --schema header: every piece's raw reads the header (the first non-blank line),
 * so each maps the fields alone. Advances the input past it. 0, or the exit status. */
static int read_header(input *in, piece *pc, int npieces, int delim, uint64_t *line_base)
{
    for (;;) {
        const char *text; size_t len; int final;
        if (input_text(in, 1u << 20, &text, &len, &final)) return 1;
        /* the prefix up to the first non-blank line's end */
        size_t pos = 0, hdr_end = 0;
        int found = 0;
        while (pos < len) {
            const char *nl = memchr(text + pos, '\n', len - pos);
            size_t e = nl ? (size_t)(nl - text) : len, s = pos, ee = e;
            if (ee > s && text[ee - 1] == '\r') ee--;
            if (!nl && !final) break;
            pos = nl ? e + 1 : len;
            if (ee > s) { found = 1; hdr_end = pos; break; }
        }
        if (!found && !final) {
            if (len > WISP_MAX_LINE_BYTES) return die("%s:%llu: header line longer than %u bytes", in->name,
                                                      (unsigned long long)*line_base + 1, WISP_MAX_LINE_BYTES);
            if (!in->eof) { if (input_fill(in)) return 1; continue; }
        }
        if (!found) return 0;                      /* no header: no rows either */
        for (int i = 0; i < npieces; i++) {
            uint64_t lines = 0;
            size_t used = 0;
            if (wisp_raw_set_schema(pc[i].raw, "header", delim) != WISP_OK) return die("%s", wisp_errmsg());
            if (wisp_raw_parse_tsv(pc[i].raw, text, hdr_end, 1, 0, &lines, &used) != WISP_OK) {
                const char *msg = wisp_errmsg();
                unsigned long long l = 0;
                int n = 0;
                if (sscanf(msg, "line %llu: %n", &l, &n) == 1 && n > 0) msg += n;
                return die("%s:%llu: %s", in->name, (unsigned long long)*line_base + (l ? l : lines + 1), msg);
            }
            if (i == 0) *line_base += lines;
        }
        in->pos += hdr_end;
        return 0;
    }
}

static int cmd_score(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"format", required_argument, 0, 'f'},
        {"schema", required_argument, 0, 's'},
        {"device", required_argument, 0, 'd'}, {"batch", required_argument, 0, 'b'},
        {"threads", required_argument, 0, 't'}, {"output", required_argument, 0, 'o'},
        {"hugepages", no_argument, 0, 'H'}, {"stats", no_argument, 0, 'S'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *model_path = NULL, *device = "auto", *out_path = NULL, *schema = NULL;
    long batch_rows = 65536, threads = 0;
    int hugepages = 0, show_stats = 0, format = FMT_AUTO, c;
    optind = 1;
    opterr = 0;                     /* usage_error says what is wrong, in one line */
    while ((c = getopt_long(argc, argv, ":m:f:s:d:b:t:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_path = optarg; break;
        case 'f':
            format = -1;
            for (int k = 0; k < (int)(sizeof fmt_names / sizeof fmt_names[0]); k++)
                if (!strcmp(optarg, fmt_names[k])) format = k;
            if (format < 0) return wisp__cli_usage_error("unknown --format '%s' (supported: auto, libsvm, vw, tsv, csv, jsonl)", optarg);
            break;
        case 's': schema = optarg; break;
        case 'd': device = optarg; break;
        case 'b': if (parse_count(optarg, "--batch", 1, WISP_MAX_ROWS, &batch_rows)) return 2; break;
        case 't': if (parse_count(optarg, "--threads", 0, 1024, &threads)) return 2; break;
        case 'o': out_path = optarg; break;
        case 'H': hugepages = 1; break;
        case 'S': show_stats = 1; break;
        case 'h': fputs(usage_score, stdout); return 0;
        case ':': return wisp__cli_usage_error("option '%s' needs a value", argv[optind - 1]);
        default: return wisp__cli_usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (!model_path) return wisp__cli_usage_error("-m MODEL is required");
    int dev_kind, dev_n;            /* a misspelt device is a usage error, found before any work */
    if (wisp_device_parse(device, &dev_kind, &dev_n) != WISP_OK) return wisp__cli_usage_error("%s", wisp_errmsg());
    if (argc - optind > 1) return wisp__cli_usage_error("one input file at most (got %d)", argc - optind);
    if (schema && format != FMT_AUTO && format != FMT_TSV && format != FMT_CSV)
        return wisp__cli_usage_error("--schema is for --format tsv or csv (not %s)", fmt_names[format]);
    const char *in_path = optind < argc ? argv[optind] : "-";

    enum { PIECES_PER_THREAD = 2 };
    /* --device auto: the sessions start on the CPU, and the GPUs are started (the sessions
     * placed on "auto", engine/score/autoplace.c) only once there looks to be enough work left that
     * a GPU could take: AUTO_START_S of scoring predicted still to come (the time left, from a
     * regular file's size and the rate so far, or the time spent for a pipe, times the part
     * of the thread time that is scoring rather than parsing). Why (measured on the H200,
     * bench_auto-h200.json): starting CUDA takes about 0.3 s of a core, ending a process
     * while it starts waits for the driver (a 10,000-row file took 0.093 s under auto against
     * 0.026 s on the CPU when the bring-up began with the first session), and a process that
     * started it pays about 0.15 s to tear it down at exit (10M libsvm rows: 1.52 s under auto,
     * every batch on the CPU, against 1.34 s) while parsing is about 83% of the thread time
     * there. WISP_AUTO_WAIT=1: start them at once. */
    const double AUTO_START_S = 0.5;
    const char *aw = getenv("WISP_AUTO_WAIT");
    int auto_defer = dev_kind == WISP_DEVICE_AUTO && !(aw && *aw && strcmp(aw, "0") != 0);
    uint64_t bytes_done = 0;
    double auto_started_s = -1, auto_left_s = 0;
    int rc = 1, npieces = 0;
    wisp_engine *eng = NULL; wisp_model *m = NULL;
    wisp_vw *vw = NULL;
    wisp_columns *cols = NULL;
    piece *pc = NULL;
    FILE *out = stdout;
    input in;
    uint64_t bad_total = 0, rows_total = 0, line_base = 0, t_start = wisp_clock_ns(), ns_write = 0;
    if (input_open(&in, in_path)) goto done;
    {
        named_input ins[2] = { { in.name, in.fd }, { model_path, -1 } };
        if ((rc = check_output(out_path, ins, 2)) != 0) goto done;
        rc = 1;
    }
    if (wisp_engine_new((int)threads, &eng) != WISP_OK) { die("%s", wisp_errmsg()); goto done; }
    /* the pieces' batches in plain memory: pinning each growth while 16 threads parse cost
     * more than the one copy a GPU session then makes of them (engine/core/hostmem.c) */
    if (!getenv("WISP_BATCH_PINNED")) wisp_engine_set_pinned_batches(eng, 0);
    if (wisp_model_load_ex(eng, model_path, hugepages ? WISP_LOAD_HUGEPAGES : 0, &m) != WISP_OK) {
        die("%s", wisp_errmsg()); goto done;
    }
    if (format == FMT_AUTO) format = auto_format(m, in_path);
    const int is_raw = format == FMT_TSV || format == FMT_CSV || format == FMT_JSONL;
    if (schema && !is_raw) {
        rc = 2;
        die("--schema is for --format tsv or csv (this model and input read %s)", fmt_names[format]);
        goto done;
    }
    if (is_raw) {
        const char *ctext = wisp_model_columns(m);
        if (!ctext || !*ctext) {
            rc = 2;
            die("--format %s needs a model with feature columns (a \"columns\" section), and %s has none; "
                "score libsvm or vw rows with it, or build the model with lua/wisp/columns.lua or scripts/tools/tf_export.py",
                fmt_names[format], model_path);
            goto done;
        }
        if (wisp_columns_from_model(m, &cols) != WISP_OK) { die("%s", wisp_errmsg()); goto done; }
    }
    if (format == FMT_VW && wisp_vw_from_model(m, &vw) != WISP_OK) { die("%s", wisp_errmsg()); goto done; }
    npieces = wisp_engine_threads(eng) * PIECES_PER_THREAD;
    pc = calloc((size_t)npieces, sizeof *pc);
    if (!pc) { die("out of memory"); goto done; }
    const int delim = format == FMT_CSV ? ',' : '\t';
    for (int i = 0; i < npieces; i++) {
        pc[i].max_rows = (size_t)batch_rows;
        pc[i].vw = vw;
        pc[i].parse = format == FMT_VW ? parse_vw_piece : format == FMT_JSONL ? parse_jsonl_piece
                    : is_raw ? parse_tsv_piece : parse_libsvm_piece;
        if (wisp_session_new(eng, m, auto_defer ? "cpu" : device, &pc[i].session) != WISP_OK) { die("%s", wisp_errmsg()); goto done; }
        if (i == 0) wisp_engine_set_log_level(eng, WISP_LOG_ERROR);   /* say a device fallback once, not per piece */
        if (!is_raw && wisp_batch_new(eng, &pc[i].batch) != WISP_OK) { die("%s", wisp_errmsg()); goto done; }
        if (is_raw && wisp_raw_new(eng, cols, &pc[i].raw) != WISP_OK) { die("%s", wisp_errmsg()); goto done; }
        if (is_raw && format != FMT_JSONL && schema && strcmp(schema, "header")
            && wisp_raw_set_schema(pc[i].raw, schema, delim) != WISP_OK) {
            rc = 2;
            die("--schema '%s' does not fit %s: %s", schema, model_path, wisp_errmsg());
            goto done;
        }
        pc[i].probs = malloc((size_t)batch_rows * sizeof *pc[i].probs);
        pc[i].obuf = malloc((size_t)batch_rows * 24);
        if (!pc[i].probs || !pc[i].obuf) { die("out of memory for a batch of %ld rows", batch_rows); goto done; }
    }
    wisp_engine_set_log_level(eng, WISP_LOG_WARN);
    if (out_path && !(out = fopen(out_path, "w"))) { die("%s: cannot open for writing: %s", out_path, strerror(errno)); goto done; }
    if (is_raw && format != FMT_JSONL && (!schema || !strcmp(schema, "header"))
        && read_header(&in, pc, npieces, delim, &line_base))
        goto done;
    /* piece size: about a batch of rows at ~64 bytes a row (~256 for raw rows), 64 KiB to 4 MiB
     * (small pieces keep a piece's rows in cache between parsing and scoring) */
    size_t piece_bytes = (size_t)batch_rows * (is_raw ? 256 : 64);
    if (piece_bytes < (64u << 10)) piece_bytes = 64u << 10;
    if (piece_bytes > (4u << 20)) piece_bytes = 4u << 20;

    for (;;) {
        const char *text; size_t len; int final;
        if (input_text(&in, piece_bytes * (size_t)npieces, &text, &len, &final)) goto done;
        if (len == 0 && in.eof) break;
        size_t k = cut_pieces(pc, (size_t)npieces, text, len, final, piece_bytes, format == FMT_CSV);
        if (k == 0) {   /* no complete line yet: read more, or the line is too long */
            if (len > WISP_MAX_LINE_BYTES) { die("%s:%llu: line longer than %u bytes", in.name,
                                                 (unsigned long long)line_base + 1, WISP_MAX_LINE_BYTES); goto done; }
            if (!in.eof && input_fill(&in)) goto done;
            continue;
        }
        parse_job job = { pc };
        if (k == 1) parse_piece(&job, 0);
        else wisp_engine_run(eng, k, parse_piece, &job);
        size_t advanced = 0;
        for (size_t j = 0; j < k; j++) {
            piece *p = &pc[j];
            if (p->status != WISP_OK) { die("%s: %s", in.name, p->err); goto done; }
            size_t nbad = piece_bad_count(p);
            for (size_t i = 0; i < nbad; i++) {
                uint64_t line; const char *msg;
                if (piece_bad_row(p, i, &line, &msg) != WISP_OK) continue;
                char prefix[32];   /* the message names its piece-relative line: keep one "FILE:LINE:" */
                int pn = snprintf(prefix, sizeof prefix, "line %llu: ", (unsigned long long)line);
                if (!strncmp(msg, prefix, (size_t)pn)) msg += pn;
                fprintf(stderr, "%s:%llu: %s\n", in.name, (unsigned long long)(line_base + line), msg);
            }
            bad_total += nbad;
            rows_total += p->rows;
            uint64_t w0 = wisp_clock_ns();
            if (p->olen && write_all(out, p->obuf, p->olen, out_path ? out_path : "<stdout>")) goto done;
            ns_write += wisp_clock_ns() - w0;
            line_base += p->lines;
            advanced += p->used;
            if (p->used < p->len) break;   /* stopped at max_rows: the pieces after it are parsed again */
        }
        in.pos += advanced;
        bytes_done += advanced;
        if (auto_defer && bytes_done) {
            double el = (double)(wisp_clock_ns() - t_start) / 1e9;
            double left = in.regular ? (in.size0 > bytes_done ? (double)(in.size0 - bytes_done) / (double)bytes_done * el : 0) : el;
            /* a GPU can only take the scoring (with raw rows, the transform too), not the parse */
            uint64_t ns_p = 0, ns_s = 0;
            for (int i = 0; i < npieces; i++) {
                ns_p += pc[i].ns_parse;
                ns_s += wisp_session_stat(pc[i].session, WISP_STAT_NS_TOTAL);
            }
            double frac = ns_p + ns_s ? (double)ns_s / (double)(ns_p + ns_s) : 0;
            if (left * frac > auto_left_s) auto_left_s = left * frac;   /* the most predicted so far */
            if (left * frac >= AUTO_START_S) {
                for (int i = 0; i < npieces; i++)
                    if (wisp_session_set_device(pc[i].session, device) != WISP_OK) { die("%s", wisp_errmsg()); goto done; }
                auto_defer = 0;
                auto_started_s = el;
            }
        }
        if (advanced == 0 && final) break;
    }
    if (out != stdout) {
        FILE *o = out;
        out = NULL;
        if (close_output(o, out_path)) goto done;
    } else if (fflush(out) != 0) { die("<stdout>: write error: %s", strerror(errno)); goto done; }
    rc = bad_total ? 1 : 0;
    if (bad_total)
        fprintf(stderr, "%s: %s: %llu malformed line%s scored as nan (reported above); %llu rows in all\n", prog,
                in.name, (unsigned long long)bad_total, bad_total == 1 ? "" : "s", (unsigned long long)rows_total);
    if (show_stats) {
        double wall = (double)(wisp_clock_ns() - t_start) / 1e9;
        uint64_t st[WISP_STAT_COUNT] = {0}, ns_parse = 0, ns_format = 0;
        for (int i = 0; i < npieces; i++) {
            for (int k = 0; k < WISP_STAT_COUNT; k++) st[k] += wisp_session_stat(pc[i].session, k);
            ns_parse += pc[i].ns_parse;
            ns_format += pc[i].ns_format;
        }
        fprintf(stderr, "wisp score: %llu rows in %.3f s (%.0f rows/s) on %s, %d threads, %s input\n",
                (unsigned long long)rows_total, wall, (double)rows_total / wall, wisp_session_last_device(pc[0].session),
                wisp_engine_threads(eng), fmt_names[format]);
        /* raw rows: the session's total holds the transform; show it apart */
        uint64_t ns_xf = st[WISP_STAT_NS_TRANSFORM], ns_total = st[WISP_STAT_NS_TOTAL];
        uint64_t ns_score = ns_total > ns_xf ? ns_total - ns_xf : 0;
        fprintf(stderr, "  thread time: parse %.1f ms, ", (double)ns_parse / 1e6);
        if (is_raw) fprintf(stderr, "transform %.1f ms, ", (double)ns_xf / 1e6);
        fprintf(stderr, "score %.1f ms (kernel %.1f, h2d %.1f, d2h %.1f), format %.1f ms; write %.1f ms\n",
                (double)ns_score / 1e6, (double)st[WISP_STAT_NS_KERNEL] / 1e6, (double)st[WISP_STAT_NS_H2D] / 1e6,
                (double)st[WISP_STAT_NS_D2H] / 1e6, (double)ns_format / 1e6, (double)ns_write / 1e6);
        if (st[WISP_STAT_OUT_OF_RANGE])
            fprintf(stderr, "  %llu feature ids beyond the model's %llu features were ignored\n",
                    (unsigned long long)st[WISP_STAT_OUT_OF_RANGE], (unsigned long long)wisp_model_num_features(m));
        if (st[WISP_STAT_FALLBACKS])
            fprintf(stderr, "  %llu batches fell back from the GPU to the CPU\n", (unsigned long long)st[WISP_STAT_FALLBACKS]);
        uint64_t need_one = 0;
        if (auto_defer)
            fprintf(stderr, "  auto: the GPUs were not started: never %.2f s of scoring left to do (at most %.3f s predicted)\n",
                    AUTO_START_S, auto_left_s);
        else if (auto_started_s >= 0)
            fprintf(stderr, "  auto: the GPUs were started %.3f s in, with %.3f s of scoring predicted to come\n",
                    auto_started_s, auto_left_s);
        switch (wisp_session_auto_state(pc[0].session, &need_one, NULL)) {
        case WISP_AUTO_STARTING:
            fprintf(stderr, "  auto: the GPUs were still starting when the input ended: every batch ran on the CPU\n");
            break;
        case WISP_AUTO_CPU:
            fprintf(stderr, "  auto: the CPU (%s)\n", wisp_engine_gpu_count(eng) ? "no GPU was faster at any calibrated size"
                                                                           : wisp_engine_gpu_status(eng));
            break;
        case WISP_AUTO_ROUTING:
            fprintf(stderr, "  auto: batches of %llu features or more may go to the GPU (calibrated on the model), "
                    "while it measures no slower than the CPU here; smaller ones on the CPU\n", (unsigned long long)need_one);
            break;
        default: break;
        }
    }
    if (wisp_engine_gpu_starting(eng)) {
        /* the answers are out; the GPUs an "auto" session started in the background are not
         * up yet: end now rather than wait for them (wisp_engine_free would) */
        if (fflush(NULL) != 0 && rc == 0) rc = 1;
        _exit(rc);
    }
done:
    if (out && out != stdout) fclose(out);
    input_close(&in);
    for (int i = 0; pc && i < npieces; i++) {
        wisp_raw_free(pc[i].raw);
        wisp_batch_free(pc[i].batch);
        wisp_session_free(pc[i].session);
        free(pc[i].probs);
        free(pc[i].obuf);
    }
    free(pc);
    wisp_columns_free(cols);
    wisp_vw_free(vw);
    wisp_model_free(m); wisp_engine_free(eng);
    return rc;
}

/* ---- import / convert / info / devices ------------------------------------- */

static int take_dtype(int *argc, char **argv, int *dtype)
{
    int n = 0;
    *dtype = WISP_F32;
    for (int i = 0; i < *argc; i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], "--dtype")) {
            if (i + 1 >= *argc) return wisp__cli_usage_error("--dtype needs a value (f32, f16 or i8)");
            v = argv[++i];
        } else if (!strncmp(argv[i], "--dtype=", 8)) {
            v = argv[i] + 8;
        } else {
            argv[n++] = argv[i];
            continue;
        }
        *dtype = wisp_dtype_parse(v);
        if (*dtype < 0) return wisp__cli_usage_error("unknown dtype '%s' (use f32, f16 or i8)", v);
    }
    *argc = n;
    return 0;
}

static int wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    return 0;
}

static int import_vw(const char *src, const char *dst, int dtype)
{
    if (wisp_import_vw(src, dst, dtype) != WISP_OK) return die("%s", wisp_errmsg());
    wisp_engine *eng = NULL; wisp_model *m = NULL;
    if (wisp_engine_new(1, &eng) != WISP_OK || wisp_model_load(eng, dst, &m) != WISP_OK) {
        wisp_engine_free(eng);
        return die("%s", wisp_errmsg());
    }
    const char *opts = wisp_model_meta(m, "vw_options"), *loss = wisp_model_meta(m, "vw_loss");
    const char *nw = wisp_model_meta(m, "vw_weights");
    fprintf(stderr, "wisp: wrote %s (2^%d %s weights, %s weight lines read, VW options: %s) from Vowpal Wabbit model %s\n",
            dst, __builtin_ctzll(wisp_model_num_features(m)), wisp_dtype_name(dtype), nw ? nw : "?", opts ? opts : "?", src);
    if (!loss || strcmp(loss, "logistic"))
        fprintf(stderr, "wisp: warning: %s does not look trained with --loss_function logistic (its label range is "
                "%s..%s, logistic's is -50..50): wisp's score is sigmoid(VW's sum), a probability only for a "
                "logistic model\n", src, wisp_model_meta(m, "vw_min_label") ? wisp_model_meta(m, "vw_min_label") : "?",
                wisp_model_meta(m, "vw_max_label") ? wisp_model_meta(m, "vw_max_label") : "?");
    wisp_model_free(m);
    wisp_engine_free(eng);
    return 0;
}

static int cmd_import(int argc, char **argv)
{
    if (wants_help(argc, argv)) return fputs(usage_import, stdout), 0;
    int dtype;
    if (take_dtype(&argc, argv, &dtype)) return 2;
    if (argc != 4) return wisp__cli_usage_error("expected KIND MODEL OUT.wisp (got %d argument%s)", argc - 1, argc == 2 ? "" : "s");
    named_input ins[1] = { { argv[2], -1 } };
    if (check_output(argv[3], ins, 1)) return 2;
    if (!strcmp(argv[1], "vw")) return import_vw(argv[2], argv[3], dtype);
    if (!strcmp(argv[1], "onnx")) {
        if (wisp_import_onnx(argv[2], argv[3], dtype) != WISP_OK) return die("%s", wisp_errmsg());
        fprintf(stderr, "wisp: wrote %s (%s weights) from ONNX model %s\n", argv[3], wisp_dtype_name(dtype), argv[2]);
        return 0;
    }
    if (strcmp(argv[1], "liblinear"))
        return wisp__cli_usage_error("unknown model kind '%s' (supported: liblinear, vw, onnx)", argv[1]);
    if (wisp_import_liblinear(argv[2], argv[3], dtype) != WISP_OK) return die("%s", wisp_errmsg());
    fprintf(stderr, "wisp: wrote %s (%s weights) from LIBLINEAR model %s\n", argv[3], wisp_dtype_name(dtype), argv[2]);
    return 0;
}

static int cmd_convert(int argc, char **argv)
{
    if (wants_help(argc, argv)) return fputs(usage_convert, stdout), 0;
    int dtype = -1, explicit = 0;
    for (int i = 1; i < argc; i++) explicit |= !strncmp(argv[i], "--dtype", 7);
    if (take_dtype(&argc, argv, &dtype)) return 2;
    if (argc != 3) return wisp__cli_usage_error("expected IN.wisp OUT.wisp (got %d argument%s)", argc - 1, argc == 2 ? "" : "s");
    if (!explicit) return wisp__cli_usage_error("--dtype f32|f16|i8 is required");
    named_input ins[1] = { { argv[1], -1 } };
    if (check_output(argv[2], ins, 1)) return 2;
    wisp_engine *eng = NULL; wisp_model *m = NULL;
    int rc = 1;
    if (wisp_engine_new(1, &eng) != WISP_OK || wisp_model_load(eng, argv[1], &m) != WISP_OK) die("%s", wisp_errmsg());
    else if (wisp_model_convert(m, argv[2], dtype) != WISP_OK) die("%s", wisp_errmsg());
    else {
        fprintf(stderr, "wisp: wrote %s (%s -> %s)\n", argv[2], wisp_dtype_name(wisp_model_dtype(m)), wisp_dtype_name(dtype));
        rc = 0;
    }
    wisp_model_free(m);
    wisp_engine_free(eng);
    return rc;
}

static int cmd_info(int argc, char **argv)
{
    if (wants_help(argc, argv)) return fputs(usage_info, stdout), 0;
    if (argc != 2) return wisp__cli_usage_error("expected one MODEL (got %d arguments)", argc - 1);
    wisp_engine *eng = NULL; wisp_model *m = NULL;
    if (wisp_engine_new(1, &eng) != WISP_OK || wisp_model_load(eng, argv[1], &m) != WISP_OK) {
        wisp_engine_free(eng);
        return die("%s", wisp_errmsg());
    }
    int dt = wisp_model_dtype(m);
    uint64_t n = wisp_model_num_features(m), nz = 0;
    for (uint64_t i = 0; i < n; i++) nz += wisp_model_weight(m, i) != 0.0f;
    printf("model:      %s\n", wisp_model_path(m));
    printf("file size:  %llu bytes (checksums verified)\n", (unsigned long long)wisp_model_file_size(m));
    printf("features:   %llu (%llu non-zero weights)\n", (unsigned long long)n, (unsigned long long)nz);
    printf("dtype:      %s", wisp_dtype_name(dt));
    if (dt == WISP_I8) printf(" (scale %.9g)", (double)wisp_model_scale(m));
    printf("\nbias:       %.9g\n", wisp_model_bias(m));
    const char *meta = wisp_model_meta_text(m);
    if (meta && *meta) {
        printf("meta:\n");
        for (const char *p = meta; *p;) {
            const char *e = strchr(p, '\n');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            if (l) printf("  %.*s\n", (int)l, p);
            p += l + (e ? 1 : 0);
        }
    }
    const char *cols = wisp_model_columns(m);
    int rc = 0;
    if (cols && *cols) {
        wisp_columns *c = NULL;
        if (wisp_columns_from_model(m, &c) != WISP_OK) {
            rc = die("%s", wisp_errmsg());
        } else {
            static const char *const dtypes[] = { "float32", "int64", "string" };
            size_t ni = wisp_columns_num_inputs(c), nc = wisp_columns_count(c);
            printf("inputs:     %zu (score them with --format tsv, csv or jsonl)\n", ni);
            for (size_t i = 0; i < ni; i++) {
                int idt = wisp_columns_input_dtype(c, i);
                printf("  %-24s %-8s %s\n", wisp_columns_input_name(c, i), idt >= 0 && idt <= 2 ? dtypes[idt] : "?",
                       wisp_columns_input_sparse(c, i) ? "sparse" : "dense");
            }
            printf("columns:    %zu over %llu features (%zu bytes of description)\n", nc,
                   (unsigned long long)wisp_columns_num_features(c), strlen(cols));
            for (size_t i = 0; i < nc; i++) {
                uint64_t off = wisp_columns_offset(c, i), sz = wisp_columns_size(c, i);
                printf("  %-24s %-16s [%llu, %llu)\n", wisp_columns_name(c, i), wisp_columns_type(c, i),
                       (unsigned long long)off, (unsigned long long)(off + sz));
            }
            wisp_columns_free(c);
        }
    }
    wisp_model_free(m);
    wisp_engine_free(eng);
    return rc;
}

static int cmd_devices(int argc, char **argv)
{
    if (wants_help(argc, argv)) return fputs(usage_devices, stdout), 0;
    wisp_engine *eng = NULL;
    if (wisp_engine_new(0, &eng) != WISP_OK) return die("%s", wisp_errmsg());
    printf("cpu      %d threads\n", wisp_engine_threads(eng));
    int n = wisp_engine_gpu_count(eng);
    for (int i = 0; i < n; i++) {
        int cap = wisp_engine_gpu_capability(eng, i);
        printf("gpu:%-4d %s, %.1f GiB, sm_%d%s\n", i, wisp_engine_gpu_name(eng, i),
               (double)wisp_engine_gpu_memory(eng, i) / (1024.0 * 1024 * 1024), cap,
               wisp_engine_gpu_usable(eng, i) ? "" : " (unusable)");
    }
    if (n == 0) printf("gpu      none: %s\n", wisp_engine_gpu_status(eng));
    wisp_engine_free(eng);
    return 0;
}

int main(int argc, char **argv)
{
    /* a closed standard descriptor (`>&-`) would be reused by the next open(), and the
     * probabilities written into an input: hold it with /dev/null opened read-only, so
     * writes to it fail (EBADF) and are reported */
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int nfd = open("/dev/null", O_RDONLY);
            if (nfd >= 0 && nfd != fd) { dup2(nfd, fd); close(nfd); }
        }
    if (argc < 2) { fputs(usage_main, stderr); return 2; }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) { fputs(usage_main, stdout); return 0; }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) { printf("wisp %s\n", wisp_version()); return 0; }
    static const struct { const char *name; int (*fn)(int, char **); } cmds[] = {
        {"score", cmd_score}, {"import", cmd_import}, {"convert", cmd_convert}, {"info", cmd_info},
        {"devices", cmd_devices}, {"run", wisp__cli_run}, {"repl", wisp__cli_repl}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (!strcmp(cmd, cmds[i].name)) {
            static char progname[64];
            snprintf(progname, sizeof progname, "wisp %s", cmd);
            prog = progname;
            int rc = cmds[i].fn(argc - 1, argv + 1);
            /* what is still buffered for standard output, and its close, count too
             * (after a failure the error is already reported) */
            if (rc == 0) { if (close_output(stdout, "<stdout>")) rc = 1; }
            else fflush(stdout);
            return rc;
        }
    }
    prog = "wisp";
    return wisp__cli_usage_error("unknown command '%s' (score, import, convert, info, devices, run, repl)", cmd);
}
