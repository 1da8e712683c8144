/* The benchmark knobs of engine/tuning.h, parsed once per context from its settings (the desc's
   fields or the environment's variables, runtime/settings.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tuning.h"

static const char tuning_key; /* names the extension */

static void tuning_read(wgml_context *ctx, wgml_tuning *t)
{
    *t = (wgml_tuning){0};
    const wgml_settings *s = &ctx->rt.settings;
    const char *e = s->gemm_tile;
    int tm, tn, bk, st;
    if (e && sscanf(e, "%d,%d,%d,%d", &tm, &tn, &bk, &st) == 4 && (tm == 4 || tm == 8 || tm == 16) &&
        (tn == 4 || tn == 8 || tn == 16) && (bk == 4 || bk == 8 || bk == 16 || bk == 32) && st >= 1 && st <= 4) {
        t->gemm_tile_set = true;
        t->gemm_tm = tm, t->gemm_tn = tn, t->gemm_bk = bk, t->gemm_stages = st;
    }
    const char *gc0 = s->gemm_cpu;
    int cr, cc, cl;
    if (gc0 && *gc0 == '0') t->gemm_cpu = -1;
    else if (gc0 && *gc0 == '1' && !gc0[1]) t->gemm_cpu = 1;
    else if (gc0 && sscanf(gc0, "%d,%d,%d", &cr, &cc, &cl) == 3 && (cr == 4 || cr == 8 || cr == 16 || cr == 32 || cr == 64) &&
             (cc == 4 || cc == 8 || cc == 16) && cl >= 8 && cl <= 256 && !(cl & (cl - 1)))
        t->gemm_cpu = 1, t->gemm_cpu_rows = cr, t->gemm_cpu_cols = cc, t->gemm_cpu_lanes = cl;
    const char *cs = s->gemm_cpu_subgroups;
    t->gemm_cpu_no_subgroups = cs && *cs == '0';
    const char *wl = s->gemm_warp;
    t->gemm_warp_8x4 = wl && !strcmp(wl, "8x4");
    const char *gr = s->gemv_rows;
    t->gemv_rows_off = gr && *gr == '0';
    const char *sge = s->subgroups;
    t->gemv_subgroups = ctx->rt.info.has_subgroups && sge && *sge == '1';
    const char *gc = s->gemv_cols;
    int cols = gc ? atoi(gc) : 0;
    t->gemv_cols = cols == 16 || cols == 32 || cols == 64 ? cols : 0;
    /* 0: the fused kernel decides (engine/fusion.c) */
    const char *unroll = s->ew_unroll;
    int u = unroll ? atoi(unroll) : 0;
    t->ew_unroll = u == 1 || u == 2 || u == 4 || u == 8 ? u : 0;
    const char *at = s->attn_tiles;
    int *a = &t->attn_tiles[0][0];
    t->attn_tiles_set = at && sscanf(at, "%d,%d,%d,%d,%d,%d,%d,%d,%d", &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6],
                                     &a[7], &a[8]) == 9;
    const char *ap = s->attn_pre;
    t->attn_pre = ap && *ap >= '0' && *ap <= '9' ? atoi(ap) & 47 : -1;
    const char *am = s->attn_matrix;
    t->attn_mpre = t->attn_mform = t->attn_morder = -1;
    int *em = t->attn_emu;
    em[0] = em[1] = em[2] = 16, em[3] = 32, em[4] = 16;
    if (am && !strcmp(am, "0")) t->attn_matrix = -1;
    else if (am && !strncmp(am, "emulate", 7)) {
        t->attn_matrix = 1;
        int m, n, k, l, c, f;
        int got = sscanf(am, "emulate,%dx%dx%d,%d,%d,%d", &m, &n, &k, &l, &c, &f);
        if (got >= 4) em[0] = m, em[1] = n, em[2] = k, em[3] = l;
        if (got >= 5) em[4] = c;
        if (got == 6) t->attn_mform = f;
    } else if (am) {
        int *mc = t->attn_mcols;
        if (sscanf(am, "cols,%d,%d,%d,%d,%d,%d,%d", &mc[0], &mc[1], &mc[2], &t->attn_msub, &t->attn_mpre, &t->attn_mform,
                   &t->attn_morder) < 3)
            mc[0] = mc[1] = mc[2] = t->attn_msub = 0, t->attn_mpre = t->attn_mform = t->attn_morder = -1;
    }
}

const wgml_tuning *wgml_tuning_of(wgml_context *ctx)
{
    static const wgml_tuning defaults = {.ew_unroll = 0, .attn_pre = -1, .attn_mpre = -1, .attn_mform = -1, .attn_morder = -1};
    wgml_tuning *t = wgml_extension_get(ctx, &tuning_key);
    if (t) return t;
    if (!(t = wgml_extension_make(ctx, &tuning_key, sizeof *t, NULL))) return &defaults;
    tuning_read(ctx, t);
    return t;
}
