/*
 * Reverse-mode autograd over the lazy graph. wgml_backward(loss) walks the graph from the
 * loss, then applies each node's vector-Jacobian rule (the op table's, ops/table.c) in
 * reverse order; the rules build more lazy nodes. Gradients
 * accumulate into each trainable tensor's grad, still lazy: they are computed with whatever
 * evaluates next (an optimiser step runs forward, backward and update in one submit).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ptrmap.h"
#include "engine/build.h"

typedef wgml_tensor T;

/* ---------------------------------------------------------------- the pass */

/* The op table gives each op its rule (ops/table.c), or says why it has none. */
static bool has_rule(const T *t)
{
    if (t->op == WGML_OP_VIEW) return t->view_kind != WGML_VIEW_OTHER;
    return wgml_op_table[t->op]->vjp != NULL;
}

/* Inputs that carry gradients: for a view, its input (src[1]), not the buffer's owner; none
   for an op constant almost everywhere (argmax, comparisons: as in PyTorch, it passes none). */
static int grad_inputs(T *t, T **out)
{
    if (t->op == WGML_OP_NONE && t->tape) { out[0] = t->tape; return 1; } /* evaluated: the graph it was */
    if (wgml_op_table[t->op]->constant) return 0;
    if (t->op == WGML_OP_VIEW) { out[0] = NULL; out[1] = t->src[1]; return 2; }
    for (int i = 0; i < t->nsrc; i++) out[i] = t->src[i];
    return t->nsrc;
}

/* A node's gradient so far plus g. Where g is a node its rule just made for this input alone
   (`fresh`), its op's add_in may take the sum into g itself (a norm's input gradient taking the
   residual stream's); never a tensor that may be another node's gradient too (the sum so far,
   or a g passed through, as an add's rule passes its g to both operands). Else wgml_add, which
   asks add_in of either operand without that licence. */
static T *accumulate(wgml_context *ctx, T *sum, T *g, bool fresh)
{
    if (!sum) return g;
    T *(*add_in)(wgml_context *, T *, T *, bool) = wgml_op_table[g->op]->add_in;
    T *s = fresh && add_in && !sum->status ? add_in(ctx, g, sum, true) : NULL;
    return s ? s : wgml_add(ctx, sum, g);
}

/* The pass's note on a node it visits: the gradient reaching it so far, and whether a
   trainable tensor lies upstream of it. */
typedef struct note {
    T *t;
    T *grad;
    bool needs;
} note;

/* The notes in post-order, found by tensor through index. */
typedef struct order {
    note *v;
    size_t n, cap;
    wgml_ptrmap index;
} order;

static note *note_of(const order *o, const T *t) { return &o->v[wgml_ptrmap_get(&o->index, t)]; }

static void order_free(order *o)
{
    free(o->v);
    wgml_ptrmap_free(&o->index);
}

static bool visit(T *t, order *o)
{
    if (wgml_ptrmap_get(&o->index, t) != WGML_PTRMAP_NONE) return true;
    bool needs = t->op == WGML_OP_NONE && t->requires_grad;
    T *in[WGML_MAX_SRC];
    int n = grad_inputs(t, in);
    for (int i = 0; i < n; i++) {
        if (!in[i]) continue;
        if (!visit(in[i], o)) return false;
        needs |= note_of(o, in[i])->needs;
    }
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        note *v = realloc(o->v, cap * sizeof *v);
        if (!v) return false;
        o->v = v;
        o->cap = cap;
    }
    if (!wgml_ptrmap_put(&o->index, t, (uint32_t)o->n)) return false;
    o->v[o->n++] = (note){.t = t, .needs = needs};
    return true;
}

wgml_status wgml_requires_grad(wgml_tensor *t, int on)
{
    if (!wgml_tensor_valid(t)) return WGML_ERROR_INVALID_ARGUMENT;
    if (t->status) return wgml_fail(t->ctx, t->status, "requires_grad: the tensor holds an error: %s", t->error);
    if (t->op != WGML_OP_NONE && t->op != WGML_OP_VIEW) {
        /* a pending result: a leaf once evaluated (an initialiser's, w * 0.02), unless a
           trainable tensor lies upstream, whose gradients it would cut off */
        order o = {0};
        bool walked = visit(t, &o), needs = walked && note_of(&o, t)->needs;
        order_free(&o);
        if (!walked) return wgml_fail(t->ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
        if (needs)
            return wgml_fail(t->ctx, WGML_ERROR_INVALID_ARGUMENT,
                             "requires_grad: the tensor is computed from trainable tensors, not a leaf (wgml_detach makes one)");
        if (!on) return WGML_OK;
        wgml_status st = wgml_eval(t->ctx, 1, &t);
        if (st) return st;
    }
    if (t->op != WGML_OP_NONE)
        return wgml_fail(t->ctx, WGML_ERROR_INVALID_ARGUMENT, "requires_grad: only evaluated (leaf) tensors can be trainable");
    t->requires_grad = on != 0;
    if (on && t->tape) { /* a leaf now: gradients stop here, as at any trainable tensor */
        wgml_tensor_unref(t->tape);
        t->tape = NULL;
    }
    return WGML_OK;
}

wgml_tensor *wgml_grad(wgml_tensor *t) { return wgml_tensor_valid(t) ? t->grad : NULL; }

void wgml_zero_grad(wgml_tensor *t)
{
    if (!wgml_tensor_valid(t) || !t->grad) return;
    wgml_tensor_unref(t->grad);
    t->grad = NULL;
}

wgml_status wgml_backward(wgml_tensor *loss)
{
    if (!wgml_tensor_valid(loss)) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = loss->ctx;
    if (loss->status) return wgml_fail(ctx, loss->status, "%s", loss->error);
    if (loss->numel != 1)
        return wgml_fail(ctx, WGML_ERROR_SHAPE, "backward: the loss must have one element, it has %lld", (long long)loss->numel);
    order o = {0};
    if (!visit(loss, &o)) {
        order_free(&o);
        return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    if (!note_of(&o, loss)->needs) {
        order_free(&o);
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "backward: no trainable tensor (wgml_requires_grad) reaches the loss");
    }
    /* every op on the way must have a rule before any gradient is touched */
    for (size_t k = 0; k < o.n; k++) {
        T *t = o.v[k].t;
        if (!o.v[k].needs || t->op == WGML_OP_NONE || has_rule(t)) continue;
        order_free(&o);
        const char *why = wgml_op_table[t->op]->no_grad;
        return wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "backward: %s is not differentiable%s%s", wgml_op_table[t->op]->name,
                         why ? ": " : "", why ? why : "");
    }
    wgml_status st = WGML_OK;
    wgml_scope_begin(ctx);
    float one = 1.0f;
    T *seed = NULL;
    st = wgml_tensor_from_data(ctx, loss->ndim, loss->shape, &one, 1, &seed);
    note_of(&o, loss)->grad = seed;
    for (size_t k = o.n; k-- > 0 && !st;) {
        T *t = o.v[k].t;
        T *g = o.v[k].grad;
        if (!g || !o.v[k].needs) continue;
        if (t->op == WGML_OP_NONE) {
            if (t->requires_grad) {
                T *acc = t->grad ? wgml_add(ctx, t->grad, g) : g;
                wgml_tensor_retain(acc);
                if (t->grad) wgml_tensor_unref(t->grad);
                t->grad = acc;
            } else if (t->tape) { /* read before backward: on through the graph it was */
                note *to = note_of(&o, t->tape);
                if (to->needs) to->grad = to->grad ? wgml_add(ctx, to->grad, g) : g;
            }
            continue;
        }
        T *gin[WGML_MAX_SRC] = {0};
        if ((st = wgml_op_table[t->op]->vjp(ctx, t, g, gin))) break;
        T *in[WGML_MAX_SRC];
        int n = grad_inputs(t, in);
        for (int i = 0; i < n; i++) {
            if (!in[i] || !gin[i]) continue;
            note *to = note_of(&o, in[i]);
            if (!to->needs) continue;
            if (gin[i]->status) { st = wgml_fail(ctx, gin[i]->status, "backward of %s: %s", wgml_op_table[t->op]->name, gin[i]->error); break; }
            bool fresh = gin[i] != g;
            for (int j = 0; j < n && fresh; j++) fresh = j == i || gin[j] != gin[i];
            to->grad = accumulate(ctx, to->grad, gin[i], fresh);
        }
    }
    order_free(&o);
    wgml_scope_end(ctx); /* the pass's nodes live on only through the grads that use them */
    return st;
}
