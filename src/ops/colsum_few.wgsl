// Column sums over a short axis: x seen as [outer, len, inner] summed over its middle axis of a
// few rows (split K's partial products, [S, M, N] with S <= 16). A thread takes W neighbouring
// columns and folds all len rows itself, four loads issued before their adds (the sum's order
// stays row 0, 1, 2, ...): no workgroup memory, and a warp's loads of a row are contiguous (16
// bytes a thread where W is 4: 8 from halves). colsum.wgsl's eight lanes a column group likely
// left half its threads idle at S = 4 (its A/B on an H200, GPT-2 small: docs/MEASUREMENTS.md).
// The header (ops/reduce.c) defines W, V, x's binding and load(i) as for colsum.wgsl.
struct Params {
    outer: u32, len: u32, inner: u32, chunk: u32,
    parts: u32, in_off: u32, gx: u32, _p: u32,  // chunk, parts: unused (colsum.wgsl's block)
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(2) var<storage, read_write> y: array<V>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let cols = P.inner / W;
    let t = (wg.x + wg.y * P.gx) * 256u + lid;
    if (t >= P.outer * cols) { return; }
    let o = t / cols;
    let c = t % cols;
    let base = P.in_off + o * P.len * cols + c;
    var s = V(0.0);
    var r = 0u;
    for (; r + 4u <= P.len; r += 4u) {
        let a0 = load(base + r * cols);
        let a1 = load(base + (r + 1u) * cols);
        let a2 = load(base + (r + 2u) * cols);
        let a3 = load(base + (r + 3u) * cols);
        s += a0;
        s += a1;
        s += a2;
        s += a3;
    }
    for (; r < P.len; r++) { s += load(base + r * cols); }
    y[o * cols + c] = s;
}
