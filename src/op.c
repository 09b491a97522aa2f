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
};

const char *op_type_name(enum op_type t)
{
    DT_ASSERT(t >= 0 && t < OP_COUNT && op_names[t], "bad op type %d", (int)t);
    return op_names[t];
}
