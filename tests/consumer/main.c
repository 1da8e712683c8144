/* An outside program of wgml's, also the README's example: built against an installed wgml
   and from wgml's source (tests/consumer/run.sh), it adds two vectors on the default adapter
   and checks the sum. */
#include <stdio.h>

#include <wgml.h>

int main(void)
{
    wgml_context *ctx;
    if (wgml_context_create(NULL, &ctx) != WGML_OK) {   /* the best adapter there is */
        fprintf(stderr, "consumer: %s\n", wgml_last_create_error());
        return 1;
    }
    int64_t n = 7;
    float a[7] = {1, 2, 3, 4, 5, 6, 7}, b[7] = {0.5f, -1, 2, 8, -3, 0, 1}, out[7];
    wgml_tensor *ta, *tb;
    /* ops are lazy: reading the sum evaluates it, one submit */
    int bad = wgml_tensor_from_data(ctx, 1, &n, a, 7, &ta) || wgml_tensor_from_data(ctx, 1, &n, b, 7, &tb) ||
              wgml_tensor_read(wgml_add(ctx, ta, tb), out, 7);
    for (int i = 0; !bad && i < 7; i++) bad = out[i] != a[i] + b[i];
    printf("consumer: %s\n", bad ? wgml_error_message(ctx) : "ok");
    wgml_context_free(ctx);   /* frees its tensors too */
    return bad;
}
