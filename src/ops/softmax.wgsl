// softmax and log-softmax of each row (ops/softmax.c; the shared part: ops/row.wgsl): the row
// max, the sum of exp(x - max), then the write pass. OP is OP_SOFTMAX or OP_LOG_SOFTMAX.
@group(0) @binding(1) var<storage, read> x: array<V>;
@group(0) @binding(2) var<storage, read_write> y: array<V>;

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
            }
            y[yo + j] = r;
        }
    }
    return;
}
