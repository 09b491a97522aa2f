/* test_sweep.c: the sweep file parser (sweep.h): conditions from crossing
 * explicit conditions with factors, their names, groups, attributes and
 * record options, selectors, {trial}/{cond} substitution, trial paths, pair
 * matching, and each error message with its file and line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sweep.h"
#include "test_util.h"
#include "util.h"

/* The record options of condition c joined by single spaces. */
static const char *ts_args(const struct sweep_cond *c)
{
    static char buf[1024];
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < c->nargs; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", i ? " " : "", c->args[i]);
    return buf;
}

static const char *ts_attr(const struct sweep_cond *c, const char *key)
{
    for (int a = 0; a < c->nattr; a++)
        if (strcmp(c->attr[a].key, key) == 0)
            return c->attr[a].val;
    return NULL;
}

static void ts_parse_ok(struct sweep_spec *s, const char *text)
{
    int rc = sweep_spec_parse(s, text, "t.sweep");
    if (rc != 0)
        fail_msg("parse failed: %s", dt_error());
}

/* The spec must fail with exactly this message. */
static void ts_parse_err(const char *text, const char *msg)
{
    struct sweep_spec s;
    int rc = sweep_spec_parse(&s, text, "t.sweep");
    if (rc == 0) {
        sweep_spec_free(&s);
        fail_msg("parsed, expected: %s", msg);
    }
    assert_string_equal(dt_error(), msg);
}

static void test_crossing(void **state)
{
    (void)state;
    struct sweep_spec s;
    ts_parse_ok(&s, "# two factors crossed\n"
                    "name demo\n"
                    "trials 3\n"
                    "common --layers 784,8,784 --steps 20   # small\n"
                    "factor init random : --seed {trial}\n"
                    "factor init fixed : --init-seed 7 --seed {trial}\n"
                    "factor threads 1 : --threads 1\n"
                    "factor threads 2 : --threads 2\n"
                    "factor threads 4 : --threads 4\n");
    assert_string_equal(s.name, "demo");
    assert_int_equal(s.ncond, 6);
    /* The first factor outermost, file order within each; each condition
     * named FACTOR=LEVEL, joined by ','. */
    static const char *const names[] = {"init=random,threads=1", "init=random,threads=2",
                                        "init=random,threads=4", "init=fixed,threads=1",
                                        "init=fixed,threads=2",  "init=fixed,threads=4"};
    for (int i = 0; i < 6; i++) {
        assert_string_equal(s.cond[i].name, names[i]);
        assert_string_equal(s.cond[i].group, names[i]);
        assert_int_equal(s.cond[i].trials, 3);
        assert_int_equal(s.cond[i].nattr, 3);
        assert_string_equal(s.cond[i].attr[0].key, "group");
        assert_string_equal(s.cond[i].attr[0].val, names[i]);
    }
    assert_string_equal(ts_attr(&s.cond[4], "init"), "fixed");
    assert_string_equal(ts_attr(&s.cond[4], "threads"), "2");
    assert_string_equal(ts_args(&s.cond[4]),
                        "--layers 784,8,784 --steps 20 --init-seed 7 --seed {trial} --threads 2");
    assert_null(s.cond[4].args[s.cond[4].nargs]);
    assert_ptr_equal(sweep_cond_find(&s, "init=fixed,threads=2"), &s.cond[4]);
    assert_null(sweep_cond_find(&s, "fixed-2"));
    assert_null(sweep_cond_find(&s, "init=fixed"));
    assert_int_equal(s.ncompare, 0);
    assert_int_equal(s.npair, 0);
    assert_non_null(strstr(s.text, "factor threads 4"));
    sweep_spec_free(&s);
}

static void test_explicit_conditions(void **state)
{
    (void)state;
    struct sweep_spec s;
    ts_parse_ok(&s, "common --steps 20\n"
                    "trials 2\n"
                    "condition cpu1 group=cpu : --threads 1\n"
                    "condition cpu2 group=cpu trials=5 : --threads 2\n"
                    "condition gpu : --backend cuda\n"
                    "factor init random : --seed {trial}\n"
                    "factor init fixed : --init-seed 1\n"
                    "compare group=cpu group=gpu final escape\n"
                    "compare init=random init=fixed\n"
                    "pair group=cpu group=gpu\n");
    assert_string_equal(s.name, "sweep");
    assert_int_equal(s.ncond, 6);
    static const char *const names[] = {"cpu1,init=random", "cpu1,init=fixed",
                                        "cpu2,init=random", "cpu2,init=fixed",
                                        "gpu,init=random",  "gpu,init=fixed"};
    static const char *const groups[] = {"cpu", "cpu", "cpu", "cpu", "gpu", "gpu"};
    static const int trials[] = {2, 2, 5, 5, 2, 2};
    for (int i = 0; i < 6; i++) {
        assert_string_equal(s.cond[i].name, names[i]);
        assert_string_equal(s.cond[i].group, groups[i]);
        assert_string_equal(ts_attr(&s.cond[i], "group"), groups[i]);
        assert_int_equal(s.cond[i].trials, trials[i]);
    }
    assert_string_equal(ts_args(&s.cond[3]), "--steps 20 --threads 2 --init-seed 1");
    assert_int_equal(s.ncompare, 2);
    assert_string_equal(s.compare[0].sel[0], "group=cpu");
    assert_string_equal(s.compare[0].sel[1], "group=gpu");
    assert_int_equal(s.compare[0].nmetrics, 2);
    assert_int_equal(s.compare[0].metric[0], SWEEP_METRIC_FINAL);
    assert_int_equal(s.compare[0].metric[1], SWEEP_METRIC_ESCAPE);
    assert_int_equal(s.compare[0].line, 8);
    /* The default metric. */
    assert_int_equal(s.compare[1].nmetrics, 1);
    assert_int_equal(s.compare[1].metric[0], SWEEP_METRIC_FINAL);
    assert_int_equal(s.npair, 1);
    assert_int_equal(s.pair[0].line, 10);
    sweep_spec_free(&s);
}

static void test_explicit_only_and_default(void **state)
{
    (void)state;
    struct sweep_spec s;
    /* Explicit conditions, no factor: their own names, group the name. */
    ts_parse_ok(&s, "condition a : --threads 1\ncondition b : --threads 2\n");
    assert_int_equal(s.ncond, 2);
    assert_string_equal(s.cond[0].name, "a");
    assert_string_equal(s.cond[1].group, "b");
    assert_int_equal(s.cond[1].nattr, 1);
    assert_int_equal(s.cond[1].trials, 1);
    sweep_spec_free(&s);
    /* No condition, no factor: one condition named "run". */
    ts_parse_ok(&s, "trials 12\ncommon --steps 10\n");
    assert_int_equal(s.ncond, 1);
    assert_string_equal(s.cond[0].name, "run");
    assert_int_equal(s.cond[0].trials, 12);
    sweep_spec_free(&s);
    /* A level with no options, a condition without ':'; the colon may touch
     * the last word; quotes and escapes; '#' inside a word is not a comment. */
    ts_parse_ok(&s, "common --data 'my dir/x'\n"
                    "condition c trials=2\n"
                    "factor lr default\n"
                    "factor lr big: --lr \"3\\\"5\" --x=a#b a\\ b\n");
    assert_int_equal(s.ncond, 2);
    assert_string_equal(s.cond[0].name, "c,lr=default");
    assert_string_equal(s.cond[1].name, "c,lr=big");
    assert_int_equal(s.cond[0].nargs, 2);
    assert_string_equal(s.cond[0].args[1], "my dir/x");
    assert_int_equal(s.cond[1].nargs, 6);
    assert_string_equal(s.cond[1].args[3], "3\"5");
    assert_string_equal(s.cond[1].args[4], "--x=a#b");
    sweep_spec_free(&s);
    ts_parse_ok(&s, "factor lr big: --lr 3 a\\ b\n");
    assert_int_equal(s.cond[0].nargs, 3);
    assert_string_equal(s.cond[0].args[2], "a b");
    sweep_spec_free(&s);
}

static void test_selectors(void **state)
{
    (void)state;
    struct sweep_spec s;
    ts_parse_ok(&s, "condition cpu group=host : --threads 1\n"
                    "condition gpu : --backend cuda\n"
                    "factor det on : --x 1\n"
                    "factor det off : --x 2\n");
    const struct sweep_cond *c = sweep_cond_find(&s, "cpu,det=off");
    assert_non_null(c);
    assert_true(sweep_cond_matches(c, "*"));
    assert_true(sweep_cond_matches(c, "cond=cpu,det=off"));
    assert_false(sweep_cond_matches(c, "cond=cpu-off"));
    assert_false(sweep_cond_matches(c, "cond=cpu"));
    assert_true(sweep_cond_matches(c, "group=host"));
    assert_true(sweep_cond_matches(c, "det=off"));
    assert_false(sweep_cond_matches(c, "det=on"));
    assert_false(sweep_cond_matches(c, "det=of"));
    assert_false(sweep_cond_matches(c, "de=off"));
    assert_false(sweep_cond_matches(c, "group=cpu"));
    assert_false(sweep_cond_matches(c, "nokey"));
    c = sweep_cond_find(&s, "gpu,det=on");
    assert_true(sweep_cond_matches(c, "group=gpu"));
    assert_false(sweep_cond_matches(c, "group=gpu,det=on"));
    sweep_spec_free(&s);
    /* Without explicit conditions the group is the condition's name. */
    ts_parse_ok(&s, "factor a x : --x 1\nfactor b y : --y 1\n");
    assert_string_equal(s.cond[0].name, "a=x,b=y");
    assert_true(sweep_cond_matches(&s.cond[0], "group=a=x,b=y"));
    assert_true(sweep_cond_matches(&s.cond[0], "cond=a=x,b=y"));
    sweep_spec_free(&s);
}

static void test_trial_args_and_paths(void **state)
{
    (void)state;
    struct sweep_spec s;
    ts_parse_ok(&s, "trials 12\n"
                    "common --seed {trial} --data d/{cond}/x{trial}{trial} --lr {notaword {x\n"
                    "factor k a : --tag {cond}\n");
    const struct sweep_cond *c = &s.cond[0];
    char **a = sweep_trial_args(&s, c, 7);
    assert_string_equal(a[0], "--seed");
    assert_string_equal(a[1], "7");
    assert_string_equal(a[3], "d/k=a/x77");
    assert_string_equal(a[5], "{notaword");
    assert_string_equal(a[6], "{x");
    assert_string_equal(a[8], "k=a");
    assert_null(a[9]);
    sweep_args_free(a);
    /* The condition's own arguments keep the placeholders. */
    assert_string_equal(c->args[1], "{trial}");
    char path[256];
    sweep_trial_path(c, 3, ".dtr", path, sizeof path);
    assert_string_equal(path, "runs/k=a/t03.dtr");
    sweep_trial_path(c, 12, ".dtr.part", path, sizeof path);
    assert_string_equal(path, "runs/k=a/t12.dtr.part");
    sweep_trial_path(c, 100, "log", path, sizeof path);
    assert_string_equal(path, "runs/k=a/t100.log");
    sweep_trial_path(c, 1, "", path, sizeof path);
    assert_string_equal(path, "runs/k=a/t01");
    sweep_spec_free(&s);
}

static void test_pairs(void **state)
{
    (void)state;
    struct sweep_spec s;
    ts_parse_ok(&s, "common --steps 5\n"
                    "factor init random : --seed {trial}\n"
                    "factor init fixed : --init-seed 3\n"
                    "factor dev cpu : --backend cpu\n"
                    "factor dev det : --backend cudnn\n"
                    "factor dev fast : --backend cudnn --cudnn-algo fastest\n"
                    "pair dev=cpu dev=det\n"
                    "pair init=random *\n"
                    "pair dev=det init=fixed\n");
    /* Conditions: init=random,dev=cpu 0, init=random,dev=det 1,
     * init=random,dev=fast 2, init=fixed,dev=cpu 3, init=fixed,dev=det 4,
     * init=fixed,dev=fast 5. */
    int(*m)[2] = NULL;
    int n = sweep_pair_conditions(&s, &s.pair[0], &m);
    assert_int_equal(n, 2);
    assert_int_equal(m[0][0], 0);
    assert_int_equal(m[0][1], 1);
    assert_int_equal(m[1][0], 3);
    assert_int_equal(m[1][1], 4);
    free(m);
    /* "*" names no factor: random-X goes with the other conditions that have
     * dev=X, i.e. fixed-X only (never with itself). */
    n = sweep_pair_conditions(&s, &s.pair[1], &m);
    assert_int_equal(n, 3);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(m[k][0], k);
        assert_int_equal(m[k][1], k + 3);
    }
    free(m);
    /* Both factors named: every det with every fixed, except itself. */
    n = sweep_pair_conditions(&s, &s.pair[2], &m);
    assert_int_equal(n, 5);
    assert_int_equal(m[0][0], 1);
    assert_int_equal(m[0][1], 3);
    assert_int_equal(m[1][0], 1);
    assert_int_equal(m[1][1], 4);
    assert_int_equal(m[2][1], 5);
    assert_int_equal(m[3][0], 4);
    assert_int_equal(m[3][1], 3);
    assert_int_equal(m[4][1], 5);
    free(m);
    sweep_spec_free(&s);
    /* Explicit conditions without factors: every a with every b. */
    ts_parse_ok(&s, "condition c1 group=cpu : --threads 1\n"
                    "condition c2 group=cpu : --threads 2\n"
                    "condition g : --backend cuda\n"
                    "pair group=cpu group=g\n");
    n = sweep_pair_conditions(&s, &s.pair[0], &m);
    assert_int_equal(n, 2);
    assert_int_equal(m[0][0], 0);
    assert_int_equal(m[0][1], 2);
    assert_int_equal(m[1][0], 1);
    assert_int_equal(m[1][1], 2);
    free(m);
    sweep_spec_free(&s);
}

static void test_errors_directives(void **state)
{
    (void)state;
    ts_parse_err("common --x 1\n\nbogus 3\n",
                 "t.sweep:3: unknown directive 'bogus' (name, trials, common, condition, "
                 "factor, compare, pair)");
    ts_parse_err("common --x 'a\n", "t.sweep:1: unterminated quote");
    ts_parse_err("common --x 1\ncommon \x1b[1m\n", "t.sweep:2: control character 0x1b: not a sweep file");
    ts_parse_err("factor f a : --x \"a\n", "t.sweep:1: unterminated quote");
    ts_parse_err("name a b\n", "t.sweep:1: name: expected one word");
    ts_parse_err("name a\nname b\n", "t.sweep:2: name given twice");
    ts_parse_err("name a/b\n", "t.sweep:1: name 'a/b': use letters, digits, '-', '_' and '.'");
    ts_parse_err("trials\n", "t.sweep:1: trials: expected one number");
    ts_parse_err("trials 0\n", "t.sweep:1: trials '0': expected an integer from 1 to 1000");
    ts_parse_err("trials 1001\n", "t.sweep:1: trials '1001': expected an integer from 1 to 1000");
    ts_parse_err("trials 3x\n", "t.sweep:1: trials '3x': expected an integer from 1 to 1000");
    ts_parse_err("trials 2\n#\ntrials 3\n", "t.sweep:3: trials given twice (first on line 1)");
    ts_parse_err("common\n", "t.sweep:1: common: expected record options");
    ts_parse_err("common --steps 3 -o x.dtr\n",
                 "t.sweep:1: record option '-o': the output file is set by the sweep");
    ts_parse_err("common --output=x.dtr\n",
                 "t.sweep:1: record option '--output=x.dtr': the output file is set by the sweep");
    ts_parse_err("factor a b : -ox.dtr\n",
                 "t.sweep:1: record option '-ox.dtr': the output file is set by the sweep");
    ts_parse_err("common --seed {trail}\n",
                 "t.sweep:1: unknown placeholder '{trail}' (use {trial} or {cond})");
}

static void test_errors_conditions(void **state)
{
    (void)state;
    ts_parse_err("condition\n", "t.sweep:1: condition: expected a name");
    ts_parse_err("condition : --x 1\n", "t.sweep:1: condition: expected a name");
    ts_parse_err("condition a/b : --x 1\n",
                 "t.sweep:1: condition name 'a/b': use letters, digits, '-', '_' and '.'");
    ts_parse_err("condition .. : --x 1\n",
                 "t.sweep:1: condition name '..': use letters, digits, '-', '_' and '.'");
    ts_parse_err("condition a : --x 1\n# c\ncondition a : --x 2\n",
                 "t.sweep:3: condition 'a' given twice (first on line 1)");
    ts_parse_err("condition a group=x group=y : --x 1\n",
                 "t.sweep:1: condition 'a': group given twice");
    ts_parse_err("condition a group=x/y : --x 1\n",
                 "t.sweep:1: group 'x/y': use letters, digits, '-', '_' and '.'");
    ts_parse_err("condition a trials=2 trials=3 : --x 1\n",
                 "t.sweep:1: condition 'a': trials given twice");
    ts_parse_err("condition a trials=-1 : --x 1\n",
                 "t.sweep:1: trials '-1': expected an integer from 1 to 1000");
    ts_parse_err("condition a --x 1\n",
                 "t.sweep:1: condition 'a': unknown option '--x' (group=G, trials=N, then ':' "
                 "and the record options)");
    ts_parse_err("condition a\n", "t.sweep:1: condition 'a' has no record options");
    ts_parse_err("trials 2\n", "t.sweep: condition 'run' has no record options");
    ts_parse_err("", "t.sweep: condition 'run' has no record options");
    ts_parse_err("factor\n", "t.sweep:1: factor: expected 'factor FACTOR LEVEL : OPTIONS...'");
    ts_parse_err("factor a : --x 1\n",
                 "t.sweep:1: factor: expected 'factor FACTOR LEVEL : OPTIONS...'");
    ts_parse_err("factor a b c : --x 1\n",
                 "t.sweep:1: factor: expected 'factor FACTOR LEVEL : OPTIONS...'");
    ts_parse_err("factor a.b c : --x 1\n",
                 "t.sweep:1: factor name 'a.b': use letters, digits, '-' and '_'");
    ts_parse_err("factor group c : --x 1\n",
                 "t.sweep:1: factor name 'group' is reserved for the conditions' groups");
    ts_parse_err("factor f . : --x 1\n",
                 "t.sweep:1: level name '.': use letters, digits, '-', '_' and '.'");
    ts_parse_err("factor f a : --x 1\nfactor f b : --x 2\nfactor f a : --x 3\n",
                 "t.sweep:3: factor 'f' level 'a' given twice (first on line 1)");
    ts_parse_err("factor f1 a : --x 1\nfactor f2 a : --x 1\nfactor f3 a : --x 1\n"
                 "factor f4 a : --x 1\nfactor f5 a : --x 1\nfactor f6 a : --x 1\n"
                 "factor f7 a : --x 1\nfactor f8 a : --x 1\nfactor f9 a : --x 1\n",
                 "t.sweep:9: factor 'f9': at most 8 factors");
    /* Levels joined by '-' made one name of "a-b" + "c" and "a" + "b-c";
     * FACTOR=LEVEL joined by ',' cannot ('=' and ',' are in no name). */
    struct sweep_spec s;
    ts_parse_ok(&s, "common --x 1\nfactor f a-b : \nfactor f a :\nfactor g c :\nfactor g b-c :\n");
    assert_int_equal(s.ncond, 4);
    assert_string_equal(s.cond[1].name, "f=a-b,g=b-c");
    assert_string_equal(s.cond[2].name, "f=a,g=c");
    sweep_spec_free(&s);
    ts_parse_ok(&s, "condition a-b : --x 1\ncondition a : --x 2\nfactor f c :\nfactor f b-c :\n");
    assert_int_equal(s.ncond, 4);
    assert_string_equal(s.cond[0].name, "a-b,f=c");
    assert_string_equal(s.cond[3].name, "a,f=b-c");
    sweep_spec_free(&s);
}

static void test_errors_compare_pair(void **state)
{
    (void)state;
    const char *base = "common --x 1\nfactor dev cpu :\nfactor dev gpu :\n";
    char buf[512];
#define TS_ERR(tail, msg) \
    do { \
        snprintf(buf, sizeof buf, "%s%s", base, tail); \
        ts_parse_err(buf, msg); \
    } while (0)
    TS_ERR("compare dev=cpu\n", "t.sweep:4: compare: expected 'compare SEL SEL [METRIC...]'");
    TS_ERR("compare dev=cpu dev\n", "t.sweep:4: selector 'dev': expected KEY=VALUE or '*'");
    TS_ERR("compare =cpu dev=gpu\n", "t.sweep:4: selector '=cpu': expected KEY=VALUE or '*'");
    TS_ERR("compare dev= dev=gpu\n", "t.sweep:4: selector 'dev=': expected KEY=VALUE or '*'");
    TS_ERR("compare dev=cpu dev=gpu loss\n",
           "t.sweep:4: compare: unknown metric 'loss' (final, escape, phases)");
    TS_ERR("compare dev=cpu dev=gpu final final\n",
           "t.sweep:4: compare: metric 'final' given twice");
    TS_ERR("\ncompare dev=cpu devv=gpu\n",
           "t.sweep:5: selector 'devv=gpu': unknown key 'devv' (cond, group, dev)");
    TS_ERR("compare dev=cpu dev=tpu\n", "t.sweep:4: selector 'dev=tpu' matches no condition");
    TS_ERR("compare group=x dev=gpu\n", "t.sweep:4: selector 'group=x' matches no condition");
    TS_ERR("pair dev=cpu\n", "t.sweep:4: pair: expected 'pair SEL SEL'");
    TS_ERR("pair dev=cpu dev=gpu final\n", "t.sweep:4: pair: expected 'pair SEL SEL'");
    TS_ERR("pair dev=cpu x=y\n", "t.sweep:4: selector 'x=y': unknown key 'x' (cond, group, dev)");
    TS_ERR("pair dev=cpu dev=npu\n", "t.sweep:4: selector 'dev=npu' matches no condition");
    TS_ERR("pair dev=cpu dev=cpu\n",
           "t.sweep:4: pair dev=cpu dev=cpu: no two conditions agree on the other factors");
    /* A compare before the factors it names is fine. */
    struct sweep_spec s;
    ts_parse_ok(&s, "compare dev=cpu dev=gpu\ncommon --x 1\nfactor dev cpu :\nfactor dev gpu :\n");
    sweep_spec_free(&s);
#undef TS_ERR
}

static void test_load(void **state)
{
    (void)state;
    struct sweep_spec s;
    const char *path = tu_path("a.sweep");
    const char *text = "name x\ncommon --steps 2\n";
    tu_write_file(path, text, strlen(text));
    assert_int_equal(sweep_spec_load(&s, path), 0);
    assert_string_equal(s.text, text);
    assert_string_equal(s.name, "x");
    sweep_spec_free(&s);
    const char *bad = "common --steps 2\nfactr a b :\n";
    tu_write_file(path, bad, strlen(bad));
    assert_int_equal(sweep_spec_load(&s, path), -1);
    char want[1024];
    snprintf(want, sizeof want, "%s:2: unknown directive 'factr' (name, trials, common, "
             "condition, factor, compare, pair)", path);
    assert_string_equal(dt_error(), want);
    tu_write_file(path, "common\0x", 8);
    assert_int_equal(sweep_spec_load(&s, path), -1);
    snprintf(want, sizeof want, "%s: contains a NUL byte: not a sweep file", path);
    assert_string_equal(dt_error(), want);
    const char *missing = tu_path("missing.sweep");
    assert_int_equal(sweep_spec_load(&s, missing), -1);
    snprintf(want, sizeof want, "%s: No such file or directory", missing);
    assert_string_equal(dt_error(), want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crossing),
        cmocka_unit_test(test_explicit_conditions),
        cmocka_unit_test(test_explicit_only_and_default),
        cmocka_unit_test(test_selectors),
        cmocka_unit_test(test_trial_args_and_paths),
        cmocka_unit_test(test_pairs),
        cmocka_unit_test(test_errors_directives),
        cmocka_unit_test(test_errors_conditions),
        cmocka_unit_test(test_errors_compare_pair),
        cmocka_unit_test(test_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
