/*
 * wgml — the command-line tool.
 *   wgml info [--json] [--all]  the adapter, its limits and (compute) features
 *   wgml bench [what] [--json]  benchmarks (tools/bench.c)
 *   wgml train [options]        train an MLP on Fashion-MNIST (tools/train.c)
 *   wgml eval CHECKPOINT        score a checkpoint on the test split
 *   wgml gpt train|sample|eval  a character-level GPT on text (tools/gpt.c)
 *   wgml --help | --version     (each command also takes --help; tools/cli.c parses them all)
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

#include "ops/matmul/matmul.h" /* wgml_gemm_resolve_f16_math: what the matrix modes run here */
#include "tools/cli.h"
#include "wgml.h"

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

static int info_flag(int opt, const char *arg, void *state)
{
    (void)arg;
    if (opt == 256) ((int *)state)[0] = 1;
    if (opt == 257) ((int *)state)[1] = 1;
    return 0;
}

/* Features that only drawing uses (textures, depth, blending, rasterisation): wgml info lists
   them with --all alone. Anything not named here (a new feature too) counts as compute. */
static int render_only(const char *feature)
{
    static const char *const prefixes[] = {"texture-", "depth", "float32-filterable", "float32-blendable", "indirect-first-instance",
                                           "rg11b10ufloat", "bgra8unorm", "clip-distances", "dual-source-blending", "multiview",
                                           "polygon-mode", "conservative-rasterization", "multi-draw", "vertex-", "address-mode",
                                           "msaa", "unorm16", "snorm16", "norm16", "primitive-", "sampler-", "multisample",
                                           "renderable", "spirv-shader-passthrough"};
    for (size_t k = 0; k < sizeof prefixes / sizeof prefixes[0]; k++)
        if (strncmp(feature, prefixes[k], strlen(prefixes[k])) == 0 || strstr(feature, "-renderable")) return 1;
    return 0;
}

static int cmd_info(int argc, char **argv)
{
    static const struct option flags[] = {{"json", no_argument, 0, 256}, {"all", no_argument, 0, 257},
                                          {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int opts[2] = {0, 0};
    int prc = cli_parse(argc, argv, "info", flags,
                        "usage: wgml info [--json] [--all]\nThe adapter wgml picks, its limits and the features compute can use\n"
                        "(--all: every feature, those for drawing too).\n",
                        info_flag, opts, NULL, 0, NULL);
    const int json = opts[0], all = opts[1];
    if (prc) return prc == 1 ? 0 : 2;
    wgml_context *ctx;
    wgml_status st = wgml_context_create(NULL, &ctx);
    if (st) {
        fprintf(stderr, "wgml: %s: %s\n", wgml_status_name(st), wgml_last_create_error());
        return 1;
    }
    wgml_adapter_info i;
    wgml_adapter_info_get(ctx, &i);
    struct { const char *name; unsigned long long v; } limits[] = {
        {"max_buffer_size", i.max_buffer_size},
        {"max_storage_buffer_binding_size", i.max_storage_buffer_binding_size},
        {"max_uniform_buffer_binding_size", i.max_uniform_buffer_binding_size},
        {"max_compute_workgroup_storage_size", i.max_compute_workgroup_storage_size},
        {"max_compute_invocations_per_workgroup", i.max_compute_invocations_per_workgroup},
        {"max_compute_workgroup_size_x", i.max_compute_workgroup_size_x},
        {"max_compute_workgroup_size_y", i.max_compute_workgroup_size_y},
        {"max_compute_workgroup_size_z", i.max_compute_workgroup_size_z},
        {"max_compute_workgroups_per_dimension", i.max_compute_workgroups_per_dimension},
        {"max_storage_buffers_per_shader_stage", i.max_storage_buffers_per_shader_stage},
        {"min_storage_buffer_offset_alignment", i.min_storage_buffer_offset_alignment},
        {"min_uniform_buffer_offset_alignment", i.min_uniform_buffer_offset_alignment},
        {"subgroup_min_size", i.subgroup_min_size},
        {"subgroup_max_size", i.subgroup_max_size},
    };
    int nl = (int)(sizeof limits / sizeof limits[0]);
    /* which kernel WGML_F16_MATH_MATRIX runs here (the library's rule, ops/matmul/matmul.c's
       wgml_sgmat_adapter_shape, core/context.h): the matrix units where an f16 -> f32 subgroup matrix is
       enabled with one subgroup size, else the SIMT f16 GEMM with f32 sums */
    bool matrix_units = false;
    for (int k = 0; k < i.subgroup_matrix_count; k++)
        if (i.has_subgroup_matrix && i.subgroup_min_size && i.subgroup_min_size == i.subgroup_max_size &&
            i.subgroup_matrix[k].component && i.subgroup_matrix[k].result &&
            !strcmp(i.subgroup_matrix[k].component, "f16") && !strcmp(i.subgroup_matrix[k].result, "f32"))
            matrix_units = true;
    const char *matrix_kernel = !i.has_shader_f16 ? "unsupported (no shader-f16)"
                                : matrix_units    ? "subgroup matrices (f16 operands, f32 sums)"
                                                  : "SIMT f16 GEMM (f32 sums), no subgroup matrices";
    /* WGML_F16_MATH_MATRIX_SPLIT (and --precision f32split), by the library's own rule for an f32
       GEMM of 4096^3: hi and lo halves on the matrix units, else the f32 kernels */
    const wgml_gemm_args big = {.M = 4096, .N = 4096, .K = 4096, .batch = 1, .L1 = 1, .f16_math = WGML_F16_MATH_MATRIX_SPLIT};
    const bool split_units = wgml_gemm_resolve_f16_math(ctx, &big) == WGML_F16_MATH_MATRIX_SPLIT;
    const char *split_kernel = split_units ? "subgroup matrices (f32 operands as hi and lo halves, f32 sums)"
                                           : "f32 kernels, no subgroup matrices";
    /* and what attention runs under mixed precision (ops/attention/attention.c, same rule) */
    const char *attention_kernel = !i.has_shader_f16 ? "unsupported (no shader-f16)"
                                   : matrix_units    ? "subgroup matrices (f16 operands, f32 sums and softmax)"
                                                     : "f32 kernels, no subgroup matrices";
    if (json) {
        printf("{\"adapter\": {\"name\": ");
        json_str(stdout, i.name);
        printf(", \"vendor\": ");
        json_str(stdout, i.vendor);
        printf(", \"architecture\": ");
        json_str(stdout, i.architecture);
        printf(", \"driver\": ");
        json_str(stdout, i.driver);
        printf(", \"backend\": \"%s\", \"type\": \"%s\", \"vendor_id\": %u, \"device_id\": %u},\n \"runtime\": {\"name\": \"%s\", \"version\": ",
               i.backend, i.adapter_type, i.vendor_id, i.device_id, i.runtime);
        json_str(stdout, i.runtime_version);
        printf(", \"library\": ");
        json_str(stdout, i.runtime_library);
        printf("},\n \"subgroup_matrix\": [");
        for (int k = 0; k < i.subgroup_matrix_count; k++)
            printf("%s{\"component\": \"%s\", \"result\": \"%s\", \"m\": %u, \"n\": %u, \"k\": %u}", k ? ", " : "",
                   i.subgroup_matrix[k].component, i.subgroup_matrix[k].result, i.subgroup_matrix[k].m,
                   i.subgroup_matrix[k].n, i.subgroup_matrix[k].k);
        printf("],\n \"limits\": {");
        for (int k = 0; k < nl; k++) printf("%s\"%s\": %llu", k ? ", " : "", limits[k].name, limits[k].v);
        printf("},\n \"features\": [");
        for (int k = 0, n = 0; k < i.feature_count; k++)
            if (all || !render_only(i.features[k])) printf("%s\"%s\"", n++ ? ", " : "", i.features[k]);
        printf("],\n \"matmul_f16_math_matrix\": \"%s\",", !i.has_shader_f16 ? "unsupported" : matrix_units ? "subgroup_matrix" : "simt_f32_sums");
        printf("\n \"matmul_f16_math_split\": \"%s\",", split_units ? "subgroup_matrix_hilo" : "f32");
        printf("\n \"attention_mixed\": \"%s\",", !i.has_shader_f16 ? "unsupported" : matrix_units ? "subgroup_matrix" : "f32");
        printf("\n \"enabled\": {\"timestamp_query\": %s, \"subgroups\": %s, \"shader_f16\": %s, \"immediates\": %s, "
               "\"pipeline_cache\": %s, \"subgroup_matrix\": %s}}\n",
               i.has_timestamp_query ? "true" : "false", i.has_subgroups ? "true" : "false",
               i.has_shader_f16 ? "true" : "false", i.has_immediates ? "true" : "false",
               i.has_pipeline_cache ? "true" : "false", i.has_subgroup_matrix ? "true" : "false");
    } else {
        printf("adapter       %s\nvendor        %s (0x%04x)\narchitecture  %s\nbackend       %s\ntype          %s\ndriver        %s\n",
               i.name, i.vendor, i.vendor_id, i.architecture[0] ? i.architecture : "-", i.backend, i.adapter_type,
               i.driver[0] ? i.driver : "-");
        printf("runtime       %s %s (%s)\n", i.runtime, i.runtime_version, i.runtime_library);
        if (i.subgroup_matrix_count) {
            printf("subgroup matrices (M x N x K)%s\n", i.has_subgroup_matrix ? "" : ", not enabled");
            for (int k = 0; k < i.subgroup_matrix_count; k++)
                printf("  %s x %s -> %-4s %ux%ux%u\n", i.subgroup_matrix[k].component, i.subgroup_matrix[k].component,
                       i.subgroup_matrix[k].result, i.subgroup_matrix[k].m, i.subgroup_matrix[k].n, i.subgroup_matrix[k].k);
        }
        printf("matmul f16_math=matrix  %s\n", matrix_kernel);
        printf("matmul f16_math=split   %s\n", split_kernel);
        printf("attention mixed         %s\n", attention_kernel);
        printf("limits\n");
        for (int k = 0; k < nl; k++) printf("  %-40s %llu\n", limits[k].name, limits[k].v);
        int hidden = 0;
        for (int k = 0; k < i.feature_count; k++) hidden += !all && render_only(i.features[k]);
        printf("features%s\n", all ? "" : " (for compute)");
        for (int k = 0; k < i.feature_count; k++)
            if (all || !render_only(i.features[k])) printf("  %s\n", i.features[k]);
        if (hidden) printf("  (and %d for drawing: wgml info --all)\n", hidden);
    }
    wgml_context_free(ctx);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: wgml info [--json] [--all]\n"
                    "       wgml bench [ops|matmul|attention|gather|transformer|gpt|train|decode|startup|all] [--json] [--quick] [--gpu-time]\n"
                    "       wgml train [--epochs N] [--batch N] [--lr X] [--wd X] [--clip X] [--hidden 256,128] [--seed N]\n"
                    "                  [--out DIR] [--overwrite] [--resume CHECKPOINT] [--data DIR]\n"
                    "       wgml eval CHECKPOINT [--data DIR]\n"
                    "       wgml gpt train [options]         (wgml gpt train --help)\n"
                    "       wgml gpt sample --checkpoint FILE [--prompt TEXT] [--tokens N] [--temperature X] [--top-k N] [--top-p P] [--seed N]\n"
                    "                       [--samples N]\n"
                    "       wgml gpt eval --checkpoint FILE [--data FILE|DIR] [--batch N] [--tokens N]\n"
                    "       wgml --version\n"
                    "Each command takes --help, and --runtime auto|wgpu-native|dawn: the WebGPU implementation\n"
                    "(WGML_RUNTIME; auto: Dawn where installed and the adapter has subgroup matrices).\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    /* Mesa's window-system code warns "XDG_RUNTIME_DIR is invalid or not set" on every
       context without one, though a compute tool never opens a window */
    if (!getenv("XDG_RUNTIME_DIR")) setenv("XDG_RUNTIME_DIR", "/tmp", 0);
    if (cli_take_runtime(&argc, argv)) return 2;
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    /* --help and --version take no arguments: anything after them is a mistake */
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        if (argc > 2) return fprintf(stderr, "wgml %s: a command's options: wgml %s --help\n", cmd, argv[2]), 2;
        return usage(stdout), 0;
    }
    if (!strcmp(cmd, "--version")) {
        if (argc > 2) return fprintf(stderr, "wgml --version: unexpected argument '%s'\n", argv[2]), 2;
        return printf("wgml %s\n", wgml_version()), 0;
    }
    /* each command sees its own name as argv[0] */
    if (strcmp(cmd, "info") == 0) return cmd_info(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "train") == 0) return cmd_train(argc - 1, argv + 1);
    if (strcmp(cmd, "eval") == 0) return cmd_eval(argc - 1, argv + 1);
    if (strcmp(cmd, "gpt") == 0) return cmd_gpt(argc - 2, argv + 2);
    fprintf(stderr, "wgml: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
