/*
 * Matmul: the op (shape rules, transposes through strides) and its launch.
 *
 *   C[b] = act(alpha * op(A[b]) op(B[b]) + bias)     A [M,K] or [K,M], B [K,N] or [N,K]
 *
 * b runs over the leading dims (up to two: tensors have at most four), broadcast NumPy-style:
 * C is broadcast(A's leading dims, B's) + [M, N], contiguous. Operands are read through their
 * strides: a transposed view of a contiguous matrix is the same matrix with the transpose flag
 * flipped, and leading dims (permuted, sliced or broadcast) are a stride each, never a copy.
 *
 * A launch takes the config the tile policy picks for its shape (ops/matmul/matmul_tiles.c:
 * GEMV for M == 1 or N == 1, the small-M GEMV for 2 <= M <= 16, else a tiled GEMM), the
 * kernel generated for that config (ops/matmul/gemm_wgsl.c), compiled once per context under its
 * variant key, and the parameter block below.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/build.h"
#include "engine/executor.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce.h"
#include "ops/rules.h"
#include "ops/entry.h"
#include "ops/table.h"

/* ---------------------------------------------------------------- the op */

/* How a kernel reads an operand: row stride, batch stride, offset, and whether the
   stored matrix is the transpose of the logical one. */
static bool operand_layout(const wgml_tensor *t, bool *trans)
{
    int r = t->ndim - 2, c = t->ndim - 1;
    if (t->stride[c] == 1 || t->shape[c] == 1) return true;
    if (t->stride[r] == 1 || t->shape[r] == 1) {
        *trans = !*trans;
        return true;
    }
    return false;
}

wgml_tensor *wgml_matmul_ex(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b, const wgml_matmul_desc *desc)
{
    if (!ctx) return NULL;
    wgml_matmul_desc d = desc ? *desc : (wgml_matmul_desc){0};
    wgml_tensor *checks[3] = {a, b, d.bias};
    const char *roles[3] = {"a", "b", "bias"};
    for (int i = 0; i < 3; i++) {
        wgml_tensor *t = checks[i];
        if (i == 2 && !t) break;
        if (!t) return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "matmul: input %s is NULL", roles[i]);
        if (t->magic != WGML_TENSOR_MAGIC || t->ctx != ctx)
            return wgml_tensor_error(ctx, WGML_ERROR_CONTEXT, "matmul: input %s belongs to another context", roles[i]);
        if (t->status) return wgml_tensor_error(ctx, t->status, "%s", t->error ? t->error : "error in an input");
    }
    /* the shapes as the errors name them, with the caller's transposes */
    char sa[128], sb[128];
    wgml_format_shape(sa, sizeof sa - 2, a->ndim, a->shape);
    wgml_format_shape(sb, sizeof sb - 2, b->ndim, b->shape);
    if (d.trans_a) strcat(sa, "^T");
    if (d.trans_b) strcat(sb, "^T");
    if (a->ndim < 2 || a->ndim > WGML_MAX_DIMS || b->ndim < 2 || b->ndim > WGML_MAX_DIMS)
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "matmul: operands must have 2 to %d dims, got %s and %s",
                                 WGML_MAX_DIMS, sa, sb);
    if ((int)d.activation < 0 || (int)d.activation >= wgml_matmul_act_count)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "matmul: unknown activation %d", (int)d.activation);
    if (d.f16_math < 0 || d.f16_math > WGML_F16_MATH_MATRIX_SPLIT)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT,
                                 "matmul: f16_math %d is not 0, WGML_F16_MATH_F32_SUMS (1), WGML_F16_MATH_F16_SUMS (2), "
                                 "WGML_F16_MATH_MATRIX (3) or WGML_F16_MATH_MATRIX_SPLIT (4)",
                                 d.f16_math);
    /* the context's policy decides for a matmul that does not */
    if (!d.f16_math && ctx->compute_precision == WGML_PRECISION_MIXED) d.f16_math = WGML_F16_MATH_MATRIX;
    if (!d.f16_math && ctx->compute_precision == WGML_PRECISION_F32_SPLIT) d.f16_math = WGML_F16_MATH_MATRIX_SPLIT;
    /* (the split mode falls back to the f32 kernels without the matrix units) */
    if (d.f16_math && d.f16_math != WGML_F16_MATH_MATRIX_SPLIT && !ctx->rt.info.has_shader_f16)
        return wgml_tensor_error(ctx, WGML_ERROR_UNSUPPORTED,
                                 "matmul: f16_math (%s x %s) needs the adapter's shader-f16 feature, which %s lacks", sa, sb,
                                 ctx->rt.info.name);
    int64_t M = d.trans_a ? a->shape[a->ndim - 1] : a->shape[a->ndim - 2];
    int64_t Ka = d.trans_a ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int64_t Kb = d.trans_b ? b->shape[b->ndim - 1] : b->shape[b->ndim - 2];
    int64_t N = d.trans_b ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
    if (Ka != Kb)
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "matmul: %s and %s do not multiply (inner dims %lld and %lld)",
                                 sa, sb, (long long)Ka, (long long)Kb);
    /* the leading dims, right-aligned (a missing dim counts as 1), broadcast into shape */
    int la = a->ndim - 2, lb = b->ndim - 2, nl = la > lb ? la : lb;
    int64_t shape[WGML_MAX_DIMS];
    for (int j = 0; j < nl; j++) {
        int ja = j - (nl - la), jb = j - (nl - lb);
        int64_t x = ja >= 0 ? a->shape[ja] : 1, y = jb >= 0 ? b->shape[jb] : 1;
        if (x != y && x != 1 && y != 1)
            return wgml_tensor_error(ctx, WGML_ERROR_SHAPE,
                                     "matmul: %s and %s do not multiply (leading dims do not broadcast)", sa, sb);
        shape[j] = x == 1 ? y : x;
    }
    shape[nl] = M;
    shape[nl + 1] = N;
    if (d.bias && d.bias->dtype != WGML_F32)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "matmul: bias is %s; it must be f32 (wgml_cast converts)",
                                 wgml_dtype_name(d.bias->dtype));
    if (d.bias && (d.bias->ndim != 1 || d.bias->shape[0] != N)) {
        char s[128];
        wgml_format_shape(s, sizeof s, d.bias->ndim, d.bias->shape);
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "matmul: bias %s must be [%lld]", s, (long long)N);
    }
    /* operands the kernel cannot read through strides get a contiguous copy */
    bool ta = d.trans_a, tb = d.trans_b;
    wgml_tensor *src[3] = {a, b, d.bias};
    bool *flags[2] = {&ta, &tb};
    wgml_tensor *copies[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        if (!src[i]) continue;
        bool ok = i < 2 ? operand_layout(src[i], flags[i]) : src[i]->stride[0] == 1;
        if (!ok) {
            copies[i] = wgml_contiguous(ctx, src[i]);
            if (!copies[i]) return NULL;
            src[i] = copies[i];
        }
    }
    wgml_tensor *t = wgml_node(ctx, WGML_OP_MATMUL, nl + 2, shape, d.bias ? 3 : 2, src);
    for (int i = 0; i < 3; i++) wgml_tensor_free(copies[i]);
    if (!t) return NULL;
    wgml_matmul_params_of_set(t, (wgml_matmul_params){.trans_a = ta, .trans_b = tb, .user_trans_a = d.trans_a,
                                                      .user_trans_b = d.trans_b, .bias = d.bias != NULL,
                                                      .act = (int32_t)d.activation, .K = (int32_t)Ka,
                                                      .f16_math = d.f16_math, .alpha = d.alpha == 0.0f ? 1.0f : d.alpha});
    return t;
}

wgml_tensor *wgml_matmul(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b)
{
    return wgml_matmul_ex(ctx, a, b, NULL);
}

/* ---------------------------------------------------------------- launch */

wgml_status wgml_set_compute_precision(wgml_context *ctx, wgml_precision p)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (p != WGML_PRECISION_F32 && p != WGML_PRECISION_MIXED && p != WGML_PRECISION_F32_SPLIT)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "set_compute_precision: %d is not WGML_PRECISION_F32 (0), "
                         "WGML_PRECISION_MIXED (1) or WGML_PRECISION_F32_SPLIT (2)", (int)p);
    if (p == WGML_PRECISION_MIXED && !ctx->rt.info.has_shader_f16)
        return wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "set_compute_precision: mixed precision needs the adapter's shader-f16 "
                         "feature, which %s lacks", ctx->rt.info.name);
    ctx->compute_precision = (int)p;
    return WGML_OK;
}

wgml_precision wgml_compute_precision(const wgml_context *ctx)
{
    return ctx ? (wgml_precision)ctx->compute_precision : WGML_PRECISION_F32;
}

int wgml_gemm_resolve_f16_math(const wgml_context *ctx, const wgml_gemm_args *g)
{
    int m, n, k, sgs;
    if (g->f16_math == WGML_F16_MATH_MATRIX_SPLIT) /* the matrix units' hi and lo halves, else f32 */
        /* (the maxima's kernel counts each operand's elements in u32) */
        return g->M >= 16 && g->N >= 16 && !g->a_f16 && !g->b_f16 && ctx->rt.info.has_shader_f16 &&
                       (uint64_t)g->batch * (uint64_t)g->K * (uint64_t)(g->M > g->N ? g->M : g->N) < (1ull << 31) &&
                       wgml_sgmat_adapter_shape(ctx, &m, &n, &k, &sgs) &&
                       wgml_sgmat_choose_hilo(m, n, k, sgs, g->trans_a, g->trans_b,
                                              ctx->rt.limits.maxComputeWorkgroupStorageSize).sm_m
                   ? WGML_F16_MATH_MATRIX_SPLIT
                   : 0;
    if (g->f16_math != WGML_F16_MATH_MATRIX) return g->f16_math;
    /* few rows: the GEMV paths (f32), whose weight reads bound them anyway */
    if (g->M < 16) return 0;
    /* the kernel stores whole 16 x 16 f32 fragments straight into C, so Dawn asks C's binding
       for at least their 1024 bytes: narrower results take the SIMT f16 kernel */
    return g->N >= 16 && wgml_sgmat_adapter_shape(ctx, &m, &n, &k, &sgs) ? WGML_F16_MATH_MATRIX : WGML_F16_MATH_F32_SUMS;
}

void wgml_gemm_params(wgml_context *ctx, wgml_launch *l, const wgml_gemm_args *g, bool gemv,
                      const wgml_gemm_config *cfg)
{
    uint64_t groups;
    const wgml_sgmat_config *sc = &cfg->sgmat;
    if (sc->sm_m) {
        uint64_t tm = (uint64_t)wgml_sgmat_tile_m(sc), tn = (uint64_t)wgml_sgmat_tile_n(sc);
        groups = (((uint64_t)g->M + tm - 1) / tm) * (((uint64_t)g->N + tn - 1) / tn);
    } else if (gemv) groups = g->trans_b ? ((uint64_t)g->N + 7) / 8 : ((uint64_t)g->N + cfg->gemv_cols - 1) / (uint64_t)cfg->gemv_cols;
    else if (cfg->cpu_rows) {
        uint64_t w = (uint64_t)cfg->cpu_lanes * (uint64_t)cfg->cpu_cols;
        groups = (((uint64_t)g->M + cfg->cpu_rows - 1) / (uint64_t)cfg->cpu_rows) * (((uint64_t)g->N + w - 1) / w);
    } else groups = (((uint64_t)g->M + 16 * cfg->tm - 1) / (16 * cfg->tm)) * (((uint64_t)g->N + 16 * cfg->tn - 1) / (16 * cfg->tn));
    uint32_t p[WGML_GEMM_PARAMS_BYTES / 4] = {0};
    uint32_t gx = wgml_grid(ctx, groups, l->groups);
    l->groups[2] = (uint32_t)g->batch;
    p[0] = (uint32_t)g->M; p[1] = (uint32_t)g->N; p[2] = (uint32_t)g->K; p[3] = (uint32_t)g->batch;
    p[4] = (uint32_t)g->lda; p[5] = (uint32_t)g->ldb; p[6] = (uint32_t)g->a_off; p[7] = (uint32_t)g->b_off;
    p[8] = (uint32_t)g->a_bs; p[9] = (uint32_t)g->b_bs; p[10] = (uint32_t)g->c_off; p[11] = g->has_bias;
    p[12] = (uint32_t)g->bias_off; p[13] = gx;
    memcpy(&p[14], &g->alpha, 4);
    p[15] = g->accumulate;
    p[16] = (uint32_t)g->a_bs1; p[17] = (uint32_t)g->b_bs1; p[18] = g->L1 > 1 ? (uint32_t)g->L1 : 1u;
    p[19] = (uint32_t)g->x_off;
    memcpy(l->params, p, sizeof p);
    l->params_size = sizeof p;
    /* each thread's trips along K (the generators' loops), plus room for the fixed loops of
       the reduction trees and the epilogue */
    uint64_t K = (uint64_t)g->K, slices = 256 / (uint64_t)(cfg->gemv_cols / 4);
    if (sc->sm_m) l->loop_trips = (K + (uint64_t)sc->bk - 1) / (uint64_t)sc->bk; /* then the fixed staging loops */
    else if (cfg->cpu_rows) l->loop_trips = K / 4 + 3; /* 4 k a step, then at most 3 one at a time */
    else if (!gemv) l->loop_trips = (K + cfg->bk - 1) / cfg->bk;
    else if (cfg->gemv_rows) l->loop_trips = K / (2 * slices) + 1 + 16 * (uint64_t)cfg->gemv_rows;
    else if (g->trans_b) l->loop_trips = (K + 31) / 32;
    else l->loop_trips = K / (4 * slices) + 3 + 264;
    l->loop_trips += 64;
    snprintf(l->what, sizeof l->what, "matmul %lldx%lldx%lld%s%s%s", (long long)g->M, (long long)g->N, (long long)g->K,
             g->batch > 1 ? " batched" : "", g->trans_a ? " tA" : "", g->trans_b ? " tB" : "");
}

/* The GEMM on the matrix units (ops/matmul/gemm_sgmat_wgsl.h), for g->f16_math ==
   WGML_F16_MATH_MATRIX, which wgml_gemm_resolve_f16_math gives only where the adapter has them. */
static wgml_status sgmat_pipeline(wgml_context *ctx, const wgml_gemm_args *g, wgml_launch *l, bool *gemv_out,
                                  wgml_gemm_config *cfg_out)
{
    int sm_m, sm_n, sm_k, sgs;
    if (!wgml_sgmat_adapter_shape(ctx, &sm_m, &sm_n, &sm_k, &sgs))
        return wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "matmul: %s has no f16 -> f32 subgroup matrices",
                              ctx->rt.info.name);
    /* either operand may be stored as halves (f16 tensors, resident f16 weights): read directly */
    uint32_t wg_limit = ctx->rt.limits.maxComputeWorkgroupStorageSize;
    bool hilo = g->f16_math == WGML_F16_MATH_MATRIX_SPLIT;
    wgml_sgmat_config c = hilo ? wgml_sgmat_choose_hilo(sm_m, sm_n, sm_k, sgs, g->trans_a, g->trans_b, wg_limit)
                               : wgml_sgmat_choose(sm_m, sm_n, sm_k, sgs, g->M, g->N, g->batch, g->trans_a, g->trans_b, wg_limit);
    int wa = wgml_sgmat_vec_width(g->a_off, g->lda, g->a_bs, g->a_bs1, g->trans_a ? g->M : g->K);
    int wb = wgml_sgmat_vec_width(g->b_off, g->ldb, g->b_bs, g->b_bs1, g->trans_b ? g->K : g->N);
    c.a_vec = wa < 8 ? wa : 8;
    c.b_vec = wb < 8 ? wb : 8;
    c.a_f16 = g->a_f16;
    c.b_f16 = g->b_f16;
    c.two_leading = g->L1 > 1;
    c.c_f16 = g->c_f16;
    c.act_x = (g->act & (WGML_ACT_GRAD | WGML_ACT_RESID)) != 0;
    /* results written 8 a lane as 16-byte vectors where every run of 8 is whole or outside, and
       only where the epilogue runs anyway: the mixed step gained, and lost where f32 C's direct
       stores were dropped too (H200, docs/MEASUREMENTS.md) */
    c.c_vec = wgml_sgmat_c_vec_fits(&c, g->act != WGML_ACT_NONE, (uint64_t)g->N, (uint64_t)g->c_off);
    const char *why = wgml_sgmat_config_problem(&c);
    if (!why && (uint32_t)wgml_sgmat_threads(&c) > ctx->rt.limits.maxComputeInvocationsPerWorkgroup)
        why = "invocations per workgroup";
    if (why || wgml_sgmat_workgroup_bytes(&c, g->trans_a, g->trans_b) > ctx->rt.limits.maxComputeWorkgroupStorageSize)
        return wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "matmul: no subgroup-matrix GEMM fits %s (%s)",
                              ctx->rt.info.name, why ? why : "workgroup memory");
    /* the variant key: every field the generator reads, the transposes and the activation */
    uint32_t key[12] = {WGML_KEY_GEMM_MATRIX,
                        (uint32_t)c.sm_m | (uint32_t)c.sm_n << 8 | (uint32_t)c.sm_k << 16,
                        (uint32_t)c.subgroup_size,
                        (uint32_t)c.sg_m | (uint32_t)c.sg_n << 8 | (uint32_t)c.frag_m << 16 | (uint32_t)c.frag_n << 24,
                        (uint32_t)c.bk, (uint32_t)c.double_buffer | (uint32_t)c.prefetch << 1,
                        (uint32_t)c.a_vec | (uint32_t)c.b_vec << 8,
                        (uint32_t)c.a_f16 | (uint32_t)c.b_f16 << 1 | (uint32_t)c.two_leading << 2 | (uint32_t)c.c_f16 << 3 |
                            (uint32_t)c.c_vec << 4 | (uint32_t)c.hilo << 5,
                        g->trans_a, g->trans_b, (uint32_t)g->act, (uint32_t)c.cs_rounds};
    if (!(l->pipeline = wgml_pipeline_find(ctx, key, 12))) {
        char *act = wgml_sgmat_act_source(g->act);
        if (g->act != WGML_ACT_NONE && !act) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "matmul: out of host memory");
        char *src = wgml_sgmat_gemm_source(&c, g->trans_a, g->trans_b, act);
        free(act);
        if (!(l->pipeline = wgml_pipeline_add(ctx, key, 12, src, true))) return ctx->rt.status;
    }
    *gemv_out = false;
    *cfg_out = (wgml_gemm_config){.sgmat = c, .bk = c.bk, .f16_math = g->f16_math, .a_f16 = g->a_f16, .b_f16 = g->b_f16};
    return WGML_OK;
}

wgml_status wgml_gemm_pipeline(wgml_context *ctx, const wgml_gemm_args *g, wgml_launch *l, bool *gemv_out,
                               wgml_gemm_config *cfg_out)
{
    if (g->f16_math == WGML_F16_MATH_MATRIX || g->f16_math == WGML_F16_MATH_MATRIX_SPLIT)
        return sgmat_pipeline(ctx, g, l, gemv_out, cfg_out);
    wgml_gemm_config cfg = wgml_gemm_choose(ctx, g);
    cfg.two_leading = g->L1 > 1;
    /* the GEMV kernel reads A as one contiguous row; the small-M one as a few */
    bool gemv = !cfg.f16_math && ((g->M == 1 && !g->trans_a) || cfg.gemv_rows);
    /* the variant key: what the generators read */
    uint32_t key[14] = {gemv ? WGML_KEY_GEMV : WGML_KEY_GEMM, (uint32_t)cfg.tm, (uint32_t)cfg.tn, (uint32_t)cfg.bk,
                        cfg.double_buffer, cfg.prefetch, cfg.warp_8x4,
                        (uint32_t)cfg.gemv_cols << 8 | (uint32_t)cfg.gemv_rows << 1 | cfg.gemv_subgroups,
                        cfg.vec_a, (uint32_t)cfg.vec_b | (uint32_t)cfg.b_f16 << 1 | (uint32_t)cfg.two_leading << 2 | (uint32_t)cfg.f16_math << 3 |
                        (uint32_t)cfg.a_f16 << 6,
                        g->trans_a, g->trans_b, (uint32_t)g->act,
                        (uint32_t)cfg.cpu_rows | (uint32_t)cfg.cpu_cols << 8 | (uint32_t)cfg.cpu_lanes << 16 | (uint32_t)cfg.cpu_subgroups << 31};
    if (!(l->pipeline = wgml_pipeline_find(ctx, key, 14))) {
        char *src = cfg.gemv_rows ? wgml_gemv_rows_source(&cfg, g->act)
                    : gemv        ? wgml_gemv_source(&cfg, g->trans_b, g->act)
                    : cfg.cpu_rows ? wgml_gemm_cpu_source(&cfg, g->trans_a, g->trans_b, g->act)
                                  : wgml_gemm_source(&cfg, g->trans_a, g->trans_b, g->act);
        if (!(l->pipeline = wgml_pipeline_add(ctx, key, 14, src, true))) return ctx->rt.status;
    }
    *gemv_out = gemv;
    *cfg_out = cfg;
    return WGML_OK;
}

/* Row stride of the stored matrix, mirroring operand_layout's choice. */
static int64_t ld_of(const wgml_tensor *t)
{
    int r = t->ndim - 2, c = t->ndim - 1;
    if (t->stride[c] == 1 || t->shape[c] == 1) return t->shape[r] == 1 ? t->shape[c] : t->stride[r];
    return t->shape[c] == 1 ? 1 : t->stride[c];
}

/* Operand x's stride along each of the output's leading dims (the kernels' slots 0 and 1,
   L0 and L1; one leading dim is L0): 0 where x lacks the dim or has it as 1 (broadcast). */
static void lead_strides(const wgml_tensor *x, const wgml_tensor *t, int64_t *bs0, int64_t *bs1)
{
    int64_t bs[2] = {0, 0};
    int nl = t->ndim - 2, lx = x->ndim - 2;
    for (int j = 0; j < nl; j++) {
        int jx = j - (nl - lx);
        if (jx >= 0 && x->shape[jx] > 1) bs[j] = x->stride[jx];
    }
    *bs0 = bs[0];
    *bs1 = bs[1];
}

/* K cut into `chunks` equal chunks, each a multiple of 16 and at least `depth` deep */
static bool chunks_fit(const wgml_gemm_args *g, int64_t chunks, int64_t depth)
{
    return g->K % chunks == 0 && (g->K / chunks) % 16 == 0 && g->K / chunks >= depth;
}

/* the partial results of `chunks` chunks fit one binding */
static bool partials_fit(const wgml_context *ctx, const wgml_gemm_args *g, int64_t chunks)
{
    return (uint64_t)chunks * (uint64_t)g->M * (uint64_t)g->N * 4 <= wgml_binding_limit(ctx);
}

/* Split K's model on the matrix units (shape: the adapter's matrix m, n, k and subgroup size):
   us for `chunks` chunks as waves of the policy's tiles over 132 SMs (an H100's or H200's;
   WebGPU does not say how many) plus the partials' sum. Fitted to an H200's GPT weight
   gradients: 9 us a wave besides its K slices (mostly the tiles' results), 1.23 us a slice of
   32 for 128x256 tiles (0.8 for 128x128), 2 ps a partial's element summed
   (docs/MEASUREMENTS.md). */
static double split_model_us(const wgml_context *ctx, const wgml_gemm_args *g, const int shape[4], int64_t chunks)
{
    const int64_t sms = 132;
    /* (the chunks run as a batch: the tile the GEMM of that batch would take) */
    wgml_sgmat_config tile = wgml_sgmat_choose(shape[0], shape[1], shape[2], shape[3], g->M, g->N, chunks, g->trans_a,
                                               g->trans_b, ctx->rt.limits.maxComputeWorkgroupStorageSize);
    int64_t tm = wgml_sgmat_tile_m(&tile), tn = wgml_sgmat_tile_n(&tile);
    int64_t groups = ((g->M + tm - 1) / tm) * ((g->N + tn - 1) / tn) * chunks, waves = (groups + sms - 1) / sms;
    double slice_us = tm * tn >= 128 * 256 ? 1.23 : 0.8;
    return (double)waves * ((double)(g->K / chunks) / 32.0 * slice_us + 9.0) +
           (chunks > 1 ? 2e-6 * (double)chunks * (double)g->M * (double)g->N : 0.0);
}

/* Split K: a GEMM of few output tiles and a long K (a weight's gradient, [C, rows] x
   [rows, N] with rows = batch x tokens) leaves most of a GPU idle, a tile per workgroup
   walking all of K. Its K is cut into S chunks that run as a batch of S GEMMs into partial
   results, which a second launch sums: S the least power of two that gives >= 256 tiles of
   128 x 128 (>= 512 on the matrix units, below), each chunk a multiple of 16 and at least 256
   long (1024). 0: no split, also where the GEMM has 256 tiles or more already, about two waves
   of an H200's 132 SMs: there split K only added a sum (GPT-2 small's dX GEMMs, 384 tiles of
   [8192 x 768] over K = 3072 and 2304, were split in two: without, the mixed step took 54.6-54.8
   ms against 55.8 on an H200, docs/MEASUREMENTS.md). */
static int64_t split_k(const wgml_context *ctx, const wgml_gemm_args *g)
{
    if (g->batch != 1 || g->has_bias || g->act != WGML_ACT_NONE || g->M < 32 || g->N < 32 || g->K < 2048) return 0;
    int64_t tiles = ((g->M + 127) / 128) * ((g->N + 127) / 128), s = 1;
    if (tiles >= 256) return 0;
    /* the matrix units: chunks at least 1024 deep, while tiles x S < 512 (H200, the GPT's weight
       gradients at K = 16384: S = 16 ran 51.8 / 91.0 / 93.4 TFLOP/s on [384 x 384] / [384 x 1536] /
       [1536 x 384] against 32.4 with S = 32 and 79.8 / 75.3 with S = 8, this rule's earlier
       choices; S = 64 was slower still, docs/MEASUREMENTS.md). The split mode's three products a
       tile take tiles x S < 1024: GPT-2 small's f32split step -1.9% (768 x 3072 over K = 8192 in
       8 chunks, not 4), nanoGPT's unchanged; fewer chunks (< 256) cost 3.5-4.1%, chunks 512 deep
       lost nanoGPT 0.6-0.8% (H200, docs/MEASUREMENTS.md) */
    bool units = g->f16_math == WGML_F16_MATH_MATRIX || g->f16_math == WGML_F16_MATH_MATRIX_SPLIT;
    int64_t most = g->f16_math == WGML_F16_MATH_MATRIX_SPLIT ? 1024 : units ? 512 : 256, depth = units ? 1024 : 256;
    while (tiles * s < most && chunks_fit(g, 2 * s, depth)) s *= 2;
    int shape[4];
    /* (the model is the f16 policy's kernel's) */
    if (g->f16_math == WGML_F16_MATH_MATRIX && wgml_sgmat_adapter_shape(ctx, &shape[0], &shape[1], &shape[2], &shape[3])) {
        /* the matrix units: another count (a power of two whose partials fit a binding) where the
           model takes 5% less time: fewer, deeper chunks where the rule above leaves most of a
           wave idle (768 x 2304 over K = 8192: 2 chunks, 108 tiles, one wave, instead of 8) */
        double best = 0, at_s = 0;
        int64_t pick = s;
        for (int64_t chunks = 1; chunks_fit(g, chunks, chunks > 1 ? depth : 0) && partials_fit(ctx, g, chunks); chunks *= 2) {
            double us = split_model_us(ctx, g, shape, chunks);
            if (chunks == s) at_s = us;
            if (chunks == 1 || us < best) best = us, pick = chunks;
        }
        if (at_s > 0 && best < 0.95 * at_s) s = pick;
    }
    if (s == 1 || !partials_fit(ctx, g, s)) return 0;
    return s;
}

/* The GEMM node t runs as: its arguments, the operands' roles swapped (N == 1), A widened first
   (f16 A under f32 arithmetic), and split K's chunk count (0: none) with g cut into them. */
static void plan_gemm(wgml_context *ctx, const wgml_tensor *t, wgml_gemm_args *out, bool *swap_out, bool *widen_out,
                      int64_t *S_out)
{
    wgml_tensor *a = t->src[0], *b = t->src[1];
    wgml_matmul_params mp = wgml_matmul_params_of(t);
    wgml_tensor *bias = mp.bias ? t->src[2] : NULL;
    wgml_gemm_args g = {0};
    g.c_f16 = t->dtype == WGML_F16;
    g.M = t->shape[t->ndim - 2];
    g.N = t->shape[t->ndim - 1];
    g.K = mp.K;
    g.batch = 1;
    for (int j = 0; j < t->ndim - 2; j++) g.batch *= t->shape[j];
    g.L1 = t->ndim == 4 ? t->shape[1] : 1;
    g.trans_a = mp.trans_a;
    g.trans_b = mp.trans_b;
    g.act = mp.act;
    if (mp.act_grad) { /* X is src[2] */
        g.act = WGML_ACT_GRAD | mp.act_grad | (t->src[2]->dtype == WGML_F16 ? WGML_ACT_X_F16 : 0);
        g.x_off = t->src[2]->offset;
    }
    if (mp.residual) { /* X is src[2 + bias], f32 */
        const wgml_tensor *x = t->src[2 + mp.bias];
        g.act = WGML_ACT_RESID | mp.act;
        g.x_off = x->offset;
    }
    g.alpha = mp.alpha;
    g.lda = ld_of(a);
    g.ldb = ld_of(b);
    g.a_off = a->offset;
    g.b_off = b->offset;
    lead_strides(a, t, &g.a_bs, &g.a_bs1);
    lead_strides(b, t, &g.b_bs, &g.b_bs1);
    g.has_bias = bias != NULL;
    g.bias_off = bias ? bias->offset : 0;
    g.f16_math = mp.f16_math;
    g.a_f16 = a->dtype == WGML_F16;
    g.b_f16 = b->dtype == WGML_F16;
    bool matrix_asked = g.f16_math == WGML_F16_MATH_MATRIX || g.f16_math == WGML_F16_MATH_MATRIX_SPLIT;
    /* B shared by the whole batch and A's matrices one after another, rows lda apart
       throughout ([B, T, C] x [C, N] with A contiguous): one [batch * M, K] x [K, N] GEMM,
       whose grid is larger than a batch of small ones. (A single row has no row stride of
       its own: the batch's stride serves.) */
    if (g.batch > 1 && !g.trans_a && g.b_bs == 0 && g.b_bs1 == 0) {
        int64_t L0 = g.batch / g.L1, lda = g.M == 1 ? (g.L1 > 1 ? g.a_bs1 : g.a_bs) : g.lda;
        if ((g.L1 == 1 || g.a_bs1 == g.M * lda) && (L0 == 1 || g.a_bs == g.L1 * g.M * lda)) {
            g.M *= g.batch;
            g.lda = lda;
            g.batch = g.L1 = 1;
            g.a_bs = g.a_bs1 = 0;
        }
    }
    /* WGML_F16_MATH_MATRIX: the matrix units, or the SIMT f16 kernel without them, or the
       f32 GEMVs for few rows (once B-sharing batches have folded into rows) */
    if (matrix_asked) g.f16_math = wgml_gemm_resolve_f16_math(ctx, &g);
    /* N == 1: C = A b is the GEMV b^T A^T with the operands' roles swapped (b as the row,
       A as the matrix, its transpose flag flipped); a bias of one element would broadcast,
       which the GEMV epilogue does not do, so not then; nor with f16_math, which runs the
       tiled GEMM for every shape */
    bool swap = g.N == 1 && g.M > 1 && !g.has_bias && !mp.act_grad && !mp.residual && (g.trans_b || g.ldb == 1) && !g.f16_math;
    /* (not when its dot-product GEMV, 32 threads along K, would loop past the adapter's limit
       where the small-M GEMV would not) */
    if (swap && ((uint64_t)g.K + 31) / 32 + 64 > ctx->rt.loop_limit && g.M <= 16) swap = false;
    if (swap) {
        wgml_gemm_args s = g;
        s.M = 1;
        s.N = g.M;
        s.trans_a = false;
        s.trans_b = !g.trans_a;
        s.lda = 1;
        s.a_off = g.b_off;
        s.a_bs = g.b_bs;
        s.a_bs1 = g.b_bs1;
        s.ldb = g.lda;
        s.b_off = g.a_off;
        s.b_bs = g.a_bs;
        s.b_bs1 = g.a_bs1;
        s.a_f16 = g.b_f16;
        s.b_f16 = g.a_f16;
        g = s;
    }
    /* an f16 A under f32 arithmetic: the f32 kernels (GEMVs, the CPU GEMM) read B's halves but
       only f32 A, so A's buffer is widened into the node's scratch by a launch before the GEMM
       (f16 arithmetic reads it directly: the tiled GEMM, the matrix units). Not with a split
       K, whose partials take the scratch */
    bool widen_a = g.a_f16 && !g.f16_math;
    if (widen_a) g.a_f16 = false;
    int64_t S = swap || widen_a ? 0 : split_k(ctx, &g);
    /* the split mode's operand maxima then wait in C's memory (the scratch holds the partials,
       and the sum of them writes C after the GEMM read them): 2 x WGML_SGMAT_MAX_ABS_GROUPS words */
    if (g.f16_math == WGML_F16_MATH_MATRIX_SPLIT && g.M * g.N < 2 * WGML_SGMAT_MAX_ABS_GROUPS) S = 0;
    if (S) { /* chunk s of K: A's columns (rows when transposed) and B's rows s Kc on */
        int64_t Kc = g.K / S;
        g.batch = S;
        g.K = Kc;
        g.a_bs = g.trans_a ? Kc * g.lda : Kc;
        g.b_bs = g.trans_b ? Kc : Kc * g.ldb;
        g.a_bs1 = g.b_bs1 = 0;
        g.L1 = 1;
    }
    *out = g;
    *swap_out = swap;
    *widen_out = widen_a;
    *S_out = S;
}

/* (f16_math resolved to the matrix units means the adapter has them) */
static bool plan_stores_f16(const wgml_gemm_args *g, bool swap, bool widen_a, int64_t S)
{
    return g->f16_math == WGML_F16_MATH_MATRIX && !swap && !widen_a && !S;
}

bool wgml_matmul_stores_f16(wgml_context *ctx, const wgml_tensor *t)
{
    wgml_gemm_args g;
    bool swap, widen_a;
    int64_t S;
    plan_gemm(ctx, t, &g, &swap, &widen_a, &S);
    return plan_stores_f16(&g, swap, widen_a, S);
}

/* The split mode's first launch: A's and B's partial maxima (wgml_sgmat_max_abs_wgsl) into the
   node's scratch (the caller binds C's memory instead under a split K) */
static wgml_status max_abs_launch(wgml_context *ctx, const wgml_gemm_args *g, wgml_tensor *abase, wgml_tensor *bbase,
                                  wgml_launch *l)
{
    uint32_t key[1] = {WGML_KEY_GEMM_MAX_ABS};
    if (!(l->pipeline = wgml_pipeline_find(ctx, key, 1))) {
        char *src = strdup(wgml_sgmat_max_abs_wgsl());
        if (!src) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "matmul: out of host memory");
        if (!(l->pipeline = wgml_pipeline_add(ctx, key, 1, src, true))) return ctx->rt.status;
    }
    int64_t batch = g->batch, L1 = g->L1 > 1 ? g->L1 : 1;
    wgml_sgmat_max_abs_params mp[2] = {
        {(uint32_t)g->a_off, (uint32_t)g->lda, (uint32_t)(g->trans_a ? g->K : g->M), (uint32_t)(g->trans_a ? g->M : g->K),
         (uint32_t)g->a_bs, (uint32_t)g->a_bs1, (uint32_t)L1, (uint32_t)batch},
        {(uint32_t)g->b_off, (uint32_t)g->ldb, (uint32_t)(g->trans_b ? g->N : g->K), (uint32_t)(g->trans_b ? g->K : g->N),
         (uint32_t)g->b_bs, (uint32_t)g->b_bs1, (uint32_t)L1, (uint32_t)batch}};
    memcpy(l->params, mp, sizeof mp);
    l->params_size = sizeof mp;
    l->groups[0] = 2 * WGML_SGMAT_MAX_ABS_GROUPS, l->groups[1] = l->groups[2] = 1;
    /* a lane's elements of the larger operand, then the workgroup's tree */
    uint64_t a_n = (uint64_t)batch * (uint64_t)g->M * (uint64_t)g->K, b_n = (uint64_t)batch * (uint64_t)g->K * (uint64_t)g->N;
    l->loop_trips = (a_n > b_n ? a_n : b_n) / (WGML_SGMAT_MAX_ABS_GROUPS * 256) + 1 + 8;
    snprintf(l->what, sizeof l->what, "matmul: operand maxima");
    l->buffers[0] = NULL;
    l->buffers[1] = abase;
    l->buffers[2] = bbase;
    l->nbuffers = 3;
    l->scratch_mask = 1u << 0;
    l->scratch_bytes = 2 * WGML_SGMAT_MAX_ABS_GROUPS * 4;
    return WGML_OK;
}

wgml_status wgml_build_matmul(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    wgml_tensor *a = t->src[0], *b = t->src[1];
    wgml_matmul_params mp = wgml_matmul_params_of(t);
    wgml_tensor *bias = mp.bias ? t->src[2] : NULL;
    wgml_gemm_args g;
    bool swap, widen_a;
    int64_t S;
    plan_gemm(ctx, t, &g, &swap, &widen_a, &S);
    if (g.c_f16 && !plan_stores_f16(&g, swap, widen_a, S))
        return wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "matmul: an f16 result needs the matrix units' GEMM without split K");
    wgml_tensor *abase = wgml_tensor_base(swap ? b : a);
    if (widen_a) { /* launch 0: A's buffer, every element up to its end, widened into scratch */
        wgml_status st = wgml_kernel_pipeline(ctx, "widen_f16", l);
        if (st) return st;
        uint64_t n = (uint64_t)(abase->offset + abase->numel);
        uint32_t p[4] = {(uint32_t)n, wgml_grid(ctx, (n + 255) / 256, l->groups), 0, 0};
        memcpy(l->params, p, sizeof p);
        l->params_size = sizeof p;
        l->loop_trips = 1;
        snprintf(l->what, sizeof l->what, "matmul: f16 A widened");
        l->buffers[0] = abase;
        l->buffers[1] = NULL;
        l->scratch_mask = 1u << 1;
        l->scratch_bytes = n * 4;
        l->nbuffers = 2;
        *count = 2;
        l++;
        *l = (wgml_launch){0};
    }
    bool hilo = g.f16_math == WGML_F16_MATH_MATRIX_SPLIT;
    if (hilo) { /* launch 0: the operands' partial maxima into scratch (C with a split K), which the GEMM reads */
        wgml_status st = max_abs_launch(ctx, &g, abase, wgml_tensor_base(b), l);
        if (st) return st;
        if (S) l->buffers[0] = t, l->scratch_mask = 0, l->scratch_bytes = (uint64_t)S * (uint64_t)g.M * (uint64_t)g.N * 4;
        *count = 2;
        l++;
        *l = (wgml_launch){0};
    }
    bool gemv;
    wgml_gemm_config cfg;
    wgml_status st = wgml_gemm_pipeline(ctx, &g, l, &gemv, &cfg);
    if (st) return st;
    wgml_gemm_params(ctx, l, &g, gemv, &cfg);
    l->buffers[0] = widen_a ? NULL : abase;
    if (widen_a) l->scratch_mask = 1u << 0;
    l->buffers[1] = wgml_tensor_base(swap ? a : b);
    l->buffers[2] = bias ? wgml_tensor_base(bias) : wgml_tensor_base(a);
    l->buffers[3] = t;
    l->nbuffers = 4;
    if (mp.act_grad || mp.residual) l->buffers[l->nbuffers++] = wgml_tensor_base(t->src[2 + mp.bias]); /* X, binding 5 */
    if (hilo && S) l->buffers[l->nbuffers++] = t; /* the maxima, after X */
    else if (hilo) l->scratch_mask = 1u << l->nbuffers, l->buffers[l->nbuffers++] = NULL;
    if (S) { /* the partials [S, M, N] in scratch, then their sum */
        wgml_launch *l2 = l + 1;
        *l2 = *l;
        l->buffers[3] = NULL;
        l->scratch_mask = 1u << 3;
        l->scratch_bytes = hilo ? 0 : (uint64_t)S * (uint64_t)g.M * (uint64_t)g.N * 4; /* (the first launch's) */
        l2->scratch_bytes = 0;
        if (!wgml_colsum_launches(ctx, l2, 1, (uint64_t)S, (uint64_t)(g.M * g.N), 0, false, true, &st))
            return st ? st : wgml_fail(ctx, WGML_ERROR_LIMIT, "matmul: split K's sum of %lld partials fits no launch", (long long)S);
        l2->buffers[0] = NULL;
        l2->scratch_mask = 1u << 0;
        l2->buffers[1] = t;
        l2->nbuffers = 2;
        *count = hilo ? 3 : 2;
    }
    return WGML_OK;
}

/* ---------------------------------------------------------------- gradient rules and entries */

wgml_tensor *wgml_rule_matmul_act_grad(wgml_context *ctx, wgml_tensor *g, int act, wgml_tensor *x)
{
    if (ctx->compute_precision != WGML_PRECISION_MIXED || !wgml_matmul_act_grad_fn(act) || !g || g->status || !x || x->status)
        return NULL;
    /* g is the GEMM's result itself, or a reshape of all of it to the same shape (a cast's
       gradient passes an f32 g on as such a view), and nothing else reads either: refs count
       the scope's hold and each lazy reader (a view holds its base twice) */
    wgml_tensor *m = g;
    if (g->op == WGML_OP_VIEW) {
        m = wgml_tensor_base(g);
        if (g->view_kind != WGML_VIEW_RESHAPE || g->offset || g->numel != m->numel || !wgml_is_contiguous(g) ||
            g->refs != (g->user_held ? 1 : 0) || m->refs != (m->user_held ? 1 : 0) + 2)
            return NULL;
    } else if (g->refs != (g->user_held ? 1 : 0)) return NULL;
    if (m->op != WGML_OP_MATMUL || m->buf || m->dest || m->dtype != WGML_F32 || m->ndim != x->ndim ||
        memcmp(m->shape, x->shape, (size_t)x->ndim * sizeof *x->shape) || !wgml_is_contiguous(x) ||
        (x->dtype != WGML_F32 && x->dtype != WGML_F16))
        return NULL;
    wgml_matmul_params mp = wgml_matmul_params_of(m);
    if (mp.bias || mp.act != WGML_ACT_NONE || mp.act_grad || mp.residual) return NULL;
    wgml_tensor *src[3] = {m->src[0], m->src[1], x};
    wgml_tensor *t = wgml_node(ctx, WGML_OP_MATMUL, m->ndim, m->shape, 3, src);
    if (!t || t->status) return t;
    mp.act_grad = act;
    wgml_matmul_params_of_set(t, mp);
    /* halves where the GEMM stores them itself (the matrix units), as the gradient GEMMs that
       read it would round it anyway (vjp_matmul's cast); else f32 */
    t->dtype = WGML_F16;
    if (!wgml_matmul_stores_f16(ctx, t)) t->dtype = WGML_F32;
    return t;
}

/* (the op table's add_in) m + r as one GEMM, m an f32 result that nothing reads yet: m's
   operands, bias and activation again, r its epilogue's X (WGML_ACT_RESID). m, now unread, is
   never run; it is left as it is, so `own` changes nothing. */
static wgml_tensor *matmul_add_in(wgml_context *ctx, wgml_tensor *m, wgml_tensor *r, bool own)
{
    (void)own;
    if (m->status || r->status || m->buf || m->dest || m->refs != (m->user_held ? 1 : 0) ||
        m->dtype != WGML_F32 || m->tail || r->ndim != m->ndim || memcmp(r->shape, m->shape, (size_t)m->ndim * sizeof *m->shape) ||
        !wgml_is_contiguous(r) || r->dtype != WGML_F32) /* (X of halves: the SIMT kernels do not enable f16 for it) */
        return NULL;
    wgml_matmul_params mp = wgml_matmul_params_of(m);
    if (mp.act_grad || mp.residual) return NULL;
    /* not where m runs as a GEMV with its operands swapped, or splits K (a weight's gradient of
       few tiles, the tied embedding's): those kernels have no X, and the GEMM would lose more
       than the add costs */
    wgml_gemm_args g;
    bool swap, widen_a;
    int64_t S;
    plan_gemm(ctx, m, &g, &swap, &widen_a, &S);
    if (swap || S) return NULL;
    wgml_tensor *src[4] = {m->src[0], m->src[1], mp.bias ? m->src[2] : r, r};
    wgml_tensor *t = wgml_node(ctx, WGML_OP_MATMUL, m->ndim, m->shape, 3 + mp.bias, src);
    if (!t || t->status) return t;
    mp.residual = true;
    wgml_matmul_params_of_set(t, mp);
    return t;
}

typedef wgml_tensor T;

/* A matmul operand computed again for a weight's gradient (see vjp_matmul), or NULL where it
   is kept instead. An elementwise node storing halves (a cast to f16 fused into its producer)
   is computed again only with that producer, when the producer is itself computed again (a
   GELU of a kept pre-activation): else the halves are kept, half their input's memory. A row
   op storing halves (a norm under mixed precision) is kept too: a second launch over its rows
   cost more than the memory was worth (docs/MEASUREMENTS.md). */
static T *recomputed(wgml_context *c, T *a, int depth)
{
    if (!wgml_op_table[a->op]->recompute || a->nsrc < 1 || a->buf || a->dest || depth > 1) return NULL;
    if (a->dtype == WGML_F16 && !wgml_op_is_elementwise(a->op)) return NULL;
    T *src[WGML_MAX_SRC];
    memcpy(src, a->src, sizeof src);
    if (wgml_op_is_elementwise(a->op) && a->dtype == WGML_F16 && !(src[0] = recomputed(c, a->src[0], depth + 1))) return NULL;
    T *again = wgml_node(c, (wgml_op)a->op, a->ndim, a->shape, a->nsrc, src);
    if (again) {
        memcpy(again->params, a->params, sizeof a->params);
        again->dtype = a->dtype; /* a norm storing halves (a cast to f16 of it) stores them again */
    }
    return again;
}

static wgml_status vjp_matmul(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0], *b = t->src[1];
    wgml_matmul_params mp = wgml_matmul_params_of(t);
    if (mp.act_grad) return wgml_fail(c, WGML_ERROR_UNSUPPORTED, "backward: a matmul times an activation's derivative is made "
                                      "by backward only (no second derivatives)");
    if (mp.residual) gin[2 + mp.bias] = g; /* the residual's gradient: the sum's own */
    bool ta = mp.user_trans_a, tb = mp.user_trans_b; /* as the caller gave them */
    int act = mp.act;
    float alpha = mp.alpha;
    T *gz = g;
    if (act == WGML_ACT_RELU) gz = wgml_rule_relu_grad(c, t, g); /* relu'(z) = (out > 0) */
    else if (act != WGML_ACT_NONE) {
        wgml_matmul_desc pre = {.trans_a = ta, .trans_b = tb, .alpha = alpha, .bias = mp.bias ? t->src[2] : NULL};
        T *z = wgml_matmul_ex(c, a, b, &pre); /* recompute the pre-activation */
        /* the activation's own rule, on a node of it over z (its rule reads z; the node
           itself is never evaluated) */
        T *y = wgml_unary_node(c, wgml_matmul_act_op[act], z);
        T *gy[1] = {NULL};
        wgml_status st = y && !y->status ? wgml_op_table[y->op]->vjp(c, y, g, gy) : WGML_ERROR_INVALID_ARGUMENT;
        if (y) wgml_tensor_free(y);
        if (st) return st;
        gz = gy[0];
    }
    T *gzs = alpha != 1.0f ? wgml_rule_scal(c, WGML_MUL, gz, alpha) : gz;
    /* under mixed precision both gradient GEMMs read gZ as halves: they round it to f16 as they
       stage it anyway (the matrix units and the SIMT f16 kernels alike), so one cast serves both
       where each read f32 (H200, nanoGPT step: the backward GEMMs 86 ms less over 30 steps, the
       casts 36 launches a step more; docs/MEASUREMENTS.md). Not where a dim under 16 sends a
       GEMM to the f32 GEMVs, which would read the rounded values. */
    int64_t rows = t->shape[t->ndim - 2], cols = t->shape[t->ndim - 1];
    if (c->compute_precision == WGML_PRECISION_MIXED && gzs->dtype == WGML_F32 && rows >= 16 && cols >= 16 && mp.K >= 16)
        gzs = wgml_cast(c, gzs, WGML_F16);
    /* the bias's gradient sums gZ's rows; under mixed precision the halves the GEMMs read, as an
       f16 autocast's would: gZ is then read once, by the cast, into which an elementwise gZ (the
       GELU's gradient) fuses rather than being stored in f32 for two readers */
    if (mp.bias) gin[2] = wgml_rule_sum_rows(c, gzs->dtype == WGML_F16 && alpha == 1.0f ? gzs : gz);
    /* gA = gZ op(B)^T, stored as A is; gB = op(A)^T gZ, stored as B is; over the batch's
       leading dims, each broadcast as the forward's were */
    wgml_matmul_desc da = ta ? (wgml_matmul_desc){.trans_a = tb, .trans_b = 1} : (wgml_matmul_desc){.trans_b = !tb};
    gin[0] = ta ? wgml_matmul_ex(c, b, gzs, &da) : wgml_matmul_ex(c, gzs, b, &da);
    wgml_matmul_desc db = tb ? (wgml_matmul_desc){.trans_a = 1, .trans_b = ta} : (wgml_matmul_desc){.trans_a = !ta};
    /* A the lazy output of a cheap op whose inputs the backward keeps anyway (an MLP's
       activation, whose own gradient reads its input; a norm, whose gradient reads its input):
       computed again for B's gradient rather than kept, so that A is freed after the forward
       matmul (the GELU's output and the norms' outputs of a GPT-2 block: the nanoGPT-sized
       step's peak went from 3,258 to 2,922 MiB, docs/MEASUREMENTS.md) */
    T *again = recomputed(c, a, 0);
    if (again) a = again;
    int64_t K = mp.K, N = t->shape[t->ndim - 1];
    if (t->ndim > 2 && b->numel == K * N && !ta && a->numel * N == t->numel * K && wgml_is_contiguous(a)) {
        /* B shared by the whole batch (a layer's weight) and A not broadcast: the batch's sum
           is the GEMM's own, A's and gZ's rows flattened into its K (views), rather than a
           gradient per matrix of the batch summed after */
        int64_t af[2] = {a->numel / K, K}, gf[2] = {t->numel / N, N};
        T *a2 = wgml_reshape(c, a, 2, af), *g2 = wgml_reshape(c, gzs, 2, gf);
        gin[1] = wgml_reshape(c, tb ? wgml_matmul_ex(c, g2, a2, &db) : wgml_matmul_ex(c, a2, g2, &db), b->ndim, b->shape);
    } else {
        gin[1] = tb ? wgml_matmul_ex(c, gzs, a, &db) : wgml_matmul_ex(c, a, gzs, &db);
    }
    /* an operand broadcast along a leading dim (missing or 1) gets the sum along it */
    if (gin[0]) gin[0] = wgml_rule_unbroadcast(c, gin[0], a);
    if (gin[1]) gin[1] = wgml_rule_unbroadcast(c, gin[1], b);
    return WGML_OK;
}

/* a sum of K products of [-2, 2] values (typically ~3 for K = 7) may cancel to near 0 */
WGML_OP_ENTRY(MATMUL) = {.name = "matmul", .kind = WGML_KIND_MATMUL, .build = wgml_build_matmul, .arity = 3, .vjp = vjp_matmul, .f16_in = 7,
                         .f16_out = true, .f16_out_if = wgml_matmul_stores_f16, .add_in = matmul_add_in, DOMAIN(-2, 2, -2, 2), ARITH, FLOOR(1)};
