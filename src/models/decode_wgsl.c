/* The decode plan's kernels (models/decode.c), generated per shape: the sizes are WGSL
   constants, so loops have fixed bounds and the compiler unrolls the per-row sums. */
#include "models/decode_wgsl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sbuf.h"
#include "kernels/wgsl_sources.h"

/* The elementwise functions (GELU's erf, SiLU) of kernels/elementwise.wgsl, over f32. NaN and
   infinity come from a private variable: WGSL constants may be neither. */
static void elementwise_functions(wgml_sbuf *b)
{
    wgml_sbuf_put(b, "alias T = f32;\nalias TU = u32;\nalias TI = i32;\nalias TB = bool;\n"
                     "var<private> NAN_BITS: u32 = 0x7fc00000u;\nvar<private> INF_BITS: u32 = 0x7f800000u;\n"
                     "fn wgml_nan() -> T { return bitcast<f32>(NAN_BITS); }\n"
                     "fn wgml_inf() -> T { return bitcast<f32>(INF_BITS); }\n%s\n",
                  wgml_wgsl_find("elementwise"));
}

/* The sampler's noise: a 32-bit hash (lowbias32) of the inputs, chained, gives the Gumbel
   noise's uniform; noisy(l, h0, v) is logit l of token v as the draw compares it (the head's
   candidates and the sampler must agree to the bit). Needs the pass uniform P. */
static void noise_functions(wgml_sbuf *b)
{
    wgml_sbuf_put(b, "fn mix(x0: u32) -> u32 {\n    var x = x0;\n    x ^= x >> 16u;\n    x *= 0x7feb352du;\n"
                     "    x ^= x >> 15u;\n    x *= 0x846ca68bu;\n    x ^= x >> 16u;\n    return x;\n}\n"
                     "fn noisy(l: f32, h0: u32, v: u32) -> f32 {\n"
                     "    if (P.temp > 0.0) {\n"
                     "        let u = (f32(mix(h0 ^ v) >> 8u) + 0.5) * (1.0 / 16777216.0);\n"
                     "        return l / P.temp - log(-log(u));\n    }\n    return l;\n}\n"
                     "fn row_hash(row: vec4<i32>) -> u32 { return mix(P.seed ^ mix((u32(row.x) * 0x9e3779b9u) ^ mix(u32(row.y)))); }\n");
}

/* The weight matrix's element type: vec4<f32> (4 elements a load) or vec4<u32> (8 halves). */
static const char *wtype(int f16) { return f16 ? "vec4<u32>" : "vec4<f32>"; }

/* Threads that stage one vec4 of x plus np partial sums together, each over a slice of the
   partials (their loads in flight at once, not one element's after another's): as many as
   the workgroup's 256 threads allow for rb rows of kch4 vec4s, at most np. */
static unsigned sum_threads(unsigned rb, unsigned kch4, unsigned np)
{
    unsigned t = rb * kch4 >= 256 ? 1 : 256 / (rb * kch4);
    return t > np ? (np ? np : 1) : t;
}

/* The input rows' declarations and fn xraw(rr, k): x, x plus partial sums, or the embedding
   (then rows at binding 6 give the token and position). tpu > 0 (x plus partial sums, x's row
   stride, ps and K multiples of 4): x and the partials read as vec4s, and fn xsum4(rr, k, q):
   inputs k .. k + 3 of x (q = 0) plus the q-th of tpu slices of the partials. */
static void x_source(wgml_sbuf *b, int xsrc, unsigned np, unsigned ps, int e_f16, unsigned ekp, int positions, unsigned tpu)
{
    const char *xt = tpu ? "vec4<f32>" : "f32";
    if (xsrc != DECODE_X_EMBED) wgml_sbuf_put(b, "@group(0) @binding(2) var<storage, read> xin: array<%s>;\n", xt);
    if (xsrc == DECODE_X_SUM) wgml_sbuf_put(b, "@group(0) @binding(9) var<storage, read> parts: array<%s>;\n", xt);
    if (tpu) {
        const unsigned slice = (np + tpu - 1) / tpu;
        /* (an index clamped, not a load skipped: the slice's loads go out together) */
        wgml_sbuf_put(b, "fn xsum4(rr: u32, k: u32, q: u32) -> vec4<f32> {\n"
                         "    let i = (rr * XS + k) / 4u;\n"
                         "    var v = select(vec4<f32>(0.0), xin[i], q == 0u);\n"
                         "    for (var s = 0u; s < %uu; s++) {\n"
                         "        let p = q * %uu + s;\n"
                         "        let pv = parts[min(p, %uu) * %uu + i];\n"
                         "        v += select(vec4<f32>(0.0), pv, p < %uu);\n    }\n    return v;\n}\n"
                         "fn xraw(rr: u32, k: u32) -> f32 {\n    let i = rr * XS + k;\n    var v = xin[i / 4u][i %% 4u];\n"
                         "    for (var p = 0u; p < %uu; p++) { v += parts[p * %uu + i / 4u][i %% 4u]; }\n    return v;\n}\n",
                      slice, slice, np - 1, ps / 4, np, np, ps / 4);
        return;
    }
    if (xsrc == DECODE_X_EMBED) {
        wgml_sbuf_put(b, "@group(0) @binding(12) var<storage, read> wte: array<%s>;\n", wtype(e_f16));
        if (positions) wgml_sbuf_put(b, "@group(0) @binding(11) var<storage, read> wpe: array<f32>;\n");
    }
    wgml_sbuf_put(b, "fn xraw(rr: u32, k: u32) -> f32 {\n");
    if (xsrc == DECODE_X_PLAIN) wgml_sbuf_put(b, "    return xin[rr * XS + k];\n");
    else if (xsrc == DECODE_X_SUM)
        wgml_sbuf_put(b, "    var v = xin[rr * XS + k];\n    for (var p = 0u; p < %uu; p++) { v += parts[p * %uu + rr * XS + k]; }\n    return v;\n",
                      np, ps);
    else {
        wgml_sbuf_put(b, "    let tok = u32(rows[rr].z);\n");
        if (e_f16) wgml_sbuf_put(b, "    var v = unpack2x16float(wte[tok * %uu + k / 8u][(k %% 8u) / 2u])[k %% 2u];\n", ekp / 8);
        else wgml_sbuf_put(b, "    var v = wte[tok * %uu + k / 4u][k %% 4u];\n", ekp / 4);
        if (positions) wgml_sbuf_put(b, "    v += wpe[u32(rows[rr].y) * XS + k];\n");
        wgml_sbuf_put(b, "    return v;\n");
    }
    wgml_sbuf_put(b, "}\n");
}

/* fn xnorm(j, k, raw): the prologue's norm with row j's statistics */
static void x_norm(wgml_sbuf *b, int norm, unsigned w, unsigned bias)
{
    wgml_sbuf_put(b, "fn xnorm(j: u32, k: u32, v: f32) -> f32 {\n");
    if (norm == DECODE_NORM_RMS) wgml_sbuf_put(b, "    return v * stat[j].y * vecs[%uu + k];\n", w);
    else if (norm == DECODE_NORM_LN) wgml_sbuf_put(b, "    return (v - stat[j].x) * stat[j].y * vecs[%uu + k] + vecs[%uu + k];\n", w, bias);
    else wgml_sbuf_put(b, "    return v;\n");
    wgml_sbuf_put(b, "}\n");
}

/* Threads a row of the statistics' trees: the largest power of two with RB of them <= 256. */
static unsigned stat_threads(unsigned rb)
{
    unsigned gs = 1;
    while (gs * 2 * rb <= 256) gs *= 2;
    return gs;
}

/* A block, each line indented by `in`, that sets stat[j] = (mean, 1/std) of the RB rows (RMS:
   (0, 1/rms)) over their K inputs: GS threads a row (stat_threads) add up s and ss as `sum`
   says (thread sub of row j), then one tree of log2(GS) rounds for all the rows (sg: 2 barriers,
   not 2 + log2(GS), where the kernel has the subgroup size as sgs). */
static void stats_tree(wgml_sbuf *b, int norm, unsigned rb, int sg, const char *in, const char *sum)
{
    const unsigned gs = stat_threads(rb);
    wgml_sbuf t = {0};
    wgml_sbuf_put(&t, "{\n    let j = tid / %uu;\n    let sub = tid %% %uu;\n    var s = 0.0;\n    var ss = 0.0;\n%s", gs, gs, sum);
    if (sg) {
        /* (sg) a butterfly over each subgroup's lanes of the row (min(GS, its size)): one
           exchange through workgroup memory, then a thread a row adds the subgroups' sums */
        for (unsigned o = 1; o < gs && o < 128; o *= 2) /* (subgroups have at most 128 lanes; Tint refuses masks past 127) */
            wgml_sbuf_put(&t, "    s += select(0.0, subgroupShuffleXor(s, %uu), %uu < sgs);\n"
                              "    ss += select(0.0, subgroupShuffleXor(ss, %uu), %uu < sgs);\n", o, o, o, o);
        wgml_sbuf_put(&t, "    red[tid] = s;\n    red[256u + tid] = ss;\n    workgroupBarrier();\n"
                          "    if (sub == 0u && j < RB) {\n"
                          "        for (var q = min(sgs, %uu); q < %uu; q += min(sgs, %uu)) { red[tid] += red[tid + q]; red[256u + tid] += red[256u + tid + q]; }\n",
                      gs, gs, gs);
    } else
        wgml_sbuf_put(&t, "    red[tid] = s;\n    red[256u + tid] = ss;\n    workgroupBarrier();\n"
                          "    for (var st = %uu; st > 0u; st >>= 1u) {\n"
                          "        if (sub < st) { red[tid] += red[tid + st]; red[256u + tid] += red[256u + tid + st]; }\n"
                          "        workgroupBarrier();\n    }\n"
                          "    if (sub == 0u && j < RB) {\n",
                      gs / 2);
    wgml_sbuf_put(&t, "        let mean = red[tid] / f32(K);\n%s"
                  "    }\n    workgroupBarrier();\n}\n",
                  norm == DECODE_NORM_RMS ? "        stat[j] = vec2<f32>(0.0, inverseSqrt(red[256u + tid] / f32(K) + EPS));\n"
                                          : "        let var_ = max(red[256u + tid] / f32(K) - mean * mean, 0.0);\n"
                                            "        stat[j] = vec2<f32>(mean, inverseSqrt(var_ + EPS));\n");
    if (t.failed) b->failed = 1;
    for (const char *l = t.s; !t.failed && *l;) {
        const char *e = strchr(l, '\n');
        wgml_sbuf_put(b, "%s%.*s\n", in, (int)(e - l), l);
        l = e + 1;
    }
    free(t.s);
}

/* Where a staged vec4 of x goes in xs: at its place (kh 0), or, for f16 weights, the row's even
   vec4s first and its odd ones KH after (fn xsat, gemv_xsat_fn), so that the lanes' reads of the
   two halves of their weight unit are each a run of neighbouring 16-byte loads (the grid block
   has the one-row form of the same mapping) */
static const char *xs_at(unsigned kh) { return kh ? "xsat(i)" : "i"; }

static void gemv_xsat_fn(wgml_sbuf *b, unsigned kh)
{
    if (kh)
        wgml_sbuf_put(b, "const KH: u32 = %uu;\nfn xsat(i: u32) -> u32 {\n    let v = i %% (2u * KH);\n"
                         "    return i - v + (v & 1u) * KH + (v >> 1u);\n}\n", kh);
}

/* Inside the row-chunk loop: the RB rows' statistics over their K inputs, read from x. */
static void row_stats(wgml_sbuf *b, int norm, unsigned rb, int sg)
{
    char sum[256];
    snprintf(sum, sizeof sum,
             "    if (j < RB && r0 + j < R) {\n        let rr = xrow(r0 + j);\n"
             "        for (var k = sub; k < K; k += %uu) { let v = xraw(rr, k); s += v; ss += v * v; }\n    }\n",
             stat_threads(rb));
    stats_tree(b, norm, rb, sg, "        ", sum);
}

/* stage_normed_once's loop over the staged vec4s: the head (the norm's weight and bias
   vectors nw/nb kept per iteration; j the row, k the input, v/w/c zeroed) and the tail
   (v into xs, w and c kept) */
static void normed_loop_head(wgml_sbuf *b, unsigned ni, unsigned kch4)
{
    wgml_sbuf_put(b, "            var nw: array<vec4<f32>, %u>;\n            var nb: array<vec4<f32>, %u>;\n"
                     "            for (var it = 0u; it < %uu; it++) {\n"
                     "                let i = tid + it * 256u;\n"
                     "                if (i < RB * %uu) {\n"
                     "                    let j = i / %uu;\n                    let k = (i %% %uu) * 4u;\n"
                     "                    var v = vec4<f32>(0.0);\n                    var w = vec4<f32>(0.0);\n"
                     "                    var c = vec4<f32>(0.0);\n",
                  ni, ni, ni, kch4, kch4, kch4);
}

static void normed_loop_tail(wgml_sbuf *b, unsigned kh)
{
    wgml_sbuf_put(b, "                    xs[%s] = v;\n                    nw[it] = w;\n                    nb[it] = c;\n"
                     "                }\n            }\n            workgroupBarrier();\n",
                  xs_at(kh));
}

/* Inside the row loop, where x is one chunk (KCH >= KP): the RB raw rows into xs (and the
   norm's weights for them into registers) in one pass over x, their statistics from xs, then
   xs normed in place: x is read once (with partial sums, each added once), not twice. */
static void stage_normed_once(wgml_sbuf *b, int norm, unsigned rb, unsigned kch4, int persist, unsigned nw, unsigned nb, unsigned tpu,
                              int sg, unsigned kh)
{
    const unsigned ni = (rb * kch4 + 255) / 256, ln = norm == DECODE_NORM_LN;
    if (tpu) { /* x plus partial sums, as vec4s (x_source): tpu threads a vec4 */
        const unsigned units = rb * kch4;
        if (tpu > 1)
            wgml_sbuf_put(b, "            for (var i = tid; i < %uu; i += 256u) {\n"
                             "                let q = i / %uu;\n                let iu = i %% %uu;\n"
                             "                let j = iu / %uu;\n                let k = (iu %% %uu) * 4u;\n"
                             "                var v = vec4<f32>(0.0);\n"
                             "                if (k < K && r0 + j < R) { v = xsum4(xrow(r0 + j), k, q); }\n"
                             "                xsp[i] = v;\n            }\n            workgroupBarrier();\n",
                          units * tpu, units, units, kch4, kch4);
        normed_loop_head(b, ni, kch4);
        wgml_sbuf_put(b, "                    if (k < K) {\n"
                         "                        w = vec4<f32>(vecs[%uu + k], vecs[%uu + k + 1u], vecs[%uu + k + 2u], vecs[%uu + k + 3u]);\n",
                      nw, nw, nw, nw);
        if (ln) wgml_sbuf_put(b, "                        c = vec4<f32>(vecs[%uu + k], vecs[%uu + k + 1u], vecs[%uu + k + 2u], vecs[%uu + k + 3u]);\n",
                              nb, nb, nb, nb);
        wgml_sbuf_put(b, "                        if (r0 + j < R) {\n                            let rr = xrow(r0 + j);\n");
        if (tpu > 1) {
            wgml_sbuf_put(b, "                            v = xsp[i];\n");
            for (unsigned q = 1; q < tpu; q++) wgml_sbuf_put(b, "                            v += xsp[%uu + i];\n", q * units);
        } else wgml_sbuf_put(b, "                            v = xsum4(rr, k, 0u);\n");
        if (persist)
            wgml_sbuf_put(b, "                            if (wg.x == 0u) {\n"
                             "                                for (var e = 0u; e < 4u; e++) { xout[rr * XS + k + e] = v[e]; }\n"
                             "                            }\n");
        wgml_sbuf_put(b, "                        }\n                    }\n");
        normed_loop_tail(b, kh);
    } else {
    char bias[80] = "";
    if (ln) snprintf(bias, sizeof bias, "                            c[e] = vecs[%uu + k + e];\n", nb);
    normed_loop_head(b, ni, kch4);
    wgml_sbuf_put(b, "                    for (var e = 0u; e < 4u; e++) {\n"
                     "                        if (k + e < K) {\n"
                     "                            w[e] = vecs[%uu + k + e];\n%s"
                     "                            if (r0 + j < R) {\n"
                     "                                let rr = xrow(r0 + j);\n                                let raw = xraw(rr, k + e);\n%s"
                     "                                v[e] = raw;\n                            }\n"
                     "                        }\n                    }\n",
                  nw, bias, persist ? "                                if (wg.x == 0u) { xout[rr * XS + k + e] = raw; }\n" : "");
    normed_loop_tail(b, kh);
    }
    /* the statistics from xs */
    char sum[256];
    snprintf(sum, sizeof sum,
             "    if (j < RB) {\n"
             "        for (var u = sub; u < %uu; u += %uu) { let v = xs[j * %uu + u]; s += v.x + v.y + v.z + v.w; ss += dot(v, v); }\n"
             "    }\n",
             kch4, stat_threads(rb), kch4);
    stats_tree(b, norm, rb, sg, "            ", sum);
    wgml_sbuf_put(b, "            for (var it = 0u; it < %uu; it++) {\n"
                     "                let i = tid + it * 256u;\n"
                     "                if (i < RB * %uu) {\n                    let j = i / %uu;\n"
                     "                    let q = %s;\n                    xs[q] = %s;\n                }\n            }\n",
                  ni, kch4, kch4, xs_at(kh), ln ? "(xs[q] - stat[j].x) * stat[j].y * nw[it] + nb[it]" : "xs[q] * stat[j].y * nw[it]");
}

/* Inside the row-chunk loop: inputs k0 .. k0 + KCH of the RB rows into xs, normed (workgroup 0
   writes the raw rows to xout first, with persist). */
static void stage_rows(wgml_sbuf *b, unsigned kch4, int persist, unsigned kh)
{
    wgml_sbuf_put(b,
                  "            for (var i = tid; i < RB * %uu; i += 256u) {\n"
                  "                let j = i / %uu;\n                let k = k0 + (i %% %uu) * 4u;\n"
                  "                var v = vec4<f32>(0.0);\n"
                  "                if (r0 + j < R) {\n                    let rr = xrow(r0 + j);\n"
                  "                    for (var e = 0u; e < 4u; e++) {\n"
                  "                        if (k + e < K) {\n                            let raw = xraw(rr, k + e);\n%s"
                  "                            v[e] = xnorm(j, k + e, raw);\n                        }\n                    }\n"
                  "                }\n                xs[%s] = v;\n            }\n",
                  kch4, kch4, kch4, persist ? "                            if (wg.x == 0u) { xout[rr * XS + k + e] = raw; }\n" : "", xs_at(kh));
}

/* Inside: W row n's units (lane, lane + LPO, ...) of this chunk into wr, ITERS a lane, all
   loads issued together; they do not depend on x, so they go out before the prologue. */
static void row_load_into(wgml_sbuf *b, unsigned kch4, const char *chunk_units, unsigned lpo, unsigned wv, const char *reg, const char *row,
                          unsigned nr)
{
    const unsigned iters = (kch4 * 4 / wv + lpo - 1) / lpo;
    if (nr > 1) { /* rows row + q OPW, q < NR: registers q ITERS + it */
        wgml_sbuf_put(b, "                let units = %s;\n"
                         "                for (var q = 0u; q < %uu; q++) {\n"
                         "                    let rq = %s + q * OPW;\n"
                         "                    if (rq < N) {\n"
                         "                        for (var it = 0u; it < %uu; it++) {\n"
                         "                            let u = lane + it * %uu;\n"
                         "                            if (u < units) { %s[q * %uu + it] = W[rq * UPR + k0 / %uu + u]; }\n"
                         "                        }\n                    }\n                }\n",
                      chunk_units, nr, row, iters, lpo, reg, iters, wv);
        return;
    }
    wgml_sbuf_put(b, "                let units = %s;\n"
                     "                for (var it = 0u; it < %uu; it++) {\n"
                     "                    let u = lane + it * %uu;\n"
                     "                    if (u < units) { %s[it] = W[%s * UPR + k0 / %uu + u]; }\n                }\n",
                  chunk_units, iters, lpo, reg, row, wv);
}

static void row_load(wgml_sbuf *b, unsigned kch4, const char *chunk_units, unsigned lpo, unsigned wv, unsigned nr)
{
    row_load_into(b, kch4, chunk_units, lpo, wv, "wr", "n", nr);
}

/* The declaration of a register array `reg` for row_load_into. (No initializer: with nr > 1
   a lane group's rows past N keep an earlier tile's or chunk's weights, naga zeroing such a
   variable only once; their sums are never stored.) */
static void row_regs_named(wgml_sbuf *b, int f16, unsigned kch4, unsigned lpo, unsigned wv, const char *reg, unsigned nr)
{
    wgml_sbuf_put(b, "        var %s: array<%s, %u>;\n", reg, wtype(f16), (kch4 * 4 / wv + lpo - 1) / lpo * nr);
}

static void row_regs(wgml_sbuf *b, int f16, unsigned kch4, unsigned lpo, unsigned wv, unsigned nr)
{
    row_regs_named(b, f16, kch4, lpo, wv, "wr", nr);
}

/* Inside: acc[j] += the loaded wr times the staged xs (nr > 1: acc[q RB + j] for the NR rows,
   each staged x read once for all of them). */
static void row_fma(wgml_sbuf *b, int f16, unsigned kch4, const char *chunk_units, unsigned lpo, unsigned wv, unsigned kh, unsigned nr)
{
    const unsigned iters = (kch4 * 4 / wv + lpo - 1) / lpo;
    if (nr > 1) {
        wgml_sbuf_put(b, "                let units = %s;\n"
                         "                for (var it = 0u; it < %uu; it++) {\n"
                         "                    let u = lane + it * %uu;\n                    if (u < units) {\n",
                      chunk_units, iters, lpo);
        if (f16)
            wgml_sbuf_put(b, "                        var wf: array<vec4<f32>, %u>;\n"
                             "                        for (var q = 0u; q < %uu; q++) {\n"
                             "                            let w = wr[q * %uu + it];\n"
                             "                            wf[2u * q] = vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));\n"
                             "                            wf[2u * q + 1u] = vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w));\n"
                             "                        }\n"
                             "                        for (var j = 0u; j < RB; j++) {\n"
                             "                            let x0 = xs[j * %uu + %s];\n                            let x1 = xs[j * %uu + %s];\n"
                             "                            for (var q = 0u; q < %uu; q++) { acc[q * RB + j] += dot(wf[2u * q], x0) + dot(wf[2u * q + 1u], x1); }\n"
                             "                        }\n",
                          2 * nr, nr, iters, kch4, kh ? "u" : "2u * u", kch4, kh ? "KH + u" : "2u * u + 1u", nr);
        else
            wgml_sbuf_put(b, "                        for (var j = 0u; j < RB; j++) {\n"
                             "                            let x = xs[j * %uu + u];\n"
                             "                            for (var q = 0u; q < %uu; q++) { acc[q * RB + j] += dot(wr[q * %uu + it], x); }\n"
                             "                        }\n",
                          kch4, nr, iters);
        wgml_sbuf_put(b, "                    }\n                }\n");
        return;
    }
    wgml_sbuf_put(b, "                let units = %s;\n"
                     "                for (var it = 0u; it < %uu; it++) {\n"
                     "                    let u = lane + it * %uu;\n                    if (u < units) {\n"
                     "                        let w = wr[it];\n",
                  chunk_units, iters, lpo);
    if (f16)
        wgml_sbuf_put(b, "                        let w0 = vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));\n"
                         "                        let w1 = vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w));\n"
                         "                        for (var j = 0u; j < RB; j++) {\n"
                         "                            acc[j] += dot(w0, xs[j * %uu + %s]) + dot(w1, xs[j * %uu + %s]);\n"
                         "                        }\n",
                      kch4, kh ? "u" : "2u * u", kch4, kh ? "KH + u" : "2u * u + 1u");
    else
        wgml_sbuf_put(b, "                        for (var j = 0u; j < RB; j++) { acc[j] += dot(w, xs[j * %uu + u]); }\n", kch4);
    wgml_sbuf_put(b, "                    }\n                }\n");
}

/* Both: load, then sum (the fused MLP, whose x is staged already). */
static void row_dot(wgml_sbuf *b, int f16, unsigned kch4, const char *chunk_units, unsigned lpo, unsigned wv, unsigned kh)
{
    wgml_sbuf_put(b, "                {\n");
    row_regs(b, f16, kch4, lpo, wv, 1);
    row_load(b, kch4, chunk_units, lpo, wv, 1);
    wgml_sbuf_put(b, "                {\n");
    row_fma(b, f16, kch4, chunk_units, lpo, wv, kh, 1);
    wgml_sbuf_put(b, "                }\n                }\n");
}

/* The LPO lanes' sums of each row group, for RB rows: red_at(j, group * LPO) after. The tree:
   log2(LPO) rounds, a barrier each. sg: a butterfly over the group's lanes in each subgroup
   (lanes numbered along local_invocation_index, as Vulkan drivers do for a 1-D workgroup), so
   every lane holds its subgroup's part; one barrier, then red_at adds the LPO / sgs parts (one
   where the group fits a subgroup). */
static void lane_sums(wgml_sbuf *b, unsigned lpo, int sg, const char *at)
{
    if (sg) {
        wgml_sbuf_put(b, "        for (var j = 0u; j < RB; j++) {\n            var v = acc[%sj];\n", at);
        for (unsigned o = 1; o < lpo; o *= 2)
            wgml_sbuf_put(b, "            v += select(0.0, subgroupShuffleXor(v, %uu), %uu < sgs);\n", o, o);
        wgml_sbuf_put(b, "            red[j * 256u + tid] = v;\n        }\n        workgroupBarrier();\n");
        return;
    }
    wgml_sbuf_put(b, "        for (var j = 0u; j < RB; j++) { red[j * 256u + tid] = acc[%sj]; }\n        workgroupBarrier();\n"
                     "        for (var st = %uu; st > 0u; st >>= 1u) {\n"
                     "            if (lane < st) { for (var j = 0u; j < RB; j++) { red[j * 256u + tid] += red[j * 256u + tid + st]; } }\n"
                     "            workgroupBarrier();\n        }\n",
                  at, lpo / 2);
}

/* fn red_at(j, g0): row j's sum of the group whose first thread is g0, after lane_sums (sg: the
   parts of its subgroups, sgs the subgroup size passed in) */
static void red_at_fn(wgml_sbuf *b, unsigned lpo, int sg)
{
    if (sg)
        wgml_sbuf_put(b, "fn red_at(j: u32, g0: u32, sgs: u32) -> f32 {\n    var v = 0.0;\n"
                         "    for (var q = 0u; q < %uu; q += min(sgs, %uu)) { v += red[j * 256u + g0 + q]; }\n    return v;\n}\n",
                      lpo, lpo);
    else wgml_sbuf_put(b, "fn red_at(j: u32, g0: u32, sgs: u32) -> f32 { return red[j * 256u + g0]; }\n");
}

char *wgml_decode_gemv_wgsl(const wgml_decode_gemv *k, uint32_t *bindings)
{
    wgml_sbuf b = {0};
    const unsigned wv = k->f16 ? 8 : 4, kch4 = k->kch / 4, lpo = k->lpo ? k->lpo : 32, kh = k->planes && k->f16 ? kch4 / 2 : 0;
    const int norm = k->norm != DECODE_NORM_NONE, uses_vecs = norm || k->bias >= 0;
    const int uses_rows = k->epilogue == DECODE_OUT_QKV || k->xsrc == DECODE_X_EMBED || k->cand;
    uint32_t used = 1u << 0 | 1u << 3 | 1u << 5;
    if (k->xsrc != DECODE_X_EMBED) used |= 1u << 2;
    if (k->xsrc == DECODE_X_SUM) used |= 1u << 9;
    if (k->xsrc == DECODE_X_EMBED) used |= 1u << 12 | (k->positions ? 1u << 11 : 0);
    if (k->persist) used |= 1u << 10;
    if (k->head) used |= 1u << 1;
    if (k->cand) used |= 1u << 6 | 1u << 14;
    if (uses_vecs) used |= 1u << 4;
    if (uses_rows) used |= 1u << 6;
    if (k->epilogue == DECODE_OUT_QKV) used |= 1u << 7 | 1u << 8;
    *bindings = used;
    const int f16c = k->epilogue == DECODE_OUT_QKV && k->f16c;
    if (f16c) wgml_sbuf_put(&b, "enable f16;\n");
    if (k->epilogue == DECODE_OUT_GELU || k->epilogue == DECODE_OUT_SWIGLU) elementwise_functions(&b);
    wgml_sbuf_put(&b,
                  "const K: u32 = %uu;\nconst KP: u32 = %uu;\nconst N: u32 = %uu;\nconst RB: u32 = %uu;\nconst KCH: u32 = %uu;\n"
                  "const XS: u32 = %uu;\nconst OS: u32 = %uu;\nconst UPR: u32 = %uu;\nconst EPS: f32 = %.9g;\n",
                  k->K, k->KP, k->N, k->RB, k->kch, k->xs, k->os, k->KP / wv, (double)k->eps);
    wgml_sbuf_put(&b, "struct Pass { R: u32, S: u32, temp: f32, seed: u32 }\n"
                      "@group(0) @binding(0) var<uniform> P: Pass;\n");
    if (k->head) wgml_sbuf_put(&b, "@group(0) @binding(1) var<storage, read> picks: array<u32>;\n");
    if (k->cand) {
        wgml_sbuf_put(&b, "@group(0) @binding(14) var<storage, read_write> cand: array<vec2<f32>>;\n");
        noise_functions(&b);
    }
    wgml_sbuf_put(&b, "@group(0) @binding(3) var<storage, read> W: array<%s>;\n", wtype(k->f16));
    if (uses_vecs) wgml_sbuf_put(&b, "@group(0) @binding(4) var<storage, read> vecs: array<f32>;\n");
    wgml_sbuf_put(&b, "@group(0) @binding(5) var<storage, read_write> outb: array<f32>;\n");
    if (uses_rows) wgml_sbuf_put(&b, "@group(0) @binding(6) var<storage, read> rows: array<vec4<i32>>;\n");
    if (k->persist) wgml_sbuf_put(&b, "@group(0) @binding(10) var<storage, read_write> xout: array<f32>;\n");
    if (k->epilogue == DECODE_OUT_QKV)
        wgml_sbuf_put(&b, "alias CE = %s;\n@group(0) @binding(7) var<storage, read_write> kc: array<CE>;\n"
                          "@group(0) @binding(8) var<storage, read_write> vc: array<CE>;\n"
                          "const QD: u32 = %uu;\nconst KVD: u32 = %uu;\nconst BLOCK: u32 = %uu;\n",
                      f16c ? "f16" : "f32", k->qd, k->kvd, k->block);
    /* x plus partial sums staged once (a single chunk) as vec4s, tpu threads each */
    const unsigned tpu = k->xsrc == DECODE_X_SUM && norm && k->kch >= k->KP && k->xs % 4 == 0 && k->ps % 4 == 0 && k->K % 4 == 0
                             ? sum_threads(k->RB, kch4, k->np) : 0;
    x_source(&b, k->xsrc, k->np, k->ps, k->e_f16, k->ekp, k->positions, tpu);
    if (tpu > 1) wgml_sbuf_put(&b, "var<workgroup> xsp: array<vec4<f32>, %u>;\n", k->RB * kch4 * tpu);
    /* a tile: OPW groups of lpo lanes, each summing NR rows OPW apart */
    const unsigned nr = k->nr > 1 ? k->nr : 1, opw = 256 / lpo, per = opw * nr, tiles = wgml_decode_gemv_tiles(k->N, lpo, nr);
    /* grid stride: x staged once a workgroup, its tiles of OPW rows in turn */
    const int stride = k->hwg > 0 && norm && k->kch >= k->KP;
    wgml_sbuf_put(&b, "var<workgroup> xs: array<vec4<f32>, %u>;\nvar<workgroup> red: array<f32, %u>;\n"
                      "var<workgroup> stat: array<vec2<f32>, RB>;\n",
                  k->RB * kch4, k->RB * 256 > 512 ? k->RB * 256 : 512);
    wgml_sbuf_put(&b, "fn xrow(r: u32) -> u32 { return %s; }\n", k->head ? "picks[r]" : "r");
    gemv_xsat_fn(&b, kh);
    if (nr > 1) wgml_sbuf_put(&b, "const OPW: u32 = %uu;\n", opw);
    x_norm(&b, k->norm, k->norm_w, k->norm_b);
    red_at_fn(&b, lpo, k->sg);
    const unsigned nwg = stride ? k->hwg : tiles; /* the workgroups: the candidates a row */
    wgml_sbuf_put(&b, "@compute @workgroup_size(256)\n"
                      "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32%s) {\n"
                      "    let R = %s;\n    let lane = tid %% %uu;\n    let grp = tid / %uu;\n    let n = wg.x * %uu + grp;\n"
                      "    let SGS = %s;\n"
                      "    for (var r0 = %s; r0 < R; r0 += %uu) {\n",
                  k->sg ? ", @builtin(subgroup_size) sgs: u32" : "", k->head ? "P.S" : "P.R", lpo, lpo, per, k->sg ? "sgs" : "0u",
                  k->rgroups > 1 ? "wg.y * RB" : "0u", k->rgroups > 1 ? k->RB * k->rgroups : k->RB);
    /* each chunk's weights are loaded first: their latency hides the norm's statistics and
       the staging of x (the first chunk's loads go out before anything else) */
    char units[64];
    snprintf(units, sizeof units, "min(KCH, KP - k0) / %uu", wv);
    wgml_sbuf_put(&b, "        var acc: array<f32, %u>;\n        for (var j = 0u; j < %uu; j++) { acc[j] = 0.0; }\n", k->RB * nr, k->RB * nr);
    /* the candidates' noise: the row's hash, its loads issued before the weights' (not waited for at the end) */
    if (k->cand) wgml_sbuf_put(&b, "        var h0 = 0u;\n        if (tid < RB && r0 + tid < R) { h0 = row_hash(rows[picks[r0 + tid]]); }\n");
    if (stride) {
        wgml_sbuf_put(&b, "        let k0 = 0u;\n");
        row_regs(&b, k->f16, kch4, lpo, wv, nr);
        wgml_sbuf_put(&b, "        if (n < N) {\n");
        row_load(&b, kch4, units, lpo, wv, nr);
        wgml_sbuf_put(&b, "        }\n");
        stage_normed_once(&b, k->norm, k->RB, kch4, k->persist, k->norm_w, k->norm_b, tpu, k->sg, kh);
        wgml_sbuf_put(&b, "        workgroupBarrier();\n        var best = -3.4e38;\n        var at = 0u;\n"
                          "        for (var t = wg.x; t < %uu; t += %uu) {\n"
                          "            let n = t * %uu + grp;\n"
                          /* the next tile's loads go out before this one's sums */
                          "            let nn = n + %uu;\n",
                      tiles, nwg, per, nwg * per);
        row_regs_named(&b, k->f16, kch4, lpo, wv, "wn", nr);
        wgml_sbuf_put(&b, "            if (nn < N) {\n");
        row_load_into(&b, kch4, units, lpo, wv, "wn", "nn", nr);
        wgml_sbuf_put(&b, "            }\n            for (var j = 0u; j < %uu; j++) { acc[j] = 0.0; }\n            if (n < N) {\n", k->RB * nr);
        row_fma(&b, k->f16, kch4, units, lpo, wv, kh, nr);
        wgml_sbuf_put(&b, "            }\n");
    } else {
        wgml_sbuf_put(&b, "        for (var k0 = 0u; k0 < KP; k0 += KCH) {\n");
        row_regs(&b, k->f16, kch4, lpo, wv, nr);
        wgml_sbuf_put(&b, "            if (n < N) {\n");
        row_load(&b, kch4, units, lpo, wv, nr);
        wgml_sbuf_put(&b, "            }\n");
        /* (no barrier before the staging: the last chunk's FMA ended with one, and the last
           row block with another; the statistics end with theirs) */
        if (norm && k->kch >= k->KP) stage_normed_once(&b, k->norm, k->RB, kch4, k->persist, k->norm_w, k->norm_b, tpu, k->sg, kh);
        else {
            if (norm) {
                wgml_sbuf_put(&b, "            if (k0 == 0u) {\n");
                row_stats(&b, k->norm, k->RB, k->sg);
                wgml_sbuf_put(&b, "            }\n");
            }
            stage_rows(&b, kch4, k->persist, kh);
        }
        wgml_sbuf_put(&b, "            workgroupBarrier();\n            if (n < N) {\n");
        row_fma(&b, k->f16, kch4, units, lpo, wv, kh, nr);
        /* (a barrier only where another chunk overwrites xs: lane_sums's writes of red race
           with nothing, the statistics' last reads of it being behind their final barrier) */
        wgml_sbuf_put(&b, "            }\n%s        }\n", k->kch < k->KP ? "            workgroupBarrier();\n" : "");
    }
    /* nr > 1: each of the NR rows in turn, through red (a barrier after each): row n + q OPW */
    if (nr > 1 && k->cand && !stride) wgml_sbuf_put(&b, "        var nbest = -3.4e38;\n        var nat = 0u;\n");
    if (nr > 1) wgml_sbuf_put(&b, "        for (var q = 0u; q < %uu; q++) {\n        let nq = n + q * OPW;\n        {\n        let n = nq;\n", nr);
    lane_sums(&b, lpo, k->sg, nr > 1 ? "q * RB + " : "");
    wgml_sbuf_put(&b, "        if (lane == 0u && n < N) {\n            for (var j = 0u; j < RB; j++) {\n"
                      "                let r = r0 + j;\n                if (r < R) {\n"
                      "                    var v = red_at(j, tid, SGS);\n");
    if (k->bias >= 0) wgml_sbuf_put(&b, "                    v += vecs[%du + n];\n", k->bias);
    switch (k->epilogue) {
    case DECODE_OUT_PLAIN: wgml_sbuf_put(&b, "                    outb[r * OS + n] = v;\n"); break;
    case DECODE_OUT_RESID: wgml_sbuf_put(&b, "                    outb[r * OS + n] += v;\n"); break;
    case DECODE_OUT_GELU: wgml_sbuf_put(&b, "                    outb[r * OS + n] = wgml_gelu_exact(v);\n"); break;
    case DECODE_OUT_SWIGLU: /* rows 2f (gate) and 2f + 1 (up) are neighbouring groups */
        wgml_sbuf_put(&b, "                    if ((grp & 1u) == 0u) { outb[r * OS + n / 2u] = wgml_silu(v) * red_at(j, tid + %uu, SGS); }\n", lpo);
        break;
    case DECODE_OUT_QKV:
        wgml_sbuf_put(&b, "                    if (n < QD) { outb[r * OS + n] = v; } else {\n"
                          "                        let base = (u32(rows[r].x) * BLOCK + u32(rows[r].y)) * KVD;\n"
                          "                        let m = n - QD;\n"
                          "                        if (m < KVD) { kc[base + m] = CE(v); } else { vc[base + m - KVD] = CE(v); }\n"
                          "                    }\n");
        break;
    }
    wgml_sbuf_put(&b, "                }\n            }\n        }\n");
    if (stride) {
        /* this tile's outputs into the row's running candidate; red is free again after the
           barrier, and the next tile's weights become this one's */
        if (k->cand)
            wgml_sbuf_put(&b, "        if (tid < RB && r0 + tid < R) {\n"
                              "            for (var g = 0u; g < %uu; g++) {\n"
                              "                let o = t * %uu%s + g;\n"
                              "                if (o < N) {\n                    let nv = noisy(red_at(tid, g * %uu, SGS), h0, o);\n"
                              "                    if (nv > best) { best = nv; at = o; }\n                }\n            }\n        }\n",
                          opw, per, nr > 1 ? " + q * OPW" : "", lpo);
        if (nr > 1) wgml_sbuf_put(&b, "        }\n        workgroupBarrier();\n        }\n");
        wgml_sbuf_put(&b, "        workgroupBarrier();\n        wr = wn;\n        }\n");
        if (k->cand)
            wgml_sbuf_put(&b, "        if (tid < RB && r0 + tid < R) { cand[(r0 + tid) * %uu + wg.x] = vec2<f32>(best, bitcast<f32>(at)); }\n", nwg);
    } else {
        /* (nr > 1: best and at carried over the NR rows, the candidate stored after the last) */
        if (k->cand && nr > 1)
            wgml_sbuf_put(&b, "        if (tid < RB && r0 + tid < R) {\n"
                              "            for (var g = 0u; g < %uu; g++) {\n"
                              "                let o = wg.x * %uu + q * OPW + g;\n"
                              "                if (o < N) {\n                    let nv = noisy(red_at(tid, g * %uu, SGS), h0, o);\n"
                              "                    if (nv > nbest) { nbest = nv; nat = o; }\n                }\n            }\n"
                              "            if (q == %uu) { cand[(r0 + tid) * %uu + wg.x] = vec2<f32>(nbest, bitcast<f32>(nat)); }\n        }\n",
                          opw, per, lpo, nr - 1, nwg);
        else if (k->cand) /* this workgroup's outputs in ascending order, the first of equal values kept (as the sampler's scan) */
        wgml_sbuf_put(&b, "        if (tid < RB && r0 + tid < R) {\n"
                          "            let r = r0 + tid;\n"
                          "            var best = -3.4e38;\n            var at = 0u;\n"
                          "            for (var g = 0u; g < %uu; g++) {\n"
                          "                let o = wg.x * %uu + g;\n"
                          "                if (o < N) {\n                    let nv = noisy(red_at(tid, g * %uu, SGS), h0, o);\n"
                          "                    if (nv > best) { best = nv; at = o; }\n                }\n            }\n"
                          "            cand[r * %uu + wg.x] = vec2<f32>(best, bitcast<f32>(at));\n        }\n",
                      opw, opw, lpo, nwg);
        if (nr > 1) wgml_sbuf_put(&b, "        }\n        workgroupBarrier();\n        }\n");
    }
    wgml_sbuf_put(&b, "        workgroupBarrier();\n    }\n}\n");
    return wgml_sbuf_take(&b);
}

char *wgml_decode_mlp_wgsl(const wgml_decode_mlp *m)
{
    wgml_sbuf b = {0};
    const unsigned wv = m->f16 ? 8 : 4, kch4 = m->CP / 4;
    /* RPR hidden units a round (up to 32, dividing FB), LPO = 256 / RPR lanes each: FB <= 32
       is one round, its W1 rows loaded before x is staged */
    unsigned rpr = 32;
    while (m->FB % rpr) rpr /= 2;
    const unsigned lpo = 256 / rpr, one_round = m->FB == rpr;
    elementwise_functions(&b);
    wgml_sbuf_put(&b,
                  "const K: u32 = %uu;\nconst KP: u32 = %uu;\nconst KCH: u32 = %uu;\nconst F: u32 = %uu;\nconst FB: u32 = %uu;\n"
                  "const RB: u32 = %uu;\nconst XS: u32 = %uu;\nconst UPR: u32 = %uu;\nconst EPS: f32 = %.9g;\n",
                  m->C, m->CP, m->CP, m->F, m->FB, m->RB, m->C, m->CP / wv, (double)m->eps);
    wgml_sbuf_put(&b, "struct Pass { R: u32, S: u32, temp: f32, seed: u32 }\n"
                      "@group(0) @binding(0) var<uniform> P: Pass;\n"
                      "@group(0) @binding(3) var<storage, read> W: array<%s>;\n"
                      "@group(0) @binding(4) var<storage, read> vecs: array<f32>;\n"
                      "@group(0) @binding(10) var<storage, read_write> xout: array<f32>;\n"
                      "@group(0) @binding(13) var<storage, read> W2: array<%s>;\n"
                      "@group(0) @binding(14) var<storage, read_write> partout: array<f32>;\n",
                  wtype(m->f16), m->f16 ? "u32" : "f32");
    const unsigned tpu = m->C % 4 == 0 && m->ps % 4 == 0 ? sum_threads(m->RB, kch4, m->np) : 0;
    x_source(&b, DECODE_X_SUM, m->np, m->ps, 0, 0, 0, tpu);
    if (tpu > 1) wgml_sbuf_put(&b, "var<workgroup> xsp: array<vec4<f32>, %u>;\n", m->RB * kch4 * tpu);
    wgml_sbuf_put(&b, "var<workgroup> xs: array<vec4<f32>, %u>;\nvar<workgroup> red: array<f32, %u>;\n"
                      "var<workgroup> stat: array<vec2<f32>, RB>;\nvar<workgroup> hs: array<f32, %u>;\n"
                      "fn xrow(r: u32) -> u32 { return r; }\n",
                  m->RB * kch4, m->RB * 256 > 512 ? m->RB * 256 : 512, m->RB * m->FB);
    wgml_sbuf_put(&b, "fn w2(i: u32) -> f32 { return %s; }\n", m->f16 ? "unpack2x16float(W2[i / 2u])[i % 2u]" : "W2[i]");
    x_norm(&b, DECODE_NORM_LN, m->norm_w, m->norm_b);
    wgml_sbuf_put(&b, "@compute @workgroup_size(256)\n"
                      "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {\n"
                      "    let R = P.R;\n    let lane = tid %% %uu;\n    let grp = tid / %uu;\n    let f0 = wg.x * FB;\n"
                      "    for (var r0 = 0u; r0 < R; r0 += RB) {\n",
                  lpo, lpo);
    char units[32];
    snprintf(units, sizeof units, "%uu", m->CP / wv);
    wgml_sbuf_put(&b, "        let k0 = 0u;\n");
    if (one_round) {
        row_regs(&b, m->f16, kch4, lpo, wv, 1);
        wgml_sbuf_put(&b, "        {\n            let n = f0 + grp;\n            if (n < F) {\n");
        row_load(&b, kch4, units, lpo, wv, 1);
        wgml_sbuf_put(&b, "            }\n        }\n");
    }
    stage_normed_once(&b, DECODE_NORM_LN, m->RB, kch4, 1, m->norm_w, m->norm_b, tpu, 0, 0);
    wgml_sbuf_put(&b, "        workgroupBarrier();\n"
                      /* the block's hidden units, RPR at a time (a row group each) */
                      "        for (var fb = 0u; fb < FB; fb += %uu) {\n"
                      "            let n = f0 + fb + grp;\n"
                      "            var acc: array<f32, RB>;\n            for (var j = 0u; j < RB; j++) { acc[j] = 0.0; }\n"
                      "            if (n < F) {\n",
                  rpr);
    if (one_round) row_fma(&b, m->f16, kch4, units, lpo, wv, 0, 1);
    else row_dot(&b, m->f16, kch4, units, lpo, wv, 0);
    wgml_sbuf_put(&b, "            }\n");
    lane_sums(&b, lpo, 0, "");
    wgml_sbuf_put(&b, "            if (lane == 0u) {\n"
                      "                for (var j = 0u; j < RB; j++) {\n"
                      "                    var h = 0.0;\n"
                      "                    if (n < F && r0 + j < R) { h = wgml_gelu_exact(red[j * 256u + tid] + vecs[%uu + n]); }\n"
                      "                    hs[j * FB + fb + grp] = h;\n                }\n            }\n"
                      "            workgroupBarrier();\n        }\n",
                      m->b1);
    /* times their rows of W2, into this workgroup's partial sum */
    wgml_sbuf_put(&b, "        for (var c = tid; c < K; c += 256u) {\n"
                      "            var acc: array<f32, RB>;\n"
                      "            for (var j = 0u; j < RB; j++) { acc[j] = select(0.0, vecs[%uu + c], wg.x == 0u); }\n"
                      "            for (var fa = 0u; fa < FB; fa += %uu) {\n"
                      "                var w: array<f32, %u>;\n"
                      "                for (var i = 0u; i < %uu; i++) { if (f0 + fa + i < F) { w[i] = w2((f0 + fa + i) * %uu + c); } }\n"
                      "                for (var i = 0u; i < %uu; i++) {\n"
                      "                    if (f0 + fa + i < F) { for (var j = 0u; j < RB; j++) { acc[j] += hs[j * FB + fa + i] * w[i]; } }\n"
                      "                }\n            }\n"
                      "            for (var j = 0u; j < RB; j++) { if (r0 + j < R) { partout[wg.x * %uu + (r0 + j) * XS + c] = acc[j]; } }\n"
                      "        }\n        workgroupBarrier();\n    }\n}\n",
                  m->b2, rpr, rpr, rpr, m->CP, rpr, m->ps);
    return wgml_sbuf_take(&b);
}

/* A phase of wgml_decode_block_wgsl: rows of N outputs over K4 weight units each (f16: 8
   halves, f32: 4 floats), LPO lanes a row, tiles of 256 / LPO rows taken by the grid's
   workgroups in turn. block_preload declares the phase's registers (wr<id>) and loads its first
   tile (issued before the barrier the phase waits on: their latency hides in the wait);
   block_phase then goes over the tiles, the next tile's loads issued before this one's sums, and
   `epi` stores v, a row's sum times sc (lane 0 of its group; sc: rsn(), the norm's scale, or
   1). (A phase's tiles all in flight at once, as registers, and the loop's tiles under an `if`
   were both slower on an H200: docs/MEASUREMENTS.md.) */
typedef struct block_ph {
    const char *w;
    unsigned k4, N, lpo, id;
    /* what epi adds to the sums as xb, read with the tile's weights (lane 0), so the store waits
       on no load: xres, the residual x[n] (its word in xw<id>); bias, WGSL of n (a bias, in
       xr<id>); neither: none */
    int xres;
    const char *bias;
} block_ph;

static int block_base(const block_ph *ph) { return ph->xres || ph->bias; }

static void block_load(wgml_sbuf *b, const block_ph *ph, const char *tile, const char *in)
{
    const unsigned rpt = 256 / ph->lpo, it = (ph->k4 + ph->lpo - 1) / ph->lpo;
    wgml_sbuf_put(b, "%s{\n%s    let n = (%s) * %uu + tid / %uu;\n%s    let lane = tid %% %uu;\n"
                     "%s    if (n < %uu) { for (var i = 0u; i < %uu; i++) { let u = lane + i * %uu; if (u < %uu) { wr%u[i] = %s[n * %uu + u]; } } }\n",
                  in, in, tile, rpt, ph->lpo, in, ph->lpo, in, ph->N, it, ph->lpo, ph->k4, ph->id, ph->w, ph->k4);
    if (block_base(ph)) {
        wgml_sbuf_put(b, "%s    if (lane == 0u && n < %uu) {", in, ph->N);
        if (ph->xres) wgml_sbuf_put(b, " xw%u = atomicLoad(&x[n]);", ph->id);
        if (ph->bias) wgml_sbuf_put(b, " xr%u = %s;", ph->id, ph->bias);
        wgml_sbuf_put(b, " }\n");
    }
    wgml_sbuf_put(b, "%s}\n", in);
}

static void block_preload(wgml_sbuf *b, const block_ph *ph)
{
    wgml_sbuf_put(b, "    var wr%u: array<WT, %u>;\n", ph->id, (ph->k4 + ph->lpo - 1) / ph->lpo);
    if (ph->bias) wgml_sbuf_put(b, "    var xr%u = 0.0;\n", ph->id);
    if (ph->xres) wgml_sbuf_put(b, "    var xw%u = 0u;\n", ph->id);
    block_load(b, ph, "wg", "    ");
}

/* a phase's tiles: N rows, lpo lanes a row, 256 / lpo rows a tile */
static unsigned block_tiles(unsigned N, unsigned lpo) { return (N + 256 / lpo - 1) / (256 / lpo); }

static void block_phase(wgml_sbuf *b, const block_ph *ph, int sg, const char *sc, const char *epi)
{
    const unsigned lpo = ph->lpo, rpt = 256 / lpo, tiles = block_tiles(ph->N, lpo), it = (ph->k4 + lpo - 1) / lpo;
    wgml_sbuf_put(b, "    for (var t = wg; t < %uu; t += W) {\n"
                     "        let grp = tid / %uu;\n        let lane = tid %% %uu;\n        let n = t * %uu + grp;\n        var acc = 0.0;\n"
                     "        if (n < %uu) { for (var i = 0u; i < %uu; i++) { let u = lane + i * %uu; if (u < %uu) { acc += wdot(wr%u[i], u); } } }\n",
                  tiles, lpo, lpo, rpt, ph->N, it, lpo, ph->k4, ph->id);
    /* (this tile's x[n] before the next tile's loads take its register) */
    if (ph->bias) wgml_sbuf_put(b, "        let xbias = xr%u;\n", ph->id);
    if (ph->xres) wgml_sbuf_put(b, "        let xword = xw%u;\n", ph->id);
    wgml_sbuf_put(b, "        if (t + W < %uu) {\n", tiles);
    block_load(b, ph, "t + W", "            ");
    wgml_sbuf_put(b, "        }\n");
    if (sg)
        for (unsigned o = 1; o < lpo; o *= 2) wgml_sbuf_put(b, "        acc += select(0.0, subgroupShuffleXor(acc, %uu), %uu < sgs);\n", o, o);
    wgml_sbuf_put(b, "        red[tid] = acc;\n        workgroupBarrier();\n");
    if (!sg)
        wgml_sbuf_put(b, "        for (var st = %uu; st > 0u; st >>= 1u) { if (lane < st) { red[tid] += red[tid + st]; } workgroupBarrier(); }\n", lpo / 2);
    wgml_sbuf_put(b, "        if (lane == 0u && n < %uu) {\n            let v = gsum(tid, %uu, sgs) * %s;\n", ph->N, lpo, sc);
    if (block_base(ph))
        wgml_sbuf_put(b, "            let xb = %s%s%s;\n", ph->bias ? "xbias" : "", ph->bias && ph->xres ? " + " : "",
                      ph->xres ? "bitcast<f32>(xword)" : "");
    wgml_sbuf_put(b, "            %s\n        }\n        workgroupBarrier();\n    }\n", epi);
}

/* A norm's weights (and a LayerNorm's bias) for the next phase, read before the barrier as its
   matrix's first loads: nothing of theirs waits on the other workgroups. */
typedef struct block_norm {
    const char *v; /* the array holding them, from offset w (the bias from bias, -1: none) */
    unsigned w, kc4;
    int bias;
} block_norm;

/* gw<id> (gb<id>): the norm's weights (bias) from v at offset o, the vec4s a thread stages */
static void block_norm_vec(wgml_sbuf *b, const char *name, unsigned id, unsigned kc4, const char *v, unsigned o)
{
    wgml_sbuf_put(b, "    var %s%u: array<vec4<f32>, %u>;\n"
                     "    for (var j = 0u; j < %uu; j++) {\n        let i = tid + 256u * j;\n"
                     "        for (var e = 0u; e < 4u; e++) { if (4u * i + e < C) { %s%u[j][e] = %s[%uu + 4u * i + e]; } }\n    }\n",
                  name, id, (kc4 + 255) / 256, (kc4 + 255) / 256, name, id, v, o);
}

/* The wait for the phase before (wgml_grid_wait), with the next phase's first loads (and its
   norm's weights, where it has one) issued before it. The barrier: every workgroup's writes
   before it (its fence, then its arrival), none of the next phase's reads of them before all
   have arrived (their fence after the wait). Tagged: the arrivals and waits, no fences: the
   staging after it reads again the words not yet tagged. Probed: no arrivals; a thread for each
   128-byte line of what the staging reads (arr's n words) reads one word of it until that
   carries the tag. */
static void block_sync(wgml_sbuf *b, const block_ph *next, const block_norm *nm, const wgml_decode_block *k, const char *arr,
                       unsigned n, int tag)
{
    /* (two fences, as the split attention's combine: thread 0's release after every lane's
       stores, which the first barrier orders before it) */
    if (k->wait == WGML_GRID_WAIT_BARRIER) wgml_sbuf_put(b, "    storageBarrier();\n    storageBarrier();\n");
    block_preload(b, next);
    if (nm) block_norm_vec(b, "gw", next->id, nm->kc4, nm->v, nm->w);
    if (nm && nm->bias >= 0) block_norm_vec(b, "gb", next->id, nm->kc4, nm->v, (unsigned)nm->bias);
    const char *after = k->wait == WGML_GRID_WAIT_BARRIER ? "storageBarrier();" : "workgroupBarrier();";
    if (k->wait == WGML_GRID_WAIT_PROBED) {
        unsigned st = 32; /* (words apart: a line, more where the lines outnumber the threads) */
        while ((n + st - 1) / st > 256) st *= 2;
        wgml_sbuf_put(b, "    if (tid < %uu) {\n        let i = min(%uu * tid + %uu, %uu);\n        var pn = 0u;\n"
                         "        loop { if ((atomicLoad(&%s[i]) & 1u) == %du || gave_up(pn)) { break; } pn++; }\n    }\n    workgroupBarrier();\n",
                      (n + st - 1) / st, st, st - 1, n - 1, arr, tag);
    } else if (k->K > 1)
        wgml_sbuf_put(b, "    if (tid == 0u) { grid_arrive(wg); }\n    workgroupBarrier();\n    if (tid < K) { grid_wait_on(tid, bgoal); }\n    %s\n",
                      after);
    else wgml_sbuf_put(b, "    if (tid == 0u) { grid_wait(); }\n    %s\n", after);
}

/* A thread's loads of count vec4s into dst (vec4 j: i = tid + 256 at, element e taken where
   the WGSL condition `in` holds) from get(4 i + e), all issued before any is used. With tagged
   (an array of tagged words, get's), the tag form's wait on an earlier phase's output: the round
   repeated until every word carries tag (at most the bound's rounds, or until another wait gave
   up; then it sets word 1 and goes on). */
static void vec4_loads(wgml_sbuf *b, const char *dst, unsigned count, const char *at, const char *in, const char *get,
                       const char *tagged, int tag)
{
    if (!tagged) {
        wgml_sbuf_put(b, "        for (var j = 0u; j < %uu; j++) {\n            let i = tid + 256u * %s;\n"
                         "            for (var e = 0u; e < 4u; e++) { if (%s) { %s[j][e] = %s(4u * i + e); } }\n        }\n",
                      count, at, in, dst, get);
        return;
    }
    wgml_sbuf_put(b, "        var pn = 0u;\n        loop {\n            var ok = true;\n"
                     "            for (var j = 0u; j < %uu; j++) {\n                let i = tid + 256u * %s;\n"
                     "                for (var e = 0u; e < 4u; e++) { if (%s) {"
                     " let w = atomicLoad(&%s[4u * i + e]); %s[j][e] = bitcast<f32>(w); ok = ok & ((w & 1u) == %du); } }\n"
                     "            }\n"
                     "            if (ok || gave_up(pn)) { break; }\n            pn++;\n        }\n",
                  count, at, in, tagged, dst, tag);
}

/* n4 vec4s of xs from get(0 .. lim - 1), zeros past: every load of a round issued before any
   store (a loop of loads and stores in turn waits a round trip an iteration), rounds of at most
   4 vec4s a thread (16 registers); with tagged, waited for (vec4_loads) */
static void block_stage(wgml_sbuf *b, unsigned n4, const char *get, const char *lim, const char *tagged, int tag)
{
    const unsigned nj = (n4 + 255) / 256, per = nj < 4 ? nj : 4;
    const char *at = nj > per ? "(j0 + j)" : "j";
    if (nj > per) wgml_sbuf_put(b, "    for (var j0 = 0u; j0 < %uu; j0 += %uu) {\n", nj, per);
    else wgml_sbuf_put(b, "    {\n");
    /* (sv zeroed each round by its initializer: the pinned naga zeroes a variable declared
       without one only once, at the function's start, gfx-rs/wgpu#9489, so a later round's vec4s
       past lim would keep the last round's values) */
    wgml_sbuf_put(b, "        var sv = array<vec4<f32>, %u>();\n", per);
    char in[96];
    snprintf(in, sizeof in, "i < %uu && 4u * i + e < %s", n4, lim);
    vec4_loads(b, "sv", per, at, in, get, tagged, tag);
    wgml_sbuf_put(b, "        for (var j = 0u; j < %uu; j++) { let i = tid + 256u * %s; if (i < %uu) { xs[xsat(i)] = sv[j]; } }\n    }\n",
                  per, at, n4);
}

/* xv: this thread's vec4s of x (the stagings' units, zeros past C), loaded before any is used
   (tag >= 0: waited for, words of that tag) */
static void block_x_loads(wgml_sbuf *b, unsigned kc4, int tag)
{
    const unsigned nj = (kc4 + 255) / 256;
    wgml_sbuf_put(b, "        var xv: array<vec4<f32>, %u>;\n", nj);
    vec4_loads(b, "xv", nj, "j", "4u * i + e < C", "xget", tag >= 0 ? "x" : NULL, tag);
}

/* x staged by every workgroup times the norm's weights (gw<id>), its sum of squares left in
   ssq's 16 partial sums: the phase's sums take the norm's scale at the end (rsn()), so the
   GEMV's products need not wait on the sum. */
static void block_stage_normed(wgml_sbuf *b, unsigned kc4, unsigned id, int tag)
{
    wgml_sbuf_put(b, "    {\n        var ss = 0.0;\n");
    block_x_loads(b, kc4, tag);
    wgml_sbuf_put(b, "        for (var j = 0u; j < %uu; j++) {\n"
                     "            let i = tid + 256u * j;\n"
                     "            if (i < %uu) {\n"
                     "                let v = xv[j];\n"
                     "                xs[xsat(i)] = v * gw%u[j];\n                ss += dot(v, v);\n            }\n        }\n"
                     "        ssr[tid] = ss;\n        workgroupBarrier();\n"
                     "        if (tid < 16u) { var s = 0.0; for (var q = 0u; q < 16u; q++) { s += ssr[16u * tid + q]; } ssq[tid] = s; }\n    }\n",
                  (kc4 + 255) / 256, kc4, id);
}

/* GPT-2's LayerNorm: x staged by every workgroup, its mean and variance (as the GEMVs' norm:
   E[x^2] - mean^2) from 16 partial sums each (sg: each subgroup's sums, one barrier), then xs
   normed in place with the weights and bias (gw<id>, gb<id>; zeros past C) */
static void block_stage_ln(wgml_sbuf *b, unsigned kc4, unsigned id, int sg, int tag)
{
    const unsigned nj = (kc4 + 255) / 256;
    wgml_sbuf_put(b, "    {\n        var s = 0.0;\n        var ss = 0.0;\n");
    block_x_loads(b, kc4, tag);
    wgml_sbuf_put(b, "        for (var j = 0u; j < %uu; j++) { s += dot(xv[j], vec4<f32>(1.0)); ss += dot(xv[j], xv[j]); }\n"
                     "        var sm = 0.0;\n        var sq = 0.0;\n",
                  nj);
    if (sg)
        wgml_sbuf_put(b, "        s = subgroupAdd(s);\n        ss = subgroupAdd(ss);\n"
                         "        if (tid %% sgs == 0u) { red[tid / sgs] = s; ssr[tid / sgs] = ss; }\n        workgroupBarrier();\n"
                         "        for (var q = 0u; q * sgs < 256u; q++) { sm += red[q]; sq += ssr[q]; }\n");
    else
        wgml_sbuf_put(b, "        red[tid] = s;\n        ssr[tid] = ss;\n        workgroupBarrier();\n"
                         "        if (tid < 16u) {\n            var a = 0.0;\n            var q2 = 0.0;\n"
                         "            for (var q = 0u; q < 16u; q++) { a += red[16u * tid + q]; q2 += ssr[16u * tid + q]; }\n"
                         "            ssq[tid] = a;\n            ssq[16u + tid] = q2;\n        }\n        workgroupBarrier();\n"
                         "        for (var q = 0u; q < 16u; q++) { sm += ssq[q]; sq += ssq[16u + q]; }\n");
    wgml_sbuf_put(b, "        let mean = sm / f32(C);\n"
                     "        let rs = inverseSqrt(max(sq / f32(C) - mean * mean, 0.0) + EPS);\n"
                     "        for (var j = 0u; j < %uu; j++) {\n            let i = tid + 256u * j;\n"
                     "            if (i < %uu) { xs[xsat(i)] = (xv[j] - vec4<f32>(mean)) * rs * gw%u[j] + gb%u[j]; }\n        }\n"
                     "        workgroupBarrier();\n    }\n",
                  nj, kc4, id, id);
}

/* Lanes a row for a phase of N rows: 32, or fewer rows a workgroup (64, 128 lanes) while the
   tiles would not reach every workgroup of the grid. */
static unsigned block_lanes(unsigned N, unsigned W)
{
    unsigned l = 32;
    while (l < 128 && block_tiles(N, l) < W) l *= 2;
    return l;
}

int wgml_decode_block_rows_everywhere(const wgml_decode_block *k)
{
    const unsigned nu = k->ln ? k->F : 2 * k->F;
    return block_tiles(k->C, block_lanes(k->C, k->W)) >= k->W && block_tiles(nu, block_lanes(nu, k->W)) >= k->W;
}

/* the block's widest input staged, in vec4s */
static unsigned block_xs4(const wgml_decode_block *k)
{
    const unsigned ka = (k->A + 7) / 8 * 8, kc = (k->C + 7) / 8 * 8, kf = (k->F + 7) / 8 * 8;
    return (ka > kc ? ka > kf ? ka : kf : kc > kf ? kc : kf) / 4;
}

/* (xs, red and ssr of 256, ssq: 16 partial sums, 32 with ln's sums of x too; 4 words more for
   the K counters' goal, bgoal) */
uint64_t wgml_decode_block_bytes(const wgml_decode_block *k) { return (uint64_t)(4 * block_xs4(k) + 512 + (k->ln ? 32 : 16) + 4) * 4; }

char *wgml_decode_block_wgsl(const wgml_decode_block *k)
{
    wgml_sbuf b = {0};
    const unsigned wv = k->f16 ? 8 : 4, ka = (k->A + 7) / 8 * 8, kc = (k->C + 7) / 8 * 8, kf = (k->F + 7) / 8 * 8;
    const unsigned xs4 = block_xs4(k);
    elementwise_functions(&b);
    wgml_sbuf_put(&b, "const W: u32 = %uu;\nconst A: u32 = %uu;\nconst C: u32 = %uu;\nconst F: u32 = %uu;\nconst EPS: f32 = %.9g;\n"
                      "alias WT = %s;\n"
                      "@group(0) @binding(1) var<storage, read> att: array<f32>;\n"
                      "@group(0) @binding(2) var<storage, read_write> x: array<atomic<u32>>;\n"
                      "@group(0) @binding(3) var<storage, read> wo: array<WT>;\n"
                      "@group(0) @binding(4) var<storage, read> w1: array<WT>;\n"
                      "@group(0) @binding(5) var<storage, read> w2: array<WT>;\n"
                      "@group(0) @binding(6) var<storage, read> vecs: array<f32>;\n"
                      "@group(0) @binding(7) var<storage, read_write> h: array<atomic<u32>>;\n"
                      "@group(0) @binding(8) var<storage, read_write> bar: array<atomic<u32>>;\n%s"
                      "var<workgroup> xs: array<vec4<f32>, %u>;\nvar<workgroup> red: array<f32, 256>;\n"
                      /* (the norm's sums of squares: a thread's, then 16 partial sums; ln: and of x) */
                      "var<workgroup> ssr: array<f32, 256>;\nvar<workgroup> ssq: array<f32, %u>;\n",
                  k->W, k->A, k->C, k->F, (double)k->eps, wtype(k->f16),
                  k->Q ? "@group(0) @binding(9) var<storage, read> wq: array<WT>;\n"
                         "@group(0) @binding(10) var<storage, read> vnext: array<f32>;\n"
                         "@group(0) @binding(11) var<storage, read_write> qkv: array<f32>;\n" : "",
                  xs4, k->ln ? 32u : 16u);
    /* (planes: as the GEMVs', every phase's staged vec4 i at (i odd) KH + i / 2, KH half the widest input) */
    const int planes = k->planes && k->f16;
    if (planes) wgml_sbuf_put(&b, "const KH: u32 = %uu;\nfn xsat(i: u32) -> u32 { return (i & 1u) * KH + (i >> 1u); }\n", xs4 / 2);
    else wgml_sbuf_put(&b, "fn xsat(i: u32) -> u32 { return i; }\n");
    if (k->f16)
        wgml_sbuf_put(&b, "fn wdot(w: WT, u: u32) -> f32 {\n"
                          "    return dot(vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)), xs[%s])\n"
                          "         + dot(vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)), xs[%s]);\n}\n",
                      planes ? "u" : "2u * u", planes ? "KH + u" : "2u * u + 1u");
    else wgml_sbuf_put(&b, "fn wdot(w: WT, u: u32) -> f32 { return dot(w, xs[u]); }\n");
    wgml_sbuf_put(&b, "fn gsum(g0: u32, l: u32, sgs: u32) -> f32 {\n%s}\n",
                  k->sg ? "    var v = 0.0;\n    for (var q = 0u; q < l; q += min(sgs, l)) { v += red[g0 + q]; }\n    return v;\n" : "    return red[g0];\n");
    wgml_sbuf_put(&b, "fn xget(i: u32) -> f32 { return bitcast<f32>(atomicLoad(&x[i])); }\n"
                      "fn hget(i: u32) -> f32 { return bitcast<f32>(atomicLoad(&h[i])); }\n"
                      "fn aget(i: u32) -> f32 { return att[i]; }\n%s",
                  /* (the RMS norm's scale, from its 16 partial sums; ln normalises xs itself) */
                  k->ln ? "" : "fn rsn() -> f32 {\n    var s = 0.0;\n    for (var q = 0u; q < 16u; q++) { s += ssq[q]; }\n"
                               "    return inverseSqrt(s / f32(C) + EPS);\n}\n");
    /* (thread 0: its arrival, then the wait for the others') */
    /* (a wait gives up past word 2's reads, or at once where another gave up; any way out of the
       loop before the goal sets word 1: lavapipe's compiled loops stop after 65,535 rounds
       without a word) */
    if (k->wait != WGML_GRID_WAIT_PROBED && k->K <= 1)
        wgml_sbuf_put(&b, "fn grid_wait() {\n"
                          "    let goal = (atomicAdd(&bar[0], 1u) & ~(W - 1u)) + W;\n"
                          "    var n = 0u;\n"
                          "    loop {\n        if (bitcast<i32>(atomicLoad(&bar[0]) - goal) >= 0 || atomicLoad(&bar[1]) != 0u) { break; }\n"
                          "        n++;\n        if (n >= atomicLoad(&bar[2])) { break; }\n    }\n"
                          "    if (bitcast<i32>(atomicLoad(&bar[0]) - goal) < 0) { atomicStore(&bar[1], 1u); }\n}\n");
    /* the arrivals over K counters (fewer workgroups' atomics at each word): thread 0's arrival
       leaves the goal, the same for every counter, in bgoal; threads t < K each wait for counter
       t (the bound read once, the word another wait sets every 64th round) */
    if (k->wait != WGML_GRID_WAIT_PROBED && k->K > 1)
        wgml_sbuf_put(&b, "const K: u32 = %uu;\nvar<workgroup> bgoal: u32;\n"
                          "fn grid_arrive(wg: u32) { bgoal = (atomicAdd(&bar[64u * (wg %% K)], 1u) & ~(W / K - 1u)) + W / K; }\n"
                          "fn grid_wait_on(t: u32, goal: u32) {\n"
                          "    let bound = atomicLoad(&bar[2]);\n    var n = 0u;\n"
                          "    loop {\n        if (bitcast<i32>(atomicLoad(&bar[64u * t]) - goal) >= 0) { break; }\n"
                          "        n++;\n        if (((n & 63u) == 0u && atomicLoad(&bar[1]) != 0u) || n >= bound) { break; }\n    }\n"
                          "    if (bitcast<i32>(atomicLoad(&bar[64u * t]) - goal) < 0) { atomicStore(&bar[1], 1u); }\n}\n",
                      k->K);
    /* The tag form: each phase's outputs carry in their lowest bit whether they are this
       launch's (x: 0 from the projection, 1 from down, 1 as the launch finds it; h: 0, set to 1
       at the launch's start), and each staging reads its words again until all carry the tag
       it waits for: no barrier across the grid. put() writes a value with its tag (x and h lose
       their last bit to it). */
    const int tags = k->wait != WGML_GRID_WAIT_BARRIER;
    if (tags)
        wgml_sbuf_put(&b, "fn put(v: f32, t: u32) -> u32 { return (bitcast<u32>(v) & ~1u) | t; }\n"
                          "var<private> bound: u32;\n"
                          /* (a wait gives up past the bound's rounds, or where another gave up, read
                             every 64th round; then sets word 1, which the host reads with the tokens) */
                          "fn gave_up(n: u32) -> bool {\n"
                          "    if (n >= bound || ((n & 63u) == 63u && atomicLoad(&bar[1]) != 0u)) { atomicStore(&bar[1], 1u); return true; }\n"
                          "    return false;\n}\n");
    else wgml_sbuf_put(&b, "fn put(v: f32, t: u32) -> u32 { return bitcast<u32>(v); }\n");
    /* the sums' bases: the residual's x[n], GPT-2's biases (WGSL of n) */
    char bo[48], b1[48], b2[48], bq[48];
    snprintf(bo, sizeof bo, "vecs[%uu + n]", k->bo);
    snprintf(b1, sizeof b1, "vecs[%uu + n]", k->b1);
    snprintf(b2, sizeof b2, "vecs[%uu + n]", k->b2);
    snprintf(bq, sizeof bq, "vnext[%uu + n]", k->bq);
    const unsigned nu = k->ln ? k->F : 2 * k->F, lu = block_lanes(nu, k->W);
    /* (down's residual x[n] is read by the thread that wrote it in the projection: the same
       rows a tile, lanes and tiles; so it needs no tag, and the tiles must stay alike) */
    const block_ph pa = {"wo", ka / wv, k->C, block_lanes(k->C, k->W), 0, 1, k->ln ? bo : NULL},
                   pb = {"w1", kc / wv, nu, lu, 1, 0, k->ln ? b1 : NULL},
                   pc = {"w2", kf / wv, k->C, block_lanes(k->C, k->W), 2, 1, k->ln ? b2 : NULL};
    const char *sc = k->ln ? "1.0" : "rsn()"; /* (ln: xs holds the normed x) */
    wgml_sbuf_put(&b, "@compute @workgroup_size(256)\n"
                      "fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) tid: u32%s) {\n"
                      "    let wg = g.x;\n%s",
                  k->sg ? ", @builtin(subgroup_size) sgs: u32" : "", k->sg ? "" : "    let sgs = 0u;\n");
    /* the projection: its first loads, the attention's output staged, x += wo att (+ bo) */
    block_preload(&b, &pa);
    /* (the tag form: h's words set to tag 1 before this workgroup's first write of x, which its
       fence orders after them: a staging that has seen every x of the projection sees no h of
       the last launch) */
    if (tags) wgml_sbuf_put(&b, "    bound = atomicLoad(&bar[2]);\n    for (var i = wg * 256u + tid; i < F; i += W * 256u) { atomicStore(&h[i], 1u); }\n");
    block_stage(&b, ka / 4, "aget", "A", NULL, 0);
    wgml_sbuf_put(&b, "    workgroupBarrier();\n");
    if (tags) wgml_sbuf_put(&b, "    storageBarrier();\n");
    block_phase(&b, &pa, k->sg, "1.0", "atomicStore(&x[n], put(xb + v, 0u));");
    /* the norm: every workgroup reads the whole new x, its own sums */
    const block_norm nb = {"vecs", k->norm_w, kc / 4, k->ln ? (int)k->norm_b : -1},
                     nd = {"vnext", 0, kc / 4, k->ln ? (int)k->C : -1};
    block_sync(&b, &pb, &nb, k, "x", k->C, 0);
    if (k->ln) block_stage_ln(&b, kc / 4, pb.id, k->sg, tags ? 0 : -1);
    else block_stage_normed(&b, kc / 4, pb.id, tags ? 0 : -1);
    /* (the tag form: its fence pairs with the projection's, before any write of h) */
    if (tags) wgml_sbuf_put(&b, "    storageBarrier();\n");
    /* Llama's gate and up (rows 2f and 2f + 1 are neighbouring groups), or GPT-2's up with GELU */
    char epi[160];
    if (k->ln) snprintf(epi, sizeof epi, "atomicStore(&h[n], put(wgml_gelu_exact(xb + v), 0u));");
    else snprintf(epi, sizeof epi, "if ((grp & 1u) == 0u) { atomicStore(&h[n / 2u], put(wgml_silu(v) * gsum(tid + %uu, %uu, sgs) * rsn(), 0u)); }", lu, lu);
    block_phase(&b, &pb, k->sg, sc, epi);
    /* down: h staged, x += w2 h (+ b2) */
    block_sync(&b, &pc, NULL, k, "h", k->F, 0);
    block_stage(&b, kf / 4, "hget", "F", tags ? "h" : NULL, 0);
    wgml_sbuf_put(&b, "    workgroupBarrier();\n");
    block_phase(&b, &pc, k->sg, "1.0", "atomicStore(&x[n], put(xb + v, 1u));");
    if (k->Q) { /* the next layer's norm and QKV (+ its bias) */
        const block_ph pd = {"wq", kc / wv, k->Q, block_lanes(k->Q, k->W), 3, 0, k->ln ? bq : NULL};
        /* (tag 1 is also what x had as the launch began: each thread reads here the words it
           read with tag 0 in the norm before, so it sees no older value; the two stagings must
           keep one mapping of threads to words) */
        block_sync(&b, &pd, &nd, k, "x", k->C, 1);
        if (k->ln) block_stage_ln(&b, kc / 4, pd.id, k->sg, tags ? 1 : -1);
        else block_stage_normed(&b, kc / 4, pd.id, tags ? 1 : -1);
        block_phase(&b, &pd, k->sg, sc, k->ln ? "qkv[n] = xb + v;" : "qkv[n] = v;");
    }
    wgml_sbuf_put(&b, "}\n");
    return wgml_sbuf_take(&b);
}

char *wgml_decode_embed_wgsl(const wgml_decode_embed *k)
{
    wgml_sbuf b = {0};
    wgml_sbuf_put(&b, "const C: u32 = %uu;\nconst KP: u32 = %uu;\n", k->C, k->KP);
    wgml_sbuf_put(&b, "struct Pass { R: u32, S: u32, temp: f32, seed: u32 }\n"
                      "@group(0) @binding(0) var<uniform> P: Pass;\n"
                      "@group(0) @binding(1) var<storage, read> rows: array<vec4<i32>>;\n"
                      "@group(0) @binding(2) var<storage, read> W: array<%s>;\n"
                      "@group(0) @binding(4) var<storage, read_write> x: array<%s>;\n",
                  wtype(k->f16), k->tag ? "u32" : "f32"); /* (tag: written as words, no float store to flush a denormal) */
    if (k->positions) wgml_sbuf_put(&b, "@group(0) @binding(3) var<storage, read> wpe: array<f32>;\n");
    wgml_sbuf_put(&b, "@compute @workgroup_size(256)\n"
                      "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {\n"
                      "    let i = wg.x * 256u + tid;\n    if (i >= P.R * C) { return; }\n"
                      "    let r = i / C;\n    let c = i %% C;\n    let tok = u32(rows[r].z);\n");
    if (k->f16)
        wgml_sbuf_put(&b, "    let u = W[tok * (KP / 8u) + c / 8u];\n"
                          "    var v = unpack2x16float(u[(c %% 8u) / 2u])[c %% 2u];\n");
    else wgml_sbuf_put(&b, "    var v = W[tok * (KP / 4u) + c / 4u][c %% 4u];\n");
    if (k->positions) wgml_sbuf_put(&b, "    v += wpe[u32(rows[r].y) * C + c];\n");
    wgml_sbuf_put(&b, "    x[r * C + c] = %s;\n}\n", k->tag ? "bitcast<u32>(v) | 1u" : "v");
    return wgml_sbuf_take(&b);
}

char *wgml_decode_sample_wgsl(const wgml_decode_sample *k)
{
    wgml_sbuf b = {0};
    const unsigned wgs = k->wgs ? k->wgs : 256, n = k->cands ? k->cands : k->V;
    wgml_sbuf_put(&b, "const N: u32 = %uu;\nconst CAP: u32 = %uu;\nconst WGS: u32 = %uu;\n", n, k->cap, wgs);
    wgml_sbuf_put(&b, "struct Pass { R: u32, S: u32, temp: f32, seed: u32 }\n"
                      "@group(0) @binding(0) var<uniform> P: Pass;\n"
                      "@group(0) @binding(1) var<storage, read> picks: array<u32>;\n"
                      "@group(0) @binding(2) var<storage, read> logits: array<%s>;\n"
                      "@group(0) @binding(3) var<storage, read_write> drows: array<vec4<i32>>;\n"
                      "@group(0) @binding(4) var<storage, read_write> toks: array<i32>;\n",
                  k->cands ? "vec2<f32>" : "f32");
    if (k->prefill) wgml_sbuf_put(&b, "@group(0) @binding(5) var<storage, read> prows: array<vec4<i32>>;\n");
    wgml_sbuf_put(&b, "var<workgroup> bv: array<f32, WGS>;\nvar<workgroup> bi: array<u32, WGS>;\n");
    noise_functions(&b);
    /* one of the N values of row s: (noised logit, its token); the candidates are noised already */
    if (k->cands)
        wgml_sbuf_put(&b, "fn value(s: u32, v: u32, h0: u32) -> vec2<f32> { return logits[s * N + v]; }\n");
    else
        wgml_sbuf_put(&b, "fn value(s: u32, v: u32, h0: u32) -> vec2<f32> { return vec2<f32>(noisy(logits[s * N + v], h0, v), bitcast<f32>(v)); }\n");
    /* a value into a thread's best: the larger, of equal ones the lower token (the grid-stride
       head's candidates do not come in token order) */
    wgml_sbuf_put(&b, "fn take(c: vec2<f32>, best: ptr<function, f32>, at: ptr<function, u32>) {\n"
                      "    let i = bitcast<u32>(c.y);\n"
                      "    if (c.x > *best || (c.x == *best && i < *at)) { *best = c.x; *at = i; }\n}\n");
    wgml_sbuf_put(&b, "@compute @workgroup_size(WGS)\n"
                      "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {\n"
                      "    let s = wg.x;\n    let row = %s[picks[s]];\n"
                      "    let slot = u32(row.x);\n    let pos = u32(row.y);\n"
                      "    var best = -3.4e38;\n    var at = 0u;\n"
                      "    let h0 = row_hash(row);\n"
                      /* four values a round, their loads issued together; of equal values the lowest token
                         wins, as in the argmax */
                      "    var v = tid;\n"
                      "    for (; v + 3u * WGS < N; v += 4u * WGS) {\n"
                      "        let c0 = value(s, v, h0);\n        let c1 = value(s, v + WGS, h0);\n"
                      "        let c2 = value(s, v + 2u * WGS, h0);\n        let c3 = value(s, v + 3u * WGS, h0);\n"
                      "        take(c0, &best, &at);\n        take(c1, &best, &at);\n"
                      "        take(c2, &best, &at);\n        take(c3, &best, &at);\n"
                      "    }\n"
                      "    for (; v < N; v += WGS) { take(value(s, v, h0), &best, &at); }\n"
                      "    bv[tid] = best;\n    bi[tid] = at;\n    workgroupBarrier();\n"
                      "    for (var st = WGS / 2u; st > 0u; st >>= 1u) {\n"
                      "        if (tid < st) {\n            let ov = bv[tid + st];\n            let oi = bi[tid + st];\n"
                      "            if (ov > bv[tid] || (ov == bv[tid] && oi < bi[tid])) { bv[tid] = ov; bi[tid] = oi; }\n"
                      "        }\n        workgroupBarrier();\n    }\n"
                      "    if (tid == 0u) {\n        let count = u32(drows[slot].w);\n"
                      "        drows[slot] = vec4<i32>(i32(slot), i32(pos + 1u), i32(bi[0]), i32(count + 1u));\n"
                      "        toks[slot * CAP + count %% CAP] = i32(bi[0]);\n    }\n}\n",
                  k->prefill ? "prows" : "drows");
    return wgml_sbuf_take(&b);
}
