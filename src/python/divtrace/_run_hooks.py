# _run_hooks.py: the hooks of `divtrace run` (_run.py). _Run watches the
# script from before it starts: the optimizers and loss modules it makes,
# module calls until the model's first forward (which opens the trace),
# backward() and GradScaler, and every optimizer step (which ends a
# recorded step); _stop_on_errors turns the recorder's own errors into a
# stopped recording; _say writes the command's one-line messages.
#
# What must stay true (_run.py's opening comment): every hook only looks,
# and nothing here raises into the script; a run that cannot be recorded
# stops the recording, the trace closed incomplete with the reason, and
# the script goes on unrecorded.
import fnmatch
import os
import runpy
import shlex
import sys
import weakref

PROG = "divtrace run"


def _say(msg):
    sys.stderr.write("%s: %s\n" % (PROG, msg))
    sys.stderr.flush()


# ---- finding the places in the script


_HERE = os.path.abspath(__file__)
_SKIP = None


def _site():
    """file:line of the innermost frame of the script's own code (not
    torch's, this package's or the standard library's runpy)."""
    global _SKIP
    if _SKIP is None:
        import torch
        _SKIP = (os.path.dirname(_HERE) + os.sep, os.path.dirname(torch.__file__) + os.sep,
                 os.path.abspath(runpy.__file__))
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith("<") and not os.path.abspath(fn).startswith(_SKIP):
            return "%s:%d" % (fn, f.f_lineno)
        f = f.f_back
    return "(unknown place)"


WAITING, RECORDING, DONE = "waiting", "recording", "done"


class _ExitAfter(SystemExit):
    """--exit-after: the script ends here as sys.exit(0) would end it."""


class _Run:
    """One divtrace run: the hooks, the recorder and what they saw."""

    def __init__(self, o):
        self.o = o
        self.state = WAITING
        self.made = []          # (weakref to an optimizer, class name, where it was made)
        self.losses = []        # weakrefs to the loss modules made, in order
        self.init_depth = 0     # Optimizer.__init__ calls in progress
        self.depth = 0          # module calls in progress, before the model is found
        self.rec = self.model = self.opt = None
        self.opt_site = None
        self.path = None
        self.script_file = None  # absolute, and the working folder, as divtrace run started
        self.cwd = os.getcwd()
        self.loss = None        # the tensor backward() was last called on, unscaled
        self.backwards = 0      # backward() calls since the last optimizer step
        self.opt_steps = 0      # the recorded optimizer's steps
        self.scaled = {}        # id(scaled loss) -> (scaled loss, loss): GradScaler.scale's
        self.closure_at = None  # where an optimizer.step(closure) in progress was called
        self.calls = 0          # the model's calls this step, and in the first step
        self.first_calls = None
        self.call_site = None   # where the model was called, in the first step or past its count
        self.status = None      # 2 once recording was refused or failed
        self.pending = None     # an error met inside the recorder: the reason to close with
        self.suspended = None   # the same, met in a forward with no backward yet: (reason, where)
        self.undo = []          # what install() did, undone in reverse
        self.handles = []       # what only a recording needs, undone when it stops
        self.said_stop = False

    # ---- hooks

    def install(self):
        """Before the script: watch optimizers and loss modules being made,
        module calls (until the model's first forward), backward(),
        GradScaler and every optimizer's step."""
        import torch
        import torch.optim.optimizer as om
        from torch import nn
        from torch.nn.modules.loss import _Loss

        run = self
        opt_init, loss_init = om.Optimizer.__init__, _Loss.__init__

        def init(opt, *a, **k):
            run.init_depth += 1
            try:
                opt_init(opt, *a, **k)
            finally:
                run.init_depth -= 1
            if run.init_depth == 0:
                run.made.append((weakref.ref(opt), type(opt).__name__, _site()))

        def linit(mod, *a, **k):
            loss_init(mod, *a, **k)
            if run.state is WAITING:
                run.losses.append(weakref.ref(mod))

        init.__wrapped__, linit.__wrapped__ = opt_init, loss_init
        self._patch(om.Optimizer, "__init__", init)
        self._patch(_Loss, "__init__", linit)

        call = nn.Module.__call__
        grad_on = torch.is_grad_enabled

        def waiting_call(mod, *a, **k):
            if run.depth == 0 and run.state is WAITING and run.made and grad_on():
                run.consider(mod)
            run.depth += 1
            try:
                return call(mod, *a, **k)
            finally:
                run.depth -= 1

        self.undo_waiting = self._patch(nn.Module, "__call__", waiting_call)

        backward = torch.autograd.backward

        def backward_hook(tensors, *a, **k):
            if run.state is RECORDING:
                run.on_backward(tensors)
            return backward(tensors, *a, **k)

        backward_hook.__wrapped__ = backward
        self._patch(torch.autograd, "backward", backward_hook)

        scaler_type = getattr(torch.amp, "GradScaler", None) or torch.cuda.amp.GradScaler  # torch < 2.3
        scale, sstep = scaler_type.scale, scaler_type.step

        def scale_hook(scaler, outputs):
            out = scale(scaler, outputs)
            if run.state is RECORDING:
                run.note_scaled(outputs, out)
            return out

        def sstep_hook(scaler, optimizer, *a, **k):
            n = run.opt_steps
            r = sstep(scaler, optimizer, *a, **k)
            if run.state is RECORDING and optimizer is run.opt and run.opt_steps == n and run.backwards:
                run.refuse("step %d: GradScaler skipped optimizer.step() at %s (inf or NaN gradients); "
                           "divtrace run records only steps that update the parameters"
                           % (run.rec.steps, _site()))
            return r

        self._patch(scaler_type, "scale", scale_hook)
        self._patch(scaler_type, "step", sstep_hook)
        # global step hooks: the pre-hook runs before the recorder's (on the
        # optimizer), the post-hook after it; and a trace can be closed in
        # them (which takes the recorder's own hooks off the optimizer)
        pre = om.register_optimizer_step_pre_hook(lambda opt, args, kwargs: run.opt_pre(opt, args, kwargs))
        post = om.register_optimizer_step_post_hook(lambda opt, args, kwargs: run.opt_post(opt))
        self.undo += [pre.remove, post.remove]

    def _patch(self, owner, name, value):
        """owner.name = value until the returned function (or uninstall)
        puts back what was there."""
        had = name in owner.__dict__
        old = owner.__dict__.get(name)
        setattr(owner, name, value)

        def undo():
            if owner.__dict__.get(name) is value:
                if had:
                    setattr(owner, name, old)
                else:
                    delattr(owner, name)
        self.undo.append(undo)
        return undo

    def uninstall(self):
        self.stop_hooks()
        while self.undo:
            self.undo.pop()()

    def stop_hooks(self):
        for h in self.handles:
            h()
        self.handles = []

    # ---- the optimizer and the model

    def live(self):
        return [(r(), name, site) for r, name, site in self.made if r() is not None]

    def consider(self, mod):
        """A call of mod outside any module, with gradients on, once an
        optimizer exists: the model's first forward when mod holds the
        optimizer's parameters."""
        mine = {id(p) for p in mod.parameters()}

        def holding():
            return [(opt, name, site) for opt, name, site in self.live()
                    if any(id(p) in mine for g in opt.param_groups for p in g["params"])]
        found = holding()
        if not found:
            return
        if len(found) > 1:
            import gc
            gc.collect()    # one made and dropped is not a second optimizer
            found = holding()
        opt, name, site = found[0]
        self.start(self.model_for(mod, opt), opt, site)
        if self.closure_at is not None:
            self.refuse_closure()
        elif len(found) > 1:
            self.refuse("step 0: several optimizers update the model (%s): %s; divtrace run records one "
                        "optimizer" % (type(self.model).__name__,
                                       ", ".join("%s made at %s" % (n, s) for _, n, s in found)))

    def model_for(self, mod, opt):
        """The module to record: mod when it holds all of opt's parameters,
        else the smallest module that holds mod and all of them (a model
        whose parts the script calls one by one), else mod."""
        import gc
        from torch import nn
        want = {id(p) for g in opt.param_groups for p in g["params"]}
        have = {id(p) for p in mod.parameters()}
        if want <= have:
            return mod
        best, best_n = None, None
        for m in gc.get_objects():
            # type(), not isinstance(): a proxy's __class__ may warn or raise
            if issubclass(type(m), nn.Module) and m is not mod and any(s is mod for s in m.modules()):
                n = {id(p) for p in m.parameters()}
                if want <= n and (best is None or len(n) < best_n):
                    best, best_n = m, len(n)
        if best is not None:
            return best
        n = len(want - have)
        self.note("the optimizer also updates %d parameter%s outside the model (%s): not recorded"
                  % (n, "" if n == 1 else "s", type(mod).__name__))
        return mod

    def config(self):
        o = self.o
        cfg = {"run_argv": shlex.join(o.command), "run_cwd": self.cwd, "run_script": self.script_file}
        if o.shaping:
            cfg["run_options"] = shlex.join(o.shaping)
        try:
            from . import _dist
            cfg.update(_dist.config())
        except ImportError:
            pass
        cfg.update(o.config)
        return cfg

    def loss_modules(self, model):
        """(name, module) of the loss modules made so far outside the model,
        in the order they were made: the class name in lower case, with
        _1, _2, ... after the second, third of one class; those --modules
        selects."""
        inside = {id(m) for m in model.modules()}
        out, count = [], {}
        for r in self.losses:
            m = r()
            if m is None or id(m) in inside:
                continue
            cls = type(m).__name__.lower()
            k = count.get(cls, 0)
            count[cls] = k + 1
            name = cls if k == 0 else "%s_%d" % (cls, k)
            if self.o.modules is None or any(fnmatch.fnmatchcase(name, p) for p in self.o.modules):
                out.append((name, m))
        return out

    def start(self, model, opt, site):
        """Open the trace for model trained by opt, before model's forward
        (the call in progress) runs."""
        import divtrace
        from torch import nn
        o = self.o
        self.model, self.opt, self.opt_site = model, opt, site
        self.state = DONE       # until the trace is open
        self.undo_waiting()
        capture = o.capture
        if capture is None:
            capture = "hooks" if any(isinstance(m, nn.DataParallel) for m in model.modules()) else "wrap"
        path = o.output
        try:
            from . import _dist
            path = _dist.rank_path(path)
        except ImportError:
            pass
        self.path = path
        try:
            rec = divtrace.record(model, path, config=self.config(), optimizer=opt, level=o.level,
                                  checkpoint_every=o.checkpoint_every, capture=capture, modules=o.modules,
                                  check_steps=o.check_steps or (), check_bytes=o.check_bytes)
            if o.level == "op":
                for name, m in self.loss_modules(model):
                    rec.add_module(name, m)
        except (ValueError, TypeError, RuntimeError) as e:
            self.status = 2
            _say("cannot record the model %s: %s" % (type(model).__name__, e))
            return
        _stop_on_errors(rec, self)
        self.rec = rec
        try:
            rec.open()
        except divtrace.DivtraceError as e:
            self.status = 2
            _say("cannot write %s: %s" % (path, e))
            self.rec = None
            return
        self.state = RECORDING
        if rec.stopped is not None:
            self.fail_stop(rec.stopped)
            return
        h = model.register_forward_pre_hook(lambda m, args: self.model_pre(), prepend=True)
        self.handles.append(h.remove)

    # ---- steps

    def model_pre(self):
        import torch
        self.settle()
        if self.state is not RECORDING or not torch.is_grad_enabled():
            return
        if self.backwards:
            self.refuse("step %d: the model ran again at %s after backward() with no optimizer.step() "
                        "in between (gradient accumulation, or a skipped step); divtrace run records "
                        "one forward and backward per optimizer step" % (self.rec.steps, _site()))
            return
        self.calls += 1
        if self.first_calls is None or self.calls > self.first_calls:
            self.call_site = _site()

    def note_scaled(self, outputs, out):
        import torch
        if isinstance(outputs, torch.Tensor):
            self.scaled[id(out)] = (out, outputs)
        elif isinstance(outputs, (list, tuple)) and isinstance(out, (list, tuple)):
            for a, b in zip(outputs, out):
                if isinstance(a, torch.Tensor):
                    self.scaled[id(b)] = (b, a)

    def on_backward(self, tensors):
        import torch
        self.settle(training=True)
        if self.state is not RECORDING:
            return
        self.backwards += 1
        if self.backwards > 1:
            self.refuse("step %d: a second backward() at %s before optimizer.step() (gradient "
                        "accumulation); divtrace run records one backward per optimizer step"
                        % (self.rec.steps, _site()))
            return
        if isinstance(tensors, torch.Tensor):
            ts = [tensors]
        else:
            ts = [t for t in tensors if isinstance(t, torch.Tensor)] if isinstance(tensors, (list, tuple)) else []
        ts = [self.scaled[id(t)][1] if id(t) in self.scaled and self.scaled[id(t)][0] is t else t for t in ts]
        if len(ts) == 1 and ts[0].numel() == 1:
            self.loss = ts[0]
        else:
            # several tensors, or one of several elements (backward with a
            # gradient): their sum stands for the loss
            self.loss = sum(float(t.detach().float().sum()) for t in ts) if ts else float("nan")

    def opt_pre(self, opt, args, kwargs):
        self.settle(training=True)
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        if closure is not None:
            self.closure_at = _site()   # its closure may run the model's first forward
        if self.state is not RECORDING:
            return
        s = self.rec.steps
        if opt is not self.opt:
            made = next((" made at %s" % site for r, _, site in self.made if r() is opt), "")
            self.refuse("step %d: a second optimizer, %s%s, stepped at %s; divtrace run records one "
                        "optimizer (%s made at %s)" % (s, type(opt).__name__, made, _site(),
                                                       type(self.opt).__name__, self.opt_site))
            return
        if closure is not None:
            self.refuse_closure()
        elif not self.backwards:
            self.refuse("step %d: optimizer.step() at %s with no backward() since the step before; "
                        "divtrace run takes each step's loss from its backward()" % (s, _site()))

    def refuse_closure(self):
        self.refuse("step %d: optimizer.step(closure) at %s; divtrace run does not record a step "
                    "whose closure evaluates the model (LBFGS and the like)" % (self.rec.steps, self.closure_at))

    def opt_post(self, opt):
        self.closure_at = None
        if self.state is not RECORDING or opt is not self.opt:
            return
        import divtrace
        self.opt_steps += 1
        loss, self.loss = self.loss, None
        self.backwards = 0
        self.scaled.clear()
        if self.first_calls is None:
            self.first_calls = self.calls
        calls, self.calls = self.calls, 0
        try:
            self.rec.step(loss)
        except divtrace.DivtraceError as e:
            self.refuse(self.error_line(e, calls))
            return
        self.settle()
        if self.state is RECORDING and self.rec.stopped is not None:
            self.fail_stop(self.rec.stopped)
        if self.state is not RECORDING:
            return
        n = self.rec.steps
        if (self.o.steps and n >= self.o.steps) or (self.o.exit_after and n >= self.o.exit_after):
            self.finish(0, None)
        if self.o.exit_after and n >= self.o.exit_after and self.status is None:
            raise _ExitAfter(0)

    def error_line(self, e, calls):
        s = self.rec.steps
        line = "step %d: recording stopped: %s" % (s, e)
        if self.first_calls is not None and calls != self.first_calls and s > 0:
            line += (" (the model ran %d time%s in step 0 and %d in step %d: a forward with gradients on "
                     "outside training, %s, counts in the step it falls in; run it under torch.no_grad())"
                     % (self.first_calls, "" if self.first_calls == 1 else "s", calls, s,
                        "such as a shape check before the first step" if calls < self.first_calls
                        else "such as an evaluation"))
        return line

    # ---- stopping

    def note(self, msg):
        if not self.o.quiet:
            _say("note: " + msg)

    def refuse(self, msg):
        """Stop recording: msg on stderr, the trace closed incomplete with it
        as the reason; the script goes on. Only where closing is safe (not
        inside the recorder's own hooks: see stop_later)."""
        if self.state is not RECORDING:
            return
        _say(msg)
        self.status = 2
        self.close(2, msg)

    def close(self, status, why):
        import divtrace
        self.state = DONE
        self.stop_hooks()
        rec = self.rec
        rec.paused().__enter__()    # a wrapper already called does nothing now
        try:
            rec.close(status, why)
        except divtrace.DivtraceError as e:
            if self.status != 2:
                _say("%s: %s" % (self.path, e))
            self.status = 2

    def finish(self, status, why):
        """A clean end (status 0), or the script's failure (1)."""
        if self.state is not RECORDING:
            return
        self.close(status, why)
        if self.rec.stopped is not None:
            self.fail_stop(self.rec.stopped)

    def fail_stop(self, err):
        """A fault stopped the recording (the recorder's DivtraceWarning is
        filtered out: this line says it)."""
        if self.said_stop:
            return
        self.said_stop = True
        _say("step %d: recording to %s stopped, the script went on unrecorded: %s"
             % (self.rec.steps, self.path, err))
        self.status = 2
        if self.state is RECORDING:
            self.close(2, str(err))

    def stop_later(self, err):
        """An error met inside the recorder's hooks, where the trace cannot
        be closed (their hook lists are being walked): the recorder paused
        now, the trace closed at the next of our hooks. One met in a forward
        before the step's backward() (the model run with gradients on after
        the last step, an evaluation say) stops the recording only if
        training goes on: at the script's end the trace is closed clean."""
        if self.pending is not None or self.suspended is not None or self.state is not RECORDING:
            return
        line = self.error_line(err, self.calls)
        if self.backwards:
            self.pending = line
        else:
            self.suspended = (line, self.call_site or _site())
        self.rec.paused().__enter__()

    def settle(self, training=False):
        """Close the trace for an error stop_later met, now that it is safe;
        training: a backward() or an optimizer step is starting."""
        if self.state is not RECORDING:
            return
        if self.pending is not None:
            msg, self.pending = self.pending, None
            self.refuse(msg)
        elif training and self.suspended is not None:
            self.refuse(self.suspended[0])


def _stop_on_errors(rec, run):
    """Every error of the recorder stops the recording instead of reaching
    the script. A fault stops it already (rec.stopped); a program error (a
    step whose records differ from the first step's, a tensor changed in
    place before its hash) would be raised into the script's training loop
    from the recorder's hooks: its two reporting methods are wrapped on
    this instance."""
    import divtrace
    fail, flush_failed = rec._fail, rec._flush_failed

    def _fail(rc, opening=False):
        try:
            return fail(rc, opening)
        except divtrace.DivtraceError as e:
            run.stop_later(e)
            return True

    def _flush_failed(r):
        try:
            return flush_failed(r)
        except divtrace.DivtraceError as e:
            run.stop_later(e)
            return True

    rec._fail, rec._flush_failed = _fail, _flush_failed
