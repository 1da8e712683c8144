// Ops along the last axis of a contiguous [rows, n] tensor, one workgroup per row.
// op 0 softmax, 1 log-softmax: an online (max, sum of exp) pass, then the write pass.
// op 2 layernorm: Welford's mean and variance per thread, merged in a tree (Chan et al.).
// op 3 rmsnorm: the mean of squares.
// op 4 cross-entropy: y[row] = logsumexp(x[row]) - x[row, label], labels (class indices as
//      floats) in w; op 5 its gradient: y[row, j] = (softmax(x[row])[j] - (j == label)) * g[row],
//      with g in b.
// Every row is read twice at most and written once.
struct Params {
    rows: u32, n: u32, op: u32, flags: u32,  // flags: 1 weight, 2 bias
    in_off: u32, w_off: u32, b_off: u32, gx: u32,
    eps: f32, neg_inf: f32, _p0: u32, _p1: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;  // weight, or labels (ops 4, 5)
@group(0) @binding(3) var<storage, read> b: array<f32>;  // bias, or row gradients (op 5)
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;
var<workgroup> s0: array<f32, 256>;
var<workgroup> s1: array<f32, 256>;
var<workgroup> s2: array<f32, 256>;

// by its bits: Mesa/LLVM fold v != v to false
fn is_nan(v: f32) -> bool { return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u; }

// merge running (max m, sum s of exp(x - m)) pairs
fn lse_merge(ma: f32, sa: f32, mb: f32, sb: f32) -> vec2<f32> {
    // NaN spreads; tested first, as max() may drop it
    if (is_nan(ma) || is_nan(mb)) { return vec2<f32>(ma + mb, sa + sb); }
    let m = max(ma, mb);
    if (m == P.neg_inf) { return vec2<f32>(m, 0.0); }
    return vec2<f32>(m, sa * exp(ma - m) + sb * exp(mb - m));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = wg.x + wg.y * P.gx;
    if (row >= P.rows) { return; }  // uniform for the workgroup
    let xo = P.in_off + row * P.n;
    let yo = row * P.n;
    if (P.op <= 1u || P.op >= 4u) {
        var m = P.neg_inf;
        var s = 0.0;
        for (var j = lid; j < P.n; j += WG) {
            let r = lse_merge(m, s, x[xo + j], 1.0);
            m = r.x;
            s = r.y;
        }
        s0[lid] = m;
        s1[lid] = s;
        workgroupBarrier();
        for (var k = WG / 2u; k > 0u; k >>= 1u) {
            if (lid < k) {
                let r = lse_merge(s0[lid], s1[lid], s0[lid + k], s1[lid + k]);
                s0[lid] = r.x;
                s1[lid] = r.y;
            }
            workgroupBarrier();
        }
        let mx = s0[0];
        let sum = s1[0];
        let ls = log(sum);
        if (P.op >= 4u) {
            let label = u32(w[P.w_off + row]);
            if (P.op == 4u) {
                if (lid == 0u) { y[row] = (mx - x[xo + min(label, P.n - 1u)]) + ls; }
                return;
            }
            let gr = b[P.b_off + row];
            for (var j = lid; j < P.n; j += WG) {
                y[yo + j] = (exp(x[xo + j] - mx) / sum - select(0.0, 1.0, j == label)) * gr;
            }
            return;
        }
        for (var j = lid; j < P.n; j += WG) {
            let v = x[xo + j];
            y[yo + j] = select(exp(v - mx) / sum, (v - mx) - ls, P.op == 1u);
        }
        return;
    }
    // layernorm / rmsnorm statistics
    var cnt = 0.0;
    var mean = 0.0;
    var m2 = 0.0;
    for (var j = lid; j < P.n; j += WG) {
        let v = x[xo + j];
        if (P.op == 2u) {
            cnt += 1.0;
            let d = v - mean;
            mean += d / cnt;
            m2 += d * (v - mean);
        } else {
            m2 += v * v;
        }
    }
    s0[lid] = cnt;
    s1[lid] = mean;
    s2[lid] = m2;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k >>= 1u) {
        if (lid < k) {
            if (P.op == 2u) {
                let na = s0[lid];
                let nb = s0[lid + k];
                let nn = na + nb;
                if (nb > 0.0) {
                    let d = s1[lid + k] - s1[lid];
                    s1[lid] = s1[lid] + d * nb / nn;
                    s2[lid] = s2[lid] + s2[lid + k] + d * d * na * nb / nn;
                    s0[lid] = nn;
                }
            } else {
                s2[lid] += s2[lid + k];
            }
        }
        workgroupBarrier();
    }
    let mu = select(0.0, s1[0], P.op == 2u);
    let inv = inverseSqrt(s2[0] / f32(P.n) + P.eps);
    for (var j = lid; j < P.n; j += WG) {
        var v = (x[xo + j] - mu) * inv;
        if ((P.flags & 1u) != 0u) { v = v * w[P.w_off + j]; }
        if ((P.flags & 2u) != 0u) { v = v + b[P.b_off + j]; }
        y[yo + j] = v;
    }
}
