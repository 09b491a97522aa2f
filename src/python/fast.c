/* fast.c: divtrace._fast, the C core of the PyTorch adapter: a Recorder's
 * per-step state (the Core type) and the module (a module's forward hook
 * and its wrapped forward are in fast_hooks.c). The core does what
 * _core.py's PyCore does, without the
 * interpreter between the tensor queries (fast_paths.c; fast.h). The
 * library is called through the function pointers ctypes found, so this
 * module links neither libdivtrace nor libpython; it is built against
 * Python's limited API (3.10 and later: one binary for every such
 * Python). */
#include "fast.h"

static PyObject *S_addressof;
static PyObject *ctypes_addressof; /* ctypes.addressof */

/* ---- the Core type ---- */

/* the struct arm's objects, for traverse and clear */
#define ARM_OBJECTS(a)                                                                              \
    { &(a)->fail, &(a)->flush_failed, &(a)->root_slow, &(a)->begin_params, &(a)->record_input,     \
      &(a)->opt_pre_slow, &(a)->opt_post_slow, &(a)->params, &(a)->param_names, &(a)->updates,     \
      &(a)->input_idx, &(a)->input_names, &(a)->input_type, &(a)->root_key, &(a)->s_item, &(a)->param_set }
#define NARM 16

static PyTypeObject *CoreType;

static void core_clear_slots(Core *c)
{
    for (Py_ssize_t i = 0; i < c->nslots; i++) {
        Py_CLEAR(c->slots[i].name);
        Py_CLEAR(c->slots[i].type);
        Py_CLEAR(c->slots[i].shape);
    }
    PyMem_Free(c->slots);
    c->slots = NULL;
    c->nslots = 0;
    for (int g = 0; g < NGROUPS; g++) {
        Py_CLEAR(c->groups[g].shapes);
        Py_CLEAR(c->groups[g].owners);
    }
}

int fast_reset_state(Core *c)
{
    PyObject *used = PySet_New(NULL), *calls = PyDict_New(), *keep = PyList_New(0), *watch = PyList_New(0);
    if (!used || !calls || !keep || !watch) {
        Py_XDECREF(used);
        Py_XDECREF(calls);
        Py_XDECREF(keep);
        Py_XDECREF(watch);
        return -1;
    }
    SETREF(c->used, used);
    SETREF(c->calls, calls);
    SETREF(c->keep, keep);
    SETREF(c->watch, watch);
    c->nrec = c->ndef = c->pend0 = 0;
    c->pend_stream = 0;
    c->params_reserved = 0;
    return 0;
}

int fast_used(Core *c, PyObject *name)
{
    if (c->params_reserved) {
        int r = PySet_Contains(c->arm.param_set, name);
        if (r)
            return r;
    }
    return PySet_Contains(c->used, name);
}

/* used with the reserved parameter names in it (for the Recorder's own
 * naming): 0 or -1 */
static int used_whole(Core *c)
{
    if (!c->params_reserved)
        return 0;
    for (Py_ssize_t i = 0, n = PyTuple_Size(c->arm.param_names); i < n; i++)
        if (PySet_Add(c->used, PyTuple_GetItem(c->arm.param_names, i)) < 0)
            return -1;
    c->params_reserved = 0;
    return 0;
}

static int core_init(PyObject *self, PyObject *args, PyObject *kw)
{
    Core *c = (Core *)self;
    PyObject *f32, *strided, *tt, *rs, *ge;
    if (kw && PyDict_Size(kw)) {
        PyErr_SetString(PyExc_TypeError, "Core() takes no keyword arguments");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "OOOOO:Core", &f32, &strided, &tt, &rs, &ge))
        return -1;
    Py_INCREF(f32);
    SETREF(c->f32, f32);
    Py_INCREF(strided);
    SETREF(c->strided, strided);
    Py_INCREF(tt);
    SETREF(c->tensor_type, tt);
    Py_INCREF(rs);
    SETREF(c->raw_stream, rs);
    Py_INCREF(ge);
    SETREF(c->grad_on, ge);
    /* torch.Tensor's descriptors: a data descriptor's getter, or a method */
    for (int k = 0; k < NQ; k++) {
        PyObject *d = PyObject_GetAttr(tt, fast_qstr[k]);
        if (!d) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                return -1;
            PyErr_Clear(); /* a query this torch lacks (_cdata): getattr, which fails if it is asked */
            SETREF(c->qd[k], NULL);
            c->qget[k] = NULL;
            continue;
        }
        descrgetfunc get = (descrgetfunc)PyType_GetSlot(Py_TYPE(d), Py_tp_descr_get);
        int data = PyType_GetSlot(Py_TYPE(d), Py_tp_descr_set) != NULL;
        if ((k < Q_FIRST_METHOD) != data || !get) {
            Py_DECREF(d); /* not what torch has: every query takes getattr */
            d = NULL;
        }
        SETREF(c->qd[k], d);
        c->qget[k] = k < Q_FIRST_METHOD ? get : NULL;
    }
    return fast_reset_state(c);
}

static int core_traverse(PyObject *self, visitproc visit, void *arg)
{
    Core *c = (Core *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(c->f32);
    Py_VISIT(c->strided);
    Py_VISIT(c->tensor_type);
    Py_VISIT(c->raw_stream);
    Py_VISIT(c->grad_on);
    Py_VISIT(c->used);
    Py_VISIT(c->calls);
    Py_VISIT(c->keep);
    Py_VISIT(c->keep_prev);
    Py_VISIT(c->prev_loss);
    Py_VISIT(c->watch);
    Py_VISIT(c->lib_refs);
    for (int g = 0; g < NGROUPS; g++)
        Py_VISIT(c->groups[g].owners);
    PyObject **arm[NARM] = ARM_OBJECTS(&c->arm);
    for (int i = 0; i < NARM; i++)
        Py_VISIT(*arm[i]);
    for (int k = 0; k < NQ; k++)
        Py_VISIT(c->qd[k]);
    for (int i = 0; i < NTYPES; i++) {
        Py_VISIT(c->ok_types[i]);
        Py_VISIT(c->bad_types[i]);
    }
    return 0;
}

static int core_clear(PyObject *self)
{
    Core *c = (Core *)self;
    Py_CLEAR(c->f32);
    Py_CLEAR(c->strided);
    Py_CLEAR(c->tensor_type);
    Py_CLEAR(c->raw_stream);
    Py_CLEAR(c->grad_on);
    Py_CLEAR(c->used);
    Py_CLEAR(c->calls);
    Py_CLEAR(c->keep);
    Py_CLEAR(c->keep_prev);
    Py_CLEAR(c->prev_loss);
    Py_CLEAR(c->watch);
    Py_CLEAR(c->lib_refs);
    core_clear_slots(c);
    PyObject **arm[NARM] = ARM_OBJECTS(&c->arm);
    for (int i = 0; i < NARM; i++)
        Py_CLEAR(*arm[i]);
    c->arm.on = 0;
    for (int k = 0; k < NQ; k++)
        Py_CLEAR(c->qd[k]);
    for (int i = 0; i < NTYPES; i++) {
        Py_CLEAR(c->ok_types[i]);
        Py_CLEAR(c->bad_types[i]);
    }
    return 0;
}

/* The dealloc of an object of one of this module's (heap, GC) types. */
void fast_gc_dealloc(PyObject *self, inquiry clear)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    clear(self);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static void core_dealloc(PyObject *self)
{
    fast_gc_dealloc(self, core_clear);
}

/* a ctypes object's address, or the address a ctypes function pointer holds */
static int address_of(PyObject *o, void **out)
{
    PyObject *a = PyObject_CallFunctionObjArgs(ctypes_addressof, o, NULL);
    if (!a)
        return -1;
    void *p = PyLong_AsVoidPtr(a);
    Py_DECREF(a);
    if (!p && PyErr_Occurred())
        return -1;
    *out = p;
    return 0;
}

/* a ctypes function object's C function: the pointer stored at its address */
static int function_of(PyObject *f, void **out)
{
    void *at;
    if (address_of(f, &at) < 0)
        return -1;
    memcpy(out, at, sizeof *out);
    if (!*out) {
        PyErr_SetString(PyExc_ValueError, "Core.fix: a NULL library function");
        return -1;
    }
    return 0;
}

static PyObject *core_fix(PyObject *self, PyObject *args)
{
    Core *c = (Core *)self;
    PyObject *handle, *many, *flush, *slots, *deferrable, *ts, *ptrs;
    Py_ssize_t ts_size;
    if (!PyArg_ParseTuple(args, "OOOOOOnO:fix", &handle, &many, &flush, &slots, &deferrable, &ts, &ts_size,
                          &ptrs))
        return NULL;
    if (ts_size != (Py_ssize_t)sizeof(struct divtrace_tensor)) {
        PyErr_Format(PyExc_ValueError, "Core.fix: struct divtrace_tensor is %zd bytes here, %zd in ctypes",
                     (Py_ssize_t)sizeof(struct divtrace_tensor), ts_size);
        return NULL;
    }
    PyObject *sl = PySequence_Tuple(slots), *df = PySequence_Tuple(deferrable);
    if (!sl || !df)
        goto fail;
    Py_ssize_t n = PyTuple_Size(sl);
    if (PyTuple_Size(df) < n) {
        PyErr_SetString(PyExc_ValueError, "Core.fix: fewer deferrable flags than slots");
        goto fail;
    }
    void *hv, *mf, *ff, *tsa, *pa;
    PyObject *hvalue = PyObject_GetAttrString(handle, "value");
    if (!hvalue)
        goto fail;
    hv = hvalue == Py_None ? NULL : PyLong_AsVoidPtr(hvalue);
    Py_DECREF(hvalue);
    if (PyErr_Occurred() || function_of(many, &mf) < 0 || function_of(flush, &ff) < 0 ||
        address_of(ts, &tsa) < 0 || address_of(ptrs, &pa) < 0)
        goto fail;
    struct slot *s = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof *s);
    if (!s) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PyTuple_GetItem(sl, i);
        PyObject *name, *type, *shape;
        int kind;
        int d = PyObject_IsTrue(PyTuple_GetItem(df, i));
        if (d < 0 || !PyArg_ParseTuple(e, "OOiO:slot", &name, &type, &kind, &shape)) {
            for (Py_ssize_t j = 0; j < i; j++) {
                Py_DECREF(s[j].name);
                Py_DECREF(s[j].type);
                Py_DECREF(s[j].shape);
            }
            PyMem_Free(s);
            goto fail;
        }
        Py_INCREF(name);
        Py_INCREF(type);
        Py_INCREF(shape);
        s[i] = (struct slot){name, type, shape, kind, d};
    }
    PyObject *refs = PyTuple_Pack(5, handle, many, flush, ts, ptrs);
    if (!refs) {
        for (Py_ssize_t j = 0; j < n; j++) {
            Py_DECREF(s[j].name);
            Py_DECREF(s[j].type);
            Py_DECREF(s[j].shape);
        }
        PyMem_Free(s);
        goto fail;
    }
    core_clear_slots(c);
    c->slots = s;
    c->nslots = n;
    SETREF(c->lib_refs, refs);
    c->h = hv;
    c->many = (record_many_fn)mf;
    c->flush = (flush_fn)ff;
    c->ts = (const char *)tsa;
    c->ts_size = ts_size;
    c->ptrs = (void **)pa;
    Py_DECREF(sl);
    Py_DECREF(df);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(sl);
    Py_XDECREF(df);
    return NULL;
}

static PyObject *core_add_group(PyObject *self, PyObject *args)
{
    Core *c = (Core *)self;
    int gid, d;
    Py_ssize_t k0;
    PyObject *shapes, *owners, *dobj;
    if (!PyArg_ParseTuple(args, "inOOO:add_group", &gid, &k0, &shapes, &owners, &dobj))
        return NULL;
    if (gid < 0 || gid >= NGROUPS) {
        PyErr_Format(PyExc_ValueError, "Core.add_group: group %d (0 to %d)", gid, NGROUPS - 1);
        return NULL;
    }
    if ((d = PyObject_IsTrue(dobj)) < 0)
        return NULL;
    PyObject *sh = PySequence_Tuple(shapes), *ow = PySequence_Tuple(owners);
    if (!sh || !ow) {
        Py_XDECREF(sh);
        Py_XDECREF(ow);
        return NULL;
    }
    Py_ssize_t n = PyTuple_Size(sh);
    if (PyTuple_Size(ow) != n || k0 < 0 || k0 + n > c->nslots) {
        PyErr_Format(PyExc_ValueError, "Core.add_group: slots %zd + %zd of %zd, %zd owners", k0, n, c->nslots,
                     PyTuple_Size(ow));
        Py_DECREF(sh);
        Py_DECREF(ow);
        return NULL;
    }
    struct group *g = &c->groups[gid];
    SETREF(g->shapes, sh);
    SETREF(g->owners, ow);
    g->k0 = k0;
    g->n = n;
    g->deferrable = d;
    Py_RETURN_NONE;
}

static PyObject *ret_int(int r)
{
    return r == PYERR ? NULL : PyLong_FromLong(r);
}

/* reset(): the Recorder's step end with a wait (the library wrote any
 * step ended before without one), its open and its close: nothing of a
 * step is held past it */
static PyObject *core_reset(PyObject *self, PyObject *unused)
{
    (void)unused;
    Core *c = (Core *)self;
    if (fast_reset_state(c) < 0)
        return NULL;
    Py_CLEAR(c->keep_prev);
    Py_CLEAR(c->prev_loss);
    Py_RETURN_NONE;
}

/* a step begun (divtrace_step_begin returned): the step before's device
 * records are read, its kept tensors may go */
static PyObject *core_begun(PyObject *self, PyObject *unused)
{
    (void)unused;
    Py_CLEAR(((Core *)self)->keep_prev);
    Py_RETURN_NONE;
}

static int need_fixed(Core *c, const char *fn)
{
    if (c->many)
        return 0;
    PyErr_Format(PyExc_RuntimeError, "Core.%s before Core.fix", fn);
    return -1;
}

static PyObject *core_push(PyObject *self, PyObject *unused)
{
    (void)unused;
    Core *c = (Core *)self;
    if (need_fixed(c, "push") < 0)
        return NULL;
    return ret_int(fast_push(c));
}

static PyObject *core_buffer(PyObject *self, PyObject *args)
{
    Core *c = (Core *)self;
    Py_ssize_t k;
    PyObject *t;
    if (!PyArg_ParseTuple(args, "nO:buffer", &k, &t) || need_fixed(c, "buffer") < 0)
        return NULL;
    if (k < 0 || k >= c->nslots) {
        PyErr_Format(PyExc_IndexError, "Core.buffer: slot %zd of %zd", k, c->nslots);
        return NULL;
    }
    return ret_int(fast_buffer(c, k, t));
}

static PyObject *core_try_defer(PyObject *self, PyObject *args)
{
    Core *c = (Core *)self;
    PyObject *name, *type, *t;
    int kind;
    if (!PyArg_ParseTuple(args, "OOiO:try_defer", &name, &type, &kind, &t))
        return NULL;
    return ret_int(fast_try_defer(c, name, type, kind, t));
}

static PyObject *core_group(PyObject *self, PyObject *args)
{
    int gid;
    PyObject *ts, *os;
    if (!PyArg_ParseTuple(args, "iOO:group", &gid, &ts, &os))
        return NULL;
    return ret_int(fast_group((Core *)self, gid, ts, os, 1));
}

static PyObject *core_grads(PyObject *self, PyObject *args)
{
    int gid;
    PyObject *ps;
    if (!PyArg_ParseTuple(args, "iO:grads", &gid, &ps))
        return NULL;
    return ret_int(fast_grads((Core *)self, gid, ps, 1));
}

/* PyCore.flush_point: None, ("changed", slot) or ("lib", status); NULL
 * with an exception set */
PyObject *fast_flush_point(Core *c, int flush)
{
    Py_ssize_t n = PyList_Size(c->watch);
    if (n <= 0 && c->nrec == c->pend0)
        Py_RETURN_NONE;
    PyObject *watch = c->watch, *fresh = PyList_New(0);
    if (!fresh)
        return NULL;
    c->watch = fresh;
    PyObject *ret = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PyList_GetItem(watch, i);
        PyObject *v = fast_q(c, PyTuple_GetItem(e, 1), Q_VERSION);
        if (!v)
            goto out;
        int same = PyObject_RichCompareBool(v, PyTuple_GetItem(e, 2), Py_EQ);
        Py_DECREF(v);
        if (same < 0)
            goto out;
        if (!same) {
            ret = Py_BuildValue("(sO)", "changed", PyTuple_GetItem(e, 0));
            goto out;
        }
    }
    int rc = fast_push(c);
    if (rc >= 0 && flush)
        rc = c->flush(c->h);
    if (rc < 0)
        ret = Py_BuildValue("(si)", "lib", rc);
    else
        ret = Py_NewRef(Py_None);
out:
    Py_DECREF(watch);
    return ret;
}

static PyObject *core_flush_point(PyObject *self, PyObject *arg)
{
    Core *c = (Core *)self;
    int flush = PyObject_IsTrue(arg);
    if (flush < 0 || need_fixed(c, "flush_point") < 0)
        return NULL;
    return fast_flush_point(c, flush);
}

/* a group (or the gradients, params given) and a flush point after it: 1
 * (recorded and flushed), 0 (nothing recorded), a negative status, or
 * flush_point's ("changed", slot) or ("lib", status) */
PyObject *fast_group_then_flush(Core *c, int gid, PyObject *tensors, PyObject *owners, PyObject *params)
{
    if (need_fixed(c, "group_flush") < 0)
        return NULL;
    int r = params ? fast_grads(c, gid, params, 0) : fast_group(c, gid, tensors, owners, 0);
    if (r != 1)
        return ret_int(r);
    PyObject *f = fast_flush_point(c, 1);
    if (f != Py_None)
        return f;
    Py_DECREF(f);
    return PyLong_FromLong(1);
}

static PyObject *core_group_flush(PyObject *self, PyObject *args)
{
    int gid;
    PyObject *ts, *os;
    if (!PyArg_ParseTuple(args, "iOO:group_flush", &gid, &ts, &os))
        return NULL;
    return fast_group_then_flush((Core *)self, gid, ts, os, NULL);
}

static PyObject *core_grads_flush(PyObject *self, PyObject *args)
{
    int gid;
    PyObject *ps;
    if (!PyArg_ParseTuple(args, "iO:grads_flush", &gid, &ps))
        return NULL;
    return fast_group_then_flush((Core *)self, gid, NULL, NULL, ps);
}


/* use_shim(functions, constants, stream, samples): take PyTorch's C shim
 * for the tensor queries (fast.h): functions, the addresses of
 * aoti_torch_get_dtype, _get_layout, _get_device_type, _get_device_index,
 * _is_contiguous, _get_dim, _get_sizes, _get_data_ptr; constants, the
 * codes of float32, strided, the cpu and cuda; stream, the address of
 * aoti_torch_get_current_cuda_stream or 0. Taken only if its answers for
 * every tensor of samples are the Python queries'. functions None: the
 * Python queries. Returns whether the shim is taken. */
static PyObject *core_use_shim(PyObject *self, PyObject *args)
{
    Core *c = (Core *)self;
    PyObject *fns, *consts, *stream, *samples;
    if (!PyArg_ParseTuple(args, "OOOO:use_shim", &fns, &consts, &stream, &samples))
        return NULL;
    c->use_shim = 0;
    if (fns == Py_None)
        Py_RETURN_FALSE;
    void *f[8];
    long long k[4];
    if (!PyTuple_Check(fns) || PyTuple_Size(fns) != 8 || !PyTuple_Check(consts) || PyTuple_Size(consts) != 4) {
        PyErr_SetString(PyExc_TypeError, "Core.use_shim: 8 function addresses and 4 constants");
        return NULL;
    }
    for (int i = 0; i < 8; i++)
        if (!(f[i] = PyLong_AsVoidPtr(PyTuple_GetItem(fns, i)))) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "Core.use_shim: a NULL function");
            return NULL;
        }
    for (int i = 0; i < 4; i++)
        if ((k[i] = PyLong_AsLongLong(PyTuple_GetItem(consts, i))) == -1 && PyErr_Occurred())
            return NULL;
    void *sf = stream == Py_None ? NULL : PyLong_AsVoidPtr(stream);
    if (!sf && PyErr_Occurred())
        return NULL;
    PyObject *seq = PySequence_Tuple(samples);
    if (!seq)
        return NULL;
    c->shim = (struct shim){
        (shim_i32_fn)f[0], (shim_i32_fn)f[1], (shim_i32_fn)f[2], (shim_i32_fn)f[3],
        (shim_bool_fn)f[4], (shim_i64_fn)f[5], (shim_sizes_fn)f[6], (shim_ptr_fn)f[7],
        (shim_stream_fn)sf, (int32_t)k[0], (int32_t)k[1], (int32_t)k[2], (int32_t)k[3], 0,
    };
    c->use_shim = 1;
    int agree = PyTuple_Size(seq) > 0;
    for (Py_ssize_t i = 0; agree == 1 && i < PyTuple_Size(seq); i++)
        agree = fast_shim_agrees(c, PyTuple_GetItem(seq, i));
    Py_DECREF(seq);
    c->use_shim = agree == 1;
    if (agree == PYERR)
        return NULL;
    return PyBool_FromLong(c->use_shim);
}


/* paths(fail, flush_failed, root_slow, begin_params, record_input,
 * opt_pre_slow, opt_post_slow): the Recorder's methods the fast paths fall
 * back on (fast_step.c), given when the hooks are installed */
static PyObject *core_paths(PyObject *self, PyObject *args)
{
    struct arm *a = &((Core *)self)->arm;
    PyObject *f[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO:paths", &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6]))
        return NULL;
    for (int i = 0; i < 7; i++)
        if (!PyCallable_Check(f[i])) {
            PyErr_SetString(PyExc_TypeError, "Core.paths: every argument must be callable");
            return NULL;
        }
    PyObject **dst[7] = {&a->fail, &a->flush_failed, &a->root_slow, &a->begin_params, &a->record_input,
                         &a->opt_pre_slow, &a->opt_post_slow};
    for (int i = 0; i < 7; i++)
        SETREF(*dst[i], Py_NewRef(f[i]));
    Py_RETURN_NONE;
}

/* arm(step_begin, step_end, step_end_async, params, param_names,
 * updates, input_idx, input_names, checkpoint_every, end): after the first
 * step, the fast paths on (step_begin, step_end, step_end_async: the
 * library's ctypes functions; end: whether end_step may end a step) */
static PyObject *core_arm(PyObject *self, PyObject *args)
{
    Core *c = (Core *)self;
    struct arm *a = &c->arm;
    PyObject *sb, *se, *sd, *ps, *pn, *up, *ii, *in;
    long every;
    int end;
    if (!PyArg_ParseTuple(args, "OOOOOOOOlp:arm", &sb, &se, &sd, &ps, &pn, &up, &ii, &in, &every, &end))
        return NULL;
    if (!a->fail || !c->many) {
        PyErr_SetString(PyExc_RuntimeError, "Core.arm before Core.paths and Core.fix");
        return NULL;
    }
    void *fb, *fe, *fd;
    PyObject *t[5] = {PySequence_Tuple(ps), PySequence_Tuple(pn), PySequence_Tuple(up), PySequence_Tuple(ii),
                      PySequence_Tuple(in)};
    PyObject *refs = NULL;
    if (!t[0] || !t[1] || !t[2] || !t[3] || !t[4] || function_of(sb, &fb) < 0 || function_of(se, &fe) < 0 ||
        function_of(sd, &fd) < 0)
        goto fail;
    if (PyTuple_Size(t[3]) != PyTuple_Size(t[4])) {
        PyErr_SetString(PyExc_ValueError, "Core.arm: as many input names as input places");
        goto fail;
    }
    if (!(refs = PyTuple_Pack(4, c->lib_refs, sb, se, sd)))
        goto fail;
    SETREF(c->lib_refs, refs);
    SETREF(a->params, t[0]);
    PyObject *fs = PyFrozenSet_New(t[1]);
    if (!fs)
        goto fail;
    SETREF(a->param_set, fs);
    SETREF(a->param_names, t[1]);
    SETREF(a->updates, t[2]);
    SETREF(a->input_idx, t[3]);
    SETREF(a->input_names, t[4]);
    if ((!a->input_type && !(a->input_type = PyBytes_FromString("input"))) ||
        (!a->root_key && !(a->root_key = PyUnicode_FromString(""))) ||
        (!a->s_item && !(a->s_item = PyUnicode_InternFromString("item"))))
        return NULL;
    a->step_begin = (int (*)(void *, uint64_t))fb;
    a->step_end = (int (*)(void *, double))fe;
    a->step_end_async = (int (*)(void *, const float *, void *))fd;
    a->ckpt_every = every;
    a->end = end;
    a->on = 1;
    Py_RETURN_NONE;
fail:
    for (int i = 0; i < 5; i++)
        Py_XDECREF(t[i]);
    return NULL;
}

/* the fast paths' entries, as the hooks are called: (module or optimizer,
 * args, kwargs) */
static int three(PyObject *const *args, Py_ssize_t n, const char *fn)
{
    if (n == 3)
        return 0;
    PyErr_Format(PyExc_TypeError, "Core.%s takes 3 arguments (%zd given)", fn, n);
    return -1;
}

static PyObject *core_root_pre(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    return three(args, n, "root_pre") < 0 ? NULL : fast_root_pre((Core *)self, args[0], args[1], args[2]);
}

static PyObject *core_opt_pre(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    return three(args, n, "opt_pre") < 0 ? NULL : fast_opt_pre((Core *)self, args[0], args[1], args[2]);
}

static PyObject *core_opt_post(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    return three(args, n, "opt_post") < 0 ? NULL : fast_opt_post((Core *)self, args[0], args[1], args[2]);
}

static PyObject *core_end_step(PyObject *self, PyObject *loss)
{
    return fast_end_step((Core *)self, loss);
}

static PyObject *core_hook(PyObject *self, PyObject *args)
{
    return fast_hook_new((Core *)self, args);
}

static PyMethodDef core_methods[] = {
    {"reset", core_reset, METH_NOARGS, "Begin a step's state: nothing used, called, kept or watched."},
    {"begun", core_begun, METH_NOARGS, "A step was begun: the tensors the step before kept may go."},
    {"fix", core_fix, METH_VARARGS, "fix(handle, record_many, flush, slots, deferrable, ts, ts_size, ptrs)"},
    {"add_group", core_add_group, METH_VARARGS, "add_group(gid, k0, shapes, owners, deferrable)"},
    {"buffer", core_buffer, METH_VARARGS, "buffer(k, t) -> status"},
    {"push", core_push, METH_NOARGS, "push() -> status"},
    {"try_defer", core_try_defer, METH_VARARGS, "try_defer(name, type, kind, t) -> 1, 0 or status"},
    {"group", core_group, METH_VARARGS, "group(gid, tensors, owners) -> 1, 0 or status"},
    {"grads", core_grads, METH_VARARGS, "grads(gid, params) -> 1, 0 or status"},
    {"flush_point", core_flush_point, METH_O, "flush_point(flush) -> None, ('changed', k) or ('lib', status)"},
    {"group_flush", core_group_flush, METH_VARARGS,
     "group_flush(gid, tensors, owners) -> 1, 0, status, ('changed', k) or ('lib', status)"},
    {"grads_flush", core_grads_flush, METH_VARARGS,
     "grads_flush(gid, params) -> 1, 0, status, ('changed', k) or ('lib', status)"},
    {"hook", core_hook, METH_VARARGS, "hook(fallback, fail, mname, mtype) -> a forward hook"},
    {"use_shim", core_use_shim, METH_VARARGS, "use_shim(functions, constants, stream, samples) -> taken"},
    {"paths", core_paths, METH_VARARGS,
     "paths(fail, flush_failed, root_slow, begin_params, record_input, opt_pre_slow, opt_post_slow)"},
    {"arm", core_arm, METH_VARARGS,
     "arm(step_begin, step_end, step_end_async, params, param_names, updates, input_idx, input_names, "
     "checkpoint_every, end)"},
    {"root_pre", (PyCFunction)(void (*)(void))core_root_pre, METH_FASTCALL,
     "root_pre(module, args, kwargs): the root's step start and inputs"},
    {"opt_pre", (PyCFunction)(void (*)(void))core_opt_pre, METH_FASTCALL,
     "opt_pre(optimizer, args, kwargs): the gradients and a flush"},
    {"opt_post", (PyCFunction)(void (*)(void))core_opt_post, METH_FASTCALL,
     "opt_post(optimizer, args, kwargs): the updates and a flush"},
    {"end_step", core_end_step, METH_O,
     "end_step(loss) -> None (the Recorder's path), a status, or flush_point's ('changed', k) or ('lib', status)"},
    {NULL, NULL, 0, NULL},
};

/* attributes: the ints and flags by offset, the containers as objects */
enum { A_PAUSED, A_IN_STEP, A_DEFERRING, A_NO_GRAD, A_NREC, A_NDEF, A_PEND0, A_PEND_STREAM,
       A_STEPS, A_LAST_NREC, A_LAST_NDEF, A_USED, A_CALLS, A_KEEP, A_WATCH, A_KIND, A_SHIM };

static PyObject *core_get(PyObject *self, void *which)
{
    Core *c = (Core *)self;
    switch ((int)(intptr_t)which) {
    case A_PAUSED: return PyLong_FromLong(c->paused);
    case A_IN_STEP: return PyBool_FromLong(c->in_step);
    case A_DEFERRING: return PyBool_FromLong(c->deferring);
    case A_NO_GRAD: return PyBool_FromLong(c->record_no_grad);
    case A_NREC: return PyLong_FromSsize_t(c->nrec);
    case A_NDEF: return PyLong_FromSsize_t(c->ndef);
    case A_PEND0: return PyLong_FromSsize_t(c->pend0);
    case A_PEND_STREAM: return PyLong_FromLongLong(c->pend_stream);
    case A_STEPS: return PyLong_FromUnsignedLongLong(c->arm.steps);
    case A_LAST_NREC: return PyLong_FromSsize_t(c->last_nrec);
    case A_LAST_NDEF: return PyLong_FromSsize_t(c->last_ndef);
    case A_USED: return used_whole(c) < 0 ? NULL : Py_NewRef(c->used);
    case A_CALLS: return Py_NewRef(c->calls);
    case A_KEEP: return Py_NewRef(c->keep);
    case A_WATCH: return Py_NewRef(c->watch);
    case A_SHIM: return PyLong_FromLong(c->use_shim ? 1 + c->shim.cuda_ok : 0);
    default: return PyUnicode_FromString("c");
    }
}

static int core_set(PyObject *self, PyObject *v, void *which)
{
    Core *c = (Core *)self;
    int w = (int)(intptr_t)which;
    if (!v) {
        PyErr_SetString(PyExc_AttributeError, "Core attributes cannot be deleted");
        return -1;
    }
    if (w >= A_USED) {
        PyTypeObject *want = w == A_USED ? &PySet_Type : w == A_CALLS ? &PyDict_Type : &PyList_Type;
        if (!PyObject_TypeCheck(v, want)) {
            PyErr_Format(PyExc_TypeError, "Core: expected a %s", want == &PySet_Type ? "set"
                                                                  : want == &PyDict_Type ? "dict" : "list");
            return -1;
        }
        PyObject **f = w == A_USED ? &c->used : w == A_CALLS ? &c->calls : w == A_KEEP ? &c->keep : &c->watch;
        Py_INCREF(v);
        SETREF(*f, v);
        if (w == A_USED)
            c->params_reserved = 0; /* the set given is the step's whole */
        return 0;
    }
    long long x;
    if (w <= A_NO_GRAD) {
        int b = PyObject_IsTrue(v);
        if (b < 0)
            return -1;
        x = w == A_PAUSED ? PyLong_AsLongLong(v) : b;
    } else {
        x = PyLong_AsLongLong(v);
    }
    if (x == -1 && PyErr_Occurred())
        return -1;
    switch (w) {
    case A_PAUSED: c->paused = (int)x; break;
    case A_IN_STEP: c->in_step = (int)x; break;
    case A_DEFERRING: c->deferring = (int)x; break;
    case A_NO_GRAD: c->record_no_grad = (int)x; break;
    case A_NREC: c->nrec = (Py_ssize_t)x; break;
    case A_NDEF: c->ndef = (Py_ssize_t)x; break;
    case A_PEND0: c->pend0 = (Py_ssize_t)x; break;
    case A_STEPS: c->arm.steps = (uint64_t)x; break;
    case A_LAST_NREC: c->last_nrec = (Py_ssize_t)x; break;
    case A_LAST_NDEF: c->last_ndef = (Py_ssize_t)x; break;
    default: c->pend_stream = x; break;
    }
    return 0;
}

#define ATTR(n, w) {n, core_get, core_set, NULL, (void *)(intptr_t)(w)}
static PyGetSetDef core_getset[] = {
    ATTR("paused", A_PAUSED), ATTR("in_step", A_IN_STEP), ATTR("deferring", A_DEFERRING),
    ATTR("record_no_grad", A_NO_GRAD), ATTR("nrec", A_NREC), ATTR("ndef", A_NDEF), ATTR("pend0", A_PEND0),
    ATTR("pend_stream", A_PEND_STREAM), ATTR("steps", A_STEPS), ATTR("last_nrec", A_LAST_NREC),
    ATTR("last_ndef", A_LAST_NDEF), ATTR("used", A_USED), ATTR("calls", A_CALLS), ATTR("keep", A_KEEP),
    ATTR("watch", A_WATCH), {"kind", core_get, NULL, "'c'", (void *)(intptr_t)A_KIND},
    {"shim", core_get, NULL, "the tensor queries through PyTorch's C shim: 0 none, 1 host tensors, 2 device tensors too",
     (void *)(intptr_t)A_SHIM},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot core_slots[] = {
    {Py_tp_doc, "The C core of a Recorder (see _core.PyCore)."},
    {Py_tp_init, core_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, core_dealloc},
    {Py_tp_traverse, core_traverse},
    {Py_tp_clear, core_clear},
    {Py_tp_methods, core_methods},
    {Py_tp_getset, core_getset},
    {0, NULL},
};

static PyType_Spec core_spec = {"divtrace._fast.Core", sizeof(Core), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, core_slots};

/* ---- the module ---- */

static int intern(PyObject **s, const char *text)
{
    *s = PyUnicode_InternFromString(text);
    return *s ? 0 : -1;
}

static int fast_exec(PyObject *m)
{
    if (fast_paths_init() < 0 || intern(&S_addressof, "addressof") < 0)
        return -1;
    PyObject *ct = PyImport_ImportModule("ctypes");
    if (!ct)
        return -1;
    ctypes_addressof = PyObject_GetAttr(ct, S_addressof);
    Py_DECREF(ct);
    if (!ctypes_addressof)
        return -1;
    CoreType = (PyTypeObject *)PyType_FromSpec(&core_spec);
    if (!CoreType || fast_hooks_init(m) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "Core", (PyObject *)CoreType) < 0 ||
        PyModule_AddIntConstant(m, "API_VERSION", DIVTRACE_API_VERSION) < 0)
        return -1;
    return 0;
}

static PyModuleDef_Slot fast_slots[] = {{Py_mod_exec, fast_exec}, {0, NULL}};

static struct PyModuleDef fast_module = {
    PyModuleDef_HEAD_INIT, "divtrace._fast",
    "The PyTorch adapter's C core (see _core.py).", 0, NULL, fast_slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fast(void); /* the one exported symbol */

PyMODINIT_FUNC PyInit__fast(void)
{
    return PyModuleDef_Init(&fast_module);
}
