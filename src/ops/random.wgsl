// Counter-based random numbers: Philox4x32-10 (Salmon et al., SC11). One thread per Philox
// block of four elements; the mapping of elements to counters is cpu/philox.h's:
//   block b = offset + thread (64-bit, carried here), key = seed, counter (b, stream, 0),
//   element 4 thread + k takes word k of the block.
// ops/random.c puts before this source: ops/mul_wide.wgsl, MODE (0 uniform, 1 normal, 2 dropout), the output
// binding Y and, for dropout, its input X (x_at reads it; the generators have none).
//   uniform  y = min(lo + (hi - lo) u, below hi), u = (w >> 8) 2^-24: integers and correctly
//            rounded f32 products and sums only, so every adapter gives the same bits
//   normal   Box-Muller on words (0, 1) and (2, 3); ln, cos and sin are this file's own
//            polynomials in f32 arithmetic (WGSL promises only 2^-11 for the builtin cos), so
//            adapters agree to the rounding of a few f32 operations
//   dropout  y = 0 where (w >> 8) < threshold (u < p), else x * scale
struct Params {
    n: u32, blocks: u32, gx: u32, x_offset: u32,
    seed_lo: u32, seed_hi: u32, offset_lo: u32, offset_hi: u32,
    a: f32, b: f32, c: f32, zero: u32,  // uniform: lo, hi - lo, the float below hi; normal:
    threshold: u32, stream: u32, _p1: u32, _p2: u32,  // mean, std; dropout: scale; zero: 0
}
@group(0) @binding(0) var<uniform> P: Params;

const PHILOX_M0 = 0xD2511F53u;
const PHILOX_M1 = 0xCD9E8D57u;
const PHILOX_W0 = 0x9E3779B9u;
const PHILOX_W1 = 0xBB67AE85u;

fn philox(counter: vec4<u32>, key_in: vec2<u32>) -> vec4<u32> {
    var c = counter;
    var k = key_in;
    for (var r = 0u; r < 10u; r++) {
        if (r > 0u) { k += vec2<u32>(PHILOX_W0, PHILOX_W1); }
        let p0 = mul_wide(PHILOX_M0, c.x);  // (low, high)
        let p1 = mul_wide(PHILOX_M1, c.z);
        c = vec4<u32>(p1.y ^ c.y ^ k.x, p1.x, p0.y ^ c.w ^ k.y, p0.x);
    }
    return c;
}

// ln(k 2^-24) for 1 <= k <= 2^24: k = 2^e m with m in [sqrt(1/2), sqrt(2)), taken from the
// float's bits, and ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, to s^11 (the next
// term is below 1e-10 of the sum). Near k = 2^24 (u near 1), m - 1 is exact, so ln u keeps
// its relative accuracy where a builtin's absolute error could even make it positive.
fn ln_u(k: u32) -> f32 {
    let bits = bitcast<u32>(f32(k));
    var e = i32(bits >> 23u) - 127;
    var m = bitcast<f32>((bits & 0x7fffffu) | 0x3f800000u);
    if (m > 1.41421356) {
        m *= 0.5;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let series = 1.0 + s2 * (1.0 / 3.0 + s2 * (1.0 / 5.0 + s2 * (1.0 / 7.0 + s2 * (1.0 / 9.0 + s2 * (1.0 / 11.0)))));
    return f32(e - 24) * 0.693147180559945 + 2.0 * s * series;
}

// (cos, sin) of 2 pi k / 2^24 for k < 2^24: the quarter turn and the eighth are taken from
// k's bits exactly, leaving an angle in [0, pi/4] for Taylor polynomials (to x^9 and x^10,
// errors below 2e-9)
fn turn(k: u32) -> vec2<f32> {
    let quarter = k >> 22u;
    var j = k & 0x3fffffu;
    let upper = j > 0x200000u;  // past the eighth: use pi/2 - angle, cos and sin swapped
    if (upper) { j = 0x400000u - j; }
    let x = f32(j) * (1.57079632679489662 / 4194304.0);
    let x2 = x * x;
    let s = x * (1.0 - x2 / 6.0 * (1.0 - x2 / 20.0 * (1.0 - x2 / 42.0 * (1.0 - x2 / 72.0))));
    let c = 1.0 - x2 / 2.0 * (1.0 - x2 / 12.0 * (1.0 - x2 / 30.0 * (1.0 - x2 / 56.0 * (1.0 - x2 / 90.0))));
    var cs = select(vec2<f32>(c, s), vec2<f32>(s, c), upper);
    // turn by whole quarters: (c, s) -> (-s, c)
    if (quarter == 1u) { cs = vec2<f32>(-cs.y, cs.x); }
    if (quarter == 2u) { cs = -cs; }
    if (quarter == 3u) { cs = vec2<f32>(cs.y, -cs.x); }
    return cs;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.x + gid.y * P.gx * 256u;
    if (t >= P.blocks) { return; }
    let lo = P.offset_lo + t;
    let w = philox(vec4<u32>(lo, P.offset_hi + select(0u, 1u, lo < t), P.stream, 0u), vec2<u32>(P.seed_lo, P.seed_hi));
    var y: vec4<f32>;
    if (MODE == 0u) {
        let u = vec4<f32>(w >> vec4<u32>(8u)) * (1.0 / 16777216.0);
        // the product passes through an integer XOR with P.zero (0, unknown to the compiler)
        // so that it is rounded before the sum: a fused multiply-add would round once
        let scaled = bitcast<vec4<f32>>(bitcast<vec4<u32>>(P.b * u) ^ vec4<u32>(P.zero));
        y = min(P.a + scaled, vec4<f32>(P.c));
    } else if (MODE == 1u) {
        let r0 = sqrt(max(-2.0 * ln_u((w.x >> 8u) + 1u), 0.0));
        let r1 = sqrt(max(-2.0 * ln_u((w.z >> 8u) + 1u), 0.0));
        let z = vec4<f32>(r0 * turn(w.y >> 8u), r1 * turn(w.w >> 8u));
        y = P.a + P.b * z;
    } else {
        let kept = (w >> vec4<u32>(8u)) >= vec4<u32>(P.threshold);
        for (var k = 0u; k < 4u; k++) {
            let i = 4u * t + k;
            if (i < P.n) { y[k] = select(0.0, x_at(P.x_offset + i) * P.a, kept[k]); }
        }
    }
    for (var k = 0u; k < 4u; k++) {
        let i = 4u * t + k;
        if (i < P.n) { Y[i] = y[k]; }
    }
}
