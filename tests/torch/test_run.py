#!/usr/bin/env python3
# test_run.py: `divtrace run` (src/python/divtrace/_run.py, src/cmd_run.c) on
# the unchanged training scripts of tests/torch/scripts/: it records them
# with no change, record for record as the loop written by hand with
# divtrace.record does; its options do what divtrace-run(1) says; each
# refusal is one line, exit 2 and a trace that ended early; the script's
# exit status and exceptions come through; the header re-runs the command;
# the divtrace program and `python -m divtrace run` both work.
# Run by tests/cli_torch.sh (make check), once per adapter core.
import concurrent.futures
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys

from torch_testlib import DT, TOP, Checks, run_dt, show_json, tmpdir

from divtrace import _run

C = Checks()
T = tmpdir()
SCRIPTS = os.path.join(TOP, "tests", "torch", "scripts")
MLP_SCRIPT = os.path.join(SCRIPTS, "train_mlp.py")
CASES = os.path.join(SCRIPTS, "train_cases.py")
PY = sys.executable
# the runs are independent processes: two at a time
POOL = concurrent.futures.ThreadPoolExecutor(max_workers=2)


def p(name):
    return os.path.join(T, name)


class Result:
    def __init__(self, r):
        self.rc, self.out, self.err = r.returncode, r.stdout, r.stderr
        self.lines = [x for x in r.stderr.splitlines() if x.startswith("divtrace run:")]

    def __str__(self):
        return "exit %d, stderr: %s" % (self.rc, self.err.strip()[-1500:])


def start(args, cwd=T, via="c", env=None):
    """A run of `divtrace run ARGS` (via the divtrace program, or "python"
    for python -m divtrace run), started; .result() is its Result."""
    e = dict(os.environ, DIVTRACE_PYTHON=PY)
    e.update(env or {})
    for k, v in list(e.items()):
        if v is None:
            del e[k]
    argv = ([DT, "run"] if via == "c" else [PY, "-m", "divtrace", "run"]) + list(args)
    return POOL.submit(lambda: Result(subprocess.run(argv, cwd=cwd, env=e, stdout=subprocess.PIPE,
                                                     stderr=subprocess.PIPE, text=True)))


def start_py(argv, cwd=T):
    """A plain python run of argv (a script of its own)."""
    return POOL.submit(lambda: Result(subprocess.run([PY] + list(argv), cwd=cwd, stdout=subprocess.PIPE,
                                                     stderr=subprocess.PIPE, text=True)))


def forward_ops(js):
    return [o["name"] for o in js["ops"] if o["kind"] == "forward"]


def losses(js):
    return ["%.8f" % s["loss"] for s in js["steps"]]


def printed_losses(out):
    return re.findall(r"^step \d+ loss (\S+)$", out, re.M)


# ---- (1) the unchanged script, and the same loop recorded by hand


def test_records():
    a = start(["-o", p("a.dtr"), "--", "python", MLP_SCRIPT])
    hand = start_py([os.path.join(SCRIPTS, "train_mlp_by_hand.py"), p("hand.dtr")], cwd=SCRIPTS)
    r, h = a.result(), hand.result()
    if not C.ok(r.rc == 0, "train_mlp.py unchanged: divtrace run exits 0", str(r)):
        return
    C.ok(r.out == h.out and r.out.count("epoch ") == 2, "the script's own output comes through",
         "%r | %r" % (r.out, h.out))
    C.ok(r.lines == ["divtrace run: %s: 16 steps of MLP recorded" % p("a.dtr")],
         "one summary line on stderr", str(r.lines))
    js = show_json(p("a.dtr"))
    cfg = js["config"]
    C.ok(js["complete"] and js["end_status"] == 0 and len(js["steps"]) == 16,
         "the trace: complete, status 0, 16 steps (2 epochs of 8 batches)")
    C.ok(cfg.get("run_argv") == "python " + shlex.quote(MLP_SCRIPT) and cfg.get("run_cwd") == T
         and cfg.get("run_script") == MLP_SCRIPT and "run_options" not in cfg,
         "the header: run_argv, run_cwd, run_script", str(cfg))
    C.ok(forward_ops(js) == ["fc1", "act", "fc2", "fc3", "model", "crossentropyloss"],
         "module outputs, the model's and the loss module's", str(forward_ops(js)))
    last = re.findall(r"train loss ([0-9.]+)", r.out)
    C.ok(last == ["%.4f" % js["steps"][7]["loss"], "%.4f" % js["steps"][15]["loss"]],
         "each step's loss is the script's (the last of each epoch as printed)", "%s %s" % (last, losses(js)))
    if not C.ok(h.rc == 0, "the loop recorded by hand runs", str(h)):
        return
    rc, out, err = run_dt("diff", p("a.dtr"), p("hand.dtr"))
    C.ok(rc == 0 and "identical: every op hash of all 16 common steps matches" in out,
         "divtrace run and divtrace.record by hand: divtrace diff says identical", out + err)


# ---- (2) re-running the command from the header


def test_rerun():
    if not os.path.exists(p("a.dtr")):
        return
    cfg = show_json(p("a.dtr"))["config"]
    # as divtrace explain re-runs it: the options first, then the command
    script = "cd \"$1\" && exec \"$2\" run -q --check-steps 1 --exit-after 2 -o \"$3\" -- %s" % cfg["run_argv"]
    r = subprocess.run(["sh", "-c", script, "sh", cfg["run_cwd"], DT, p("again.dtr")],
                       env=dict(os.environ, DIVTRACE_PYTHON=PY), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    C.ok(r.returncode == 0 and "epoch" not in r.stdout and not [x for x in r.stderr.splitlines()
                                                               if x.startswith("divtrace")],
         "re-run with --exit-after 2 -q: exit 0, silent, the script ended before its first epoch's end",
         "exit %d %s %s" % (r.returncode, r.stdout, r.stderr[-800:]))
    js = show_json(p("again.dtr"))
    C.ok(js["complete"] and js["end_status"] == 0 and len(js["steps"]) == 2
         and js["config"].get("check_steps") == "1" and js["checkpoints"],
         "the re-run's trace: complete, 2 steps, step 1's check data in a checkpoint",
         "%s %s %s" % (len(js["steps"]), js["config"].get("check_steps"), js["checkpoints"]))
    rc, out, err = run_dt("diff", p("a.dtr"), p("again.dtr"))
    C.ok(rc == 0 and "identical" in out, "the re-run records the same steps (diff: identical)", out + err)


# ---- (3) options


def test_options():
    m = start(["--steps", "5", "--modules", "fc*,mseloss", "--config", "seed=7", "--checkpoint-every", "2",
               "-o", p("m.dtr"), "--", "python", "-u", "-W", "error::SyntaxWarning", "-m", "train_mlp", "--loss",
               "mse", "--epochs", "1"],
              cwd=SCRIPTS, via="python")
    lv = start(["--level", "param", "--steps", "2", "-o", p("param.dtr"), "--", CASES])
    r = m.result()
    C.ok(r.rc == 0 and r.out.count("epoch ") == 1 and r.lines == ["divtrace run: %s: the first 5 steps of MLP "
                                                                   "recorded" % p("m.dtr")],
         "python -m divtrace run -- python -u -W ... -m train_mlp --steps 5: the script goes on after them", str(r))
    js = show_json(p("m.dtr"))
    cfg = js["config"]
    C.ok(js["complete"] and js["end_status"] == 0 and len(js["steps"]) == 5, "--steps 5: a complete trace of 5 steps")
    C.ok(forward_ops(js) == ["fc1", "fc2", "fc3", "mseloss"]
         and any(o["name"] == "fc1.weight.update" for o in js["ops"]),
         "--modules fc*,mseloss: those modules; parameters, gradients and updates still", str(forward_ops(js)))
    C.ok(js["checkpoints"] == [0, 2, 4, 5], "--checkpoint-every 2: before 0, 2, 4 and at the end",
         str(js["checkpoints"]))
    C.ok(cfg.get("seed") == "7"
         and cfg.get("run_argv") == "python -u -W error::SyntaxWarning -m train_mlp --loss mse --epochs 1"
         and cfg.get("run_cwd") == SCRIPTS and cfg.get("run_script") == MLP_SCRIPT
         and cfg.get("run_options") == "--steps 5 --modules 'fc*,mseloss' --config seed=7 --checkpoint-every 2",
         "the header: --config's key, the -m command and the options that shape the records", str(cfg))
    r = lv.result()
    js = show_json(p("param.dtr"))
    C.ok(r.rc == 0 and js["trace_level"] == "param" and not forward_ops(js) and len(js["steps"]) == 2
         and any(o["name"] == "head.weight.grad" for o in js["ops"]),
         "--level param (-- SCRIPT without python): no module outputs, gradients still", str(r))


def parse_error(argv):
    """_run.main(argv) in this process: (exit status, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = _run.main(argv)
    return rc, err.getvalue()


def test_bad_options():
    bad = [(["--steps", "0", "-o", "x", "--", "t.py"], "--steps '0'"),
           (["--level", "every", "-o", "x", "--", "t.py"], "--level 'every'"),
           (["--check-bytes", "12X", "-o", "x", "--", "t.py"], "--check-bytes '12X'"),
           (["--check-steps", "2-1", "-o", "x", "--", "t.py"], "--check-steps '2-1'"),
           (["--check-steps", "last", "-o", "x", "--", "t.py"], "needs --steps N"),
           (["--check-steps", "4", "--steps", "3", "-o", "x", "--", "t.py"], "past the 3 steps"),
           (["--modules", "fc*", "--level", "param", "-o", "x", "--", "t.py"], "--level op"),
           (["--config", "novalue", "-o", "x", "--", "t.py"], "KEY=VALUE"),
           (["--capture", "magic", "-o", "x", "--", "t.py"], "--capture 'magic'"),
           (["-o", "x", "--", "python", "-X", "dev", "t.py"], "python option -X"),
           (["-o", "x", "--", "python", "-c", "pass"], "python -c"),
           (["-o", "x", "--", "python"], "no script"),
           (["-o", p("x.dtr"), "--", os.path.join(T, "missing.py")], "missing.py: no such file"),
           (["-o", p("x.dtr"), "--", "/bin/sh"], "not a Python script"),
           (["-o", os.path.join(T, "no", "dir", "x.dtr"), "--", MLP_SCRIPT], "no folder")]
    for argv, want in bad:
        rc, err = parse_error(argv)
        lines = err.splitlines()
        C.ok(rc == 2 and len(lines) == 1 and lines[0].startswith("divtrace run: ") and want in lines[0],
             "bad command line (%s): one line, exit 2" % want, "exit %d: %r" % (rc, err))
    for argv, want in [(["--bogus", "-o", "x", "--", "t.py"], "option --bogus not recognized"),
                       (["-o", "x", "--"], "no command to run"), (["--", "t.py"], "-o PATH is required")]:
        rc, err = parse_error(argv)
        lines = err.splitlines()
        C.ok(rc == 2 and len(lines) == 1 and lines[0].startswith("divtrace run: ") and want in lines[0]
             and lines[0].endswith(" (try 'divtrace run --help')"),
             "bad command line (%s): one line with the hint, exit 2" % want, "exit %d: %r" % (rc, err))
    r = subprocess.run([DT, "run", "--steps", "x", "-o", p("x.dtr"), "--", MLP_SCRIPT],
                       env=dict(os.environ, DIVTRACE_PYTHON=PY), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    C.ok(r.returncode == 2 and [x for x in r.stderr.splitlines() if x.startswith("divtrace")]
         == ["divtrace run: --steps 'x': expected an integer of at least 1"],
         "the divtrace program: a bad option, one line, exit 2", r.stderr[-500:])


# ---- (4) refusals


REFUSALS = [
    # case, steps kept, what the line says
    ("accumulate", 0, "after backward() with no optimizer.step() in between (gradient accumulation"),
    ("gan", 1, "a second optimizer, Adam made at %s:" % CASES),
    ("split", 0, "several optimizers update the model (Net): SGD made at %s:" % CASES),
    ("lbfgs", 0, "optimizer.step(closure) at %s:" % CASES),
    ("amp-skip", 3, "GradScaler skipped optimizer.step() at %s:" % CASES),
]


def check_refusal(c, n, want, r):
    """Case c refused in step n with a line that says want."""
    C.ok(r.rc == 2 and len(r.lines) == 1 and want in r.lines[0] and "step %d:" % n in r.lines[0],
         "%s: one line naming what and where, exit 2" % c, str(r))
    C.ok("step 5 loss" in r.out, "%s: the script ran on to its end" % c, r.out[-300:])
    js = show_json(p("%s.dtr" % c))
    why = r.lines[0][len("divtrace run: "):] if r.lines else None
    C.ok(js["end_status"] == 2 and len(js["steps"]) == n and [e["text"] for e in js["events"]] == [why],
         "%s: the trace ended early (status 2) with the line as its reason, %d steps kept" % (c, n),
         "%s %d %s" % (js["end_status"], len(js["steps"]), js["events"]))


def test_refusals():
    runs = [(c, n, want, start(["-o", p("%s.dtr" % c), "--", "python", CASES, "--case", c]))
            for c, n, want in REFUSALS]
    for c, n, want, f in runs:
        check_refusal(c, n, want, f.result())
    with open(p("none.dtr"), "w") as f:
        f.write("an earlier trace\n")
    r = start(["-o", p("none.dtr"), "--", "python", CASES, "--case", "no-optimizer"]).result()
    C.ok(r.rc == 2 and r.lines == ["divtrace run: nothing recorded: %s made no optimizer (torch.optim.Optimizer)"
                                   % CASES] and "step 5 loss" in r.out,
         "no optimizer: one line, exit 2, the script ran", str(r))
    C.ok(not os.path.exists(p("none.dtr")), "no optimizer: no trace, and the earlier one is gone")


# ---- (5) the script's end, what it computes, other shapes of training


def test_script_end():
    runs = {}
    for c in ("exit", "raise", "amp", "plain", "parts", "ddp"):
        level = ["--level", "step"] if c == "exit" else []
        runs[c] = start(level + ["-o", p("%s.dtr" % c), "--", "python", CASES, "--case", c])
    r = runs["exit"].result()
    js = show_json(p("exit.dtr"))
    C.ok(r.rc == 3 and js["end_status"] == 1 and len(js["steps"]) == 3
         and [e["text"] for e in js["events"]] == ["the script exited with status 3"],
         "sys.exit(3): exit 3, the trace ended early with it, 3 steps", "%s %s" % (r, js["events"]))
    r = runs["raise"].result()
    js = show_json(p("raise.dtr"))
    tb = r.err[r.err.find("Traceback"):]
    C.ok(r.rc == 1 and tb.startswith("Traceback (most recent call last):\n  File \"%s\", line" % CASES)
         and "RuntimeError: loss diverged at step 2\n" in tb and "_run.py" not in tb and "runpy" not in tb,
         "an exception: exit 1, the traceback as python prints it", str(r))
    C.ok(js["end_status"] == 1 and len(js["steps"]) == 3
         and [e["text"] for e in js["events"]] == ["RuntimeError: loss diverged at step 2"],
         "an exception: the trace ended early with its text", str(js["events"]))
    for c in ("amp", "plain", "ddp"):
        r = runs[c].result()
        js = show_json(p("%s.dtr" % c)) if r.rc == 0 else {"steps": []}
        C.ok(r.rc == 0 and losses(js) == printed_losses(r.out) and len(js["steps"]) == 6,
             "%s: 6 steps, each step's loss as the script printed it%s" % (
                 c, " (unscaled by the GradScaler)" if c == "amp" else ""), str(r))
    C.ok(not any(n.endswith("loss") for n in forward_ops(show_json(p("plain.dtr")))),
         "a functional loss (F.mse_loss) is no record")
    cfg = show_json(p("ddp.dtr"))["config"]
    C.ok(cfg.get("model") == "DistributedDataParallel" and cfg.get("rank") == "0"
         and cfg.get("world_size") == "1", "DistributedDataParallel: the wrapper is the model; the rank's keys",
         str(cfg))
    r = runs["parts"].result()
    C.ok(r.rc == 0 and show_json(p("parts.dtr"))["config"].get("model") == "Net",
         "a model whose parts the loop calls one by one: the module holding them", str(r))


def test_evaluation():
    """The model run with gradients on outside training: the recorder's
    error, met inside its own hooks (the core's), stops the recording
    when training goes on, and only makes a note when it does not."""
    end = start(["-o", p("eval-end.dtr"), "--", "python", CASES, "--case", "eval-end"])
    between = start(["-o", p("eval-between.dtr"), "--", "python", CASES, "--case", "eval-between"])
    r = end.result()
    js = show_json(p("eval-end.dtr"))
    C.ok(r.rc == 0 and js["end_status"] == 0 and len(js["steps"]) == 6 and len(r.lines) == 2
         and r.lines[0].startswith("divtrace run: note: the model's forward at %s:" % CASES),
         "an evaluation with gradients on after the last step: a note, a complete trace, exit 0", str(r))
    check_refusal("eval-between", 3, "such as an evaluation, counts in the step it falls in", between.result())


# ---- (6) the divtrace program


def test_program():
    r = subprocess.run([DT, "run", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    C.ok(r.returncode == 0 and r.stdout == _run.USAGE, "divtrace run --help: the Python side's text, word for word",
         r.stdout[:300])
    with open(os.path.join(TOP, "man", "divtrace-run.1"), encoding="utf-8") as f:
        man = f.read().replace("\\-", "-")
    missing = [o for o in sorted(set(re.findall(r"--[a-z][a-z0-9-]*[a-z0-9]", _run.USAGE)))
               if not re.search(re.escape(o) + r"([^a-z0-9-]|$)", man)]
    C.ok(not missing, "every option of --help is in divtrace-run(1)", str(missing))
    r = subprocess.run([DT, "run", "-V"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    C.ok(r.returncode == 0 and r.stdout.startswith("divtrace "), "divtrace run -V", r.stdout)
    r = subprocess.run([DT, "run", "-o", p("x.dtr"), "--", MLP_SCRIPT], env=dict(os.environ,
                       DIVTRACE_PYTHON=os.path.join(T, "no-python")), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    C.ok(r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "cannot run" in r.stderr,
         "no Python: one line, exit 2", r.stderr)
    if os.path.exists(os.path.join(os.path.dirname(DT), ".libs", "libdivtrace.so")):
        # from a build tree, with neither PYTHONPATH nor DIVTRACE_LIB leading to them
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DIVTRACE_LIB")}
        env["DIVTRACE_PYTHON"] = PY
        r = subprocess.run([DT, "run", "-q", "-o", p("tree.dtr"), "--", MLP_SCRIPT, "--epochs", "1"], env=env,
                           cwd=T, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        C.ok(r.returncode == 0 and len(show_json(p("tree.dtr"))["steps"]) == 8,
             "from the build tree: the package and the library found beside the program",
             "exit %d %s" % (r.returncode, r.stderr[-500:]))
    else:
        print("skip - the program is not in a build tree (%s): finding the package beside it" % DT)


TESTS = (test_records, test_rerun, test_options, test_bad_options, test_refusals, test_script_end,
         test_evaluation, test_program)


def main(names):
    """Every test, or those named (cli_torch.sh runs the ones that depend on
    the adapter's core again with the other core)."""
    print("divtrace %s, python %s, adapter core %s" % (DT, PY, os.environ.get("DIVTRACE_ADAPTER_CORE", "any")))
    unknown = [n for n in names if n not in [t.__name__ for t in TESTS]]
    if unknown:
        print("test_run.py: no test %s" % ", ".join(unknown), file=sys.stderr)
        return 2
    try:
        return C.run([t for t in TESTS if not names or t.__name__ in names])
    finally:
        POOL.shutdown()


if __name__ == "__main__":
    rc = main(sys.argv[1:])
    if rc == 0:
        import shutil
        shutil.rmtree(T, ignore_errors=True)
    sys.exit(rc)
