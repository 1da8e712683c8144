// Rotary position embedding of a contiguous x [rows, D] (graph/rope_cumsum.c): row r is at
// position r % T + pos_off; pair j is (j, j + D/2), or (2j, 2j + 1) when interleaved, and is
// rotated by the angle f32(position) * freq[j] (the f32 product, as HF computes it), or by its
// negative for the inverse rotation (the gradient):
//   y[i1] = x[i1] cos - x[i2] sin,  y[i2] = x[i2] cos + x[i1] sin.
// A thread per (row, pair) of this launch's pairs j0 .. j0 + nj; the frequencies, computed on
// the host once, come in the parameter block (a launch holds 244; wider heads take more
// launches). Neighbouring threads read neighbouring elements of both halves.
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
// 2 pi in three parts (Cody and Waite): k C1 and k C2 are exact for |k| < 2^16, so the angle
// reduced to [-pi, pi] keeps its accuracy up to |angle| ~ 4e5, where a GPU's sin and cos
// (accurate on [-pi, pi] only, by WGSL's rules) would not
const INV_2PI: f32 = 0.15915494309189535;
const C1: f32 = 6.28125;
const C2: f32 = 0.00193023681640625;
const C3: f32 = 5.070363179981996e-06;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wg.x + wg.y * P.gx) * WG + lid;
    if (i >= P.n) { return; }
    let row = i / P.nj;
    let jj = i % P.nj;
    let j = P.j0 + jj;
    let a = f32(row % P.T + P.pos_off) * P.freq[jj / 4u][jj % 4u];
    let k = round(a * INV_2PI);
    let r = ((a - k * C1) - k * C2) - k * C3;
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
