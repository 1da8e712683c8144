// Each row of x scaled to unit length, y = x / max(||x||_2, eps) (torch.nn.functional.normalize
// along the last axis; ops/normalize.c). The shared part (header, units, team sums) is
// ops/row.wgsl.
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
        for (var i = 0u; i < K; i++) {
            let j = t + i * TEAM;
            if (j < nu) { cache[i] = x[xo + j]; }
        }
    }
    var a = V(0.0);
    for (var i = 0u; i < iters; i++) {
        let j = t + i * TEAM;
        if (j < nu) {
            let v = unit(&cache, i, j, xo);
            a += v * v;
        }
    }
    let inv = 1.0 / max(sqrt(wg_sum(vec2<f32>(hsum(a), 0.0), lid).x), P.eps);
    for (var i = 0u; i < iters; i++) {
        let j = t + i * TEAM;
        if (j < nu) { y[yo + j] = unit(&cache, i, j, xo) * inv; }
    }
}
