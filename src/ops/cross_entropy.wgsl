// cross-entropy of each row (ops/cross_entropy.c; the shared part: ops/row.wgsl):
// y[row] = logsumexp(x[row]) - x[row, label], labels (class indices as floats) in w; its
// gradient (OP_CROSS_ENTROPY_GRAD): y[row, j] = (softmax(x[row])[j] - (j == label)) * g[row],
// with g in b. w and b hold one value per row (WV = f32); cross-entropy's y one per row (VW = 1).
@group(0) @binding(1) var<storage, read> x: array<V>;
@group(0) @binding(2) var<storage, read> w: array<WV>;  // labels
@group(0) @binding(3) var<storage, read> b: array<WV>;  // the gradient's upstream g per row
@group(0) @binding(4) var<storage, read_write> y: array<V>;

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
    var cache: array<V, K>;  // this thread's units when CACHED: cache[i] is unit t + i * TEAM of its row
    if (CACHED) {
        // all loads first, independent of each other. Units past the row hold -inf, which
        // the passes need not skip (max, exp(-inf - mx) = 0).
        for (var i = 0u; i < K; i++) {
            let j = t + i * TEAM;
            if (j < nu) { cache[i] = x[xo + j]; } else { cache[i] = V(P.neg_inf); }
        }
    }
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
            cache[i] = e;
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
    // a label must be a class index; w and b are f32 (WV), vec4<f32>(...).x
    // reads them in either width
    var label = 0u;
    var gr = 0.0;
    if (live) {
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
            var e: V;
            if (CACHED) { e = cache[i]; } else { e = exp(x[xo + j] - mx); }
            r = e * inv;
            if (OP == OP_CROSS_ENTROPY_GRAD) {
                r = (r - select(V(0.0), V(1.0), U(j * VW) + LANES == U(label))) * gr;
            }
            y[yo + j] = r;
        }
    }
    return;
}
