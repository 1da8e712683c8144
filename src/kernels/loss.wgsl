// Softmax cross-entropy with integer labels (given as f32 class indices), one workgroup per
// row of logits [rows, n]:
//   op 0 (forward): y[row] = logsumexp(x[row]) - x[row, label]
//   op 1 (gradient): y[row, j] = (softmax(x[row])[j] - (j == label)) * g[row]
// The (max, sum of exp) pair is found online in one pass, so a row is read twice at most.
struct Params {
    rows: u32, n: u32, op: u32, gx: u32,
    x_off: u32, l_off: u32, g_off: u32, neg_inf: f32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> labels: array<f32>;
@group(0) @binding(3) var<storage, read> g: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;
var<workgroup> sm: array<f32, 256>;
var<workgroup> ss: array<f32, 256>;

fn lse_merge(ma: f32, sa: f32, mb: f32, sb: f32) -> vec2<f32> {
    let m = max(ma, mb);
    if (m == P.neg_inf) { return vec2<f32>(m, 0.0); }
    if (ma != ma || mb != mb) { return vec2<f32>(ma + mb, sa + sb); }
    return vec2<f32>(m, sa * exp(ma - m) + sb * exp(mb - m));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = wg.x + wg.y * P.gx;
    if (row >= P.rows) { return; }  // uniform for the workgroup
    let xo = P.x_off + row * P.n;
    var m = P.neg_inf;
    var s = 0.0;
    for (var j = lid; j < P.n; j += WG) {
        let r = lse_merge(m, s, x[xo + j], 1.0);
        m = r.x;
        s = r.y;
    }
    sm[lid] = m;
    ss[lid] = s;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k >>= 1u) {
        if (lid < k) {
            let r = lse_merge(sm[lid], ss[lid], sm[lid + k], ss[lid + k]);
            sm[lid] = r.x;
            ss[lid] = r.y;
        }
        workgroupBarrier();
    }
    let mx = sm[0];
    let sum = ss[0];
    let label = u32(labels[P.l_off + row]);
    if (P.op == 0u) {
        if (lid == 0u) { y[row] = mx + log(sum) - x[xo + min(label, P.n - 1u)]; }
        return;
    }
    let gr = g[P.g_off + row];
    for (var j = lid; j < P.n; j += WG) {
        let p = exp(x[xo + j] - mx) / sum;
        y[row * P.n + j] = (p - select(0.0, 1.0, j == label)) * gr;
    }
}
