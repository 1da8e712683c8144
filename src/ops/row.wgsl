// Ops along the last axis of a contiguous [rows, n] tensor: a team of TEAM threads per row, 256 / TEAM
// rows per workgroup (short rows share a workgroup, so millions of them need few workgroups).
// softmax, log-softmax: the row max, the sum of exp(x - max), then the write pass.
// layernorm: the mean, then the sum and the sum of squares of the deviations from it (no
//      cancellation when the mean is large); rmsnorm: the mean of squares.
// cross-entropy: y[row] = logsumexp(x[row]) - x[row, label], labels (class indices as
//      floats) in w; its gradient: y[row, j] = (softmax(x[row])[j] - (j == label)) * g[row],
//      with g in b.
// wgml_build_row (src/ops/reduce.c) prepends a header that specialises this module:
//   the op codes OP_<NAME> of the op table, and OP (this kernel's), FLAGS (1 weight, 2 bias);
//   V, U, VW, LANES: a row is read in units of V = vec4<f32> (VW = 4) when n and the offsets
//     are multiples of 4, else f32; U is V's u32 twin, LANES the element index of each lane;
//   WV: the unit of w and b (f32 for the losses, whose w and b hold one value per row);
//   TEAM: threads per row, a power of two up to 256;
//   flag_label(row): the losses record a label that is not a class index in the context's GPU
//     error flags (bit 1 of word 0; word 1 keeps the first such row), and that row's result is
//     NaN; a no-op for the other ops;
//   CACHED, K: when a row fits in K units per thread, each thread loads its units once into
//     registers and every pass works on them: x is read from memory once. Otherwise each
//     pass reads x again: softmax merges max and sum into one pass (two reads in all), the
//     norms read it two (rmsnorm) or three times.
// Code shared by both widths converts with V(...) and vec4<f32>(...), which are splats or
// identities, so the module type-checks for either.
struct Params {
    rows: u32, n: u32, _p0: u32, _p1: u32,  // the op and flags are the header's OP and FLAGS
    in_off: u32, w_off: u32, b_off: u32, gx: u32,
    eps: f32, neg_inf: f32, nan: f32, _p2: u32,  // WGSL constants cannot be infinite or NaN
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<V>;
@group(0) @binding(2) var<storage, read> w: array<WV>;  // weight, or labels (ops 4, 5)
@group(0) @binding(3) var<storage, read> b: array<WV>;  // bias, or row gradients (op 5)
@group(0) @binding(4) var<storage, read_write> y: array<V>;

const WG: u32 = 256u;
var<workgroup> red: array<vec2<f32>, 256>;  // the reductions' partials: two sums at once
var<workgroup> red16: array<vec2<f32>, 16>;
const ROWS: u32 = WG / TEAM;  // rows per workgroup

fn hsum(v: V) -> f32 {
    let q = vec4<f32>(v);
    return select(q.x, (q.x + q.y) + (q.z + q.w), VW == 4u);
}
fn hmax(v: V) -> f32 { let q = vec4<f32>(v); return max(max(q.x, q.y), max(q.z, q.w)); }
fn lane(v: V, k: u32) -> f32 { return vec4<f32>(v)[k]; }

// NaN as +inf, by its bits (Mesa/LLVM fold v != v to false, max() may drop a NaN): either
// makes the row's max +inf, and that row's outputs NaN
fn no_nan(v: V) -> V {
    return select(v, V(-P.neg_inf), (bitcast<U>(v) & U(0x7fffffffu)) > U(0x7f800000u));
}

// unit j = t + i * TEAM of the row at xo: from the cache, or from memory
fn unit(cache: ptr<function, array<V, K>>, i: u32, j: u32, xo: u32) -> V {
    if (CACHED) { return (*cache)[i]; }
    return x[xo + j];
}

// Team sums (of two values at once) and max, the result in every thread of the team.
// A whole workgroup: 256 -> 16 partials -> each thread combines the 16 itself, two barriers
// instead of a tree's eight; red16 is rewritten only after the next call's first barrier,
// which every thread reaches after reading it. Smaller teams: a tree within each team's part
// of red[], and a last barrier before the next call writes red[] again.
fn wg_sum(v: vec2<f32>, lid: u32) -> vec2<f32> {
    red[lid] = v;
    if (TEAM < WG) {
        workgroupBarrier();
        for (var s = TEAM / 2u; s > 0u; s >>= 1u) {
            if (lid % TEAM < s) { red[lid] += red[lid + s]; }
            workgroupBarrier();
        }
        let r = red[lid - lid % TEAM];
        workgroupBarrier();
        return r;
    }
    workgroupBarrier();
    if (lid < 16u) {
        var a = vec2<f32>(0.0);
        for (var k = 0u; k < 16u; k++) { a += red[lid + 16u * k]; }  // 16 lanes, distinct banks
        red16[lid] = a;
    }
    workgroupBarrier();
    var s = vec2<f32>(0.0);
    for (var k = 0u; k < 16u; k++) { s += red16[k]; }
    return s;
}

fn wg_max(v: f32, lid: u32) -> f32 {
    red[lid] = vec2<f32>(v, 0.0);
    if (TEAM < WG) {
        workgroupBarrier();
        for (var s = TEAM / 2u; s > 0u; s >>= 1u) {
            if (lid % TEAM < s) { red[lid].x = max(red[lid].x, red[lid + s].x); }
            workgroupBarrier();
        }
        let r = red[lid - lid % TEAM].x;
        workgroupBarrier();
        return r;
    }
    workgroupBarrier();
    if (lid < 16u) {
        var a = red[lid].x;
        for (var k = 1u; k < 16u; k++) { a = max(a, red[lid + 16u * k].x); }
        red16[lid] = vec2<f32>(a, 0.0);
    }
    workgroupBarrier();
    var s = red16[0].x;
    for (var k = 1u; k < 16u; k++) { s = max(s, red16[k].x); }
    return s;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let first = (wg.x + wg.y * P.gx) * ROWS;
    if (first >= P.rows) { return; }  // uniform for the workgroup
    // a team past the last row runs with an empty row (every thread reaches the barriers)
    // and writes nothing
    let row = first + lid / TEAM;
    let live = row < P.rows;
    let t = lid % TEAM;  // this thread's place in its team
    let nu = select(0u, P.n / VW, live);  // units per row
    let xo = P.in_off / VW + row * nu;
    let yo = row * nu;
    let iters = select((nu + TEAM - 1u) / TEAM, K, CACHED);  // a constant when CACHED: unrolled
    let grad = OP == OP_LAYERNORM_GRAD || OP == OP_RMSNORM_GRAD;
    let centred = OP == OP_LAYERNORM || OP == OP_LAYERNORM_GRAD;
    let softmax = OP != OP_LAYERNORM && OP != OP_RMSNORM && !grad;
    var cache: array<V, K>;  // this thread's units when CACHED: cache[i] is unit t + i * TEAM of its row
    if (CACHED) {
        // all loads first, independent of each other. Units past the row hold -inf, which
        // the softmax passes need not skip (max, exp(-inf - mx) = 0); the norms skip them.
        for (var i = 0u; i < K; i++) {
            let j = t + i * TEAM;
            if (j < nu) { cache[i] = x[xo + j]; } else { cache[i] = V(P.neg_inf); }
        }
    }
    if (softmax) {
        var mx: f32;
        var sum: f32;
        if (CACHED) {
            var mv = V(P.neg_inf);
            for (var i = 0u; i < K; i++) { mv = max(mv, no_nan(cache[i])); }
            mx = wg_max(hmax(mv), lid);
            // exp(-inf - mx) = 0 for the fill; keep exp(x - mx) for the write pass
            var sv = V(0.0);
            for (var i = 0u; i < K; i++) {
                let e = exp(cache[i] - mx);
                if (OP != OP_LOG_SOFTMAX) { cache[i] = e; }
                sv += e;
            }
            sum = wg_sum(vec2<f32>(hsum(sv), 0.0), lid).x;
        } else {
            // one pass: a running max and sum of exp(x - max) per thread, rescaled when the
            // max grows (one exp per unit for the rescale)
            var m = P.neg_inf;
            var s = 0.0;
            for (var j = t; j < nu; j += TEAM) {
                let v = no_nan(x[xo + j]);
                let mn = max(m, hmax(v));
                // all -inf so far: nothing to add (exp(-inf + inf) would be NaN)
                s = select(s * exp(m - mn) + hsum(exp(v - mn)), 0.0, mn == P.neg_inf);
                m = mn;
            }
            mx = wg_max(m, lid);
            sum = wg_sum(vec2<f32>(select(s * exp(m - mx), 0.0, m == P.neg_inf), 0.0), lid).x;
        }
        // +inf or NaN in the row: every output NaN. A row of -inf gives NaN too, through
        // exp(x - mx) = exp(-inf + inf).
        if (mx == -P.neg_inf) { mx = P.nan; sum = P.nan; }
        let inv = 1.0 / sum;
        let ls = log(sum);
        // ops 4, 5: a label must be a class index; w and b are f32 (WV), vec4<f32>(...).x
        // reads them in either width
        var label = 0u;
        var gr = 0.0;
        if ((OP == OP_CROSS_ENTROPY || OP == OP_CROSS_ENTROPY_GRAD) && live) {
            let lv = vec4<f32>(w[P.w_off + row]).x;
            let ok = !((bitcast<u32>(lv) & 0x7fffffffu) > 0x7f800000u) && lv >= 0.0 && lv < f32(P.n) && floor(lv) == lv;
            label = select(0u, u32(lv), ok);
            if (OP == OP_CROSS_ENTROPY_GRAD) { gr = select(P.nan, vec4<f32>(b[P.b_off + row]).x, ok); }
            if (!ok && t == 0u) { flag_label(row); }
            if (!ok) { mx = P.nan; }
        }
        if (OP == OP_CROSS_ENTROPY) {  // scalar units (VW = 1): one value per row
            if (t == 0u && live) {
                y[row] = V((mx - lane(x[xo + label / VW], label % VW)) + ls);
            }
            return;
        }
        for (var i = 0u; i < iters; i++) {
            let j = t + i * TEAM;
            if (j < nu) {
                var r: V;
                if (OP == OP_LOG_SOFTMAX) {
                    r = (unit(&cache, i, j, xo) - mx) - ls;
                } else {
                    var e: V;
                    if (CACHED) { e = cache[i]; } else { e = exp(x[xo + j] - mx); }
                    r = e * inv;
                    if (OP == OP_CROSS_ENTROPY_GRAD) {
                        r = (r - select(V(0.0), V(1.0), U(j * VW) + LANES == U(label))) * gr;
                    }
                }
                y[yo + j] = r;
            }
        }
        return;
    }
    // layernorm / rmsnorm: the mean (of squares)
    var a = V(0.0);
    for (var i = 0u; i < iters; i++) {
        let j = t + i * TEAM;
        if (j < nu) {
            let v = unit(&cache, i, j, xo);
            if (centred) { a += v; } else { a += v * v; }
        }
    }
    let s = wg_sum(vec2<f32>(hsum(a), 0.0), lid).x / f32(P.n);
    var mu = 0.0;  // layernorm: the mean is mu + c
    var c = 0.0;
    var ms = s;    // the mean of squares (of deviations, for layernorm)
    if (centred) {
        // deviations from mu, summed and squared (the corrected two-pass algorithm): s loses
        // precision to a large mean, c = mean(x - mu) restores it, and x - mu is exact for x
        // near mu, so the outputs (x - mu) - c keep their precision too
        mu = s;
        var d1 = V(0.0);
        var d2 = V(0.0);
        for (var i = 0u; i < iters; i++) {
            let j = t + i * TEAM;
            if (j < nu) {
                let d = unit(&cache, i, j, xo) - mu;
                d1 += d;
                d2 += d * d;
            }
        }
        let r = wg_sum(vec2<f32>(hsum(d1), hsum(d2)), lid) / f32(P.n);
        c = r.x;
        ms = r.y - c * c;
        ms = select(ms, 0.0, ms < 0.0);  // rounding; a NaN stays
    }
    let inv = inverseSqrt(ms + P.eps);
    let wo = P.w_off / VW;
    let bo = P.b_off / VW;
    if (grad) {
        // dx = inv (gh - xh mean(gh xh) - mean(gh) [layernorm]), gh = g w, xh the normalised x;
        // g is the row of b
        let go = bo + row * nu;
        var s1 = V(0.0);
        var s2 = V(0.0);
        for (var i = 0u; i < iters; i++) {
            let j = t + i * TEAM;
            if (j < nu) {
                var gh = b[go + j];
                if ((FLAGS & 1u) != 0u) { gh = gh * w[wo + j]; }
                s1 += gh;
                s2 += gh * (((unit(&cache, i, j, xo) - mu) - c) * inv);
            }
        }
        let m = wg_sum(vec2<f32>(hsum(s1), hsum(s2)), lid) / f32(P.n);
        let m1 = select(0.0, m.x, centred);
        for (var i = 0u; i < iters; i++) {
            let j = t + i * TEAM;
            if (j < nu) {
                var gh = b[go + j];
                if ((FLAGS & 1u) != 0u) { gh = gh * w[wo + j]; }
                let xh = ((unit(&cache, i, j, xo) - mu) - c) * inv;
                y[yo + j] = inv * ((gh - xh * m.y) - m1);
            }
        }
        return;
    }
    for (var i = 0u; i < iters; i++) {
        let j = t + i * TEAM;
        if (j < nu) {
            var r = ((unit(&cache, i, j, xo) - mu) - c) * inv;
            if ((FLAGS & 1u) != 0u) { r = r * w[wo + j]; }
            if ((FLAGS & 2u) != 0u) { r = r + b[bo + j]; }
            y[yo + j] = r;
        }
    }
}
