// Ops along the last axis of a contiguous [rows, n] tensor, one workgroup of 256 threads per row.
// op 0 softmax, 1 log-softmax: the row max, the sum of exp(x - max), then the write pass.
// op 2 layernorm: the mean, then the sum and the sum of squares of the deviations from it (no
//      cancellation when the mean is large); op 3 rmsnorm: the mean of squares.
// op 4 cross-entropy: y[row] = logsumexp(x[row]) - x[row, label], labels (class indices as
//      floats) in w; op 5 its gradient: y[row, j] = (softmax(x[row])[j] - (j == label)) * g[row],
//      with g in b.
// wgml_build_row (src/graph/kernels.c) prepends a header that specialises this module:
//   OP, FLAGS (1 weight, 2 bias);
//   V, U, VW, LANES: a row is read in units of V = vec4<f32> (VW = 4) when n and the offsets
//     are multiples of 4, else f32; U is V's u32 twin, LANES the element index of each lane;
//   WV: the unit of w and b (f32 for ops 4 and 5, whose w and b hold one value per row);
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

// unit j = lid + i * WG of the row at xo: from the cache, or from memory
fn unit(cache: ptr<function, array<V, K>>, i: u32, j: u32, xo: u32) -> V {
    if (CACHED) { return (*cache)[i]; }
    return x[xo + j];
}

// Workgroup sums (of two values at once) and max, the result in every thread: 256 -> 16
// partials -> each thread combines the 16 itself. Two barriers instead of a tree's eight.
// red16 is rewritten only after the next call's first barrier, which every thread reaches
// after reading it.
fn wg_sum(v: vec2<f32>, lid: u32) -> vec2<f32> {
    red[lid] = v;
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
    let row = wg.x + wg.y * P.gx;
    if (row >= P.rows) { return; }  // uniform for the workgroup
    let nu = P.n / VW;  // units per row
    let xo = P.in_off / VW + row * nu;
    let yo = row * nu;
    let iters = select((nu + WG - 1u) / WG, K, CACHED);  // a constant when CACHED: unrolled
    let softmax = OP <= 1u || OP >= 4u;
    var cache: array<V, K>;  // this thread's units when CACHED: cache[i] is unit lid + i * WG
    if (CACHED) {
        // all loads first, independent of each other. Units past the row hold -inf, which
        // the softmax passes need not skip (max, exp(-inf - mx) = 0); the norms skip them.
        for (var i = 0u; i < K; i++) {
            let j = lid + i * WG;
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
                if (OP != 1u) { cache[i] = e; }
                sv += e;
            }
            sum = wg_sum(vec2<f32>(hsum(sv), 0.0), lid).x;
        } else {
            // one pass: a running max and sum of exp(x - max) per thread, rescaled when the
            // max grows (one exp per unit for the rescale)
            var m = P.neg_inf;
            var s = 0.0;
            for (var j = lid; j < nu; j += WG) {
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
        if (OP == 4u) {  // scalar units (VW = 1): one value per row
            if (lid == 0u) {
                let l = min(u32(vec4<f32>(w[P.w_off + row]).x), P.n - 1u);
                y[row] = V((mx - lane(x[xo + l / VW], l % VW)) + ls);
            }
            return;
        }
        // op 5: w and b are f32 (WV); vec4<f32>(...).x reads them in either width
        var label = 0u;
        var gr = 0.0;
        if (OP == 5u) {
            label = u32(vec4<f32>(w[P.w_off + row]).x);
            gr = vec4<f32>(b[P.b_off + row]).x;
        }
        for (var i = 0u; i < iters; i++) {
            let j = lid + i * WG;
            if (j < nu) {
                var r: V;
                if (OP == 1u) {
                    r = (unit(&cache, i, j, xo) - mx) - ls;
                } else {
                    var e: V;
                    if (CACHED) { e = cache[i]; } else { e = exp(x[xo + j] - mx); }
                    r = e * inv;
                    if (OP == 5u) {
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
        let j = lid + i * WG;
        if (j < nu) {
            let v = unit(&cache, i, j, xo);
            if (OP == 2u) { a += v; } else { a += v * v; }
        }
    }
    let s = wg_sum(vec2<f32>(hsum(a), 0.0), lid).x / f32(P.n);
    var mu = 0.0;  // layernorm: the mean is mu + c
    var c = 0.0;
    var ms = s;    // the mean of squares (of deviations, for layernorm)
    if (OP == 2u) {
        // deviations from mu, summed and squared (the corrected two-pass algorithm): s loses
        // precision to a large mean, c = mean(x - mu) restores it, and x - mu is exact for x
        // near mu, so the outputs (x - mu) - c keep their precision too
        mu = s;
        var d1 = V(0.0);
        var d2 = V(0.0);
        for (var i = 0u; i < iters; i++) {
            let j = lid + i * WG;
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
    for (var i = 0u; i < iters; i++) {
        let j = lid + i * WG;
        if (j < nu) {
            var r = ((unit(&cache, i, j, xo) - mu) - c) * inv;
            if ((FLAGS & 1u) != 0u) { r = r * w[wo + j]; }
            if ((FLAGS & 2u) != 0u) { r = r + b[bo + j]; }
            y[yo + j] = r;
        }
    }
}
