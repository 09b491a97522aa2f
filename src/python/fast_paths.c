/* fast_paths.c: the C core's tensor queries and the paths every step after
 * the first takes (a deferred record, a group, the library calls), as
 * _core.py's PyCore has them (see fast.h). */
#include "fast.h"

static const char *const qname[NQ] = {"dtype", "layout", "shape", "is_cuda", "is_cpu", "_version", "grad",
                                      "requires_grad", "_cdata", "is_contiguous", "get_device", "data_ptr"};
PyObject *fast_qstr[NQ];

int fast_paths_init(void)
{
    for (int k = 0; k < NQ; k++)
        if (!(fast_qstr[k] = PyUnicode_InternFromString(qname[k])))
            return -1;
    return 0;
}

/* ---- tensor queries ----
 *
 * Every query of a tensor's attribute or no-argument method goes through
 * fast_q(). For a tensor whose type resolves each query to torch.Tensor's own
 * descriptor (torch.Tensor and nn.Parameter do), fast_q() calls the descriptor
 * directly: the result is getattr's, without the lookup and the bound
 * method. Any other type (a subclass that overrides one) takes getattr. */

/* 1 when type tp resolves every query to the descriptors in c->qd */
static int type_is_plain(Core *c, PyTypeObject *tp)
{
    for (int i = 0; i < NTYPES && c->ok_types[i]; i++)
        if (c->ok_types[i] == (PyObject *)tp)
            return 1;
    for (int i = 0; i < NTYPES && c->bad_types[i]; i++)
        if (c->bad_types[i] == (PyObject *)tp)
            return 0;
    int plain = 1;
    for (int k = 0; k < NQ && plain; k++) {
        if (!c->qd[k])
            continue; /* a query torch.Tensor does not resolve as expected: getattr, whatever the type */
        PyObject *d = PyObject_GetAttr((PyObject *)tp, fast_qstr[k]);
        if (!d) {
            PyErr_Clear();
            plain = 0;
            break;
        }
        plain = d == c->qd[k];
        Py_DECREF(d);
    }
    PyObject **list = plain ? c->ok_types : c->bad_types;
    for (int i = 0; i < NTYPES; i++)
        if (!list[i]) {
            Py_INCREF(tp);
            list[i] = (PyObject *)tp;
            break;
        }
    return plain;
}

/* getattr(o, qname[k]), called when it is a method (a new reference) */
PyObject *fast_q(Core *c, PyObject *o, int k)
{
    if (c->qd[k] && type_is_plain(c, Py_TYPE(o))) {
        if (c->qget[k])
            return c->qget[k](c->qd[k], o, (PyObject *)Py_TYPE(o));
        return PyObject_CallFunctionObjArgs(c->qd[k], o, NULL);
    }
    PyObject *v = PyObject_GetAttr(o, fast_qstr[k]);
    if (!v || k < Q_FIRST_METHOD)
        return v;
    PyObject *r = PyObject_CallNoArgs(v);
    Py_DECREF(v);
    return r;
}

/* 1 when query k of o is want (identity), 0 when not, PYERR */
static int q_is(Core *c, PyObject *o, int k, PyObject *want)
{
    PyObject *v = fast_q(c, o, k);
    if (!v)
        return PYERR;
    int r = v == want;
    Py_DECREF(v);
    return r;
}

/* an int attribute or no-argument method's value, as long long */
static int int_of(PyObject *v, long long *out)
{
    if (!v)
        return PYERR;
    long long x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred())
        return PYERR;
    *out = x;
    return 0;
}

/* t is float32 and strided: 1, 0 or PYERR (its shape and contiguity are
 * the callers' to check, in PyCore's order) */
static int tensor_fits(Core *c, PyObject *t)
{
    int r = q_is(c, t, Q_DTYPE, c->f32);
    if (r != 1)
        return r;
    return q_is(c, t, Q_LAYOUT, c->strided);
}

static int is_contiguous(Core *c, PyObject *t)
{
    PyObject *v = fast_q(c, t, Q_IS_CONTIGUOUS);
    if (!v)
        return PYERR;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r < 0 ? PYERR : r;
}

/* the tensor's stream (HOST_RUN for a host tensor), as PyCore._stream */
static int stream_of(Core *c, PyObject *t, long long *out)
{
    int cuda = q_is(c, t, Q_IS_CUDA, Py_True);
    if (cuda < 0)
        return PYERR;
    if (!cuda) {
        *out = HOST_RUN;
        return 0;
    }
    PyObject *dev = fast_q(c, t, Q_GET_DEVICE);
    if (!dev)
        return PYERR;
    PyObject *s = PyObject_CallFunctionObjArgs(c->raw_stream, dev, NULL);
    Py_DECREF(dev);
    return int_of(s, out);
}

static int data_ptr(Core *c, PyObject *t, void **out)
{
    PyObject *v = fast_q(c, t, Q_DATA_PTR);
    if (!v)
        return PYERR;
    void *p = PyLong_AsVoidPtr(v);
    Py_DECREF(v);
    if (!p && PyErr_Occurred())
        return PYERR;
    *out = p;
    return 0;
}

/* ---- what a record needs of a tensor ---- */

static int tinfo_shim(Core *c, PyObject *t, struct tinfo *ti);

void fast_tinfo_done(struct tinfo *ti)
{
    Py_CLEAR(ti->shape);
}

/* through the Python queries, in PyCore's order, stopping at the first
 * that does not fit */
static int tinfo_python(Core *c, PyObject *t, struct tinfo *ti)
{
    int r = tensor_fits(c, t);
    if (r != 1)
        return r < 0 ? PYERR : 0;
    if ((r = q_is(c, t, Q_IS_CUDA, Py_True)) < 0)
        return PYERR;
    ti->cuda = r;
    if (!r && (r = q_is(c, t, Q_IS_CPU, Py_True)) != 1)
        return r < 0 ? PYERR : 0;
    if ((r = is_contiguous(c, t)) != 1)
        return r < 0 ? PYERR : 0;
    if (!(ti->shape = fast_q(c, t, Q_SHAPE)))
        return PYERR;
    if (data_ptr(c, t, &ti->data) < 0)
        return PYERR;
    if (ti->cuda) {
        long long dev;
        if (int_of(fast_q(c, t, Q_GET_DEVICE), &dev) < 0)
            return PYERR;
        ti->dev = (int32_t)dev;
    }
    ti->fits = 1;
    return 0;
}

int fast_tinfo(Core *c, PyObject *t, struct tinfo *ti)
{
    memset(ti, 0, sizeof *ti);
    int r = tinfo_shim(c, t, ti);
    if (r != 0)
        return r == 1 ? 0 : PYERR;
    r = tinfo_python(c, t, ti);
    if (r < 0 || !ti->fits)
        fast_tinfo_done(ti);
    return r;
}

/* whether a tensor of this info has shape (a torch.Size): 1, 0 or PYERR */
static int tinfo_shape_is(const struct tinfo *ti, PyObject *shape)
{
    if (ti->shape) {
        int r = PyObject_RichCompareBool(ti->shape, shape, Py_EQ);
        return r < 0 ? PYERR : r;
    }
    Py_ssize_t n = PyTuple_Size(shape);
    if (n < 0)
        return PYERR;
    if (n != ti->ndim)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long d = PyLong_AsLongLong(PyTuple_GetItem(shape, i));
        if (d == -1 && PyErr_Occurred())
            return PYERR;
        if (d != ti->sizes[i])
            return 0;
    }
    return 1;
}

int fast_tinfo_numel(const struct tinfo *ti, long long *out)
{
    long long n = 1;
    if (ti->shape) {
        Py_ssize_t nd = PyTuple_Size(ti->shape);
        if (nd < 0)
            return PYERR;
        for (Py_ssize_t i = 0; i < nd; i++) {
            long long d = PyLong_AsLongLong(PyTuple_GetItem(ti->shape, i));
            if (d == -1 && PyErr_Occurred())
                return PYERR;
            n *= d;
        }
    } else {
        for (int64_t i = 0; i < ti->ndim; i++)
            n *= ti->sizes[i];
    }
    *out = n;
    return 0;
}

/* the current stream of a tensor of this info (HOST_RUN on the host) */
int fast_tinfo_stream(Core *c, const struct tinfo *ti, long long *out)
{
    if (!ti->cuda) {
        *out = HOST_RUN;
        return 0;
    }
    if (c->use_shim && c->shim.stream) {
        void *s;
        if (c->shim.stream(ti->dev, &s) == 0) {
            *out = (long long)(intptr_t)s;
            return 0;
        }
    }
    PyObject *dev = PyLong_FromLong(ti->dev);
    if (!dev)
        return PYERR;
    PyObject *s = PyObject_CallFunctionObjArgs(c->raw_stream, dev, NULL);
    Py_DECREF(dev);
    return int_of(s, out);
}

/* ---- the shim ---- */

/* 1: ti filled through the shim; 0: not for t (no shim, a type that is not
 * plain, a shim call that failed): the Python queries; PYERR. Whether a
 * cuda tensor's answers are trusted is the caller's. */
static int tinfo_shim_any(Core *c, PyObject *t, struct tinfo *ti)
{
    const struct shim *s = &c->shim;
    if (!c->use_shim || !c->qd[Q_CDATA] || !type_is_plain(c, Py_TYPE(t)))
        return 0;
    PyObject *cd = fast_q(c, t, Q_CDATA);
    if (!cd)
        return PYERR;
    void *impl = PyLong_AsVoidPtr(cd);
    Py_DECREF(cd);
    if (!impl)
        return PyErr_Occurred() ? PYERR : 0;
    void *h = &impl; /* an at::Tensor: its TensorImpl pointer */
    int32_t v;
    _Bool b;
    if (s->dtype(h, &v) != 0)
        return 0;
    if (v != s->f32)
        return 1;
    if (s->layout(h, &v) != 0)
        return 0;
    if (v != s->strided)
        return 1;
    if (s->device_type(h, &v) != 0)
        return 0;
    ti->cuda = v == s->cuda;
    if (!ti->cuda && v != s->cpu)
        return 1;
    if (ti->cuda && s->device_index(h, &ti->dev) != 0)
        return 0;
    if (s->is_contiguous(h, &b) != 0)
        return 0;
    if (!b)
        return 1;
    int64_t *sizes;
    if (s->dim(h, &ti->ndim) != 0 || s->sizes(h, &sizes) != 0 || s->data_ptr(h, &ti->data) != 0)
        return 0;
    ti->sizes = sizes;
    ti->fits = 1;
    return 1;
}

/* a cuda tensor through the shim only once a cuda sample agreed */
static int tinfo_shim(Core *c, PyObject *t, struct tinfo *ti)
{
    int r = tinfo_shim_any(c, t, ti);
    if (r == 1 && ti->cuda && !c->shim.cuda_ok) {
        memset(ti, 0, sizeof *ti);
        return 0;
    }
    return r;
}

int fast_shim_agrees(Core *c, PyObject *t)
{
    struct tinfo a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    int r = tinfo_shim_any(c, t, &a);
    if (r != 1)
        return r == 0 ? 0 : PYERR;
    if (tinfo_python(c, t, &b) < 0) {
        fast_tinfo_done(&b);
        return PYERR;
    }
    int same = a.fits == b.fits;
    if (same && a.fits) {
        same = a.cuda == b.cuda && a.data == b.data && (!a.cuda || a.dev == b.dev);
        if (same && (r = tinfo_shape_is(&a, b.shape)) != 1)
            same = 0;
        long long sa, sb;
        if (same && r != PYERR && a.cuda) {
            int use = c->use_shim;
            c->use_shim = 0; /* the Python stream */
            r = fast_tinfo_stream(c, &b, &sb);
            c->use_shim = use;
            if (r == 0)
                r = fast_tinfo_stream(c, &a, &sa);
            same = r == 0 && sa == sb;
        }
    }
    fast_tinfo_done(&b);
    if (r == PYERR)
        return PYERR;
    if (same && a.fits && a.cuda)
        c->shim.cuda_ok = 1;
    return same;
}

/* append (k, t, t._version) to the watch list */
static int watch_add(Core *c, Py_ssize_t k, PyObject *t)
{
    PyObject *v = fast_q(c, t, Q_VERSION);
    if (!v)
        return PYERR;
    PyObject *kk = PyLong_FromSsize_t(k);
    if (!kk) {
        Py_DECREF(v);
        return PYERR;
    }
    PyObject *e = PyTuple_Pack(3, kk, t, v);
    Py_DECREF(kk);
    Py_DECREF(v);
    if (!e)
        return PYERR;
    int r = PyList_Append(c->watch, e);
    Py_DECREF(e);
    return r < 0 ? PYERR : 0;
}

/* ---- library calls ---- */

static int call_many(Core *c, Py_ssize_t k0, Py_ssize_t n, enum divtrace_where where, void *stream)
{
    return c->many(c->h, (int)n, (const struct divtrace_tensor *)(c->ts + k0 * c->ts_size),
                   (const float *const *)(c->ptrs + k0), where, stream);
}

int fast_push(Core *c)
{
    Py_ssize_t k0 = c->pend0, n = c->nrec - k0;
    if (n <= 0)
        return 0;
    c->pend0 = c->nrec;
    if (c->pend_stream == HOST_RUN)
        return call_many(c, k0, n, DIVTRACE_HOST, NULL);
    return call_many(c, k0, n, DIVTRACE_DEVICE_DEFERRED, (void *)(intptr_t)c->pend_stream);
}

/* ---- the buffer ---- */

/* slot k's deferred record: data p of t on stream (HOST_RUN: the host) */
static int buffer_at(Core *c, Py_ssize_t k, PyObject *t, long long stream, void *p)
{
    int rc = 0;
    if (k != c->pend0 && stream != c->pend_stream)
        rc = fast_push(c); /* one stream a run */
    c->pend_stream = stream;
    c->ptrs[k] = p;
    if (PyList_Append(c->keep, t) < 0 || watch_add(c, k, t) < 0)
        return PYERR;
    c->ndef++;
    c->nrec = k + 1;
    return rc;
}

int fast_buffer(Core *c, Py_ssize_t k, PyObject *t)
{
    long long stream;
    void *p;
    if (stream_of(c, t, &stream) < 0 || data_ptr(c, t, &p) < 0)
        return PYERR;
    return buffer_at(c, k, t, stream, p);
}

static int slot_matches(Core *c, Py_ssize_t k, PyObject *name, PyObject *type, int kind,
                        const struct tinfo *ti)
{
    const struct slot *s = &c->slots[k];
    int r = PyObject_RichCompareBool(s->name, name, Py_EQ);
    if (r != 1)
        return r < 0 ? PYERR : 0;
    r = PyObject_RichCompareBool(s->type, type, Py_EQ);
    if (r != 1)
        return r < 0 ? PYERR : 0;
    if (s->kind != kind)
        return 0;
    return tinfo_shape_is(ti, s->shape);
}

int fast_try_defer(Core *c, PyObject *name, PyObject *type, int kind, PyObject *t)
{
    Py_ssize_t k = c->nrec;
    if (!c->deferring || k >= c->nslots || !c->slots[k].deferrable)
        return 0;
    struct tinfo ti;
    long long stream;
    int r = fast_tinfo(c, t, &ti);
    if (r < 0 || !ti.fits)
        return r;
    if ((r = slot_matches(c, k, name, type, kind, &ti)) == 1)
        r = fast_tinfo_stream(c, &ti, &stream) < 0 ? PYERR : 2;
    fast_tinfo_done(&ti);
    if (r != 2)
        return r;
    int rc = buffer_at(c, k, t, stream, ti.data);
    return rc < 0 ? rc : 1;
}

/* ---- groups ---- */

int fast_group(Core *c, int gid, PyObject *tensors, PyObject *owners, int watch)
{
    if (gid < 0 || gid >= NGROUPS || !c->groups[gid].shapes)
        return 0;
    const struct group *g = &c->groups[gid];
    Py_ssize_t k0 = g->k0, n = g->n;
    Py_ssize_t nt = PySequence_Size(tensors);
    if (nt < 0)
        return PYERR;
    if (c->nrec != k0 || nt != n || n == 0)
        return 0;
    PyObject *ts = PySequence_Tuple(tensors), *os = NULL;
    if (!ts)
        return PYERR;
    int ret = PYERR, r;
    long long stream = HOST_RUN;
    os = PySequence_Tuple(owners);
    if (!os)
        goto out;
    if (PyTuple_Size(os) < n) {
        PyErr_Format(PyExc_IndexError, "group %d: %zd owners for %zd tensors", gid, PyTuple_Size(os), n);
        goto out;
    }
    /* every tensor fits, on the first one's kind of device, in its place's
     * shape; the group's stream is the first one's */
    int cuda = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyTuple_GetItem(ts, i);
        struct tinfo ti;
        if (PyTuple_GetItem(os, i) != PyTuple_GetItem(g->owners, i)) {
            ret = 0;
            goto out;
        }
        if ((r = fast_tinfo(c, t, &ti)) < 0)
            goto out;
        if (!ti.fits || (i > 0 && ti.cuda != cuda)) {
            fast_tinfo_done(&ti);
            ret = 0;
            goto out;
        }
        r = tinfo_shape_is(&ti, PyTuple_GetItem(g->shapes, i));
        if (r == 1 && i == 0) {
            cuda = ti.cuda;
            if (fast_tinfo_stream(c, &ti, &stream) < 0)
                r = PYERR;
        }
        fast_tinfo_done(&ti);
        if (r != 1) {
            ret = r;
            goto out;
        }
        c->ptrs[k0 + i] = ti.data;
    }
    int rc = 0;
    if (c->deferring && g->deferrable) {
        if (k0 != c->pend0 && stream != c->pend_stream)
            rc = fast_push(c);
        c->pend_stream = stream;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *t = PyTuple_GetItem(ts, i);
            if (PyList_Append(c->keep, t) < 0)
                goto out;
        }
        for (Py_ssize_t i = 0; watch && i < n; i++)
            if (watch_add(c, k0 + i, PyTuple_GetItem(ts, i)) < 0)
                goto out;
        c->ndef += n;
        c->nrec = k0 + n;
        ret = rc < 0 ? rc : 1;
        goto out;
    }
    if (k0 != c->pend0 && (rc = fast_push(c)) < 0) {
        ret = rc; /* the pointers of slots below k0 are already in place */
        goto out;
    }
    if (cuda)
        for (Py_ssize_t i = 0; i < n; i++)
            if (PyList_Append(c->keep, PyTuple_GetItem(ts, i)) < 0)
                goto out;
    c->nrec = k0 + n;
    c->pend0 = c->nrec;
    if (cuda)
        rc = call_many(c, k0, n, DIVTRACE_DEVICE, (void *)(intptr_t)stream);
    else
        rc = call_many(c, k0, n, DIVTRACE_HOST, NULL);
    ret = rc < 0 ? rc : 1;
out:
    Py_DECREF(ts);
    Py_XDECREF(os);
    return ret;
}

int fast_grads(Core *c, int gid, PyObject *params, int watch)
{
    PyObject *seq = PySequence_Tuple(params);
    if (!seq)
        return PYERR;
    PyObject *gs = PyList_New(0), *ps = PyList_New(0);
    int ret = PYERR;
    if (!gs || !ps)
        goto out;
    for (Py_ssize_t i = 0, n = PyTuple_Size(seq); i < n; i++) {
        PyObject *p = PyTuple_GetItem(seq, i);
        PyObject *g = fast_q(c, p, Q_GRAD);
        if (!g)
            goto out;
        if (g != Py_None) {
            int req = q_is(c, p, Q_REQUIRES_GRAD, Py_True);
            if (req < 0 || (req && (PyList_Append(gs, g) < 0 || PyList_Append(ps, p) < 0))) {
                Py_DECREF(g);
                goto out;
            }
        }
        Py_DECREF(g);
    }
    ret = fast_group(c, gid, gs, ps, watch);
out:
    Py_XDECREF(gs);
    Py_XDECREF(ps);
    Py_DECREF(seq);
    return ret;
}
