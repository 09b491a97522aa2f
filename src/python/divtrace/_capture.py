# _capture.py: how the Recorder catches a module's work: the core and its
# forward wrapper type (divtrace._fast's, or _core.py's Python twins), the
# wrapper put in a module's __dict__ and taken out again, and the tensors of
# a module call's arguments and output.
import os

import torch

from . import _core, _lib

_TENSOR = torch.Tensor
# the raw cudaStream_t of a device's current stream, without building a
# torch.cuda.Stream: torch.cuda.current_stream(dev).cuda_stream, cheaper
raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
if raw_stream is None:
    def raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


_wrap_types = {}


def make_core():
    """The core and its forward wrapper type: divtrace._fast's when it loads
    (DIVTRACE_ADAPTER_CORE=python takes the Python ones; =c insists on C),
    else _core.PyCore and _core.PyWrap."""
    args = (torch.float32, torch.strided, torch.Tensor, raw_stream, torch.is_grad_enabled)
    want = os.environ.get("DIVTRACE_ADAPTER_CORE", "")
    if want not in ("", "c", "python"):
        raise ValueError("DIVTRACE_ADAPTER_CORE=%s: expected c or python" % want)
    fast = _lib.load_fast(required=want == "c") if want != "python" else None
    if fast is None:
        return _core.PyCore(*args), _core.PyWrap
    if fast not in _wrap_types:
        _wrap_types[fast] = _core.wrap_type(fast if hasattr(fast, "Wrap") else None)
    return fast.Core(*args), _wrap_types[fast]


class Wrapped:
    """A module whose forward the Recorder replaced by a wrapper (an entry
    "forward" in its __dict__); remove() puts back what was there, unless
    something else replaced the wrapper since."""

    def __init__(self, mod, w):
        d = mod.__dict__
        self.mod, self.w = mod, w
        self.had = "forward" in d
        self.prev = d.get("forward")
        d["forward"] = w

    def active(self):
        return self.mod.forward is self.w

    def remove(self):
        d = self.mod.__dict__
        if d.get("forward") is self.w:
            if self.had:
                d["forward"] = self.prev
            else:
                del d["forward"]


def plain(args):
    """Whether args is a tuple of plain tensors (no subclass, no nesting)."""
    for a in args:
        if type(a) is not _TENSOR:
            return False
    return True


def flatten(obj, prefix, out):
    """(suffix, tensor) pairs of a module's output: a tensor has the suffix
    "", the elements of a tuple or list ".0", ".1", ..., those of a dict
    ".KEY" (insertion order), nested as deep as they go."""
    if isinstance(obj, torch.Tensor):
        out.append((prefix, obj))
    elif isinstance(obj, (tuple, list)):
        for i, v in enumerate(obj):
            flatten(v, "%s.%d" % (prefix, i), out)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            flatten(v, "%s.%s" % (prefix, k), out)
    return out


def tensors(obj, out):
    """The tensors in a module's arguments, in order (nested sequences and
    dicts included)."""
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            tensors(v, out)
    elif isinstance(obj, dict):
        for v in obj.values():
            tensors(v, out)
    return out
