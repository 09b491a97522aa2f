/* blocks.c: lists the blocks of a complete .dtr trace with their byte
 * ranges, for tests/cut/cut_points.sh, which cuts a recording at and around
 * every boundary. Written from divtrace-trace(5) alone, not from the
 * reader it checks: one line per piece of the file,
 *     START END TAG STEP
 * END exclusive, TAG "HEAD" (the 16-byte header), a block tag ("OPS" without
 * its space) or "TRLR" (the trailer), STEP the step field of STEP, CKPT and
 * EVNT blocks, else "-". Exit 2 with a message when the file is not a
 * complete, well-framed trace. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t blocks_get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int blocks_fail(const char *path, const char *why, uint64_t off)
{
    fprintf(stderr, "blocks: %s: %s at offset %" PRIu64 "\n", path, why, off);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: blocks TRACE.dtr\n");
        return 2;
    }
    const char *path = argv[1];
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 2;
    }
    size_t cap = 1 << 16, n = 0, k;
    unsigned char *d = malloc(cap);
    while (d && (k = fread(d + n, 1, cap - n, f)) > 0)
        if ((n += k) == cap)
            d = realloc(d, cap *= 2);
    fclose(f);
    if (!d)
        return blocks_fail(path, "out of memory", 0);
    if (n < 16 || memcmp(d, "DIVTRACE", 8) != 0)
        return blocks_fail(path, "no trace header", 0);
    printf("0 16 HEAD -\n");
    uint64_t off = 16;
    for (;;) {
        if (n - off < 20)
            return blocks_fail(path, "no INDX block before the end", off);
        uint64_t len = blocks_get_u64(d + off + 8);
        if (len > n - off - 20)
            return blocks_fail(path, "block runs past the end", off);
        char tag[5];
        memcpy(tag, d + off, 4);
        tag[4] = 0;
        if (tag[3] == ' ')
            tag[3] = 0;
        uint64_t end = off + 20 + len, step;
        int has_step = 1;
        if ((!strcmp(tag, "STEP") || !strcmp(tag, "CKPT")) && len >= 8)
            step = blocks_get_u64(d + off + 16);
        else if (!strcmp(tag, "EVNT") && len >= 16)
            step = blocks_get_u64(d + off + 24);
        else
            has_step = 0;
        if (has_step)
            printf("%" PRIu64 " %" PRIu64 " %s %" PRIu64 "\n", off, end, tag, step);
        else
            printf("%" PRIu64 " %" PRIu64 " %s -\n", off, end, tag);
        off = end;
        if (!strcmp(tag, "INDX"))
            break;
    }
    if (n - off != 16 || memcmp(d + off + 8, "ENDTRACE", 8) != 0 ||
        blocks_get_u64(d + off) >= off)
        return blocks_fail(path, "no trailer right after the INDX block", off);
    printf("%" PRIu64 " %" PRIu64 " TRLR -\n", off, off + 16);
    free(d);
    return 0;
}
