// An f16 operand widened to f32 for the matmul kernels that read only f32 (the GEMVs and the
// CPU GEMM under f32 arithmetic; ops/matmul/matmul.c): dst[i] = src[i] for i < n, exactly.
enable f16;
struct Params {
    n: u32,
    gx: u32,  // workgroups per grid row (wgml_grid)
    pad0: u32,
    pad1: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> src: array<f16>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wg.x + wg.y * P.gx) * 256u + lid;
    if (i < P.n) { dst[i] = f32(src[i]); }
}
