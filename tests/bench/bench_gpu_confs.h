/* bench_gpu_confs.h: what the GPU benchmark programs share: the four
 * configurations of the PyTorch comparison (tests/bench/torch_models.py),
 * their training setup, and the check for a usable GPU. */
#ifndef DT_BENCH_GPU_CONFS_H
#define DT_BENCH_GPU_CONFS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "train.h"
#include "util.h"

#define BENCH_GPU_NCONF 4

struct bench_gpu_conf {
    const char *key, *what, *model, *stack, *size;
    uint32_t nt, batch;
    int video; /* random 3-channel frames from a .npy */
};

/* Configuration i (0 .. BENCH_GPU_NCONF - 1): ae, pn1, pn4, kitti. */
static inline const struct bench_gpu_conf *bench_gpu_conf(int i)
{
    static const struct bench_gpu_conf confs[BENCH_GPU_NCONF] = {
        {"ae", "autoencoder 784-128-32-128-784, batch 100", "autoencoder", NULL, NULL, 0, 100, 0},
        {"pn1", "PredNet 1,16,32,64 @ 64x64, nt 20, batch 1", "prednet", "1,16,32,64", "64x64", 20, 1, 0},
        {"pn4", "PredNet 1,16,32,64 @ 64x64, nt 20, batch 4", "prednet", "1,16,32,64", "64x64", 20, 4, 0},
        {"kitti", "PredNet 3,48,96,192 @ 128x160, nt 10, batch 4", "prednet", "3,48,96,192", "128x160", 10,
         4, 1},
    };
    return &confs[i];
}

/* The index of the configuration named key, or -1. */
static inline int bench_gpu_conf_find(const char *key)
{
    for (int i = 0; i < BENCH_GPU_NCONF; i++)
        if (strcmp(key, bench_gpu_conf(i)->key) == 0)
            return i;
    return -1;
}

/* tc: the defaults, then configuration cf on backend (npy: the frames of
 * a video configuration); the IDX data from $DIVTRACE_DATA when set. The
 * caller sets steps and output, then calls train_finish_config. */
static inline int bench_gpu_conf_setup(struct train_config *tc, const struct bench_gpu_conf *cf,
                                       const char *backend, const char *npy)
{
    train_config_defaults(tc);
    if (model_parse_layers(tc->layers, &tc->model) < 0)
        return -1;
    tc->model.name = cf->model;
    tc->backend = backend;
    tc->model.batch = cf->batch;
    tc->batch_given = 1;
    tc->stack = cf->stack;
    tc->size = cf->size;
    tc->model.nt = cf->nt;
    tc->video = cf->video ? npy : NULL;
    if (cf->video)
        tc->npy_layout = "tnhw";
    if (getenv("DIVTRACE_DATA"))
        tc->data_dir = getenv("DIVTRACE_DATA");
    return 0;
}

/* 0 when the cuda backend starts; else prog's "skipped" line and 77. */
static inline int bench_gpu_probe(const char *prog)
{
    const struct backend_ops *probe = backend_find("cuda");
    void *ctx;
    struct backend_options bo = {.threads = 1};
    if (!probe || probe->init(&ctx, &bo) < 0) {
        printf("%s: skipped: %s\n", prog, dt_error());
        return 77;
    }
    probe->free(ctx);
    return 0;
}

#endif
