/* test_trace_ckpt.c: the checkpoints of the .dtr trace file: a flipped bit
 * in a checkpoint's data is found when it is read, and writers killed with
 * SIGKILL mid-run leave a readable prefix whose checkpoints (big tensors
 * included) read back whole. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"
#include "trace.h"
#include "trace_testutil.h"
#include "util.h"

static void test_flipped_bit_in_ckpt(void **state)
{
    (void)state;
    const char *src = tu_path("ck-src.dtr"), *bad = tu_path("ck.dtr");
    g_plain = 1; /* the element is found by its bytes */
    for (int closed = 1; closed >= 0; closed--) {
        write_small(src, TRACE_LEVEL_OP, closed);
        size_t n;
        uint8_t *buf = tu_read_file(src, &n);
        struct blk b[64];
        size_t nb = walk_blocks(buf, n, b, 64);
        const struct blk *ck = nth_block(b, nb, "CKPT", 1);
        /* Element 5 of adam.m, found by its bytes. */
        uint8_t pat[4];
        float v = ckpt_val(3, 1, 5);
        uint32_t u;
        memcpy(&u, &v, 4);
        put_le32(pat, u);
        uint8_t *at = memmem(buf + ck->off, ck->end - ck->off, pat, 4);
        assert_non_null(at);
        at[1] ^= 0x10;
        tu_write_file(bad, buf, n);
        struct trace_file *tf;
        assert_int_equal(trace_open(&tf, bad), 0);
        struct trace_ckpt c;
        if (closed) {
            /* The index is trusted at open; the checkpoint is verified on read. */
            assert_true(tf->complete);
            check_small_prefix(tf, NSMALL, TRACE_LEVEL_OP);
            assert_int_equal(tf->nckpt, 2);
            assert_int_equal(trace_read_ckpt(tf, 0, &c), 0);
            check_ckpt(&c, 0, 0);
            trace_ckpt_free(&c);
            dt_error_set("%s", "");
            assert_int_equal(trace_read_ckpt(tf, 1, &c), -1);
            assert_non_null(strstr(dt_error(), bad));
            assert_non_null(strstr(dt_error(), "CRC mismatch"));
            assert_int_equal(c.ntensors, 0);
            assert_null(c.t);
        } else {
            /* A scan verifies every block and stops at the damaged one. */
            assert_false(tf->complete);
            assert_non_null(strstr(tf->note, "corrupt"));
            check_small_prefix(tf, 3, TRACE_LEVEL_OP);
            assert_int_equal(tf->nckpt, 1);
        }
        trace_close(tf);
        free(buf);
    }
    g_plain = 0;
}

/* ---- SIGKILL at a random moment ---- */

#define KILL_STEPS 2000
#define KILL_CKPT_EVERY 100
#define KILL_BIG 65536          /* elements of the big checkpoint tensor */

static _Noreturn void kill_child(const char *path, int notify)
{
    struct trace_config cfg = {0};
    fill_config(&cfg);
    struct trace_writer *w;
    if (trace_writer_open(&w, path, &cfg, TRACE_LEVEL_OP) != 0 ||
        trace_writer_ops(w, ops_def, NOPS) != 0)
        _exit(2);
    struct trace_step s;
    struct trace_oprec rec[NOPS];
    struct ckpt_fix f;
    for (uint64_t i = 0; i < KILL_STEPS; i++) {
        if (i % KILL_CKPT_EVERY == 0) {
            ckpt_make(&f, i, KILL_BIG);
            if (trace_writer_ckpt(w, &f.c) != 0)
                _exit(3);
            free(f.big);
        }
        expect_step(i, TRACE_LEVEL_OP, &s, rec);
        if (trace_writer_step(w, &s) != 0)
            _exit(4);
        if (i == 0 && write(notify, "s", 1) != 1)
            _exit(5);
    }
    for (;;)
        pause(); /* finished: wait for the kill, never close */
}

static void test_sigkill(void **state)
{
    (void)state;
    const char *path = tu_path("killed.dtr");
    uint64_t seed = 0x6b696c6cu ^ (uint64_t)getpid();
    for (int round = 0; round < 5; round++) {
        int pfd[2];
        assert_int_equal(pipe(pfd), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(pfd[0]);
            kill_child(path, pfd[1]);
        }
        close(pfd[1]);
        char c;
        assert_int_equal(read(pfd[0], &c, 1), 1); /* the first step is written */
        close(pfd[0]);
        unsigned delay = round == 0 ? 0 : (unsigned)tu_rand_uniform(&seed, 0, 12000);
        usleep(delay);
        assert_int_equal(kill(pid, SIGKILL), 0);
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

        struct trace_file *tf;
        if (trace_open(&tf, path) != 0)
            fail_msg("round %d (%u us): %s", round, delay, dt_error());
        assert_false(tf->complete);
        assert_true(tf->nsteps >= 1);
        assert_non_null(strstr(tf->note, "cut short"));
        check_small_prefix(tf, tf->nsteps, TRACE_LEVEL_OP);
        assert_true(tf->nckpt >= 1);
        for (uint32_t i = 0; i < tf->nckpt; i++)
            assert_int_equal(tf->ckpt[i].step, (uint64_t)i * KILL_CKPT_EVERY);
        uint32_t check[2] = {0, tf->nckpt - 1};
        for (int k = 0; k < 2; k++) {
            struct trace_ckpt ck;
            assert_int_equal(trace_read_ckpt(tf, check[k], &ck), 0);
            check_ckpt(&ck, (uint64_t)check[k] * KILL_CKPT_EVERY, KILL_BIG);
            trace_ckpt_free(&ck);
        }
        print_message("round %d: killed after %u us: %llu steps, %u checkpoints; %s\n", round,
                      delay, (unsigned long long)tf->nsteps, tf->nckpt, tf->note);
        trace_close(tf);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flipped_bit_in_ckpt),
        cmocka_unit_test(test_sigkill),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (failed == 0) {
        /* Keep the files of a failed run for a look; otherwise tidy up. */
        static const char *const names[] = {
            "ck-src.dtr", "ck.dtr", "killed.dtr",
        };
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            unlink(tu_path(names[i]));
        rmdir(tu_tmpdir());
    }
    return failed;
}
