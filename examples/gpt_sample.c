/* gpt_sample: text from a GPT checkpoint (one `wgml gpt train` wrote, or wgml_gpt_save) through
   the public GPT API: load it, turn the prompt's bytes into token ids with the checkpoint's
   vocabulary, generate on the GPU with a KV cache, print each token as it comes.
   Usage: gpt_sample CHECKPOINT [PROMPT] [TOKENS (100)] [TEMPERATURE (0.8; 0: greedy)] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wgml_gpt.h>

static int print_token(int32_t token, void *user)
{
    const uint8_t *vocab = user;
    putchar(vocab[token]);
    fflush(stdout);
    return 0; /* go on */
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gpt_sample CHECKPOINT [PROMPT] [TOKENS] [TEMPERATURE]\n");
        return 2;
    }
    const char *prompt = argc > 2 && argv[2][0] ? argv[2] : "\n";
    long tokens = argc > 3 ? strtol(argv[3], NULL, 10) : 100;
    wgml_gpt_sample_desc sampling = {.temperature = argc > 4 ? strtof(argv[4], NULL) : 0.8f};

    wgml_context *ctx;
    if (wgml_context_create(NULL, &ctx) != WGML_OK) {
        fprintf(stderr, "gpt_sample: %s\n", wgml_last_create_error());
        return 1;
    }
    wgml_gpt *gpt = NULL;
    wgml_status st = wgml_gpt_load(ctx, argv[1], &gpt);
    if (!st) st = wgml_manual_seed(ctx, 1); /* the same text every run */
    int rc = st ? 1 : 0;

    /* the prompt as token ids: each byte's place in the vocabulary */
    const uint8_t *vocab = NULL;
    int vocab_size = wgml_gpt_vocab(gpt, &vocab);
    size_t n = strlen(prompt);
    int32_t *ids = malloc(n * sizeof *ids);
    for (size_t i = 0; !rc && i < n; i++) {
        const uint8_t *at = memchr(vocab, (uint8_t)prompt[i], (size_t)vocab_size);
        if (!at) {
            fprintf(stderr, "gpt_sample: the byte 0x%02x of the prompt is not in the checkpoint's vocabulary\n",
                    (unsigned)(uint8_t)prompt[i]);
            rc = 2;
        } else {
            ids[i] = (int32_t)(at - vocab);
        }
    }
    if (!rc) {
        fputs(prompt, stdout);
        st = wgml_gpt_generate(gpt, ids, (int64_t)n, tokens, &sampling, NULL, print_token, (void *)vocab);
        putchar('\n');
        rc = st ? 1 : 0;
    }
    if (st) fprintf(stderr, "gpt_sample: %s: %s\n", wgml_status_name(st), wgml_error_message(ctx));
    free(ids);
    wgml_gpt_delete(gpt);
    wgml_context_free(ctx);
    return rc;
}
