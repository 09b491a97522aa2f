/* fuzz_trace.c: libFuzzer harness of the trace reader (trace_read.c) and of
 * `divtrace show` and `divtrace diff` on the traces it reads.
 *
 * An input is 4 control bytes, then trace A, then optionally trace B (from
 * the first "DIVTRACE" after A's magic on; without one, B is A). Before the
 * traces are written out, the CRC of every block is recomputed (unless a
 * control bit says not to), so that mutations get past the checksums into
 * the parsers. Then show runs on A, diff on A and B, and diff on A and F, a
 * valid trace this harness writes at start-up. Bytes 0 to 3 choose the
 * commands' options:
 *   c0  show: bit 0 --json, 1 --summary, 2 --ops, 3 --step (value from c1),
 *       bits 4-6 a special case (see fuzz_show), bit 7 keep the CRCs
 *   c1  show: bits 0-4 the step, 5-6 the form of the option, bit 7 a bad value
 *   c2  diff A B, c3 diff A F: bit 0 --json, 1 --quiet, 2 --reference,
 *       bits 3-4 the order of the files, 5-6 a special case (see fuzz_diff),
 *       bit 7 long forms
 * Standard output goes to a memory file; what --json printed must be one
 * valid JSON value, and the exit status 0, 1 (diff only) or 2. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cli.h"
#include "fuzz_util.h"
#include "trace.h"
#include "trace_impl.h"

enum { FUZZ_CTRL = 4, FUZZ_MAX_ARGS = 12 };

static char path_a[64], path_b[64], path_f[64];
static int fd_a = -1, fd_b = -1, out_fd = -1, full_fd = -1;

/* ---- the fixed trace F ----------------------------------------------------- */

/* A one-unit autoencoder (divtrace record --layers 1,1,1), 30 steps at level
 * param, a checkpoint every step and a loss curve with a plateau. */
static const struct fuzz_op {
    const char *name, *type;
    uint8_t kind;
    const char *in[2];
} fuzz_ops[] = {
    {"data.x", "input", TRACE_KIND_INPUT, {NULL, NULL}},
    {"enc1.W", "param", TRACE_KIND_PARAM, {"@enc1.W.update", NULL}},
    {"enc1.b", "param", TRACE_KIND_PARAM, {"@enc1.b.update", NULL}},
    {"enc1.matmul", "matmul", TRACE_KIND_FORWARD, {"data.x", "enc1.W"}},
    {"enc1.add_bias", "add_bias", TRACE_KIND_FORWARD, {"enc1.matmul", "enc1.b"}},
    {"enc1.sigmoid", "sigmoid", TRACE_KIND_FORWARD, {"enc1.add_bias", NULL}},
    {"loss.mse", "mse", TRACE_KIND_FORWARD, {"enc1.sigmoid", "data.x"}},
    {"enc1.sigmoid.grad", "mse_bwd", TRACE_KIND_BACKWARD, {"enc1.sigmoid", "data.x"}},
    {"enc1.add_bias.grad", "sigmoid_bwd", TRACE_KIND_BACKWARD, {"enc1.sigmoid", "enc1.sigmoid.grad"}},
    {"enc1.b.grad", "bias_grad", TRACE_KIND_GRAD, {"enc1.add_bias.grad", NULL}},
    {"enc1.W.grad", "matmul", TRACE_KIND_GRAD, {"enc1.add_bias.grad", "data.x"}},
    {"enc1.W.update", "sgd", TRACE_KIND_OPTIMIZER, {"enc1.W", "enc1.W.grad"}},
    {"enc1.b.update", "sgd", TRACE_KIND_OPTIMIZER, {"enc1.b", "enc1.b.grad"}},
};
enum { FUZZ_NOPS = sizeof fuzz_ops / sizeof fuzz_ops[0], FUZZ_STEPS = 30 };

static uint32_t fuzz_op_index(const char *name)
{
    for (uint32_t i = 0; i < FUZZ_NOPS; i++)
        if (strcmp(fuzz_ops[i].name, name) == 0)
            return i;
    abort();
}

/* F's parameters before step s: enc1.W drifts, enc1.b stays. */
static void fuzz_fixed_ckpt(struct trace_writer *w, uint64_t s)
{
    float wv = 0.5f + 0.01f * (float)s, bv = 0.1f;
    struct trace_tensor t[2] = {
        {.name = "enc1.W", .ndim = 2, .shape = {1, 1}, .count = 1, .data = &wv},
        {.name = "enc1.b", .ndim = 2, .shape = {1, 1}, .count = 1, .data = &bv},
    };
    struct trace_ckpt c = {.step = s, .data_cursor = s, .rng_seed = 1, .ntensors = 2, .t = t};
    if (trace_writer_ckpt(w, &c) < 0)
        abort();
}

static void fuzz_write_fixed(const char *path)
{
    struct trace_config cfg = {0};
    trace_config_set(&cfg, "model", "autoencoder");
    trace_config_set(&cfg, "layers", "1,1,1");
    trace_config_set(&cfg, "backend", "mpfr");
    trace_config_set(&cfg, "precision", "128");
    struct trace_writer *w;
    if (trace_writer_open(&w, path, &cfg, TRACE_LEVEL_PARAM) < 0)
        abort();
    trace_config_free(&cfg);
    struct trace_opdef ops[FUZZ_NOPS];
    uint32_t inputs[FUZZ_NOPS][2];
    memset(ops, 0, sizeof ops);
    for (uint32_t i = 0; i < FUZZ_NOPS; i++) {
        const struct fuzz_op *o = &fuzz_ops[i];
        ops[i] = (struct trace_opdef){.name = (char *)o->name, .type = (char *)o->type,
                                      .kind = o->kind, .ndim = 2, .shape = {1, 1},
                                      .inputs = inputs[i]};
        for (int k = 0; k < 2 && o->in[k]; k++) {
            int prev = o->in[k][0] == '@';
            inputs[i][ops[i].ninputs++] = fuzz_op_index(o->in[k] + prev) | (prev ? TRACE_INPUT_PREV : 0);
        }
    }
    if (trace_writer_ops(w, ops, FUZZ_NOPS) < 0)
        abort();
    struct trace_oprec rec[FUZZ_NOPS];
    for (uint64_t s = 0; s < FUZZ_STEPS; s++) {
        fuzz_fixed_ckpt(w, s);
        uint32_t n = 0;
        for (uint32_t i = 0; i < FUZZ_NOPS; i++) {
            if (!trace_level_keeps(TRACE_LEVEL_PARAM, (enum trace_kind)fuzz_ops[i].kind))
                continue;
            rec[n] = (struct trace_oprec){.op = i, .hash = 0x9e3779b97f4a7c15ull * (s * 64 + i + 1),
                                          .l2 = 0.5 + 0.01 * (double)s, .min = 0.1, .max = 0.9};
            for (int k = 0; k < TRACE_SKETCH_LEN; k++)
                rec[n].sketch[k] = 0.01f * (float)(k + 1) * (float)(s + 1);
            n++;
        }
        /* flat at 0.5 up to step 14, then a drop */
        double loss = s < 15 ? 0.5 + 1e-4 * (double)(s % 2) : 0.5 * (1.0 - 0.03 * (double)(s - 14));
        struct trace_step st = {.step = s, .loss = loss, .grad_norm = 0.1, .root = s + 1,
                                .nrec = n, .rec = rec};
        if (trace_writer_step(w, &st) < 0)
            abort();
        if (s == 20) {
            struct trace_event e = {.code = TRACE_EVENT_CARRY, .step = s, .op = 1,
                                    .text = "step 20: carry fault: enc1.W"};
            if (trace_writer_event(w, &e) < 0)
                abort();
        }
    }
    if (trace_writer_close(w, 0) < 0)
        abort();
}

/* ---- output: a memory file, checked when it should be JSON ----------------- */

/* Where the next command's standard output goes: the memory file, or
 * /dev/full for a write error. */
static void fuzz_out_begin(int full)
{
    fflush(stdout);
    if (ftruncate(out_fd, 0) != 0 || lseek(out_fd, 0, SEEK_SET) != 0 ||
        dup2(full ? full_fd : out_fd, STDOUT_FILENO) < 0)
        abort();
}

static const char *json_value(const char *p, const char *end, int depth);

static const char *json_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

static const char *json_string(const char *p, const char *end)
{
    if (p >= end || *p++ != '"')
        return NULL;
    while (p < end && *p != '"') {
        if ((unsigned char)*p < 0x20)
            return NULL;
        if (*p == '\\') {
            if (++p >= end)
                return NULL;
            if (*p == 'u') {
                for (int k = 1; k <= 4; k++)
                    if (p + k >= end || !strchr("0123456789abcdefABCDEF", p[k]) || !p[k])
                        return NULL;
                p += 4;
            } else if (!strchr("\"\\/bfnrt", *p) || !*p) {
                return NULL;
            }
        }
        p++;
    }
    return p < end ? p + 1 : NULL;
}

static const char *json_number(const char *p, const char *end)
{
    const char *s = p;
    if (p < end && *p == '-')
        p++;
    if (p < end && *p == '0')
        p++;
    else if (p < end && *p >= '1' && *p <= '9')
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    else
        return NULL;
    if (p < end && *p == '.') {
        if (++p >= end || *p < '0' || *p > '9')
            return NULL;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        if (++p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            return NULL;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    return p > s ? p : NULL;
}

/* A list of values (or, with keys, of "key": value members) up to `close`. */
static const char *json_list(const char *p, const char *end, int depth, char close, int keys)
{
    p = json_ws(p + 1, end);
    if (p < end && *p == close)
        return p + 1;
    for (;;) {
        if (keys) {
            p = json_string(p, end);
            if (!p || (p = json_ws(p, end)) >= end || *p != ':')
                return NULL;
            p = json_ws(p + 1, end);
        }
        p = json_value(p, end, depth + 1);
        if (!p || (p = json_ws(p, end)) >= end)
            return NULL;
        if (*p == close)
            return p + 1;
        if (*p != ',')
            return NULL;
        p = json_ws(p + 1, end);
    }
}

static const char *json_value(const char *p, const char *end, int depth)
{
    p = json_ws(p, end);
    if (p >= end || depth > 64)
        return NULL;
    switch (*p) {
    case '{': return json_list(p, end, depth, '}', 1);
    case '[': return json_list(p, end, depth, ']', 0);
    case '"': return json_string(p, end);
    }
    static const char *const words[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(words[k]);
        if ((size_t)(end - p) >= n && memcmp(p, words[k], n) == 0)
            return p + n;
    }
    return json_number(p, end);
}

/* Back to the memory file; with `json`, what was printed (if anything) must
 * be exactly one JSON value and a newline. */
static void fuzz_out_end(const char *what, int json)
{
    fflush(stdout);
    clearerr(stdout); /* a write error sticks to the stream: later commands would inherit it */
    if (dup2(out_fd, STDOUT_FILENO) < 0)
        abort();
    off_t n = lseek(out_fd, 0, SEEK_END);
    if (!json || n <= 0)
        return;
    char *buf = malloc((size_t)n);
    if (!buf || pread(out_fd, buf, (size_t)n, 0) != n)
        abort();
    const char *e = json_value(buf, buf + n, 0);
    if (!e || e + 1 != buf + n || *e != '\n') {
        fprintf(stderr, "fuzz_trace: %s --json printed no valid JSON (%lld bytes, bad at byte %lld):\n%.*s\n",
                what, (long long)n, e ? (long long)(e - buf) : -1LL, n > 4000 ? 4000 : (int)n, buf);
        abort();
    }
    free(buf);
}

/* ---- the commands ---------------------------------------------------------- */

/* Exit status 0 or 2 (trouble), or 1 (a finding) where the command has one. */
static void fuzz_check_rc(const char *what, int rc, int finding)
{
    if (rc != 0 && rc != CLI_EXIT_TROUBLE && !(finding && rc == CLI_EXIT_FINDING)) {
        fprintf(stderr, "fuzz_trace: %s returned %d\n", what, rc);
        abort();
    }
}

/* show as c0 and c1 say. The special cases: 1 --help, 2 --version, 3 an
 * unknown option, 4 a path that is no trace file, 5 two files, 6 standard
 * output full. */
static void fuzz_show(uint8_t c0, uint8_t c1)
{
    char *argv[FUZZ_MAX_ARGS], step[32], eq[48];
    int argc = 0, special = (c0 >> 4) & 7;
    argv[argc++] = "divtrace show";
    if (c0 & 1)
        argv[argc++] = "--json";
    if (c0 & 2)
        argv[argc++] = "--summary";
    if (c0 & 4)
        argv[argc++] = "--ops";
    if (c0 & 8) {
        if (c1 & 0x80)
            snprintf(step, sizeof step, "%s", (c1 & 1) ? "-1" : "1x");
        else
            snprintf(step, sizeof step, "%u", c1 & 0x1f);
        switch ((c1 >> 5) & 3) {
        case 0: argv[argc++] = "-s"; argv[argc++] = step; break;
        case 1: argv[argc++] = "--step"; argv[argc++] = step; break;
        case 2:
            snprintf(eq, sizeof eq, "--step=%s", step);
            argv[argc++] = eq;
            break;
        default:
            argv[argc++] = "-s";
            argv[argc++] = "18446744073709551616"; /* 2^64 */
        }
    }
    switch (special) {
    case 1: argv[argc++] = (c1 & 1) ? "-h" : "--help"; break;
    case 2: argv[argc++] = (c1 & 1) ? "-V" : "--version"; break;
    case 3: argv[argc++] = "--no-such-option"; break;
    }
    if (special != 4)
        argv[argc++] = path_a;
    else
        argv[argc++] = (c1 & 1) ? "/" : "/nonexistent/a.dtr";
    if (special == 5)
        argv[argc++] = path_b;
    argv[argc] = NULL;
    fuzz_out_begin(special == 6);
    int rc = cmd_show(argc, argv);
    fuzz_out_end("show", (c0 & 1) && special != 1 && special != 2 && special != 6);
    fuzz_check_rc("show", rc, 0);
}

/* diff of x and y as control byte c says (see the top of the file). The
 * special cases: 1 --help or --version, 2 a wrong number of files (or an
 * unknown option), 3 standard output full. */
static void fuzz_diff(uint8_t c, char *x, char *y)
{
    char *argv[FUZZ_MAX_ARGS], ref[96];
    int argc = 0, special = (c >> 5) & 3, order = (c >> 3) & 3, lng = c >> 7;
    argv[argc++] = "divtrace diff";
    if (c & 1)
        argv[argc++] = "--json";
    if (c & 2)
        argv[argc++] = lng ? "--quiet" : "-q";
    if (special == 1)
        argv[argc++] = lng ? "--help" : "-V";
    char *first = order & 1 ? y : x, *second = order & 1 ? x : y;
    if (c & 4) {
        /* -r REF RUN [RUN]; bit 4 of c: the reference is a run too (the
         * first with bit 7, else the second) */
        if (lng) {
            snprintf(ref, sizeof ref, "--reference=%s", first);
            argv[argc++] = ref;
        } else {
            argv[argc++] = "-r";
            argv[argc++] = first;
        }
        if (special != 2) {
            if ((order & 2) && lng)
                argv[argc++] = first;
            argv[argc++] = second;
            if ((order & 2) && !lng)
                argv[argc++] = first;
        } else if (order & 2) {
            argv[argc++] = second;      /* three runs (else none) */
            argv[argc++] = first;
            argv[argc++] = second;
        }
    } else {
        /* bit 4 of c: a trace against itself */
        argv[argc++] = first;
        if (special != 2)
            argv[argc++] = order & 2 ? first : second;
        else if (lng)
            argv[argc++] = "--no-such-option";
    }
    argv[argc] = NULL;
    fuzz_out_begin(special == 3);
    int rc = cmd_diff(argc, argv);
    fuzz_out_end("diff", (c & 1) && !(c & 2) && special != 1 && special != 3);
    fuzz_check_rc("diff", rc, 1);
}

/* ---- input ----------------------------------------------------------------- */

/* Recompute the CRC of every block from the header on, walking the blocks by
 * their lengths; stop at the first one that does not fit in the input. */
static void fuzz_fix_crcs(uint8_t *p, size_t n)
{
    size_t off = TRACE_HEADER_LEN;
    while (off <= n && n - off >= TRACE_BLOCK_EXTRA) {
        uint64_t len = trace_get_u64(p + off + 8);
        if (len > n - off - TRACE_BLOCK_EXTRA)
            break;
        size_t body = TRACE_BLOCK_HEAD + (size_t)len;
        trace_put_u32(p + off + body, trace_crc(0, p + off, body));
        off += body + 4;
    }
}

static void fuzz_write_trace(int fd, const uint8_t *data, size_t n, int fix)
{
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        abort();
    memcpy(buf, data, n);
    if (fix)
        fuzz_fix_crcs(buf, n);
    fuzz_memfile_set(fd, buf, n);
    free(buf);
}

/* The reader alone, on a trace no command reads: every checkpoint too. */
static void fuzz_read(const char *path)
{
    struct trace_file *tf;
    if (trace_open(&tf, path) < 0)
        return;
    for (uint32_t i = 0; i < tf->nckpt; i++) {
        struct trace_ckpt c;
        if (trace_read_ckpt(tf, i, &c) == 0)
            trace_ckpt_free(&c);
    }
    trace_close(tf);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fd_a = fuzz_memfile("a.dtr", path_a, sizeof path_a);
    fd_b = fuzz_memfile("b.dtr", path_b, sizeof path_b);
    fuzz_memfile("fixed.dtr", path_f, sizeof path_f);
    fuzz_write_fixed(path_f);
    out_fd = memfd_create("fuzz_trace-stdout", MFD_CLOEXEC);
    full_fd = open("/dev/full", O_WRONLY | O_CLOEXEC);
    if (out_fd < 0 || full_fd < 0)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < FUZZ_CTRL)
        return 0;
    uint8_t c[FUZZ_CTRL];
    memcpy(c, data, FUZZ_CTRL);
    data += FUZZ_CTRL;
    size -= FUZZ_CTRL;
    size_t na = size;
    const uint8_t *b = size > 8 ? memmem(data + 8, size - 8, TRACE_MAGIC, 8) : NULL;
    if (b)
        na = (size_t)(b - data);
    int fix = !(c[0] & 0x80);
    fuzz_write_trace(fd_a, data, na, fix);
    fuzz_write_trace(fd_b, b ? b : data, b ? size - na : 0, fix); /* empty: for the two-file show */
    char *pb = b ? path_b : path_a;
    fuzz_show(c[0], c[1]);
    if (((c[0] >> 4) & 7) - 1u < 5u)
        fuzz_read(path_a); /* show did not read A */
    if (b)
        fuzz_read(path_b);
    fuzz_diff(c[2], path_a, pb);
    fuzz_diff(c[3], path_a, path_f);
    return 0;
}
