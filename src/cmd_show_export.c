/* cmd_show_export.c: `divtrace show --export NAME --step S -o FILE`: one
 * checkpointed tensor (a parameter or optimizer state) as a NumPy .npy file
 * (format 1.0, little-endian float32, C order), written to a temporary file
 * beside FILE and renamed over it, so FILE is whole or untouched. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_show.h"
#include "trace.h"
#include "util.h"

/* "0, 50, 100, ..., 4950, 5000": the steps that have a checkpoint. */
static void export_ckpt_list(const struct trace_file *tf, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = 0;
    for (uint32_t i = 0; i < tf->nckpt && len < n; i++) {
        if (tf->nckpt > 8 && i == 3) {
            len += (size_t)snprintf(buf + len, n - len, ", ...");
            i = tf->nckpt - 3;
        }
        len += (size_t)snprintf(buf + len, n - len, "%s%" PRIu64, i ? ", " : "", tf->ckpt[i].step);
    }
}

/* The NPY header for a float32 tensor: magic, version 1.0, its length, then
 * the dictionary padded with spaces to a multiple of 64 bytes in all. */
static size_t export_npy_header(char *h, size_t cap, const struct trace_tensor *t)
{
    char shape[128] = "";
    size_t len = 0;
    if (t->ndim == 0 && t->count != 1)
        len = (size_t)snprintf(shape, sizeof shape, "%" PRIu64 ",", t->count);
    for (int d = 0; d < t->ndim; d++)
        len += (size_t)snprintf(shape + len, sizeof shape - len, "%s%u%s", d ? " " : "",
                                t->shape[d], t->ndim == 1 || d + 1 < t->ndim ? "," : "");
    char dict[256];
    int m = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }",
                     shape);
    size_t total = 10 + (size_t)m + 1;
    total = (total + 63) / 64 * 64;
    DT_ASSERT(total <= cap && total - 10 <= 65535, "npy header of %zu bytes", total);
    memcpy(h, "\x93NUMPY\x01\x00", 8);
    h[8] = (char)((total - 10) & 0xff);
    h[9] = (char)((total - 10) >> 8);
    memcpy(h + 10, dict, (size_t)m);
    memset(h + 10 + m, ' ', total - 10 - (size_t)m - 1);
    h[total - 1] = '\n';
    return total;
}

/* Write t to path through a temporary file; 0, or -1 with dt_error set. */
static int export_write(const char *path, const struct trace_tensor *t)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        dt_error_set("%s: is a directory", path);
        return -1;
    }
    size_t plen = strlen(path);
    char *tmp = dt_malloc(plen + 16);
    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        dt_error_set("%s: cannot create: %s", path, strerror(errno));
        free(tmp);
        return -1;
    }
    FILE *f = fdopen(fd, "wb");
    DT_ASSERT(f, "fdopen: %s", strerror(errno));
    char h[512];
    size_t hn = export_npy_header(h, sizeof h, t);
    int ok = fwrite(h, 1, hn, f) == hn;
    for (uint64_t k = 0; ok && k < t->count; k++) {
        uint32_t u;
        memcpy(&u, &t->data[k], sizeof u);
        unsigned char le[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                               (unsigned char)(u >> 24)};
        ok = fwrite(le, 1, 4, f) == 4;
    }
    int err = ok ? 0 : errno;
    if (fflush(f) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    if (fclose(f) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        err = errno;
    }
    if (!ok) {
        dt_error_set("%s: cannot write: %s", path, strerror(err ? err : EIO));
        unlink(tmp);
    }
    free(tmp);
    return ok ? 0 : -1;
}

int show_export(struct trace_file *tf, const char *name, int has_step, uint64_t step,
                const char *out)
{
    char list[256];
    export_ckpt_list(tf, list, sizeof list);
    if (!out) {
        cli_error("show", "--export needs -o FILE, the .npy file to write");
        return CLI_EXIT_TROUBLE;
    }
    if (!has_step) {
        cli_error("show", "--export needs --step S, a step with a checkpoint (%s has them at "
                  "steps %s)", tf->path, tf->nckpt ? list : "no step: it has none");
        return CLI_EXIT_TROUBLE;
    }
    uint32_t i = 0;
    while (i < tf->nckpt && tf->ckpt[i].step != step)
        i++;
    if (i == tf->nckpt) {
        if (tf->nckpt)
            cli_error("show", "%s: no checkpoint at step %" PRIu64 " (checkpoints at steps %s)",
                      tf->path, step, list);
        else
            cli_error("show", "%s: no checkpoint at step %" PRIu64 " (the trace has none)",
                      tf->path, step);
        return CLI_EXIT_TROUBLE;
    }
    struct trace_ckpt ck;
    if (trace_read_ckpt(tf, i, &ck) < 0) {
        cli_error("show", "%s", dt_error());
        return CLI_EXIT_TROUBLE;
    }
    const struct trace_tensor *t = trace_ckpt_find(&ck, name);
    int rc = 0;
    if (!t) {
        char names[320];
        size_t len = 0;
        names[0] = 0;
        for (uint32_t k = 0; k < ck.ntensors && len < sizeof names; k++)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", k ? ", " : "",
                                    ck.t[k].name);
        if (len >= sizeof names)
            memcpy(names + sizeof names - 5, " ...", 5);
        cli_error("show", "%s: no tensor '%s' in the checkpoint of step %" PRIu64 " (it has: %s)",
                  tf->path, name, step, names);
        rc = CLI_EXIT_TROUBLE;
    } else if (export_write(out, t) < 0) {
        cli_error("show", "%s", dt_error());
        rc = CLI_EXIT_TROUBLE;
    }
    trace_ckpt_free(&ck);
    return rc;
}
