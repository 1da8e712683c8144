// Each row of x scaled to unit length, y = x / max(||x||_2, eps) (torch.nn.functional.normalize
// along the last axis; ops/normalize.c). The shared part (header, units, team sums) is
// ops/row.wgsl.
@group(0) @binding(1) var<storage, read> x: array<V>;
@group(0) @binding(2) var<storage, read_write> y: array<V>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    if (past_rows(wg)) { return; }
    let tm = team_of(wg, lid);
    var cache: array<V, K>;
    load_row(&cache, tm);
    var a = V(0.0);
    for (var i = 0u; i < tm.iters; i++) {
        let j = tm.t + i * TEAM;
        if (j < tm.nu) {
            let v = unit(&cache, i, j, tm.xo);
            a += v * v;
        }
    }
    let inv = 1.0 / max(sqrt(wg_sum(vec2<f32>(hsum(a), 0.0), lid).x), P.eps);
    for (var i = 0u; i < tm.iters; i++) {
        let j = tm.t + i * TEAM;
        if (j < tm.nu) { y[tm.yo + j] = unit(&cache, i, j, tm.xo) * inv; }
    }
}
