/* conv_sets.c: convolutions of one step that can run as one (conv_sets.h). */
#include "conv_sets.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

static int conv_is_leaf(enum op_type t)
{
    return t == OP_INPUT || t == OP_PARAM || t == OP_STATE;
}

int conv_inputs_before(const struct graph *g, int j, int i)
{
    const struct node *nd = &g->nodes[j];
    for (int q = 0; q < nd->ninputs; q++) {
        int p = nd->inputs[q];
        if (!conv_is_leaf(g->nodes[p].type) && p >= i)
            return 0;
    }
    return 1;
}

int conv_same_shapes(const struct graph *g, int a, int b)
{
    const struct node *na = &g->nodes[a], *nb = &g->nodes[b];
    for (int q = 0; q < 2; q++) {
        const struct node *wa = &g->nodes[na->inputs[q]], *wb = &g->nodes[nb->inputs[q]];
        if (wa->ndim != 4 || wb->ndim != 4 || memcmp(wa->shape, wb->shape, 4 * sizeof wa->shape[0]) != 0)
            return 0;
    }
    return na->type != OP_CONV2D_BWD_FILTER || (na->p.conv.r == nb->p.conv.r && na->p.conv.s == nb->p.conv.s);
}

/* A candidate's sort key: (x, type, index), so that each run shares its x
 * (the key holds what the comparison reads: no graph beside qsort). */
struct conv_key {
    int x, type, i;
};

static int conv_key_cmp(const void *pa, const void *pb)
{
    const struct conv_key *a = pa, *b = pb;
    if (a->x != b->x)
        return a->x < b->x ? -1 : 1;
    if (a->type != b->type)
        return a->type < b->type ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

int conv_sets_find(const struct graph *g, const unsigned char *eligible,
                   int (*accept)(void *arg, const struct conv_set *s), void *arg, struct conv_set **out)
{
    struct conv_key *key = dt_calloc((size_t)(g->n ? g->n : 1), sizeof *key);
    unsigned char *taken = dt_calloc((size_t)(g->n ? g->n : 1), 1);
    int nc = 0, nset = 0;
    for (int i = 0; i < g->n; i++) {
        enum op_type t = g->nodes[i].type;
        if ((t == OP_CONV2D || t == OP_CONV2D_BWD_FILTER) && (!eligible || eligible[i]))
            key[nc++] = (struct conv_key){g->nodes[i].inputs[0], (int)t, i};
    }
    qsort(key, (size_t)nc, sizeof *key, conv_key_cmp);
    struct conv_set *sets = NULL;
    for (int a = 0; a < nc;) {
        int b = a;
        while (b < nc && key[b].x == key[a].x && key[b].type == key[a].type)
            b++;
        for (int s = a; s < b; s++) { /* the run key[a..b-1]: one x, one type */
            int lead = key[s].i;
            if (taken[lead])
                continue;
            struct conv_set set = {.type = (enum op_type)key[s].type, .nmem = 1, .mem = {lead}};
            for (int t = s + 1; t < b && set.nmem < CONV_SET_MAX; t++)
                if (!taken[key[t].i] && conv_same_shapes(g, lead, key[t].i) &&
                    conv_inputs_before(g, key[t].i, lead))
                    set.mem[set.nmem++] = key[t].i;
            if (set.nmem < 2 || (accept && !accept(arg, &set)))
                continue;
            for (int k = 0; k < set.nmem; k++)
                taken[set.mem[k]] = 1;
            sets = dt_realloc(sets, (size_t)(nset + 1) * sizeof *sets);
            sets[nset++] = set;
        }
        a = b;
    }
    free(key);
    free(taken);
    *out = sets;
    return nset;
}

void conv_set_dists(const struct graph *g, const struct conv_set *s, uint64_t *dist)
{
    uint64_t ops = 0;
    dist[0] = 0;
    for (int j = s->mem[0] + 1, k = 1; k < s->nmem; j++) {
        ops += !conv_is_leaf(g->nodes[j].type);
        if (j == s->mem[k])
            dist[k++] = ops;
    }
}
