// Cumulative sums along one axis of a contiguous x seen as [outer, len, inner]
// (ops/scan.c). Positions q count in scan order: with `reverse` q runs the axis from
// its end (element len - 1 - q). f32, or i32 when P.is_int (buffers hold the bits as u32).
// The axis is cut into `nblocks` blocks of `block` positions. One block: one launch of
// stage 0 or 1 does it all. Several (a long axis, few rows or columns): stage 0 or 1 scans
// each block alone and keeps its total in s[outer, nblocks, inner], stage 2 turns the
// totals into exclusive prefix sums, stage 3 adds them to the blocks past the first.
//   stage 0 (inner == 1, long rows): a workgroup per (row, block) scans its block a tile of
//            1024 at a time: coalesced loads into workgroup memory, each thread sums 4
//            neighbours, a scan of the 256 thread sums, each thread rescans its 4, coalesced
//            stores; a running carry joins the tiles;
//   stage 1 (columns): a thread per (outer, block, inner) walks its block; neighbouring
//            threads read neighbouring elements when inner > 1;
//   stage 2: a thread per (outer, inner) walks the block totals;
//   stage 3: a thread per element.
struct Params {
    outer: u32, len: u32, inner: u32, stage: u32,
    in_off: u32, reverse: u32, block: u32, nblocks: u32,
    gx: u32, is_int: u32, _p0: u32, _p1: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;
@group(0) @binding(3) var<storage, read_write> s: array<u32>;  // block totals (a dummy with one block)

const WG: u32 = 256u;
const E: u32 = 4u;  // elements per thread per tile
const TILE: u32 = 1024u;
var<workgroup> tile: array<u32, 1024>;
var<workgroup> part: array<u32, 256>;

// 0 is 0u in both types
fn add(a: u32, b: u32) -> u32 {
    if (P.is_int != 0u) { return bitcast<u32>(bitcast<i32>(a) + bitcast<i32>(b)); }
    return bitcast<u32>(bitcast<f32>(a) + bitcast<f32>(b));
}

// the element of the axis at scan position q (and the reverse)
fn at(q: u32) -> u32 { return select(q, P.len - 1u - q, P.reverse != 0u); }

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = wg.x + wg.y * P.gx;  // workgroup index
    let o = g * WG + lid;        // thread index
    if (P.stage == 0u) {
        if (g >= P.outer * P.nblocks) { return; }  // uniform: the same for the whole workgroup
        let row = g / P.nblocks;
        let b = g % P.nblocks;
        let lo = b * P.block;
        let hi = min(P.len, lo + P.block);
        let xo = P.in_off + row * P.len;
        let yo = row * P.len;
        var carry = 0u;
        for (var t0 = lo; t0 < hi; t0 += TILE) {
            for (var e = 0u; e < E; e++) {
                let q = t0 + e * WG + lid;
                var v = 0u;
                if (q < hi) { v = x[xo + at(q)]; }
                tile[e * WG + lid] = v;
            }
            workgroupBarrier();
            var sum = 0u;
            for (var e = 0u; e < E; e++) { sum = add(sum, tile[lid * E + e]); }
            part[lid] = sum;
            workgroupBarrier();
            for (var d = 1u; d < WG; d <<= 1u) {  // inclusive scan of the thread sums
                var v = part[lid];
                if (lid >= d) { v = add(part[lid - d], v); }
                workgroupBarrier();
                part[lid] = v;
                workgroupBarrier();
            }
            var run = carry;
            if (lid > 0u) { run = add(run, part[lid - 1u]); }
            for (var e = 0u; e < E; e++) {  // this thread's own 4 slots
                run = add(run, tile[lid * E + e]);
                tile[lid * E + e] = run;
            }
            carry = add(carry, part[WG - 1u]);
            workgroupBarrier();
            for (var e = 0u; e < E; e++) {
                let q = t0 + e * WG + lid;
                if (q < hi) { y[yo + at(q)] = tile[e * WG + lid]; }
            }
            workgroupBarrier();  // before the next tile writes tile[] and part[]
        }
        if (P.nblocks > 1u && lid == 0u) { s[g] = carry; }
        return;
    }
    if (P.stage == 1u) {
        if (o >= P.outer * P.nblocks * P.inner) { return; }
        let i = o % P.inner;
        let b = (o / P.inner) % P.nblocks;
        let base = (o / (P.inner * P.nblocks)) * P.len * P.inner + i;
        let hi = min(P.len, b * P.block + P.block);
        var run = 0u;
        for (var q = b * P.block; q < hi; q++) {
            let k = base + at(q) * P.inner;
            run = add(run, x[P.in_off + k]);
            y[k] = run;
        }
        if (P.nblocks > 1u) { s[o] = run; }  // o is (outer, block, inner)
        return;
    }
    if (P.stage == 2u) {
        if (o >= P.outer * P.inner) { return; }
        let first = (o / P.inner) * P.nblocks * P.inner + o % P.inner;
        var run = 0u;
        for (var b = 0u; b < P.nblocks; b++) {
            let v = s[first + b * P.inner];
            s[first + b * P.inner] = run;
            run = add(run, v);
        }
        return;
    }
    // stage 3: y[outer, k, inner] += the total of the blocks before k's
    if (o >= P.outer * P.len * P.inner) { return; }
    let i = o % P.inner;
    let k = (o / P.inner) % P.len;
    let b = at(k) / P.block;  // at() is its own inverse
    if (b > 0u) { y[o] = add(s[((o / (P.inner * P.len)) * P.nblocks + b) * P.inner + i], y[o]); }
}
