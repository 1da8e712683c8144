// One optimiser step over every parameter of a model at once: P, G, M, V are flat buffers
// holding all parameters, their gradients and moments. The gradient is clipped by the global
// norm found on the GPU (norm2 = sum of squares of all gradients); nothing is downloaded.
// Each parameter group is a range of the flat buffers with its own lr scale and weight decay
// (the table `groups`, ends increasing); lr = P.lr (the scheduled lr) x the group's scale.
// With one group the table is not read: P.lr is then already scaled and P.wd is its decay,
// since a table load per element costs lavapipe about a fifth of the step's time.
//   kind 0 AdamW: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//                 p -= lr (m / bc1 / (sqrt(v / bc2) + eps) + wd p)
//   kind 1 SGD with momentum: g' = g + wd p; m = mu m + g'; p -= lr m
// With loss scaling (P.scaler = 1 + the half of S to read), G holds the gradients times the
// scale: they are divided by it, a non-finite norm skips the update, and invocation 0 writes
// the next state into the other half of S (every invocation reads only the old half).
// S's half: scale, good steps, skipped steps, last skipped, unscaled norm^2, updates taken.
struct Params {
    n: u32, kind: u32, gx: u32, n_groups: u32,
    lr: f32, b1: f32, b2: f32, eps: f32,
    bc1: f32, bc2: f32, max_norm: f32, wd: f32,
    scaler: u32, interval: u32, backoff: f32, growth: f32,
}
struct Group { end: u32, lr_scale: f32, wd: f32, _pad: u32, }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> norm2: array<f32>;
@group(0) @binding(2) var<storage, read> G: array<f32>;
@group(0) @binding(3) var<storage, read_write> W: array<f32>;
@group(0) @binding(4) var<storage, read_write> M: array<f32>;
@group(0) @binding(5) var<storage, read_write> V: array<f32>;
@group(0) @binding(6) var<storage, read_write> scale_out: array<f32>;
@group(0) @binding(7) var<storage, read> groups: array<Group>;
@group(0) @binding(8) var<storage, read_write> S: array<f32>;

// inf and NaN by their bits: WGSL lets compilers assume float arithmetic stays finite
fn is_finite(x: f32) -> bool { return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u; }

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * P.gx * 256u;
    var n2 = norm2[0];
    var unscale = 1.0;
    var bc1 = P.bc1;
    var bc2 = P.bc2;
    if (P.scaler != 0u) {
        let r = (P.scaler - 1u) * 8u;
        let w = 8u - r;
        let loss_scale = S[r];
        let ok = is_finite(n2);
        unscale = 1.0 / loss_scale;
        n2 = n2 * unscale * unscale;
        let t = S[r + 5u] + 1.0;
        if (i == 0u) {
            var good = S[r + 1u] + 1.0;
            var next = loss_scale;
            if (!ok) { next = loss_scale * P.backoff; good = 0.0; }
            else if (good >= f32(P.interval)) { next = loss_scale * P.growth; good = 0.0; }
            S[w] = next;
            S[w + 1u] = good;
            S[w + 2u] = S[r + 2u] + select(1.0, 0.0, ok);
            S[w + 3u] = select(1.0, 0.0, ok);
            S[w + 4u] = n2;
            S[w + 5u] = select(t - 1.0, t, ok);
        }
        if (!ok) {
            if (i == 0u) { scale_out[0] = 0.0; }
            return;
        }
        bc1 = 1.0 - pow(P.b1, t);
        bc2 = 1.0 - pow(P.b2, t);
    }
    var scale = 1.0;
    if (P.max_norm > 0.0) { scale = min(1.0, P.max_norm / (sqrt(n2) + 1e-6)); }
    if (i == 0u) { scale_out[0] = scale; }
    if (i >= P.n) { return; }
    var lr = P.lr;
    var wd = P.wd;
    if (P.n_groups > 1u) {
        // the first group whose range ends past i (ceil(log2(n_groups)) halvings)
        var lo = 0u;
        var hi = P.n_groups - 1u;
        while (lo < hi) {
            let mid = (lo + hi) / 2u;
            if (groups[mid].end > i) { hi = mid; } else { lo = mid + 1u; }
        }
        lr = P.lr * groups[lo].lr_scale;
        wd = groups[lo].wd;
    }
    let g = G[i] * (unscale * scale);
    let p = W[i];
    if (P.kind == 0u) {
        let m = P.b1 * M[i] + (1.0 - P.b1) * g;
        let v = P.b2 * V[i] + (1.0 - P.b2) * g * g;
        M[i] = m;
        V[i] = v;
        W[i] = p - lr * (m / bc1 / (sqrt(v / bc2) + P.eps) + wd * p);
    } else {
        let m = P.b1 * M[i] + g + wd * p;
        M[i] = m;
        W[i] = p - lr * m;
    }
}
