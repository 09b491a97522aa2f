"""divtrace: record PyTorch training runs as divtrace traces (.dtr).

    import divtrace
    with divtrace.record(model, "run.dtr", config={"seed": 1}, optimizer=opt) as rec:
        for x, y in data:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            rec.step(loss)

Then `divtrace show run.dtr`, `divtrace diff a.dtr b.dtr` and `divtrace escape
run.dtr` work on the run as on the divtrace program's own. The recording is
done by libdivtrace (found through DIVTRACE_LIB, the build tree next to this
package, or the system's library path). A fault (the disk full, the trace
file unwritable or deleted, no memory, a CUDA error) stops the recording
with one DivtraceWarning and the training goes on (strict=True raises a
DivtraceError instead). The API is documented in divtrace-python(7).
"""
from ._lib import DivtraceError, DivtraceWarning, library_path

__version__ = "0.1.0"
__all__ = ["record", "Recorder", "DivtraceError", "DivtraceWarning", "library_path", "__version__"]


def __getattr__(name):
    # record and Recorder need torch, imported on their first use: the
    # divtrace command (_cli.py) and python -m divtrace start without it
    if name in ("record", "Recorder"):
        from . import _record
        return getattr(_record, name)
    raise AttributeError("module 'divtrace' has no attribute %r" % name)
