// layernorm and rmsnorm of each row, and their input gradients (ops/norm.c; the shared part:
// ops/row.wgsl). layernorm: the mean, then the sum and the sum of squares of the deviations
// from it (no cancellation when the mean is large); rmsnorm: the mean of squares. Without a
// weight (FLAGS & 1) or bias (FLAGS & 2), x is bound in its place, unread. The gradients
// (OP_LAYERNORM_GRAD, OP_RMSNORM_GRAD) take the upstream gradient [rows, n] in b; with FLAGS & 4
// they also write g xh (the weight's gradient before its sum over rows) after dx, and add an
// addend to dx where the node has one (add_r: another gradient of x, the residual stream's). Rows that do
// not fit the registers are read two (rmsnorm) or three times.
@group(0) @binding(1) var<storage, read> x: array<V>;
@group(0) @binding(2) var<storage, read> w: array<WV>;  // weight
@group(0) @binding(3) var<storage, read> b: array<WV>;  // bias, or the upstream gradient (the _grad ops)
@group(0) @binding(4) var<storage, read_write> y: array<Y>;  // f32, or halves (a norm cast to f16)

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    if (past_rows(wg)) { return; }
    let tm = team_of(wg, lid);
    let grad = OP == OP_LAYERNORM_GRAD || OP == OP_RMSNORM_GRAD;
    let centred = OP == OP_LAYERNORM || OP == OP_LAYERNORM_GRAD;
    var cache: array<V, K>;
    load_row(&cache, tm);
    // the mean (of squares)
    var a = V(0.0);
    for (var i = 0u; i < tm.iters; i++) {
        let j = tm.t + i * TEAM;
        if (j < tm.nu) {
            let v = unit(&cache, i, j, tm.xo);
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
        for (var i = 0u; i < tm.iters; i++) {
            let j = tm.t + i * TEAM;
            if (j < tm.nu) {
                let d = unit(&cache, i, j, tm.xo) - mu;
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
        let go = bo + tm.row * tm.nu;
        var s1 = V(0.0);
        var s2 = V(0.0);
        for (var i = 0u; i < tm.iters; i++) {
            let j = tm.t + i * TEAM;
            if (j < tm.nu) {
                var gh = b[go + j];
                if ((FLAGS & 1u) != 0u) { gh = gh * w[wo + j]; }
                s1 += gh;
                s2 += gh * (((unit(&cache, i, j, tm.xo) - mu) - c) * inv);
            }
        }
        let m = wg_sum(vec2<f32>(hsum(s1), hsum(s2)), lid) / f32(P.n);
        let m1 = select(0.0, m.x, centred);
        for (var i = 0u; i < tm.iters; i++) {
            let j = tm.t + i * TEAM;
            if (j < tm.nu) {
                var gh = b[go + j];
                if ((FLAGS & 1u) != 0u) { gh = gh * w[wo + j]; }
                let xh = ((unit(&cache, i, j, tm.xo) - mu) - c) * inv;
                y[tm.yo + j] = Y(add_r(tm.yo + j, inv * ((gh - xh * m.y) - m1)));
                // the weight's gradient's rows, g xh, after dx (the node's tail)
                if ((FLAGS & 4u) != 0u) { y[P.rows * tm.nu + tm.yo + j] = Y(b[go + j] * xh); }
            }
        }
        return;
    }
    for (var i = 0u; i < tm.iters; i++) {
        let j = tm.t + i * TEAM;
        if (j < tm.nu) {
            var r = ((unit(&cache, i, j, tm.xo) - mu) - c) * inv;
            if ((FLAGS & 1u) != 0u) { r = r * w[wo + j]; }
            if ((FLAGS & 2u) != 0u) { r = r + b[bo + j]; }
            y[tm.yo + j] = Y(r);  // as halves: the adapter's conversion (to nearest)
        }
    }
}
