/*
 * The transformer ops together, through wgml.h alone: a one-block GPT (token and position
 * embeddings, pre-norm causal self-attention with two heads split by views, an exact-GELU
 * MLP, a head tied to the embedding, cross-entropy on i32 targets) whose loss's gradients
 * match central differences of the same model evaluated on the GPU, and which AdamW with
 * parameter groups (no decay for norms and biases), warm-up and cosine decay and dropout
 * trains to memorise a fixed batch.
 */
#include <math.h>
#include <string.h>

#include "harness.h"

enum { V = 11, C = 8, H = 2, T = 6, B = 3, NP = 8 };

typedef struct model {
    wgml_tensor *p[NP]; /* wte [V,C], wpe [T,C], ln1 w/b [C], wqkv [C,3C], wo [C,C], w1 [C,4C], w2 [4C,C] */
} model;

static const int64_t shapes[NP][2] = {{V, C}, {T, C}, {C, 0}, {C, 0}, {C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};

static wgml_tensor *upload(wgml_context *ctx, int i, float scale)
{
    int nd = shapes[i][1] ? 2 : 1;
    int64_t n = shapes[i][0] * (nd == 2 ? shapes[i][1] : 1);
    float *v = malloc((size_t)n * sizeof *v);
    test_fill_uniform(v, (size_t)n, -scale, scale);
    if (i == 2) for (int64_t k = 0; k < n; k++) v[k] += 1.0f; /* the norm's weight near 1 */
    wgml_tensor *t = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, nd, shapes[i], v, (size_t)n, &t));
    free(v);
    return t;
}

/* the mean cross-entropy of predicting targets [B, T] from ids [B, T] */
static wgml_tensor *forward(wgml_context *ctx, const model *m, wgml_tensor *ids, wgml_tensor *targets, float dropout)
{
    wgml_tensor *x = wgml_add(ctx, wgml_embedding(ctx, m->p[0], ids), m->p[1]); /* [B,T,C] + [T,C] */
    wgml_tensor *h = wgml_layernorm(ctx, x, m->p[2], m->p[3], 1e-5f);
    wgml_tensor *qkv = wgml_matmul(ctx, h, m->p[4]); /* [B,T,3C] */
    wgml_tensor *part[3];
    CHECK_OK(ctx, wgml_chunk(ctx, qkv, -1, 3, part));
    int64_t heads[4] = {B, T, H, C / H};
    const int to_bhtd[4] = {0, 2, 1, 3};
    wgml_tensor *q = wgml_permute(ctx, wgml_reshape(ctx, part[0], 4, heads), to_bhtd);
    wgml_tensor *k = wgml_permute(ctx, wgml_reshape(ctx, part[1], 4, heads), to_bhtd);
    wgml_tensor *v = wgml_permute(ctx, wgml_reshape(ctx, part[2], 4, heads), to_bhtd);
    wgml_tensor *a = wgml_attention(ctx, q, k, v, &(wgml_attention_desc){.causal = 1});
    int64_t btc[3] = {B, T, C};
    wgml_tensor *merged = wgml_reshape(ctx, wgml_permute(ctx, a, to_bhtd), 3, btc);
    x = wgml_add(ctx, x, wgml_dropout(ctx, wgml_matmul(ctx, merged, m->p[5]), dropout));
    wgml_tensor *f = wgml_matmul(ctx, wgml_gelu_exact(ctx, wgml_matmul(ctx, x, m->p[6])), m->p[7]);
    x = wgml_add(ctx, x, f);
    int64_t rows[2] = {B * T, C}, flat = B * T;
    wgml_tensor *logits = wgml_matmul_ex(ctx, wgml_reshape(ctx, x, 2, rows), m->p[0], &(wgml_matmul_desc){.trans_b = 1});
    return wgml_cross_entropy(ctx, logits, wgml_reshape(ctx, targets, 1, &flat));
}

static float loss_value(wgml_context *ctx, const model *m, wgml_tensor *ids, wgml_tensor *targets)
{
    float l = NAN;
    wgml_scope_begin(ctx);
    CHECK_OK(ctx, wgml_tensor_read(forward(ctx, m, ids, targets, 0.0f), &l, 1));
    wgml_scope_end(ctx);
    return l;
}

static void gpt_block_gradients_and_training(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    model m;
    for (int i = 0; i < NP; i++) m.p[i] = upload(ctx, i, 0.5f);
    int32_t idv[B * T], tgv[B * T];
    for (int i = 0; i < B * T; i++) idv[i] = (int32_t)(test_rand_u64() % V), tgv[i] = (int32_t)(test_rand_u64() % V);
    int64_t bt[2] = {B, T};
    wgml_tensor *ids = NULL, *targets = NULL;
    CHECK_OK(ctx, wgml_tensor_from_i32(ctx, 2, bt, idv, B * T, &ids));
    CHECK_OK(ctx, wgml_tensor_from_i32(ctx, 2, bt, tgv, B * T, &targets));

    /* gradients against central differences of the GPU's own loss (f32: h = 1e-2, a few
       elements of each parameter) */
    for (int i = 0; i < NP; i++) CHECK_OK(ctx, wgml_requires_grad(m.p[i], 1));
    wgml_scope_begin(ctx);
    CHECK_OK(ctx, wgml_backward(forward(ctx, &m, ids, targets, 0.0f)));
    int checked = 0, bad = 0;
    for (int i = 0; i < NP; i++) {
        int64_t n = wgml_tensor_numel(m.p[i]);
        float *g = test_read_new(ctx, "gradient", wgml_grad(m.p[i]), n), *w = test_read_new(ctx, "parameter", m.p[i], n);
        if (!g || !w) { free(g), free(w); continue; }
        for (int r = 0; r < 3; r++) {
            int64_t e = (int64_t)(test_rand_u64() % (uint64_t)n);
            float w0 = w[e], hstep = 1e-2f;
            w[e] = w0 + hstep;
            CHECK_OK(ctx, wgml_tensor_write(m.p[i], w, (size_t)n));
            float lp = loss_value(ctx, &m, ids, targets);
            w[e] = w0 - hstep;
            CHECK_OK(ctx, wgml_tensor_write(m.p[i], w, (size_t)n));
            float lm = loss_value(ctx, &m, ids, targets);
            w[e] = w0;
            CHECK_OK(ctx, wgml_tensor_write(m.p[i], w, (size_t)n));
            double fd = ((double)lp - lm) / (2.0 * hstep);
            checked++;
            if (!(fabs(fd - g[e]) <= 2e-3 + 2e-2 * fabs(fd))) {
                bad++;
                fprintf(stderr, "  parameter %d element %lld: gradient %.6g, central difference %.6g\n", i, (long long)e, (double)g[e], fd);
            }
        }
        free(g), free(w);
    }
    CHECK(checked == 3 * NP && bad == 0);
    wgml_scope_end(ctx);
    for (int i = 0; i < NP; i++) wgml_zero_grad(m.p[i]);

    /* AdamW: decay on the matrices, none on the norm; warm-up then cosine; dropout 0.1 */
    wgml_tensor *decayed[6] = {m.p[0], m.p[1], m.p[4], m.p[5], m.p[6], m.p[7]}, *plain[2] = {m.p[2], m.p[3]};
    wgml_param_group groups[2] = {{.n = 6, .params = decayed, .weight_decay = 0.01f}, {.n = 2, .params = plain}};
    wgml_optim_desc d = {.kind = WGML_OPTIM_ADAMW, .lr = 3e-2f, .max_grad_norm = 1.0f};
    wgml_optimizer *opt = NULL;
    CHECK_OK(ctx, wgml_optimizer_create_groups(ctx, &d, 2, groups, &opt));
    wgml_lr_schedule sched = {.warmup_steps = 5, .total_steps = 60, .min_lr_ratio = 0.1f, .decay = WGML_LR_DECAY_COSINE};
    CHECK_OK(ctx, wgml_optimizer_set_schedule(opt, &sched));
    CHECK_OK(ctx, wgml_manual_seed(ctx, 7));
    float first = loss_value(ctx, &m, ids, targets), last = first;
    for (int s = 0; s < 60 && opt; s++) {
        wgml_scope_begin(ctx);
        wgml_tensor *l = forward(ctx, &m, ids, targets, 0.1f);
        CHECK_OK(ctx, wgml_backward(l));
        CHECK_OK(ctx, wgml_optimizer_step(opt, 0, NULL));
        wgml_scope_end(ctx);
    }
    last = loss_value(ctx, &m, ids, targets);
    fprintf(stderr, "  memorising one batch: loss %.4f -> %.4f (uniform guess %.4f)\n", (double)first, (double)last, log((double)V));
    CHECK(first > 1.5 && last < 0.5 * first);
    wgml_optimizer_free(opt);
    wgml_clear_error(ctx);
}

int main(void)
{
    TEST_RUN(gpt_block_gradients_and_training);
    return test_summary();
}
