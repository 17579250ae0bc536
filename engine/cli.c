/* cli.c — the `wisp` command: score, import, convert, info, devices, run, repl. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int wisp_cli_run(int argc, char **argv);    /* cli_lua.c */
int wisp_cli_repl(int argc, char **argv);   /* cli_lua.c */

static const char *prog = "wisp";

static int die(const char *fmt, ...) WISP_PRINTF(1, 2);
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

static const char usage_main[] =
    "usage: wisp COMMAND [OPTIONS]\n"
    "\n"
    "wisp scores sparse logistic-regression (\"wide\") models on CPUs and CUDA GPUs.\n"
    "\n"
    "commands:\n"
    "  score    score libsvm or Vowpal Wabbit rows with a model, one probability per line\n"
    "  import   convert a trained model (LIBLINEAR, Vowpal Wabbit) into a .wisp file\n"
    "  convert  rewrite a .wisp file with another weight dtype (f32, f16, i8)\n"
    "  info     describe a .wisp file\n"
    "  devices  list the devices wisp can score on\n"
    "  run      run a Lua script with the wisp module loaded\n"
    "  repl     an interactive Lua prompt with wisp loaded\n"
    "\n"
    "`wisp COMMAND --help` describes each command. `wisp --version` prints the version.\n"
    "Exit status: 0 on success, 1 on errors (a message names the file and line),\n"
    "2 on a usage error.\n";

static const char usage_score[] =
    "usage: wisp score -m MODEL [--format libsvm|vw] [--device DEV] [--batch N] [--threads N]\n"
    "                  [--hugepages] [-o OUT] [FILE|-]\n"
    "\n"
    "Reads libsvm lines (\"[label] id:value id:value ...\"; the label is ignored, a bare\n"
    "id is a binary feature) from FILE or standard input and prints one probability\n"
    "per row: sigmoid(bias + sum w[id]*value). For LIBLINEAR models that is the\n"
    "probability of the first label of the model's \"label\" line. Blank lines and\n"
    "'#' comments make no row. A malformed line prints \"nan\" in its place, is reported\n"
    "on stderr as FILE:LINE: reason, and makes the exit status 1; other rows are kept.\n"
    "\n"
    "With --format vw the lines are Vowpal Wabbit text (\"label [weight] ['tag]|ns[:w] feat[:value]\n"
    "... |ns2 ...\"), hashed as VW hashes them with the options kept in the model (made by\n"
    "`wisp import vw`: -b, -q, --hash_seed, --noconstant, ...); the probability is\n"
    "sigmoid(VW's sum), what `vw -t -i MODEL --link logistic -p PREDS` prints for a model\n"
    "trained with --loss_function logistic. Blank lines make no row.\n"
    "\n"
    "  -m, --model MODEL   the .wisp model file (required)\n"
    "  -f, --format FMT    input format: libsvm (the default) or vw (Vowpal Wabbit text)\n"
    "  -d, --device DEV    cpu, gpu, gpu:N, gpus or auto (default: auto = a GPU if usable)\n"
    "  -b, --batch N       rows per batch (default 65536)\n"
    "  -t, --threads N     CPU threads (default: one per core)\n"
    "      --hugepages     copy the weights into huge pages (faster CPU gathers, no page-cache sharing)\n"
    "  -o, --output OUT    write probabilities to OUT instead of standard output\n"
    "      --stats         print per-stage time and throughput on stderr at the end\n";

static const char usage_import[] =
    "usage: wisp import liblinear MODEL.txt OUT.wisp [--dtype f32|f16|i8]\n"
    "       wisp import vw MODEL.txt OUT.wisp [--dtype f32|f16|i8]\n"
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

/* ---- input: a mapped regular file, or a growing buffer fed from a stream ---- */

typedef struct {
    const char *name;
    int fd;
    char *map; size_t map_len;          /* regular files */
    char *buf; size_t len, cap, pos;    /* streams */
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
    if (fstat(in->fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
        in->map_len = (size_t)st.st_size;
        in->map = mmap(NULL, in->map_len, PROT_READ, MAP_PRIVATE, in->fd, 0);
        if (in->map == MAP_FAILED) { in->map = NULL; in->map_len = 0; }
        else madvise(in->map, in->map_len, MADV_SEQUENTIAL);
    }
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
    if (n == 0) in->eof = 1;
    in->len += (size_t)n;
    return 0;
}

static void input_close(input *in)
{
    if (in->map) munmap(in->map, in->map_len);
    if (in->fd > STDIN_FILENO) close(in->fd);
    free(in->buf);
}

/* ---- wisp score ---------------------------------------------------------------
 * The work is split into pieces of the input, cut at line ends, one or more per
 * thread. Each piece is parsed, scored (by its own session) and formatted on one
 * thread of the engine's pool, while its batch is still in that core's cache;
 * the main thread then reports bad lines and writes the pieces' text in order.
 * Line numbers are counted per piece and made absolute when reported. */

typedef struct {
    wisp_batch *batch;
    wisp_session *session;          /* one per piece: a session is one thread's at a time */
    float *probs;                   /* max_rows */
    char *obuf; size_t olen;        /* the piece's formatted output */
    const char *text; size_t len;   /* the piece */
    int final;                      /* the piece may end without '\n' */
    const wisp_vw *vw;              /* --format vw: the model's hashing options; NULL: libsvm */
    size_t max_rows;
    size_t used;                    /* bytes consumed */
    uint64_t lines;                 /* lines consumed */
    uint64_t ns_parse, ns_format;
    int status; char err[256];
} piece;

typedef struct { piece *p; } parse_job;

static char *fmt_prob(char *p, float v);

static void parse_piece(void *ctx, size_t i)
{
    piece *pc = &((parse_job *)ctx)->p[i];
    wisp_batch_clear(pc->batch);
    pc->lines = 0;
    pc->used = 0;
    pc->olen = 0;
    uint64_t t0 = wisp_now_ns();
    pc->status = pc->vw ? wisp_batch_parse_vw(pc->batch, pc->vw, pc->text, pc->len, pc->final, pc->max_rows,
                                              &pc->lines, &pc->used)
                        : wisp_batch_parse_libsvm(pc->batch, pc->text, pc->len, pc->final, pc->max_rows, &pc->lines,
                                                  &pc->used);
    uint64_t t1 = wisp_now_ns();
    pc->ns_parse += t1 - t0;
    size_t rows = wisp_batch_rows(pc->batch);
    if (pc->status == WISP_OK && rows) pc->status = wisp_session_score(pc->session, pc->batch, pc->probs);
    if (pc->status != WISP_OK) { snprintf(pc->err, sizeof pc->err, "%s", wisp_errmsg()); return; }
    uint64_t t2 = wisp_now_ns();
    char *o = pc->obuf;
    for (size_t r = 0; r < rows; r++) o = fmt_prob(o, pc->probs[r]);
    pc->olen = (size_t)(o - pc->obuf);
    pc->ns_format += wisp_now_ns() - t2;
}

static int parse_count(const char *s, const char *what, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return die("bad %s '%s': expected a number from %ld to %ld", what, s, lo, hi);
    *out = v;
    return 0;
}

static int write_all(FILE *f, const char *p, size_t n, const char *name)
{
    if (fwrite(p, 1, n, f) != n) return die("%s: write error: %s", name, strerror(errno));
    return 0;
}

/* Cut text[0..len) into at most n pieces ending at line ends. The last piece
 * takes the rest when `final`, else it ends at the last '\n'. Returns the count. */
static size_t cut_pieces(piece *pc, size_t n, const char *text, size_t len, int final, size_t piece_bytes)
{
    size_t k = 0, pos = 0;
    while (k < n && pos < len) {
        size_t want = pos + piece_bytes < len ? pos + piece_bytes : len, end;
        if (want >= len && final) end = len;
        else {
            const char *nl = memchr(text + want - (want > pos ? 1 : 0), '\n', len - want + (want > pos ? 1 : 0));
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

static int cmd_score(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"format", required_argument, 0, 'f'},
        {"device", required_argument, 0, 'd'}, {"batch", required_argument, 0, 'b'},
        {"threads", required_argument, 0, 't'}, {"output", required_argument, 0, 'o'},
        {"hugepages", no_argument, 0, 'H'}, {"stats", no_argument, 0, 'S'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *model_path = NULL, *device = "auto", *out_path = NULL;
    long batch_rows = 65536, threads = 0;
    int hugepages = 0, show_stats = 0, fmt_vw = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:f:d:b:t:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_path = optarg; break;
        case 'f':
            if (!strcmp(optarg, "vw")) fmt_vw = 1;
            else if (!strcmp(optarg, "libsvm")) fmt_vw = 0;
            else return die("score: unknown --format '%s' (supported: libsvm, vw)", optarg), 2;
            break;
        case 'd': device = optarg; break;
        case 'b': if (parse_count(optarg, "--batch", 1, WISP_MAX_ROWS, &batch_rows)) return 2; break;
        case 't': if (parse_count(optarg, "--threads", 0, 1024, &threads)) return 2; break;
        case 'o': out_path = optarg; break;
        case 'H': hugepages = 1; break;
        case 'S': show_stats = 1; break;
        case 'h': fputs(usage_score, stdout); return 0;
        default: fputs(usage_score, stderr); return 2;
        }
    }
    if (!model_path) { fputs(usage_score, stderr); return die("score: -m MODEL is required"), 2; }
    if (argc - optind > 1) return die("score: one input file at most (got %d)", argc - optind), 2;
    const char *in_path = optind < argc ? argv[optind] : "-";

    enum { PIECES_PER_THREAD = 2 };
    int rc = 1, npieces = 0;
    wisp_engine *eng = NULL; wisp_model *m = NULL;
    wisp_vw *vw = NULL;
    piece *pc = NULL;
    FILE *out = stdout;
    input in;
    uint64_t bad_total = 0, rows_total = 0, line_base = 0, t_start = wisp_now_ns(), ns_write = 0;
    if (input_open(&in, in_path)) goto done;
    if (wisp_engine_new((int)threads, &eng) != WISP_OK) { die("%s", wisp_errmsg()); goto done; }
    if (wisp_model_load_ex(eng, model_path, hugepages ? WISP_LOAD_HUGEPAGES : 0, &m) != WISP_OK) {
        die("%s", wisp_errmsg()); goto done;
    }
    if (fmt_vw && wisp_vw_from_model(m, &vw) != WISP_OK) { die("%s", wisp_errmsg()); goto done; }
    npieces = wisp_engine_threads(eng) * PIECES_PER_THREAD;
    pc = calloc((size_t)npieces, sizeof *pc);
    if (!pc) { die("score: out of memory"); goto done; }
    for (int i = 0; i < npieces; i++) {
        pc[i].max_rows = (size_t)batch_rows;
        pc[i].vw = vw;
        if (wisp_session_new(eng, m, device, &pc[i].session) != WISP_OK) { die("%s", wisp_errmsg()); goto done; }
        if (i == 0) wisp_engine_set_log_level(eng, WISP_LOG_ERROR);   /* say a device fallback once, not per piece */
        if (wisp_batch_new(eng, &pc[i].batch) != WISP_OK) { die("%s", wisp_errmsg()); goto done; }
        pc[i].probs = malloc((size_t)batch_rows * sizeof *pc[i].probs);
        pc[i].obuf = malloc((size_t)batch_rows * 24);
        if (!pc[i].probs || !pc[i].obuf) { die("score: out of memory for a batch of %ld rows", batch_rows); goto done; }
    }
    wisp_engine_set_log_level(eng, WISP_LOG_WARN);
    if (out_path && !(out = fopen(out_path, "w"))) { die("%s: cannot open for writing: %s", out_path, strerror(errno)); goto done; }
    /* piece size: about a batch of rows at ~64 bytes a row, 64 KiB to 4 MiB (small
     * pieces keep a piece's batch in cache between parsing and scoring) */
    size_t piece_bytes = (size_t)batch_rows * 64;
    if (piece_bytes < (64u << 10)) piece_bytes = 64u << 10;
    if (piece_bytes > (4u << 20)) piece_bytes = 4u << 20;

    for (;;) {
        const char *text; size_t len; int final;
        if (in.map) { text = in.map + in.pos; len = in.map_len - in.pos; final = 1; }
        else {
            if (!in.eof && in.len - in.pos < piece_bytes * (size_t)npieces && input_fill(&in)) goto done;
            text = in.buf + in.pos; len = in.len - in.pos; final = in.eof;
        }
        if (len == 0 && (in.map || in.eof)) break;
        size_t k = cut_pieces(pc, (size_t)npieces, text, len, final, piece_bytes);
        if (k == 0) {   /* no complete line yet: read more, or the line is too long */
            if (len > WISP_MAX_LINE_BYTES) { die("%s:%llu: line longer than %u bytes", in.name,
                                                 (unsigned long long)line_base + 1, WISP_MAX_LINE_BYTES); goto done; }
            if (!in.map && !in.eof && input_fill(&in)) goto done;
            continue;
        }
        parse_job job = { pc };
        if (k == 1) parse_piece(&job, 0);
        else wisp_pool_run(eng->pool, k, parse_piece, &job);
        size_t advanced = 0;
        for (size_t j = 0; j < k; j++) {
            piece *p = &pc[j];
            if (p->status != WISP_OK) { die("%s: %s", in.name, p->err); goto done; }
            size_t rows = wisp_batch_rows(p->batch);
            size_t nbad = wisp_batch_bad_count(p->batch);
            for (size_t i = 0; i < nbad; i++) {
                size_t row; uint64_t line; const char *msg;
                if (wisp_batch_bad_row(p->batch, i, &row, &line, &msg) != WISP_OK) continue;
                char prefix[32];   /* the message names its piece-relative line: keep one "FILE:LINE:" */
                int pn = snprintf(prefix, sizeof prefix, "line %llu: ", (unsigned long long)line);
                if (!strncmp(msg, prefix, (size_t)pn)) msg += pn;
                fprintf(stderr, "%s:%llu: %s\n", in.name, (unsigned long long)(line_base + line), msg);
            }
            bad_total += nbad;
            rows_total += rows;
            uint64_t w0 = wisp_now_ns();
            if (p->olen && write_all(out, p->obuf, p->olen, out_path ? out_path : "<stdout>")) goto done;
            ns_write += wisp_now_ns() - w0;
            line_base += p->lines;
            advanced += p->used;
            if (p->used < p->len) break;   /* stopped at max_rows: the pieces after it are parsed again */
        }
        in.pos += advanced;
        if (advanced == 0 && final) break;
    }
    if (fflush(out) != 0) { die("%s: write error: %s", out_path ? out_path : "<stdout>", strerror(errno)); goto done; }
    rc = bad_total ? 1 : 0;
    if (bad_total)
        fprintf(stderr, "%s: %s: %llu malformed line%s scored as nan (reported above); %llu rows in all\n", prog,
                in.name, (unsigned long long)bad_total, bad_total == 1 ? "" : "s", (unsigned long long)rows_total);
    if (show_stats) {
        double wall = (double)(wisp_now_ns() - t_start) / 1e9;
        uint64_t st[WISP_STAT_COUNT] = {0}, ns_parse = 0, ns_format = 0;
        for (int i = 0; i < npieces; i++) {
            for (int k = 0; k < WISP_STAT_COUNT; k++) st[k] += wisp_session_stat(pc[i].session, k);
            ns_parse += pc[i].ns_parse;
            ns_format += pc[i].ns_format;
        }
        fprintf(stderr, "wisp score: %llu rows in %.3f s (%.0f rows/s) on %s, %d threads\n",
                (unsigned long long)rows_total, wall, (double)rows_total / wall, wisp_session_last_device(pc[0].session),
                wisp_engine_threads(eng));
        fprintf(stderr, "  thread time: parse %.1f ms, score %.1f ms (kernel %.1f, h2d %.1f, d2h %.1f), format %.1f ms;"
                " write %.1f ms\n", (double)ns_parse / 1e6, (double)st[WISP_STAT_NS_TOTAL] / 1e6,
                (double)st[WISP_STAT_NS_KERNEL] / 1e6, (double)st[WISP_STAT_NS_H2D] / 1e6,
                (double)st[WISP_STAT_NS_D2H] / 1e6, (double)ns_format / 1e6, (double)ns_write / 1e6);
        if (st[WISP_STAT_OUT_OF_RANGE])
            fprintf(stderr, "  %llu feature ids beyond the model's %llu features were ignored\n",
                    (unsigned long long)st[WISP_STAT_OUT_OF_RANGE], (unsigned long long)wisp_model_num_features(m));
        if (st[WISP_STAT_FALLBACKS])
            fprintf(stderr, "  %llu batches fell back from the GPU to the CPU\n", (unsigned long long)st[WISP_STAT_FALLBACKS]);
    }
done:
    if (out && out != stdout) fclose(out);
    input_close(&in);
    for (int i = 0; pc && i < npieces; i++) {
        wisp_batch_free(pc[i].batch);
        wisp_session_free(pc[i].session);
        free(pc[i].probs);
        free(pc[i].obuf);
    }
    free(pc);
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
            if (i + 1 >= *argc) return die("--dtype needs a value (f32, f16 or i8)");
            v = argv[++i];
        } else if (!strncmp(argv[i], "--dtype=", 8)) {
            v = argv[i] + 8;
        } else {
            argv[n++] = argv[i];
            continue;
        }
        *dtype = wisp_dtype_parse(v);
        if (*dtype < 0) return die("unknown dtype '%s' (use f32, f16 or i8)", v);
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
    if (argc != 4) return fputs(usage_import, stderr), 2;
    if (!strcmp(argv[1], "vw")) return import_vw(argv[2], argv[3], dtype);
    if (strcmp(argv[1], "liblinear"))
        return die("import: unknown model kind '%s' (supported: liblinear, vw)", argv[1]), 2;
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
    if (argc != 3 || !explicit) return fputs(usage_convert, stderr), 2;
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
    if (argc != 2) return fputs(usage_info, stderr), 2;
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
    if (cols && *cols) printf("columns:    %zu bytes of feature-column description\n", strlen(cols));
    wisp_model_free(m);
    wisp_engine_free(eng);
    return 0;
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
    if (argc < 2) { fputs(usage_main, stderr); return 2; }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) { fputs(usage_main, stdout); return 0; }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) { printf("wisp %s\n", wisp_version()); return 0; }
    static const struct { const char *name; int (*fn)(int, char **); } cmds[] = {
        {"score", cmd_score}, {"import", cmd_import}, {"convert", cmd_convert}, {"info", cmd_info},
        {"devices", cmd_devices}, {"run", wisp_cli_run}, {"repl", wisp_cli_repl}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (!strcmp(cmd, cmds[i].name)) {
            static char progname[64];
            snprintf(progname, sizeof progname, "wisp %s", cmd);
            prog = progname;
            return cmds[i].fn(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "wisp: unknown command '%s'\n\n%s", cmd, usage_main);
    return 2;
}
