/* hello_tensor: the first wgml program. Two matrices from the host, a lazy expression over
   them (a matmul, a broadcast add, a softmax along rows), one read that runs it all in one
   GPU submit, and the result checked on the CPU. Exit status 0 when the GPU agrees. */
#include <math.h>
#include <stdio.h>

#include <wgml.h>

int main(void)
{
    wgml_context *ctx;
    if (wgml_context_create(NULL, &ctx) != WGML_OK) { /* the best adapter there is */
        fprintf(stderr, "hello_tensor: %s\n", wgml_last_create_error());
        return 1;
    }
    wgml_adapter_info info;
    if (wgml_adapter_info_get(ctx, &info) == WGML_OK) printf("wgml %s on %s (%s)\n", wgml_version(), info.name, info.backend);

    enum { M = 3, K = 4, N = 5 };
    float a[M * K], b[K * N], bias[N], out[M * N];
    for (int i = 0; i < M * K; i++) a[i] = (float)((i * 7) % 11) / 10.0f - 0.5f;
    for (int i = 0; i < K * N; i++) b[i] = (float)((i * 5) % 13) / 12.0f - 0.4f;
    for (int j = 0; j < N; j++) bias[j] = 0.1f * (float)j;

    wgml_tensor *ta = NULL, *tb = NULL, *tbias = NULL;
    wgml_status st = wgml_tensor_from_data(ctx, 2, (int64_t[]){M, K}, a, M * K, &ta);
    if (!st) st = wgml_tensor_from_data(ctx, 2, (int64_t[]){K, N}, b, K * N, &tb);
    if (!st) st = wgml_tensor_from_data(ctx, 1, (int64_t[]){N}, bias, N, &tbias);
    /* nothing runs yet: each op records a node and returns at once */
    wgml_tensor *probs = wgml_softmax(ctx, wgml_add(ctx, wgml_matmul(ctx, ta, tb), tbias));
    if (!st) st = wgml_tensor_read(probs, out, M * N); /* the whole graph, one submit */
    if (st) {
        fprintf(stderr, "hello_tensor: %s: %s\n", wgml_status_name(st), wgml_error_message(ctx));
        wgml_context_free(ctx);
        return 1;
    }

    /* the same on the CPU, in double */
    double worst = 0;
    for (int i = 0; i < M; i++) {
        double row[N], max = -INFINITY, sum = 0;
        for (int j = 0; j < N; j++) {
            row[j] = bias[j];
            for (int k = 0; k < K; k++) row[j] += (double)a[i * K + k] * b[k * N + j];
            if (row[j] > max) max = row[j];
        }
        for (int j = 0; j < N; j++) sum += row[j] = exp(row[j] - max);
        for (int j = 0; j < N; j++) {
            double err = fabs(out[i * N + j] - row[j] / sum);
            if (err > worst) worst = err;
        }
        printf("row %d:", i);
        for (int j = 0; j < N; j++) printf(" %.4f", out[i * N + j]);
        printf("\n");
    }
    printf("largest difference from the CPU: %.2g\n", worst);
    wgml_context_free(ctx); /* frees its tensors too */
    return worst < 1e-5 ? 0 : 1;
}
