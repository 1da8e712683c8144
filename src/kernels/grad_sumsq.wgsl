// The squared global gradient norm's first stage, over the optimiser's whole flat gradient
// buffer G at once (train/optim.c; the slots' padding is zero): workgroup w sums g^2 over
// the vec4s w * 256 + lid, then every P.parts * 256 further (a grid-stride loop), and writes
// its sum to part[w]; a sum over part (the reduce family's) finishes it. One pass over G for
// every parameter together, where a reduction per gradient took two launches each. The
// order of the additions is fixed, so the result is the same bits from run to run.
// A non-finite gradient must make the norm non-finite (the loss scaler skips that step):
// it is found by its bits, since WGSL lets compilers assume float arithmetic stays finite,
// and its workgroup's sum is then written as infinity.
struct Params { n4: u32, parts: u32, inf_bits: u32, _pad: u32, }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> G: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> part: array<f32>;

var<workgroup> sums: array<f32, 256>;
var<workgroup> bad: atomic<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) { atomicStore(&bad, 0u); }
    var acc = 0.0;
    var nonfinite = false;
    for (var i = wg.x * 256u + lid; i < P.n4; i += P.parts * 256u) {
        let g = G[i];
        let e = bitcast<vec4<u32>>(g) & vec4<u32>(0x7f800000u);
        nonfinite = nonfinite || any(e == vec4<u32>(0x7f800000u));
        acc += dot(g, g);
    }
    sums[lid] = acc;
    workgroupBarrier();
    if (nonfinite) { atomicOr(&bad, 1u); }
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) { sums[lid] += sums[lid + s]; }
        workgroupBarrier();
    }
    if (lid == 0u) { part[wg.x] = select(sums[0], bitcast<f32>(P.inf_bits), atomicLoad(&bad) != 0u); }
}
