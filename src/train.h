/* train.h: `divtrace record`: train a model on a backend and write its trace. */
#ifndef DT_TRAIN_H
#define DT_TRAIN_H

#include <stdint.h>

#include "model.h"
#include "trace.h"

struct train_config {
    struct model_spec model;
    const char *layers;         /* as given, for the trace header */
    /* prednet, as given (parsed into model) */
    const char *stack, *r_stack, *size, *layer_weights;
    const char *video;          /* user frames (.npy or a directory of .pgm), or NULL */
    const char *npy_layout;     /* "tnhw" or "nthw" */
    const char *protocol;       /* "paper" or NULL */
    int optimizer_given, batch_given, steps_given, layers_given;
    const char *optimizer;      /* "sgd" | "adam" */
    double lr, momentum, b1, b2, eps;
    uint64_t steps;
    uint64_t seed;              /* data order (and weights unless init_seed_set) */
    uint64_t init_seed;
    int init_seed_set;
    double init_scale;
    const char *backend;
    int threads;
    const char *cpu_kernel;     /* NULL: OpenBLAS's own choice */
    const char *cpu_gemm;       /* cpu: "fixed" (divtrace's order) or NULL (OpenBLAS) */
    long precision;             /* mpfr backend: bits (0: its default) */
    const char *reduce;         /* cuda, cudnn: "tree" or "atomic" (NULL: tree) */
    const char *cudnn_algo;     /* cudnn: "deterministic", "deterministic-fast", "fastest" or a number
                                 * (NULL: deterministic) */
    const char *cudnn_algos;    /* cudnn: a recording's algorithms, used as they are (replay); NULL */
    int device;                 /* cuda, cudnn: GPU index */
    int no_graph;               /* cuda, cudnn: --cuda-graph off */
    int graph_given;
    int streams;                /* cuda, cudnn: --streams (0: the backend's default) */
    const char *inject;         /* fault OP:KIND[:ARGS] (see fault.h), or NULL */
    const char *data_dir;
    char data_dir_buf[4096];    /* storage for data_dir when it is derived (replay) */
    const char *out;
    enum trace_level level;
    uint64_t ckpt_every;        /* 0: chosen so the trace stays small */
    int stop_on_nonfinite;
    int progress;               /* enum progress_mode (progress.h): progress on stderr */
    int quiet;
    int notrace;                /* benchmarks: no hashing, no file */
    int step_wait;              /* benchmarks: each step waited for before the next is queued */
    int no_self_check;          /* mpfr: skip the run at twice the precision */
    /* test hook: flip bit `flip_bit` of element `flip_index` of leaf
     * `flip_tensor` at the start of step `flip_step` */
    int flip_set;
    uint64_t flip_step, flip_index;
    int flip_bit;
    char flip_tensor[128];
};

struct train_result {
    uint64_t steps;             /* steps completed */
    int self_checked;           /* mpfr: a run at twice the precision went alongside */
    uint64_t self_agree;        /* leading steps whose float32 results agreed with it */
    double final_loss;
    double mean_last50;
    int nonfinite;              /* a NaN/Inf was produced */
    uint64_t carry_steps;       /* steps that began with a leaf changed since its update */
    uint64_t carry_first;       /* the first of them */
    double seconds;             /* wall time of the training loop */
    double warm_seconds;        /* wall time of its steps after the first three (a
                                 * GPU backend runs step 0 eagerly and captures
                                 * steps 1 and 2, one for each buffer arrangement),
                                 * or NaN with fewer than 4 steps */
    double cpu_seconds;         /* CPU time of the process (all threads) in the loop */
};

/* Defaults; lr is left NaN: train_finish_config gives the optimizer's. */
void train_config_defaults(struct train_config *tc);
/* Apply a named preset ("sgd-plateau", "adam-shoulder"); -1 if unknown. */
int train_apply_preset(struct train_config *tc, const char *name);
/* After all options: the model's defaults where none was given (prednet:
 * Adam, lr 1e-3, batch 4, 1000 steps; --protocol paper), the lists parsed
 * into tc->model; -1 (dt_error set) for combinations that make no sense. */
int train_finish_config(struct train_config *tc);
/* The preset the optimizer settings amount to, or "none". */
const char *train_preset_name(const struct train_config *tc);
/* Run the training (tc after train_finish_config). 0 when it completed (even with non-finite values:
 * res->nonfinite says so), -1 with dt_error set on any failure. */
int train_run(const struct train_config *tc, struct train_result *res);
/* The default checkpoint interval for a run (see divtrace-record(1)). */
uint64_t train_default_ckpt_every(uint64_t steps, uint64_t ckpt_bytes);

#endif
