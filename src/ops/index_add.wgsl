// index_add's sums, after index_sort.wgsl has sorted the positions by index: y = a, plus
// src's slices added at the indices, y[o, v, i] = a[o, v, i] + sum over p with idx[p] = v of
// src[o, p, i] (a may be absent: zeros). Shapes [outer, len, inner] and [outer, n, inner],
// contiguous, counted in units of VW floats along inner.
// `pairs` holds the sorted keys at [0, n) and their positions at [n, 2n): the positions of
// row v are keys' run [start[v], start[v + 1]), in increasing order. Every sum is taken in a
// fixed order, so the result has the same bits on every run:
//   stage 0: start[v] for v = 0..len, by binary search (keys == len mark bad indices: past
//            start[len], never summed);
//   stage 1: the sorted positions are cut in chunks of L; for each chunk whose first key's
//            run began in an earlier chunk, the sum of that run's part inside the chunk (its
//            "head") goes to parts[o, chunk, i];
//   stage 2: one thread per unit of y sums its run's part in the chunk where it starts,
//            position by position, then the heads of the later chunks it spans, in order;
//            y = a + that (a itself for an empty run). No thread loops past L + n / L.
// The includer (ops/gather.c) defines alias V (f32 or vec4<f32>), const VW (1 or 4) and
// pack/unpack between V and vec4<f32>.
struct Params {
    len: u32, n: u32, inner: u32, outer: u32,  // inner in units
    L: u32, chunks: u32, a_off: u32, src_off: u32,  // offsets in elements
    stage: u32, has_a: u32, gx: u32, parts_off: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> pairs: array<u32>;
@group(0) @binding(2) var<storage, read> src: array<V>;
@group(0) @binding(3) var<storage, read> a: array<V>;
@group(0) @binding(4) var<storage, read_write> y: array<V>;
@group(0) @binding(5) var<storage, read_write> s: array<u32>;  // start[len + 1], then parts

// src[o, p, i]; p < n always (the sort writes a permutation): the min only keeps a corrupt
// scratch buffer from reading outside src
fn row(o: u32, p: u32, i: u32) -> V { return src[P.src_off / VW + (o * P.n + min(p, P.n - 1u)) * P.inner + i]; }

// heads live in the u32 scratch buffer, VW words each
fn load_part(k: u32) -> V {
    var v = vec4<f32>(0.0);
    for (var c = 0u; c < VW; c++) { v[c] = bitcast<f32>(s[P.parts_off + k * VW + c]); }
    return unpack(v);
}

fn store_part(k: u32, x: V) {
    let v = pack(x);
    for (var c = 0u; c < VW; c++) { s[P.parts_off + k * VW + c] = bitcast<u32>(v[c]); }
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let e = gid.x + gid.y * P.gx * 256u;
    if (P.stage == 0u) {
        if (e > P.len) { return; }
        var lo = 0u;
        var hi = P.n;
        while (lo < hi) {
            let mid = (lo + hi) / 2u;
            if (pairs[mid] < e) { lo = mid + 1u; } else { hi = mid; }
        }
        s[e] = lo;
        return;
    }
    if (P.stage == 1u) {
        if (e >= P.outer * P.chunks * P.inner) { return; }
        let r = e / P.inner;
        let i = e - r * P.inner;
        let c = r % P.chunks;
        let o = r / P.chunks;
        let k0 = c * P.L;
        let v = pairs[k0];
        var acc = V(0.0);
        if (v < P.len && s[v] < k0) {
            let end = min(s[v + 1u], k0 + P.L);
            for (var k = k0; k < end; k++) { acc += row(o, pairs[P.n + k], i); }
        }
        store_part(e, acc);
        return;
    }
    if (e >= P.outer * P.len * P.inner) { return; }
    let r = e / P.inner;
    let i = e - r * P.inner;
    var v = r;  // an embedding's gradient has outer = 1: one division
    var o = 0u;
    if (P.outer > 1u) {
        v = r % P.len;
        o = r / P.len;
    }
    let first = s[v];
    let end = s[v + 1u];
    var acc = V(0.0);
    let c0 = first / P.L;
    let stop = min(end, (c0 + 1u) * P.L);
    for (var k = first; k < stop; k++) { acc += row(o, pairs[P.n + k], i); }
    for (var c = c0 + 1u; c * P.L < end; c++) { acc += load_part((o * P.chunks + c) * P.inner + i); }
    var base = V(0.0);
    if (P.has_a == 1u) { base = a[P.a_off / VW + e]; }
    y[e] = select(base + acc, base, first == end);
}
