// One input of a concatenation copied into its place in the output: a launch per input
// (ops/join.c). Thread i takes input element i in row-major order of the input's 4-D shape,
// reads it through the input's strides and writes it contiguously into the output, shifted by
// the input's start along the axis. Bits are copied as u32, so any 4-byte dtype passes
// unchanged; a concatenation cast to f16 (ops/elementwise.c's wgml_cast) stores halves.
// The header's PER: elements a thread copies, 4 where the input's rows are contiguous and a
// multiple of 4 long (the index arithmetic, not the bytes, likely bounds the one-element form:
// 54 us for a [64,256,6,64] window of the GPT's d(qkv) on the H200, 33 us for a plain copy);
// Y and out(): the output's element and how an input word becomes one.
struct Params {
    numel: u32, gx: u32, axis: u32, start: u32,  // start: where this input begins along axis
    in_shape: vec4<u32>,
    in_strides: vec4<u32>,
    out_shape: vec4<u32>,
    in_off: u32, _p0: u32, _p1: u32, _p2: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<Y>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = ((wg.x + wg.y * P.gx) * 256u + lid) * PER;
    if (i >= P.numel) { return; }
    let s = P.in_shape;
    var c = vec4<u32>(i / (s.y * s.z * s.w), (i / (s.z * s.w)) % s.y, (i / s.w) % s.z, i % s.w);
    let src = P.in_off + dot(c, P.in_strides);
    c[P.axis] += P.start;
    let o = P.out_shape;
    let dst = ((c.x * o.y + c.y) * o.z + c.z) * o.w + c.w;
    for (var k = 0u; k < PER; k++) { y[dst + k] = out(x[src + k]); }
}
