# _record.py: divtrace.record(), a PyTorch training run written as a divtrace
# trace through libdivtrace: every module's output from a wrapper around its
# forward (or, with capture="hooks", its forward hook), optimizer step hooks
# for gradients and updated parameters, checkpoints.
#
# What must stay true: every step records the same names in the same order
# (the library checks it), so names depend only on the model's structure and
# the order of calls, never on values, ids or timing.
#
# Deferred records (defer=True): after the first step, a tensor's record is
# not made when it is recorded but with the others at the next flush point
# (the optimizer's pre-hook, after the gradients; its post-hook, after the
# updates; the step's end): a GPU
# tensor's hash in one batch of kernels, a host tensor's in one library
# call. That is only right if the tensor is unchanged until then, which
# PyTorch's version counters tell: the first step records every tensor at
# once and notes which ones changed in place before their flush point (the
# output of a layer followed by an in-place ReLU, say); those are recorded
# at once in every step, the others deferred, and at each flush point every
# deferred tensor's version is checked again.
#
# After the first step a deferred record makes no library call of its own:
# its data pointer goes into an array by record slot, and the run of
# deferred records since the last call goes to the library in one
# divtrace_record_many call (with the first step's names and shapes) at the
# next flush point or before the next record that is not deferred. The
# parameters at the step's start, their gradients and their updates are
# checked as groups. Anything unlike the first step's (a name, a type, a
# shape, a dtype) takes the one-call-a-record path, so the library still
# reports a step that differs from the first.
#
# The per-step state and the paths every step after the first takes live in
# a core (_core.py): the C extension divtrace._fast (src/python/fast*.c) when
# it loads, else its Python twin, with the same calls in the same order; the
# Recorder keeps the first step, the general path and the names.
import ctypes
import fnmatch
import os
import sys
import warnings

import torch
from torch import nn

from . import _capture, _check, _lib, _shim
from ._capture import Wrapped, flatten, make_core, plain, tensors
from ._lib import DivtraceError, FORWARD, GRAD, INPUT, OPTIMIZER, PARAM

__all__ = ["record", "Recorder"]

LEVELS = ("op", "param", "step")
CAPTURES = ("wrap", "hooks")  # how module outputs are caught: forward wrappers or forward hooks
ROOT_NAME = "model"

_F32 = torch.float32
_grad_on = torch.is_grad_enabled
_VOIDP = ctypes.c_void_p
_HOST, _DEVICE = _lib.HOST, _lib.DEVICE
_TENSOR_SIZE = ctypes.sizeof(_lib.Tensor)
_raw_stream = _capture.raw_stream
_PARAM, _GRAD, _UPDATE = 0, 1, 2  # the core's groups
_INSIDE = (os.path.dirname(os.path.abspath(__file__)) + os.sep, os.path.dirname(torch.__file__) + os.sep)


def _shape(t):
    """The record shape: 1 to 4 dimensions; a scalar is (1,), dimensions past
    the fourth are folded into the fourth."""
    s = tuple(t.shape)
    if not s:
        return (1,)
    if len(s) > 4:
        n = 1
        for d in s[3:]:
            n *= d
        s = s[:3] + (n,)
    return s


def _dist_config():
    """The header keys of a torch.distributed job (divtrace._dist), or {}."""
    try:
        from . import _dist
    except ImportError:
        return {}
    return _dist.config()


def _config_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (tuple, list)):
        return ",".join(_config_value(x) for x in v)
    return str(v)


class Recorder:
    """A training run being written to a trace; made by :func:`record`."""

    def __init__(self, model, path, config=None, optimizer=None, level="op", checkpoint_every=0,
                 record_no_grad=False, defer=True, capture="wrap", strict=False, modules=None,
                 check_steps=(), check_bytes=64 << 20):
        if level not in LEVELS:
            raise ValueError("level %r: expected one of %s" % (level, ", ".join(LEVELS)))
        if capture not in CAPTURES:
            raise ValueError("capture %r: expected one of %s" % (capture, ", ".join(CAPTURES)))
        if capture == "wrap" and level == "op" and any(isinstance(m, nn.DataParallel) for m in model.modules()):
            raise ValueError("capture='wrap' cannot record a model with nn.DataParallel in it (its "
                             "replicas would call the wrapped module's forward); use capture='hooks'")
        if checkpoint_every < 0:
            raise ValueError("checkpoint_every must be >= 0")
        if isinstance(modules, str):
            modules = [m for m in modules.split(",") if m]
        self._patterns = list(modules) if modules else None
        self._check_steps = frozenset(int(s) for s in check_steps)
        if any(s < 0 for s in self._check_steps):
            raise ValueError("check_steps must be >= 0")
        if check_steps and level != "op":
            raise ValueError("check_steps needs level='op' (module outputs are what is checked)")
        self.check_bytes = int(check_bytes)
        self._check = None          # the CheckCapture of the step running, if it is a check step
        self._extra = []            # (name, module) added with add_module
        self.model = model
        self.path = str(path)
        self.optimizer = optimizer
        self.level = level
        self.checkpoint_every = int(checkpoint_every)
        self.defer = bool(defer)
        self.capture = capture
        self.strict = bool(strict)
        self.stopped = None         # the DivtraceError of the fault that stopped the recording
        # per record slot, learnt in the first step: whether the tensor was
        # unchanged at its flush point (so may be deferred)
        self._deferrable = []
        self._user_config = dict(config or {})
        self._h = None
        self._closed = False
        self._hooks = []
        self._last_ckpt = -1
        # Record k of every step is the first step's record k (the library
        # checks it): _slots[k] = (name, type, kind, torch shape, encoded
        # name, ndim, ctypes shape) of the first step's, so that later steps
        # pass the same arguments without building them again.
        self._slots = []
        # After the first step the op list, inputs included, is fixed (the
        # library keeps the first step's and ignores later ones): later steps
        # only name and record, with no inputs.
        self._fixed = False
        # group -> (first slot, end, tensors) of the first step's run
        self._group_spans = {}
        # after the first step: divtrace_record_many's tensors and data
        # pointers by slot (ctypes arrays the core writes into)
        self._ts_all = None
        self._ptrs = None
        # the per-step state and the fast paths (_core.py)
        self._st, self._wrap_type = make_core()
        self._armed = False         # the C core's step paths on (after the first step)
        # what the hooks call: the C core's step paths (fast_step.c), which
        # take the usual case and call these methods for any other, or these
        self._fns = (self._root_pre_hook, self._opt_pre_hook, self._opt_post_hook)
        if self._st.kind == "c":
            _shim.enable(self._st, model)   # tensor queries through PyTorch's C shim
            self._fns = (self._st.root_pre, self._st.opt_pre, self._st.opt_post)
        self._st.record_no_grad = bool(record_no_grad)
        self._root_fresh = {}       # root call -> which of its tensor arguments are data

        # Static names. named_parameters() drops tied duplicates: a shared
        # parameter is recorded once, under its first name.
        self._params = list(model.named_parameters())
        self._pname = {id(p): n for n, p in self._params}
        self._pset = set(self._pname.values())
        in_opt = set()
        if optimizer is not None:
            for g in optimizer.param_groups:
                for p in g["params"]:
                    in_opt.add(id(p))
        self._in_opt = in_opt
        self._opt_type = type(optimizer).__name__.lower() if optimizer is not None else None
        self._owner = {}            # parameter name -> name of the module that holds it
        for mname, m in model.named_modules():
            for _, p in m.named_parameters(recurse=False):
                self._owner.setdefault(self._pname.get(id(p), ""), mname or ROOT_NAME)
        # the names each step reserves for the parameters, their gradients
        # and updates; (name, parameter, inputs) of the PARAM records, (name,
        # parameter, grad name) and (update name, name, parameter) of the
        # optimizer's parameters
        self._param_names = frozenset(n + sfx for n, _ in self._params
                                      for sfx in ("", ".grad", ".update"))
        self._param_recs = [(n, p, (n + ".update",) if id(p) in in_opt else ())
                            for n, p in self._params]
        self._param_tensors = [p for _, p in self._params]
        self._grad_recs = [(n, p, n + ".grad") for n, p in self._params]
        self._grad_params = tuple(p for _, p in self._params)
        self._update_recs = [(n + ".update", n, p) for n, p in self._params if id(p) in in_opt]
        self._update_tensors = [p for _, _, p in self._update_recs]
        self._opt_type_b = self._opt_type.encode() if self._opt_type is not None else None
        self._reset_step_state()

    @property
    def record_no_grad(self):
        """Whether forward passes without gradients are recorded (kept in
        the core, which the module hooks read)."""
        return self._st.record_no_grad

    @record_no_grad.setter
    def record_no_grad(self, on):
        self._st.record_no_grad = bool(on)

    @property
    def steps(self):
        """Steps ended so far (the next step's index)."""
        return self._st.steps

    @steps.setter
    def steps(self, n):
        self._st.steps = n

    @property
    def records_per_step(self):
        """Tensors recorded in the last step ended."""
        return self._st.last_nrec

    @property
    def deferred_per_step(self):
        """Of those, the ones deferred (hashed in a batch at a flush point)."""
        return self._st.last_ndef

    @property
    def core(self):
        """Which core records the steps after the first: "c" (the extension
        divtrace._fast) or "python"."""
        return self._st.kind

    # ---- opening and closing

    def _config(self):
        m, opt = self.model, self.optimizer
        dev = next((p.device for p in m.parameters()), torch.device("cpu"))
        cfg = {
            "model": type(m).__name__,
            "framework": "pytorch",
            "torch_version": torch.__version__,
            "backend": "torch-" + dev.type,
            "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "torch_threads": str(torch.get_num_threads()),
            "deterministic_algorithms": _config_value(torch.are_deterministic_algorithms_enabled()),
        }
        if dev.type == "cuda":
            cfg["cuda_version"] = str(torch.version.cuda)
            cfg["cudnn_version"] = str(torch.backends.cudnn.version())
            cfg["cudnn_deterministic"] = _config_value(torch.backends.cudnn.deterministic)
            cfg["cudnn_benchmark"] = _config_value(torch.backends.cudnn.benchmark)
            cfg["matmul_allow_tf32"] = _config_value(torch.backends.cuda.matmul.allow_tf32)
            cfg["cudnn_allow_tf32"] = _config_value(torch.backends.cudnn.allow_tf32)
        cfg["parameters"] = str(sum(p.numel() for _, p in self._params))
        if opt is not None:
            cfg["optimizer"] = type(opt).__name__
            g = opt.param_groups[0]
            for k in ("lr", "momentum", "betas", "eps", "weight_decay"):
                if k in g:
                    cfg[k] = _config_value(g[k])
        cfg["trace_level"] = self.level
        if self.level == "op":
            cfg["module_capture"] = self.capture
        cfg["deferred_records"] = _config_value(self.defer)
        cfg["checkpoint_every"] = str(self.checkpoint_every)
        if self._patterns:
            cfg["modules"] = ",".join(self._patterns)
        if self._check_steps:
            cfg["check_steps"] = ",".join(str(s) for s in sorted(self._check_steps))
            cfg["check_bytes"] = str(self.check_bytes)
        cfg["adapter"] = "divtrace-python"
        cfg["adapter_core"] = self._st.kind
        cfg["adapter_tensor_queries"] = ("python", "torch-c-shim", "torch-c-shim+cuda")[getattr(self._st, "shim", 0)]
        for k, v in _dist_config().items():   # a data-parallel job's rank, world size, job
            cfg[k] = _config_value(v)
        for k, v in self._user_config.items():
            cfg[str(k)] = _config_value(v)
        return cfg

    def open(self):
        lib = _lib.load()
        self._lib = lib
        items = []
        for k, v in self._config().items():
            items += [k, v]
        arr = (ctypes.c_char_p * (len(items) + 1))()
        arr[:len(items)] = [s.encode("utf-8") for s in items]
        arr[len(items)] = None
        h = ctypes.c_void_p()
        rc = lib.divtrace_open(ctypes.byref(h), self.path.encode("utf-8"), arr, self.level.encode())
        if rc < 0:
            self._fail(rc, opening=True)
            return self             # stopped: the with-block runs, nothing is recorded
        self._h = h
        self._rec_fn = lib.record_untyped
        self._install_hooks()
        if self._check_steps and self.level == "op":
            self._check_end()       # step 0's capture, if it is a check step
        return self

    def close(self, status=0, why=None):
        """Finish the trace: status 0 = the run completed, else it ended early
        (why: the reason). A clean close takes a last checkpoint when
        checkpoints were asked for. Safe to call twice."""
        if self._closed or self._h is None:
            return
        self._remove_hooks()
        if self._check is not None:
            self._check.remove()
            self._check = None
        err = None
        if status == 0 and not self._st.in_step and self.checkpoint_every and self.steps > 0 \
                and self._last_ckpt != self.steps and self.stopped is None:
            try:
                self._checkpoint(self.steps)
            except DivtraceError as e:
                err = e
        self._closed = True
        self._st.paused += 1        # a wrapper fetched before the close does nothing after it
        h, self._h = self._h, None
        rc = self._lib.divtrace_close(h, int(status), why.encode("utf-8", "replace") if why else None)
        self._reset_step_state()
        if err is not None:
            raise err
        if rc < 0:
            # the handle is freed: the message is the thread's last one
            self._fail(rc, opening=True)

    def _fail(self, rc, opening=False):
        """A library status: False when it is not an error. A fault (see
        _lib.FAULTS) stops the recording with one DivtraceWarning and returns
        True, the training going on; with strict=True, and for any other
        error, DivtraceError is raised. A stopped trace's later calls are
        quiet no-ops (True). opening: the status of divtrace_open or
        divtrace_close (the message is the thread's)."""
        if rc >= 0:
            return False
        if self.stopped is not None and not self.strict:
            return True
        err = _lib.error(rc, None if opening else self._h)
        if self.strict or rc not in _lib.FAULTS:
            raise err
        self.stopped = err
        self._st.paused += 1        # every hook a no-op from now on
        level, f = 1, sys._getframe(0)  # the warning at the program's line: past this package's and torch's
        while f is not None and f.f_code.co_filename.startswith(_INSIDE):
            f, level = f.f_back, level + 1
        warnings.warn(_lib.DivtraceWarning("divtrace: recording to %s stopped, the training goes on: %s"
                                           % (self.path, err)), stacklevel=level)
        return True

    def __enter__(self):
        if self._h is None:
            self.open()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close(0)
            return False
        try:
            text = "%s: %s" % (exc_type.__name__, exc) if str(exc) else exc_type.__name__
            self.close(1, text)
        except DivtraceError:
            pass  # the exception in flight is the one to report
        return False

    # ---- hooks

    def _install_hooks(self):
        """Level op: each module's output through its forward wrapper
        (capture="wrap": nn.Module's __call__ then takes its path without
        hooks, much the cheaper) or its forward hook; the root's step start
        and inputs before its forward (in its wrapper, or a forward
        pre-hook). A module whose forward cannot be replaced (a class
        attribute that is not a plain method, a scripted module) takes the
        hooks."""
        m, opt = self.model, self.optimizer
        root_pre, opt_pre, opt_post = self._fns
        if self._st.kind == "c":
            self._st.paths(self._fail, self._flush_failed, self._root_pre_hook,
                           self._begin_params, self._record_input, self._opt_pre_hook, self._opt_post_hook)
        if self.level == "op":
            for mname, mod in self.recorded_modules():
                own = tuple(self._pname[id(p)] for _, p in mod.named_parameters(recurse=False)
                            if id(p) in self._pname)
                hook = self._make_forward_hook(mname, type(mod).__name__.lower(), own)
                pre = root_pre if mod is m else None
                if self.capture == "wrap":
                    try:
                        w = Wrapped(mod, self._wrap_type(mod, mod.forward, hook, pre))
                    except (AttributeError, TypeError, RuntimeError):
                        w = None
                    if w is not None and w.active():
                        self._hooks.append(w)
                        continue
                    if w is not None:
                        w.remove()
                if pre is not None:
                    self._hooks.append(m.register_forward_pre_hook(pre, with_kwargs=True))
                self._hooks.append(mod.register_forward_hook(hook, with_kwargs=True))
            if not any(mod is m for _, mod in self.recorded_modules()):
                # the model itself is not recorded (modules=): its forward
                # still begins the step and records the inputs
                self._hooks.append(m.register_forward_pre_hook(root_pre, with_kwargs=True))
        if opt is not None and self.level != "step":
            self._hooks.append(opt.register_step_pre_hook(opt_pre))
            self._hooks.append(opt.register_step_post_hook(opt_post))

    def recorded_modules(self):
        """(record name, module) of every module recorded at level op: the
        model's (named as in named_modules(), the model itself as "model"),
        those modules= selects, then the ones added with add_module."""
        out = []
        for mname, mod in self.model.named_modules():
            name = mname or ROOT_NAME
            if self._patterns is None or any(fnmatch.fnmatchcase(name, p) for p in self._patterns):
                out.append((name, mod))
        return out + list(self._extra)

    def add_module(self, name, module):
        """Record module too, under name, though the model does not hold it
        (a loss module the training calls on the model's output). Before
        the first step only."""
        if self._fixed or self._st.in_step:
            raise RuntimeError("divtrace: add_module(%r) after the first step began" % name)
        if not isinstance(module, nn.Module):
            raise TypeError("add_module: %r is not a torch.nn.Module" % (module,))
        if any(n == name for n, _ in self.recorded_modules()):
            raise ValueError("add_module: a module is already recorded as %r" % name)
        self._extra.append((name, module))
        if self._h is not None and self.level == "op":
            hook = self._make_forward_hook(name, type(module).__name__.lower(), ())
            w = None
            if self.capture == "wrap":
                try:
                    w = Wrapped(module, self._wrap_type(module, module.forward, hook, None))
                except (AttributeError, TypeError, RuntimeError):
                    w = None
                if w is not None and not w.active():
                    w.remove()
                    w = None
            self._hooks.append(w if w is not None else module.register_forward_hook(hook, with_kwargs=True))
            if self._check is not None:
                self._check.remove()
                self._check_start(self._check.step)

    def _check_start(self, s):
        """Catch the data of step s's oracle checks while it runs."""
        opt = self.optimizer if self.level != "step" else None
        self._check = _check.CheckCapture(self, s, self.recorded_modules(), opt, self.check_bytes).install()

    def _check_end(self):
        """After a check step: its data into the checkpoint before the next
        step, with the parameters and the optimizer's state (the values
        after the step's update), then the next check step's capture."""
        c = self._check
        if c is not None and self.steps > c.step:
            c.remove()
            self._check = None
            if self.stopped is None:
                self._checkpoint(self.steps, c.items)
        if self._check is None and self.steps in self._check_steps and self.stopped is None:
            self._check_start(self.steps)

    def _remove_hooks(self):
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def _root_pre_hook(self, module, args, kwargs):
        st = self._st
        if st.paused or not (st.record_no_grad or _grad_on()):
            return None
        if not st.in_step:
            self._begin()
            if st.paused:
                return None         # stopped by a fault
        if not kwargs and plain(args):
            ts = args       # the usual call, model(x): what tensors() would list
        else:
            ts = tensors(kwargs, tensors(args, []))
        calls = st.calls
        k = calls.get("", 0)
        calls[""] = k + 1
        if self._fixed:
            fresh = [ts[i] for i in self._root_fresh.get(k, ()) if i < len(ts)]
        else:
            idx = [i for i, t in enumerate(ts) if id(t) not in self._by_id]
            self._root_fresh[k] = idx
            fresh = [ts[i] for i in idx]
        for i, t in enumerate(fresh):
            name = self._unique("input" if len(fresh) == 1 else "input.%d" % i)
            self._record(name, b"input", INPUT, t, ())
            if not self._fixed:
                self._track(t, name)
        return None

    def _make_forward_hook(self, mname, mtype, own_params):
        """The module's forward hook: the core's fast path for a deferred
        record the first step made at this place, else _forward."""
        mtype_b = mtype.encode()
        forward = self._forward

        def slow(module, args, kwargs, output):
            forward(mname, mtype_b, own_params, args, kwargs, output)

        return self._st.hook(slow, self._fail, mname, mtype_b)

    def _opt_pre_hook(self, optimizer, args, kwargs):
        st = self._st
        if st.paused:
            return
        if not st.in_step:
            self._begin()
        if self._fixed:
            # the usual step after the first: one group, one flush
            r = st.grads_flush(_GRAD, self._grad_params)
            if r == 1:
                return
            if r != 0:
                self._flush_failed(r)   # raises, or a fault stopped the recording
                return
        self._record_grads()
        self._flush_point(True)  # before the optimizer changes parameters in place

    def _opt_post_hook(self, optimizer, args, kwargs):
        st = self._st
        if st.paused:
            return
        if self._fixed and st.in_step:
            # the usual step after the first: one group, one flush
            r = st.group_flush(_UPDATE, self._update_tensors, self._update_tensors)
            if r == 1:
                return
            if r != 0:
                self._flush_failed(r)   # raises, or a fault stopped the recording
                return
        self._begin()
        t = self._opt_type_b
        record = self._record
        if self._fixed:
            if not self._group(_UPDATE, self._update_tensors, self._update_tensors):
                for uname, name, p in self._update_recs:
                    record(uname, t, OPTIMIZER, p, None)
        else:
            grads = self._grads
            k0 = self._st.nrec
            for uname, name, p in self._update_recs:
                ins = (name, name + ".grad") if name in grads else (name,)
                record(uname, t, OPTIMIZER, p, ins)
            self._group_spans[_UPDATE] = (k0, self._st.nrec, self._update_tensors)
        # A flush point: the updates' hashes are queued now, behind the
        # optimizer's kernels on their stream, so they run while the host
        # goes on to rec.step, and a change made between optimizer.step()
        # and rec.step comes after them.
        self._flush_point(True)

    # ---- steps

    def _reset_step_state(self):
        self._st.reset()        # names used, calls, tensors kept and watched, slot counters
        if self._fixed:
            return              # the rest is only written in the first step
        self._by_id = {}        # id(tensor) -> (tensor, name): recorded outputs, kept alive
        self._by_node = {}      # autograd node -> names of the recorded tensors it made
        self._memo = {}         # autograd node -> names of its nearest recorded ancestors
        self._mod_recs = {}     # module name -> names of its FORWARD records this step
        self._last_forward = None
        self._grads = set()

    def _begin(self):
        st = self._st
        if st.in_step:
            return
        if self._h is None:
            raise RuntimeError("divtrace: the trace %s is not open (use it inside its with-block)"
                               % self.path)
        s = self.steps
        if self.checkpoint_every and s % self.checkpoint_every == 0 and self._last_ckpt != s:
            self._checkpoint(s)
        if self._fail(self._lib.divtrace_step_begin(self._h, s)):
            return
        st.begun()
        st.in_step = True
        if self.level == "step":
            return
        st.used.update(self._param_names)
        self._begin_params()

    def _begin_params(self):
        """The parameters at the step's start (the step begun, their names
        reserved)."""
        st = self._st
        record = self._record
        if self._fixed:
            if not self._group(_PARAM, self._param_tensors, self._param_tensors):
                for name, p, ins in self._param_recs:
                    record(name, b"param", PARAM, p, None)
        else:
            k0 = st.nrec
            for name, p, ins in self._param_recs:
                record(name, b"param", PARAM, p, ins)
            self._group_spans[_PARAM] = (k0, st.nrec, self._param_tensors)

    def step(self, loss):
        """End the current step with its loss (a tensor or a number); call it
        once per training step, after optimizer.step()."""
        self._step(loss)
        if self._check_steps:
            self._check_end()

    def _step(self, loss):
        st = self._st
        if st.paused:
            if self.stopped is not None and st.in_step:
                st.in_step = False  # the step a fault cut short: its tensors let go
                self._reset_step_state()
            return
        if self._armed:
            r = st.end_step(loss)   # the usual step: the C core's path (fast_step.c)
            if r is not None:
                if r == 0 or (self._fail(r) if isinstance(r, int) else self._flush_failed(r)):
                    return
        if not st.in_step:
            self._begin()
            if self.stopped is not None:
                return
        if self.optimizer is None and self.level != "step":
            self._record_grads()
        if isinstance(loss, torch.Tensor):
            # one element, or an error; float32's own value (as .float() gives)
            loss = loss.item() if loss.dtype is _F32 else loss.detach().float().item()
        loss = float(loss)
        self._flush_point(False)  # divtrace_step_end flushes
        rc = self._lib.divtrace_step_end(self._h, loss)
        st.in_step = False
        st.last_nrec, st.last_ndef = st.nrec, st.ndef
        self._reset_step_state()
        if self._fail(rc):
            return
        if not self._fixed:
            self._make_fast()
        self._fixed = True
        self.steps += 1

    def paused(self):
        """A context manager: nothing run inside it is recorded (an evaluation
        pass between training steps, say)."""
        rec = self

        class _Paused:
            def __enter__(self_):
                rec._st.paused += 1
                return rec

            def __exit__(self_, *a):
                rec._st.paused -= 1
                return False
        return _Paused()

    # ---- records

    def _unique(self, name):
        """name, or name~1, name~2, ... if already taken in this step: the same
        every step, because the calls come in the same order."""
        used = self._st.used
        if name in used:
            i = 1
            while "%s~%d" % (name, i) in used:
                i += 1
            name = "%s~%d" % (name, i)
        used.add(name)
        return name

    def _track(self, t, name):
        self._by_id[id(t)] = (t, name)

    def _record(self, name, type_b, kind, t, inputs):
        """Record tensor t under name (inputs: a tuple of names in the first
        step, None after it). A host tensor is hashed before the call
        returns; a device tensor is kept alive until the step ends. This runs
        for every record of every step: after the first step it reuses the
        first step's encoded name and shape array of the same record."""
        st = self._st
        # a deferred record of the first step's kind (float32, strided,
        # contiguous; a tensor converted to that is tried again)
        rc = st.try_defer(name, type_b, kind, t) if st.deferring else 0
        if rc == 0 and (t.dtype is not _F32 or t.is_sparse or not t.is_contiguous()):
            if t.is_sparse:
                t = t.to_dense()
            if t.dtype != _F32:
                t = t.detach().float()
            if not t.is_contiguous():
                t = t.detach().contiguous()
            rc = st.try_defer(name, type_b, kind, t) if st.deferring else 0
        if rc:
            if rc < 0:
                self._fail(rc)
            return True
        k = st.nrec
        if k != st.pend0:
            self._push()  # the records before this one go first
        st.nrec = k + 1
        st.pend0 = k + 1
        if t.is_cuda:
            where = _DEVICE
            stream = _VOIDP(_raw_stream(t.get_device()))
            st.keep.append(t)
        else:
            if not t.is_cpu:
                t = t.detach().cpu()
            where = _HOST
            stream = None
        if self.defer and not self._fixed:
            st.watch.append((k, t, t._version))
        slots = self._slots
        s = slots[k] if k < len(slots) else None
        if self._fixed and s is not None and s[0] == name and s[1] == type_b and s[2] == kind \
                and s[3] == t.shape:
            rc = self._rec_fn(self._h, s[4], type_b, kind, _VOIDP(t.data_ptr()), where, stream,
                              s[5], s[6], None, 0)
        else:
            # the first step, or a record unlike the first step's (which the
            # library reports)
            shape = _shape(t)
            s = (name, type_b, kind, t.shape, name.encode("utf-8"), len(shape),
                 _lib.shape_array(shape))
            arr = _lib.strv(inputs) if inputs else None
            rc = self._rec_fn(self._h, s[4], type_b, kind, _VOIDP(t.data_ptr()), where, stream,
                              s[5], s[6], arr, len(inputs) if inputs else 0)
            if rc >= 0 and not self._fixed:
                if k < len(slots):
                    slots[k] = s
                else:
                    slots.append(s)
        if rc < 0:
            self._fail(rc)
        return True

    def _record_input(self, name, t):
        """The C core's root_pre: an input its fast path did not take."""
        return self._record(name, b"input", INPUT, t, None)

    def _flush_point(self, flush):
        """The deferred records so far must be hashed now (flush: queue them;
        else the library's next call does). In the first step: note which
        tensors are still unchanged. After it: check that none changed."""
        st = self._st
        if not self._fixed:
            watch = st.watch
            if not watch:
                return
            st.watch = []
            d = self._deferrable
            for k, t, v in watch:
                if len(d) <= k:
                    d.extend([False] * (k + 1 - len(d)))
                d[k] = t._version == v
            return
        r = st.flush_point(flush)
        if r is not None:
            self._flush_failed(r)

    def _flush_failed(self, r):
        """Raise the error a core reported: a negative status, or
        flush_point's (what, k); a fault stops the recording instead
        (True, see _fail)."""
        if isinstance(r, int):
            return self._fail(r)
        what, k = r
        if what == "lib":
            return self._fail(k)
        name = self._slots[k][0] if k < len(self._slots) else "#%d" % k
        raise DivtraceError(-1, "divtrace: step %d: '%s' was changed in place after it was "
                                "recorded, before its deferred hash ran (it was not in the "
                                "first step); record with defer=False" % (self.steps, name))

    def _push(self):
        """The deferred records buffered since the last library call, in one
        call."""
        self._fail(self._st.push())

    def _make_fast(self):
        """After the first step: divtrace_record_many's arguments for every
        slot, and each run of parameter, gradient or update records as a
        group, handed to the core."""
        slots = self._slots
        d = self._deferrable
        if len(d) < len(slots):
            d.extend([False] * (len(slots) - len(d)))
        ts = (_lib.Tensor * max(1, len(slots)))()
        for i, s in enumerate(slots):
            ts[i].name, ts[i].type, ts[i].kind, ts[i].ndim = s[4], s[1], s[2], s[5]
            ts[i].shape = ctypes.cast(s[6], ctypes.POINTER(ctypes.c_int64))
            ts[i].inputs, ts[i].ninputs = None, 0
        self._ts_all = ts
        self._ptrs = (_VOIDP * max(1, len(slots)))()
        st = self._st
        st.fix(self._h, self._lib.divtrace_record_many, self._lib.divtrace_flush,
               [s[:4] for s in slots], d[:len(slots)], ts, _TENSOR_SIZE, self._ptrs)
        st.deferring = self.defer
        for gid, (k0, k1, owners) in self._group_spans.items():
            n = k1 - k0
            if n <= 0 or k1 > len(slots) or len(owners) != n:
                continue
            st.add_group(gid, k0, [slots[k0 + i][3] for i in range(n)], owners, all(d[k0:k1]))
        if st.kind == "c":
            idx = tuple(self._root_fresh.get(0, ()))
            names = ("input",) if len(idx) == 1 else tuple("input.%d" % i for i in range(len(idx)))
            st.arm(self._lib.divtrace_step_begin, self._lib.divtrace_step_end,
                   self._lib.divtrace_step_end_async, self._param_tensors,
                   tuple(self._param_names), self._update_tensors, idx, names, self.checkpoint_every,
                   self.optimizer is not None or self.level == "step")
            self._armed = True

    def _group(self, gid, tensors, owners):
        """The core's group gid (recorded: True; False: take them one by
        one)."""
        rc = self._st.group(gid, tensors, owners)
        return self._fail(rc) or rc > 0

    def _record_grads(self):
        last = self._last_forward
        record = self._record
        if self._fixed:
            rc = self._st.grads(_GRAD, self._grad_params)
            if self._fail(rc) or rc > 0:
                return
            for name, p, gname in self._grad_recs:
                g = p.grad
                if g is None or not p.requires_grad:
                    continue
                record(gname, b"grad", GRAD, g, None)
            return
        k0 = self._st.nrec
        ps = []
        for name, p, gname in self._grad_recs:
            g = p.grad
            if g is None or not p.requires_grad:
                continue
            ps.append(p)
            ins = [name]
            for n in self._mod_recs.get(self._owner.get(name), ()):
                if n not in ins:
                    ins.append(n)
            if last is not None and last not in ins:
                ins.append(last)
            record(gname, b"grad", GRAD, g, tuple(ins))
            self._grads.add(name)
        self._group_spans[_GRAD] = (k0, self._st.nrec, ps)

    def _forward(self, mname, mtype_b, own_params, args, kwargs, output):
        outs = (("", output),) if isinstance(output, torch.Tensor) else flatten(output, "", [])
        if not outs:
            return
        if not self._st.in_step:
            self._begin()
        calls = self._st.calls
        k = calls.get(mname, 0)
        calls[mname] = k + 1
        base = mname if k == 0 else "%s.%d" % (mname, k)
        if self._fixed:
            for suffix, t in outs:
                self._record(self._unique(base + suffix), mtype_b, FORWARD, t, None)
            return
        ins = {}                # insertion-ordered set
        by_id = self._by_id
        # the recorded tensors passed in (data without autograd history too)
        for t in tensors(kwargs, tensors(args, [])):
            e = by_id.get(id(t))
            if e is not None and e[0] is t:
                ins[e[1]] = None
        # the recorded tensors the outputs were computed from, through
        # functional code between modules (autograd's graph)
        for _, t in outs:
            g = t.grad_fn
            if g is not None:
                ins.update(dict.fromkeys(self._sources(g)))
            else:
                e = by_id.get(id(t))
                if e is not None and e[0] is t:
                    ins[e[1]] = None
        # order: recorded tensors as found, then the module's own parameters in
        # its order, then parameters used from elsewhere
        pset = self._pset
        ins = tuple([n for n in ins if n not in pset] + list(own_params)
                    + [n for n in ins if n in pset and n not in own_params])
        names = self._mod_recs.setdefault(mname, [])
        made = {}
        for suffix, t in outs:
            name = self._unique(base + suffix)
            self._record(name, mtype_b, FORWARD, t, ins)
            self._track(t, name)
            names.append(name)
            self._last_forward = name
            if t.grad_fn is not None:
                made.setdefault(t.grad_fn, []).append(name)
        for g, ns in made.items():
            self._by_node[g] = tuple(ns)

    def _param_node_names(self, node):
        """For an AccumulateGrad node: the parameter's name, or ()."""
        v = getattr(node, "variable", None)
        n = self._pname.get(id(v)) if v is not None else None
        return (n,) if n is not None else ()

    def _sources(self, root):
        """The names of the nearest recorded tensors (and parameters) that
        autograd node root was computed from: a walk back through the graph
        that stops at recorded tensors, memoized for the step."""
        by_node, memo = self._by_node, self._memo
        r = by_node.get(root)
        if r is not None:
            return r
        r = memo.get(root)
        if r is not None:
            return r
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if node in memo:
                continue
            if not expanded:
                if hasattr(node, "variable"):
                    memo[node] = self._param_node_names(node)
                    continue
                stack.append((node, True))
                for nxt, _ in node.next_functions:
                    if nxt is not None and nxt not in by_node and nxt not in memo:
                        stack.append((nxt, False))
                continue
            acc = {}            # insertion-ordered set
            for nxt, _ in node.next_functions:
                if nxt is None:
                    continue
                r = by_node.get(nxt)
                if r is None:
                    r = memo.get(nxt, ())
                acc.update(dict.fromkeys(r))
            memo[node] = tuple(acc)
        return memo[root]

    # ---- checkpoints

    def _ckpt_add(self, name, t):
        t = t.detach()
        if t.dtype != torch.float32:
            t = t.float()
        if not t.is_contiguous():
            t = t.contiguous()
        where = _lib.HOST
        if t.is_cuda:
            where = _lib.DEVICE
        elif t.device.type != "cpu":
            t = t.cpu()
        shape = _shape(t)
        self._fail(self._lib.divtrace_checkpoint_add(self._h, name.encode("utf-8"), t.data_ptr(), where,
                                                     len(shape), _lib.shape_array(shape)))

    def _checkpoint(self, s, extra=()):
        """Parameters and optimizer state before step s, by the names the
        records use; optimizer state as PARAM.KEY (fc1.weight.exp_avg); then
        extra (name, host tensor) pairs: the data of oracle checks."""
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        lib, h = self._lib, self._h
        if self._fail(lib.divtrace_checkpoint_begin(h, s)):
            return
        for name, p in self._params:
            self._ckpt_add(name, p)
        if self.optimizer is not None:
            for name, p in self._params:
                st = self.optimizer.state.get(p)
                if not st:
                    continue
                for key in sorted(st):
                    v = st[key]
                    if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.dim() == 0):
                        self._ckpt_add("%s.%s" % (name, key), v)
        for name, t in extra:
            self._ckpt_add(name, t)
        self._fail(lib.divtrace_checkpoint_end(h))
        self._last_ckpt = s


def record(model, path, config=None, optimizer=None, level="op", checkpoint_every=0,
           record_no_grad=False, defer=True, capture="wrap", strict=False, modules=None,
           check_steps=(), check_bytes=64 << 20):
    """Record the training of model to the trace file path.

    Use it as ``with divtrace.record(model, "run.dtr", optimizer=opt) as rec:``
    and call ``rec.step(loss)`` after each ``optimizer.step()``. A fault
    (disk full, the path unwritable, the trace deleted, no memory, a CUDA
    error) stops the recording with one DivtraceWarning, the training going
    on; strict=True raises DivtraceError instead. See divtrace-python(7)."""
    return Recorder(model, path, config=config, optimizer=optimizer, level=level,
                    checkpoint_every=checkpoint_every, record_no_grad=record_no_grad, defer=defer,
                    capture=capture, strict=strict, modules=modules, check_steps=check_steps,
                    check_bytes=check_bytes)
