/*
 * Elementwise fusion: a tree of elementwise nodes becomes one generated WGSL kernel that
 * reads each input once per element and writes the root's result: one dispatch and one pass
 * over memory for a chain of any length.
 *
 * Inputs ("leaves") are read through their view: strides in the output's 4-D coordinates (0
 * where broadcast) and an offset. Each leaf is read in one of three ways, chosen when the
 * source is generated: contiguous (index i), scalar (one element for all) or strided
 * (coordinates dotted with strides). When every leaf is contiguous or scalar and the size is a
 * multiple of 4, the kernel works on vec4<f32>, four elements per thread.
 *
 * f16 leaves are bound as halves and widened as they are loaded (the math is f32); a root of
 * dtype f16 (a cast to f16, whose WGSL rounds) is stored as halves. The kernel then enables
 * f16 (an adapter without shader-f16 has no f16 tensors).
 *
 * Scalars (binary ops with a number, clamp bounds) are kernel parameters, never source text:
 * the same chain with other numbers reuses the compiled kernel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sbuf.h"
#include "engine/executor.h"
#include "engine/tuning.h"
#include "kernels/wgsl_sources.h"

#define MAX_LEAVES WGML_FUSED_MAX_LEAVES
#define MAX_SCALARS WGML_FUSED_MAX_SCALARS
#define WORKGROUP 256

enum { LEAF_CONTIG, LEAF_SCALAR, LEAF_STRIDED };

typedef struct leaf {
    wgml_tensor *src; /* the tensor read (a view, or base itself) */
    wgml_tensor *base;
    int64_t stride[4];
    int64_t offset;
    int mode;
} leaf;

/* The fused tree lowered to straight-line code: one step per node, operands before the nodes
   that read them. The steps (with the leaves' read modes) are the kernel's variant key, and
   the kernel's source is written from them only when that key is not yet compiled. */
#define NONE 0xffffffffu
typedef struct step {
    uint32_t op;
    uint32_t side;   /* a binary op with a scalar: 1 = x op s, else s op x; otherwise 0 */
    uint32_t arg[2]; /* operands: variable k as k << 1, leaf k as k << 1 | 1; NONE if absent */
    uint32_t scalar; /* its first scalar (a binary op's one, clamp's two), or NONE */
} step;
#define STEP_WORDS (sizeof(step) / 4)

typedef struct gen {
    wgml_context *ctx;
    int64_t shape4[4];
    leaf leaves[MAX_LEAVES];
    int nleaves;
    float scalars[MAX_SCALARS];
    int nscalars;
    step *steps;
    size_t nsteps, cap;
    bool overflow, oom;
} gen;

/* The leaf's strides in the root's right-aligned 4-D coordinates (0 where broadcast). */
static void leaf_of(gen *g, wgml_tensor *s, leaf *out)
{
    out->src = s;
    out->base = wgml_tensor_base(s);
    out->offset = s->offset;
    int pad = 4 - s->ndim;
    for (int d = 0; d < 4; d++) {
        int sd = d - pad;
        out->stride[d] = (sd < 0 || s->shape[sd] == 1) ? 0 : s->stride[sd];
    }
    int64_t cs = 1;
    bool contig = true, scalar = true;
    for (int d = 3; d >= 0; d--) {
        if (g->shape4[d] != 1 && out->stride[d] != cs) contig = false;
        if (out->stride[d] != 0) scalar = false;
        cs *= g->shape4[d];
    }
    out->mode = scalar ? LEAF_SCALAR : contig ? LEAF_CONTIG : LEAF_STRIDED;
}

static uint32_t add_leaf(gen *g, wgml_tensor *s)
{
    for (int i = 0; i < g->nleaves; i++) /* the same tensor again (a chain's other operand) */
        if (g->leaves[i].src == s) return (uint32_t)i;
    leaf l;
    leaf_of(g, s, &l);
    for (int i = 0; i < g->nleaves; i++) {
        leaf *o = &g->leaves[i];
        if (o->base == l.base && o->offset == l.offset && !memcmp(o->stride, l.stride, sizeof l.stride))
            return (uint32_t)i;
    }
    if (g->nleaves == MAX_LEAVES) { g->overflow = true; return 0; }
    g->leaves[g->nleaves] = l;
    return (uint32_t)g->nleaves++;
}

static uint32_t add_scalar(gen *g, float v)
{
    if (g->nscalars == MAX_SCALARS) { g->overflow = true; return 0; }
    g->scalars[g->nscalars] = v;
    return (uint32_t)g->nscalars++;
}

static bool is_fused_inner(gen *g, wgml_tensor *s)
{
    return s == wgml_tensor_base(s) && s->op != WGML_OP_NONE && wgml_sched_fused(g->ctx, s);
}

static uint32_t lower(gen *g, wgml_tensor *t);

static uint32_t operand(gen *g, wgml_tensor *s)
{
    return is_fused_inner(g, s) ? lower(g, s) << 1 : add_leaf(g, s) << 1 | 1;
}

/* Appends the steps of the tree at t; returns the variable that holds its value. */
static uint32_t lower(gen *g, wgml_tensor *t)
{
    step st = {.op = (uint32_t)t->op, .arg = {NONE, NONE}, .scalar = NONE};
    wgml_elementwise_params p = wgml_elementwise_params_of(t);
    if (wgml_op_table[t->op]->kind == WGML_KIND_BINARY && t->nsrc == 1) {
        st.side = (uint32_t)p.side;
        st.scalar = add_scalar(g, p.scalar[0]);
    }
    for (int i = 0; i < wgml_op_table[t->op]->nscalars; i++) { /* clamp's bounds */
        uint32_t k = add_scalar(g, p.scalar[i]);
        if (i == 0) st.scalar = k;
    }
    for (int i = 0; i < t->nsrc && i < 2; i++) st.arg[i] = operand(g, t->src[i]);
    if (g->nsteps == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 64;
        step *n = realloc(g->steps, cap * sizeof *n);
        if (!n) { g->oom = true; return 0; }
        g->steps = n;
        g->cap = cap;
    }
    g->steps[g->nsteps] = st;
    return (uint32_t)g->nsteps++;
}

static void operand_name(char *out, size_t n, uint32_t arg)
{
    snprintf(out, n, arg & 1 ? "L%u" : "v%u", arg >> 1);
}

/* `let vK = <expr>;` for step k: the op table's WGSL with its operands and scalars (S(i), a
   kernel parameter) filled in. A binary op given a number takes it as its operand on the
   other side from the tensor. */
static void put_step(wgml_sbuf *b, const step *s, uint32_t k)
{
    char names[4][24];
    const char *ops[2] = {names[0], names[1]}, *sc[2] = {names[2], names[3]};
    operand_name(names[0], sizeof names[0], s->arg[0]);
    operand_name(names[1], sizeof names[1], s->arg[1]);
    snprintf(names[2], sizeof names[2], "S(%u)", s->scalar);
    snprintf(names[3], sizeof names[3], "S(%u)", s->scalar + 1);
    if (s->side) { /* tensor op number (side 1) or number op tensor */
        ops[s->side == 1 ? 0 : 1] = names[0];
        ops[s->side == 1 ? 1 : 0] = names[2];
    }
    wgml_sbuf_put(b, "    let v%u = ", k);
    wgml_op_expand(b, (int)s->op, ops, sc);
    wgml_sbuf_put(b, ";\n");
}

static bool leaf_f16(const leaf *l) { return l->src->dtype == WGML_F16; }

/* The kernel's source: the Params block, bindings, helpers, the steps as a function of the
   leaves, and a main that reads the leaves and writes the result (out_f16: as halves). */
static char *fused_source(const gen *g, bool vec4, bool strided, int unroll, bool out_f16)
{
    wgml_sbuf out = {0};
#define OUT(...) wgml_sbuf_put(&out, __VA_ARGS__)
    bool halves = out_f16;
    for (int i = 0; i < g->nleaves; i++) halves |= leaf_f16(&g->leaves[i]);
    if (halves) OUT("enable f16;\n");
    OUT("// generated by wgml's fusion: %s\n", wgml_op_table[g->steps[g->nsteps - 1].op]->name);
    OUT("alias T = %s;\nalias TU = %s;\nalias TI = %s;\nalias TB = %s;\n", vec4 ? "vec4<f32>" : "f32",
        vec4 ? "vec4<u32>" : "u32", vec4 ? "vec4<i32>" : "i32", vec4 ? "vec4<bool>" : "bool");
    OUT("struct Params {\n    hdr: vec4<u32>, // threads, threads per grid row, NaN bits, inf bits\n"
        "    shape: vec4<u32>,\n    strides: array<vec4<u32>, %d>,\n    offs: array<vec4<u32>, %d>,\n"
        "    s: array<vec4<f32>, %d>,\n}\n",
        g->nleaves, (g->nleaves + 3) / 4, g->nscalars ? (g->nscalars + 3) / 4 : 1);
    OUT("@group(0) @binding(0) var<uniform> P: Params;\n");
    for (int i = 0; i < g->nleaves; i++) {
        bool v = vec4 && g->leaves[i].mode == LEAF_CONTIG, h = leaf_f16(&g->leaves[i]);
        OUT("@group(0) @binding(%d) var<storage, read> in%d: array<%s>;\n", i + 1, i,
            v ? (h ? "vec4<f16>" : "vec4<f32>") : h ? "f16" : "f32");
    }
    OUT("@group(0) @binding(%d) var<storage, read_write> out: array<%s>;\n", g->nleaves + 1,
        out_f16 ? (vec4 ? "vec4<f16>" : "f16") : "T");
    OUT("fn S(k: u32) -> T { return T(P.s[k / 4u][k %% 4u]); }\n"
        "fn wgml_nan() -> T { return T(bitcast<f32>(P.hdr.z)); }\n"
        "fn wgml_inf() -> T { return T(bitcast<f32>(P.hdr.w)); }\n%s", wgml_wgsl_find("elementwise"));
    /* the fused expression as a function of its leaves, then a main that loads, for each of
       its `unroll` elements, all leaves first (so they can be in flight together), then
       computes and stores; a workgroup's elements are u * WORKGROUP + lid, so every load is
       coalesced (how many: wgml_build_fused) */
    OUT("fn body(");
    for (int k = 0; k < g->nleaves; k++) OUT("%sL%d: T", k ? ", " : "", k);
    OUT(") -> T {\n");
    for (size_t k = 0; k < g->nsteps; k++) put_step(&out, &g->steps[k], (uint32_t)k);
    OUT("    return v%u;\n}\n", (uint32_t)g->nsteps - 1);
    OUT("@compute @workgroup_size(%d)\n"
        "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
        "    let base = (wg.x + wg.y * (P.hdr.y / %du)) * %du + lid;\n",
        WORKGROUP, WORKGROUP, WORKGROUP * unroll);
    for (int u = 0; u < unroll; u++) {
        OUT("    let i%d = base + %du;\n", u, u * WORKGROUP);
        for (int k = 0; k < g->nleaves; k++) OUT("    var L%d_%d = T(0.0);\n", k, u);
        OUT("    if (i%d < P.hdr.x) {\n        let i = i%d;\n", u, u);
        if (strided)
            OUT("        let c = vec4<u32>(i / (P.shape.y * P.shape.z * P.shape.w), (i / (P.shape.z * P.shape.w)) %% P.shape.y,\n"
                "                          (i / P.shape.w) %% P.shape.z, i %% P.shape.w);\n");
        for (int k = 0; k < g->nleaves; k++) {
            const char *off = k % 4 == 0 ? "x" : k % 4 == 1 ? "y" : k % 4 == 2 ? "z" : "w";
            bool h = leaf_f16(&g->leaves[k]); /* halves widen as they load */
            switch (g->leaves[k].mode) {
            case LEAF_CONTIG: OUT("        L%d_%d = %sin%d[P.offs[%d].%s + i]%s;\n", k, u, h ? "T(" : "", k, k / 4, off, h ? ")" : ""); break;
            case LEAF_SCALAR: OUT("        L%d_%d = T(%sin%d[P.offs[%d].%s]%s);\n", k, u, h ? "f32(" : "", k, k / 4, off, h ? ")" : ""); break;
            default: OUT("        L%d_%d = %sin%d[P.offs[%d].%s + dot(c, P.strides[%d])]%s;\n", k, u, h ? "f32(" : "", k, k / 4, off, k, h ? ")" : "");
            }
        }
        OUT("    }\n");
    }
    for (int u = 0; u < unroll; u++) {
        /* an f16 root's value is already a half (its op rounds): the conversion is exact */
        OUT("    if (i%d < P.hdr.x) { out[i%d] = %sbody(", u, u, out_f16 ? (vec4 ? "vec4<f16>(" : "f16(") : "");
        for (int k = 0; k < g->nleaves; k++) OUT("%sL%d_%d", k ? ", " : "", k, u);
        OUT(")%s; }\n", out_f16 ? ")" : "");
    }
    OUT("}\n");
#undef OUT
    return wgml_sbuf_take(&out);
}

/* The compiled kernel for these steps and read modes: looked up by its variant key (what
   fused_source writes the source from), the source written only the first time. */
static wgml_pipeline *fused_pipeline(wgml_context *ctx, const gen *g, bool vec4, bool strided, int unroll, bool out_f16)
{
    size_t words = 5 + (size_t)g->nleaves + g->nsteps * STEP_WORDS;
    uint32_t small[1024];
    uint32_t *key = words <= 1024 ? small : malloc(words * 4);
    if (!key) {
        wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
        return NULL;
    }
    key[0] = WGML_KEY_FUSED;
    key[1] = (uint32_t)vec4 | (uint32_t)out_f16 << 1;
    key[2] = (uint32_t)unroll;
    key[3] = (uint32_t)g->nleaves;
    key[4] = (uint32_t)g->nscalars;
    for (int k = 0; k < g->nleaves; k++) key[5 + k] = (uint32_t)g->leaves[k].mode | (uint32_t)leaf_f16(&g->leaves[k]) << 8;
    memcpy(key + 5 + g->nleaves, g->steps, g->nsteps * sizeof(step));
    wgml_pipeline *p = wgml_pipeline_find(ctx, key, words);
    if (!p) {
        p = wgml_pipeline_add(ctx, key, words, fused_source(g, vec4, strided, unroll, out_f16), true);
    }
    if (key != small) free(key);
    return p;
}

wgml_status wgml_build_fused(wgml_context *ctx, wgml_tensor *root, wgml_launch *launch)
{
    gen g = {.ctx = ctx};
    int pad = 4 - root->ndim;
    for (int d = 0; d < 4; d++) g.shape4[d] = d < pad ? 1 : root->shape[d - pad];

    lower(&g, root);
    if (g.overflow || g.oom) {
        free(g.steps);
        if (g.oom) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
        return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "fusing %s: too many inputs or scalars",
                         wgml_op_table[root->op]->name);
    }
    bool vec4 = root->numel % 4 == 0;
    bool strided = false;
    for (int i = 0; i < g.nleaves; i++) {
        if (g.leaves[i].mode == LEAF_STRIDED) vec4 = false, strided = true;
        if (g.leaves[i].mode == LEAF_CONTIG && g.leaves[i].offset % 4) vec4 = false;
    }
    uint64_t threads = vec4 ? (uint64_t)root->numel / 4 : (uint64_t)root->numel;
    /* elements a thread: 2 where halves are read or written, whose vec4 loads move 8 bytes, so one a
       thread leaves too few bytes in flight (H200: the mixed GPT's GELU over [16384 x 1536] halves
       13-22% faster, docs/MEASUREMENTS.md); else 1 (unrolling gained nothing for add on the H100) */
    int unroll = wgml_tuning_of(ctx)->ew_unroll;
    if (!unroll) {
        unroll = root->dtype == WGML_F16 ? 2 : 1;
        for (int i = 0; i < g.nleaves; i++)
            if (leaf_f16(&g.leaves[i])) unroll = 2;
    }
    launch->pipeline = fused_pipeline(ctx, &g, vec4, strided, unroll, root->dtype == WGML_F16);
    free(g.steps);
    if (!launch->pipeline) return ctx->rt.status;

    /* parameters, laid out as the Params struct above */
    uint32_t *p = (uint32_t *)launch->params;
    uint32_t gx = wgml_grid(ctx, (threads + WORKGROUP * unroll - 1) / (WORKGROUP * unroll), launch->groups);
    p[0] = (uint32_t)threads;
    p[1] = gx * WORKGROUP;
    p[2] = 0x7fc00000u;
    p[3] = 0x7f800000u;
    for (int d = 0; d < 4; d++) p[4 + d] = (uint32_t)g.shape4[d];
    size_t w = 8;
    for (int k = 0; k < g.nleaves; k++)
        for (int d = 0; d < 4; d++) p[w++] = (uint32_t)g.leaves[k].stride[d];
    for (int k = 0; k < (g.nleaves + 3) / 4 * 4; k++) {
        int64_t off = k < g.nleaves ? g.leaves[k].offset : 0;
        if (k < g.nleaves && vec4 && g.leaves[k].mode == LEAF_CONTIG) off /= 4;
        p[w++] = (uint32_t)off;
    }
    for (int k = 0; k < (g.nscalars ? (g.nscalars + 3) / 4 * 4 : 4); k++) {
        float v = k < g.nscalars ? g.scalars[k] : 0.0f;
        memcpy(&p[w++], &v, 4);
    }
    launch->params_size = (uint32_t)(w * 4);
    for (int k = 0; k < g.nleaves; k++) launch->buffers[k] = g.leaves[k].base;
    launch->buffers[g.nleaves] = root;
    launch->nbuffers = g.nleaves + 1;
    return WGML_OK;
}
