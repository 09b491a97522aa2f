#!/usr/bin/env python3
# torch_adapter_floor.py: how much of the PyTorch adapter's cost a step is
# its per-step Python glue, and what is left without it. Three copies of
# one torch_models.py configuration, built from the same weights and batch,
# take their steps in turn (the order rotated every step): untraced; traced
# by divtrace.record() as it is; and traced with the glue taken out: after
# the first step, the root pre-hook, the optimizer's two hooks and
# rec.step() replaced by the bare calls into the core and the library they
# come down to (step begin, the parameter group and the input; the
# gradients and a flush; the updates and a flush; loss.item(), the step's
# end and the core's reset). Everything the core and the library do is left
# as it is, and every one of those calls must report that it recorded (a
# call that fell back or failed stops the run), so both traced copies make
# the same records.
#
# The C core now takes those steps itself (src/python/fast_step.c: the
# adapter's column with the C core); the third column makes the same core
# and library calls from Python, so with the C core the difference is what
# its step paths save, and with the Python core what moving the glue into C
# could save.
# With DIVTRACE_LIB=.../libdivtrace_null.so (a library that records
# nothing) the last row is what PyTorch's hooks, the tensor queries and the
# core's bookkeeping cost on their own.
#
# Usage: python3 tests/bench/torch_adapter_floor.py [--steps N] [--warmup N]
#        [torch_models.py options, e.g. --config ae (the default), --device cpu]
# Only plain models qualify: a single tensor argument, an optimizer, no
# checkpoints (the script checks the first two).
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "src", "python"))

import torch_models as tm  # noqa: E402  (sets CUBLAS_WORKSPACE_CONFIG before torch)
import torch  # noqa: E402

import divtrace  # noqa: E402
from divtrace import _lib  # noqa: E402

_PARAM, _GRAD, _UPDATE = 0, 1, 2  # the core's groups (divtrace/_record.py)


def _need(ok, what):
    if not ok:
        raise RuntimeError("torch_adapter_floor.py: the bare path did not record: %s" % what)


def bare(rec):
    """Replace rec's per-step hooks by the core's and the library's calls
    alone, from the second step on (before rec.open(): the hooks are bound
    when it installs them)."""
    st = rec._st
    params, grads, updates = rec._param_tensors, rec._grad_params, rec._update_tensors
    names = rec._param_names
    root0, pre0, post0, step0 = rec._root_pre_hook, rec._opt_pre_hook, rec._opt_post_hook, rec.step

    def check(rc):
        if rc < 0:
            _lib.check(rc, rec._h)

    def root(module, args, kwargs):
        if not rec._fixed:
            return root0(module, args, kwargs)
        _need(len(args) == 1 and not kwargs and isinstance(args[0], torch.Tensor), "one tensor argument")
        check(rec._lib.divtrace_step_begin(rec._h, rec.steps))
        st.in_step = True
        st.used.update(names)
        _need(st.group(_PARAM, params, params) == 1, "the parameters")
        st.calls[""] = 1
        st.used.add("input")
        _need(st.try_defer("input", b"input", _lib.INPUT, args[0]) == 1, "the input")
        return None

    def pre(optimizer, args, kwargs):
        if not rec._fixed:
            return pre0(optimizer, args, kwargs)
        _need(st.grads(_GRAD, grads) == 1, "the gradients")
        _need(st.flush_point(True) is None, "the flush before the optimizer")

    def post(optimizer, args, kwargs):
        if not rec._fixed:
            return post0(optimizer, args, kwargs)
        _need(st.group(_UPDATE, updates, updates) == 1, "the updates")
        _need(st.flush_point(True) is None, "the flush after the optimizer")

    def step(loss):
        if not rec._fixed:
            return step0(loss)
        v = loss.item()
        _need(st.flush_point(False) is None, "the step's last run")
        check(rec._lib.divtrace_step_end(rec._h, v))
        st.in_step = False
        st.reset()
        rec.steps += 1

    rec._root_pre_hook, rec._opt_pre_hook, rec._opt_post_hook, rec.step = root, pre, post, step
    rec._fns = (root, pre, post)  # what the hooks call (else the C core's step paths)


def main(argv):
    steps, warmup = 300, 30
    for opt_name in ("--steps", "--warmup"):
        if opt_name in argv:
            k = argv.index(opt_name)
            v = int(argv[k + 1])
            del argv[k:k + 2]
            steps, warmup = (v, warmup) if opt_name == "--steps" else (steps, v)
    margs, cfgs = tm.parse_args(argv if "--config" in argv else ["--config", "ae"] + argv)
    device = torch.device(margs.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tm.set_arithmetic(not margs.no_fill_uninitialized)
    tmp = tempfile.mkdtemp(prefix="divtrace-floor-")
    print(tm.header(device, margs))
    print("divtrace %s (%s)" % (divtrace.__version__, divtrace.library_path()))
    print()
    print("Median ms per step over %d steps after %d warm-up steps, the three copies in turn; overhead: "
          "the median over the steps of a traced step's time over the untraced step's beside it." % (steps, warmup))
    print()
    print("| configuration | copy | core | ms | overhead |")
    print("| --- | --- | --- | ---: | ---: |")
    for cfg in cfgs:
        runs = []
        for variant in ("untraced", "adapter", "adapter without the per-step glue"):
            model, opt, data = tm.build(cfg, device, margs.seed, capturable=False)
            rec = None
            if variant != "untraced":
                rec = divtrace.record(model, os.path.join(tmp, "%s-%d.dtr" % (cfg["name"], len(runs))),
                                      optimizer=opt)
                if variant != "adapter":
                    bare(rec)
                rec.open()
            runs.append((variant, model, opt, data, rec, []))
        for i in range(warmup + steps):
            k = i % len(runs)
            for variant, model, opt, data, rec, times in runs[k:] + runs[:k]:
                t0 = time.perf_counter()
                loss = tm.train_step(model, opt, data)
                if rec is not None:
                    rec.step(loss)
                loss.item()
                if i >= warmup:
                    times.append(time.perf_counter() - t0)
        base = runs[0][5]
        for variant, model, opt, data, rec, times in runs:
            over = statistics.median([a / b for a, b in zip(times, base)]) - 1
            print("| %s | %s | %s | %.3f | %s |" % (tm.describe(cfg), variant, rec.core if rec else "",
                                                statistics.median(times) * 1e3,
                                                "%+.1f%%" % (100 * over) if rec else ""))
            if rec is not None:
                rec.close(0)
        tm.release(device)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
