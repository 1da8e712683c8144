/* The decode plan's attention kernels (models/decode.c): the attention over the K/V cache
   (whole, or split over chunks of positions and combined), its combine launch, and Llama's
   QK-norm + RoPE + cache append for prefill rows. Generated per shape, as decode_wgsl.c's. */
#include "models/decode_wgsl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sbuf.h"
#include "kernels/wgsl_sources.h"

/* reduce_angle and its helper (the same exact reduction the graph's RoPE uses): ops/mul_wide.wgsl
   whole, then ops/rope.wgsl's text from reduce_angle's comment to the entry point. */
static void rope_helpers(wgml_sbuf *b)
{
    const char *mul = wgml_wgsl_find("mul_wide"), *src = wgml_wgsl_find("rope");
    const char *from = src ? strstr(src, "// a (finite, >= 0, < 2^32") : NULL;
    const char *to = from ? strstr(from, "@compute") : NULL;
    if (!mul || !from || !to) {
        b->failed = 1;
        return;
    }
    wgml_sbuf_put(b, "%s\n%.*s\n", mul, (int)(to - from), from);
}

/* whether the prologue appends the row's k and v to the caches (rotated with rope) */
static int appends(const wgml_decode_attn *a) { return a->rope || a->append; }

/* the prologue's pair (a, b) of a head as (ya, yb), indented by `in`: rotated at the row's
   position by the frequency `fr` with rope, else as it is */
static const char *rotated(const wgml_decode_attn *a, const char *in, const char *fr, char *buf, size_t n)
{
    if (a->rope)
        snprintf(buf, n, "%slet ang = reduce_angle(f32(pos) * %s);\n%slet c = cos(ang);\n%slet s = sin(ang);\n"
                         "%slet ya = a * c - b * s;\n%slet yb = b * c + a * s;\n", in, fr, in, in, in, in);
    else snprintf(buf, n, "%slet ya = a;\n%slet yb = b;\n", in, in);
    return buf;
}

/* the attention's unit of the cache: vec4 loads where the head size allows */
static unsigned cache_lw(const wgml_decode_attn *a) { return a->D % (appends(a) ? 8 : 4) == 0 && a->kvd % 4 == 0 ? 4 : 1; }

/* The early form's layout: TPP threads a K row, VP threads a value column, KPT and VPT vec4s a
   thread of each kept in registers; false where a's shape does not take it (a Llama decode
   chunk with vec4 loads, whose chunk, (G + 1) 64 threads of RoPE and value columns fit the
   workgroup, and at most 32 vec4s a thread) */
static int early_layout(const wgml_decode_attn *a, unsigned *tpp, unsigned *vpn, unsigned *kpt, unsigned *vpt)
{
    const unsigned lw = cache_lw(a), wgs = a->wgs ? a->wgs : 256, dv = a->D / lw;
    if (!(a->chunk > 0 && !a->wo_fused && a->rope && lw == 4 && (a->G + 1) * 64 <= wgs && a->chunk <= wgs && dv <= wgs))
        return 0;
    *tpp = 1;
    while (*tpp * 2 * a->chunk <= wgs && *tpp * 2 <= dv) *tpp *= 2;
    *vpn = wgs / dv, *kpt = (dv + *tpp - 1) / *tpp, *vpt = (a->chunk + *vpn - 1) / *vpn;
    return *kpt + *vpt <= 32;
}

int wgml_decode_attn_early_fits(const wgml_decode_attn *a, uint64_t wg_bytes)
{
    unsigned tpp, vpn, kpt, vpt;
    const uint64_t G = a->G, D = a->D, wgs = a->wgs ? a->wgs : 256, ch = a->chunk, ns = ch ? (a->block + ch - 1) / ch : 1;
    /* its workgroup memory in floats: sc, qs, kown and vown, red and part, sred and vpart, inv,
       and (a bound for either way of combining) the chunks' (max, sum) */
    return early_layout(a, &tpp, &vpn, &kpt, &vpt) && (G * (ch + D) + 2 * D + wgs * (5 + 5 * G) + G * (1 + 2 * ns) + (a->sg ? 4 * G * ch : 0)) * 4 <= wg_bytes;
}

uint64_t wgml_decode_attn_late_bytes(const wgml_decode_attn *a)
{
    /* as the declarations below: sc, qs, red, inv and part; kown and vown (packed halves with
       RoPE); the combine's cm, cl and lastwg; the fused projection's ob */
    const uint64_t lw = cache_lw(a), G = a->G, D = a->D, wgs = a->wgs ? a->wgs : 256;
    const int split = a->chunk > 0 && !a->wo_fused;
    const uint64_t ch = split ? a->chunk : a->block, ns = split ? (a->block + a->chunk - 1) / a->chunk : 1;
    uint64_t floats = G * ch + G * D + wgs + G + wgs * lw;
    if (a->f16c && lw == 4 && appends(a)) floats += 2 * D;
    if (split && a->combine) floats += 2 * G * ns + 1;
    if (a->wo_fused) floats += G * D;
    return floats * 4;
}

char *wgml_decode_attention_wgsl(const wgml_decode_attn *a)
{
    wgml_sbuf b = {0};
    const unsigned lw = cache_lw(a), no = a->G * a->D / lw;
    const unsigned wgs = a->wgs ? a->wgs : 256, all = no >= wgs ? 1 : wgs / no;
    const unsigned parts = a->max_parts && a->max_parts < all ? a->max_parts : all, opw = wgs / parts;
    /* split over positions: chunks of CH, a workgroup each, their unnormalised sums and (max,
       sum of exponentials) to binding 4 and 9 for wgml_decode_attn_combine_wgsl */
    const int split = a->chunk > 0 && !a->wo_fused;
    const unsigned ns = split ? (a->block + a->chunk - 1) / a->chunk : 1;
    /* the chunks combined by the last of them to finish (the sums pass as atomics, below) */
    const int combine = split && a->combine;
    /* a Llama decode chunk's cache loads issued first, before the prologue (its K rows over
       TPP threads a position, coalesced; its V rows loaded once for the G heads, VP threads
       sharing a value column); the row's own position, which the prologue appends, is taken
       from workgroup memory instead. Else the loads after the prologue. */
    unsigned tpp = 1, vpn = 1, kpt = 1, vpt = 1;
    const int early = a->early && early_layout(a, &tpp, &vpn, &kpt, &vpt);
    /* the early form's trees (QK-norm, softmax) by subgroups, where its G + 1 heads take 64 threads each */
    const int sgx = a->sg && early && (a->G + 1) * 64 <= wgs;
    /* the caches' unit CT, read as VT by kcl and vcl: VT itself, or with f16c four halves in two
       words (one 8-byte load; the row's own k and v then written as such words from kown and
       vown), or (single elements) WGSL's f16 */
    const int pk = a->f16c && lw == 4;
    if (pk) wgml_sbuf_put(&b, "alias CT = vec2<u32>;\nfn cunpack(w: CT) -> vec4<f32> { return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)); }\n"
                              "fn cpack(a: f32, b: f32, c: f32, d: f32) -> CT { return CT(pack2x16float(vec2<f32>(a, b)), pack2x16float(vec2<f32>(c, d))); }\n");
    else if (a->f16c) wgml_sbuf_put(&b, "enable f16;\nalias CT = f16;\nfn cunpack(w: CT) -> f32 { return f32(w); }\n");
    else wgml_sbuf_put(&b, "alias CT = %s;\nfn cunpack(w: CT) -> CT { return w; }\n", lw == 4 ? "vec4<f32>" : "f32");
    wgml_sbuf_put(&b,
                  "const D: u32 = %uu;\nconst LW: u32 = %uu;\nconst DV: u32 = %uu;\nconst G: u32 = %uu;\nconst KVD: u32 = %uu;\n"
                  "const BLOCK: u32 = %uu;\nconst QS: u32 = %uu;\nconst AS: u32 = %uu;\nconst SCALE: f32 = %.9g;\n"
                  "const NO: u32 = %uu;\nconst PARTS: u32 = %uu;\nconst OPW: u32 = %uu;\nalias VT = %s;\nconst BIAS: u32 = %uu;\n"
                  "const WGS: u32 = %uu;\nconst CH: u32 = %uu;\nconst NS: u32 = %uu;\nconst NKV: u32 = %uu;\nconst SCW: u32 = %uu;\n"
                  "const COLS: u32 = %uu;\n",
                  a->D, lw, a->D / lw, a->G, a->kvd, a->block, a->qs, a->as, (double)a->scale, no, parts, opw, lw == 4 ? "vec4<f32>" : "f32",
                  a->bias >= 0 ? (unsigned)a->bias : 0u, wgs, split ? a->chunk : a->block, split ? ns : 1u, a->kvd / a->D,
                  split ? a->chunk : a->block, a->wo_fused && a->cols ? a->cols : 1u);
    wgml_sbuf_put(&b, "fn vdot(x: VT, y: VT) -> f32 { return %s; }\n", lw == 4 ? "dot(x, y)" : "x * y");
    wgml_sbuf_put(&b, "fn vload(i: u32) -> VT { return %s; }\n",
                  lw == 4 ? "vec4<f32>(qb[i], qb[i + 1u], qb[i + 2u], qb[i + 3u])" : "qb[i]");
    /* the heads' outputs: to att, or (the projection fused) to ob, the group's G D values */
    if (a->wo_fused)
        wgml_sbuf_put(&b, "fn vput(i: u32, v: VT) { %s }\n",
                      lw == 4 ? "ob[i] = v.x; ob[i + 1u] = v.y; ob[i + 2u] = v.z; ob[i + 3u] = v.w;" : "ob[i] = v;");
    else if (combine)
        wgml_sbuf_put(&b, "fn vput(i: u32, v: VT) { %s }\nfn mlput(i: u32, v: f32) { atomicStore(&ml[i], bitcast<u32>(v)); }\n",
                      lw == 4 ? "atomicStore(&att[i], bitcast<u32>(v.x)); atomicStore(&att[i + 1u], bitcast<u32>(v.y)); "
                                "atomicStore(&att[i + 2u], bitcast<u32>(v.z)); atomicStore(&att[i + 3u], bitcast<u32>(v.w));"
                              : "atomicStore(&att[i], bitcast<u32>(v));");
    else
        wgml_sbuf_put(&b, "fn vput(i: u32, v: VT) { %s }\n%s",
                      lw == 4 ? "att[i] = v.x; att[i + 1u] = v.y; att[i + 2u] = v.z; att[i + 3u] = v.w;" : "att[i] = v;",
                      split ? "fn mlput(i: u32, v: f32) { ml[i] = v; }\n" : "");
    if (a->wo_fused) {
        wgml_sbuf_put(&b, "var<workgroup> ob: array<f32, %u>;\n"
                          "@group(0) @binding(5) var<storage, read> wo: array<%s>;\n"
                          "@group(0) @binding(7) var<storage, read_write> partout: array<f32>;\n"
                          "fn wo_at(i: u32) -> f32 { return %s; }\n",
                      a->G * a->D, a->f16 ? "u32" : "f32", a->f16 ? "unpack2x16float(wo[i / 2u])[i % 2u]" : "wo[i]");
        if (a->bias >= 0) wgml_sbuf_put(&b, "@group(0) @binding(6) var<storage, read> vecs: array<f32>;\n");
    } else wgml_sbuf_put(&b, "@group(0) @binding(4) var<storage, read_write> att: array<%s>;\n", combine ? "atomic<u32>" : "f32");
    if (split) wgml_sbuf_put(&b, "@group(0) @binding(9) var<storage, read_write> ml: array<%s>;\n", combine ? "atomic<u32>" : "f32");
    if (combine)
        wgml_sbuf_put(&b, "@group(0) @binding(10) var<storage, read_write> aout: array<f32>;\n"
                          "@group(0) @binding(11) var<storage, read_write> cnt: array<atomic<u32>>;\n"
                          "var<workgroup> lastwg: u32;\nvar<workgroup> cm: array<f32, %u>;\nvar<workgroup> cl: array<f32, %u>;\n",
                      a->G * ns, a->G * ns);
    if (appends(a)) { /* this row's own heads first: QK-norm, RoPE, its k and v into the caches */
        if (a->rope) wgml_sbuf_put(&b, "@group(0) @binding(8) var<storage, read> freq: array<f32>;\n");
        wgml_sbuf_put(&b, "const HALF: u32 = %uu;\nconst HQ: u32 = %uu;\nconst HKV: u32 = %uu;\nconst EPS: f32 = %.9g;\n",
                      a->D / 2, a->hq, a->kvd / a->D, (double)a->eps);
        if (a->qk_norm) wgml_sbuf_put(&b, "@group(0) @binding(6) var<storage, read> vecs: array<f32>;\n");
        if (a->rope) rope_helpers(&b);
    }
    wgml_sbuf_put(&b, "@group(0) @binding(0) var<storage, read> rows: array<vec4<i32>>;\n"
                      "@group(0) @binding(1) var<storage, read> qb: array<f32>;\n"
                      "@group(0) @binding(2) var<storage, %s> kc: array<CT>;\n"
                      "@group(0) @binding(3) var<storage, %s> vc: array<CT>;\n"
                      "fn kcl(i: u32) -> VT { return cunpack(kc[i]); }\nfn vcl(i: u32) -> VT { return cunpack(vc[i]); }\n"
                      "var<workgroup> sc: array<f32, %u>;\nvar<workgroup> qs: array<VT, %u>;\n"
                      "var<workgroup> red: array<f32, WGS>;\nvar<workgroup> inv: array<f32, G>;\nvar<workgroup> part: array<VT, WGS>;\n",
                  appends(a) ? "read_write" : "read", appends(a) ? "read_write" : "read", a->G * (split ? a->chunk : a->block), a->G * a->D / lw);
    if (early)
        wgml_sbuf_put(&b, "const TPP: u32 = %uu;\nconst KPT: u32 = %uu;\nconst VP: u32 = %uu;\nconst VPT: u32 = %uu;\n"
                          "var<workgroup> kown: array<f32, D>;\nvar<workgroup> vown: array<f32, D>;\n"
                          "var<workgroup> sred: array<f32, %u>;\nvar<workgroup> vpart: array<VT, %u>;\n",
                      tpp, kpt, vpn, vpt, wgs * a->G, wgs * a->G);
    else if (pk && appends(a)) wgml_sbuf_put(&b, "var<workgroup> kown: array<f32, D>;\nvar<workgroup> vown: array<f32, D>;\n");
    if (sgx) { /* the softmax's exchange: each head's subgroup maxima, then sums */
        unsigned rw = 1;
        while (rw < a->chunk && rw < wgs) rw *= 2;
        wgml_sbuf_put(&b, "var<workgroup> smx: array<f32, %u>;\n", 2 * a->G * rw);
    }
    /* the prologue: the group's query heads into qs; where it appends (rope, append), each of
       the G query heads and the K/V head normed (qk_norm) and rotated at the row's position (rope),
       k and v written to the caches, which this workgroup then reads (storageBarrier); the early form reads them from
       kown and vown instead, so no launch reads them back and the fence goes (naga makes it a
       device-scope one: 14.5 -> 14.0 us alone on the H200, docs/MEASUREMENTS.md) */
    wgml_sbuf pb = {0};
    char rot[512];
    if (!appends(a)) wgml_sbuf_put(&pb, "    for (var i = tid; i < G * DV; i += WGS) { qs[i] = vload(r * QS + g * G * D + i * LW); }\n");
    else if ((a->G + 1) * 64 <= wgs) {
        /* the G + 1 heads at once, 64 threads each (D / 2 <= 64 pairs): all loads issued
           together, one segmented tree for the norms */
        wgml_sbuf_put(&pb, "    let pos = u32(rows[r].y);\n"
                           "    let hh = tid / 64u;\n    let j = tid %% 64u;\n    let act = hh <= G && j < HALF;\n"
                           "    let col = r * QS + select(HQ * D + g * D, (g * G + hh) * D, hh < G);\n"
                           "    let vcol = r * QS + (HQ + HKV) * D + g * D;\n"
                           "    var a = 0.0;\n    var b = 0.0;\n%s    var w1 = 1.0;\n    var w2 = 1.0;\n"
                           "    var va = 0.0;\n    var vb = 0.0;\n"
                           "    if (act) {\n        a = qb[col + j];\n        b = qb[col + j + HALF];\n%s",
                      a->rope ? "    var fr = 0.0;\n" : "", a->rope ? "        fr = freq[j];\n" : "");
        if (a->qk_norm)
            wgml_sbuf_put(&pb, "        let w = select(%uu, %uu, hh < G);\n        w1 = vecs[w + j];\n        w2 = vecs[w + j + HALF];\n",
                          a->knorm, a->qnorm);
        wgml_sbuf_put(&pb, "        if (hh == G) { va = qb[vcol + j]; vb = qb[vcol + j + HALF]; }\n    }\n");
        if (a->qk_norm && sgx) { /* a butterfly in each subgroup, then the head's 64 / sgs parts */
            wgml_sbuf_put(&pb, "    var nsq = a * a + b * b;\n");
            for (unsigned o = 1; o < 64; o *= 2) wgml_sbuf_put(&pb, "    nsq += select(0.0, subgroupShuffleXor(nsq, %uu), %uu < sgs);\n", o, o);
            wgml_sbuf_put(&pb, "    red[tid] = nsq;\n    workgroupBarrier();\n    nsq = 0.0;\n"
                               "    for (var q = 0u; q < 64u; q += min(sgs, 64u)) { nsq += red[hh * 64u + q]; }\n"
                               "    let rs = inverseSqrt(nsq / f32(D) + EPS);\n"
                               "    a = a * rs * w1;\n    b = b * rs * w2;\n");
        } else if (a->qk_norm)
            wgml_sbuf_put(&pb, "    red[tid] = a * a + b * b;\n    workgroupBarrier();\n"
                               "    for (var st = 32u; st > 0u; st >>= 1u) { if (j < st) { red[tid] += red[tid + st]; } workgroupBarrier(); }\n"
                               "    let rs = inverseSqrt(red[hh * 64u] / f32(D) + EPS);\n"
                               "    a = a * rs * w1;\n    b = b * rs * w2;\n");
        wgml_sbuf_put(&pb, "    if (act) {\n%s"
                           "        if (hh < G) { qput(hh * D + j, ya); qput(hh * D + j + HALF, yb); } else if (own) {\n"
                           "            let base = (slot * BLOCK + pos) * KVD + g * D;\n"
                           "            kput(base + j, ya);\n            kput(base + j + HALF, yb);\n"
                           "            vcput(base + j, va);\n            vcput(base + j + HALF, vb);\n%s"
                           "        }\n    }\n%s",
                      rotated(a, "        ", "fr", rot, sizeof rot),
                      early ? "            kown[j] = ya;\n            kown[j + HALF] = yb;\n            vown[j] = va;\n            vown[j + HALF] = vb;\n" : "",
                      early || pk ? "" : "    storageBarrier();\n");
    } else {
        wgml_sbuf_put(&pb, "    let pos = u32(rows[r].y);\n"
                           "    for (var hh = 0u; hh <= G; hh++) {\n"
                           "        let col = r * QS + select(HQ * D + g * D, (g * G + hh) * D, hh < G);\n"
                           "        var a = 0.0;\n        var b = 0.0;\n"
                           "        if (tid < HALF) { a = qb[col + tid]; b = qb[col + tid + HALF]; }\n");
        if (a->qk_norm)
            wgml_sbuf_put(&pb, "        red[tid] = a * a + b * b;\n        workgroupBarrier();\n"
                               "        for (var st = 32u; st > 0u; st >>= 1u) { if (tid < st) { red[tid] += red[tid + st]; } workgroupBarrier(); }\n"
                               "        let rs = inverseSqrt(red[0] / f32(D) + EPS);\n"
                               "        let w = select(%uu, %uu, hh < G);\n"
                               "        if (tid < HALF) { a = a * rs * vecs[w + tid]; b = b * rs * vecs[w + tid + HALF]; }\n"
                               "        workgroupBarrier();\n",
                          a->knorm, a->qnorm);
        wgml_sbuf_put(&pb, "        if (tid < HALF) {\n%s"
                           "            if (hh < G) { qput(hh * D + tid, ya); qput(hh * D + tid + HALF, yb); } else if (own) {\n"
                           "                let base = (slot * BLOCK + pos) * KVD + g * D;\n"
                           "                let vcol = r * QS + (HQ + HKV) * D + g * D;\n"
                           "                kput(base + tid, ya);\n                kput(base + tid + HALF, yb);\n"
                           "                vcput(base + tid, qb[vcol + tid]);\n                vcput(base + tid + HALF, qb[vcol + tid + HALF]);\n"
                           "            }\n        }\n    }\n%s",
                      rotated(a, "            ", "freq[tid]", rot, sizeof rot),
                      pk ? "" : "    storageBarrier();\n");
    }
    /* (packed halves: the row's own k and v, gathered in kown and vown, written four to a thread) */
    if (pk && appends(a))
        wgml_sbuf_put(&pb, "    workgroupBarrier();\n"
                           "    if (own && tid < D / 4u) {\n"
                           "        let cw = ((slot * BLOCK + pos) * KVD + g * D) / 4u + tid;\n"
                           "        kc[cw] = cpack(kown[4u * tid], kown[4u * tid + 1u], kown[4u * tid + 2u], kown[4u * tid + 3u]);\n"
                           "        vc[cw] = cpack(vown[4u * tid], vown[4u * tid + 1u], vown[4u * tid + 2u], vown[4u * tid + 3u]);\n"
                           "    }\n%s",
                      early ? "" : "    storageBarrier();\n");
    if (appends(a) && pk) /* (the cache's base is a multiple of D: i %% D is the element's index in the head) */
        wgml_sbuf_put(&b, "fn qput(i: u32, v: f32) { qs[i / 4u][i %% 4u] = v; }\nfn kput(i: u32, v: f32) { kown[i %% D] = v; }\n"
                          "fn vcput(i: u32, v: f32) { vown[i %% D] = v; }\n");
    else if (appends(a) && lw == 4)
        wgml_sbuf_put(&b, "fn qput(i: u32, v: f32) { qs[i / 4u][i %% 4u] = v; }\nfn kput(i: u32, v: f32) { kc[i / 4u][i %% 4u] = v; }\n"
                          "fn vcput(i: u32, v: f32) { vc[i / 4u][i %% 4u] = v; }\n");
    else if (appends(a)) wgml_sbuf_put(&b, "fn qput(i: u32, v: f32) { qs[i] = v; }\nfn kput(i: u32, v: f32) { kc[i] = CT(v); }\nfn vcput(i: u32, v: f32) { vc[i] = CT(v); }\n");
    char *pro = wgml_sbuf_take(&pb);
    /* the softmax of each query head over this workgroup's positions: a tree over the RW
       threads that hold positions (fewer rounds where the positions are few), the G heads in
       one tree where RW G fits the reduction array; then inv (or, split, the chunk's max and
       sum to ml) */
    unsigned scw = split ? a->chunk : a->block, rw = 1;
    while (rw < scw && rw < wgs) rw *= 2;
    const char *tail = split ? "            if (tid == 0u) {\n                inv[q] = 1.0;\n"
                               "                let at = (((r * NKV + g) * NS + sp) * G + q) * 2u;\n"
                               "                mlput(at, m);\n                mlput(at + 1u, total);\n            }\n"
                             : "            if (tid == 0u) { inv[q] = 1.0 / total; }\n";
    wgml_sbuf sb = {0};
    if (sgx) /* (sg) each subgroup's max and sum (the threads past RW hold -3e38 and 0), RW / sgs of them a head exchanged: a barrier each */
        wgml_sbuf_put(&sb, "    {\n        var mq: array<f32, G>;\n"
                           "        for (var q = 0u; q < G; q++) {\n            var m = -3.0e38;\n"
                           "            for (var t = t0 + tid; t < t1; t += WGS) { m = max(m, sc[q * SCW + t - t0]); }\n"
                           "            m = subgroupMax(m);\n"
                           "            if (tid %% sgs == 0u && tid < %uu) { smx[q * %uu + tid / sgs] = m; }\n        }\n        workgroupBarrier();\n"
                           "        for (var q = 0u; q < G; q++) {\n            var m = -3.0e38;\n"
                           "            for (var i = 0u; i * sgs < %uu; i++) { m = max(m, smx[q * %uu + i]); }\n            mq[q] = m;\n"
                           "            var sum = 0.0;\n"
                           "            for (var t = t0 + tid; t < t1; t += WGS) { let e = exp(sc[q * SCW + t - t0] - m); sc[q * SCW + t - t0] = e; sum += e; }\n"
                           "            sum = subgroupAdd(sum);\n"
                           "            if (tid %% sgs == 0u && tid < %uu) { smx[(G + q) * %uu + tid / sgs] = sum; }\n        }\n        workgroupBarrier();\n"
                           "        for (var q = 0u; q < G; q++) {\n            let m = mq[q];\n            var total = 0.0;\n"
                           "            for (var i = 0u; i * sgs < %uu; i++) { total += smx[(G + q) * %uu + i]; }\n%s"
                           "        }\n        workgroupBarrier();\n    }\n",
                      rw, rw, rw, rw, rw, rw, rw, rw, tail);
    else if (a->G * rw <= wgs)
        wgml_sbuf_put(&sb, "    {\n        var mq: array<f32, G>;\n"
                           "        for (var q = 0u; q < G; q++) {\n            var m = -3.0e38;\n"
                           "            for (var t = t0 + tid; t < t1; t += WGS) { m = max(m, sc[q * SCW + t - t0]); }\n"
                           "            if (tid < %uu) { red[q * %uu + tid] = m; }\n        }\n        workgroupBarrier();\n"
                           "        for (var st = %uu; st > 0u; st >>= 1u) {\n"
                           "            if (tid < st) { for (var q = 0u; q < G; q++) { red[q * %uu + tid] = max(red[q * %uu + tid], red[q * %uu + tid + st]); } }\n"
                           "            workgroupBarrier();\n        }\n"
                           "        for (var q = 0u; q < G; q++) { mq[q] = red[q * %uu]; }\n        workgroupBarrier();\n"
                           "        for (var q = 0u; q < G; q++) {\n            var sum = 0.0;\n"
                           "            for (var t = t0 + tid; t < t1; t += WGS) { let e = exp(sc[q * SCW + t - t0] - mq[q]); sc[q * SCW + t - t0] = e; sum += e; }\n"
                           "            if (tid < %uu) { red[q * %uu + tid] = sum; }\n        }\n        workgroupBarrier();\n"
                           "        for (var st = %uu; st > 0u; st >>= 1u) {\n"
                           "            if (tid < st) { for (var q = 0u; q < G; q++) { red[q * %uu + tid] += red[q * %uu + tid + st]; } }\n"
                           "            workgroupBarrier();\n        }\n"
                           "        for (var q = 0u; q < G; q++) {\n            let m = mq[q];\n            let total = red[q * %uu];\n%s"
                           "        }\n        workgroupBarrier();\n    }\n",
                      rw, rw, rw / 2, rw, rw, rw, rw, rw, rw, rw / 2, rw, rw, rw, tail);
    else
        wgml_sbuf_put(&sb, "    for (var q = 0u; q < G; q++) {\n"
                           "        var m = -3.0e38;\n"
                           "        for (var t = t0 + tid; t < t1; t += WGS) { m = max(m, sc[q * SCW + t - t0]); }\n"
                           "        red[tid] = m;\n        workgroupBarrier();\n"
                           "        for (var st = %uu; st > 0u; st >>= 1u) { if (tid < st) { red[tid] = max(red[tid], red[tid + st]); } workgroupBarrier(); }\n"
                           "        m = red[0];\n        workgroupBarrier();\n"
                           "        var sum = 0.0;\n"
                           "        for (var t = t0 + tid; t < t1; t += WGS) { let e = exp(sc[q * SCW + t - t0] - m); sc[q * SCW + t - t0] = e; sum += e; }\n"
                           "        red[tid] = sum;\n        workgroupBarrier();\n"
                           "        for (var st = %uu; st > 0u; st >>= 1u) { if (tid < st) { red[tid] += red[tid + st]; } workgroupBarrier(); }\n"
                           "        {\n            let total = red[0];\n%s        }\n"
                           "        workgroupBarrier();\n    }\n",
                      rw / 2, rw / 2, tail);
    char *soft = wgml_sbuf_take(&sb);
    if (!pro || !soft) {
        free(pro), free(soft), free(b.s);
        return NULL;
    }
    if (early)
        wgml_sbuf_put(&b,
                      "@compute @workgroup_size(WGS)\n"
                      "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32%s) {\n"
                      "    let r = wg.x;\n    let g = wg.y / NS;\n    let sp = wg.y %% NS;\n"
                      "    let slot = u32(rows[r].x);\n    let T = u32(rows[r].y) + 1u;\n"
                      "    let t0 = min(sp * CH, T);\n    let t1 = min(t0 + CH, T);\n    let own = t0 < T && T <= t1;\n"
                      "    if (t0 >= T) { return; }\n"
                      /* K: position ki of the chunk over TPP threads, each a slice of its vec4s; V:
                         value column vd over VP threads, each every VP-th position; all but the row's
                         own position (T - 1: the prologue writes it) loaded before the prologue */
                      "    let ki = tid / TPP;\n    let ks = tid %% TPP;\n    let kt = t0 + ki;\n"
                      "    var kr: array<VT, KPT>;\n"
                      "    if (ki < CH && kt + 1u < T) {\n"
                      "        let kbase = ((slot * BLOCK + kt) * KVD + g * D) / LW;\n"
                      "        for (var e = 0u; e < KPT; e++) { let d = ks + e * TPP; if (d < DV) { kr[e] = kcl(kbase + d); } }\n"
                      "    }\n"
                      "    let vd = tid %% DV;\n    let vp = tid / DV;\n"
                      "    let vbase = (slot * BLOCK * KVD + g * D) / LW + vd;\n"
                      "    var vr: array<VT, VPT>;\n"
                      "    for (var e = 0u; e < VPT; e++) {\n"
                      "        let t = t0 + vp + e * VP;\n"
                      "        if (vp < VP && t + 1u < T && t < t1) { vr[e] = vcl(vbase + t * (KVD / LW)); }\n    }\n"
                      "%s"
                      "    workgroupBarrier();\n"
                      "    if (own) {\n"
                      "        if (ki < CH && kt + 1u == T) {\n"
                      "            for (var e = 0u; e < KPT; e++) {\n"
                      "                let d = ks + e * TPP;\n"
                      "                if (d < DV) { kr[e] = vec4<f32>(kown[4u * d], kown[4u * d + 1u], kown[4u * d + 2u], kown[4u * d + 3u]); }\n"
                      "            }\n        }\n"
                      "        for (var e = 0u; e < VPT; e++) {\n"
                      "            if (vp < VP && t0 + vp + e * VP + 1u == T) {\n"
                      "                vr[e] = vec4<f32>(vown[4u * vd], vown[4u * vd + 1u], vown[4u * vd + 2u], vown[4u * vd + 3u]);\n"
                      "            }\n        }\n    }\n"
                      /* the scores: each thread's slice of its position's dot products, summed over the TPP threads */
                      "    {\n        var s: array<f32, G>;\n        for (var q = 0u; q < G; q++) { s[q] = 0.0; }\n"
                      "        for (var e = 0u; e < KPT; e++) {\n            let d = ks + e * TPP;\n"
                      "            if (d < DV) { for (var q = 0u; q < G; q++) { s[q] += dot(qs[q * DV + d], kr[e]); } }\n        }\n"
                      "        for (var q = 0u; q < G; q++) { sred[tid * G + q] = s[q]; }\n    }\n"
                      "    workgroupBarrier();\n"
                      "    for (var i = tid; i < CH * G; i += WGS) {\n"
                      "        let pi = i / G;\n        let q = i %% G;\n"
                      "        if (t0 + pi < t1) {\n"
                      "            var sum = 0.0;\n            for (var u = 0u; u < TPP; u++) { sum += sred[(pi * TPP + u) * G + q]; }\n"
                      "            sc[q * SCW + pi] = sum * SCALE;\n        }\n    }\n"
                      "    workgroupBarrier();\n"
                      "%s"
                      /* the weighted values: each V load serves the G heads; then the VP parts summed */
                      "    {\n        var acc: array<VT, G>;\n        for (var q = 0u; q < G; q++) { acc[q] = VT(0.0); }\n"
                      "        for (var e = 0u; e < VPT; e++) {\n"
                      "            let t = t0 + vp + e * VP;\n"
                      "            if (vp < VP && t < t1) { for (var q = 0u; q < G; q++) { acc[q] += sc[q * SCW + t - t0] * vr[e]; } }\n"
                      "        }\n"
                      "        for (var q = 0u; q < G; q++) { vpart[tid * G + q] = acc[q]; }\n    }\n"
                      "    workgroupBarrier();\n"
                      "    for (var o = tid; o < G * DV; o += WGS) {\n"
                      "        let q = o / DV;\n        let d = o %% DV;\n"
                      "        var sum = VT(0.0);\n        for (var u = 0u; u < VP; u++) { sum += vpart[(u * DV + d) * G + q]; }\n"
                      "        vput(((r * NKV + g) * NS + sp) * G * D + o * LW, sum * inv[q]);\n    }\n"
                      "    workgroupBarrier();\n",
                      sgx ? ", @builtin(subgroup_size) sgs: u32" : "", pro, soft);
    else
    wgml_sbuf_put(&b,
                  "@compute @workgroup_size(WGS)\n"
                  "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {\n"
                  "    let r = wg.x;\n    let g = wg.y / (NS * COLS);\n    let sp = (wg.y / COLS) %% NS;\n    let cb = wg.y %% COLS;\n"
                  "    let slot = u32(rows[r].x);\n"
                  "    let T = u32(rows[r].y) + 1u;\n"
                  /* this workgroup's positions t0 .. t1 (all of them unsplit); the one holding the row's
                     own position appends its k and v */
                  "    let t0 = min(sp * CH, T);\n    let t1 = min(t0 + CH, T);\n    let own = t0 < T && T <= t1;\n"
                  /* (split: the chunks past the row's position have nothing to do; the combine reads
                     only the others) */
                  "%s"
                  "%s"
                  "    workgroupBarrier();\n"
                  /* a thread per cached position: its score against each of the group's query heads */
                  "    for (var t = t0 + tid; t < t1; t += WGS) {\n"
                  "        let base = ((slot * BLOCK + t) * KVD + g * D) / LW;\n"
                  "        var s: array<f32, G>;\n        for (var q = 0u; q < G; q++) { s[q] = 0.0; }\n"
                  "        for (var d = 0u; d < DV; d++) {\n            let kv = kcl(base + d);\n"
                  "            for (var q = 0u; q < G; q++) { s[q] += vdot(qs[q * DV + d], kv); }\n        }\n"
                  "        for (var q = 0u; q < G; q++) { sc[q * SCW + t - t0] = s[q] * SCALE; }\n    }\n"
                  "    workgroupBarrier();\n"
                  "%s"
                  /* the weighted values: PARTS threads share an output, each over every PARTS-th position */
                  "    for (var o0 = 0u; o0 < NO; o0 += OPW) {\n"
                  "        let o = o0 + tid %% OPW;\n        let pt = tid / OPW;\n        var acc = VT(0.0);\n"
                  "        if (o < NO && pt < PARTS) {\n"
                  "            let q = o / DV;\n            let dv = o %% DV;\n"
                  /* four positions a round, their loads issued together (a loop of one load each waits
                     on every load in turn) */
                  "            let vb = (slot * BLOCK * KVD + g * D) / LW + dv;\n"
                  "            var t = t0 + pt;\n"
                  "            for (; t + 3u * PARTS < t1; t += 4u * PARTS) {\n"
                  "                let v0 = vcl(vb + t * (KVD / LW));\n                let v1 = vcl(vb + (t + PARTS) * (KVD / LW));\n"
                  "                let v2 = vcl(vb + (t + 2u * PARTS) * (KVD / LW));\n                let v3 = vcl(vb + (t + 3u * PARTS) * (KVD / LW));\n"
                  "                acc += sc[q * SCW + t - t0] * v0 + sc[q * SCW + t - t0 + PARTS] * v1 + sc[q * SCW + t - t0 + 2u * PARTS] * v2\n"
                  "                     + sc[q * SCW + t - t0 + 3u * PARTS] * v3;\n            }\n"
                  "            for (; t < t1; t += PARTS) { acc += sc[q * SCW + t - t0] * vcl(vb + t * (KVD / LW)); }\n"
                  "        }\n        part[tid] = acc;\n        workgroupBarrier();\n"
                  "        if (tid < OPW && o < NO) {\n"
                  "            var sum = VT(0.0);\n            for (var k = 0u; k < PARTS; k++) { sum += part[k * OPW + tid]; }\n"
                  "            let q = o / DV;\n"
                  "            vput(%s, sum * inv[q]);\n"
                  "        }\n        workgroupBarrier();\n    }\n",
                  split ? "    if (t0 >= T) { return; }\n" : "", pro, soft,
                  a->wo_fused ? "o * LW" : split ? "((r * NKV + g) * NS + sp) * G * D + o * LW" : "r * AS + g * G * D + o * LW");
    free(pro);
    free(soft);
    if (combine) {
        /* The last chunk workgroup of a (row, K/V head) to finish combines the chunks, so the
           combine needs no launch of its own. Why it sees every chunk's sums: naga (wgpu-native)
           emits storageBarrier() as OpControlBarrier(Workgroup, Device, AcquireRelease |
           UniformMemory), a device-scope fence, and atomics on storage as device-scope relaxed
           atomics. Each chunk's threads store their sums and (max, sum) as atomics (coherent at
           device scope whatever the buffer's decorations) and meet at a storageBarrier; thread 0,
           after a second one (its release fence, after every thread's stores by the first),
           adds 1 to the counter. The workgroup whose add returns n - 1 read the end of the
           counter's release sequence (read-modify-writes extend it) and passes a storageBarrier
           (its acquire fence) before it loads: by the Vulkan memory model's fence
           synchronization every chunk's stores happen before those loads. It resets the counter
           for the next launch, which a pipeline barrier orders after this one (the counter is a
           read_write binding of every split attention launch). Tint (Dawn) gives storageBarrier
           workgroup scope, as the WGSL spec does: there the plan keeps the combine's launch. */
        wgml_sbuf_put(&b, "    storageBarrier();\n    storageBarrier();\n"
                          "    let nch = (T + CH - 1u) / CH;\n    let p0 = (r * NKV + g) * NS;\n"
                          "    if (tid == 0u) {\n"
                          "        let done = atomicAdd(&cnt[r * NKV + g], 1u) + 1u;\n"
                          "        lastwg = select(0u, 1u, done == nch);\n"
                          "        if (done == nch) { atomicStore(&cnt[r * NKV + g], 0u); }\n"
                          "    }\n"
                          "    storageBarrier();\n"
                          "    if (workgroupUniformLoad(&lastwg) == 0u) { return; }\n");
        /* the chunks' sums of this thread's output loaded first, with the (max, sum) of each
           head's chunks: their loads in flight together (where an output a thread and the
           chunks fit registers), then each output weighs the chunks */
        const int pre = a->G * a->D <= wgs && ns <= 64;
        if (pre)
            wgml_sbuf_put(&b, "    var pv: array<f32, NS>;\n"
                              "    if (tid < G * D) {\n"
                              "        for (var s = 0u; s < NS; s++) { if (s < nch) { pv[s] = bitcast<f32>(atomicLoad(&att[(p0 + s) * G * D + tid])); } }\n"
                              "    }\n");
        wgml_sbuf_put(&b, "    for (var i = tid; i < G * NS; i += WGS) {\n"
                          "        let s = i / G;\n        let q = i %% G;\n"
                          "        var mv = -3.0e38;\n        var lv = 0.0;\n"
                          "        if (s < nch) { mv = bitcast<f32>(atomicLoad(&ml[(p0 * G + i) * 2u])); lv = bitcast<f32>(atomicLoad(&ml[(p0 * G + i) * 2u + 1u])); }\n"
                          "        cm[q * NS + s] = mv;\n        cl[q * NS + s] = lv;\n    }\n"
                          "    workgroupBarrier();\n"
                          "    for (var o = tid; o < G * D; o += WGS) {\n"
                          "        let q = o / D;\n        var m = -3.0e38;\n"
                          "        for (var s = 0u; s < NS; s++) { if (s < nch) { m = max(m, cm[q * NS + s]); } }\n"
                          "        var l = 0.0;\n        var acc = 0.0;\n"
                          "        for (var s = 0u; s < NS; s++) {\n"
                          "            if (s < nch) {\n"
                          "                let w = exp(cm[q * NS + s] - m);\n"
                          "                l += w * cl[q * NS + s];\n"
                          "                acc += w * %s;\n"
                          "            }\n        }\n"
                          "        aout[r * AS + g * G * D + o] = acc / l;\n    }\n",
                      pre ? "pv[s]" : "bitcast<f32>(atomicLoad(&att[(p0 + s) * G * D + o]))");
    }
    if (a->wo_fused) { /* this group's share of the projection: its G D inputs times their rows of wo */
        /* (columns cb CW .. (cb + 1) CW of it: with cols > 1 each column block's workgroup
           works out the group's attention again, and the projection is spread wider) */
        const unsigned cols = a->cols ? a->cols : 1, cw = (a->C + cols - 1) / cols;
        /* SPL threads a column where the workgroup has threads to spare, each over a slice of
           the inputs with 16 loads in flight, summed through workgroup memory */
        const unsigned gd = a->G * a->D, spl = wgs >= 2 * cw ? wgs / cw : 1, cpw = wgs / spl, ips = (gd + spl - 1) / spl;
        wgml_sbuf_put(&b, "    let cend = min((cb + 1u) * %uu, %uu);\n"
                          "    for (var c0 = cb * %uu; c0 < cend; c0 += %uu) {\n"
                          "        let c = c0 + tid %% %uu;\n        let sl = tid / %uu;\n        var acc = 0.0;\n"
                          "        if (sl < %uu && c < cend) {\n"
                          "            let i1 = min((sl + 1u) * %uu, G * D);\n"
                          "            for (var i0 = sl * %uu; i0 < i1; i0 += 16u) {\n"
                          "                var w: array<f32, 16>;\n"
                          "                for (var i = 0u; i < 16u; i++) { if (i0 + i < i1) { w[i] = wo_at((g * G * D + i0 + i) * %uu + c); } }\n"
                          "                for (var i = 0u; i < 16u; i++) { if (i0 + i < i1) { acc += ob[i0 + i] * w[i]; } }\n"
                          "            }\n        }\n",
                      cw, a->C, cw, cpw, cpw, cpw, spl, ips, ips, a->cp);
        if (spl > 1)
            wgml_sbuf_put(&b, "        red[tid] = acc;\n        workgroupBarrier();\n"
                              "        if (sl == 0u && c < cend) {\n"
                              "            for (var k = 1u; k < %uu; k++) { acc += red[k * %uu + tid]; }\n"
                              "        }\n        workgroupBarrier();\n",
                          spl, cpw);
        wgml_sbuf_put(&b, "        if (sl == 0u && c < cend) { partout[g * %uu + r * %uu + c] = acc + %s; }\n    }\n",
                      a->ps, a->C, a->bias >= 0 ? "select(0.0, vecs[BIAS + c], g == 0u)" : "0.0");
    }
    wgml_sbuf_put(&b, "}\n");
    return wgml_sbuf_take(&b);
}

char *wgml_decode_attn_combine_wgsl(const wgml_decode_attn *a)
{
    wgml_sbuf b = {0};
    const unsigned ns = (a->block + a->chunk - 1) / a->chunk;
    wgml_sbuf_put(&b, "const D: u32 = %uu;\nconst G: u32 = %uu;\nconst NKV: u32 = %uu;\nconst CH: u32 = %uu;\nconst NS: u32 = %uu;\n"
                      "const AS: u32 = %uu;\n",
                  a->D, a->G, a->kvd / a->D, a->chunk, ns, a->as);
    wgml_sbuf_put(&b, "@group(0) @binding(0) var<storage, read> rows: array<vec4<i32>>;\n"
                      "@group(0) @binding(4) var<storage, read> parts: array<f32>;\n"
                      "@group(0) @binding(9) var<storage, read> ml: array<f32>;\n"
                      "@group(0) @binding(10) var<storage, read_write> att: array<f32>;\n"
                      "@compute @workgroup_size(64)\n"
                      "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {\n"
                      "    let r = wg.x;\n    let h = wg.y;\n    let g = h / G;\n    let q = h %% G;\n"
                      "    let T = u32(rows[r].y) + 1u;\n    let n = (T + CH - 1u) / CH;\n"
                      "    let p0 = (r * NKV + g) * NS;\n"
                      /* every chunk's loads issued together (the loops have fixed bounds and unroll);
                         the chunks past the row's position are read but weigh nothing */
                      "    var mv: array<f32, NS>;\n    var lv: array<f32, NS>;\n"
                      "    for (var s = 0u; s < NS; s++) { let at = ((p0 + s) * G + q) * 2u; mv[s] = ml[at]; lv[s] = ml[at + 1u]; }\n"
                      "    var m = -3.0e38;\n"
                      "    for (var s = 0u; s < NS; s++) { if (s < n) { m = max(m, mv[s]); } }\n"
                      "    var l = 0.0;\n"
                      "    for (var s = 0u; s < NS; s++) { mv[s] = select(0.0, exp(mv[s] - m), s < n); l += select(0.0, mv[s] * lv[s], s < n); }\n"
                      "    for (var d = tid; d < D; d += 64u) {\n"
                      "        var acc = 0.0;\n"
                      "        for (var s = 0u; s < NS; s++) {\n"
                      "            acc += select(0.0, mv[s] * parts[((p0 + s) * G + q) * D + d], s < n);\n        }\n"
                      "        att[r * AS + h * D + d] = acc / l;\n    }\n}\n");
    return wgml_sbuf_take(&b);
}

char *wgml_decode_rope_wgsl(const wgml_decode_rope *k)
{
    wgml_sbuf b = {0};
    wgml_sbuf_put(&b, "%sconst D: u32 = %uu;\nconst HALF: u32 = %uu;\nconst H: u32 = %uu;\nconst HKV: u32 = %uu;\nconst QS: u32 = %uu;\n"
                      "const KVD: u32 = %uu;\nconst BLOCK: u32 = %uu;\nconst EPS: f32 = %.9g;\nalias CE = %s;\n",
                  k->f16c ? "enable f16;\n" : "", k->D, k->D / 2, k->H, k->Hkv, k->qs, k->Hkv * k->D, k->block, (double)k->eps,
                  k->f16c ? "f16" : "f32");
    wgml_sbuf_put(&b, "@group(0) @binding(0) var<storage, read> rows: array<vec4<i32>>;\n"
                      "@group(0) @binding(1) var<storage, read_write> qkv: array<f32>;\n"
                      "@group(0) @binding(2) var<storage, read> freq: array<f32>;\n"
                      "@group(0) @binding(3) var<storage, read_write> kc: array<CE>;\n"
                      "@group(0) @binding(4) var<storage, read_write> vc: array<CE>;\n");
    if (k->qk_norm) wgml_sbuf_put(&b, "@group(0) @binding(5) var<storage, read> vecs: array<f32>;\nvar<workgroup> red: array<f32, 64>;\n");
    rope_helpers(&b);
    wgml_sbuf_put(&b, "@compute @workgroup_size(64)\n"
                      "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) j: u32) {\n"
                      "    let r = wg.x;\n    let hh = wg.y;\n    let slot = u32(rows[r].x);\n    let pos = u32(rows[r].y);\n"
                      "    let col = r * QS + select(H * D + (hh - H) * D, hh * D, hh < H);\n"
                      "    var a = 0.0;\n    var b = 0.0;\n"
                      "    if (j < HALF) { a = qkv[col + j]; b = qkv[col + j + HALF]; }\n");
    if (k->qk_norm) /* RMSNorm over the head's D elements, then RoPE (Qwen3's order) */
        wgml_sbuf_put(&b, "    red[j] = a * a + b * b;\n    workgroupBarrier();\n"
                          "    for (var st = 32u; st > 0u; st >>= 1u) { if (j < st) { red[j] += red[j + st]; } workgroupBarrier(); }\n"
                          "    let rs = inverseSqrt(red[0] / f32(D) + EPS);\n"
                          "    let w = select(%uu, %uu, hh < H);\n"
                          "    if (j < HALF) { a = a * rs * vecs[w + j]; b = b * rs * vecs[w + j + HALF]; }\n",
                      k->knorm, k->qnorm);
    wgml_sbuf_put(&b, "    if (j >= HALF) { return; }\n"
                      "    let ang = reduce_angle(f32(pos) * freq[j]);\n    let c = cos(ang);\n    let s = sin(ang);\n"
                      "    let ya = a * c - b * s;\n    let yb = b * c + a * s;\n"
                      "    if (hh < H) { qkv[col + j] = ya; qkv[col + j + HALF] = yb; return; }\n"
                      "    let base = (slot * BLOCK + pos) * KVD + (hh - H) * D;\n"
                      "    kc[base + j] = CE(ya);\n    kc[base + j + HALF] = CE(yb);\n"
                      "    let vcol = r * QS + (H + HKV) * D + (hh - H) * D;\n"
                      "    vc[base + j] = CE(qkv[vcol + j]);\n    vc[base + j + HALF] = CE(qkv[vcol + j + HALF]);\n}\n");
    return wgml_sbuf_take(&b);
}
