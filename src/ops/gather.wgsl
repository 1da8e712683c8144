// index_select (and embedding, which is index_select along axis 0): y = a with its axis
// `axis` replaced by the entries that idx picks, y[.., j, ..] = a[.., idx[j], ..].
// y is contiguous, its shape padded at the front to 4-D [d0, d1, d2, d3], d3 counted in units
// of VW elements; a is read through its own strides (elements), so a view needs no copy.
// One thread per unit of y. Data moves as bits (u32), so any dtype gathers the same way.
// An index outside [0, len) reads nothing: its units of y are 0 and the GPU error flags
// record its position (the next read reports it).
// The includer (ops/gather.c) defines
//   alias W (u32, or vec4<u32> when a's last axis is contiguous and every offset and stride
//   is a multiple of 4) and const VW (1 or 4).
struct Params {
    d0: u32, d1: u32, d2: u32, d3: u32,  // y's shape; d3 in units
    s0: u32, s1: u32, s2: u32, s3: u32,  // a's strides, elements
    axis: u32, len: u32, a_off: u32, idx_off: u32,
    units: u32, gx: u32, _p0: u32, _p1: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> a: array<W>;
@group(0) @binding(2) var<storage, read> idx: array<i32>;
@group(0) @binding(3) var<storage, read_write> y: array<W>;
@group(0) @binding(4) var<storage, read_write> gpu_errors: array<atomic<u32>, 4>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let e = gid.x + gid.y * P.gx * 256u;
    if (e >= P.units) { return; }
    // y's coordinates of unit e (an embedding's are [1, 1, n, C]: skip two divisions)
    var c = vec4<u32>(0u, 0u, 0u, (e % P.d3) * VW);
    var r = e / P.d3;
    if (P.d0 * P.d1 == 1u) {
        c[2] = r;
    } else {
        c[2] = r % P.d2;
        r = r / P.d2;
        c[1] = r % P.d1;
        c[0] = r / P.d1;
    }
    let j = c[P.axis];  // VW is 1 when the axis is the last one
    let v = idx[P.idx_off + j];
    if (v < 0 || u32(v) >= P.len) {
        y[e] = W(0u);
        atomicOr(&gpu_errors[0], 2u);  // WGML_GPU_ERROR_INDEX
        atomicMax(&gpu_errors[1], 0xffffffffu - j);
        return;
    }
    c[P.axis] = u32(v);
    y[e] = a[(P.a_off + c[0] * P.s0 + c[1] * P.s1 + c[2] * P.s2 + c[3] * P.s3) / VW];
}
