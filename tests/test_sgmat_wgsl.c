/* The subgroup-matrix GEMM generator (ops/matmul/gemm_sgmat_wgsl.c) on a machine without matrix
   units: every form, storage, vector width, epilogue and matrix shape gives WGSL whose
   structure follows from the config (the matrix products, fragment loads and their layouts,
   the workgroup size, the workgroup memory it reports), and bad configs are refused. The
   kernels themselves run in bench/sgmat_gemm (on the H100, and emulated on lavapipe). */
#include <stdlib.h>
#include <string.h>

#include "ops/matmul/gemm_sgmat_wgsl.h"
#include "harness.h"

static const wgml_sgmat_config base = {.sm_m = 16, .sm_n = 16, .sm_k = 16, .subgroup_size = 32, .sg_m = 2, .sg_n = 2,
                                       .frag_m = 4, .frag_n = 4, .bk = 32, .double_buffer = true, .a_vec = 8, .b_vec = 8,
                                       .a_f16 = true, .b_f16 = true};

static void every_form_and_config(void)
{
    static const int shapes[][3] = {{16, 16, 16}, {16, 8, 16}, {16, 8, 8}, {8, 8, 8}};
    static const int layouts[][5] = {/* sg_m, sg_n, frag_m, frag_n, bk */
                                     {4, 4, 2, 2, 32}, {2, 2, 4, 4, 16}, {2, 4, 4, 2, 32}, {4, 2, 2, 4, 64}, {1, 1, 1, 1, 16}};
    int made = 0;
    for (int s = 0; s < N_OF(shapes); s++)
        for (int l = 0; l < N_OF(layouts); l++)
            for (int form = 0; form < 4; form++)
                for (int store = 0; store < 6; store++)
                    for (int db = 0; db < 2; db++) {
                        wgml_sgmat_config c = base;
                        c.sm_m = shapes[s][0], c.sm_n = shapes[s][1], c.sm_k = shapes[s][2];
                        c.sg_m = layouts[l][0], c.sg_n = layouts[l][1], c.frag_m = layouts[l][2];
                        c.frag_n = layouts[l][3] * (16 / c.sm_n), c.bk = layouts[l][4];
                        if (c.bk < c.sm_k) c.bk = c.sm_k;
                        c.double_buffer = db;
                        c.prefetch = l % 2;
                        c.a_f16 = store & 1, c.b_f16 = (store >> 1) & 1;
                        c.a_vec = store < 4 ? 8 : (store == 4 ? 4 : 0);
                        c.b_vec = store == 5 ? 0 : c.a_vec;
                        c.two_leading = store == 3;
                        /* results in one round or two (a block for half the subgroups) */
                        c.cs_rounds = c.sg_m * c.sg_n > 1 ? (form + db) % 3 : 0;
                        int rounds = c.cs_rounds > 1 ? c.cs_rounds : 1;
                        bool ta = form & 1, tb = form & 2, act = (form + store) % 2;
                        CHECK(wgml_sgmat_config_problem(&c) == NULL);
                        char *src = wgml_sgmat_gemm_source(&c, ta, tb, act ? "fn act(v: f32) -> f32 { return max(v, 0.0); }" : NULL);
                        CHECK(src != NULL);
                        if (!src) continue;
                        made++;
                        int steps = c.bk / c.sm_k, frags = c.frag_m * c.frag_n;
                        char want[160];
                        CHECK(strstr(src, "enable chromium_experimental_subgroup_matrix;") != NULL);
                        snprintf(want, sizeof want, "alias L = subgroup_matrix_left<f16, %d, %d>;", c.sm_k, c.sm_m);
                        CHECK(strstr(src, want) != NULL);
                        snprintf(want, sizeof want, "alias Acc = subgroup_matrix_result<f32, %d, %d>;", c.sm_n, c.sm_m);
                        CHECK(strstr(src, want) != NULL);
                        snprintf(want, sizeof want, "@workgroup_size(%d)", wgml_sgmat_threads(&c));
                        CHECK(strstr(src, want) != NULL);
                        /* a product per fragment and K step; a load per fragment row / column
                           and K step, column-major exactly where the operand is transposed */
                        CHECK(test_count(src, "subgroupMatrixMultiplyAccumulate(") == frags * steps);
                        CHECK(test_count(src, "subgroupMatrixLoad<L>(") == c.frag_m * steps);
                        CHECK(test_count(src, "subgroupMatrixLoad<R>(") == c.frag_n * steps);
                        int col_major = (ta ? c.frag_m : 0) + (tb ? c.frag_n : 0);
                        CHECK(test_count(src, ", true, ") == col_major * steps);
                        /* results through the per-subgroup fragment always; straight to C
                           only without an activation */
                        CHECK(test_count(src, "subgroupMatrixStore(&Cs,") == frags * rounds);
                        CHECK(test_count(src, "if (sg / ") == (rounds > 1 ? 2 * frags * rounds : 0));
                        snprintf(want, sizeof want, "Cs: array<f32, %d>;", c.sg_m * c.sg_n / rounds * c.sm_m * c.sm_n);
                        CHECK(strstr(src, want) != NULL);
                        CHECK(test_count(src, "subgroupMatrixStore(&C,") == (act ? 0 : frags));
                        CHECK(test_count(src, "fn act(") == act);
                        CHECK(test_count(src, "(bt / P.L1)") == (c.two_leading ? 2 : 0));
                        /* one barrier a slice with two buffers, two with one; one more ahead
                           of the loop where slices are prefetched */
                        int barriers = (db || c.prefetch ? 1 : 0) + (db ? 1 : 2) + 2 * frags * rounds;
                        CHECK(test_count(src, "workgroupBarrier();") == barriers);
                        CHECK(test_wgsl_workgroup_bytes(src) == wgml_sgmat_workgroup_bytes(&c, ta, tb));
                        /* a prefetch reads the next slice with no branch around it (the
                           guards give zeros past K); without, each slice at its own step */
                        bool pf = db || c.prefetch;
                        CHECK((strstr(src, "let k0 = (t + 1u) * ") != NULL) == pf);
                        CHECK((strstr(src, "let k0 = t * ") != NULL) == !pf);
                        CHECK(strstr(src, "more") == NULL);
                        CHECK(strstr(src, c.a_f16 ? (c.a_vec == 8 ? "A: array<vec4<u32>>" : c.a_vec ? "A: array<vec2<u32>>" : "A: array<f16>")
                                                  : (c.a_vec ? "A: array<vec4<f32>>" : "A: array<f32>")) != NULL);
                        CHECK(test_balanced(src));
                        if (test_failures) {
                            fprintf(stderr, "config %dx%dx%d sg %dx%d frag %dx%d bk %d db %d store %d form %d\n", c.sm_m,
                                    c.sm_n, c.sm_k, c.sg_m, c.sg_n, c.frag_m, c.frag_n, c.bk, db, store, form);
                            free(src);
                            return;
                        }
                        free(src);
                    }
    fprintf(stderr, "  %d kernels generated\n", made);
    CHECK(made == N_OF(shapes) * N_OF(layouts) * 4 * 6 * 2);
}

/* the edge guards: every global read and write is bounded by the matrix it touches */
static void edges_are_guarded(void)
{
    char *src = wgml_sgmat_gemm_source(&base, false, false, NULL);
    CHECK(src && strstr(src, "if (gr < P.M && gc < P.K)") && strstr(src, "if (gr < P.K && gc < P.N)"));
    CHECK(src && strstr(src, "if (m < P.M && n < P.N)"));
    CHECK(src && strstr(src, "m0 + 128u <= P.M && n0 + 128u <= P.N"));
    free(src);
    wgml_sgmat_config c = base;
    c.a_vec = c.b_vec = 0;
    src = wgml_sgmat_gemm_source(&c, true, true, NULL);
    /* one element at a time, each checked against the contiguous extent */
    CHECK(src && strstr(src, "if (gc + 3u < P.M)") && strstr(src, "if (gc + 3u < P.K)"));
    free(src);
}

/* C of halves: bound as f16, every result through the epilogue (which rounds it as it is
   stored), none straight from the matrix units into C; with f32 C interior tiles go straight */
static void halves_out(void)
{
    for (int half = 0; half < 2; half++) {
        wgml_sgmat_config c = base;
        c.c_f16 = half;
        char *src = wgml_sgmat_gemm_source(&c, false, false, NULL);
        CHECK(src != NULL);
        if (!src) continue;
        CHECK((strstr(src, "C: array<f16>") != NULL) == half);
        CHECK((strstr(src, "C: array<f32>") != NULL) == !half);
        CHECK((strstr(src, "subgroupMatrixStore(&C,") != NULL) == !half);
        CHECK(strstr(src, "subgroupMatrixStore(&Cs,") != NULL);
        CHECK(strstr(src, half ? "return f16(v);" : "return f32(v);") != NULL);
        free(src);
    }
}

/* act_x (an activation's derivative at X, WGML_ACT_GRAD): every element the epilogue writes
   has its X loaded once, guarded like the store, in two alternating register sets (the next
   fragment's while this one leaves), and is passed to act_x */
static void x_loaded_ahead(void)
{
    wgml_sgmat_config c = base;
    c.c_f16 = true;
    c.act_x = true;
    char *src = wgml_sgmat_gemm_source(&c, false, true, "fn act_x(v: f32, x: f32) -> f32 { return v * x; }");
    CHECK(src != NULL);
    if (!src) return;
    int frags = c.frag_m * c.frag_n, per_lane = c.sm_m * c.sm_n / c.subgroup_size;
    CHECK(test_count(src, "f32(X[cb - P.c_off + P.x_off + m * P.N + n])") == frags * per_lane);
    CHECK(test_count(src, "epilogue(Cs[cs + e], n, idx, x0_") == (frags + 1) / 2 * per_lane);
    CHECK(test_count(src, "epilogue(Cs[cs + e], n, idx, x1_") == frags / 2 * per_lane);
    CHECK(test_count(src, "act_x(v, x)") == 1);
    CHECK(test_count(src, "subgroupMatrixStore(&C,") == 0);
    free(src);
}

/* c_vec: each lane takes a run of 8 results of a fragment row and writes it as 16-byte
   vectors (C bound as vec4<u32> of halves or vec4<f32>), guarded by its row and its run's
   first column; X loaded per run; nothing straight from the matrix units; refused where a
   fragment is not 8 a lane or not 8 wide, and not fitted where f32 C would go straight */
static void vector_results(void)
{
    for (int half = 0; half < 2; half++)
        for (int xact = 0; xact < 2; xact++) {
            wgml_sgmat_config c = base;
            c.c_f16 = half, c.act_x = xact, c.c_vec = true;
            CHECK(wgml_sgmat_c_vec_fits(&c, true, 768, 0));
            CHECK(wgml_sgmat_c_vec_fits(&c, false, 768, 0) == (bool)half);
            CHECK(!wgml_sgmat_c_vec_fits(&c, true, 772, 0) && !wgml_sgmat_c_vec_fits(&c, true, 768, 4)); /* runs cut by N or the offset */
            const char *act = xact ? "fn act_x(v: f32, x: f32) -> f32 { return v * x; }" : "fn act(v: f32) -> f32 { return v; }";
            char *src = wgml_sgmat_gemm_source(&c, false, xact, act);
            CHECK(src != NULL);
            if (!src) continue;
            int frags = c.frag_m * c.frag_n;
            CHECK(strstr(src, half ? "C: array<vec4<u32>>" : "C: array<vec4<f32>>") != NULL);
            CHECK(test_count(src, "subgroupMatrixStore(&C,") == 0);
            CHECK(test_count(src, "subgroupMatrixStore(&Cs,") == frags);
            CHECK(test_count(src, half ? "C[idx / 8u] = vec4<u32>(" : "C[idx / 4u] = vec4<f32>(") == frags);
            CHECK(test_count(src, "C[idx / 4u + 1u] = vec4<f32>(") == (half ? 0 : frags));
            CHECK(test_count(src, "let n = n0 + sc + ") == frags * (xact ? 2 : 1));
            CHECK(test_count(src, "(lane % 2u) * 8u;") == frags * (xact ? 3 : 2));
            CHECK(test_count(src, "if (m < P.M && n < P.N) {") == frags * (xact ? 2 : 1));
            CHECK(test_count(src, "epilogue(Cs[e + ") == 8 * frags);
            CHECK(test_count(src, "= f32(X[xi + ") == (xact ? 8 * frags : 0));
            CHECK(test_count(src, "workgroupBarrier();") == 1 + 1 + 2 * frags); /* prologue, a slice's (two buffers), the results' */
            CHECK(test_balanced(src));
            free(src);
        }
    wgml_sgmat_config c = base;
    c.c_vec = true, c.sm_n = 8, c.frag_n = 8; /* 16x8: 4 a lane */
    CHECK(wgml_sgmat_config_problem(&c) != NULL && !wgml_sgmat_c_vec_fits(&c, true, 768, 0));
    c = base, c.c_vec = true, c.subgroup_size = 16; /* 16 a lane */
    CHECK(wgml_sgmat_config_problem(&c) != NULL);
}

static void bad_configs_refused(void)
{
    wgml_sgmat_config c = base;
    c.bk = 24; /* not a multiple of sm_k */
    CHECK(wgml_sgmat_config_problem(&c) != NULL && wgml_sgmat_gemm_source(&c, false, false, NULL) == NULL);
    c = base, c.sm_m = 0;
    CHECK(wgml_sgmat_config_problem(&c) != NULL);
    c = base, c.sg_m = 8, c.sg_n = 8; /* 2048 invocations */
    CHECK(wgml_sgmat_config_problem(&c) != NULL);
    c = base, c.a_vec = 2;
    CHECK(wgml_sgmat_config_problem(&c) != NULL);
    c = base, c.subgroup_size = 64, c.sm_n = 2, c.frag_n = 8; /* 32 elements a fragment over 64 lanes */
    CHECK(wgml_sgmat_config_problem(&c) != NULL);
    c = base, c.frag_m = 9;
    CHECK(wgml_sgmat_config_problem(&c) != NULL);
    c = base, c.cs_rounds = 3; /* 4 subgroups in 3 rounds */
    CHECK(wgml_sgmat_config_problem(&c) != NULL);
}

static void vector_widths(void)
{
    CHECK(wgml_sgmat_vec_width(0, 4096, 0, 0, 4096) == 8);
    CHECK(wgml_sgmat_vec_width(4, 4096, 0, 0, 4096) == 4);
    CHECK(wgml_sgmat_vec_width(0, 1028, 0, 0, 1028) == 4);
    CHECK(wgml_sgmat_vec_width(0, 1024, 1024 * 7, 0, 1023) == 0);
    CHECK(wgml_sgmat_vec_width(0, 384, 384 * 33, 2, 384) == 0);
    CHECK(wgml_sgmat_vec_width(8, 16, 128, 64, 16) == 8);
}

/* the policy gives a config that generates and fits for every shape and matrix shape */
static void policy(void)
{
    static const int shapes[][3] = {{16, 16, 16}, {16, 8, 16}, {16, 8, 8}, {8, 8, 8}};
    static const int64_t sizes[][2] = {{4096, 4096}, {16384, 1152}, {16384, 384}, {8192, 768}, {1, 7}}; /* M x N */
    for (int s = 0; s < N_OF(shapes); s++)
        for (int z = 0; z < N_OF(sizes); z++)
            for (int form = 0; form < 4; form++) {
                wgml_sgmat_config c = wgml_sgmat_choose(shapes[s][0], shapes[s][1], shapes[s][2], 32, sizes[z][0], sizes[z][1],
                                                        1, form & 1, form & 2, 49152);
                CHECK(wgml_sgmat_config_problem(&c) == NULL);
                CHECK(wgml_sgmat_workgroup_bytes(&c, form & 1, form & 2) <= 49152);
                char *src = wgml_sgmat_gemm_source(&c, form & 1, form & 2, NULL);
                CHECK(src != NULL);
                free(src);
            }
    /* the measured winners on 16x16x16 (operands in halves or f32 alike): 128x256 tiles with the
       next slice prefetched where their grid fills the GPU, 128x128 not over a weight
       gradient's few tiles (split K into 4: 60 workgroups of 128x256) */
    wgml_sgmat_config c = wgml_sgmat_choose(16, 16, 16, 32, 4096, 4096, 1, false, false, 49152);
    CHECK(wgml_sgmat_tile_m(&c) == 128 && wgml_sgmat_tile_n(&c) == 256 && c.bk == 32 && !c.double_buffer && c.prefetch);
    c = wgml_sgmat_choose(16, 16, 16, 32, 16384, 1152, 1, false, false, 49152);
    CHECK(wgml_sgmat_tile_m(&c) == 128 && wgml_sgmat_tile_n(&c) == 256 && c.prefetch);
    c = wgml_sgmat_choose(16, 16, 16, 32, 384, 1152, 4, true, false, 49152);
    CHECK(wgml_sgmat_tile_m(&c) == 128 && wgml_sgmat_tile_n(&c) == 128 && c.prefetch);
    c = wgml_sgmat_choose(16, 16, 16, 32, 384, 1152, 16, true, false, 49152);
    CHECK(wgml_sgmat_tile_m(&c) == 128 && wgml_sgmat_tile_n(&c) == 256);
    /* N = 768 over many rows: 128x128 with results in two rounds, two buffers for A.B, K slices
       of 64 for A.B^T; A^T.B keeps 128x256 */
    c = wgml_sgmat_choose(16, 16, 16, 32, 8192, 768, 1, false, false, 49152);
    CHECK(wgml_sgmat_tile_m(&c) == 128 && wgml_sgmat_tile_n(&c) == 128 && c.cs_rounds == 2 && c.double_buffer && c.bk == 32);
    CHECK(wgml_sgmat_workgroup_bytes(&c, false, false) == 46080);
    c = wgml_sgmat_choose(16, 16, 16, 32, 8192, 768, 1, false, true, 49152);
    CHECK(wgml_sgmat_tile_m(&c) == 128 && wgml_sgmat_tile_n(&c) == 128 && c.cs_rounds == 2 && !c.double_buffer &&
          c.prefetch && c.bk == 64);
    CHECK(wgml_sgmat_workgroup_bytes(&c, false, true) == 45056);
    /* (test_matmul_f16's 3500 x 768 cases: that form, with the results 8 a lane) */
    for (int tb = 0; tb < 2; tb++) {
        c = wgml_sgmat_choose(16, 16, 16, 32, 3500, 768, 1, false, tb, 49152);
        c.c_vec = true;
        CHECK(c.cs_rounds == 2 && wgml_sgmat_tile_n(&c) == 128 && !wgml_sgmat_config_problem(&c) && wgml_sgmat_c_vec_fits(&c, true, 768, 0));
    }
    c = wgml_sgmat_choose(16, 16, 16, 32, 8192, 768, 1, true, false, 49152);
    CHECK(wgml_sgmat_tile_n(&c) == 256 && c.cs_rounds == 0);
    c = wgml_sgmat_choose(16, 16, 16, 32, 8192, 2304, 1, false, true, 49152);
    CHECK(wgml_sgmat_tile_n(&c) == 256 && c.cs_rounds == 0);
    /* a small workgroup memory takes a smaller tile */
    c = wgml_sgmat_choose(16, 16, 16, 32, 4096, 4096, 1, false, false, 16384);
    CHECK(wgml_sgmat_workgroup_bytes(&c, false, false) <= 16384);
}

/* hilo: f32 operands staged as hi and lo halves (two stages each), three products a fragment
   and K step, lo fragments loaded from their own stages; the operands' maxima at the binding
   after X's, the scale undone in the epilogue, every result through it (no straight stores);
   refused with an operand of halves; the chooser's configs fit the memory they are given */
static void hilo_products(void)
{
    for (int form = 0; form < 4; form++)
        for (int ax = 0; ax < 2; ax++) {
            wgml_sgmat_config c = base;
            c.a_f16 = c.b_f16 = false;
            c.hilo = true;
            c.act_x = ax;
            bool ta = form & 1, tb = form & 2;
            CHECK(wgml_sgmat_config_problem(&c) == NULL);
            char *src = wgml_sgmat_gemm_source(&c, ta, tb, ax ? "fn act_x(v: f32, x: f32) -> f32 { return v * x; }" : NULL);
            CHECK(src != NULL);
            if (!src) continue;
            int steps = c.bk / c.sm_k, frags = c.frag_m * c.frag_n;
            CHECK(test_count(src, "subgroupMatrixMultiplyAccumulate(") == 3 * frags * steps);
            CHECK(test_count(src, "subgroupMatrixLoad<L>(&As,") == c.frag_m * steps);
            CHECK(test_count(src, "subgroupMatrixLoad<L>(&Al,") == c.frag_m * steps);
            CHECK(test_count(src, "subgroupMatrixLoad<R>(&Bl,") == c.frag_n * steps);
            CHECK(strstr(src, "subgroupMatrixStore(&C,") == NULL);
            char want[96];
            snprintf(want, sizeof want, "@binding(%d) var<storage, read> maxima: array<u32, %d>;", ax ? 6 : 5,
                     2 * WGML_SGMAT_MAX_ABS_GROUPS);
            CHECK(strstr(src, want) != NULL);
            CHECK(strstr(src, "(v0 * unscale.x * unscale.y)") != NULL);
            CHECK(strstr(src, "& vec4<u32>(0xffffe000u)") != NULL);
            /* every staging twice: with the selects that keep infinities and NaN (where the
               maxima flagged them) and without */
            CHECK(test_count(src, "if (nfa) {") == test_count(src, "if (nfb) {") && test_count(src, "if (nfa) {") >= 2);
            CHECK(test_count(src, "== vec4<u32>(0x7f800000u);") * 2 == test_count(src, "& vec4<u32>(0xffffe000u)"));
            free(src);
            /* the stages doubled, and the maxima's and flags' four words */
            wgml_sgmat_config plain = c;
            plain.hilo = false;
            uint32_t staging = wgml_sgmat_workgroup_bytes(&plain, ta, tb) - (uint32_t)(c.sg_m * c.sg_n * c.sm_m * c.sm_n * 4);
            CHECK(wgml_sgmat_workgroup_bytes(&c, ta, tb) == wgml_sgmat_workgroup_bytes(&plain, ta, tb) + staging + 16);
            c.a_f16 = form & 1, c.b_f16 = !(form & 1);
            CHECK(wgml_sgmat_config_problem(&c) != NULL);
        }
    for (int form = 0; form < 4; form++) {
        wgml_sgmat_config c = wgml_sgmat_choose_hilo(16, 16, 16, 32, form & 1, form & 2, 49152);
        CHECK(c.sm_m == 16 && c.hilo && !wgml_sgmat_config_problem(&c) && wgml_sgmat_workgroup_bytes(&c, form & 1, form & 2) <= 49152);
        CHECK(wgml_sgmat_choose_hilo(16, 16, 16, 32, form & 1, form & 2, 16384).sm_m == 0);
    }
    /* the maxima's kernel: a word a workgroup, both operands' views */
    const char *mx = wgml_sgmat_max_abs_wgsl();
    CHECK(strstr(mx, "maxima[wg.x] = part[0];") && strstr(mx, "var<uniform> P: array<Op, 2>;"));
}

int main(void)
{
    TEST_RUN(every_form_and_config);
    TEST_RUN(edges_are_guarded);
    TEST_RUN(halves_out);
    TEST_RUN(x_loaded_ahead);
    TEST_RUN(vector_results);
    TEST_RUN(bad_configs_refused);
    TEST_RUN(vector_widths);
    TEST_RUN(policy);
    TEST_RUN(hilo_products);
    return test_summary();
}
