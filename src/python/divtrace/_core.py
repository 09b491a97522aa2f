# _core.py: a Recorder's per-step state and the paths every step after the
# first takes (a deferred record into the buffer, a group of parameters,
# gradients or updates, a module's output, the flush points), in Python.
# src/python/fast.c is the same in C (the extension divtrace._fast); the
# Recorder takes that one when it loads and this one otherwise or when
# DIVTRACE_ADAPTER_CORE=python. Both must make the same library calls with
# the same arguments in the same order: tests/torch runs every check with
# each, and compares their traces record for record (divtrace show --json).
#
# What a slot is: record k of every step is the first step's record k. After
# the first step fix() gives the core each slot's (name, type, kind, shape)
# and whether it may be deferred, divtrace_record_many's tensors (a ctypes
# array of struct divtrace_tensor) and a ctypes array of data pointers, both
# by slot. A deferred record writes its data pointer into that array; the
# run of deferred records since the last library call goes to
# divtrace_record_many at the next flush point or before the next record
# that is not deferred (push).
import copy
import ctypes
import types

HOST, DEVICE, DEVICE_DEFERRED = 0, 1, 2   # enum divtrace_where
FORWARD = 3                               # enum divtrace_kind
HOST_RUN = -1                             # pend_stream of a run of host tensors

_VOIDP = ctypes.c_void_p
_PTR_SIZE = ctypes.sizeof(_VOIDP)


class PyCore:
    """The Python core. Attributes the Recorder reads and writes: paused,
    in_step, deferring, record_no_grad (flags); nrec (records made this
    step), pend0 (the first slot not yet passed to the library), pend_stream
    (the stream of the buffered run; HOST_RUN for host tensors), ndef
    (deferred this step); used (names taken this step), calls (module name
    -> calls this step), keep (tensors the library may still read), watch
    ((slot, tensor, version) to check at the next flush point)."""

    kind = "python"

    def __init__(self, f32, strided, tensor_type, raw_stream, is_grad_enabled):
        self._f32, self._strided, self._tensor = f32, strided, tensor_type
        self._raw_stream, self._grad_on = raw_stream, is_grad_enabled
        self.paused = 0
        self.in_step = False
        self.deferring = False
        self.record_no_grad = False
        self._slots, self._def, self._groups = (), (), {}
        self._many = self._flush = self._h = None
        self._ts_addr = self._ptrs_addr = 0
        self._ts_size = 0
        self._ptrs = None
        self.steps = 0          # steps ended (the Recorder's steps)
        self.last_nrec = self.last_ndef = 0  # the last step's records, deferred ones
        self.reset()

    def begun(self):
        """A step was begun (this core's steps end with a wait: nothing kept
        past them)."""

    def reset(self):
        self.used = set()
        self.calls = {}
        self.keep = []
        self.watch = []
        self.nrec = 0
        self.ndef = 0
        self.pend0 = 0
        self.pend_stream = 0

    def fix(self, handle, record_many, flush, slots, deferrable, ts, ts_size, ptrs):
        """After the first step: the library's handle and functions (ctypes
        function objects), the slots as (name, type, kind, shape), whether
        each may be deferred, and the record_many arrays."""
        self._h, self._many, self._flush = handle, record_many, flush
        self._slots = tuple(slots)
        self._def = tuple(bool(d) for d in deferrable)
        self._ts_addr, self._ts_size = ctypes.addressof(ts), ts_size
        self._ptrs, self._ptrs_addr = ptrs, ctypes.addressof(ptrs)

    def add_group(self, gid, k0, shapes, owners, deferrable):
        """Slots k0 .. k0 + len(shapes) - 1 are recorded together as group
        gid, the first step's tensors of owners (their parameters)."""
        self._groups[gid] = (k0, len(shapes), tuple(shapes), tuple(owners), bool(deferrable))

    # ---- the buffer

    def _stream(self, t):
        return self._raw_stream(t.get_device()) if t.is_cuda else HOST_RUN

    def buffer(self, k, t):
        """Record k, deferred and the first step's (t on a GPU or the host):
        its data pointer into the array, t kept and watched. Returns the
        status of a push it needed (negative: an error)."""
        rc = 0
        stream = self._stream(t)
        if k != self.pend0 and stream != self.pend_stream:
            rc = self.push()  # one stream a run
        self.pend_stream = stream
        self._ptrs[k] = t.data_ptr()
        self.keep.append(t)
        self.watch.append((k, t, t._version))
        self.ndef += 1
        self.nrec = k + 1
        return rc

    def call_many(self, k0, n, where, stream):
        """divtrace_record_many for slots k0 .. k0 + n - 1, their data
        pointers already in the array."""
        return self._many(self._h, n, self._ts_addr + k0 * self._ts_size, self._ptrs_addr + k0 * _PTR_SIZE,
                          where, stream)

    def push(self):
        """The deferred records buffered since the last library call, in one
        call (0 when there are none)."""
        k0 = self.pend0
        n = self.nrec - k0
        if n <= 0:
            return 0
        self.pend0 = self.nrec
        if self.pend_stream == HOST_RUN:
            return self.call_many(k0, n, HOST, None)
        return self.call_many(k0, n, DEVICE_DEFERRED, self.pend_stream)

    def _matches(self, k, name, type_b, kind, t):
        s = self._slots[k]
        return s[0] == name and s[1] == type_b and s[2] == kind and s[3] == t.shape

    def try_defer(self, name, type_b, kind, t):
        """Record t as slot nrec, deferred, if that slot may be deferred and
        t is its kind (float32, contiguous, of its shape, on a GPU or the
        host). Returns 1 when buffered, 0 when not (the caller records it),
        a negative status on a library error."""
        k = self.nrec
        if not self.deferring or k >= len(self._slots) or not self._def[k]:
            return 0
        if t.dtype is not self._f32 or t.layout is not self._strided or not (t.is_cuda or t.is_cpu) \
                or not t.is_contiguous() or not self._matches(k, name, type_b, kind, t):
            return 0
        rc = self.buffer(k, t)
        return rc if rc < 0 else 1

    # ---- groups

    def group(self, gid, tensors, owners, watch=True):
        """Group gid's records, if this step's tensors are its kind: of the
        same parameters (owners), float32, contiguous, of the first step's
        shapes, all on a GPU or all on the host. Deferred ones go into the
        buffer (watched unless watch is false: the caller's flush point
        follows at once), others to the library in one call. Returns 1
        (recorded), 0 (nothing recorded: the caller takes them one by one)
        or a negative status."""
        g = self._groups.get(gid)
        if g is None:
            return 0
        k0, n, shapes, first, deferrable = g
        if self.nrec != k0 or len(tensors) != n or n == 0:
            return 0
        t0 = tensors[0]
        cuda = t0.is_cuda
        if not cuda and not t0.is_cpu:
            return 0
        f32, strided, ptrs = self._f32, self._strided, self._ptrs
        for i, t in enumerate(tensors):
            if owners[i] is not first[i] or t.dtype is not f32 or t.is_cuda is not cuda \
                    or t.layout is not strided or t.shape != shapes[i] or not t.is_contiguous():
                return 0
            ptrs[k0 + i] = t.data_ptr()
        rc = 0
        if self.deferring and deferrable:
            stream = self._stream(t0)
            if k0 != self.pend0 and stream != self.pend_stream:
                rc = self.push()
            self.pend_stream = stream
            self.keep.extend(tensors)
            if watch:
                self.watch.extend((k0 + i, t, t._version) for i, t in enumerate(tensors))
            self.ndef += n
            self.nrec = k0 + n
            return rc if rc < 0 else 1
        if k0 != self.pend0:
            rc = self.push()  # the pointers of slots below k0 are already in place
            if rc < 0:
                return rc
        if cuda:
            self.keep.extend(tensors)
        self.nrec = k0 + n
        self.pend0 = self.nrec
        if cuda:
            rc = self.call_many(k0, n, DEVICE, self._raw_stream(t0.get_device()))
        else:
            rc = self.call_many(k0, n, HOST, None)
        return rc if rc < 0 else 1

    def grads(self, gid, params, watch=True):
        """Group gid of the gradients of params (those that have one and
        require it), as group() records them."""
        gs, ps = [], []
        for p in params:
            g = p.grad
            if g is not None and p.requires_grad:
                gs.append(g)
                ps.append(p)
        return self.group(gid, gs, ps, watch)

    # ---- flush points

    def flush_point(self, flush):
        """After the first step: every watched tensor must be unchanged; then
        the buffered run goes to the library and, with flush, its hashing is
        queued. Returns None, ("changed", slot) or ("lib", status)."""
        watch = self.watch
        if not watch and self.nrec == self.pend0:
            return None
        self.watch = []
        for k, t, v in watch:
            if t._version != v:
                return ("changed", k)
        rc = self.push()
        if rc >= 0 and flush:
            rc = self._flush(self._h)
        return ("lib", rc) if rc < 0 else None

    def _then_flush(self, r):
        if r != 1:
            return r
        f = self.flush_point(True)
        return 1 if f is None else f

    def group_flush(self, gid, tensors, owners):
        """group() and a flush point at once after it, its tensors not
        watched: 1 (recorded and flushed), 0 (nothing recorded), a negative
        status, or flush_point's ("changed", slot) or ("lib", status)."""
        return self._then_flush(self.group(gid, tensors, owners, False))

    def grads_flush(self, gid, params):
        """grads() and a flush point, as group_flush."""
        return self._then_flush(self.grads(gid, params, False))

    # ---- module hooks

    def hook(self, fallback, fail, mname, mtype_b):
        """A forward hook (with_kwargs) for the module named mname: a
        single tensor output that is the first step's deferred record at
        this place goes into the buffer here; anything else goes to
        fallback(module, args, kwargs, output). fail(status) raises a
        library error, or (a fault) stops the recording and returns."""
        names = [mname]     # the module's k-th call's record name: mname, mname.1, ...
        core = self
        Tensor = self._tensor
        grad_on = self._grad_on

        def hook(module, args, kwargs, output):
            if core.paused or not (core.record_no_grad or grad_on()):
                return None
            if core.deferring and core.in_step and type(output) is Tensor:
                calls = core.calls
                c = calls.get(mname, 0)
                while len(names) <= c:
                    names.append("%s.%d" % (mname, len(names)))
                name = names[c]
                if name not in core.used:
                    rc = core.try_defer(name, mtype_b, FORWARD, output)
                    if rc != 0:
                        calls[mname] = c + 1
                        core.used.add(name)
                        if rc < 0:
                            fail(rc)
                        return None
            fallback(module, args, kwargs, output)
            return None
        return hook


# ---- forward wrappers (capture="wrap")


def unwrapped_copy(w, memo):
    """A wrapper's __deepcopy__: the copy of a wrapped module gets the
    forward it would have without divtrace, its class's forward bound to
    the copy (or a deep copy of the forward the wrapper calls), so that it
    computes with its own parameters and records nothing."""
    fwd = w.forward
    owner = getattr(fwd, "__self__", None)
    if owner is w.module and id(owner) in memo and isinstance(fwd, types.MethodType):
        return types.MethodType(fwd.__func__, memo[id(owner)])
    return copy.deepcopy(fwd, memo)


def _wrapped(w):
    """The forward a wrapper calls, as __wrapped__: inspect.signature()
    (and what reads it, such as a trainer matching a batch's keys to
    forward's parameters) sees forward's own signature."""
    return w.forward


class PyWrap:
    """What the Recorder puts in a module's __dict__ as "forward" with
    capture="wrap" (the Python twin of divtrace._fast.Wrap): nn.Module's
    __call__ then finds no hooks and calls it as it would call forward.
    pre(module, args, kwargs) runs first when it is not None (the root's
    step start and inputs), then forward, then hook(module, args, kwargs,
    output) (a forward hook's work) on what forward returned."""

    __slots__ = ("module", "forward", "hook", "pre")

    def __init__(self, module, forward, hook, pre):
        if not callable(forward) or not callable(hook) or (pre is not None and not callable(pre)):
            raise TypeError("Wrap(module, forward, hook, pre): forward, hook and pre must be callable")
        self.module, self.forward, self.hook, self.pre = module, forward, hook, pre

    def __call__(self, *args, **kwargs):
        if self.pre is not None:
            self.pre(self.module, args, kwargs)
        out = self.forward(*args, **kwargs)
        self.hook(self.module, args, kwargs, out)
        return out

    __deepcopy__ = unwrapped_copy
    __wrapped__ = property(_wrapped)


def wrap_type(fast):
    """The wrapper type of a core: divtrace._fast.Wrap with __deepcopy__
    (fast: the extension module), or PyWrap (fast None)."""
    if fast is None:
        return PyWrap
    return type("Wrap", (fast.Wrap,), {"__slots__": (), "__deepcopy__": unwrapped_copy,
                                       "__wrapped__": property(_wrapped), "__module__": __name__})
