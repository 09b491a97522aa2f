/* fast_step.c: the C core's step begin and end, and the optimizer's hooks,
 * for every step after the first (Core.arm): what the Recorder's
 * _root_pre_hook (the root's step start, its parameters and inputs),
 * _opt_pre_hook, _opt_post_hook and step() do in their usual case, without
 * the interpreter and with the library's step calls through the function
 * pointers ctypes found. Anything else (a checkpoint due, a call with
 * keyword arguments, a group that does not fit, a paused recorder) is the
 * Python method's, called as it would have been; each path decides that
 * before it changes anything. */
#include "fast.h"

static PyObject *call3(PyObject *f, PyObject *a, PyObject *b, PyObject *d)
{
    return PyObject_CallFunctionObjArgs(f, a, b, d, NULL);
}

/* a library status < 0: the Recorder's fail(status) raises it (NULL), or
 * (a fault) stops the recording and returns: the hook is done (None) */
static PyObject *failed(Core *c, int rc)
{
    PyObject *r = PyObject_CallFunction(c->arm.fail, "i", rc);
    if (!r)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}

/* 1 when recording is on (not paused; gradients enabled or no_grad passes
 * recorded), 0 when not, -1 */
static int recording(Core *c)
{
    if (c->paused)
        return 0;
    if (c->record_no_grad)
        return 1;
    PyObject *on = PyObject_CallNoArgs(c->grad_on);
    if (!on)
        return -1;
    int b = PyObject_IsTrue(on);
    Py_DECREF(on);
    return b;
}

/* model(x, ...) with plain tensors only, the root's first call of the step,
 * the inputs where the first step had them: the fast path may take it */
static int root_call_plain(Core *c, PyObject *args, PyObject *kwargs)
{
    if (!PyTuple_Check(args) || (kwargs && kwargs != Py_None && (!PyDict_Check(kwargs) || PyDict_Size(kwargs))))
        return 0;
    Py_ssize_t n = PyTuple_Size(args);
    for (Py_ssize_t i = 0; i < n; i++)
        if ((PyObject *)Py_TYPE(PyTuple_GetItem(args, i)) != c->tensor_type)
            return 0;
    PyObject *k = PyDict_GetItemWithError(c->calls, c->arm.root_key);
    if (k || PyErr_Occurred())
        return k ? 0 : -1;
    Py_ssize_t ni = PyTuple_Size(c->arm.input_idx);
    for (Py_ssize_t j = 0; j < ni; j++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GetItem(c->arm.input_idx, j));
        if (i < 0 || i >= n)
            return PyErr_Occurred() ? -1 : 0;
        int used = fast_used(c, PyTuple_GetItem(c->arm.input_names, j));
        if (used)
            return used < 0 ? -1 : 0;
    }
    return 1;
}

PyObject *fast_root_pre(Core *c, PyObject *module, PyObject *args, PyObject *kwargs)
{
    if (!c->arm.on)
        return call3(c->arm.root_slow, module, args, kwargs);
    int on = recording(c);
    if (on <= 0)
        return on < 0 ? NULL : Py_NewRef(Py_None);
    int plain = root_call_plain(c, args, kwargs);
    if (plain < 0)
        return NULL;
    uint64_t s = c->arm.steps;
    if (!plain || c->in_step || (c->arm.ckpt_every && s % (uint64_t)c->arm.ckpt_every == 0))
        return call3(c->arm.root_slow, module, args, kwargs);
    /* the step's start: the library, the reserved names, the parameters */
    int rc = c->arm.step_begin(c->h, s);
    if (rc < 0)
        return failed(c, rc);
    Py_CLEAR(c->keep_prev); /* the step before's records are read */
    c->in_step = 1;
    c->params_reserved = 1; /* the parameters' names, used (fast_used) */
    int r = fast_group(c, GROUP_PARAM, c->arm.params, c->arm.params, 1);
    if (r == PYERR)
        return NULL;
    if (r < 0)
        return failed(c, r);
    if (r == 0) {
        PyObject *x = PyObject_CallNoArgs(c->arm.begin_params);
        if (!x)
            return NULL;
        Py_DECREF(x);
    }
    /* the inputs: the first step's, by the first step's names */
    PyObject *one = PyLong_FromLong(1);
    if (!one || PyDict_SetItem(c->calls, c->arm.root_key, one) < 0) {
        Py_XDECREF(one);
        return NULL;
    }
    Py_DECREF(one);
    for (Py_ssize_t j = 0, n = PyTuple_Size(c->arm.input_idx); j < n; j++) {
        PyObject *t = PyTuple_GetItem(args, PyLong_AsSsize_t(PyTuple_GetItem(c->arm.input_idx, j)));
        PyObject *name = PyTuple_GetItem(c->arm.input_names, j);
        if (PySet_Add(c->used, name) < 0)
            return NULL;
        r = fast_try_defer(c, name, c->arm.input_type, DIVTRACE_INPUT, t);
        if (r == PYERR)
            return NULL;
        if (r < 0)
            return failed(c, r);
        if (r == 0) {
            PyObject *x = PyObject_CallFunctionObjArgs(c->arm.record_input, name, t, NULL);
            if (!x)
                return NULL;
            Py_DECREF(x);
        }
    }
    Py_RETURN_NONE;
}

/* r: what group_flush or grads_flush returned (a new reference): None when
 * the group was recorded and flushed, NULL to take the slow path, else the
 * Recorder's flush_failed(r) raises (NULL) or, a fault, stops the
 * recording (None) */
static PyObject *group_done(Core *c, PyObject *r, int *slow)
{
    *slow = 0;
    if (!r)
        return NULL;
    if (PyLong_Check(r)) {
        long v = PyLong_AsLong(r);
        if (v == 1 || v == 0) {
            Py_DECREF(r);
            *slow = v == 0;
            return v ? Py_NewRef(Py_None) : NULL;
        }
    }
    PyObject *x = PyObject_CallFunctionObjArgs(c->arm.flush_failed, r, NULL);
    Py_DECREF(r);
    if (!x)
        return NULL;
    Py_DECREF(x);
    Py_RETURN_NONE;
}

PyObject *fast_opt_pre(Core *c, PyObject *opt, PyObject *args, PyObject *kwargs)
{
    if (!c->arm.on || c->paused || !c->in_step)
        return call3(c->arm.opt_pre_slow, opt, args, kwargs);
    int slow;
    PyObject *r = group_done(c, fast_group_then_flush(c, GROUP_GRAD, NULL, NULL, c->arm.params), &slow);
    if (slow)
        return call3(c->arm.opt_pre_slow, opt, args, kwargs);
    return r;
}

PyObject *fast_opt_post(Core *c, PyObject *opt, PyObject *args, PyObject *kwargs)
{
    if (!c->arm.on || c->paused || !c->in_step)
        return call3(c->arm.opt_post_slow, opt, args, kwargs);
    int slow;
    PyObject *r = group_done(c, fast_group_then_flush(c, GROUP_UPDATE, c->arm.updates, c->arm.updates, NULL),
                             &slow);
    if (slow)
        return call3(c->arm.opt_post_slow, opt, args, kwargs);
    return r;
}

/* the loss as a double: a float32 torch.Tensor's item(), a float or an int;
 * 1, 0 (another kind: the Python path) or -1 */
static int loss_value(Core *c, PyObject *loss, double *out)
{
    if ((PyObject *)Py_TYPE(loss) == c->tensor_type) {
        PyObject *dt = fast_q(c, loss, Q_DTYPE);
        if (!dt)
            return -1;
        int f32 = dt == c->f32;
        Py_DECREF(dt);
        if (!f32)
            return 0;
        PyObject *v = PyObject_CallMethodObjArgs(loss, c->arm.s_item, NULL);
        if (!v)
            return -1;
        int ok = PyFloat_Check(v);
        *out = ok ? PyFloat_AsDouble(v) : 0;
        Py_DECREF(v);
        return ok;
    }
    if (PyFloat_CheckExact(loss) || PyLong_CheckExact(loss)) {
        *out = PyFloat_AsDouble(loss);
        return *out == -1.0 && PyErr_Occurred() ? -1 : 1;
    }
    return 0;
}

/* a float32 CUDA tensor of one element, which the library reads after
 * the step (divtrace_step_end_async: no wait, as loss.item() would take):
 * 1 (*p, *stream set), 0 or -1 */
static int loss_on_device(Core *c, PyObject *loss, const float **p, void **stream)
{
    if ((PyObject *)Py_TYPE(loss) != c->tensor_type || !c->arm.step_end_async)
        return 0;
    struct tinfo ti;
    if (fast_tinfo(c, loss, &ti) < 0)
        return -1;
    int r = 0;
    long long n, s;
    if (ti.fits && ti.cuda) {
        if (fast_tinfo_numel(&ti, &n) < 0)
            r = -1;
        else if (n == 1)
            r = fast_tinfo_stream(c, &ti, &s) < 0 ? -1 : 1;
    }
    fast_tinfo_done(&ti);
    if (r == 1) {
        *p = (const float *)ti.data;
        *stream = (void *)(intptr_t)s;
    }
    return r;
}

PyObject *fast_end_step(Core *c, PyObject *loss)
{
    if (!c->arm.on || !c->arm.end || c->paused || !c->in_step)
        Py_RETURN_NONE;
    double v = 0;
    const float *dl = NULL;
    void *ds = NULL;
    int r = loss_on_device(c, loss, &dl, &ds);
    if (r < 0)
        return NULL;
    if (!r && (r = loss_value(c, loss, &v)) <= 0)
        return r < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *f = fast_flush_point(c, 0);
    if (f != Py_None)
        return f; /* NULL, or what the Recorder's flush_failed raises */
    Py_DECREF(f);
    int rc = dl ? c->arm.step_end_async(c->h, dl, ds) : c->arm.step_end(c->h, v);
    if (dl && rc >= 0) {
        /* read later: the loss kept until the next step's end, the step's
         * tensors until the next step's begin */
        Py_INCREF(loss);
        SETREF(c->prev_loss, loss);
        Py_INCREF(c->keep);
        SETREF(c->keep_prev, c->keep);
    }
    c->in_step = 0;
    c->last_nrec = c->nrec;
    c->last_ndef = c->ndef;
    if (fast_reset_state(c) < 0)
        return NULL;
    if (rc >= 0)
        c->arm.steps++;
    return PyLong_FromLong(rc);
}
