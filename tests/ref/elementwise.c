/* The double reference of every elementwise op, found by the op's name (wgml_op_get_info's):
   the op-table test (tests/test_op_table.c) fails for an elementwise op without a line here. */
#include <math.h>
#include <string.h>

#include "ref/ref.h"

#define REF1(f) static double ref_##f(const double *in) { return wgml_ref_##f(in[0]); }
REF1(neg) REF1(abs) REF1(exp) REF1(log) REF1(sqrt) REF1(rsqrt) REF1(tanh) REF1(sigmoid) REF1(relu) REF1(gelu) REF1(silu)
#undef REF1

#define REF2(f) static double ref_##f(const double *in) { return wgml_ref_##f(in[0], in[1]); }
REF2(add) REF2(sub) REF2(mul) REF2(div) REF2(pow) REF2(maximum) REF2(minimum)
#undef REF2

static double ref_copy(const double *in) { return in[0]; }

static double ref_clamp(const double *in) { return wgml_ref_clamp(in[0], in[1], in[2]); }

/* backward's relu mask: the upstream gradient in[1] where in[0] > 0 */
static double ref_relu_grad(const double *in) { return in[0] > 0 ? in[1] : 0.0; }

/* i32 -> f32 rounds to nearest past 2^24; f32 -> i32 truncates, saturates, NaN gives 0 */
static double ref_cast_f32(const double *in) { return (double)(float)in[0]; }

/* f32 -> f16: the nearest half, ties to even; f16 -> f32 exact */
static double ref_cast_f16(const double *in) { return wgml_ref_round_half(in[0]); }

static double ref_cast_i32(const double *in)
{
    double x = in[0];
    return isnan(x) ? 0.0 : x <= -2147483648.0 ? -2147483648.0 : x >= 2147483520.0 ? 2147483520.0 : trunc(x);
}

/* softplus(x) = log(1 + e^x), as max(x, 0) + log(1 + e^-|x|) so that it neither overflows nor
   loses x for large |x| */
static double ref_softplus(const double *in)
{
    double x = in[0];
    if (isnan(x)) return x;
    return fmax(x, 0.0) + log1p(exp(-fabs(x)));
}

/* erf and the exact GELU: C's erf and erfc in double */
static double ref_erf(const double *in) { return erf(in[0]); }

static double ref_gelu_exact(const double *in) { return isinf(in[0]) && in[0] < 0 ? 0.0 : 0.5 * in[0] * erfc(-in[0] / sqrt(2.0)); }

static double ref_sin(const double *in) { return sin(in[0]); }

static double ref_cos(const double *in) { return cos(in[0]); }

static double ref_softsign(const double *in) { return in[0] / (1.0 + fabs(in[0])); }

/* comparisons: 0/1 masks, false when either side is NaN (ne: true) */
#define ORDERED(in) (!isnan(in[0]) && !isnan(in[1]))
static double ref_eq(const double *in) { return ORDERED(in) && in[0] == in[1]; }
static double ref_ne(const double *in) { return !ref_eq(in); }
static double ref_lt(const double *in) { return ORDERED(in) && in[0] < in[1]; }
static double ref_le(const double *in) { return ORDERED(in) && in[0] <= in[1]; }
static double ref_gt(const double *in) { return ORDERED(in) && in[0] > in[1]; }
static double ref_ge(const double *in) { return ORDERED(in) && in[0] >= in[1]; }
#undef ORDERED

/* masked_fill(a, mask, value): value where mask != 0 (NaN included) */
static double ref_masked_fill(const double *in) { return in[1] != 0 ? in[2] : in[0]; }

static const struct {
    const char *name;
    wgml_ref_elementwise_fn f;
} elementwise_refs[] = {
    {"contiguous", ref_copy}, {"detach", ref_copy},   {"cast_f32", ref_cast_f32}, {"cast_i32", ref_cast_i32},
    {"cast_f16", ref_cast_f16}, {"cast_f16_to_f32", ref_copy},
    {"neg", ref_neg},         {"abs", ref_abs},       {"exp", ref_exp},           {"log", ref_log},
    {"sqrt", ref_sqrt},       {"rsqrt", ref_rsqrt},   {"tanh", ref_tanh},         {"sigmoid", ref_sigmoid},
    {"relu", ref_relu},       {"gelu", ref_gelu},     {"silu", ref_silu},         {"softplus", ref_softplus},
    {"clamp", ref_clamp},     {"erf", ref_erf},       {"gelu_exact", ref_gelu_exact}, {"sin", ref_sin},
    {"cos", ref_cos},         {"softsign", ref_softsign}, {"relu_grad", ref_relu_grad}, {"add", ref_add},
    {"sub", ref_sub},         {"mul", ref_mul},       {"div", ref_div},           {"pow", ref_pow},
    {"maximum", ref_maximum}, {"minimum", ref_minimum}, {"eq", ref_eq},           {"ne", ref_ne},
    {"lt", ref_lt},           {"le", ref_le},         {"gt", ref_gt},             {"ge", ref_ge},
    {"masked_fill", ref_masked_fill},
};

wgml_ref_elementwise_fn wgml_ref_elementwise(const char *name)
{
    for (size_t i = 0; name && i < sizeof elementwise_refs / sizeof elementwise_refs[0]; i++)
        if (strcmp(elementwise_refs[i].name, name) == 0) return elementwise_refs[i].f;
    return NULL;
}
