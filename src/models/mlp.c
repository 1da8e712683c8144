/* The MLP (see mlp.h). */
#include "models/mlp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int wgml_mlp_table(int nlayers, const int64_t *sizes, wgml_param_spec *spec)
{
    for (int l = 0; l < nlayers; l++) {
        int64_t in = sizes[l], n = sizes[l + 1];
        if (in < 1 || n < 1 || in > (1 << 20) || n > (1 << 20)) return -1;
        double bound = 1.0 / sqrt((double)in); /* PyTorch's Linear default */
        spec[2 * l] = (wgml_param_spec){.ndim = 2, .shape = {in, n}, .init = WGML_INIT_UNIFORM, .scale = bound};
        spec[2 * l + 1] = (wgml_param_spec){.ndim = 1, .shape = {n, 0}, .init = WGML_INIT_UNIFORM, .scale = bound};
        snprintf(spec[2 * l].name, sizeof spec[2 * l].name, "W%d", l);
        snprintf(spec[2 * l + 1].name, sizeof spec[2 * l + 1].name, "b%d", l);
    }
    return 0;
}

void wgml_mlp_free(wgml_mlp *m)
{
    if (!m) return;
    wgml_model_free(&m->m);
    memset(m, 0, sizeof *m);
}

wgml_status wgml_mlp_create(wgml_context *ctx, int nlayers, const int64_t *sizes, uint64_t seed,
                            const float *const *W_init, const float *const *b_init, wgml_mlp *out)
{
    if (!ctx || !out || !sizes || nlayers < 1 || nlayers > WGML_MLP_MAX_LAYERS) return WGML_ERROR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    wgml_param_spec spec[2 * WGML_MLP_MAX_LAYERS];
    if (wgml_mlp_table(nlayers, sizes, spec)) return WGML_ERROR_INVALID_ARGUMENT;
    const float *data[2 * WGML_MLP_MAX_LAYERS];
    for (int l = 0; l < nlayers; l++) data[2 * l] = W_init ? W_init[l] : NULL, data[2 * l + 1] = b_init ? b_init[l] : NULL;
    out->ctx = ctx;
    out->nlayers = nlayers;
    memcpy(out->sizes, sizes, (size_t)(nlayers + 1) * sizeof *sizes);
    wgml_status st = wgml_model_create(ctx, 2 * nlayers, spec, data, seed, &out->m);
    if (st) memset(out, 0, sizeof *out);
    for (int l = 0; !st && l < nlayers; l++) out->W[l] = out->m.params[2 * l], out->b[l] = out->m.params[2 * l + 1];
    return st;
}

int wgml_mlp_params(wgml_mlp *m, wgml_tensor **params)
{
    for (int i = 0; i < m->m.n; i++) params[i] = m->m.params[i];
    return m->m.n;
}

wgml_tensor *wgml_mlp_forward(wgml_mlp *m, wgml_tensor *x)
{
    wgml_tensor *h = x;
    for (int l = 0; l < m->nlayers; l++) {
        wgml_matmul_desc d = {.bias = m->b[l], .activation = l + 1 < m->nlayers ? WGML_ACT_RELU : WGML_ACT_NONE};
        h = wgml_matmul_ex(m->ctx, h, m->W[l], &d);
    }
    return h;
}

wgml_tensor *wgml_count_correct(wgml_context *ctx, wgml_tensor *logits, wgml_tensor *labels)
{
    /* |argmax - label| is 0 when right and >= 1 when wrong: 1 - clamp(.., 0, 1) counts */
    wgml_tensor *d = wgml_abs(ctx, wgml_sub(ctx, wgml_cast(ctx, wgml_argmax(ctx, logits, 1, 0), WGML_F32),
                                            wgml_cast(ctx, labels, WGML_F32)));
    return wgml_sum_all(ctx, wgml_scalar_binary(ctx, WGML_SUB, 1.0f, wgml_clamp(ctx, d, 0.0f, 1.0f)));
}

wgml_status wgml_mlp_train_step(wgml_mlp *m, wgml_optimizer *opt, wgml_tensor *x, wgml_tensor *labels,
                                float *loss, float *correct)
{
    wgml_context *ctx = m->ctx;
    wgml_scope_begin(ctx);
    wgml_tensor *logits = wgml_mlp_forward(m, x);
    wgml_tensor *l = wgml_cross_entropy(ctx, logits, labels);
    wgml_tensor *c = wgml_count_correct(ctx, logits, labels);
    /* loss and count in one [2] tensor, so one read fetches both */
    static const float e0[2] = {1, 0}, e1[2] = {0, 1};
    int64_t two = 2;
    wgml_tensor *u0 = NULL, *u1 = NULL;
    wgml_status st = wgml_tensor_from_data(ctx, 1, &two, e0, 2, &u0);
    if (!st) st = wgml_tensor_from_data(ctx, 1, &two, e1, 2, &u1);
    wgml_tensor *both = wgml_add(ctx, wgml_mul(ctx, l, u0), wgml_mul(ctx, c, u1));
    if (!st) st = wgml_backward(l);
    /* the graph's tensors end before the step (see wgml_gpt_train_step_submit): the step
       then has no held result besides `both` to evaluate before it updates the weights */
    wgml_keep(both);
    wgml_scope_end(ctx);
    if (!st) st = wgml_optimizer_step(opt, 1, &both);
    float out[2] = {NAN, NAN};
    if (!st) st = wgml_tensor_read(both, out, 2);
    if (loss) *loss = out[0];
    if (correct) *correct = out[1];
    wgml_tensor_free(both);
    return st;
}
