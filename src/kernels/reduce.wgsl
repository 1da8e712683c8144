// Reduction along one axis of a contiguous tensor seen as [outer, len, inner] -> [outer, inner].
// One workgroup per output element: each thread folds a strided part of the axis, then a
// tree in workgroup memory combines the 256 partial results.
// op: 0 sum, 1 mean, 2 max (NaN wins), 3 argmax (first index of the max; a NaN counts as max)
struct Params {
    outer: u32, len: u32, inner: u32, op: u32,
    in_off: u32, gx: u32, neg_inf: f32, _pad: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;
var<workgroup> sv: array<f32, 256>;
var<workgroup> si: array<u32, 256>;

// by its bits: Mesa/LLVM fold v != v to false
fn is_nan(v: f32) -> bool { return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u; }

// true when (v, j) should replace (a, i) as the max: NaN first, then larger, then earlier index
fn better(v: f32, j: u32, a: f32, i: u32) -> bool {
    if (is_nan(a)) { return is_nan(v) && j < i; }
    if (is_nan(v)) { return true; }
    return v > a || (v == a && j < i);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let o = wg.x + wg.y * P.gx;
    if (o >= P.outer * P.inner) { return; }  // uniform: the same for the whole workgroup
    let base = P.in_off + (o / P.inner) * P.len * P.inner + o % P.inner;
    var acc = select(0.0, P.neg_inf, P.op >= 2u);
    var idx = 0xffffffffu;
    for (var j = lid; j < P.len; j += WG) {
        let v = x[base + j * P.inner];
        if (P.op < 2u) {
            acc += v;
        } else if (better(v, j, acc, idx)) {
            acc = v;
            idx = j;
        }
    }
    sv[lid] = acc;
    si[lid] = idx;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            if (P.op < 2u) {
                sv[lid] += sv[lid + s];
            } else if (better(sv[lid + s], si[lid + s], sv[lid], si[lid])) {
                sv[lid] = sv[lid + s];
                si[lid] = si[lid + s];
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        var r = sv[0];
        if (P.op == 1u) { r = r / f32(P.len); }
        if (P.op == 3u) { r = f32(si[0]); }
        y[o] = r;
    }
}
