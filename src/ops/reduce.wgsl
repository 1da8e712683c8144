// Reduction along one axis of a contiguous tensor seen as [outer, len, inner] -> [outer, inner].
// One workgroup per output element: each thread folds a strided part of the axis, then a
// tree in workgroup memory combines the 256 partial results.
// P.op: OP_SUM, OP_MEAN, OP_MAX (NaN wins), OP_ARGMAX (first index of the max; a NaN counts as
// max), OP_MIN and OP_ARGMIN (the max and argmax of -x: negation is exact), the op table's
// codes, which ops/reduce.c puts before this source
// A long axis is folded in two launches (wgml_build_reduce), so that no thread loops long:
//   stage 1: workgroup (o, c, i) folds chunk c of the axis, elements [c chunk, (c + 1) chunk),
//            into partials p[o, c, i] (argmax: values, then the indices at idx_off);
//   stage 2: folds the `parts` partials of each output; a mean divides by len only here.
// Stage 0 is the one-launch form; stage 3 too, for short axes: a thread per output, which
// folds the whole axis itself (millions of short rows need few workgroups, and for inner > 1
// neighbouring threads read neighbouring elements). Buffers hold f32 bits as u32, so that an argmax index
// passes through a partial unchanged; an input of halves (P.in_half: sums of f16 gradients) is
// read two to a word and widened, partials are f32.
struct Params {
    outer: u32, len: u32, inner: u32, op: u32,
    in_off: u32, gx: u32, neg_inf: f32, stage: u32,
    chunk: u32, parts: u32, idx_off: u32, in_half: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;

const WG: u32 = 256u;
var<workgroup> sv: array<f32, 256>;
var<workgroup> si: array<u32, 256>;

// by its bits: Mesa/LLVM fold v != v to false
fn is_nan(v: f32) -> bool { return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u; }

// true when (v, j) should replace (a, i) as the max: NaN first, then larger, then earlier index
fn better(v: f32, j: u32, a: f32, i: u32) -> bool {
    if (is_nan(a)) { return is_nan(v) && j < i; }
    if (is_nan(v)) { return true; }
    return v > a || (v == a && j < i);
}

// element i of the input as f32 bits (in elements, halves counted one by one)
fn input(i: u32) -> u32 {
    if (P.in_half == 0u) { return x[i]; }
    let h = unpack2x16float(x[i >> 1u]);
    return bitcast<u32>(select(h.x, h.y, (i & 1u) == 1u));
}

fn is_arg() -> bool { return P.op == OP_ARGMAX || P.op == OP_ARGMIN; }
fn is_extremum() -> bool { return P.op == OP_MAX || P.op == OP_MIN || is_arg(); }
// element bits as the value folded: min and argmin fold -x (stage 2 reads partials already negated)
fn value(bits: u32) -> f32 {
    let v = bitcast<f32>(bits);
    return select(v, -v, (P.op == OP_MIN || P.op == OP_ARGMIN) && P.stage != 2u);
}

fn finish(r: f32, at: u32) -> u32 {
    if (P.op == OP_MEAN) { return bitcast<u32>(r / f32(P.len)); }
    if (P.op == OP_MIN) { return bitcast<u32>(-r); }
    if (P.op == OP_ARGMIN) { return at; }  // an i32 result
    if (P.op == OP_ARGMAX) { return at; }  // an i32 result
    return bitcast<u32>(r);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    if (P.stage == 3u) {  // uniform: no barrier follows in this branch
        // no early return for the threads past the end: WGSL's uniformity rules (Tint, in
        // Dawn, enforces them) would then call the barriers below non-uniform
        let o = (wg.x + wg.y * P.gx) * WG + lid;
        if (o < P.outer * P.inner) {
            let base = P.in_off + (o / P.inner) * P.len * P.inner + o % P.inner;
            var acc = select(0.0, P.neg_inf, is_extremum());
            var idx = 0xffffffffu;
            for (var j = 0u; j < P.len; j++) {
                let v = value(input(base + j * P.inner));
                if ((P.op == OP_SUM || P.op == OP_MEAN)) {
                    acc += v;
                } else if (better(v, j, acc, idx)) {
                    acc = v;
                    idx = j;
                }
            }
            y[o] = finish(acc, idx);
        }
        return;
    }
    let o = wg.x + wg.y * P.gx;
    let outputs = select(P.outer * P.inner, P.outer * P.parts * P.inner, P.stage == 1u);
    if (o >= outputs) { return; }  // uniform: the same for the whole workgroup
    let i = o % P.inner;
    var base: u32;  // element j of this output's axis is x[base + j * inner]
    var lo = 0u;
    var hi = P.len;
    if (P.stage == 1u) {
        let c = (o / P.inner) % P.parts;
        base = P.in_off + (o / (P.inner * P.parts)) * P.len * P.inner + i;
        lo = c * P.chunk;
        hi = min(P.len, lo + P.chunk);
    } else if (P.stage == 2u) {
        base = (o / P.inner) * P.parts * P.inner + i;
        hi = P.parts;
    } else {
        base = P.in_off + (o / P.inner) * P.len * P.inner + i;
    }
    let from_parts = P.stage == 2u && is_arg();  // argmax: the index a partial found
    var acc = select(0.0, P.neg_inf, is_extremum());
    var idx = 0xffffffffu;
    for (var j = lo + lid; j < hi; j += WG) {
        let v = value(input(base + j * P.inner));
        if ((P.op == OP_SUM || P.op == OP_MEAN)) {
            acc += v;
        } else {
            let at = select(j, x[P.idx_off + base + j * P.inner], from_parts);
            if (better(v, at, acc, idx)) {
                acc = v;
                idx = at;
            }
        }
    }
    sv[lid] = acc;
    si[lid] = idx;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            if ((P.op == OP_SUM || P.op == OP_MEAN)) {
                sv[lid] += sv[lid + s];
            } else if (better(sv[lid + s], si[lid + s], sv[lid], si[lid])) {
                sv[lid] = sv[lid + s];
                si[lid] = si[lid + s];
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        let r = sv[0];
        if (P.stage == 1u) {
            y[o] = bitcast<u32>(r);
            if (is_arg()) { y[P.idx_off + o] = si[0]; }
            return;
        }
        y[o] = finish(r, si[0]);
    }
}
