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
    if (past_rows(wg)) { return; }
    let tm = team_of(wg, lid);
    var cache: array<V, K>;
    load_row(&cache, tm);
    let st = max_sumexp(&cache, tm, lid, true);
    var mx = st.x;
    let sum = st.y;
    let inv = 1.0 / sum;
    let ls = log(sum);
    // a label must be a class index; w and b are f32 (WV), vec4<f32>(...).x
    // reads them in either width
    var label = 0u;
    var gr = 0.0;
    if (tm.live) {
        let lv = vec4<f32>(w[P.w_off + tm.row]).x;
        let ok = !((bitcast<u32>(lv) & 0x7fffffffu) > 0x7f800000u) && lv >= 0.0 && lv < f32(P.n) && floor(lv) == lv;
        label = select(0u, u32(lv), ok);
        if (OP == OP_CROSS_ENTROPY_GRAD) { gr = select(P.nan, vec4<f32>(b[P.b_off + tm.row]).x, ok); }
        if (!ok && tm.t == 0u) { flag_label(tm.row); }
        if (!ok) { mx = P.nan; }
    }
    if (OP == OP_CROSS_ENTROPY) {  // scalar units (VW = 1): one value per row
        if (tm.t == 0u && tm.live) {
            y[tm.row] = V((mx - lane(x[tm.xo + label / VW], label % VW)) + ls);
        }
        return;
    }
    for (var i = 0u; i < tm.iters; i++) {
        let j = tm.t + i * TEAM;
        if (j < tm.nu) {
            var r = exp_unit(&cache, i, j, tm.xo, mx) * inv;
            if (OP == OP_CROSS_ENTROPY_GRAD) {
                r = (r - select(V(0.0), V(1.0), U(j * VW) + LANES == U(label))) * gr;
            }
            y[tm.yo + j] = r;
        }
    }
    return;
}
