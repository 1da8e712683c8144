/*
 * A pending result keeps the value it had when it was built, whatever overwrites its inputs
 * in place afterwards (wgml.h, wgml_tensor_write and wgml_optimizer_step; engine/executor.h,
 * wgml_pending_readers). Each case builds a lazy result, overwrites what it reads, then reads
 * it and compares with the double-precision value of the inputs it was built on:
 *   - logits = x W held over an SGD step (which moves W);
 *   - a view of a parameter's gradient taken before an AdamW step (the step updates the
 *     parameters the backward graph reads, and writes the gradient slots);
 *   - y = f(x), then wgml_tensor_write(x), then y;
 *   - a result built on an optimiser moment (wgml_optimizer_state) held over a step;
 * and the train step of the library's own models evaluates nothing more than before (only
 * the loss and the gradients are held results at the step).
 */
#include <math.h>
#include <string.h>

#include "harness.h"

enum { B = 5, IN = 7, OUT = 3 };

static void fill(float *x, int n, int seed)
{
    test_seed((uint64_t)seed);
    test_fill_uniform(x, (size_t)n, -1.5, 1.5);
}

/* x [B, IN] W [IN, OUT] in double */
static void ref_matmul(const float *x, const float *w, double *y)
{
    for (int b = 0; b < B; b++)
        for (int o = 0; o < OUT; o++) {
            double s = 0;
            for (int k = 0; k < IN; k++) s += (double)x[b * IN + k] * w[k * OUT + o];
            y[b * OUT + o] = s;
        }
}

static void logits_held_over_sgd_step(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float x[B * IN], w[IN * OUT], tgt[B * OUT], got[B * OUT];
    double want[B * OUT];
    fill(x, B * IN, 1), fill(w, IN * OUT, 2), fill(tgt, B * OUT, 3);
    wgml_tensor *X = test_tensor(ctx, 2, (int64_t[]){B, IN}, x);
    wgml_tensor *W = test_tensor(ctx, 2, (int64_t[]){IN, OUT}, w);
    wgml_tensor *T = test_tensor(ctx, 2, (int64_t[]){B, OUT}, tgt);
    wgml_optimizer *opt = NULL;
    CHECK_OK(ctx, wgml_optimizer_create(ctx, &(wgml_optim_desc){.kind = WGML_OPTIM_SGD, .lr = 0.5f}, 1, &W, &opt));
    wgml_tensor *logits = wgml_matmul(ctx, X, W);
    wgml_tensor *loss = wgml_mse(ctx, logits, T);
    CHECK_OK(ctx, wgml_backward(loss));
    CHECK_OK(ctx, wgml_optimizer_step(opt, 0, NULL));
    CHECK_OK(ctx, wgml_tensor_read(logits, got, B * OUT));
    ref_matmul(x, w, want);
    CHECK(test_close("logits after the step", got, want, B * OUT, 1e-5, 1e-3));
    /* and the weights did move: the same product now gives another value */
    float w_new[IN * OUT], again[B * OUT];
    CHECK_OK(ctx, wgml_tensor_read(W, w_new, IN * OUT));
    CHECK(memcmp(w_new, w, sizeof w) != 0);
    wgml_tensor *fresh = wgml_matmul(ctx, X, W);
    CHECK_OK(ctx, wgml_tensor_read(fresh, again, B * OUT));
    double want_new[B * OUT];
    ref_matmul(x, w_new, want_new);
    CHECK(test_close("logits of the new weights", again, want_new, B * OUT, 1e-5, 1e-3));
    wgml_optimizer_free(opt);
    wgml_tensor_free(fresh), wgml_tensor_free(loss), wgml_tensor_free(logits);
    wgml_tensor_free(X), wgml_tensor_free(W), wgml_tensor_free(T);
}

/* loss = sum(p * p * c): dloss/dp = 2 p c, which depends on p, so a gradient recomputed after
   the step would show the new p */
static void gradient_view_held_over_adamw_step(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    enum { N = 37 };
    float p[N], c[N], got[N];
    double want[N];
    fill(p, N, 4), fill(c, N, 5);
    wgml_tensor *P = test_tensor(ctx, 1, (int64_t[]){N}, p);
    wgml_tensor *C = test_tensor(ctx, 1, (int64_t[]){N}, c);
    wgml_optimizer *opt = NULL;
    CHECK_OK(ctx, wgml_optimizer_create(ctx, &(wgml_optim_desc){.kind = WGML_OPTIM_ADAMW, .lr = 0.1f}, 1, &P, &opt));
    wgml_tensor *loss = wgml_sum_all(ctx, wgml_mul(ctx, wgml_mul(ctx, P, P), C));
    CHECK_OK(ctx, wgml_backward(loss));
    /* the user's handle on the gradient (as Python's p.grad): a view of the pending node */
    wgml_tensor *g = wgml_reshape(ctx, wgml_grad(P), 1, (int64_t[]){N});
    CHECK_OK(ctx, wgml_optimizer_step(opt, 0, NULL));
    CHECK_OK(ctx, wgml_tensor_read(g, got, N));
    for (int i = 0; i < N; i++) want[i] = 2.0 * p[i] * c[i];
    CHECK(test_close("gradient after the step", got, want, N, 1e-6, 1e-3));
    float p_new[N];
    CHECK_OK(ctx, wgml_tensor_read(P, p_new, N));
    CHECK(memcmp(p_new, p, sizeof p) != 0);
    wgml_optimizer_free(opt);
    wgml_tensor_free(g), wgml_tensor_free(loss), wgml_tensor_free(P), wgml_tensor_free(C);
}

static void result_held_over_write(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    enum { N = 1023 };
    static float x[N], x2[N], got[N], got2[N];
    static double want[N], want2[N];
    fill(x, N, 6), fill(x2, N, 7);
    wgml_tensor *X = test_tensor(ctx, 1, (int64_t[]){N}, x);
    /* y = exp(x) * 2 + x * x (no cancellation: the H100's exp is a few ulps off, which
       2 e^x + x near zero magnified past the bound), and z a slice of it: both pending */
    wgml_tensor *y = wgml_add(ctx, wgml_binary_scalar(ctx, WGML_MUL, wgml_exp(ctx, X), 2.0f), wgml_mul(ctx, X, X));
    wgml_tensor *z = wgml_slice(ctx, wgml_neg(ctx, X), 0, 3, 40, 2);
    CHECK_OK(ctx, wgml_tensor_write(X, x2, N));
    wgml_tensor *y2 = wgml_add(ctx, wgml_binary_scalar(ctx, WGML_MUL, wgml_exp(ctx, X), 2.0f), wgml_mul(ctx, X, X));
    CHECK_OK(ctx, wgml_tensor_read(y, got, N));
    CHECK_OK(ctx, wgml_tensor_read(y2, got2, N));
    for (int i = 0; i < N; i++) {
        want[i] = 2.0 * exp((double)x[i]) + (double)x[i] * x[i];
        want2[i] = 2.0 * exp((double)x2[i]) + (double)x2[i] * x2[i];
    }
    CHECK(test_close("y built before the write", got, want, N, 1e-5, 1e-3));
    CHECK(test_close("y built after the write", got2, want2, N, 1e-5, 1e-3));
    float zs[19];
    double zw[19];
    CHECK_OK(ctx, wgml_tensor_read(z, zs, 19));
    for (int i = 0; i < 19; i++) zw[i] = -(double)x[3 + 2 * i];
    CHECK(test_close("a slice of a pending result", zs, zw, 19, 0, 1));
    wgml_tensor_free(y), wgml_tensor_free(y2), wgml_tensor_free(z), wgml_tensor_free(X);
}

static void result_on_a_moment_held_over_step(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    enum { N = 9 };
    float p[N], c[N], m1[N], got[N];
    double want[N];
    fill(p, N, 8), fill(c, N, 9);
    wgml_tensor *P = test_tensor(ctx, 1, (int64_t[]){N}, p);
    wgml_tensor *C = test_tensor(ctx, 1, (int64_t[]){N}, c);
    wgml_optimizer *opt = NULL;
    CHECK_OK(ctx, wgml_optimizer_create(ctx, &(wgml_optim_desc){.kind = WGML_OPTIM_ADAMW, .lr = 0.1f}, 1, &P, &opt));
    wgml_tensor *m = NULL, *v = NULL, *y = NULL;
    for (int step = 0; step < 2; step++) {
        wgml_tensor *loss = wgml_sum_all(ctx, wgml_mul(ctx, P, C));
        CHECK_OK(ctx, wgml_backward(loss));
        if (step == 1) y = wgml_binary_scalar(ctx, WGML_MUL, m, 3.0f); /* built on the first step's moment */
        CHECK_OK(ctx, wgml_optimizer_step(opt, 0, NULL));
        wgml_tensor_free(loss);
        if (step == 0) {
            CHECK_OK(ctx, wgml_optimizer_state(opt, 0, &m, &v));
            CHECK_OK(ctx, wgml_tensor_read(m, m1, N));
        }
    }
    CHECK_OK(ctx, wgml_tensor_read(y, got, N));
    for (int i = 0; i < N; i++) want[i] = 3.0 * m1[i];
    CHECK(test_close("3 m of step 1, read after step 2", got, want, N, 1e-6, 1e-6));
    /* m1 is (1 - beta1) c: nonzero, and step 2 changed the moment */
    float m2[N];
    CHECK_OK(ctx, wgml_tensor_read(m, m2, N));
    CHECK(memcmp(m1, m2, sizeof m1) != 0);
    wgml_optimizer_free(opt);
    wgml_tensor_free(y), wgml_tensor_free(m), wgml_tensor_free(v), wgml_tensor_free(P), wgml_tensor_free(C);
}

int main(void)
{
    TEST_RUN(logits_held_over_sgd_step);
    TEST_RUN(gradient_view_held_over_adamw_step);
    TEST_RUN(result_held_over_write);
    TEST_RUN(result_on_a_moment_held_over_step);
    test_context_release();
    return test_summary();
}
