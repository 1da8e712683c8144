// Stable sort of the positions of an index vector by index: the first half of index_add's
// deterministic scatter (ops/gather.c says why). An LSD radix sort, 8 bits a pass, of
// (key, position) pairs; each pass is three launches:
//   stage 0, histogram: workgroup b counts the digits of its tile of rounds * 256 pairs
//            (workgroup atomics on integers: the counts do not depend on their order) into
//            hist[b * 256 + digit];
//   stage 1, scan: one workgroup turns hist into each (digit, tile)'s first place in the
//            output, digit-major: thread d walks its digit's tiles in order, then the 256
//            digit totals are scanned;
//   stage 2, scatter: workgroup b places its tile, 256 pairs a round in position order; a
//            pair's place is its (digit, tile)'s next free place plus the count of pairs
//            before it in the round with the same digit (popcounts of a bit mask of the
//            round's threads per digit), so equal digits keep their order: the sort is stable.
// The first pass reads raw indices (raw = 1): key = idx[i] when 0 <= idx[i] < len, else len
// (sorted last, skipped by index_add; the histogram stage records it in the GPU error flags);
// position = i. Later passes read pairs: keys at [0, n), positions at [n, 2n).
// Pairs are read from x (src_s = 0) or the scratch buffer s at pairs_off (src_s = 1), and
// written to y (dst_s = 0) or there (dst_s = 1); hist lives at the start of s.
struct Params {
    n: u32, nb: u32, rounds: u32, shift: u32,
    stage: u32, raw: u32, len: u32, in_off: u32,
    src_s: u32, dst_s: u32, pairs_off: u32, _p: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;
@group(0) @binding(3) var<storage, read_write> s: array<u32>;
@group(0) @binding(4) var<storage, read_write> gpu_errors: array<atomic<u32>, 4>;

const WG: u32 = 256u;
var<workgroup> count: array<atomic<u32>, 256>;
var<workgroup> masks: array<atomic<u32>, 2048>;
var<workgroup> totals: array<u32, 512>;

fn read_pair(k: u32) -> u32 {
    if (P.src_s == 1u) { return s[P.pairs_off + k]; }
    return x[P.in_off + k];
}

// the key and position of pair i
fn pair(i: u32) -> vec2<u32> {
    if (P.raw == 1u) {
        let v = bitcast<i32>(x[P.in_off + i]);
        return vec2<u32>(select(P.len, u32(v), v >= 0 && u32(v) < P.len), i);
    }
    return vec2<u32>(read_pair(i), read_pair(P.n + i));
}

fn write_pair(k: u32, p: vec2<u32>) {
    if (P.dst_s == 1u) {
        s[P.pairs_off + k] = p.x;
        s[P.pairs_off + P.n + k] = p.y;
    } else {
        y[k] = p.x;
        y[P.n + k] = p.y;
    }
}

fn digit(key: u32) -> u32 { return (key >> P.shift) & 255u; }

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let b = wg.x;
    if (P.stage == 0u) {
        atomicStore(&count[lid], 0u);
        workgroupBarrier();
        for (var r = 0u; r < P.rounds; r++) {
            let i = (b * P.rounds + r) * WG + lid;
            if (i < P.n) {
                let p = pair(i);
                if (P.raw == 1u && p.x == P.len) {
                    atomicOr(&gpu_errors[0], 2u);  // WGML_GPU_ERROR_INDEX
                    atomicMax(&gpu_errors[1], 0xffffffffu - i);
                }
                atomicAdd(&count[digit(p.x)], 1u);
            }
        }
        workgroupBarrier();
        s[b * WG + lid] = atomicLoad(&count[lid]);
        return;
    }
    if (P.stage == 1u) {  // one workgroup; thread `lid` is digit lid
        // four tiles at a time, their loads before their stores: one memory latency per four
        var run = 0u;
        var t = 0u;
        for (; t + 4u <= P.nb; t += 4u) {
            let c = vec4<u32>(s[t * WG + lid], s[(t + 1u) * WG + lid], s[(t + 2u) * WG + lid], s[(t + 3u) * WG + lid]);
            s[t * WG + lid] = run;
            s[(t + 1u) * WG + lid] = run + c.x;
            s[(t + 2u) * WG + lid] = run + c.x + c.y;
            s[(t + 3u) * WG + lid] = run + c.x + c.y + c.z;
            run += c.x + c.y + c.z + c.w;
        }
        for (; t < P.nb; t++) {
            let c = s[t * WG + lid];
            s[t * WG + lid] = run;
            run += c;
        }
        // exclusive scan of the digit totals, Hillis-Steele between two halves of `totals`
        totals[lid] = run;
        workgroupBarrier();
        var half = 0u;
        for (var step = 1u; step < WG; step <<= 1u) {
            var v = totals[half + lid];
            if (lid >= step) { v += totals[half + lid - step]; }
            totals[(WG - half) + lid] = v;
            half = WG - half;
            workgroupBarrier();
        }
        let base = totals[half + lid] - run;
        t = 0u;
        for (; t + 4u <= P.nb; t += 4u) {
            let c = vec4<u32>(s[t * WG + lid], s[(t + 1u) * WG + lid], s[(t + 2u) * WG + lid], s[(t + 3u) * WG + lid]) + base;
            s[t * WG + lid] = c.x;
            s[(t + 1u) * WG + lid] = c.y;
            s[(t + 2u) * WG + lid] = c.z;
            s[(t + 3u) * WG + lid] = c.w;
        }
        for (; t < P.nb; t++) { s[t * WG + lid] += base; }
        return;
    }
    // stage 2: count[d] holds digit d's next free place for this tile; masks[8 d .. 8 d + 8)
    // the round's threads holding digit d, a bit each (ORs: their order does not matter)
    atomicStore(&count[lid], s[b * WG + lid]);
    for (var r = 0u; r < P.rounds; r++) {
        for (var w = 0u; w < 8u; w++) { atomicStore(&masks[lid * 8u + w], 0u); }
        workgroupBarrier();
        let i = (b * P.rounds + r) * WG + lid;
        let valid = i < P.n;
        var p = vec2<u32>(0u, 0u);
        var d = 0u;
        if (valid) {
            p = pair(i);
            d = digit(p.x);
            atomicOr(&masks[d * 8u + lid / 32u], 1u << (lid % 32u));
        }
        workgroupBarrier();
        if (valid) {  // rank: the threads before this one with the same digit
            var rank = countOneBits(atomicLoad(&masks[d * 8u + lid / 32u]) & ((1u << (lid % 32u)) - 1u));
            for (var w = 0u; w < lid / 32u; w++) { rank += countOneBits(atomicLoad(&masks[d * 8u + w])); }
            let k = atomicLoad(&count[d]) + rank;
            if (k < P.n) { write_pair(k, p); }  // always, unless the data changed under us
        }
        workgroupBarrier();
        var placed = 0u;  // digit lid's pairs in this round
        for (var w = 0u; w < 8u; w++) { placed += countOneBits(atomicLoad(&masks[lid * 8u + w])); }
        atomicStore(&count[lid], atomicLoad(&count[lid]) + placed);
        workgroupBarrier();
    }
}
