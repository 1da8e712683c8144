// Rotary position embedding of a contiguous x [rows, D] (ops/scan.c): row r is at
// position r % T + pos_off; pair j is (j, j + D/2), or (2j, 2j + 1) when interleaved, and is
// rotated by the angle f32(position) * freq[j] (the f32 product, as HF computes it), or by its
// negative for the inverse rotation (the gradient):
//   y[i1] = x[i1] cos - x[i2] sin,  y[i2] = x[i2] cos + x[i1] sin.
// A thread per (row, pair) of this launch's pairs j0 .. j0 + nj; the frequencies, computed on
// the host once, come in the parameter block (a launch holds 244; wider heads take more
// launches). Neighbouring threads read neighbouring elements of both halves. ops/scan.c puts
// ops/mul_wide.wgsl before this source.
struct Params {
    n: u32, half: u32, T: u32, pos_off: u32,  // n = rows * nj threads
    in_off: u32, j0: u32, nj: u32, gx: u32,
    interleaved: u32, inverse: u32, _p0: u32, _p1: u32,
    freq: array<vec4<f32>, 61>,  // freq[jj] for jj < nj: base^(-2 (j0 + jj) / D)
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;

// a (finite, >= 0, < 2^32: the host refuses larger angles) reduced to [-pi, pi), exactly but
// for the last rounding to f32. A GPU's sin and cos are accurate on [-pi, pi] only (WGSL's
// rules), and a reduction in f32 arithmetic (Cody and Waite) is exact only while the multiple
// of 2 pi it takes off stays small (to ~4e5 with three parts). Here a = m 2^e with m the
// 24-bit significand, and a / (2 pi) = m 2^e (1 / (2 pi)): the product of m with 96 bits of
// 1 / (2 pi) in integer arithmetic gives the fraction of a turn to 32 bits, whatever a is.
fn reduce_angle(a: f32) -> f32 {
    let bits = bitcast<u32>(a);
    let biased = bits >> 23u;
    if (biased < 127u) { return a; } // below 1
    let m = (bits & 0x7fffffu) | 0x800000u;
    // 1 / (2 pi) = 0x0.28be60db 9391054a 7f09d5f4 ...
    let t2 = mul_wide(m, 0x7f09d5f4u);
    let t1 = mul_wide(m, 0x9391054au);
    let t0 = mul_wide(m, 0x28be60dbu);
    // p = m (1 / (2 pi)) 2^96 as four words, low first (the lowest is not needed)
    let p1 = t2.y + t1.x;
    let c1 = select(0u, 1u, p1 < t2.y);
    let s2 = t1.y + t0.x;
    let p2 = s2 + c1;
    let c2 = select(0u, 1u, s2 < t1.y) + select(0u, 1u, p2 < s2);
    let p3 = t0.y + c2;
    // a / (2 pi) = p 2^(e - 96), e = biased - 150: the turn's fraction is bits b .. b + 31 of p
    let b = 214u - biased; // 64 - e, in 56 .. 87 for 1 <= a < 2^32
    let sh = b & 31u;
    var lo = p1;
    var hi = p2;
    if (b >= 64u) { lo = p2; hi = p3; }
    let frac = select((lo >> sh) | (hi << ((32u - sh) & 31u)), lo, sh == 0u);
    // as a signed fraction in [-1/2, 1/2) of a turn, times 2 pi / 2^32
    return f32(bitcast<i32>(frac)) * 1.4629180792671596e-09;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wg.x + wg.y * P.gx) * WG + lid;
    if (i >= P.n) { return; }
    let row = i / P.nj;
    let jj = i % P.nj;
    let j = P.j0 + jj;
    let r = reduce_angle(f32(row % P.T + P.pos_off) * P.freq[jj / 4u][jj % 4u]);
    let c = cos(r);
    let s = select(sin(r), -sin(r), P.inverse != 0u);
    let il = P.interleaved != 0u;
    let i1 = row * 2u * P.half + select(j, 2u * j, il);
    let i2 = row * 2u * P.half + select(j + P.half, 2u * j + 1u, il);
    let x1 = x[P.in_off + i1];
    let x2 = x[P.in_off + i2];
    y[i1] = x1 * c - x2 * s;
    y[i2] = x2 * c + x1 * s;
}
