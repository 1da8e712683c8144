/*
 * The GPT models' configuration and parameter layout (gpt.h): defaults and checks of a
 * config, and each parameter's name and shape, in the order gpt.h gives. Host only: no
 * context, no GPU, so the CPU reference and tools can share it with the GPU model.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/gpt.h"

/* the tensors of one layer, in order */
enum { GPT2_PER_LAYER = 12, LLAMA_PER_LAYER = 6 };

static const char *const gpt2_layer_names[GPT2_PER_LAYER] = {
    "ln1.w", "ln1.b", "attn.wqkv", "attn.bqkv", "attn.wo", "attn.bo",
    "ln2.w", "ln2.b", "mlp.w1", "mlp.b1", "mlp.w2", "mlp.b2"};
static const char *const llama_layer_names[LLAMA_PER_LAYER] = {
    "norm1.w", "attn.wqkv", "attn.wo", "norm2.w", "mlp.wgu", "mlp.wd"};

/* Writes the message into err (when there is room) and returns INVALID_ARGUMENT. */
static wgml_status bad(char *err, size_t errlen, const char *what)
{
    if (err && errlen) snprintf(err, errlen, "gpt config: %s", what);
    return WGML_ERROR_INVALID_ARGUMENT;
}

wgml_status wgml_gpt_config_resolve(const wgml_gpt_config *in, wgml_gpt_config *out, char *err, size_t errlen)
{
    char why[160];
    if (err && errlen) err[0] = '\0';
    if (!in || !out) return bad(err, errlen, "NULL config");
    wgml_gpt_config c = *in;
    if (c.arch != WGML_GPT_GPT2 && c.arch != WGML_GPT_LLAMA) {
        snprintf(why, sizeof why, "arch = %d is not a wgml_gpt_arch", (int)c.arch);
        return bad(err, errlen, why);
    }
    const int llama = c.arch == WGML_GPT_LLAMA;
    /* ids are i32, and every size must leave room for the products below */
    const int64_t most = (int64_t)1 << 30;
    const struct { const char *name; int64_t v, lo, hi; } sizes[] = {
        {"vocab", c.vocab, 1, most}, {"block", c.block, 1, most},
        {"layers", c.layers, 1, WGML_GPT_MAX_LAYERS}, {"heads", c.heads, 1, most},
        {"width", c.width, 1, most}, {"kv_heads", c.kv_heads, 0, most}, {"ffn", c.ffn, 0, most}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].v < sizes[i].lo || sizes[i].v > sizes[i].hi) {
            snprintf(why, sizeof why, "%s = %lld must be in [%lld, %lld]", sizes[i].name, (long long)sizes[i].v,
                     (long long)sizes[i].lo, (long long)sizes[i].hi);
            return bad(err, errlen, why);
        }
    if (c.width % c.heads) {
        snprintf(why, sizeof why, "heads = %lld does not divide width = %lld", (long long)c.heads, (long long)c.width);
        return bad(err, errlen, why);
    }
    if (c.kv_heads == 0) c.kv_heads = c.heads;
    if (!llama && c.kv_heads != c.heads) {
        snprintf(why, sizeof why, "kv_heads = %lld must equal heads = %lld for GPT-2", (long long)c.kv_heads,
                 (long long)c.heads);
        return bad(err, errlen, why);
    }
    if (c.kv_heads > c.heads || c.heads % c.kv_heads) {
        snprintf(why, sizeof why, "kv_heads = %lld does not divide heads = %lld", (long long)c.kv_heads,
                 (long long)c.heads);
        return bad(err, errlen, why);
    }
    if (llama && (c.width / c.heads) % 2) { /* RoPE rotates pairs of a head's columns */
        snprintf(why, sizeof why, "the head size width / heads = %lld must be even for RoPE",
                 (long long)(c.width / c.heads));
        return bad(err, errlen, why);
    }
    if (c.ffn == 0) c.ffn = llama ? ((8 * c.width + 2) / 3 + 31) / 32 * 32 : 4 * c.width;
    if (!(c.dropout >= 0 && c.dropout < 1)) {
        snprintf(why, sizeof why, "dropout = %g must be in [0, 1)", c.dropout);
        return bad(err, errlen, why);
    }
    if (c.rope_base == 0) c.rope_base = 10000.0f;
    if (!(c.rope_base > 0) || isinf(c.rope_base)) {
        snprintf(why, sizeof why, "rope_base = %g must be finite and > 0", c.rope_base);
        return bad(err, errlen, why);
    }
    if (c.norm_eps == 0) c.norm_eps = 1e-5f;
    if (!(c.norm_eps > 0) || isinf(c.norm_eps)) {
        snprintf(why, sizeof why, "norm_eps = %g must be finite and > 0", c.norm_eps);
        return bad(err, errlen, why);
    }
    *out = c;
    return WGML_OK;
}

int wgml_gpt_param_count(const wgml_gpt_config *cfg)
{
    if (cfg->arch == WGML_GPT_LLAMA) return 1 + LLAMA_PER_LAYER * (int)cfg->layers + 1;
    return 2 + GPT2_PER_LAYER * (int)cfg->layers + 2;
}

void wgml_gpt_param_info(const wgml_gpt_config *cfg, int i, char name[WGML_GPT_NAME], int *ndim, int64_t shape[2])
{
    const int llama = cfg->arch == WGML_GPT_LLAMA;
    const int64_t V = cfg->vocab, C = cfg->width, F = cfg->ffn, D = cfg->width / cfg->heads;
    const int64_t qkv = llama ? (cfg->heads + 2 * cfg->kv_heads) * D : 3 * C;
    const int head = llama ? 1 : 2, per = llama ? LLAMA_PER_LAYER : GPT2_PER_LAYER;
    const int n = wgml_gpt_param_count(cfg);
    int64_t rows = 0, cols = 0; /* cols 0: a 1-D parameter */
    name[0] = '\0';
    if (i < 0 || i >= n) {
        *ndim = 0;
        shape[0] = shape[1] = 0;
        return;
    }
    if (i == 0) {
        snprintf(name, WGML_GPT_NAME, "wte");
        rows = V, cols = C;
    } else if (!llama && i == 1) {
        snprintf(name, WGML_GPT_NAME, "wpe");
        rows = cfg->block, cols = C;
    } else if (i >= n - (llama ? 1 : 2)) {
        int k = i - (n - (llama ? 1 : 2));
        snprintf(name, WGML_GPT_NAME, "%s", llama ? "normf.w" : k == 0 ? "lnf.w" : "lnf.b");
        rows = C;
    } else {
        int l = (i - head) / per, k = (i - head) % per;
        snprintf(name, WGML_GPT_NAME, "h.%d.%s", l, llama ? llama_layer_names[k] : gpt2_layer_names[k]);
        if (llama) {
            const int64_t r[LLAMA_PER_LAYER] = {C, C, C, C, C, F}, c[LLAMA_PER_LAYER] = {0, qkv, C, 0, 2 * F, C};
            rows = r[k], cols = c[k];
        } else {
            const int64_t r[GPT2_PER_LAYER] = {C, C, C, 3 * C, C, C, C, C, C, F, F, C};
            const int64_t c[GPT2_PER_LAYER] = {0, 0, 3 * C, 0, C, 0, 0, 0, F, 0, C, 0};
            rows = r[k], cols = c[k];
        }
    }
    *ndim = cols ? 2 : 1;
    shape[0] = rows;
    shape[1] = cols ? cols : 0;
}
