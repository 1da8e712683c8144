// A range of f32 gradients as IEEE binary16 pairs (low half first) for data parallelism's
// transfer through host memory (train/dist.c): half the bytes. pack2x16float leaves values
// past f16's finite range undefined, so those become infinities of their sign here and NaN
// stays NaN: a loss-scaled gradient that overflows f16 must reach the host as inf, so that
// every rank's step sees a non-finite norm and skips alike.
struct Params { n: u32, gx: u32, }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> G: array<f32>;
@group(0) @binding(2) var<storage, read_write> H: array<u32>;

fn half_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let sign = (b >> 16u) & 0x8000u;
    let mag = b & 0x7fffffffu;
    if (mag > 0x7f800000u) { return sign | 0x7e00u; }  // NaN (by its bits: no float compare)
    if (mag >= 0x477ff000u) { return sign | 0x7c00u; } // |x| >= 65520 rounds to inf
    // (65504, 65520) rounds to 65504, f16's largest: clamped into the defined range
    return pack2x16float(vec2<f32>(clamp(x, -65504.0, 65504.0), 0.0)) & 0xffffu;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * P.gx * 256u;
    if (i >= (P.n + 1u) / 2u) { return; }
    var hi = 0.0;
    if (2u * i + 1u < P.n) { hi = G[2u * i + 1u]; }
    H[i] = half_bits(G[2u * i]) | (half_bits(hi) << 16u);
}
