/* tracer.c: trace records of every op output, optionally off the
 * executor's thread (see tracer.h). The executor hands over ops in order;
 * the takers (a worker thread of the tracer's own, and the backend's
 * threads while they wait for its next job) take them in that order, one
 * at a time. When a step's records are due (tracer_sync; deferred, before
 * the next step's first update of a leaf, which overwrites a buffer the
 * records read) the main thread takes the ops none has reached from the
 * other end of that step's ops, instead of waiting for them; a slot's
 * claim decides who makes a record. Once every record is made, the step's
 * ops are checked for non-finite values in their order, so an op's inputs
 * always have their records by then. Each queue slot keeps its buffer and
 * its step's parity, so that two steps can be in flight. */
#include "tracer.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#if defined(DT_PROFILE_TRACER_NONE) || defined(DT_PROFILE_TRACER_HASH)
#include "hash.h"
#endif

/* How long an idle worker polls before it sleeps: ops come every few
 * microseconds to a millisecond, and a wake-up costs the main thread a
 * system call. Each poll pauses the core (x86 PAUSE), which leaves a
 * hyperthread sibling running the training most of the core. */
#define TRACER_SPIN 1000
/* A sleeping worker is woken once this much work has queued up (or at the
 * end of the step), not for every op: PredNet's step has thousands of small
 * ops, and a wake-up per op cost the training thread a system call each. */
#define TRACER_KICK_BYTES (1u << 20)
/* Deferred records on the cpu backend keep a second copy of a step's op
 * outputs (exec_double) in host memory: only up to this much. Below it a
 * step is short, and its last ops' records (made after its last op when
 * not deferred) are a large part of it: the autoencoder's 4 MB. PredNet's
 * 0.39 GB at 64x64, batch 1, showed no gain from deferring (300 ms steps). */
#define TRACER_DEFER_HOST_BYTES ((size_t)256 << 20)

static inline void tracer_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

struct tracer {
    const struct graph *g;
    const struct backend_ops *be;
    void *ctx;
    struct trace_oprec *rec;   /* per node, this step: recs[step & 1] */
    struct trace_oprec *recs[2]; /* the same array twice unless deferred */
    /* carry check: per leaf, the hash its update wrote last step */
    uint64_t *carry_prev;
    int carry_have;            /* carry_prev holds a traced step's hashes */
    int *carry[2];             /* leaves whose bits are not their update's, per step parity */
    int ncarry[2];
    uint64_t carry_step[2];
    uint64_t step;
    uint64_t nsteps;           /* steps traced to their end */
    int begun;                 /* a step has begun */
    int nonfinite_op;
    uint64_t nonfinite_step;
    /* a single-producer queue of ops, taken in order by the worker and the
     * backend's lent threads, and from the end by the main thread at sync */
    int async;                 /* records are made off the main thread */
    int worker;                /* by a worker thread of the tracer's own */
    int lent;                  /* by this many of the backend's threads */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    const backend_buf **buf;   /* per node: its buffer (batch mode) */
    /* 2 g->n slots: at most two steps are in flight (one when not deferred) */
    int nslots;
    int *queue;                /* per slot: the node */
    const backend_buf **qbuf;  /* per slot: its buffer when it was queued */
    unsigned char *qpar;       /* per slot: its step's parity (which records) */
    atomic_ullong *claim;      /* per slot: 1 + the push number last claimed there */
    /* (a cache line apart: the takers poll them while the main thread
     * pushes; the struct is not over-aligned, since calloc makes it) */
    char pad0[64];
    atomic_ullong pushed;
    char pad1[64];
    atomic_ullong next;        /* the next push number the takers take */
    char pad2[64];
    atomic_int made[2];        /* records made of the step of each parity */
    char pad3[64];
    unsigned long long first;  /* the push number of this step's first op */
    /* the step whose ops are all queued and whose records are not final
     * yet (tracer_async_finish makes them so): its ops are the push
     * numbers [afirst, aend); deferred, it may be the step before the
     * current one, until the current one is about to write a leaf */
    int apending;
    uint64_t astep;
    unsigned long long afirst, aend;
    unsigned char *upd;        /* per node: 1 when it is a leaf's update (the step writes a leaf's buffer) */
    atomic_int sleeping, stop;
    size_t pending;            /* bytes queued since the worker was last woken */
    /* batch mode (a backend with trace_batch): ops of this step, in order */
    int batch;
    int nbatch;
    const backend_buf **bbuf;  /* scratch for trace_batch */
    size_t *bcount;
    int *bnode;
    struct trace_oprec *brec;
    int bpending;              /* brec's first bpending records come at trace_batch_wait */
    int requested;             /* this step's records were asked for before step_end */
    /* deferred (tracer_defer): a step's records may still be on their way
     * while the next step runs; they are taken before the next step asks
     * for its own (or at tracer_flush) */
    int deferred;
    int dpending;              /* step dstep's records are due */
    uint64_t dstep;
    int dn, dnq;               /* its pending records, its ops */
    int *dnode, *dqueue;
    int64_t final_step;        /* the last step whose records are final, -1: none */
};

int tracer_finite(const struct trace_oprec *r)
{
    return r->nan == 0 && r->inf == 0;
}

/* Step `step`'s records are final: every leaf (a parameter or optimizer
 * state, hashed from its own buffer like any op output) must hold the bits
 * its update wrote in the step before. One that does not was changed
 * between the steps: a carry fault. Then each update's hash is kept for the
 * next step's check. The first step this tracer sees has nothing to check
 * against (a run resumed from a checkpoint). */
static void tracer_carry_check(struct tracer *t, uint64_t step, const struct trace_oprec *rec)
{
    int p = (int)(step & 1);
    t->ncarry[p] = 0;
    t->carry_step[p] = step;
    for (int i = 0; i < t->g->n; i++) {
        const struct node *nd = &t->g->nodes[i];
        if (nd->next < 0)
            continue;
        if (t->carry_have && rec[i].hash != t->carry_prev[i])
            t->carry[p][t->ncarry[p]++] = i;
        t->carry_prev[i] = rec[nd->next].hash;
    }
    t->carry_have = 1;
}

static void tracer_process(struct tracer *t, int i, const backend_buf *buf, struct trace_oprec *rec)
{
    const struct node *nd = &t->g->nodes[i];
#if defined(DT_PROFILE_TRACER_NONE) || defined(DT_PROFILE_TRACER_HASH) || defined(DT_PROFILE_TRACER_READ)
    /* measuring builds: what tracing costs without reading the outputs at
     * all, with only their hash (no statistics), and with a plain read of
     * every byte (an XOR of 8-byte words, no arithmetic to speak of); the
     * carry check then finds faults, which the benchmarks print and go on */
    memset(&rec[i], 0, sizeof rec[i]);
#if defined(DT_PROFILE_TRACER_HASH)
    rec[i].hash = hash_bytes(buf, nd->count * sizeof(float));
#elif defined(DT_PROFILE_TRACER_READ)
    {
        const unsigned char *b = buf;
        uint64_t x = 0, w;
        for (size_t k = 0; k + 8 <= nd->count * sizeof(float); k += 8) {
            memcpy(&w, b + k, 8);
            x ^= w;
        }
        rec[i].hash = x;
    }
#else
    rec[i].hash = (uint64_t)i;
#endif
    (void)buf;
#else
    t->be->trace(t->ctx, buf, nd->count, &rec[i]);
#endif
    rec[i].op = (uint32_t)i;
}

/* The non-finite watch for op i of step `step` (records rec), its
 * inputs' records made: the first op of the run to make NaN or Inf from
 * finite inputs. */
static void tracer_watch(struct tracer *t, const struct trace_oprec *rec, uint64_t step, int i)
{
    const struct node *nd = &t->g->nodes[i];
    if (t->nonfinite_op >= 0 || tracer_finite(&rec[i]))
        return;
    for (int k = 0; k < nd->ninputs; k++)
        if (!tracer_finite(&rec[nd->inputs[k]]))
            return;
    t->nonfinite_op = i;
    t->nonfinite_step = step;
}

/* Whether the caller gets push number p's op to make its record: a taker
 * (in order) and the main thread (from the end) may both try. A slot's
 * claim only grows, so a taker that took p long ago and comes to claim it
 * only now fails once any later push in that slot was claimed. */
static int tracer_claim(struct tracer *t, unsigned long long p)
{
    atomic_ullong *c = &t->claim[p % (unsigned)t->nslots];
    unsigned long long v = atomic_load(c);
    while (v < p + 1)
        if (atomic_compare_exchange_weak(c, &v, p + 1))
            return 1;
    return 0;
}

/* The record of push number p's op, which the caller has claimed. */
static void tracer_make(struct tracer *t, unsigned long long p)
{
    unsigned slot = (unsigned)(p % (unsigned)t->nslots);
    int par = t->qpar[slot];
    tracer_process(t, t->queue[slot], t->qbuf[slot], t->recs[par]);
    atomic_fetch_add(&t->made[par], 1);
}

/* A taker: the next op in the queue, its record made unless the main
 * thread claimed it first. 0 when none is queued. */
static int tracer_take(void *arg)
{
    struct tracer *t = arg;
    unsigned long long p = atomic_load(&t->next);
    do
        if (p >= atomic_load(&t->pushed))
            return 0;
    while (!atomic_compare_exchange_weak(&t->next, &p, p + 1));
    if (tracer_claim(t, p))
        tracer_make(t, p);
    return 1;
}

/* Nothing queued that a taker could take. */
static int tracer_empty(struct tracer *t)
{
    return atomic_load(&t->pushed) == atomic_load(&t->next);
}

static void *tracer_worker(void *arg)
{
    struct tracer *t = arg;
    /* The worker runs at the training's priority. It once ran at nice
     * 19, when the products' workers slept between jobs; they now yield
     * their cores for a while first (cpu_pool.c), and where they take every
     * core a worker at nice 19 fell behind and was waited for: traced
     * autoencoder, 2 threads on 2 cores, 1.65 -> 1.50 ms a step at the
     * same priority (PredNet 323 -> 309 ms); 1 thread, 1.66 -> 1.61. */
    for (;;) {
        if (tracer_take(t))
            continue;
        if (atomic_load(&t->stop))
            return NULL;
        int spin = 0;
        while (spin < TRACER_SPIN && tracer_empty(t) && !atomic_load(&t->stop)) {
            tracer_relax();
            spin++;
        }
        if (spin < TRACER_SPIN)
            continue;
        /* Sleep; the producer signals when it sees `sleeping`. Checking
         * `pushed` under the lock after raising the flag closes the race. */
        pthread_mutex_lock(&t->mu);
        atomic_store(&t->sleeping, 1);
        while (tracer_empty(t) && !atomic_load(&t->stop))
            pthread_cond_wait(&t->wake, &t->mu);
        atomic_store(&t->sleeping, 0);
        pthread_mutex_unlock(&t->mu);
    }
}

static void tracer_kick(struct tracer *t)
{
    if (atomic_load(&t->sleeping)) {
        pthread_mutex_lock(&t->mu);
        pthread_cond_signal(&t->wake);
        pthread_mutex_unlock(&t->mu);
    }
}

struct tracer *tracer_new(const struct graph *g, const struct backend_ops *be, void *ctx,
                          int cores)
{
    struct tracer *t = dt_calloc(1, sizeof *t);
    t->g = g;
    t->be = be;
    t->ctx = ctx;
    t->rec = dt_calloc((size_t)g->n, sizeof *t->rec);
    t->recs[0] = t->recs[1] = t->rec;
    t->final_step = -1;
    t->carry_prev = dt_calloc((size_t)g->n, sizeof *t->carry_prev);
    for (int k = 0; k < 2; k++)
        t->carry[k] = dt_calloc((size_t)g->n, sizeof *t->carry[k]);
    t->nonfinite_op = -1;
    t->nslots = 2 * (g->n ? g->n : 1);
    t->queue = dt_calloc((size_t)t->nslots, sizeof *t->queue);
    t->qbuf = dt_calloc((size_t)t->nslots, sizeof *t->qbuf);
    t->qpar = dt_calloc((size_t)t->nslots, 1);
    t->claim = dt_calloc((size_t)t->nslots, sizeof *t->claim);
    for (int k = 0; k < t->nslots; k++)
        atomic_init(&t->claim[k], 0);
    t->upd = dt_calloc((size_t)(g->n ? g->n : 1), 1);
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].next >= 0)
            t->upd[g->nodes[i].next] = 1;
    atomic_init(&t->pushed, 0);
    atomic_init(&t->next, 0);
    atomic_init(&t->made[0], 0);
    atomic_init(&t->made[1], 0);
    atomic_init(&t->sleeping, 0);
    atomic_init(&t->stop, 0);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->wake, NULL);
    t->batch = be->trace_batch != NULL;
    if (t->batch) {
        /* the backend traces a whole step at once: no worker */
        t->buf = dt_calloc((size_t)g->n, sizeof *t->buf);
        t->bbuf = dt_calloc((size_t)g->n, sizeof *t->bbuf);
        t->bcount = dt_calloc((size_t)g->n, sizeof *t->bcount);
        t->bnode = dt_calloc((size_t)g->n, sizeof *t->bnode);
        t->brec = dt_calloc((size_t)g->n, sizeof *t->brec);
        return t;
    }
    if (cores < 0) { /* queued, and made by the caller's thread at sync or flush only */
        t->async = 1;
        return t;
    }
    /* The backend's threads take ops while they wait for its work; a
     * worker of the tracer's own as well where they leave a core free (on
     * the cores they fill it would take time their jobs wait for). */
    if (cores > 1 && be->lend_idle)
        t->lent = be->lend_idle(ctx, tracer_take, t);
    t->worker = cores > t->lent + 1 && pthread_create(&t->thread, NULL, tracer_worker, t) == 0;
    t->async = t->worker || t->lent > 0;
    return t;
}

void tracer_free(struct tracer *t)
{
    if (!t)
        return;
    if (t->lent)
        t->be->lend_idle(t->ctx, NULL, t);
    if (t->worker) {
        atomic_store(&t->stop, 1);
        pthread_mutex_lock(&t->mu);
        pthread_cond_signal(&t->wake);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->thread, NULL);
    }
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->wake);
    if (t->recs[1] != t->recs[0])
        free(t->recs[1]);
    free(t->recs[0]);
    free(t->dnode);
    free(t->dqueue);
    free(t->carry_prev);
    free(t->carry[0]);
    free(t->carry[1]);
    free(t->buf);
    free(t->queue);
    free(t->qbuf);
    free(t->qpar);
    free(t->upd);
    free((void *)t->claim);
    free(t->bbuf);
    free(t->bcount);
    free(t->bnode);
    free(t->brec);
    free(t);
}

void tracer_begin(struct tracer *t, uint64_t step)
{
    tracer_sync(t);
    if (t->begun)
        t->nsteps++;
    t->begun = 1;
    t->step = step;
    t->rec = t->recs[step & 1];
    t->first = atomic_load(&t->pushed);
    /* the last step of this parity is final: every record of it made */
    atomic_store(&t->made[step & 1], 0);
}

int tracer_defer(struct tracer *t)
{
    if (t->deferred)
        return 1;
    const char *env = getenv("DIVTRACE_TRACE_DEFER");
    if (t->begun || (env && strcmp(env, "0") == 0))
        return 0;
    if (t->batch) {
        if (!t->be->trace_batch_async || !t->be->trace_defer || t->be->trace_defer(t->ctx, 1) < 0)
            return 0;
    } else if (!t->async) {
        return 0; /* records made by the executor's thread: nothing to overlap */
    } else if (!(env && strcmp(env, "1") == 0)) {
        size_t bytes = 0;
        for (int i = 0; i < t->g->n; i++) {
            enum op_type ty = t->g->nodes[i].type;
            if (ty != OP_PARAM && ty != OP_STATE && !t->upd[i])
                bytes += t->g->nodes[i].count * sizeof(float);
        }
        if (bytes > TRACER_DEFER_HOST_BYTES)
            return 0;
    }
    int n = t->g->n;
    t->recs[1] = dt_calloc((size_t)n, sizeof *t->recs[1]);
    t->dnode = dt_calloc((size_t)n, sizeof *t->dnode);
    t->dqueue = dt_calloc((size_t)n, sizeof *t->dqueue);
    t->deferred = 1;
    return 1;
}

/* Batch mode, at the end of a step: every op of the step, leaves included,
 * gets its record from one trace_batch call
 * (made before the backend's step_end when the executor runs the step as a
 * unit, so that it can be part of a captured graph; its records may then
 * arrive only after step_end), and the non-finite watch then goes through
 * the ops in order. */
static void tracer_batch_request(struct tracer *t, int early)
{
    int n = 0;
    for (int k = 0; k < t->nbatch; k++) {
        int i = t->queue[k];
        const struct node *nd = &t->g->nodes[i];
        t->bbuf[n] = t->buf[i];
        t->bcount[n] = nd->count;
        t->bnode[n++] = i;
    }
    t->bpending = 0;
    if (n == 0)
        return;
    if (early && t->be->trace_batch_async) {
        if (t->be->trace_batch_async(t->ctx, t->bbuf, t->bcount, n, t->brec))
            t->bpending = n;
    } else {
        t->be->trace_batch(t->ctx, t->bbuf, t->bcount, n, t->brec);
    }
    if (!t->bpending)
        for (int k = 0; k < n; k++)
            t->rec[t->bnode[k]] = t->brec[k];
}

/* The records of step `step` (its ops queue[0..nq-1], its pending
 * records for nodes node[0..npend-1]) are final: take them, then watch for
 * non-finite values in op order. */
static void tracer_batch_take(struct tracer *t, uint64_t step, const int *queue, int nq, const int *node,
                              int npend)
{
    struct trace_oprec *rec = t->recs[step & 1];
    if (npend) {
        t->be->trace_batch_wait(t->ctx, t->brec, npend);
        for (int k = 0; k < npend; k++)
            rec[node[k]] = t->brec[k];
    }
    for (int k = 0; k < nq; k++) {
        int i = queue[k];
        const struct node *nd = &t->g->nodes[i];
        rec[i].op = (uint32_t)i;
        if (t->nonfinite_op >= 0 || tracer_finite(&rec[i]))
            continue;
        int inputs_finite = 1;
        for (int q = 0; q < nd->ninputs; q++)
            inputs_finite &= tracer_finite(&rec[nd->inputs[q]]);
        if (inputs_finite) {
            t->nonfinite_op = i;
            t->nonfinite_step = step;
        }
    }
    tracer_carry_check(t, step, rec);
    t->final_step = (int64_t)step;
}

static void tracer_batch_finish(struct tracer *t)
{
    int npend = t->bpending;
    t->bpending = 0;
    tracer_batch_take(t, t->step, t->queue, t->nbatch, t->bnode, npend);
    t->nbatch = 0;
}

/* The records of step astep, whose ops are all queued, made (by the
 * caller's thread from the last one back, while the takers go on in
 * order) and final: watched for non-finite values in op order and checked
 * for carry faults. */
static void tracer_async_finish(struct tracer *t)
{
    DT_PROF_MARK(t0);
    if (t->worker)
        tracer_kick(t);
    unsigned long long end = t->aend;
    int par = (int)(t->astep & 1);
    /* the ops no taker has reached, from the last one back, until one a
     * taker has claimed (they take in order: so have they all before it) */
    for (unsigned long long p = end; p > atomic_load(&t->next);) {
        p--;
        if (!tracer_claim(t, p))
            break;
        tracer_make(t, p);
    }
    int want = (int)(end - t->afirst);
    for (int spin = 0; atomic_load(&t->made[par]) != want; spin++) {
        if (spin < TRACER_SPIN)
            tracer_relax();
        else
            sched_yield(); /* a taker may be waiting for a core */
    }
    /* every op of the step is made: what the takers have not reached of it
     * was made here */
    unsigned long long nx = atomic_load(&t->next);
    while (nx < end && !atomic_compare_exchange_weak(&t->next, &nx, end))
        ;
    for (unsigned long long p = t->afirst; p < end; p++)
        tracer_watch(t, t->recs[par], t->astep, t->queue[p % (unsigned)t->nslots]);
    tracer_carry_check(t, t->astep, t->recs[par]);
    t->final_step = (int64_t)t->astep;
    t->apending = 0;
    DT_PROF_ADD(DT_PROF_FLUSH, t0);
}

/* A deferred step's records, if one is due. */
void tracer_flush(struct tracer *t)
{
    if (t->apending) {
        tracer_async_finish(t);
        return;
    }
    if (!t->dpending)
        return;
    t->dpending = 0;
    tracer_batch_take(t, t->dstep, t->dqueue, t->dnq, t->dnode, t->dn);
}

void tracer_before_end(void *arg)
{
    struct tracer *t = arg;
    if (t->batch && t->nbatch > 0 && !t->requested) {
        DT_PROF_MARK(t0);
        tracer_flush(t); /* last step's, before this step's request */
        DT_PROF_ADD(DT_PROF_FLUSH, t0);
        tracer_batch_request(t, 1);
        t->requested = 1;
    }
}

void tracer_hook(void *arg, int i, const backend_buf *buf)
{
    struct tracer *t = arg;
    if (t->batch) {
        t->buf[i] = buf;
        t->queue[t->nbatch++] = i;
        return;
    }
    if (!t->async) {
        tracer_process(t, i, buf, t->rec);
        tracer_watch(t, t->rec, t->step, i);
        return;
    }
    unsigned long long p = atomic_load(&t->pushed);
    unsigned slot = (unsigned)(p % (unsigned)t->nslots);
    t->queue[slot] = i;
    t->qbuf[slot] = buf;
    t->qpar[slot] = (unsigned char)(t->step & 1);
    atomic_store(&t->pushed, p + 1);
    t->pending += t->g->nodes[i].count * sizeof(float);
    if (t->worker && t->pending >= TRACER_KICK_BYTES) {
        t->pending = 0;
        tracer_kick(t);
    }
    /* Deferred: the last step's records read its leaves' buffers, which
     * this step's updates overwrite (its op outputs are in buffers of
     * their own, exec_double): they are made before the first update. */
    if (t->apending && t->astep != t->step && i + 1 < t->g->n && t->upd[i + 1])
        tracer_async_finish(t);
}

void tracer_sync(struct tracer *t)
{
    if (t->batch) {
        if (t->nbatch > 0) {
            if (t->deferred && t->requested && t->bpending) {
                /* left on its way: taken before the next step's request */
                t->dpending = 1;
                t->dstep = t->step;
                t->dn = t->bpending;
                t->dnq = t->nbatch;
                memcpy(t->dnode, t->bnode, (size_t)t->dn * sizeof *t->dnode);
                memcpy(t->dqueue, t->queue, (size_t)t->dnq * sizeof *t->dqueue);
                t->bpending = 0;
                t->nbatch = 0;
            } else {
                tracer_flush(t);
                if (!t->requested)
                    tracer_batch_request(t, 0);
                tracer_batch_finish(t);
            }
        }
        t->requested = 0;
        return;
    }
    if (!t->begun)
        return;
    if (t->async) {
        if (t->apending && t->astep != t->step)
            tracer_async_finish(t); /* the last step's: before this one queues its own */
        if (t->final_step == (int64_t)t->step || (t->apending && t->astep == t->step))
            return; /* final, or on its way */
        t->apending = 1;
        t->astep = t->step;
        t->afirst = t->first;
        t->aend = atomic_load(&t->pushed);
        t->first = t->aend;
        t->pending = 0;
        if (t->deferred) {
            if (t->worker)
                tracer_kick(t);
        } else {
            tracer_async_finish(t);
        }
        return;
    }
    if (t->final_step != (int64_t)t->step) {
        tracer_carry_check(t, t->step, t->rec);
        t->final_step = (int64_t)t->step;
    }
}

const struct trace_oprec *tracer_records(const struct tracer *t)
{
    return t->rec;
}

const struct trace_oprec *tracer_records_of(const struct tracer *t, uint64_t step)
{
    DT_ASSERT(t->final_step >= (int64_t)step && (uint64_t)t->final_step - step < 2,
              "records of step %llu asked for; the last final step is %lld", (unsigned long long)step,
              (long long)t->final_step);
    return t->recs[step & 1];
}

int64_t tracer_done(const struct tracer *t)
{
    return t->final_step;
}

int tracer_carry(const struct tracer *t, uint64_t step, const int **leaves)
{
    int p = (int)(step & 1);
    if (t->final_step < (int64_t)step || t->carry_step[p] != step) {
        *leaves = NULL;
        return 0;
    }
    *leaves = t->carry[p];
    return t->ncarry[p];
}

int tracer_nonfinite(const struct tracer *t, uint64_t *step)
{
    if (t->nonfinite_op >= 0 && step)
        *step = t->nonfinite_step;
    return t->nonfinite_op;
}
