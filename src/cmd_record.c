/* cmd_record.c: `divtrace record`: option parsing for train_run. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cpu_blas.h"
#include "fault.h"
#include "progress.h"
#include "train.h"
#include "util.h"

static void record_usage(FILE *f)
{
    fputs("Usage: divtrace record [OPTION]... -o TRACE.dtr\n"
          "Train a model on a backend and record every op's output, every step.\n"
          "\n"
          "Output:\n"
          "  -o, --output FILE         the trace to write (replaced if it exists)\n"
          "      --trace-level LEVEL   op (every op), param (parameters, gradients,\n"
          "                            optimizer) or step (summaries only); default op\n"
          "      --checkpoint-every K  full state every K steps (default: the smallest\n"
          "                            round K >= 10 giving at most 100 intervals and\n"
          "                            checkpoints under 150 MB before compression)\n"
          "  -q, --quiet               print nothing on stdout (no summary) and no progress\n"
          "      --progress            progress as plain lines on stderr, every 10 s and at\n"
          "                            the end (for logs; on a terminal a line is rewritten\n"
          "                            in place without it)\n"
          "\n"
          "Model and training:\n"
          "      --model NAME          autoencoder (default) or prednet\n"
          "      --preset NAME         sgd-plateau (default: SGD, lr 3.0) or\n"
          "                            adam-shoulder (Adam, lr 3e-4); --optimizer, --lr\n"
          "                            and --momentum override it, in any order\n"
          "      --layers W,W,...      autoencoder widths, input first\n"
          "                            (default 784,128,32,128,784)\n"
          "      --act FN              autoencoder hidden activation: sigmoid (default),\n"
          "                            tanh, relu\n"
          "      --optimizer NAME      sgd (autoencoder default) or adam (prednet default)\n"
          "      --lr X                learning rate (default: sgd 3.0; adam 3e-4 for the\n"
          "                            autoencoder, 1e-3 for prednet)\n"
          "      --momentum X          SGD momentum (default 0; sgd only)\n"
          "      --batch N             batch size (default 100; prednet 4 sequences)\n"
          "      --steps N             training steps (default 5000; prednet 1000)\n"
          "      --seed S              data order, and weights unless --init-seed (default 1)\n"
          "      --init-seed S         initial weights, fixed across --seed values\n"
          "      --init-scale X        multiply the Glorot-uniform bound (default 1)\n"
          "      --data DIR            IDX images (default $DIVTRACE_DATA, else\n"
          "                            /usr/share/datasets/fashion-mnist); for prednet\n"
          "                            the digits of the Moving-MNIST generator\n"
          "\n"
          "PredNet (--model prednet):\n"
          "      --stack C,C,...       A/Ahat channels per layer, the frames' first\n"
          "                            (default 1,16,32,64)\n"
          "      --r-stack C,C,...     R (ConvLSTM) channels per layer (default: --stack)\n"
          "      --size HxW            frame size (default 64x64)\n"
          "      --nt N                frames per sequence (default 20)\n"
          "      --layer-weights W,..  loss weight of each layer's error (default 1,0,0,0)\n"
          "      --video PATH          user frames: a uint8 .npy (T,N,H,W), (N,T,H,W) or\n"
          "                            (N,T,H,W,C), or a directory of .pgm frames;\n"
          "                            default: Moving-MNIST generated from --data\n"
          "      --npy-layout L        tnhw (default, as mnist_test_seq.npy) or nthw\n"
          "      --protocol paper      the 2021 study's protocol: 5000 frames as 250\n"
          "                            batches of one 20-frame sequence; the summary's mean\n"
          "                            of the last 50 steps is its reported loss\n"
          "\n"
          "Backend:\n"
          "      --backend NAME        cpu (default), mpfr (the high-precision reference),\n"
          "                            cuda or cudnn (GPU; in builds with CUDA)\n"
          "      --threads N           cpu: threads of the products and the larger\n"
          "                            elementwise ops (default 1)\n"
          "      --cpu-kernel NAME     OpenBLAS kernel, e.g. Haswell, Sandybridge, Nehalem,\n"
          "                            Prescott, SkylakeX (refused if the CPU lacks it)\n"
          "      --cpu-gemm FORM       cpu: matrix products and convolutions by openblas\n"
          "                            (default) or fixed: divtrace's own summation order,\n"
          "                            the same bits at any --threads, on any CPU and\n"
          "                            OpenBLAS kernel\n"
          "      --precision BITS      mpfr backend: bits of precision (default 128)\n"
          "      --no-self-check       mpfr backend: skip the run at twice the precision that\n"
          "                            checks the float32 results (halves the time)\n"
          "      --reduce MODE         cuda, cudnn: tree (fixed-order reductions, default)\n"
          "                            or atomic (atomicAdd, nondeterministic on purpose)\n"
          "      --cudnn-algo A        cudnn: deterministic (default), deterministic-fast\n"
          "                            (cuDNN's engines, Winograd included: reproducible,\n"
          "                            replayed to a normwise bound), fastest (may pick\n"
          "                            nondeterministic algorithms) or an algorithm number\n"
          "      --device N            cuda, cudnn: the GPU to use (default 0)\n"
          "      --cuda-graph on|off   cuda, cudnn: replay each step as a captured CUDA\n"
          "                            graph (default on) or launch every op\n"
          "      --streams N           cuda, cudnn: run ops with no path between them on up\n"
          "                            to N CUDA streams at once (1 to 8, default 4; the\n"
          "                            results are the same for every N)\n"
          "\n"
          "Non-finite values and testing:\n"
          "      --stop-on-nonfinite   end the run after the step that first produced a NaN\n"
          "                            or Inf (the trace stays complete and readable)\n"
          "      --flip-bit S:T:I:B    flip bit B of element I of tensor T at the start of\n"
          "                            step S (a fault for testing diff)\n"
          "      --inject OP:KIND      a fault in op OP every step, KIND bitflip[:I[:B]],\n"
          "                            scale[:FACTOR], formula (a wrong formula), variant\n"
          "                            (a valid float32 rewrite) or rewire:INPUT:TENSOR;\n"
          "                            with formula or variant OP may be a pattern\n"
          "                            ('L*.t*.[ifo]'); or a fault of state, T:KIND with\n"
          "                            T a parameter, optimizer state or pattern, KIND\n"
          "                            roundtrip:bf16|half|trunc (after each update), drop\n"
          "                            (zeros come back) or stale (updates never reach\n"
          "                            it); T may be prednet's recurrent state\n"
          "                            ('L*.t19.[rce]:drop'); or 'L*.init.*:carry' (state\n"
          "                            carried across sequences); a final @BACKEND plants\n"
          "                            it on that backend only ('*.m:drop@cuda')\n"
          "  -h, --help                show this help and exit\n"
          "  -V, --version             show the version and exit\n"
          "\n"
          "Every step's parameters and optimizer state are hashed from their buffers: one\n"
          "that is not what its update wrote is a carry fault, reported on stderr.\n"
          "Exit status: 0 trained; 1 trained, with a carry fault; 2 trouble (bad input,\n"
          "or NaN/Inf in training).\n",
          f);
}

enum {
    OPT_TRACE_LEVEL = 256, OPT_CKPT, OPT_MODEL, OPT_PRESET, OPT_LAYERS, OPT_ACT, OPT_OPTIMIZER,
    OPT_LR, OPT_MOMENTUM, OPT_BATCH, OPT_STEPS, OPT_SEED, OPT_INIT_SEED, OPT_INIT_SCALE,
    OPT_DATA, OPT_BACKEND, OPT_THREADS, OPT_CPU_KERNEL, OPT_CPU_GEMM, OPT_STOP_NONFINITE, OPT_FLIP,
    OPT_PRECISION, OPT_INJECT, OPT_NO_SELF_CHECK, OPT_STACK, OPT_RSTACK, OPT_SIZE, OPT_NT,
    OPT_LAYER_WEIGHTS, OPT_VIDEO, OPT_NPY_LAYOUT, OPT_PROTOCOL, OPT_REDUCE, OPT_CUDNN_ALGO,
    OPT_DEVICE, OPT_CUDA_GRAPH, OPT_STREAMS, OPT_PROGRESS,
};

static const struct option record_options[] = {
    {"output", required_argument, NULL, 'o'},
    {"trace-level", required_argument, NULL, OPT_TRACE_LEVEL},
    {"checkpoint-every", required_argument, NULL, OPT_CKPT},
    {"quiet", no_argument, NULL, 'q'},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"model", required_argument, NULL, OPT_MODEL},
    {"preset", required_argument, NULL, OPT_PRESET},
    {"layers", required_argument, NULL, OPT_LAYERS},
    {"act", required_argument, NULL, OPT_ACT},
    {"optimizer", required_argument, NULL, OPT_OPTIMIZER},
    {"lr", required_argument, NULL, OPT_LR},
    {"momentum", required_argument, NULL, OPT_MOMENTUM},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"steps", required_argument, NULL, OPT_STEPS},
    {"seed", required_argument, NULL, OPT_SEED},
    {"init-seed", required_argument, NULL, OPT_INIT_SEED},
    {"init-scale", required_argument, NULL, OPT_INIT_SCALE},
    {"data", required_argument, NULL, OPT_DATA},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"cpu-kernel", required_argument, NULL, OPT_CPU_KERNEL},
    {"cpu-gemm", required_argument, NULL, OPT_CPU_GEMM},
    {"stop-on-nonfinite", no_argument, NULL, OPT_STOP_NONFINITE},
    {"flip-bit", required_argument, NULL, OPT_FLIP},
    {"precision", required_argument, NULL, OPT_PRECISION},
    {"inject", required_argument, NULL, OPT_INJECT},
    {"no-self-check", no_argument, NULL, OPT_NO_SELF_CHECK},
    {"stack", required_argument, NULL, OPT_STACK},
    {"r-stack", required_argument, NULL, OPT_RSTACK},
    {"size", required_argument, NULL, OPT_SIZE},
    {"nt", required_argument, NULL, OPT_NT},
    {"layer-weights", required_argument, NULL, OPT_LAYER_WEIGHTS},
    {"video", required_argument, NULL, OPT_VIDEO},
    {"npy-layout", required_argument, NULL, OPT_NPY_LAYOUT},
    {"protocol", required_argument, NULL, OPT_PROTOCOL},
    {"reduce", required_argument, NULL, OPT_REDUCE},
    {"cudnn-algo", required_argument, NULL, OPT_CUDNN_ALGO},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"cuda-graph", required_argument, NULL, OPT_CUDA_GRAPH},
    {"streams", required_argument, NULL, OPT_STREAMS},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

static int record_parse_flip(const char *s, struct train_config *tc)
{
    /* STEP:TENSOR:INDEX:BIT; the tensor name may not contain ':' */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    char *parts[4];
    int n = 0;
    for (char *save = NULL, *p = strtok_r(buf, ":", &save); p && n < 4; p = strtok_r(NULL, ":", &save))
        parts[n++] = p;
    uint64_t bit;
    if (n != 4 || cli_u64("--flip-bit", parts[0], &tc->flip_step) < 0 ||
        cli_u64("--flip-bit", parts[2], &tc->flip_index) < 0 ||
        cli_u64("--flip-bit", parts[3], &bit) < 0 || bit > 31 ||
        strlen(parts[1]) >= sizeof tc->flip_tensor) {
        dt_error_set("--flip-bit '%s': expected STEP:TENSOR:INDEX:BIT, e.g. 3:enc1.W:17:30", s);
        return DT_ERR;
    }
    snprintf(tc->flip_tensor, sizeof tc->flip_tensor, "%s", parts[1]);
    tc->flip_bit = (int)bit;
    tc->flip_set = 1;
    return DT_OK;
}

/* One option into tc; -1 with dt_error set on a bad value. */
static int record_option(int c, const char *arg, struct train_config *tc)
{
    uint64_t u;
    switch (c) {
    case 'o': tc->out = arg; return DT_OK;
    case 'q': tc->quiet = 1; return DT_OK;
    case OPT_PROGRESS: tc->progress = PROGRESS_LINES; return DT_OK;
    case OPT_TRACE_LEVEL:
        if (trace_level_parse(arg, &tc->level) < 0) {
            dt_error_set("--trace-level '%s': expected op, param or step", arg);
            return DT_ERR;
        }
        return DT_OK;
    case OPT_CKPT:
        if (cli_u64("--checkpoint-every", arg, &tc->ckpt_every) < 0)
            return DT_ERR;
        if (tc->ckpt_every == 0) {
            dt_error_set("--checkpoint-every must be at least 1");
            return DT_ERR;
        }
        return DT_OK;
    case OPT_MODEL:
        if (strcmp(arg, "autoencoder") != 0 && strcmp(arg, "prednet") != 0) {
            dt_error_set("--model '%s': expected autoencoder or prednet", arg);
            return DT_ERR;
        }
        tc->model.name = arg;
        return DT_OK;
    case OPT_PRESET: return DT_OK; /* applied before the other options */
    case OPT_LAYERS: tc->layers = arg; tc->layers_given = 1; return model_parse_layers(arg, &tc->model);
    case OPT_ACT: tc->layers_given = 1; return model_parse_act(arg, &tc->model.act);
    case OPT_STACK: tc->stack = arg; return DT_OK;
    case OPT_RSTACK: tc->r_stack = arg; return DT_OK;
    case OPT_SIZE: tc->size = arg; return DT_OK;
    case OPT_LAYER_WEIGHTS: tc->layer_weights = arg; return DT_OK;
    case OPT_VIDEO: tc->video = arg; return DT_OK;
    case OPT_NPY_LAYOUT: tc->npy_layout = arg; return DT_OK;
    case OPT_NT: {
        int nt;
        if (cli_int("--nt", arg, 2, 100000, &nt) < 0)
            return DT_ERR;
        tc->model.nt = (uint32_t)nt;
        return DT_OK;
    }
    case OPT_REDUCE:
        if (strcmp(arg, "tree") != 0 && strcmp(arg, "atomic") != 0) {
            dt_error_set("--reduce '%s': expected tree or atomic", arg);
            return DT_ERR;
        }
        tc->reduce = arg;
        return DT_OK;
    case OPT_CUDNN_ALGO: tc->cudnn_algo = arg; return DT_OK; /* checked by the backend */
    case OPT_DEVICE: return cli_int("--device", arg, 0, 1023, &tc->device);
    case OPT_CUDA_GRAPH:
        if (strcmp(arg, "on") != 0 && strcmp(arg, "off") != 0) {
            dt_error_set("--cuda-graph '%s': expected on or off", arg);
            return DT_ERR;
        }
        tc->no_graph = strcmp(arg, "off") == 0;
        tc->graph_given = 1;
        return DT_OK;
    case OPT_STREAMS: return cli_int("--streams", arg, 1, 8, &tc->streams);
    case OPT_PROTOCOL:
        if (strcmp(arg, "paper") != 0) {
            dt_error_set("--protocol '%s': expected paper", arg);
            return DT_ERR;
        }
        tc->protocol = arg;
        return DT_OK;
    case OPT_OPTIMIZER:
        if (strcmp(arg, "sgd") != 0 && strcmp(arg, "adam") != 0) {
            dt_error_set("--optimizer '%s': expected sgd or adam", arg);
            return DT_ERR;
        }
        tc->optimizer = arg;
        tc->optimizer_given = 1;
        return DT_OK;
    case OPT_LR: return cli_double("--lr", arg, &tc->lr);
    case OPT_MOMENTUM: return cli_double("--momentum", arg, &tc->momentum);
    case OPT_BATCH:
        if (cli_u64("--batch", arg, &u) < 0 || u == 0 || u > 1u << 20) {
            dt_error_set("--batch '%s': expected an integer from 1 to %u", arg, 1u << 20);
            return DT_ERR;
        }
        tc->model.batch = (uint32_t)u;
        tc->batch_given = 1;
        return DT_OK;
    case OPT_STEPS: tc->steps_given = 1; return cli_u64("--steps", arg, &tc->steps);
    case OPT_SEED: return cli_u64("--seed", arg, &tc->seed);
    case OPT_INIT_SEED:
        tc->init_seed_set = 1;
        return cli_u64("--init-seed", arg, &tc->init_seed);
    case OPT_INIT_SCALE: return cli_double("--init-scale", arg, &tc->init_scale);
    case OPT_DATA: tc->data_dir = arg; return DT_OK;
    case OPT_BACKEND: tc->backend = arg; return DT_OK;
    case OPT_THREADS: return cli_int("--threads", arg, 1, 1024, &tc->threads);
    case OPT_CPU_KERNEL:
        /* the canonical spelling, so that traces compare equal */
        tc->cpu_kernel = cpu_blas_kernel_name(arg);
        if (!tc->cpu_kernel)
            return DT_ERR;
        return DT_OK;
    case OPT_CPU_GEMM:
        if (strcmp(arg, "openblas") != 0 && strcmp(arg, "fixed") != 0) {
            dt_error_set("--cpu-gemm: '%s' is neither openblas nor fixed", arg);
            return DT_ERR;
        }
        tc->cpu_gemm = strcmp(arg, "fixed") == 0 ? "fixed" : NULL;
        return DT_OK;
    case OPT_STOP_NONFINITE: tc->stop_on_nonfinite = 1; return DT_OK;
    case OPT_FLIP: return record_parse_flip(arg, tc);
    case OPT_PRECISION: {
        int bits;
        if (cli_int("--precision", arg, 24, 100000, &bits) < 0)
            return DT_ERR;
        tc->precision = bits;
        return DT_OK;
    }
    case OPT_INJECT: tc->inject = arg; return DT_OK;
    case OPT_NO_SELF_CHECK: tc->no_self_check = 1; return DT_OK;
    }
    DT_ASSERT(0, "unhandled option %d", c);
}

int cmd_record(int argc, char **argv)
{
    struct train_config tc;
    train_config_defaults(&tc);
    if (model_parse_layers(tc.layers, &tc.model) < 0)
        DT_ASSERT(0, "default layers do not parse");
    const char *shortopts = "+o:qhV";
    int c;
    /* Pass 1: help and the preset, which later options override. */
    opterr = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, shortopts, record_options, NULL)) != -1) {
        if (c == 'h') {
            record_usage(stdout);
            return 0;
        }
        if (c == 'V')
            return cli_version();
        if (c == OPT_PRESET && train_apply_preset(&tc, optarg) < 0) {
            cli_error("record", "%s", dt_error());
            return CLI_EXIT_TROUBLE;
        }
    }
    opterr = 1;
    optind = 0;
    while ((c = getopt_long(argc, argv, shortopts, record_options, NULL)) != -1) {
        if (c == '?' || c == ':')
            return cli_usage_error("record");
        if (c == 'V')
            continue;
        if (record_option(c, optarg, &tc) < 0) {
            cli_error("record", "%s", dt_error());
            return CLI_EXIT_TROUBLE;
        }
    }
    if (optind < argc) {
        cli_error("record", "unexpected argument '%s'", argv[optind]);
        return cli_usage_error("record");
    }
    if (!tc.out) {
        cli_error("record", "no output file: give -o TRACE.dtr");
        return CLI_EXIT_TROUBLE;
    }
    if (train_finish_config(&tc) < 0) {
        cli_error("record", "%s", dt_error());
        return CLI_EXIT_TROUBLE;
    }
    /* OpenBLAS chose its kernel when it was loaded: to change it, run again. */
    if (tc.cpu_kernel && cpu_blas_reexec(tc.cpu_kernel, cli_argv) < 0) {
        cli_error("record", "%s", dt_error());
        return CLI_EXIT_TROUBLE;
    }
    tc.progress = progress_mode_pick(tc.quiet, tc.progress == PROGRESS_LINES);
    if (tc.inject && !tc.quiet && fault_planted(tc.inject, tc.backend) == 0)
        fprintf(stderr, "divtrace record: --inject '%s' is for another backend: nothing planted on %s\n",
                tc.inject, tc.backend);

    struct train_result res;
    if (train_run(&tc, &res) < 0) {
        cli_error("record", "%s", dt_error());
        return CLI_EXIT_TROUBLE;
    }
    if (!tc.quiet) {
        int last = res.steps < 50 ? (int)res.steps : 50;
        printf("%s: %" PRIu64 " step%s in %.1f s, final loss %.6f, mean of last %d step%s %.6f\n",
               tc.out, res.steps, res.steps == 1 ? "" : "s", res.seconds, res.final_loss, last,
               last == 1 ? "" : "s", res.mean_last50);
        if (res.self_checked && res.self_agree == res.steps)
            printf("self-check: the run at twice the precision gave the same float32 results in "
                   "all %" PRIu64 " steps\n", res.steps);
    }
    if (!tc.quiet && (fflush(stdout) != 0 || ferror(stdout))) {
        cli_error("record", "writing the summary to standard output: %s (the trace %s is complete)",
                  strerror(errno), tc.out);
        return CLI_EXIT_TROUBLE;
    }
    if (res.nonfinite)
        return CLI_EXIT_TROUBLE;
    if (res.carry_steps) {
        fprintf(stderr, "divtrace record: %" PRIu64 " step%s began with state changed since its update "
                "(the first: step %" PRIu64 "); the trace is complete\n", res.carry_steps,
                res.carry_steps == 1 ? "" : "s", res.carry_first);
        return CLI_EXIT_FINDING;
    }
    return 0;
}

/* `divtrace sweep` checks every trial's options before it starts any: the
 * parse of cmd_record, without training and without the output file (the
 * sweep gives it). getopt's own messages are off: the one line is the
 * caller's. */
int record_check_options(int argc, char **argv)
{
    struct train_config tc;
    train_config_defaults(&tc);
    if (model_parse_layers(tc.layers, &tc.model) < 0)
        DT_ASSERT(0, "default layers do not parse");
    const char *shortopts = "+:o:qhV";
    int c, rc = DT_OK, saved = opterr;
    opterr = 0;
    optind = 0;
    /* pass 1: the preset, which later options override */
    while (rc == DT_OK && (c = getopt_long(argc, argv, shortopts, record_options, NULL)) != -1)
        if (c == OPT_PRESET && train_apply_preset(&tc, optarg) < 0)
            rc = DT_ERR;
    optind = 0;
    while (rc == DT_OK && (c = getopt_long(argc, argv, shortopts, record_options, NULL)) != -1) {
        /* the word at fault: a long option as written, a short one as -c
         * (optopt, which for a long option holds its code) */
        const char *word = argv[optind - 1];
        char opt[3] = {'-', (char)optopt, 0};
        if (word[1] != '-' && optopt > ' ' && optopt < 127)
            word = opt;
        if (c == '?') {
            dt_error_set("unknown record option '%s'", word);
            rc = DT_ERR;
        } else if (c == ':') {
            dt_error_set("record option '%s' needs a value", word);
            rc = DT_ERR;
        } else if (c == 'h' || c == 'V') {
            dt_error_set("record option '%s' prints and exits: it records no trace", word);
            rc = DT_ERR;
        } else if (record_option(c, optarg, &tc) < 0) {
            rc = DT_ERR;
        }
    }
    if (rc == DT_OK && optind < argc) {
        dt_error_set("unexpected record argument '%s'", argv[optind]);
        rc = DT_ERR;
    }
    if (rc == DT_OK && train_finish_config(&tc) < 0)
        rc = DT_ERR;
    opterr = saved;
    optind = 0;
    return rc;
}
