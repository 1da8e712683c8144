// softmax and log-softmax of each row (ops/softmax.c; the shared part: ops/row.wgsl): the row
// max, the sum of exp(x - max), then the write pass. OP is OP_SOFTMAX or OP_LOG_SOFTMAX.
@group(0) @binding(1) var<storage, read> x: array<V>;
@group(0) @binding(2) var<storage, read_write> y: array<V>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    if (past_rows(wg)) { return; }
    let tm = team_of(wg, lid);
    var cache: array<V, K>;
    load_row(&cache, tm);
    let st = max_sumexp(&cache, tm, lid, OP != OP_LOG_SOFTMAX);
    let mx = st.x;
    let sum = st.y;
    let inv = 1.0 / sum;
    let ls = log(sum);
    for (var i = 0u; i < tm.iters; i++) {
        let j = tm.t + i * TEAM;
        if (j < tm.nu) {
            var r: V;
            if (OP == OP_LOG_SOFTMAX) {
                r = (unit(&cache, i, j, tm.xo) - mx) - ls;
            } else {
                r = exp_unit(&cache, i, j, tm.xo, mx) * inv;
            }
            y[tm.yo + j] = r;
        }
    }
    return;
}
