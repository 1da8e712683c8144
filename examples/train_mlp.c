/* train_mlp: a small classifier trained on the GPU. Points of the plane in three concentric
   rings (the class is the ring), a 2-64-3 MLP with ReLU, cross-entropy, AdamW, full-batch
   steps; each step is one submit (forward, backward and update), and the loss is read every
   50 steps. Exit status 0 when the training accuracy passes 90%. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <wgml.h>

enum { POINTS = 600, HIDDEN = 64, CLASSES = 3, STEPS = 200 };

/* uniform in [0, 1) from a 64-bit LCG: the same data on every machine */
static double uniform(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

static int fail(wgml_context *ctx, wgml_status st)
{
    fprintf(stderr, "train_mlp: %s: %s\n", wgml_status_name(st), wgml_error_message(ctx));
    wgml_context_free(ctx);
    return 1;
}

int main(void)
{
    wgml_context *ctx;
    if (wgml_context_create(NULL, &ctx) != WGML_OK) {
        fprintf(stderr, "train_mlp: %s\n", wgml_last_create_error());
        return 1;
    }
    static float xy[POINTS * 2];
    static int32_t label[POINTS];
    uint64_t seed = 42;
    for (int i = 0; i < POINTS; i++) {
        int c = i % CLASSES;
        double r = c + 0.15 + 0.7 * uniform(&seed), phi = 6.283185307179586 * uniform(&seed);
        xy[2 * i] = (float)(r * cos(phi)), xy[2 * i + 1] = (float)(r * sin(phi));
        label[i] = c;
    }
    wgml_tensor *x = NULL, *y = NULL;
    wgml_status st = wgml_tensor_from_data(ctx, 2, (int64_t[]){POINTS, 2}, xy, POINTS * 2, &x);
    if (!st) st = wgml_tensor_from_i32(ctx, 1, (int64_t[]){POINTS}, label, POINTS, &y);
    if (!st) st = wgml_manual_seed(ctx, 7);
    if (st) return fail(ctx, st);

    /* parameters: initialised on the GPU, evaluated, then handed to the optimiser */
    wgml_tensor *p[4] = {
        wgml_kaiming_uniform(ctx, 2, (int64_t[]){2, HIDDEN}, sqrtf(2.0f), WGML_FAN_IN),
        NULL,
        wgml_xavier_uniform(ctx, 2, (int64_t[]){HIDDEN, CLASSES}, 1.0f),
        NULL,
    };
    if (!(st = wgml_tensor_zeros(ctx, 1, (int64_t[]){HIDDEN}, &p[1]))) st = wgml_tensor_zeros(ctx, 1, (int64_t[]){CLASSES}, &p[3]);
    if (!st) st = wgml_eval(ctx, 4, p);
    wgml_optimizer *opt = NULL;
    wgml_optim_desc desc = {.kind = WGML_OPTIM_ADAMW, .lr = 0.03f};
    if (!st) st = wgml_optimizer_create(ctx, &desc, 4, p, &opt);
    if (st) return fail(ctx, st);

    float loss = NAN, accuracy = 0;
    for (int step = 1; step <= STEPS && !st; step++) {
        wgml_scope_begin(ctx); /* this step's tensors are freed at its end */
        wgml_tensor *h = wgml_relu(ctx, wgml_add(ctx, wgml_matmul(ctx, x, p[0]), p[1]));
        wgml_tensor *logits = wgml_add(ctx, wgml_matmul(ctx, h, p[2]), p[3]);
        wgml_tensor *l = wgml_cross_entropy(ctx, logits, y);
        st = wgml_backward(l);
        if (!st) st = wgml_optimizer_step(opt, 1, &l); /* gradients, update and l: one submit */
        if (!st && (step % 50 == 0 || step == STEPS)) {
            /* the fraction of points whose largest logit is their class */
            wgml_tensor *hit = wgml_mean_all(ctx, wgml_eq(ctx, wgml_argmax(ctx, logits, -1, 0), y));
            st = wgml_tensor_read(l, &loss, 1);
            if (!st) st = wgml_tensor_read(hit, &accuracy, 1);
            if (!st) printf("step %3d  loss %.4f  accuracy %.3f\n", step, loss, accuracy);
        }
        wgml_scope_end(ctx);
    }
    if (st) return fail(ctx, st);
    wgml_optimizer_free(opt);
    wgml_context_free(ctx);
    return accuracy > 0.9f ? 0 : 1;
}
