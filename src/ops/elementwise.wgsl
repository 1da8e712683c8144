// The elementwise functions of the op table (ops/table.c), one text for every kernel that
// uses them: the fused kernels and the matmul epilogue. The includer defines
//   alias T (f32 or vec4<f32>), TU, TI and TB (the u32, i32 and bool types of the same shape), and
//   fn wgml_nan() -> T and fn wgml_inf() -> T (WGSL constants may be neither, so they come
//   from a kernel's parameters).
// NaN by its bits: Mesa/LLVM fold x != x to false. The masks are TU(...), not u32
// literals: WGSL's & and > do not mix a vector with a scalar
fn is_nan(x: T) -> TB { return (bitcast<TU>(x) & TU(0x7fffffffu)) > TU(0x7f800000u); }
fn wgml_tanh(x: T) -> T { return select(tanh(x), sign(x), abs(x) > T(10.0)); }
fn wgml_sigmoid(x: T) -> T { return T(1.0) / (T(1.0) + exp(-x)); }
// NaN passes by its bits: NVIDIA's compiler turned select(x, 0, x < 0) into max(x, 0), 0 for NaN
fn wgml_relu(x: T) -> T { return select(max(x, T(0.0)), x, is_nan(x)); }
// below u = -10, 1 + wgml_tanh(u) is 0: so is gelu, also at x = -inf (not -inf * 0 = NaN)
fn wgml_gelu(x: T) -> T {
    let u = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
    return select(T(0.5) * x * (T(1.0) + wgml_tanh(u)), T(0.0), u < T(-10.0));
}
// below x = -89, sigmoid is 0: so is silu, also at x = -inf (not -inf * 0 = NaN). The test
// is on x: Mesa folds select(x * s, 0, s == 0) to x * s
fn wgml_silu(x: T) -> T { return select(x * wgml_sigmoid(x), T(0.0), x < T(-100.0)); }
// max(x, 0) + log(1 + e) with e = exp(-|x|): no overflow, and x itself for large x. For small
// e the series e - e^2/2 + e^3/3 keeps what 1 + e would round away (WGSL has no log1p); NaN
// is passed by its bits (WGSL's max would drop it)
fn wgml_softplus(x: T) -> T {
    let e = exp(-abs(x));
    let l = select(log(T(1.0) + e), e * (T(1.0) - e * (T(0.5) - e / T(3.0))), e < T(0.01));
    return select(max(x, T(0.0)) + l, x, is_nan(x));
}
// NaN wins, as in NumPy (WGSL's max and min return the other operand)
fn wgml_maximum(a: T, b: T) -> T { return select(max(a, b), a + b, is_nan(a) | is_nan(b)); }
fn wgml_minimum(a: T, b: T) -> T { return select(min(a, b), a + b, is_nan(a) | is_nan(b)); }
fn wgml_clamp(x: T, lo: T, hi: T) -> T { return wgml_minimum(wgml_maximum(x, lo), hi); }
// C's pow (C99 F.9.4.4): negative bases with integer exponents keep their sign; x^0 = 1
// and 1^y = 1 even for NaN. WGSL's pow is defined only for 0 < x < inf and finite y
// (lavapipe's gives 0 for a NaN base and for 0^-2.5), so the other limits are taken here
fn wgml_pow(x: T, y: T) -> T {
    let a = abs(x);
    let inf = wgml_inf();
    let y_inf = abs(y) == inf;
    let is_int = (fract(y) == T(0.0)) & !y_inf;
    let odd = is_int & (fract(y * T(0.5)) != T(0.0));
    let m0 = pow(a, y);
    let m1 = select(m0, select(T(0.0), inf, y < T(0.0)), a == T(0.0));
    let m2 = select(m1, select(T(0.0), inf, y > T(0.0)), a == inf);
    let m = select(m2, select(T(0.0), inf, (a > T(1.0)) == (y > T(0.0))), y_inf);
    // the sign bit, so that -0 and -inf count as negative
    let neg = (bitcast<TU>(x) & TU(0x80000000u)) != TU(0u);
    let r0 = select(m, -m, neg & odd);
    // a negative finite base to a finite non-integer power
    let r = select(r0, wgml_nan(), neg & !is_int & !y_inf & (a > T(0.0)) & (a < inf));
    let one = (y == T(0.0)) | (x == T(1.0)) | ((a == T(1.0)) & y_inf);
    return select(select(r, x + y, is_nan(x) | is_nan(y)), T(1.0), one);
}
// i32 tensors sit in f32 buffers as their bits: a cast reinterprets them, then converts.
// f32 -> i32 truncates toward zero, saturates to the i32 range (2147483520 is the largest f32
// below 2^31: from 2^31 on, 2147483647), NaN -> 0
fn wgml_i32_to_f32(x: T) -> T { return T(bitcast<TI>(x)); }
fn wgml_f32_to_i32(x: T) -> T {
    let i = select(TI(clamp(x, T(-2147483648.0), T(2147483520.0))), TI(2147483647), x >= T(2147483648.0));
    return bitcast<T>(select(i, TI(0), is_nan(x)));
}
// f32 -> the nearest f16 value (ties to even), as an f32: integer arithmetic, so every adapter
// rounds alike (WGSL leaves a conversion's rounding and overflow to the implementation).
// Normal halves keep 10 fraction bits (a carry moves the exponent up); below 2^-14 the
// subnormal halves are multiples of 2^-24 (round() takes ties to even); from 65520 on (half
// a step past 65504) +-inf; NaN stays NaN
fn wgml_round_f16(x: T) -> T {
    let u = bitcast<TU>(x);
    let a = u & TU(0x7fffffffu);
    let normal = bitcast<T>((u + TU(0xfffu) + ((u >> TU(13u)) & TU(1u))) & TU(0xffffe000u));
    let sub = round(x * T(16777216.0)) * T(5.9604644775390625e-8);
    let r = select(normal, sub, a < TU(0x38800000u));
    let big = select(r, select(-wgml_inf(), wgml_inf(), (u & TU(0x80000000u)) == TU(0u)), a >= TU(0x477ff000u));
    return select(big, x, a > TU(0x7f800000u));
}
// erf: odd; below 0.5 its Taylor series to z^9 (the first term left out is below 7.4e-7 of
// the sum), above it 1 - erfc. erfc(z) for z >= 0 is the Chebyshev fit published with
// fractional error < 1.2e-7 (Numerical Recipes' erfcc), so the exact GELU keeps
// 1 + erf(x) = erfc(-x) for negative x without cancelling. The tests hold erf and the GELU to
// 1e-4 of C's erf/erfc (test_op_table) and gelu(-6) = -5.9e-9 to 1e-3 (test_select)
fn wgml_erfc_pos(z: T) -> T {
    let t = T(1.0) / (T(1.0) + T(0.5) * z);
    let p = T(-1.26551223) + t * (T(1.00002368) + t * (T(0.37409196) + t * (T(0.09678418) + t * (T(-0.18628806) +
            t * (T(0.27886807) + t * (T(-1.13520398) + t * (T(1.48851587) + t * (T(-0.82215223) + t * T(0.17087277)))))))));
    return t * exp(-z * z + p);
}
fn wgml_erf(x: T) -> T {
    let z = abs(x);
    let z2 = z * z;
    let series = T(1.1283791670955126) * z * (T(1.0) - z2 * (T(1.0 / 3.0) - z2 * (T(0.1) - z2 * (T(1.0 / 42.0) - z2 * T(1.0 / 216.0)))));
    let r = select(T(1.0) - wgml_erfc_pos(z), series, z < T(0.5));
    // erf(+-inf) = +-1 (exp(-inf) is 0); NaN passes
    return select(sign(x) * r, x, is_nan(x));
}
// x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), and 1 + erf(z) is erfc(-z): erfc(|z|) for x < 0 (the
// left tail, no cancelling) and 2 - erfc(|z|) for x >= 0, one erfc of fractional error
// < 1.2e-7 for every x. Near 0, where erf itself needs its series (1 - erfc cancels), 1 + erf
// is near 1 and erfc's absolute error is its relative one: no series is needed, and with none
// the kernels that are mostly this function (the mixed-precision MLP's GELU) do a third less
// arithmetic. 0 at -inf (not -inf * 0). test_op_table holds it to C's erf, test_select
// gelu(-6) = -5.9e-9 to 1e-3.
fn wgml_gelu_exact(x: T) -> T {
    let e = wgml_erfc_pos(abs(x) * T(0.7071067811865476));
    let one_plus = select(e, T(2.0) - e, x >= T(0.0));
    return select(T(0.5) * x * one_plus, T(0.0), x < T(-30.0));
}
// d/dx x Phi(x) = Phi(x) + x phi(x), phi(x) = e^(-x^2/2) / sqrt(2 pi): the exact GELU's gradient
// factor, where a matmul's epilogue multiplies the upstream gradient by it (the GEMM that
// makes the gradient of a GELU's output). 2 Phi(x) as wgml_gelu_exact takes it; 0 below -30
// and 1 above 30, where x phi(x) would be inf * 0 at the infinities.
fn wgml_gelu_exact_grad(x: T) -> T {
    let e = wgml_erfc_pos(abs(x) * T(0.7071067811865476));
    let one_plus = select(e, T(2.0) - e, x >= T(0.0));
    let d = T(0.5) * one_plus + x * (T(0.3989422804014327) * exp(T(-0.5) * x * x));
    return select(select(d, T(1.0), x > T(30.0)), T(0.0), x < T(-30.0));
}
// sin and cos of +-inf are NaN (some drivers return a number)
fn wgml_sin(x: T) -> T { return select(sin(x), wgml_nan(), abs(x) == wgml_inf()); }
fn wgml_cos(x: T) -> T { return select(cos(x), wgml_nan(), abs(x) == wgml_inf()); }
// comparisons give masks of 0 and 1; NaN compares false (ne: true) by its bits, since Mesa
// and LLVM may assume no NaN in a comparison
fn wgml_mask(b: TB) -> T { return select(T(0.0), T(1.0), b); }
fn wgml_ordered(a: T, b: T) -> TB { return !(is_nan(a) | is_nan(b)); }
// x != 0 by its bits (+-0 are zero, NaN is not): drivers may fold NaN != 0 to false
fn wgml_nonzero(x: T) -> TB { return (bitcast<TU>(x) & TU(0x7fffffffu)) != TU(0u); }
