// What the row kernels share (ops/row.c puts it after their header and before each kernel's
// own bindings and main: ops/softmax.wgsl, ops/norm.wgsl, ops/cross_entropy.wgsl): ops along
// the last axis of a contiguous [rows, n] tensor, a team of TEAM threads per row, 256 / TEAM
// rows per workgroup (short rows share a workgroup, so millions of them need few workgroups).
// The header (wgml_row_launch) specialises the module:
//   OP (the node's op code) and FLAGS (1 weight, 2 bias), the codes of the kernel's ops;
//   V, U, VW, LANES: a row is read in units of V = vec4<f32> (VW = 4) when n and the offsets
//     are multiples of 4, else f32; U is V's u32 twin, LANES the element index of each lane;
//   WV: the unit of w and b (f32 where they hold one value per row);
//   TEAM: threads per row, a power of two up to 256;
//   flag_label(row): the losses record a label that is not a class index in the context's GPU
//     error flags (bit 1 of word 0; word 1 keeps the first such row); a no-op for other ops;
//   CACHED, K: when a row fits in K units per thread, each thread loads its units once into
//     registers and every pass works on them: x is read from memory once. Otherwise each
//     pass reads x again.
// Every kernel binds the rows x at binding 1 (the helpers below read it); the rest are its own.
// A kernel's main starts with past_rows, team_of (its thread's row) and load_row (the cache).
// Code shared by both widths converts with V(...) and vec4<f32>(...), which are splats or
// identities, so the module type-checks for either.
struct Params {
    rows: u32, n: u32, r_off: u32, _p1: u32,  // r_off: an addend's offset (the norms' gradients); the op and flags are the header's OP and FLAGS
    in_off: u32, w_off: u32, b_off: u32, gx: u32,
    eps: f32, neg_inf: f32, nan: f32, _p2: u32,  // WGSL constants cannot be infinite or NaN
}
@group(0) @binding(0) var<uniform> P: Params;

const WG: u32 = 256u;
var<workgroup> red: array<vec2<f32>, 256>;  // the reductions' partials: two sums at once
var<workgroup> red16: array<vec2<f32>, 16>;
const ROWS: u32 = WG / TEAM;  // rows per workgroup

fn hsum(v: V) -> f32 {
    let q = vec4<f32>(v);
    return select(q.x, (q.x + q.y) + (q.z + q.w), VW == 4u);
}
fn hmax(v: V) -> f32 { let q = vec4<f32>(v); return max(max(q.x, q.y), max(q.z, q.w)); }
fn lane(v: V, k: u32) -> f32 { return vec4<f32>(v)[k]; }

// NaN as +inf, by its bits (Mesa/LLVM fold v != v to false, max() may drop a NaN): either
// makes the row's max +inf, and that row's outputs NaN
fn no_nan(v: V) -> V {
    return select(v, V(-P.neg_inf), (bitcast<U>(v) & U(0x7fffffffu)) > U(0x7f800000u));
}

// Whether the workgroup's rows all lie past the last: main returns at once. Uniform for the
// workgroup, which the barriers after it need (a value of team_of's, which depends on the
// thread, would not be to a uniformity analysis such as Tint's).
fn past_rows(wg: vec3<u32>) -> bool { return (wg.x + wg.y * P.gx) * ROWS >= P.rows; }

// A thread's place: its team's row, and the row's units. A team past the last row runs with
// an empty row (nu = 0: every thread reaches the barriers) and writes nothing.
struct Team {
    row: u32,
    live: bool,  // row < P.rows
    t: u32,      // this thread's place in its team
    nu: u32,     // units per row (0 past the last row)
    xo: u32,     // the row's first unit in x
    yo: u32,     // ... in y
    iters: u32,  // units per thread: K when CACHED, a constant, so the passes' loops unroll
}

fn team_of(wg: vec3<u32>, lid: u32) -> Team {
    let first = (wg.x + wg.y * P.gx) * ROWS;
    let row = first + lid / TEAM;
    let live = row < P.rows;
    let nu = select(0u, P.n / VW, live);
    return Team(row, live, lid % TEAM, nu, P.in_off / VW + row * nu, row * nu,
                select((nu + TEAM - 1u) / TEAM, K, CACHED));
}

// When CACHED: this thread's units into the cache, cache[i] = unit t + i * TEAM of its row, all
// loads first, independent of each other. Units past the row hold -inf, which softmax's passes
// need not skip (max, exp(-inf - mx) = 0); the others skip them.
fn load_row(cache: ptr<function, array<V, K>>, tm: Team) {
    if (CACHED) {
        for (var i = 0u; i < K; i++) {
            let j = tm.t + i * TEAM;
            if (j < tm.nu) { (*cache)[i] = x[tm.xo + j]; } else { (*cache)[i] = V(P.neg_inf); }
        }
    }
}

// unit j = t + i * TEAM of the row at xo: from the cache, or from memory
fn unit(cache: ptr<function, array<V, K>>, i: u32, j: u32, xo: u32) -> V {
    if (CACHED) { return (*cache)[i]; }
    return x[xo + j];
}

// The row's max and sum of exp(x - max) (softmax, cross-entropy), in every thread of the team;
// both NaN when the row holds +inf or NaN, or is all -inf (exp(x - mx) = exp(-inf + inf)).
// keep_exp: when CACHED, the cache keeps exp(x - max) for the write pass instead of x.
fn max_sumexp(cache: ptr<function, array<V, K>>, tm: Team, lid: u32, keep_exp: bool) -> vec2<f32> {
    var mx: f32;
    var sum: f32;
    if (CACHED) {
        var mv = V(P.neg_inf);
        for (var i = 0u; i < K; i++) { mv = max(mv, no_nan((*cache)[i])); }
        mx = wg_max(hmax(mv), lid);
        // exp(-inf - mx) = 0 for the fill
        var sv = V(0.0);
        for (var i = 0u; i < K; i++) {
            let e = exp((*cache)[i] - mx);
            if (keep_exp) { (*cache)[i] = e; }
            sv += e;
        }
        sum = wg_sum(vec2<f32>(hsum(sv), 0.0), lid).x;
    } else {
        // one pass: a running max and sum of exp(x - max) per thread, rescaled when the
        // max grows (one exp per unit for the rescale)
        var mt = P.neg_inf;
        var s = 0.0;
        for (var j = tm.t; j < tm.nu; j += TEAM) {
            let v = no_nan(x[tm.xo + j]);
            let mn = max(mt, hmax(v));
            // all -inf so far: nothing to add (exp(-inf + inf) would be NaN)
            s = select(s * exp(mt - mn) + hsum(exp(v - mn)), 0.0, mn == P.neg_inf);
            mt = mn;
        }
        mx = wg_max(mt, lid);
        sum = wg_sum(vec2<f32>(select(s * exp(mt - mx), 0.0, mt == P.neg_inf), 0.0), lid).x;
    }
    if (mx == -P.neg_inf) { mx = P.nan; sum = P.nan; }
    return vec2<f32>(mx, sum);
}

// exp(x - mx) of unit j = t + i * TEAM: from the cache max_sumexp(keep_exp = true) left, or
// from memory
fn exp_unit(cache: ptr<function, array<V, K>>, i: u32, j: u32, xo: u32, mx: f32) -> V {
    if (CACHED) { return (*cache)[i]; }
    return exp(x[xo + j] - mx);
}

// Team sums (of two values at once) and max, the result in every thread of the team.
// A whole workgroup: 256 -> 16 partials -> each thread combines the 16 itself, two barriers
// instead of a tree's eight; red16 is rewritten only after the next call's first barrier,
// which every thread reaches after reading it. Smaller teams: a tree within each team's part
// of red[], and a last barrier before the next call writes red[] again.
fn wg_sum(v: vec2<f32>, lid: u32) -> vec2<f32> {
    red[lid] = v;
    if (TEAM < WG) {
        workgroupBarrier();
        for (var s = TEAM / 2u; s > 0u; s >>= 1u) {
            if (lid % TEAM < s) { red[lid] += red[lid + s]; }
            workgroupBarrier();
        }
        let r = red[lid - lid % TEAM];
        workgroupBarrier();
        return r;
    }
    workgroupBarrier();
    if (lid < 16u) {
        var a = vec2<f32>(0.0);
        for (var k = 0u; k < 16u; k++) { a += red[lid + 16u * k]; }  // 16 lanes, distinct banks
        red16[lid] = a;
    }
    workgroupBarrier();
    var s = vec2<f32>(0.0);
    for (var k = 0u; k < 16u; k++) { s += red16[k]; }
    return s;
}

fn wg_max(v: f32, lid: u32) -> f32 {
    red[lid] = vec2<f32>(v, 0.0);
    if (TEAM < WG) {
        workgroupBarrier();
        for (var s = TEAM / 2u; s > 0u; s >>= 1u) {
            if (lid % TEAM < s) { red[lid].x = max(red[lid].x, red[lid + s].x); }
            workgroupBarrier();
        }
        let r = red[lid - lid % TEAM].x;
        workgroupBarrier();
        return r;
    }
    workgroupBarrier();
    if (lid < 16u) {
        var a = red[lid].x;
        for (var k = 1u; k < 16u; k++) { a = max(a, red[lid + 16u * k].x); }
        red16[lid] = vec2<f32>(a, 0.0);
    }
    workgroupBarrier();
    var s = red16[0].x;
    for (var k = 1u; k < 16u; k++) { s = max(s, red16[k].x); }
    return s;
}
