/* op.c: names of the op types, as they appear in traces. */
#include "op.h"
#include "util.h"

static const char *const op_names[OP_COUNT] = {
    [OP_INPUT] = "input",         [OP_PARAM] = "param",
    [OP_STATE] = "state",         [OP_MATMUL] = "matmul",
    [OP_ADD_BIAS] = "add_bias",   [OP_BIAS_GRAD] = "bias_grad",
    [OP_SIGMOID] = "sigmoid",     [OP_SIGMOID_BWD] = "sigmoid_bwd",
    [OP_TANH] = "tanh",           [OP_TANH_BWD] = "tanh_bwd",
    [OP_RELU] = "relu",           [OP_RELU_BWD] = "relu_bwd",
    [OP_ADD] = "add",             [OP_MSE] = "mse",
    [OP_MSE_BWD] = "mse_bwd",     [OP_SGD] = "sgd",
    [OP_MOMENTUM] = "momentum",   [OP_ADAM_M] = "adam_m",
    [OP_ADAM_V] = "adam_v",       [OP_ADAM_P] = "adam_p",
    [OP_FILL] = "fill",
    [OP_CONV2D] = "conv2d",
    [OP_CONV2D_BWD_DATA] = "conv2d_bwd_data",
    [OP_CONV2D_BWD_FILTER] = "conv2d_bwd_filter",
    [OP_MAXPOOL2] = "maxpool2",   [OP_MAXPOOL2_BWD] = "maxpool2_bwd",
    [OP_UPSAMPLE2] = "upsample2", [OP_UPSAMPLE2_BWD] = "upsample2_bwd",
    [OP_CONCAT] = "concat",       [OP_SLICE] = "slice",
    [OP_SLICE_BWD] = "slice_bwd",
    [OP_HARD_SIGMOID] = "hard_sigmoid",
    [OP_HARD_SIGMOID_BWD] = "hard_sigmoid_bwd",
    [OP_SATLU] = "satlu",         [OP_SATLU_BWD] = "satlu_bwd",
    [OP_SUB] = "sub",             [OP_NEG] = "neg",
    [OP_MUL] = "mul",             [OP_MEAN] = "mean",
    [OP_MEAN_BWD] = "mean_bwd",
};

const char *op_type_name(enum op_type t)
{
    DT_ASSERT(t >= 0 && t < OP_COUNT && op_names[t], "bad op type %d", (int)t);
    return op_names[t];
}
