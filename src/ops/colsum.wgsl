// Column sums: x seen as [outer, len, inner] summed over its middle axis, four columns a
// thread (inner a multiple of 4), for a long axis of wide rows: a bias's gradient sums
// [rows, N] over its rows, split K's partial products sum over their chunks. A workgroup of
// 32 column groups x 8 lanes covers 128 columns of a chunk of rows; lane l folds rows l, l + 8,
// ... of the chunk (a warp reads 512 contiguous bytes a row), then the 8 lanes are folded in
// workgroup memory. With parts > 1 each chunk's sums are partials [outer, parts, inner] and a
// second launch of this kernel folds them (parts 1, chunk the first launch's parts).
// The header defines X, the element x is bound as, and load4(X) -> vec4<f32>: four f32, or
// four halves (two words) widened.
struct Params {
    outer: u32, len: u32, inner: u32, chunk: u32,
    parts: u32, in_off4: u32, gx: u32, _p: u32,  // in_off4: x's start in fours of elements
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<X>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f32>>;

const COLS = 32u;
const LANES = 8u;
var<workgroup> acc: array<vec4<f32>, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let cols4 = P.inner / 4u;
    let col_groups = (cols4 + COLS - 1u) / COLS;
    let w = wg.x + wg.y * P.gx;
    if (w >= P.outer * P.parts * col_groups) { return; }  // uniform: the same for the whole workgroup
    let part = (w / col_groups) % P.parts;
    let o = w / (col_groups * P.parts);
    let c4 = (w % col_groups) * COLS + lid % COLS;
    let lane = lid / COLS;
    let r0 = part * P.chunk;
    let r1 = min(P.len, r0 + P.chunk);
    var s = vec4<f32>(0.0);
    if (c4 < cols4) {
        let base = P.in_off4 + o * P.len * cols4 + c4;
        for (var r = r0 + lane; r < r1; r += LANES) { s += load4(x[base + r * cols4]); }
    }
    acc[lid] = s;
    workgroupBarrier();
    if (lane == 0u && c4 < cols4) {
        var t = acc[lid];
        for (var l = 1u; l < LANES; l++) { t += acc[lid + l * COLS]; }
        y[(o * P.parts + part) * cols4 + c4] = t;
    }
}
