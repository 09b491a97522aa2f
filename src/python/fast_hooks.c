/* fast_hooks.c: how the C core catches a module's output: the Hook type (a
 * forward hook, capture="hooks") and the Wrap type (a module's forward
 * wrapped, capture="wrap"; _core.py's PyWrap), both running hook_run on
 * the output: the core's fast path for a deferred record, else the
 * Recorder's Python fallback (see fast.h). */
#include "fast.h"

static PyTypeObject *HookType, *WrapType;

/* ---- the forward hook ---- */

typedef struct {
    PyObject_HEAD
    Core *core;
    PyObject *fallback, *fail, *mname, *mtype, *names; /* names: the k-th call's record name */
} Hook;

PyObject *fast_hook_new(Core *c, PyObject *args)
{
    PyObject *fallback, *fail, *mname, *mtype;
    if (!PyArg_ParseTuple(args, "OOUO:hook", &fallback, &fail, &mname, &mtype))
        return NULL;
    Hook *h = (Hook *)PyType_GenericAlloc(HookType, 0);
    if (!h)
        return NULL;
    h->names = PyList_New(1);
    if (!h->names) {
        Py_DECREF(h);
        return NULL;
    }
    Py_INCREF(mname);
    PyList_SetItem(h->names, 0, mname);
    h->core = (Core *)Py_NewRef((PyObject *)c);
    h->fallback = Py_NewRef(fallback);
    h->fail = Py_NewRef(fail);
    h->mname = Py_NewRef(mname);
    h->mtype = Py_NewRef(mtype);
    return (PyObject *)h;
}

/* the record name of the module's c-th call this step */
static PyObject *hook_name(Hook *h, Py_ssize_t c)
{
    while (PyList_Size(h->names) <= c) {
        PyObject *n = PyUnicode_FromFormat("%U.%zd", h->mname, PyList_Size(h->names));
        if (!n || PyList_Append(h->names, n) < 0) {
            Py_XDECREF(n);
            return NULL;
        }
        Py_DECREF(n);
    }
    return PyList_GetItem(h->names, c); /* borrowed */
}

/* the fast path: 1 buffered, 0 not (the fallback records), PYERR */
static int hook_fast(Hook *h, PyObject *output)
{
    Core *c = h->core;
    PyObject *cnt = PyDict_GetItemWithError(c->calls, h->mname);
    if (!cnt && PyErr_Occurred())
        return PYERR;
    Py_ssize_t k = cnt ? PyLong_AsSsize_t(cnt) : 0;
    if (k < 0)
        return PyErr_Occurred() ? PYERR : 0;
    PyObject *name = hook_name(h, k);
    if (!name)
        return PYERR;
    int used = fast_used(c, name);
    if (used)
        return used < 0 ? PYERR : 0;
    Py_INCREF(name); /* the list may grow under a later call; hold it */
    int rc = fast_try_defer(c, name, h->mtype, DIVTRACE_FORWARD, output);
    if (rc != 0 && rc != PYERR) {
        PyObject *k1 = PyLong_FromSsize_t(k + 1);
        if (!k1 || PyDict_SetItem(c->calls, h->mname, k1) < 0 || PySet_Add(c->used, name) < 0)
            rc = PYERR;
        Py_XDECREF(k1);
        if (rc < 0 && rc != PYERR) {
            /* fail raises, or (a fault) stops the recording and returns:
             * the output is done with, as if buffered */
            PyObject *r = PyObject_CallFunction(h->fail, "i", rc);
            rc = r ? 1 : PYERR;
            Py_XDECREF(r);
        }
    }
    Py_DECREF(name);
    return rc;
}

/* a forward hook's work (the module's hook, or its Wrap after its
 * forward): the fast path, else fallback(module, fargs, fkw, output); fkw
 * NULL stands for no keyword arguments. 0, or -1 with an exception set. */
static int hook_run(Hook *h, PyObject *module, PyObject *fargs, PyObject *fkw, PyObject *output)
{
    Core *c = h->core;
    if (c->paused)
        return 0;
    if (!c->record_no_grad) {
        PyObject *on = PyObject_CallNoArgs(c->grad_on);
        if (!on)
            return -1;
        int b = PyObject_IsTrue(on);
        Py_DECREF(on);
        if (b < 0)
            return -1;
        if (!b)
            return 0;
    }
    if (c->deferring && c->in_step && (PyObject *)Py_TYPE(output) == c->tensor_type) {
        int r = hook_fast(h, output);
        if (r == PYERR)
            return -1;
        if (r)
            return 0;
    }
    PyObject *kw = fkw ? Py_NewRef(fkw) : PyDict_New();
    if (!kw)
        return -1;
    PyObject *r = PyObject_CallFunctionObjArgs(h->fallback, module, fargs, kw, output, NULL);
    Py_DECREF(kw);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

static PyObject *hook_call(PyObject *self, PyObject *args, PyObject *kw)
{
    PyObject *module, *fargs, *fkw, *output;
    if (kw && PyDict_Size(kw)) {
        PyErr_SetString(PyExc_TypeError, "a forward hook takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "hook", 4, 4, &module, &fargs, &fkw, &output))
        return NULL;
    if (hook_run((Hook *)self, module, fargs, fkw, output) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static int hook_traverse(PyObject *self, visitproc visit, void *arg)
{
    Hook *h = (Hook *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT((PyObject *)h->core);
    Py_VISIT(h->fallback);
    Py_VISIT(h->fail);
    Py_VISIT(h->names);
    return 0;
}

static int hook_clear(PyObject *self)
{
    Hook *h = (Hook *)self;
    Py_CLEAR(h->core);
    Py_CLEAR(h->fallback);
    Py_CLEAR(h->fail);
    Py_CLEAR(h->mname);
    Py_CLEAR(h->mtype);
    Py_CLEAR(h->names);
    return 0;
}

static void hook_dealloc(PyObject *self)
{
    fast_gc_dealloc(self, hook_clear);
}

static PyType_Slot hook_slots[] = {
    {Py_tp_doc, "A module's forward hook made by Core.hook."},
    {Py_tp_call, hook_call},
    {Py_tp_dealloc, hook_dealloc},
    {Py_tp_traverse, hook_traverse},
    {Py_tp_clear, hook_clear},
    {0, NULL},
};

static PyType_Spec hook_spec = {"divtrace._fast.Hook", sizeof(Hook), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, hook_slots};

/* ---- a module's forward, wrapped ----
 *
 * Wrap(module, forward, hook, pre) is what the Recorder puts in a module's
 * __dict__ as "forward" (capture="wrap"): nn.Module.__call__ finds no hooks
 * and calls it as it would call forward. It runs pre(module, args, kwargs)
 * first when pre is not None (the root's step start and inputs), then
 * forward, then the hook's work on the output (hook_run for a Hook, else
 * hook(module, args, kwargs, output)), and returns forward's output. The
 * type may be subclassed (the Recorder adds __deepcopy__ in Python). */

typedef struct {
    PyObject_HEAD
    PyObject *module, *forward, *hook, *pre; /* pre: NULL for None */
} Wrap;

static int wrap_init(PyObject *self, PyObject *args, PyObject *kw)
{
    Wrap *w = (Wrap *)self;
    PyObject *module, *forward, *hook, *pre;
    if (kw && PyDict_Size(kw)) {
        PyErr_SetString(PyExc_TypeError, "Wrap() takes no keyword arguments");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "OOOO:Wrap", &module, &forward, &hook, &pre))
        return -1;
    if (!PyCallable_Check(forward) || !PyCallable_Check(hook) || (pre != Py_None && !PyCallable_Check(pre))) {
        PyErr_SetString(PyExc_TypeError, "Wrap(module, forward, hook, pre): forward, hook and pre must be callable");
        return -1;
    }
    SETREF(w->module, Py_NewRef(module));
    SETREF(w->forward, Py_NewRef(forward));
    SETREF(w->hook, Py_NewRef(hook));
    SETREF(w->pre, pre == Py_None ? NULL : Py_NewRef(pre));
    return 0;
}

static PyObject *wrap_call(PyObject *self, PyObject *args, PyObject *kw)
{
    Wrap *w = (Wrap *)self;
    if (!w->forward) {
        PyErr_SetString(PyExc_RuntimeError, "Wrap: not initialized");
        return NULL;
    }
    PyObject *kwd = NULL; /* the hooks' kwargs: kw, or a new empty dict */
    if (w->pre || !PyObject_TypeCheck(w->hook, HookType)) {
        kwd = kw ? Py_NewRef(kw) : PyDict_New();
        if (!kwd)
            return NULL;
    }
    if (w->pre) {
        PyObject *r = PyObject_CallFunctionObjArgs(w->pre, w->module, args, kwd, NULL);
        if (!r) {
            Py_DECREF(kwd);
            return NULL;
        }
        Py_DECREF(r);
    }
    PyObject *out = PyObject_Call(w->forward, args, kw);
    if (!out) {
        Py_XDECREF(kwd);
        return NULL;
    }
    int rc;
    if (PyObject_TypeCheck(w->hook, HookType)) {
        rc = hook_run((Hook *)w->hook, w->module, args, kwd ? kwd : kw, out);
    } else {
        PyObject *r = PyObject_CallFunctionObjArgs(w->hook, w->module, args, kwd, out, NULL);
        rc = r ? 0 : -1;
        Py_XDECREF(r);
    }
    Py_XDECREF(kwd);
    if (rc < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *wrap_get(PyObject *self, void *which)
{
    Wrap *w = (Wrap *)self;
    PyObject *v = which == (void *)0 ? w->module : which == (void *)1 ? w->forward
                : which == (void *)2 ? w->hook : w->pre;
    return Py_NewRef(v ? v : Py_None);
}

static PyGetSetDef wrap_getset[] = {
    {"module", wrap_get, NULL, "the module", (void *)0},
    {"forward", wrap_get, NULL, "the forward it calls", (void *)1},
    {"hook", wrap_get, NULL, "the hook run on the output", (void *)2},
    {"pre", wrap_get, NULL, "called before forward, or None", (void *)3},
    {NULL, NULL, NULL, NULL, NULL},
};

static int wrap_traverse(PyObject *self, visitproc visit, void *arg)
{
    Wrap *w = (Wrap *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(w->module);
    Py_VISIT(w->forward);
    Py_VISIT(w->hook);
    Py_VISIT(w->pre);
    return 0;
}

static int wrap_clear(PyObject *self)
{
    Wrap *w = (Wrap *)self;
    Py_CLEAR(w->module);
    Py_CLEAR(w->forward);
    Py_CLEAR(w->hook);
    Py_CLEAR(w->pre);
    return 0;
}

static void wrap_dealloc(PyObject *self)
{
    fast_gc_dealloc(self, wrap_clear);
}

static PyType_Slot wrap_slots[] = {
    {Py_tp_doc, "Wrap(module, forward, hook, pre): a module's forward that records its output."},
    {Py_tp_init, wrap_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_call, wrap_call},
    {Py_tp_dealloc, wrap_dealloc},
    {Py_tp_traverse, wrap_traverse},
    {Py_tp_clear, wrap_clear},
    {Py_tp_getset, wrap_getset},
    {0, NULL},
};

static PyType_Spec wrap_spec = {"divtrace._fast.Wrap", sizeof(Wrap), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE, wrap_slots};

int fast_hooks_init(PyObject *m)
{
    HookType = (PyTypeObject *)PyType_FromSpec(&hook_spec);
    WrapType = (PyTypeObject *)PyType_FromSpec(&wrap_spec);
    if (!HookType || !WrapType)
        return -1;
    if (PyModule_AddObjectRef(m, "Hook", (PyObject *)HookType) < 0 ||
        PyModule_AddObjectRef(m, "Wrap", (PyObject *)WrapType) < 0)
        return -1;
    return 0;
}
