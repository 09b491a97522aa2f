# _shim.py: PyTorch's C shim for the C core's tensor queries. libtorch
# exports a stable set of C functions for AOTInductor's compiled models
# (aoti_torch_get_dtype, aoti_torch_get_sizes, aoti_torch_get_data_ptr, ...)
# that read a tensor's metadata for a few nanoseconds, where each Python
# query (t.dtype, t.shape, t.data_ptr(), ...) costs 0.1 to 0.2 us. The C
# core (src/python/fast_paths.c) calls them with a tensor's _cdata, its
# TensorImpl pointer, which is all an at::Tensor holds.
#
# Nothing here is trusted blind: Core.use_shim takes the functions only if
# their answers for a set of sample tensors (contiguous, transposed, offset,
# empty, scalar, float64, sparse, a Parameter; a CUDA tensor when the model
# is on a GPU) are the Python queries' answers, and the core still asks
# Python for any tensor whose type is not torch.Tensor's or Parameter's own,
# or when a shim call reports an error. DIVTRACE_ADAPTER_SHIM=0 turns it off.
import ctypes
import os

import torch
from torch import nn

QUERIES = ("aoti_torch_get_dtype", "aoti_torch_get_layout", "aoti_torch_get_device_type",
           "aoti_torch_get_device_index", "aoti_torch_is_contiguous", "aoti_torch_get_dim",
           "aoti_torch_get_sizes", "aoti_torch_get_data_ptr")
CONSTANTS = ("aoti_torch_dtype_float32", "aoti_torch_layout_strided", "aoti_torch_device_type_cpu",
             "aoti_torch_device_type_cuda")
STREAM = "aoti_torch_get_current_cuda_stream"

why = None  # why the shim is not used, when it is not


def _loaded(name):
    """torch's library `name` if the process has it loaded already (never
    loads one), else None."""
    path = os.path.join(os.path.dirname(torch.__file__), "lib", name)
    try:
        return ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
    except OSError:
        return None


def _address(lib, name):
    try:
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    except AttributeError:
        return None


def _samples(device):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    out = [base, base.t(), base[1:, 2:], base[2], base[1:3].reshape(2, 3, 2), torch.zeros(0, 3),
           torch.tensor(2.5), base.double(), nn.Parameter(base.clone()), base.to_sparse(),
           base.reshape(2, 3, 2, 1, 2)]
    if device is not None:
        cuda = base.to(device)
        out += [cuda, cuda.t(), cuda[1:, 2:], nn.Parameter(cuda.clone())]
    return out


def functions():
    """(the QUERIES' addresses, the CONSTANTS' values), or None when this
    torch lacks them (why says why)."""
    global why
    cpu = _loaded("libtorch_cpu.so")
    if cpu is None:
        why = "libtorch_cpu.so is not loaded from %s" % os.path.dirname(torch.__file__)
        return None
    fns = [_address(cpu, n) for n in QUERIES + CONSTANTS]
    if None in fns:
        why = "libtorch_cpu.so has no %s" % ", ".join(n for n, f in zip(QUERIES + CONSTANTS, fns) if not f)
        return None
    consts = tuple(ctypes.CFUNCTYPE(ctypes.c_int32)(a)() for a in fns[len(QUERIES):])
    return tuple(fns[:len(QUERIES)]), consts


def enable(core, model):
    """Give the C core the shim if it agrees with the Python queries;
    returns whether it took it (why says why not)."""
    global why
    want = os.environ.get("DIVTRACE_ADAPTER_SHIM", "")
    if want not in ("", "0", "1"):
        raise ValueError("DIVTRACE_ADAPTER_SHIM=%s: expected 0 or 1" % want)
    got = functions() if want != "0" else None
    if got is None:
        if want == "0":
            why = "DIVTRACE_ADAPTER_SHIM=0"
        core.use_shim(None, None, None, ())
        return False
    # the CUDA stream function only where a CUDA tensor checks it: the
    # model's device, when it is a GPU
    device = next((p.device for p in model.parameters() if p.is_cuda), None)
    stream = None
    if device is not None:
        cuda = _loaded("libtorch_cuda.so")
        stream = _address(cuda, STREAM) if cuda is not None else None
    ok = core.use_shim(got[0], got[1], stream, _samples(device))
    why = None if ok else "its answers for the sample tensors are not the Python queries'"
    return ok
