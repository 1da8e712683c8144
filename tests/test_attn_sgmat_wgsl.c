/* The generator of attention on subgroup matrices (ops/attention/attention_sgmat_wgsl.c) on a
   machine without matrix units: for every kernel, head dim, matrix shape, subgroup size and
   step, the WGSL's structure follows from the config (the matrix products per step, the
   fragment loads and their layouts, the workgroup size, the workgroup memory it reports, the
   stand-ins when emulated), and bad configs are refused. The kernels themselves run in
   test_attention_mixed (on a GPU with matrix units, and emulated on lavapipe). */
#include <stdlib.h>
#include <string.h>

#include "ops/attention/attention.h"
#include "ops/attention/attention_sgmat_wgsl.h"
#include "harness.h"

/* Every matrix load and store with a constant stride has rows a multiple of 16 bytes apart:
   Vulkan asks it of OpCooperativeMatrixLoadKHR and OpCooperativeMatrixStoreKHR, which Dawn's
   subgroupMatrixLoad and subgroupMatrixStore become there (VUID-RuntimeSpirv-
   OpCooperativeMatrixLoadKHR-08986; xs, ps and pp hold halves, the rest f32) */
static bool matrix_strides_aligned(const char *src)
{
    static const char *const calls[] = {"subgroupMatrixLoad<", "subgroupMatrixStore("};
    for (int i = 0; i < N_OF(calls); i++)
        for (const char *p = strstr(src, calls[i]); p; p = strstr(p + 1, calls[i])) {
            const char *open = strchr(p, '('), *amp = strchr(p, '&'), *last = NULL, *e = open;
            for (int depth = 0; *e; e++) {
                depth += *e == '(' ? 1 : *e == ')' ? -1 : 0;
                if (*e == ',' && depth == 1) last = e;
                if (depth == 0) break;
            }
            if (!open || !amp || !last || !*e) return false;
            char *end;
            long stride = strtol(last + 1, &end, 10);
            if (*end != 'u') continue; /* (a stride known at run time: the direct stores' rows of O) */
            bool halves = !strncmp(amp, "&xs", 3) || !strncmp(amp, "&ps", 3) || !strncmp(amp, "&pp", 3);
            if (stride * (halves ? 2 : 4) % 16) return false;
        }
    return true;
}

static void every_kernel_and_config(void)
{
    static const int kinds[] = {WGML_ATTN_FORWARD, WGML_ATTN_DKV, WGML_ATTN_DQ};
    static const int shapes[][3] = {{16, 16, 16}, {16, 8, 16}, {16, 8, 8}, {8, 8, 8}};
    static const int dims[] = {5, 16, 32, 33, 64, 96, 128};
    static const int sizes[] = {32, 8, 64};
    static const int cols[] = {16, 32, 64};
    int made = 0;
    /* prefetch (1), two staging buffers (4), P over a staged tile (8), the kept rows staged by
       halves (16); bit 2 has no meaning, so it is stepped over */
    for (int opt = 0; opt < 32; opt += (opt & 1) ? 3 : 1)
    for (int ki = 0; ki < N_OF(kinds); ki++)
        for (int s = 0; s < N_OF(shapes); s++)
            for (int di = 0; di < N_OF(dims); di++)
                for (int z = 0; z < N_OF(sizes); z++)
                    for (int ci = 0; ci < N_OF(cols); ci++) {
                        wgml_attn_sgmat c = {.kind = kinds[ki], .d = dims[di], .sm_m = shapes[s][0], .sm_n = shapes[s][1],
                                             .sm_k = shapes[s][2], .subgroup_size = sizes[z], .subgroups = 4, .cols = cols[ci],
                                             .vec = dims[di] % 4 == 0, .emulate = (s + z + opt) % 3 == 0,
                                             .prefetch = opt & 1, .stage2 = opt & 4, .p_in_xs = opt & 8, .kept_halves = opt & 16, .tile_major = (z + ci) & 1, .direct = (di + ci) % 2 == 0,
                                             /* the one-walk forward and two walks in turn */
                                             .one_pass = (di + z + ci) & 1,
                                             /* the gradients' lanes in quads, or two a row */
                                             .quads = (di + s + opt) & 1};
                        bool one = c.one_pass && c.kind == WGML_ATTN_FORWARD;
                        /* the forward's forms: its lanes on column pairs, P before the vote, its
                           first reads up front (where each applies: the refusals are below) */
                        c.pairs = c.kind == WGML_ATTN_FORWARD && !c.quads && c.subgroup_size == 2 * c.sm_m && (di + z + opt) % 2 == 0;
                        c.p_early = one && (s + ci + opt) % 2 == 0;
                        c.front_loads = one && c.prefetch && (di + ci) % 3 != 1;
                        int lpr = c.quads ? 4 : c.subgroup_size >= c.sm_m ? c.subgroup_size / c.sm_m : 1;
                        bool quads_bad = c.quads && (c.kind == WGML_ATTN_FORWARD || (c.sm_m * 4) % c.subgroup_size);
                        if (quads_bad || c.cols % lpr || (c.p_in_xs && (c.stage2 || c.kind == WGML_ATTN_DKV)) ||
                            ((c.kept_halves || c.tile_major) && c.kind == WGML_ATTN_DKV)) {
                            CHECK(wgml_attn_sgmat_problem(&c) != NULL);
                            continue;
                        }
                        CHECK(wgml_attn_sgmat_problem(&c) == NULL);
                        char *src = wgml_attn_sgmat_source(&c);
                        CHECK(src != NULL);
                        if (!src) continue;
                        made++;
                        int dp = wgml_attn_sgmat_dp(&c), fd = dp / c.sm_n, kd = dp / c.sm_k, fc = c.cols / c.sm_n,
                            kc = c.cols / c.sm_k;
                        /* right fragments loaded from workgroup memory: scores (the forward's twice
                           unless in one walk, the gradients' S and dP) and the accumulations (P V;
                           dS K; P^T dO and dS^T Q); each feeds one product per row fragment */
                        int score_loads = (one ? 1 : 2) * fc * kd;
                        int right_loads = score_loads + (c.kind == WGML_ATTN_DKV ? 2 : 1) * fd * kc;
                        int want_mma = right_loads;
                        const char *mma = c.emulate ? "emu_mma(" : "subgroupMatrixMultiplyAccumulate(";
                        /* (the emulated one's definition is one more) */
                        if (test_count(src, mma) - (c.emulate ? 1 : 0) != want_mma) {
                            FAILF("kind %d d %d %dx%dx%d sg %d cols %d: %d products, want %d", c.kind, c.d, c.sm_m, c.sm_n, c.sm_k,
                                  c.subgroup_size, c.cols, test_count(src, mma), want_mma);
                        }
                        char want[160];
                        if (c.emulate) {
                            CHECK(strstr(src, "subgroupMatrix") == NULL && strstr(src, "enable subgroups") == NULL);
                            snprintf(want, sizeof want, "struct Acc { v: array<f32, %d> }", c.sm_m * c.sm_n);
                            CHECK(strstr(src, want) != NULL);
                            snprintf(want, sizeof want, "let sg = li / %du;", c.subgroup_size);
                            CHECK(strstr(src, want) != NULL);
                        } else {
                            CHECK(strstr(src, "enable chromium_experimental_subgroup_matrix;") != NULL);
                            snprintf(want, sizeof want, "alias L = subgroup_matrix_left<f16, %d, %d>;", c.sm_k, c.sm_m);
                            CHECK(strstr(src, want) != NULL);
                            snprintf(want, sizeof want, "alias Acc = subgroup_matrix_result<f32, %d, %d>;", c.sm_n, c.sm_m);
                            CHECK(strstr(src, want) != NULL);
                            /* scores read K (Q, V, dO) column-major: right operands of [col][d] tiles */
                            CHECK(test_count(src, "subgroupMatrixLoad<R>(&xs, ") == right_loads);
                            CHECK(test_count(src, ", true, ") == score_loads);
                            /* the one-walk forward's rescaling loads O's fragments back as results */
                            CHECK(test_count(src, "subgroupMatrixLoad<Acc>(&ss, ") == (one ? fd : 0));
                        }
                        snprintf(want, sizeof want, "@workgroup_size(%d)", wgml_attn_sgmat_threads(&c));
                        CHECK(strstr(src, want) != NULL);
                        snprintf(want, sizeof want, "const D = %du;", c.d);
                        CHECK(strstr(src, want) != NULL);
                        CHECK(test_wgsl_workgroup_bytes(src) == wgml_attn_sgmat_shared_bytes(&c));
                        CHECK(test_balanced(src));
                        /* whole tiles of results straight from the matrix units where rows are whole
                           fragments: one store a fragment along D of each result */
                        const char *out = c.kind == WGML_ATTN_FORWARD ? "O" : "OUT";
                        snprintf(want, sizeof want, c.emulate ? "emu_st_%s(" : "subgroupMatrixStore(&%s, ", out);
                        /* (not from the one-walk forward: O / l leaves through the lanes) */
                        bool direct = c.direct && c.d % 16 == 0 && !one;
                        int stores = test_count(src, want) - (c.emulate && direct ? 1 : 0);
                        CHECK(stores == (direct ? fd * (c.kind == WGML_ATTN_DKV ? 2 : 1) : 0));
                        /* one walk: a decision the whole workgroup reads, and O's rescaling */
                        CHECK((strstr(src, c.emulate ? "workgroupUniformLoad(&resc[0])" : "workgroupUniformLoad(&resc);") != NULL) == one);
                        /* (the votes read in one load: a load a slot costs two barriers) */
                        CHECK(test_count(src, "workgroupUniformLoad(") == (one ? 1 : 0));
                        /* ... voted on the matrix units with no lane-divergent branch before the
                           matrix calls (the stored-under-an-if form was wrong on an H200) */
                        CHECK((strstr(src, "resc[sg] = select(0u, 1u, subgroupAny(want));") != NULL) == (one && !c.emulate));
                        CHECK((strstr(src, "{ resc[0] = 1u; }") != NULL) == (one && c.emulate));
                        /* P (dS) over the tile done with: no block of its own, the products' left
                           operands from xs */
                        CHECK((strstr(src, "var<workgroup> ps:") != NULL) == !c.p_in_xs);
                        if (!c.emulate)
                            CHECK(test_count(src, "subgroupMatrixLoad<L>(&xs, pb + ") ==
                                  (c.p_in_xs ? kc : 0));
                        /* kept rows by halves where a half is whole K steps: each half's rows
                           staged (a barrier between) and loaded into left fragments */
                        bool halves = c.kept_halves && dp / 2 % c.sm_k == 0;
                        CHECK((strstr(src, "// the last part's loads are done") != NULL) == halves);
                        if (!c.emulate) {
                            snprintf(want, sizeof want, "subgroupMatrixLoad<L>(&xs, sr * %du + ", dp / (halves ? 2 : 1) + 8);
                            CHECK(test_count(src, want) == kd * (c.kind == WGML_ATTN_FORWARD ? 1 : 2));
                        }
                        /* prefetch: the next step's reads issued after the step's tiles are staged */
                        CHECK((strstr(src, c.kind == WGML_ATTN_DKV ? "let fit = it + 1u;" : "let jn = j0 + ") != NULL) == c.prefetch);
                        /* two staging buffers: each step's own, and no barrier at a step's top */
                        CHECK((strstr(src, "let xb = (") != NULL) == c.stage2);
                        CHECK((strstr(src, "// the last step's reads of") != NULL) == !c.stage2);
                        CHECK(!c.stage2 || (c.emulate ? test_count(src, "xb + ") > 0 : test_count(src, "subgroupMatrixLoad<R>(&xs, xb + ") == right_loads));
                        /* workgroups in tile-major order, or a head's (kv head's) tiles together */
                        CHECK((strstr(src, "let bh = wid % (P.B * P.H);") != NULL) == c.tile_major);
                        CHECK((strstr(src, c.kind == WGML_ATTN_DKV ? "let bg = wid / P.tiles;" : "let bh = wid / P.tiles;") != NULL) ==
                              !c.tile_major);
                        /* quads: 4 lanes a row, each a pair of adjacent columns of the score block
                           (rows cols + 8 floats apart), else 2 (rows cols + 4 apart) */
                        CHECK((strstr(src, "let lc2 = lc * 2u;") != NULL) == (c.quads || c.pairs));
                        snprintf(want, sizeof want, "var<workgroup> ss: array<f32, %d>;", 4 * c.sm_m * (c.cols + (c.quads ? 8 : 4)));
                        CHECK(strstr(src, want) != NULL);
                        CHECK(c.emulate || matrix_strides_aligned(src));
                        if (c.quads) {
                            snprintf(want, sizeof want, "row%d = lr + %du;", c.sm_m * 4 / c.subgroup_size - 1,
                                     (c.sm_m * 4 / c.subgroup_size - 1) * c.subgroup_size / 4);
                            CHECK(strstr(src, want) != NULL);
                            snprintf(want, sizeof want, "ss[sb + row0 * %du + lc2 + 9u]", c.cols + 8);
                            CHECK(strstr(src, want) != NULL);
                        }
                        /* pairs: a lane's entries 1 and 3 are columns 1 and 5 of its pairs */
                        if (c.pairs) {
                            snprintf(want, sizeof want, "var x0_3 = ss[sb + row0 * %du + lc2 + 5u];", c.cols + 4);
                            CHECK(strstr(src, want) != NULL);
                        }
                        /* P before the vote: written there and again where a step rescales */
                        if (one) {
                            const char *lazy = "            ls0 = 0.0;\n", *vote = strstr(src, "workgroupUniformLoad(");
                            CHECK(test_count(src, lazy) == (c.p_early ? 2 : 1));
                            CHECK(vote && (strstr(src, lazy) < vote) == c.p_early);
                            /* the last P (the rescaling steps' with p_early) is behind a barrier
                               before P V reads it, inside the branch with p_early */
                            const char *last = strstr(src, lazy), *pv = strstr(src, "        l0 = l0 + ls0;\n");
                            if (c.p_early && last) last = strstr(last + 1, lazy);
                            CHECK(last && pv && last < pv);
                            int barriers = 0;
                            const char *bar = last ? strstr(last, "workgroupBarrier();") : NULL;
                            for (const char *x = bar; x && pv && x < pv; x = strstr(x + 1, "workgroupBarrier();")) barriers++;
                            CHECK(barriers == 1);
                            const char *then = c.p_early ? "workgroupBarrier();\n        }\n" : "workgroupBarrier();\n        l0";
                            CHECK(bar && !strncmp(bar, then, strlen(then)));
                        }
                        /* loads up front: the first K tile's and every part of Q's before Q is
                           staged */
                        if (c.kind == WGML_ATTN_FORWARD) {
                            const char *k0 = strstr(src, "= vec4<f16>(ld_k("), *qs = strstr(src, "xs[o] = st");
                            CHECK(k0 && qs && (k0 < qs) == c.front_loads);
                            CHECK((strstr(src, "xs[o] = st0_0.x;") != NULL) == c.front_loads);
                            if (c.front_loads && halves) CHECK(strstr(src, "st1_0 = vec4<f16>(ld_q(") < qs);
                        }
                        /* the forward writes L after O; the gradients read it */
                        CHECK((strstr(src, "O[P.lse_off") != NULL) == (c.kind == WGML_ATTN_FORWARD));
                        CHECK((strstr(src, "LSE[P.lse_off") != NULL) == (c.kind != WGML_ATTN_FORWARD));
                        free(src);
                    }
    fprintf(stderr, "  %d kernels generated\n", made);
    CHECK(made > 2000);
}

static void bad_configs_are_refused(void)
{
    const wgml_attn_sgmat good = {.kind = WGML_ATTN_FORWARD, .d = 64, .sm_m = 16, .sm_n = 16, .sm_k = 16, .subgroup_size = 32,
                                  .subgroups = 4, .cols = 64};
    CHECK(wgml_attn_sgmat_problem(&good) == NULL);
    wgml_attn_sgmat c = good;
    c.kind = WGML_ATTN_DELTA;
    CHECK(wgml_attn_sgmat_problem(&c) && !wgml_attn_sgmat_source(&c));
    c = good, c.d = 129;
    CHECK(wgml_attn_sgmat_problem(&c) != NULL);
    c = good, c.d = 0;
    CHECK(wgml_attn_sgmat_problem(&c) != NULL);
    c = good, c.sm_n = 32;
    CHECK(wgml_attn_sgmat_problem(&c) != NULL);
    c = good, c.sm_k = 4;
    CHECK(wgml_attn_sgmat_problem(&c) != NULL);
    c = good, c.subgroup_size = 24;
    CHECK(wgml_attn_sgmat_problem(&c) != NULL);
    c = good, c.subgroups = 0;
    CHECK(wgml_attn_sgmat_problem(&c) != NULL);
    c = good, c.subgroups = 16, c.subgroup_size = 128;
    CHECK(wgml_attn_sgmat_problem(&c) != NULL);
    c = good, c.cols = 48;
    CHECK(wgml_attn_sgmat_problem(&c) != NULL);
    c = good, c.cols = 16, c.subgroup_size = 128, c.sm_m = 8; /* 16 lanes a row over 16 columns: fine */
    CHECK(wgml_attn_sgmat_problem(&c) == NULL);
    c.subgroup_size = 128, c.sm_m = 8, c.cols = 16, c.subgroups = 8;
    CHECK(wgml_attn_sgmat_problem(&c) == NULL);
    c = good, c.one_pass = true;
    CHECK(wgml_attn_sgmat_problem(&c) == NULL && wgml_attn_sgmat_rows(&c) == 64);
    c = good, c.out16 = true; /* halves out: the gradients' results only */
    CHECK(wgml_attn_sgmat_problem(&c) != NULL);
    c.kind = WGML_ATTN_DQ;
    CHECK(wgml_attn_sgmat_problem(&c) == NULL);
    c = good, c.pairs = true; /* pairs: the forward with two lanes a row */
    CHECK(wgml_attn_sgmat_problem(&c) == NULL);
    c.kind = WGML_ATTN_DQ;
    CHECK(wgml_attn_sgmat_problem(&c) != NULL);
    c = good, c.pairs = true, c.subgroup_size = 64;
    CHECK(wgml_attn_sgmat_problem(&c) != NULL);
    c = good, c.p_early = true; /* P before the vote, loads up front: the one-walk forward */
    CHECK(wgml_attn_sgmat_problem(&c) != NULL);
    c.one_pass = true;
    CHECK(wgml_attn_sgmat_problem(&c) == NULL);
    c.kind = WGML_ATTN_DQ;
    CHECK(wgml_attn_sgmat_problem(&c) != NULL);
    c = good, c.one_pass = true, c.front_loads = true;
    CHECK(wgml_attn_sgmat_problem(&c) != NULL);
    c.prefetch = true;
    CHECK(wgml_attn_sgmat_problem(&c) == NULL);
    c = good, c.quads = true; /* quads: the gradients only, rows whole 4-lane groups */
    CHECK(wgml_attn_sgmat_problem(&c) != NULL);
    c.kind = WGML_ATTN_DKV;
    CHECK(wgml_attn_sgmat_problem(&c) == NULL);
    c.subgroup_size = 64, c.sm_m = 8;
    CHECK(wgml_attn_sgmat_problem(&c) != NULL);
}

int main(void)
{
    TEST_RUN(every_kernel_and_config);
    TEST_RUN(bad_configs_are_refused);
    return test_summary();
}
