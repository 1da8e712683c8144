// Column sums: x seen as [outer, len, inner] summed over its middle axis, for a long axis of
// wide rows (a bias's gradient sums [rows, N] over its rows; split K's partial products sum
// over their chunks). A thread takes W neighbouring columns; a workgroup of 32 column groups x
// 8 lanes covers 32 W columns of a chunk of rows; lane l folds rows l, l + 8, ... of the chunk
// (a warp reads 32 W contiguous elements a row), then the 8 lanes are folded in workgroup
// memory. With parts > 1 each chunk's sums are partials [outer, parts, inner] and a second
// launch of this kernel folds them (parts 1, chunk the first launch's parts).
// The header (ops/reduce.c) defines W (4, or 1 where inner or x's start is no multiple of 4),
// V (vec4<f32> or f32), x's binding and load(i) -> V, x's i-th group of W elements as f32
// (f32 stored, or halves widened).
struct Params {
    outer: u32, len: u32, inner: u32, chunk: u32,
    parts: u32, in_off: u32, gx: u32, _p: u32,  // in_off: x's start in groups of W elements
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(2) var<storage, read_write> y: array<V>;

const COLS = 32u;
const LANES = 8u;
var<workgroup> acc: array<V, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let cols = P.inner / W;
    let col_groups = (cols + COLS - 1u) / COLS;
    let w = wg.x + wg.y * P.gx;
    if (w >= P.outer * P.parts * col_groups) { return; }  // uniform: the same for the whole workgroup
    let part = (w / col_groups) % P.parts;
    let o = w / (col_groups * P.parts);
    let c = (w % col_groups) * COLS + lid % COLS;
    let lane = lid / COLS;
    let r0 = part * P.chunk;
    let r1 = min(P.len, r0 + P.chunk);
    var s = V(0.0);
    if (c < cols) {
        let base = P.in_off + o * P.len * cols + c;
        for (var r = r0 + lane; r < r1; r += LANES) { s += load(base + r * cols); }
    }
    acc[lid] = s;
    workgroupBarrier();
    if (lane == 0u && c < cols) {
        var t = acc[lid];
        for (var l = 1u; l < LANES; l++) { t += acc[lid + l * COLS]; }
        y[(o * P.parts + part) * cols + c] = t;
    }
}
