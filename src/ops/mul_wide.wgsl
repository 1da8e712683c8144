// The 64-bit product of two u32, shared by ops/random.wgsl (Philox's rounds) and ops/rope.wgsl
// (the angle's range reduction): random.c and scan.c put it before each. WGSL has no
// 32x32 -> 64 multiply, so the high word comes from the four products of 16-bit halves (each
// fits 32 bits); the low word is the wrapping product.
fn mul_wide(a: u32, b: u32) -> vec2<u32> {  // (low word, high word)
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    return vec2<u32>(a * b, a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u));
}
