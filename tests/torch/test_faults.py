#!/usr/bin/env python3
# test_faults.py: the PyTorch adapter under faults (divtrace-python(7),
# FAULTS). A small MLP trains with Adam, recorded, under each fault: a path
# that cannot be created (/proc, /dev/full), the disk full in the middle of
# the run (RLIMIT_FSIZE with SIGXFSZ ignored, in a child process), the trace
# file deleted or its folder removed while it is written, allocations of the
# library failing (DIVTRACE_TEST_FAIL_ALLOC). Each time: the losses and the
# parameters are bit for bit those of the same training unrecorded; no
# exception reaches the loop; exactly one DivtraceWarning, and no line of
# the library's own on stderr; the trace (where one is left) a readable
# prefix of the run, never complete. With strict=True the fault is a
# DivtraceError instead. Run by tests/cli_torch.sh, once a core.
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import warnings

import torch

from torch_testlib import MLP, Checks, batches, divtrace, run_dt, tmpdir, train_step

STEPS = 8
C = Checks()
T = tmpdir()


def p(name):
    return os.path.join(T, name)


@contextlib.contextmanager
def stderr_fd(out):
    """What is written to file descriptor 2 (the library's own lines) into
    out[0]."""
    sys.stderr.flush()
    keep = os.dup(2)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(keep, 2)
            os.close(keep)
            f.seek(0)
            out[0] = f.read().decode("utf-8", "replace")


def loop(path, fault=None, **kw):
    """Train MLP on fixed batches, recorded to path (None: not recorded);
    fault(step) runs at each step's start. Returns (losses, parameters, the
    DivtraceWarnings' texts, the exception that ended the loop or None, the
    recorder, fd 2's text)."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = batches(STEPS)
    losses, exc, rec, err = [], None, None, [""]
    with warnings.catch_warnings(record=True) as caught, stderr_fd(err):
        warnings.simplefilter("always")
        try:
            ctx = contextlib.nullcontext() if path is None else \
                divtrace.record(model, path, optimizer=opt, checkpoint_every=2, config={"seed": 0}, **kw)
            with ctx as rec:
                for s in range(STEPS):
                    if fault is not None:
                        fault(s)
                    losses.append(train_step(model, opt, *data[s], rec).item())
        except Exception as e:  # what must not happen without strict
            exc = e
    texts = [str(w.message) for w in caught if issubclass(w.category, divtrace.DivtraceWarning)]
    params = [t.detach().clone() for t in model.parameters()]
    return losses, params, texts, exc, rec, err[0]


PLAIN = None


def same(losses, params):
    return losses == PLAIN[0] and len(params) == len(PLAIN[1]) and \
        all(torch.equal(a, b) for a, b in zip(params, PLAIN[1]))


def prefix(path, what):
    """The trace at path: readable, not complete, steps 0 .. n-1 with the
    run's losses. Returns n, or -1."""
    rc, out, err = run_dt("show", "--json", path)
    if not C.ok(rc == 0, "%s: the trace reads (divtrace show)" % what, err.strip()):
        return -1
    js = json.loads(out)
    steps = js["steps"]
    C.ok(not js["complete"], "%s: the trace is not complete" % what, js["note"])
    C.ok([s["step"] for s in steps] == list(range(len(steps))) and len(steps) < STEPS
         and all(s["loss"] == PLAIN[0][i] for i, s in enumerate(steps)),
         "%s: steps 0 .. %d of the run" % (what, len(steps) - 1), str([s["loss"] for s in steps]))
    return len(steps)


def faulted(r, what, text):
    """One fault, reported once as a DivtraceWarning naming text, the
    training unchanged."""
    losses, params, texts, exc, rec, err = r
    C.ok(exc is None, "%s: no exception reaches the training loop" % what, repr(exc))
    C.ok(same(losses, params), "%s: losses and parameters those of the unrecorded run" % what)
    C.ok(len(texts) == 1 and text in texts[0], "%s: one DivtraceWarning naming '%s'" % (what, text), str(texts))
    C.ok("libdivtrace:" not in err, "%s: no line of the library's own on stderr" % what, err)
    C.ok(rec is None or rec.stopped is not None, "%s: Recorder.stopped says why" % what)


# ---- the cases


def test_unwritable():
    for path in ("/proc/divtrace-faults.dtr", "/dev/full", os.path.join(T, "no", "such", "x.dtr")):
        if path == "/dev/full" and not os.access(path, os.W_OK):
            continue
        r = loop(path)
        faulted(r, "unwritable %s" % path, path)
        C.ok(r[4].stopped.status_name == "DIVTRACE_EIO", "unwritable %s: DIVTRACE_EIO" % path)
    r = loop("/proc/divtrace-faults.dtr", strict=True)
    C.ok(isinstance(r[3], divtrace.DivtraceError) and r[3].status_name == "DIVTRACE_EIO" and not r[2],
         "unwritable, strict: DivtraceError, no warning", repr(r[3]))


def test_deleted():
    path = p("deleted.dtr")

    def unlink(s):
        if s == 3:
            os.unlink(path)
    r = loop(path, unlink)
    faulted(r, "trace deleted", "was deleted")
    C.ok(not os.path.exists(path), "trace deleted: stays deleted")

    d = p("gone")
    os.mkdir(d)
    path2 = os.path.join(d, "run.dtr")

    def rmdir(s):
        if s == 5:
            os.unlink(path2)
            os.rmdir(d)
    r = loop(path2, rmdir)
    faulted(r, "folder removed", "was deleted")


def test_alloc():
    fired = 0
    for n in (1, 2, 9, 25, 60, 120, 200, 400, 100000):
        path = p("alloc-%d.dtr" % n)
        os.environ["DIVTRACE_TEST_FAIL_ALLOC"] = str(n)
        try:
            r = loop(path)
        finally:
            del os.environ["DIVTRACE_TEST_FAIL_ALLOC"]
        if not r[2] and r[3] is None:
            C.ok(same(r[0], r[1]) and r[4].stopped is None, "allocation %d: none failed, the run recorded" % n)
            continue
        fired += 1
        faulted(r, "allocation %d fails" % n, "out of memory")
        if os.path.exists(path):
            prefix(path, "allocation %d fails" % n)
    C.ok(fired >= 5, "failed allocations stopped %d runs" % fired)


def test_disk_full():
    """In a child: RLIMIT_FSIZE applies to every file the process writes."""
    for strict in (0, 1):
        path = p("full-%d.dtr" % strict)
        r = subprocess.run([sys.executable, __file__, "--disk-full", path, str(strict)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        what = "disk full%s" % (", strict" if strict else "")
        if not C.ok(r.returncode == 0, "%s: the child ran" % what, r.stderr[-2000:]):
            continue
        res = json.loads(r.stdout.strip().splitlines()[-1])
        if strict:
            C.ok(res["exc"] and "DIVTRACE_EIO" in res["exc"] and not res["warnings"],
                 "%s: DivtraceError (EIO), no warning" % what, str(res))
        else:
            C.ok(res["exc"] is None, "%s: no exception reaches the training loop" % what, str(res["exc"]))
            C.ok(res["same"], "%s: losses and parameters those of the unrecorded run" % what)
            C.ok(len(res["warnings"]) == 1 and "write failed" in res["warnings"][0],
                 "%s: one DivtraceWarning (write failed)" % what, str(res["warnings"]))
            C.ok("libdivtrace:" not in res["stderr"], "%s: no line of the library's own" % what, res["stderr"])
            n = prefix(path, what)
            C.ok(n >= 3, "%s: the steps before the limit kept" % what, str(n))


def disk_full_child(path, strict):
    global PLAIN
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over the limit a write fails with EFBIG
    PLAIN = loop(None)

    def limit(s):
        if s == 4:  # the file may grow no further: step 3 or 4's write fails
            size = os.path.getsize(path)
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    r = loop(path, limit, strict=bool(strict))
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    print(json.dumps({"same": same(r[0], r[1]), "warnings": r[2], "stderr": r[5],
                      "exc": None if r[3] is None else "%s %s" % (getattr(r[3], "status_name", ""), r[3])}))


def main():
    global PLAIN
    print("libdivtrace %s, adapter core %s" % (divtrace.library_path(), divtrace.record(MLP(), p("x.dtr")).core))
    torch.set_num_threads(1)
    PLAIN = loop(None)
    return C.run((test_unwritable, test_deleted, test_alloc, test_disk_full))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--disk-full":
        torch.set_num_threads(1)
        disk_full_child(sys.argv[2], int(sys.argv[3]))
        sys.exit(0)
    rc = main()
    if rc == 0:
        import shutil
        shutil.rmtree(T, ignore_errors=True)
    else:
        print("traces kept in %s" % T)
    sys.exit(rc)
