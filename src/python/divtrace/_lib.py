# _lib.py: ctypes bindings of libdivtrace (src/divtrace.h, API version 1):
# finding the shared object, declaring the functions, and turning a negative
# status into a DivtraceError that carries divtrace_errmsg()'s text; which
# statuses are faults (what the library stops a trace for, and the
# Recorder warns of instead of raising).
import ctypes
import ctypes.util
import os

API_VERSION = 1

# enum divtrace_kind, the same values as the trace format's kinds
INPUT, PARAM, STATE, FORWARD, BACKWARD, GRAD, OPTIMIZER = range(7)
# enum divtrace_where
HOST, DEVICE, DEVICE_DEFERRED = 0, 1, 2

_STATUS_NAMES = {
    -1: "DIVTRACE_EINVAL", -2: "DIVTRACE_EIO", -3: "DIVTRACE_ENOMEM", -4: "DIVTRACE_ESTATE",
    -5: "DIVTRACE_EOPS", -6: "DIVTRACE_ENOCUDA", -7: "DIVTRACE_ECUDA",
}
# Faults: the trace file not written (disk full, unwritable, deleted), no
# memory, a CUDA call that failed, and device tensors with a library that
# has no CUDA: the environment's, not the program's. The rest (EINVAL,
# ESTATE, EOPS) are a program's mistakes.
FAULTS = frozenset((-2, -3, -7, -6))


class DivtraceError(RuntimeError):
    """A call into libdivtrace failed. ``status`` is the library's negative
    status code (see divtrace.h), ``str(err)`` divtrace_errmsg()'s line."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.status_name = _STATUS_NAMES.get(status, str(status))


class DivtraceWarning(RuntimeWarning):
    """A fault stopped the recording (see divtrace-python(7), FAULTS); the
    training goes on, the trace keeps the steps before it."""


class Tensor(ctypes.Structure):
    """struct divtrace_tensor: one tensor of divtrace_record_many."""
    _fields_ = [("name", ctypes.c_char_p), ("type", ctypes.c_char_p), ("kind", ctypes.c_int),
                ("ndim", ctypes.c_int), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("inputs", ctypes.POINTER(ctypes.c_char_p)), ("ninputs", ctypes.c_int)]


_lib = None
_lib_path = None

_HERE = os.path.dirname(os.path.abspath(__file__))
# Where pip's build (setup.py) puts the divtrace program, libdivtrace.so and
# the C core (_fast.so, which _fast_candidates finds as the library's
# neighbour): an installed package needs no environment variable.
BUNDLE = os.path.join(_HERE, "_bin")


def build_dirs():
    """The build trees next to the source tree that holds this package
    (src/python/divtrace): build/ as ./bootstrap makes it, then an in-tree
    build. In an installed package they do not exist."""
    top = os.path.normpath(os.path.join(_HERE, "..", "..", ".."))
    return [os.path.join(top, "build"), top]


def _candidates():
    """Where to look, in order: DIVTRACE_LIB, the library pip's build
    bundled, the build trees next to this source tree, and the system's
    library path."""
    env = os.environ.get("DIVTRACE_LIB")
    if env:
        return [env], True
    out = [os.path.join(BUNDLE, "libdivtrace.so")]
    out += [os.path.join(b, "src", ".libs", "libdivtrace.so") for b in build_dirs()]
    out = [p for p in out if os.path.exists(p)]
    found = ctypes.util.find_library("divtrace")
    if found:
        out.append(found)
    return out, False


def _declare(lib):
    c_int, c_char_p, c_void_p = ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p
    i64p = ctypes.POINTER(ctypes.c_int64)
    strv = ctypes.POINTER(ctypes.c_char_p)
    sig = {
        "divtrace_api_version": (c_int, []),
        "divtrace_strerror": (c_char_p, [c_int]),
        "divtrace_errmsg": (c_char_p, [c_void_p]),
        "divtrace_open": (c_int, [ctypes.POINTER(c_void_p), c_char_p, strv, c_char_p]),
        "divtrace_close": (c_int, [c_void_p, c_int, c_char_p]),
        "divtrace_step_begin": (c_int, [c_void_p, ctypes.c_uint64]),
        # data as a plain address: a tensor's data_ptr() goes in without a cast
        "divtrace_record": (c_int, [c_void_p, c_char_p, c_char_p, c_int, c_void_p, c_int, c_void_p,
                                    c_int, i64p, strv, c_int]),
        # the tensors and data pointers as addresses: a run of records starts
        # anywhere in the recorder's arrays
        "divtrace_record_many": (c_int, [c_void_p, c_int, c_void_p, c_void_p, c_int, c_void_p]),
        "divtrace_flush": (c_int, [c_void_p]),
        "divtrace_step_end": (c_int, [c_void_p, ctypes.c_double]),
        "divtrace_step_end_device": (c_int, [c_void_p, c_void_p, c_void_p]),
        "divtrace_step_end_async": (c_int, [c_void_p, c_void_p, c_void_p]),
        "divtrace_checkpoint_begin": (c_int, [c_void_p, ctypes.c_uint64]),
        "divtrace_checkpoint_add": (c_int, [c_void_p, c_char_p, c_void_p, c_int, c_int, i64p]),
        "divtrace_checkpoint_end": (c_int, [c_void_p]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    # newer than the first API 1 libraries: optional
    for name, (res, args) in {"divtrace_status": (c_int, [c_void_p]),
                              "divtrace_report_faults": (c_int, [c_int])}.items():
        f = getattr(lib, name, None)
        if f is not None:
            f.restype = res
            f.argtypes = args
    # divtrace_record once more, without argtypes, for the recorder's per-record
    # call: ctypes' argtypes conversion costs more than the call (about 1.7 us
    # against 1 us for its 11 arguments). Without argtypes each argument must be
    # given as its C type: a Python int is a C int (kind, where, ndim,
    # ninputs), bytes a char *, None NULL, and a pointer a c_void_p or a ctypes
    # array (the handle, data, stream, shape, inputs).
    f = lib["divtrace_record"]
    f.restype = c_int
    lib.record_untyped = f


def load():
    """The loaded library (loaded once). Raises ImportError naming every
    place tried when there is none, or when its API version is not 1."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    paths, from_env = _candidates()
    errors = []
    for p in paths:
        try:
            lib = ctypes.CDLL(p)
        except OSError as e:
            errors.append("%s: %s" % (p, e))
            continue
        try:
            _declare(lib)
        except AttributeError as e:
            errors.append("%s: not libdivtrace (%s)" % (p, e))
            continue
        v = lib.divtrace_api_version()
        if v != API_VERSION:
            errors.append("%s: API version %d, this package needs %d" % (p, v, API_VERSION))
            continue
        _lib, _lib_path = lib, p
        if hasattr(lib, "divtrace_report_faults"):
            lib.divtrace_report_faults(0)  # the Recorder warns of a fault: no second line from the library
        return lib
    if from_env:
        why = "DIVTRACE_LIB=%s cannot be loaded: %s" % (paths[0], "; ".join(errors))
    elif errors:
        why = "no usable libdivtrace: %s; set DIVTRACE_LIB to the path of libdivtrace.so" % "; ".join(errors)
    else:
        why = ("libdivtrace.so not found: build divtrace (./bootstrap, or make in a build directory), "
               "install it, or set DIVTRACE_LIB to the path of libdivtrace.so")
    raise ImportError("divtrace: " + why)


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _loaded_file(lib, path):
    """The file the dynamic linker loaded as lib: path when it is one, else
    (a bare name, as ctypes.util.find_library gives) what dladdr() says of
    one of its functions."""
    if os.path.isabs(path):
        return path
    try:
        dladdr = ctypes.CDLL(None).dladdr
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        info = _DlInfo()
        if dladdr(ctypes.cast(lib.divtrace_api_version, ctypes.c_void_p), ctypes.byref(info)) and info.dli_fname:
            return os.fsdecode(info.dli_fname)
    except (AttributeError, OSError):
        pass
    return path


def _fast_candidates():
    """Where the C core (divtrace._fast, src/python/fast.c) may be, beside
    the loaded library: DIVTRACE_FAST; the build tree (src/.libs ->
    src/python/.libs); an install (LIBDIR/divtrace/); the same folder (a
    packed build, and pip's bundle)."""
    env = os.environ.get("DIVTRACE_FAST")
    if env:
        return [env]
    d = os.path.dirname(os.path.abspath(_loaded_file(_lib, _lib_path)))
    return [os.path.normpath(os.path.join(d, "..", "python", ".libs", "_fast.so")),
            os.path.join(d, "divtrace", "_fast.so"), os.path.join(d, "_fast.so")]


_fast = None
_fast_why = None


def load_fast(required=False):
    """The C core's module, or None when there is none that loads (required:
    raise ImportError instead). Loaded once, after the library."""
    global _fast, _fast_why
    if _fast is None and _fast_why is None:
        load()
        import importlib.machinery
        import importlib.util
        errors = []
        for p in _fast_candidates():
            if not os.path.exists(p):
                errors.append("%s: no such file" % p)
                continue
            try:
                loader = importlib.machinery.ExtensionFileLoader("divtrace._fast", p)
                spec = importlib.util.spec_from_file_location("divtrace._fast", p, loader=loader)
                mod = importlib.util.module_from_spec(spec)
                loader.exec_module(mod)
            except ImportError as e:
                errors.append("%s: %s" % (p, e))
                continue
            if getattr(mod, "API_VERSION", None) != API_VERSION:
                errors.append("%s: API version %s, this package needs %d"
                              % (p, getattr(mod, "API_VERSION", None), API_VERSION))
                continue
            _fast = mod
            break
        else:
            _fast_why = "; ".join(errors)
    if _fast is None and required:
        raise ImportError("divtrace: the C core (divtrace._fast) does not load: " + _fast_why)
    return _fast


def library_path():
    """The path of the loaded library (loading it if need be)."""
    load()
    return _lib_path


def error(status, handle=None):
    """The DivtraceError of a negative status, with the handle's message
    (or, with no handle, divtrace_open's or divtrace_close's message for
    this thread)."""
    msg = _lib.divtrace_errmsg(handle)
    text = msg.decode("utf-8", "replace") if msg else ""
    if not text:
        s = _lib.divtrace_strerror(status)
        text = s.decode("utf-8", "replace") if s else "error %d" % status
    return DivtraceError(status, text)


def check(status, handle=None):
    """Raise error(status, handle) for a negative status."""
    if status >= 0:
        return status
    raise error(status, handle)


def strv(items):
    """A char *[] of the encoded strings (kept alive by the returned array)."""
    arr = (ctypes.c_char_p * len(items))()
    arr[:] = [s.encode("utf-8") for s in items]
    return arr


def shape_array(shape):
    return (ctypes.c_int64 * len(shape))(*shape)
