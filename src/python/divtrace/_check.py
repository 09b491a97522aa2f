# _check.py: the data of oracle checks (divtrace-python(7), ORACLE CHECKS).
# At a check step, every recorded module's inputs, parameters and output,
# and every parameter's update with the optimizer's state before it, are
# copied to the host and written into the checkpoint that follows the step,
# under names check/STEP/RECORD/ROLE, with a spec (the module's type and
# hyperparameters, reference/modcheck.h) in the name of a one-element tensor
# check/STEP/RECORD/spec=SPEC. divtrace explain and replay read them back and
# hold each output to the exact oracle's bound (reference/modcheck*.c).
#
# A module defined outside torch (a custom module) cannot be held to an
# oracle; for it the adapter stores a float64 re-evaluation of its forward
# from the same inputs and parameters (ref64, rounded to float32), which
# explain compares across two runs, and a check of its backward against
# finite differences of its forward in float64 (spec keys grad= and
# grad_err=).
#
# What must stay true: nothing here changes a value the training computes
# (copies only; the float64 re-evaluations run on deep copies with the
# random number generators forked), and the names are the records' names.
import copy
import hashlib
import inspect
import math

import torch
from torch import nn

_F32 = torch.float32
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
# module classes whose outputs the oracle checks, by their spec's type
_ELEMENTWISE = {nn.ReLU: "relu", nn.Sigmoid: "sigmoid", nn.Tanh: "tanh", nn.Hardsigmoid: "hardsigmoid"}
GRAD_TOL = 1e-4     # relative disagreement of backward and finite differences that fails


def _num(x):
    """A number as the spec writes it: %.17g, so that a double comes back
    exactly."""
    if isinstance(x, torch.Tensor):
        x = x.item()
    return "%.17g" % float(x)


def _ints(v):
    if isinstance(v, str):
        return v
    if isinstance(v, int):
        return str(v)
    return ",".join(str(int(x)) for x in v)


def _tf32_matmul():
    return bool(torch.backends.cuda.matmul.allow_tf32) or torch.get_float32_matmul_precision() != "highest"


def is_custom(mod):
    """A module whose class is defined outside torch (the user's own)."""
    return not type(mod).__module__.startswith("torch.")


def module_spec(mod, ins, out):
    """The spec of a module call (reference/modcheck.h), or None for a
    container (its output is its last child's)."""
    if isinstance(mod, _CONTAINERS) or isinstance(mod, nn.parallel.DistributedDataParallel):
        return None
    gpu = isinstance(out, torch.Tensor) and out.is_cuda
    extra = []
    dt = [t.dtype for t in ins if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if isinstance(out, torch.Tensor):
        dt.append(out.dtype)
    low = next((d for d in dt if d != _F32 and d != torch.float64), None)
    if low is not None:
        extra.append("dtype=" + str(low).replace("torch.", ""))
    if gpu:
        extra.append("gpu=1")
    t = type(mod)
    if t is nn.Linear:
        s = "linear"
        if gpu and _tf32_matmul():
            extra.append("tf32=1")
    elif t in (nn.Conv1d, nn.Conv2d):
        s = "%s stride=%s padding=%s dilation=%s groups=%d padding_mode=%s" % (
            "conv1d" if t is nn.Conv1d else "conv2d", _ints(mod.stride), _ints(mod.padding),
            _ints(mod.dilation), mod.groups, mod.padding_mode)
        if gpu and torch.backends.cudnn.allow_tf32:
            extra.append("tf32=1")
    elif t in _ELEMENTWISE:
        s = _ELEMENTWISE[t]
    elif t is nn.GELU:
        s = "gelu approximate=%s" % mod.approximate
    elif t is nn.LayerNorm:
        s = "layernorm normalized=%s eps=%s" % (_ints(mod.normalized_shape), _num(mod.eps))
    elif t is nn.Softmax:
        x = ins[0] if ins and isinstance(ins[0], torch.Tensor) else None
        nd = x.dim() if x is not None else 2
        d = mod.dim
        if d is None:   # torch's rule for an implicit dim
            d = 0 if nd in (0, 1, 3) else 1
        s = "softmax dim=%d" % (d + nd if d < 0 else d)
    elif t is nn.CrossEntropyLoss:
        s = "crossentropyloss reduction=%s ignore_index=%d label_smoothing=%s" % (
            mod.reduction, mod.ignore_index, _num(mod.label_smoothing))
    elif t is nn.MSELoss:
        s = "mseloss reduction=%s" % mod.reduction
    elif is_custom(mod):
        s = "custom class=%s" % t.__name__
        try:
            src = inspect.getsource(t)
            s += " source=%s" % hashlib.sha256(src.encode()).hexdigest()[:16]
        except (OSError, TypeError):
            pass
    else:
        s = t.__name__.lower()
    return " ".join([s] + extra)


def optimizer_spec(opt, group, state, p):
    """The spec of one parameter's update (reference/modcheck.h): the type,
    the group's hyperparameters, and the state it had before the step."""
    name = type(opt).__name__
    if name == "SGD":
        mu = group.get("momentum", 0)
        first = mu != 0 and state.get("momentum_buffer") is None
        return "sgd lr=%s momentum=%s dampening=%s nesterov=%d weight_decay=%s maximize=%d first=%d" % (
            _num(group["lr"]), _num(mu), _num(group.get("dampening", 0)), bool(group.get("nesterov")),
            _num(group.get("weight_decay", 0)), bool(group.get("maximize")), first)
    if name in ("Adam", "AdamW"):
        kind = "adamw" if name == "AdamW" or group.get("decoupled_weight_decay") else "adam"
        step = state.get("step", 0)
        step = int(step.item() if isinstance(step, torch.Tensor) else step) + 1
        b1, b2 = group["betas"]
        return "%s lr=%s beta1=%s beta2=%s eps=%s weight_decay=%s amsgrad=%d maximize=%d step=%d" % (
            kind, _num(group["lr"]), _num(b1), _num(b2), _num(group["eps"]),
            _num(group.get("weight_decay", 0)), bool(group.get("amsgrad")), bool(group.get("maximize")),
            step)
    return name.lower()


def _host(t):
    """A float32 host copy of a tensor (integer class targets as their
    values, exact below 2^24)."""
    t = t.detach()
    if t.dtype != _F32:
        t = t.float()
    return t.to("cpu", copy=True).contiguous()


def _forked(fn):
    """fn() with the random number generators forked and seeded alike, so
    that every call draws the same numbers and the run's own are
    untouched."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(0x5eed)
        return fn()


def _float64_copy(mod):
    m = copy.deepcopy(mod)
    m.double()
    return m


def _call(m, params, args, kwargs):
    return torch.func.functional_call(m, params, args, kwargs)


def custom_checks(mod, args, kwargs, out):
    """For a custom module: its forward re-evaluated in float64 from the
    same inputs and parameters (a float32 tensor, or None), and its backward
    against finite differences of forward ("pass" or "fail", the largest
    relative disagreement; None when it cannot be checked)."""
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        return None, None, None
    m = _float64_copy(mod)
    d_args = tuple(a.detach().double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                   for a in args)
    d_kw = {k: (v.detach().double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
            for k, v in kwargs.items()}
    params = {k: v.detach().double() for k, v in m.named_parameters()}
    with torch.no_grad():
        ref = _forked(lambda: _call(m, params, d_args, d_kw))
    if not isinstance(ref, torch.Tensor):
        return None, None, None
    ref32 = _host(ref)
    # backward against central differences along random directions, over
    # the floating inputs and the parameters together
    leaves = [i for i, a in enumerate(d_args) if isinstance(a, torch.Tensor) and a.is_floating_point()]
    pnames = [k for k, v in params.items()]
    if not leaves and not pnames:
        return ref32, None, None
    gen = torch.Generator().manual_seed(7)

    def f(xs, ps):
        a = list(d_args)
        for i, x in zip(leaves, xs):
            a[i] = x
        return _forked(lambda: _call(m, dict(zip(pnames, ps)), tuple(a), d_kw))

    xs0 = [d_args[i] for i in leaves]
    ps0 = [params[k] for k in pnames]
    worst = []
    for _ in range(3):
        vx = [torch.randn(x.shape, generator=gen, dtype=torch.float64).to(x.device) for x in xs0]
        vp = [torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.device) for p in ps0]
        w = torch.randn(ref.shape, generator=gen, dtype=torch.float64).to(ref.device)
        xs = [x.clone().requires_grad_(True) for x in xs0]
        ps = [p.clone().requires_grad_(True) for p in ps0]
        y = f(xs, ps)
        gs = torch.autograd.grad(y, xs + ps, w, allow_unused=True)
        ad = sum(float((g * v).sum()) for g, v in zip(gs, vx + vp) if g is not None)
        scale = max([float(x.abs().max()) for x in xs0 + ps0 if x.numel()] + [1.0])
        h = 1e-6 * scale
        with torch.no_grad():
            up = f([x + h * v for x, v in zip(xs0, vx)], [p + h * v for p, v in zip(ps0, vp)])
            dn = f([x - h * v for x, v in zip(xs0, vx)], [p - h * v for p, v in zip(ps0, vp)])
        fd = float(((up - dn) * w).sum()) / (2 * h)
        den = max(abs(ad), abs(fd), 1e-300)
        worst.append(abs(ad - fd) / den)
    err = min(worst)    # a wrong backward disagrees along every direction; a kink, along few
    if math.isnan(err):
        return ref32, None, None
    return ref32, ("fail" if err > GRAD_TOL else "pass"), err


class CheckCapture:
    """The checks of one step: hooks on the recorded modules and the
    optimizer while the step runs, and the tensors to write after it."""

    def __init__(self, rec, step, modules, optimizer, budget):
        self.rec, self.step = rec, step
        self.modules = modules          # (record name, module)
        self.optimizer = optimizer
        self.budget = budget
        self.used = 0
        self.items = []                 # (name, host tensor)
        self._hooks = []
        self._calls = {}
        self._pending = {}              # id(module) -> stack of stored inputs
        self._inside = 0                # inside a float64 re-evaluation: hooks do nothing

    def install(self):
        for name, mod in self.modules:
            self._hooks.append(mod.register_forward_pre_hook(self._pre(name, mod), with_kwargs=True))
            self._hooks.append(mod.register_forward_hook(self._post(name, mod), with_kwargs=True))
        if self.optimizer is not None:
            self._hooks.append(self.optimizer.register_step_pre_hook(self._opt_pre))
        return self

    def remove(self):
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def _prefix(self, rname):
        return "check/%d/%s/" % (self.step, rname)

    def _spec(self, rname, spec):
        self.items.append((self._prefix(rname) + "spec=" + spec, torch.zeros(1)))

    def _store(self, rname, role, t):
        self.items.append((self._prefix(rname) + role, t))

    def _fits(self, ts):
        n = sum(t.numel() * 4 for t in ts if isinstance(t, torch.Tensor))
        if self.used + n > self.budget:
            return False
        self.used += n
        return True

    def _pre(self, name, mod):
        def pre(module, args, kwargs):
            if self._inside or not self._active():
                return None
            # inputs copied before forward: an in-place op inside may change them
            self._pending.setdefault(id(module), []).append(
                [(_host(a) if isinstance(a, torch.Tensor) else None) for a in args])
            return None
        return pre

    def _post(self, name, mod):
        def post(module, args, kwargs, out):
            if self._inside or not self._active():
                return None
            stack = self._pending.get(id(module))
            ins = stack.pop() if stack else []
            k = self._calls.get(name, 0)
            self._calls[name] = k + 1
            rname = name if k == 0 else "%s.%d" % (name, k)
            self._module(rname, module, args, kwargs, ins, out)
            return None
        return post

    def _active(self):
        # not st.in_step: the root's pre-hook runs before the recorder
        # begins the step in the root's forward
        st = self.rec._st
        return not st.paused and (st.record_no_grad or torch.is_grad_enabled())

    def _module(self, rname, mod, args, kwargs, ins, out):
        spec = module_spec(mod, args, out)
        if spec is None:
            return
        if not isinstance(out, torch.Tensor):
            self._spec(rname, spec + " output=" + type(out).__name__)
            return
        custom = spec.startswith("custom")
        params = [(n, p) for n, p in mod.named_parameters(recurse=False)]
        if isinstance(mod, nn.CrossEntropyLoss) and mod.weight is not None:
            params.append(("weight", mod.weight))
        tensors = [t for t in ins if t is not None] + [p for _, p in params] + [out]
        if not self._fits(tensors + ([out] if custom else [])):
            self._spec(rname, spec + " skipped=budget")
            return
        if kwargs and any(isinstance(v, torch.Tensor) for v in kwargs.values()):
            spec += " kwargs=1"
        if custom:
            self._inside += 1
            try:
                with self.rec.paused():
                    ref, verdict, err = custom_checks(mod, args, kwargs, out)
            except Exception as e:     # a module the float64 copy cannot run
                ref, verdict, err = None, None, None
                spec += " ref=failed:%s" % type(e).__name__
            finally:
                self._inside -= 1
            if verdict is not None:
                spec += " grad=%s grad_err=%s" % (verdict, _num(err))
            if ref is not None:
                self._store(rname, "ref64", ref)
        self._spec(rname, spec)
        for i, t in enumerate(ins):
            if t is not None:
                self._store(rname, "in.%d" % i, t)
        for n, p in params:
            self._store(rname, "param." + n, _host(p))
        self._store(rname, "out", _host(out))

    def _opt_pre(self, optimizer, args, kwargs):
        if not self._active():
            return
        rec = self.rec
        for g in optimizer.param_groups:
            for p in g["params"]:
                if p.grad is None or id(p) not in rec._pname:
                    continue
                pname = rec._pname[id(p)]
                state = optimizer.state.get(p, {})
                spec = optimizer_spec(optimizer, g, state, p)
                if p.is_cuda:
                    spec += " gpu=1"     # CUDA's fused and capturable forms: b^t from a float32 beta
                rname = pname + ".update"
                ts = [p, p.grad] + [v for v in state.values() if isinstance(v, torch.Tensor)]
                if spec.split()[0] not in ("sgd", "adam", "adamw"):
                    self._spec(rname, spec)
                    continue
                if not self._fits(ts):
                    self._spec(rname, spec + " skipped=budget")
                    continue
                self._spec(rname, spec)
                self._store(rname, "param", _host(p))
                self._store(rname, "grad", _host(p.grad))
                if spec.startswith("sgd"):
                    buf = state.get("momentum_buffer")
                    if buf is not None:
                        self._store(rname, "state.momentum_buffer", _host(buf))
                else:
                    for key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
                        v = state.get(key)
                        if v is None and key != "max_exp_avg_sq":
                            v = torch.zeros_like(p, dtype=_F32)
                        elif v is None and g.get("amsgrad"):
                            v = torch.zeros_like(p, dtype=_F32)
                        if v is not None:
                            self._store(rname, "state." + key, _host(v))
