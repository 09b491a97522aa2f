/* gpu_trace.cu: the batch of gpu.h (gpu_trace_new ... gpu_trace_records):
 * the records of many device buffers in one call, for the cuda and cudnn
 * backends, with scratch (device and pinned) kept across calls and grown
 * on demand, and the halves a captured step needs (enqueue without
 * allocating, upload once, collect). The kernels and the batch's layout
 * are gpu_trace_kern.cuh's. */
#include "gpu_trace_kern.cuh"

struct gpu_trace {
    cudaStream_t stream;
    unsigned cap_leaf, cap_root; /* at most this many blocks of each kernel (0: no cap) */
    unsigned char *dev;   /* descriptors, tile map, digests, partials, records */
    size_t dev_bytes;
    unsigned char *host;  /* pinned: descriptors and tile map, then records */
    size_t host_bytes;
    size_t h_rec;         /* offset of the records in host, for gpu_trace_collect */
    size_t in_pending;    /* descriptor bytes a captured enqueue left for gpu_trace_upload */
};

struct gpu_trace *gpu_trace_new(cudaStream_t stream)
{
    struct gpu_trace *t = (struct gpu_trace *)dt_calloc(1, sizeof *t);
    t->stream = stream;
    return t;
}

void gpu_trace_free(struct gpu_trace *t)
{
    if (!t)
        return;
    GPU_CHECK(cudaStreamSynchronize(t->stream));
    if (t->dev)
        GPU_CHECK(cudaFree(t->dev));
    if (t->host)
        GPU_CHECK(cudaFreeHost(t->host));
    free(t);
}

/* Scratch of at least the given sizes, kept across calls; the previous
 * call has synchronised, so nothing in flight uses the old buffers. */
static void gt_reserve(struct gpu_trace *t, size_t dev_bytes, size_t host_bytes)
{
    if (dev_bytes > t->dev_bytes) {
        if (t->dev)
            GPU_CHECK(cudaFree(t->dev));
        t->dev_bytes = dev_bytes + dev_bytes / 4;
        GPU_CHECK(cudaMalloc((void **)&t->dev, t->dev_bytes));
    }
    if (host_bytes > t->host_bytes) {
        if (t->host)
            GPU_CHECK(cudaFreeHost(t->host));
        t->host_bytes = host_bytes + host_bytes / 4;
        GPU_CHECK(cudaMallocHost((void **)&t->host, t->host_bytes));
    }
}

void gpu_trace_set_stream(struct gpu_trace *t, cudaStream_t s)
{
    t->stream = s;
}

void gpu_trace_set_caps(struct gpu_trace *t, unsigned leaf_blocks, unsigned root_blocks)
{
    t->cap_leaf = leaf_blocks;
    t->cap_root = root_blocks;
}

void gpu_trace_reserve_as(struct gpu_trace *t, const struct gpu_trace *like)
{
    gt_reserve(t, like->dev_bytes, like->host_bytes);
}

void gpu_trace_batch(struct gpu_trace *t, const float *const *bufs, const size_t *counts, int n,
                     struct trace_oprec *rec)
{
    DT_ASSERT(t && n >= 0, "gpu_trace_batch: no tracer or n = %d", n);
    if (n == 0)
        return;
    gpu_trace_enqueue(t, bufs, counts, n, 0);
    gpu_trace_collect(t, rec, n);
}

int gpu_trace_enqueue(struct gpu_trace *t, const float *const *bufs, const size_t *counts, int n,
                      int fixed)
{
    DT_ASSERT(t && n > 0, "gpu_trace_enqueue: no tracer or n = %d", n);
    for (int k = 0; k < n; k++)
        DT_ASSERT(((uintptr_t)bufs[k] & 3) == 0, "gpu_trace_batch: buffer %d is not float-aligned", k);
    struct gt_layout l;
    DT_ASSERT(gt_plan(counts, n, &l) == 0, "gpu_trace_batch: too many tiles in %d buffers", n);

    /* host: descriptors | tile map | items (one copy in) | records (one
     * copy out); device: the layout's, then room for records */
    size_t h_rec = gt_align(l.in_bytes, 64);
    size_t need_dev = l.o_end + (size_t)n * sizeof(struct trace_oprec);
    size_t need_host = h_rec + (size_t)n * sizeof(struct trace_oprec);
    if (fixed && (need_dev > t->dev_bytes || need_host > t->host_bytes))
        return -1;
    gt_reserve(t, need_dev, need_host);
    t->h_rec = h_rec;
    unsigned nitems = gt_fill(t->host, &l, bufs, counts, NULL, n);

    cudaStream_t s = t->stream;
    /* A captured step's descriptors never change: they are copied once, after
     * the capture (gpu_trace_upload), not at every replay. */
    if (fixed)
        t->in_pending = l.in_bytes;
    else
        GPU_CHECK(cudaMemcpyAsync(t->dev, t->host, l.in_bytes, cudaMemcpyHostToDevice, s));
    /* the records straight into pinned host memory (mapped: the same
     * address on the device), no copy after the kernel; a batch that is
     * not captured is timed in a -DGT_TIMING build */
    gt_launch(t->dev, &l, nitems, (struct trace_oprec *)(t->host + h_rec), s, t->cap_leaf, t->cap_root, !fixed);
    GPU_LAUNCHED();
    return 0;
}

void gpu_trace_upload(struct gpu_trace *t)
{
    if (t && t->in_pending) {
        GPU_CHECK(cudaMemcpy(t->dev, t->host, t->in_pending, cudaMemcpyHostToDevice));
        t->in_pending = 0;
    }
}

void gpu_trace_collect(struct gpu_trace *t, struct trace_oprec *rec, int n)
{
    GPU_CHECK(cudaStreamSynchronize(t->stream));
    gpu_trace_records(t, rec, n);
}

void gpu_trace_records(const struct gpu_trace *t, struct trace_oprec *rec, int n)
{
    const struct trace_oprec *hrec = (const struct trace_oprec *)(t->host + t->h_rec);
    for (int k = 0; k < n; k++) {
        uint32_t op = rec[k].op;
        rec[k] = hrec[k];
        rec[k].op = op;
    }
}
