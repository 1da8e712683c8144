/*
 * The subgroup-matrix GEMM (src/ops/matmul/gemm_sgmat_wgsl.c) on Dawn, outside wgml: brings Dawn up
 * with the toggles that open the matrix units, builds the generated WGSL for a list of
 * configs and forms, checks results against a double-precision CPU reference and times them.
 * wgml itself runs on wgpu-native until its Dawn runtime lands; this program is how the
 * generator is tuned and checked meanwhile.
 *
 *   sgmat_gemm parse [--backend null|vulkan]   every form and config through Tint: compiles
 *                                              pipelines, runs nothing (no matrix units needed)
 *   sgmat_gemm check                           awkward sizes, every form and epilogue, batches
 *   sgmat_gemm bench [M N K ta tb] ...         timing sweep over the configs (default shapes:
 *                                              4096^3 in each form and the GPT's)
 *
 * Build: scripts/build_sgmat_bench.sh (Dawn from the pinned wheels, in local/).
 *
 * Error bound of a result (a_k, b_k as given, S = sum_k |a_k b_k|): products of halves are
 * exact in f32, so with f16 storage the error is the f32 summation's, at most K ulps of S in
 * the worst case (2^-23 K S: the matrix units may truncate rather than round); an f32 operand
 * rounded to f16 while staged adds 2^-11 of each of its products (2^-10 S for both). The
 * epilogue's alpha, accumulate and bias each add a rounding of the running value, and GELU
 * (tanh form; slope under 1.13) its own f32 evaluation, 2^-16 (1 + |v|).
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 199309L
#endif
#include "dawn_webgpu.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/sbuf.h"
#include "ops/matmul/gemm_sgmat_wgsl.h"

#define DAWN_TOGGLES_STYPE ((WGPUSType)0x0005000A) /* WGPUSType_DawnTogglesDescriptor in this Dawn */

static WGPUInstance instance;
static WGPUAdapter adapter;
static WGPUDevice device;
static WGPUQueue queue;
static char last_error[2048];
static int subgroup_size;
static uint32_t wg_storage_limit;

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static WGPUStringView sv(const char *s) { return (WGPUStringView){s, SIZE_MAX}; }
static void wait_for(WGPUFuture f)
{
    WGPUFutureWaitInfo w = {f, 0};
    wgpuInstanceWaitAny(instance, 1, &w, UINT64_MAX);
}
static void got_adapter(WGPURequestAdapterStatus s, WGPUAdapter a, WGPUStringView m, void *u1, void *u2)
{
    (void)u1, (void)u2;
    if (s == WGPURequestAdapterStatus_Success) adapter = a;
    else fprintf(stderr, "no adapter: %.*s\n", (int)m.length, m.data);
}
static void got_device(WGPURequestDeviceStatus s, WGPUDevice d, WGPUStringView m, void *u1, void *u2)
{
    (void)u1, (void)u2;
    if (s == WGPURequestDeviceStatus_Success) device = d;
    else fprintf(stderr, "no device: %.*s\n", (int)m.length, m.data);
}
static void uncaptured(WGPUDevice const *d, WGPUErrorType t, WGPUStringView m, void *u1, void *u2)
{
    (void)d, (void)u1, (void)u2;
    snprintf(last_error, sizeof last_error, "error %d: %.*s", (int)t, (int)m.length, m.data);
}
static void scope_popped(WGPUPopErrorScopeStatus s, WGPUErrorType t, WGPUStringView m, void *u1, void *u2)
{
    (void)s, (void)u2;
    if (t != WGPUErrorType_NoError) snprintf((char *)u1, sizeof last_error, "%.*s", (int)m.length, m.data);
}
static int map_ok;
static void mapped(WGPUMapAsyncStatus s, WGPUStringView m, void *u1, void *u2) { (void)m, (void)u1, (void)u2; map_ok = s == WGPUMapAsyncStatus_Success; }
static void work_done(WGPUQueueWorkDoneStatus s, WGPUStringView m, void *u1, void *u2) { (void)s, (void)m, (void)u1, (void)u2; }

/* the adapter's f16 -> f32 subgroup-matrix shapes */
typedef struct { int m, n, k; } shape3;
static shape3 sm_shapes[8];
static int n_sm_shapes;

/* Dawn of the pinned wheel: instance and adapter toggles open experimental features and f16
   on NVIDIA; the device skips validation and robustness (wgml's trusted modules) unless
   `checked` (parsing wants Tint's full checks). */
static int bring_up(WGPUBackendType backend, bool checked)
{
    static const char *inst_toggles[] = {"allow_unsafe_apis", "vulkan_enable_f16_on_nvidia", "use_vulkan_memory_model"};
    WGPUDawnTogglesDescriptor it = {.chain = {.sType = DAWN_TOGGLES_STYPE}, .enabledToggleCount = 3, .enabledToggles = inst_toggles};
    WGPUInstanceFeatureName timed = WGPUInstanceFeatureName_TimedWaitAny;
    WGPUInstanceDescriptor id = {.nextInChain = &it.chain, .requiredFeatureCount = 1, .requiredFeatures = &timed};
    if (!(instance = wgpuCreateInstance(&id))) return fprintf(stderr, "no Dawn instance\n"), 1;
    WGPUDawnTogglesDescriptor at = it;
    WGPURequestAdapterOptions ao = {.nextInChain = &at.chain, .powerPreference = WGPUPowerPreference_HighPerformance,
                                    .backendType = backend};
    wait_for(wgpuInstanceRequestAdapter(instance, &ao,
                                        (WGPURequestAdapterCallbackInfo){.mode = WGPUCallbackMode_WaitAnyOnly, .callback = got_adapter}));
    if (!adapter) return 1;
    WGPUAdapterPropertiesSubgroupMatrixConfigs smc = {.chain = {.sType = WGPUSType_AdapterPropertiesSubgroupMatrixConfigs}};
    WGPUAdapterInfo info = {.nextInChain = &smc.chain};
    wgpuAdapterGetInfo(adapter, &info);
    printf("adapter: %.*s (%.*s), backend %d, subgroups %u..%u\n", (int)info.device.length, info.device.data,
           (int)info.description.length, info.description.data, (int)info.backendType, info.subgroupMinSize, info.subgroupMaxSize);
    subgroup_size = (int)info.subgroupMaxSize;
    bool has_sm = wgpuAdapterHasFeature(adapter, WGPUFeatureName_ChromiumExperimentalSubgroupMatrix);
    /* The library's config is five 32-bit words {component, result, M, N, K} (the cdef's
       seven-field struct does not match it, DESIGN.md): read words, and refuse a layout that
       does not look like that. */
    const uint32_t *w = (const uint32_t *)smc.configs;
    for (size_t i = 0; has_sm && i < smc.configCount; i++) {
        const uint32_t *c = w + 5 * i;
        if (c[0] < 1 || c[0] > 6 || c[1] < 1 || c[1] > 6 || !c[2] || c[2] > 64 || !c[3] || c[3] > 64 || !c[4] || c[4] > 64) {
            fprintf(stderr, "subgroup-matrix configs not in the expected layout\n");
            n_sm_shapes = 0;
            break;
        }
        printf("  subgroup matrix %u -> %u: %ux%ux%u\n", c[0], c[1], c[2], c[3], c[4]);
        if (c[0] == WGPUSubgroupMatrixComponentType_F16 && c[1] == WGPUSubgroupMatrixComponentType_F32 && n_sm_shapes < 8)
            sm_shapes[n_sm_shapes++] = (shape3){(int)c[2], (int)c[3], (int)c[4]};
    }
    if (!has_sm) printf("  no subgroup matrices on this adapter\n");
    WGPULimits lim = {0};
    wgpuAdapterGetLimits(adapter, &lim);
    wg_storage_limit = lim.maxComputeWorkgroupStorageSize;
    printf("  workgroup storage %u bytes, invocations %u\n", lim.maxComputeWorkgroupStorageSize, lim.maxComputeInvocationsPerWorkgroup);
    WGPUFeatureName feats[3] = {WGPUFeatureName_ShaderF16, WGPUFeatureName_Subgroups, WGPUFeatureName_ChromiumExperimentalSubgroupMatrix};
    static const char *fast_toggles[] = {"allow_unsafe_apis", "skip_validation", "disable_robustness", "disable_workgroup_init"};
    WGPUDawnTogglesDescriptor dt = {.chain = {.sType = DAWN_TOGGLES_STYPE}, .enabledToggleCount = checked ? 1 : 4, .enabledToggles = fast_toggles};
    WGPUDeviceDescriptor dd = {.nextInChain = &dt.chain, .requiredFeatureCount = has_sm ? 3 : 2, .requiredFeatures = feats,
                               .requiredLimits = &lim, .uncapturedErrorCallbackInfo = {.callback = uncaptured}};
    wait_for(wgpuAdapterRequestDevice(adapter, &dd,
                                      (WGPURequestDeviceCallbackInfo){.mode = WGPUCallbackMode_WaitAnyOnly, .callback = got_device}));
    if (!device) return 1;
    queue = wgpuDeviceGetQueue(device);
    return 0;
}

static WGPUBuffer make_buffer(uint64_t size, WGPUBufferUsage usage)
{
    WGPUBufferDescriptor d = {.size = (size + 15) & ~(uint64_t)15, .usage = usage};
    return wgpuDeviceCreateBuffer(device, &d);
}

/* A pipeline from WGSL, or NULL with the compiler's message in *why */
static WGPUComputePipeline compile(const char *code, char *why)
{
    why[0] = 0;
    wgpuDevicePushErrorScope(device, WGPUErrorFilter_Validation);
    wgpuDevicePushErrorScope(device, WGPUErrorFilter_Internal);
    WGPUShaderSourceWGSL src = {.chain = {.sType = WGPUSType_ShaderSourceWGSL}, .code = sv(code)};
    WGPUShaderModuleDescriptor md = {.nextInChain = &src.chain};
    WGPUShaderModule m = wgpuDeviceCreateShaderModule(device, &md);
    WGPUComputePipelineDescriptor pd = {.compute = {.module = m, .entryPoint = sv("main")}};
    WGPUComputePipeline p = wgpuDeviceCreateComputePipeline(device, &pd);
    for (int i = 0; i < 2; i++)
        wait_for(wgpuDevicePopErrorScope(device, (WGPUPopErrorScopeCallbackInfo){.mode = WGPUCallbackMode_WaitAnyOnly,
                                                                                  .callback = scope_popped, .userdata1 = why}));
    wgpuShaderModuleRelease(m);
    if (why[0] || last_error[0]) {
        if (!why[0]) snprintf(why, sizeof last_error, "%s", last_error);
        last_error[0] = 0;
        if (p) wgpuComputePipelineRelease(p);
        return NULL;
    }
    return p;
}

static void finish(void)
{
    wait_for(wgpuQueueOnSubmittedWorkDone(queue, (WGPUQueueWorkDoneCallbackInfo){.mode = WGPUCallbackMode_WaitAnyOnly, .callback = work_done}));
}

static void read_buffer(WGPUBuffer src, void *dst, uint64_t size)
{
    uint64_t padded = (size + 15) & ~(uint64_t)15;
    WGPUBuffer st = make_buffer(padded, WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst);
    WGPUCommandEncoder e = wgpuDeviceCreateCommandEncoder(device, NULL);
    wgpuCommandEncoderCopyBufferToBuffer(e, src, 0, st, 0, padded);
    WGPUCommandBuffer cb = wgpuCommandEncoderFinish(e, NULL);
    wgpuQueueSubmit(queue, 1, &cb);
    wait_for(wgpuBufferMapAsync(st, WGPUMapMode_Read, 0, padded,
                                (WGPUBufferMapCallbackInfo){.mode = WGPUCallbackMode_WaitAnyOnly, .callback = mapped}));
    if (map_ok) memcpy(dst, wgpuBufferGetConstMappedRange(st, 0, padded), size);
    wgpuBufferUnmap(st);
    wgpuBufferRelease(st);
    wgpuCommandBufferRelease(cb);
    wgpuCommandEncoderRelease(e);
}

/* IEEE half from float, round to nearest even (subnormals flushed: the test data is O(1)) */
static uint16_t to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t s = (x >> 16) & 0x8000, m = x & 0x7fffff;
    int e = (int)((x >> 23) & 0xff) - 127 + 15;
    if (e <= 0) return (uint16_t)s;
    uint32_t r = m >> 13, rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)((s | ((uint32_t)e << 10)) + r);
}
static float from_half(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    uint32_t x = e ? s | ((e - 15 + 127) << 23) | (m << 13) : s;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float uniform_pm1(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

enum { ACT_NONE, ACT_RELU, ACT_GELU };
static const char *act_wgsl[] = {
    NULL,
    "fn act(v: f32) -> f32 { return max(v, 0.0); }",
    "fn act(v: f32) -> f32 { return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }",
};
static double act_ref(int act, double v)
{
    if (act == ACT_RELU) return v > 0 ? v : 0;
    if (act == ACT_GELU) return 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    return v;
}

/* One GEMM problem as wgml's matmul hands it over (ops/matmul/matmul.h's wgml_gemm_args) */
typedef struct problem {
    int64_t M, N, K, L0, L1; /* batch L0 x L1 */
    bool ta, tb, a_f16, b_f16;
    bool a_bcast0, b_bcast1; /* A shared along L0, B along L1 (stride 0) */
    int act;
    bool bias, accumulate;
    float alpha;
    int split; /* > 1: K cut into that many chunks, run as a batch into partials, summed here */
} problem;
/* SGMAT_C_F16=1 (bench): C stored as halves, every result rounded by the epilogue */
static bool c_f16;
/* SGMAT_C_VEC=1: results 8 a lane as vectors where wgml would take them (N a multiple of 8,
   C of halves or an activation; not split K's partials); "cv" in a config's name says it was
   asked, not that the problem took it */
static bool c_vec_wanted(void) { return getenv("SGMAT_C_VEC") && atoi(getenv("SGMAT_C_VEC")); }
/* SGMAT_HILO=1: f32 operands as hi and lo halves, three products (the config's hilo); the
   operands' maxima by wgml_sgmat_max_abs_wgsl's kernel */
static bool hilo_wanted(void) { return getenv("SGMAT_HILO") && atoi(getenv("SGMAT_HILO")); }
/* the worst error of the last check relative to sum_k |a_k b_k| (plus what the epilogue adds) */
static double last_rel;

typedef struct operands_host {
    float *a, *b, *bias, *c0; /* values as the GPU sees them before any f16 rounding of f32 storage */
    int64_t a_bs0, a_bs1, b_bs0, b_bs1, lda, ldb, a_elems, b_elems;
} operands_host;

static void put_params(uint32_t *p, const problem *q, const operands_host *h, int64_t K, int64_t batch, int64_t L1,
                       int64_t a_bs0, int64_t b_bs0, uint32_t gx, uint32_t c_off)
{
    memset(p, 0, 80);
    p[0] = (uint32_t)q->M, p[1] = (uint32_t)q->N, p[2] = (uint32_t)K, p[3] = (uint32_t)batch;
    p[4] = (uint32_t)h->lda, p[5] = (uint32_t)h->ldb, p[6] = 0, p[7] = 0;
    p[8] = (uint32_t)a_bs0, p[9] = (uint32_t)b_bs0, p[10] = c_off, p[11] = q->bias;
    p[12] = 0, p[13] = gx;
    memcpy(&p[14], &q->alpha, 4);
    p[15] = q->accumulate;
    p[16] = (uint32_t)h->a_bs1, p[17] = (uint32_t)h->b_bs1, p[18] = L1 > 1 ? (uint32_t)L1 : 1u;
}

typedef struct gpu_run {
    WGPUBuffer params, a, b, bias, c;
    WGPUBindGroup group;
    uint32_t gx, gy, gz;
} gpu_run;

static WGPUBuffer upload(const void *data, uint64_t size)
{
    WGPUBuffer b = make_buffer(size, WGPUBufferUsage_Storage | WGPUBufferUsage_CopyDst | WGPUBufferUsage_CopySrc);
    uint64_t padded = (size + 15) & ~(uint64_t)15;
    char *tmp = calloc(1, padded);
    memcpy(tmp, data, size);
    wgpuQueueWriteBuffer(queue, b, 0, tmp, padded);
    free(tmp);
    return b;
}

static WGPUBuffer upload_operand(const float *v, int64_t n, bool f16)
{
    if (!f16) return upload(v, (uint64_t)n * 4);
    uint16_t *h = malloc((size_t)n * 2 + 2);
    for (int64_t i = 0; i < n; i++) h[i] = to_half(v[i]);
    WGPUBuffer b = upload(h, (uint64_t)n * 2);
    free(h);
    return b;
}

static void dispatch(WGPUComputePipeline pipe, const gpu_run *r, int reps)
{
    WGPUCommandEncoder e = wgpuDeviceCreateCommandEncoder(device, NULL);
    WGPUComputePassEncoder c = wgpuCommandEncoderBeginComputePass(e, NULL);
    wgpuComputePassEncoderSetPipeline(c, pipe);
    wgpuComputePassEncoderSetBindGroup(c, 0, r->group, 0, NULL);
    for (int i = 0; i < reps; i++) wgpuComputePassEncoderDispatchWorkgroups(c, r->gx, r->gy, r->gz);
    wgpuComputePassEncoderEnd(c);
    WGPUCommandBuffer cb = wgpuCommandEncoderFinish(e, NULL);
    wgpuQueueSubmit(queue, 1, &cb);
    wgpuCommandBufferRelease(cb);
    wgpuComputePassEncoderRelease(c);
    wgpuCommandEncoderRelease(e);
}

/* Host data for q: operands stored contiguously in their stored layout, random in [-1, 1]
   (rounded to f16 where stored as f16), broadcast operands with one matrix. */
static void make_host(const problem *q, operands_host *h)
{
    int64_t am = q->ta ? q->K : q->M, an = q->ta ? q->M : q->K; /* A as stored: am rows of an */
    int64_t bm = q->tb ? q->N : q->K, bn = q->tb ? q->K : q->N;
    int64_t a_l0 = q->a_bcast0 ? 1 : q->L0, b_l1 = q->b_bcast1 ? 1 : q->L1;
    h->lda = an, h->ldb = bn;
    h->a_bs1 = am * an, h->a_bs0 = q->a_bcast0 ? 0 : q->L1 * am * an;
    h->b_bs1 = q->b_bcast1 ? 0 : bm * bn, h->b_bs0 = b_l1 * bm * bn;
    if (q->L1 <= 1) h->a_bs1 = h->b_bs1 = 0, h->a_bs0 = q->a_bcast0 ? 0 : am * an, h->b_bs0 = bm * bn;
    h->a_elems = a_l0 * q->L1 * am * an;
    h->b_elems = q->L0 * b_l1 * bm * bn;
    h->a = malloc((size_t)h->a_elems * 4);
    h->b = malloc((size_t)h->b_elems * 4);
    for (int64_t i = 0; i < h->a_elems; i++) h->a[i] = q->a_f16 ? from_half(to_half(uniform_pm1())) : uniform_pm1();
    for (int64_t i = 0; i < h->b_elems; i++) h->b[i] = q->b_f16 ? from_half(to_half(uniform_pm1())) : uniform_pm1();
    h->bias = malloc((size_t)q->N * 4);
    for (int64_t i = 0; i < q->N; i++) h->bias[i] = uniform_pm1();
    int64_t nc = q->L0 * q->L1 * q->M * q->N;
    h->c0 = malloc((size_t)nc * 4);
    /* (C in halves: the values it starts from are halves) */
    for (int64_t i = 0; i < nc; i++) h->c0[i] = q->accumulate ? (c_f16 ? from_half(to_half(uniform_pm1())) : uniform_pm1()) : 0.0f;
}

static void free_host(operands_host *h)
{
    free(h->a), free(h->b), free(h->bias), free(h->c0);
}

/* Worst error over the checked entries as a multiple of its bound (<= 1 passes) */
static double check(const problem *q, const operands_host *h, const float *c, int64_t *checked)
{
    int64_t batch = q->L0 * q->L1, total = batch * q->M * q->N;
    double worst = 0;
    *checked = 0;
    last_rel = 0;
    bool all = total <= 200000;
    int64_t samples = all ? total : 4000;
    for (int64_t s = 0; s < samples; s++) {
        int64_t idx;
        if (all) idx = s;
        else if (s < 16) /* the last rows and columns, where edge tiles are */
        {
            int64_t bt = (int64_t)(rng % (uint64_t)batch), m = (int64_t)(rng % (uint64_t)q->M), n = (int64_t)((rng >> 20) % (uint64_t)q->N);
            idx = (s % 4 == 0)   ? total - 1
                  : (s % 4 == 1) ? bt * q->M * q->N + (q->M - 1) * q->N + n
                  : (s % 4 == 2) ? bt * q->M * q->N + m * q->N + q->N - 1
                                 : bt * q->M * q->N + m * q->N + n;
        }
        else idx = (int64_t)(rng % (uint64_t)total);
        uniform_pm1();
        int64_t bt = idx / (q->M * q->N), m = (idx / q->N) % q->M, n = idx % q->N;
        int64_t i0 = bt / q->L1, i1 = bt % q->L1;
        int64_t ab = i0 * h->a_bs0 + i1 * h->a_bs1, bb = i0 * h->b_bs0 + i1 * h->b_bs1;
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < q->K; k++) {
            double a = h->a[ab + (q->ta ? k * h->lda + m : m * h->lda + k)];
            double b = h->b[bb + (q->tb ? n * h->ldb + k : k * h->ldb + n)];
            ref += a * b, mag += fabs(a * b);
        }
        double conv = (!q->a_f16 ? 0x1p-11 : 0) + (!q->b_f16 ? 0x1p-11 : 0);
        /* hi and lo: each operand within 2^-20 of itself (two conversions of 2^-10 each) and
           lo.lo (2^-20 of a product) left out, three sums a k; an element whose lo falls
           among f16's subnormals is off by 2^-25 of its scaled value, under 2^-39 of its
           operand's largest magnitude (1 here) */
        if (hilo_wanted()) conv = 0x1p-18 + 0x1p-37 * (double)q->K / (mag + 1e-30);
        double bound = (conv + 0x1p-23 * (double)(hilo_wanted() ? 3 * q->K + 2 : q->K + 2)) * mag * fabs(q->alpha);
        double v = q->alpha * ref, run = fabs(v);
        bound += 0x1p-23 * run;
        if (q->accumulate) v += h->c0[idx], run += fabs(h->c0[idx]), bound += 0x1p-23 * run;
        if (q->bias) v += h->bias[n], run += fabs(h->bias[n]), bound += 0x1p-23 * run;
        if (q->act == ACT_GELU) bound = 1.13 * bound + 0x1p-16 * (1 + fabs(v));
        if (c_f16) bound += 0x1p-11 * fabs(act_ref(q->act, v)) + 0x1p-24; /* the result rounded to a half */
        double want = act_ref(q->act, v);
        double e = fabs((double)c[idx] - want) / (bound + 1e-30);
        if (isnan(e)) worst = INFINITY;
        else if (e > worst) worst = e;
        double rel = fabs((double)c[idx] - want) / (mag * fabs(q->alpha) + run + 1e-30);
        if (!(rel <= last_rel)) last_rel = rel;
        (*checked)++;
    }
    return worst;
}

static uint64_t tiles_of(const wgml_sgmat_config *cfg, const problem *q)
{
    int BM = wgml_sgmat_tile_m(cfg), BN = wgml_sgmat_tile_n(cfg);
    return (uint64_t)((q->M + BM - 1) / BM) * (uint64_t)((q->N + BN - 1) / BN);
}

static wgml_sgmat_config config_for(const wgml_sgmat_config *base, const problem *q, const operands_host *h, int64_t Kc,
                                     int64_t S)
{
    wgml_sgmat_config c = *base;
    c.a_f16 = q->a_f16, c.b_f16 = q->b_f16, c.c_f16 = c_f16;
    c.hilo = hilo_wanted();
    c.two_leading = q->L1 > 1;
    /* vector reads where the layout allows, as wgml would choose */
    int64_t a_ext = q->ta ? q->M : q->K, b_ext = q->tb ? q->K : q->N;
    int av = wgml_sgmat_vec_width(0, h->lda, S > 1 ? (q->ta ? Kc * h->lda : Kc) : h->a_bs0, h->a_bs1, a_ext);
    int bv = wgml_sgmat_vec_width(0, h->ldb, S > 1 ? (q->tb ? Kc : Kc * h->ldb) : h->b_bs0, h->b_bs1, b_ext);
    c.a_vec = base->a_vec ? (av < base->a_vec ? av : base->a_vec) : 0;
    c.b_vec = base->b_vec ? (bv < base->b_vec ? bv : base->b_vec) : 0;
    c.c_vec = c_vec_wanted() && S <= 1 && wgml_sgmat_c_vec_fits(&c, q->act != 0, (uint64_t)q->N, 0);
    return c;
}


/* --emulate: the matrix builtins replaced by plain WGSL in which every invocation holds whole
   matrices (each lane computes the same product, so the results are the same), and
   subgroup_id / subgroup_invocation_id taken from the invocation index. Runs the generator's
   indexing, staging, edges and epilogue on a device without matrix units (lavapipe). */
static bool emulate;

static char *replace_all(char *s, const char *from, const char *to)
{
    size_t nf = strlen(from), nt = strlen(to), count = 0;
    for (const char *p = strstr(s, from); p; p = strstr(p + nf, from)) count++;
    char *out = malloc(strlen(s) + count * (nt + 1) + 1), *o = out;
    const char *p = s;
    for (const char *q = strstr(p, from); q; q = strstr(p, from)) {
        memcpy(o, p, (size_t)(q - p)), o += q - p;
        memcpy(o, to, nt), o += nt;
        p = q + nf;
    }
    strcpy(o, p);
    free(s);
    return out;
}

static char *emulated(char *src, const wgml_sgmat_config *c)
{
    int SM = c->sm_m, SN = c->sm_n, SK = c->sm_k;
    char pre[8192];
    snprintf(pre, sizeof pre,
             "struct L { v: array<f32, %d> }\nstruct R { v: array<f32, %d> }\nstruct Acc { v: array<f32, %d> }\n"
             "fn ld_L(off: u32, cm: bool, stride: u32) -> L { var x: L;\n"
             "  for (var r = 0u; r < %du; r++) { for (var c = 0u; c < %du; c++) {\n"
             "    x.v[r * %du + c] = f32(As[select(off + r * stride + c, off + c * stride + r, cm)]); } }\n  return x; }\n"
             "fn ld_R(off: u32, cm: bool, stride: u32) -> R { var x: R;\n"
             "  for (var r = 0u; r < %du; r++) { for (var c = 0u; c < %du; c++) {\n"
             "    x.v[r * %du + c] = f32(Bs[select(off + r * stride + c, off + c * stride + r, cm)]); } }\n  return x; }\n"
             "fn mma(a: L, b: R, acc: Acc) -> Acc { var o = acc;\n"
             "  for (var i = 0u; i < %du; i++) { for (var j = 0u; j < %du; j++) { for (var k = 0u; k < %du; k++) {\n"
             "    o.v[i * %du + j] += a.v[i * %du + k] * b.v[k * %du + j]; } } }\n  return o; }\n"
             "fn st_Cs(off: u32, x: Acc, cm: bool, stride: u32) {\n"
             "  for (var i = 0u; i < %du; i++) { for (var j = 0u; j < %du; j++) { Cs[off + i * stride + j] = x.v[i * %du + j]; } } }\n",
             SM * SK, SK * SN, SM * SN, SM, SK, SK, SK, SN, SN, SM, SN, SK, SN, SK, SN, SM, SN, SN);
    /* stores straight into C only where the kernel has them (C of halves has none:
       an f32 store into it would not compile) */
    if (strstr(src, "subgroupMatrixStore(&C, ")) {
        size_t used = strlen(pre);
        snprintf(pre + used, sizeof pre - used,
                 "fn st_C(off: u32, x: Acc, cm: bool, stride: u32) {\n"
                 "  for (var i = 0u; i < %du; i++) { for (var j = 0u; j < %du; j++) { C[off + i * stride + j] = x.v[i * %du + j]; } } }\n",
                 SM, SN, SN);
    }
    if (strstr(src, "&Al, ")) { /* hi and lo: the lo stages' loads */
        size_t used = strlen(pre);
        snprintf(pre + used, sizeof pre - used,
                 "fn ld_Ll(off: u32, cm: bool, stride: u32) -> L { var x: L;\n"
                 "  for (var r = 0u; r < %du; r++) { for (var c = 0u; c < %du; c++) {\n"
                 "    x.v[r * %du + c] = f32(Al[select(off + r * stride + c, off + c * stride + r, cm)]); } }\n  return x; }\n"
                 "fn ld_Rl(off: u32, cm: bool, stride: u32) -> R { var x: R;\n"
                 "  for (var r = 0u; r < %du; r++) { for (var c = 0u; c < %du; c++) {\n"
                 "    x.v[r * %du + c] = f32(Bl[select(off + r * stride + c, off + c * stride + r, cm)]); } }\n  return x; }\n",
                 SM, SK, SK, SK, SN, SN);
    }
    char ids[128];
    snprintf(ids, sizeof ids, ") {\n    let sg = li / %du;\n    let lane = li %% %du;\n", c->subgroup_size, c->subgroup_size);
    src = replace_all(src, "enable subgroups;\n", "");
    /* the matrix rules' diagnostics name an extension the emulation does not enable */
    src = replace_all(src, "diagnostic(off, subgroup_matrix_uniformity);\ndiagnostic(off, chromium.subgroup_matrix_uniformity);\n", "");
    src = replace_all(src, "enable chromium_experimental_subgroup_matrix;\n", pre);
    src = replace_all(src, ",\n        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {\n", ids);
    src = replace_all(src, "subgroupMatrixLoad<L>(&As, ", "ld_L(");
    src = replace_all(src, "subgroupMatrixLoad<R>(&Bs, ", "ld_R(");
    src = replace_all(src, "subgroupMatrixLoad<L>(&Al, ", "ld_Ll(");
    src = replace_all(src, "subgroupMatrixLoad<R>(&Bl, ", "ld_Rl(");
    src = replace_all(src, "subgroupMatrixStore(&Cs, ", "st_Cs(");
    src = replace_all(src, "subgroupMatrixStore(&C, ", "st_C(");
    src = replace_all(src, "subgroupMatrixMultiplyAccumulate(", "mma(");
    /* the aliases of the real types go */
    for (char *a = strstr(src, "alias "); a; a = strstr(src, "alias ")) {
        char *end = strchr(a, '\n');
        memmove(a, end + 1, strlen(end + 1) + 1);
    }
    return src;
}

/* SGMAT_VARIANT (bench timing only; results are not checked): the generated kernel cut to
   find what the time a tile besides its K slices is made of.
     noepi   the epilogue's guard made false at run time (P.alpha is 1): the result block's
             matrix stores and barriers stay, the epilogue's reads (bias, C) and C's stores go
     nores   everything after the K loop replaced by matrix stores of the sums into the result
             block under a false run-time condition (keeps the sums alive): K loop only
     noloop  the K loop's trip count 0 (prologue and results only) */
static const char *variant(void) { return getenv("SGMAT_VARIANT"); }

static char *variant_of(char *src, const wgml_sgmat_config *c)
{
    const char *v = variant();
    if (!v) return src;
    if (!strcmp(v, "noepi")) src = replace_all(src, "if (m < P.M && n < P.N) {", "if (m < P.M && n < P.N && P.alpha == 7.0) {");
    if (!strcmp(v, "noloop")) src = replace_all(src, "for (var t = 0u; t < slices; t++) {", "for (var t = 0u; t < slices * u32(P.alpha == 7.0); t++) {");
    if (!strcmp(v, "nores")) {
        char *cut = strstr(src, "    let cb = P.c_off");
        if (!cut) return src;
        *cut = 0;
        wgml_sbuf b = {0};
        wgml_sbuf_put(&b, "%s    if (P.alpha == 7.0) {\n", src);
        for (int i = 0; i < c->frag_m; i++)
            for (int j = 0; j < c->frag_n; j++)
                wgml_sbuf_put(&b, "        subgroupMatrixStore(&Cs, 0u, c%d_%d, false, %du);\n", i, j, c->sm_n);
        /* every binding still used: the automatic layout drops unused ones, and the bind group names them */
        wgml_sbuf_put(&b, "        C[0] = C[1];\n        Cs[0] = bias[0];\n    }\n}\n");
        free(src);
        src = wgml_sbuf_take(&b);
    }
    return src;
}

/* Runs q with cfg: returns seconds per GEMM (reps > 0) and the error ratio via *err (<= 1
   passes), or a negative time when it could not run. */
/* A problem's operands, on the host and the GPU, shared by every config run on it */
typedef struct prepared {
    problem q;
    operands_host h;
    WGPUBuffer a, b, bias, c;
    WGPUBuffer scales; /* hilo: the operands' partial maxima words (wgml_sgmat_max_abs_wgsl), by the GPU */
    int64_t c_elems;
} prepared;

/* hilo: the operands' partial maxima (wgml_sgmat_max_abs_wgsl) into a fresh buffer, their
   largest checked against the host's; NULL when that fails */
static WGPUBuffer operand_maxima(const prepared *p)
{
    char why[2048] = "";
    WGPUComputePipeline pipe = compile(wgml_sgmat_max_abs_wgsl(), why);
    if (!pipe) return fprintf(stderr, "max-abs kernel: %s\n", why), NULL;
    enum { W = WGML_SGMAT_MAX_ABS_GROUPS };
    WGPUBuffer out = make_buffer(2 * W * 4, WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc);
    const problem *q = &p->q;
    const operands_host *h = &p->h;
    int64_t am = q->ta ? q->K : q->M, an = q->ta ? q->M : q->K, bm = q->tb ? q->N : q->K, bn = q->tb ? q->K : q->N;
    uint32_t L1 = q->L1 > 1 ? (uint32_t)q->L1 : 1u, batch = (uint32_t)(q->L0 * q->L1);
    wgml_sgmat_max_abs_params mp[2] = {
        {0, (uint32_t)h->lda, (uint32_t)am, (uint32_t)an, (uint32_t)h->a_bs0, (uint32_t)h->a_bs1, L1, batch},
        {0, (uint32_t)h->ldb, (uint32_t)bm, (uint32_t)bn, (uint32_t)h->b_bs0, (uint32_t)h->b_bs1, L1, batch}};
    WGPUBuffer params = make_buffer(sizeof mp, WGPUBufferUsage_Uniform | WGPUBufferUsage_CopyDst);
    wgpuQueueWriteBuffer(queue, params, 0, mp, sizeof mp);
    WGPUBindGroupEntry e[4] = {{.binding = 0, .buffer = params, .size = sizeof mp},
                               {.binding = 1, .buffer = out, .size = WGPU_WHOLE_SIZE},
                               {.binding = 2, .buffer = p->a, .size = WGPU_WHOLE_SIZE},
                               {.binding = 3, .buffer = p->b, .size = WGPU_WHOLE_SIZE}};
    WGPUBindGroupDescriptor bd = {.layout = wgpuComputePipelineGetBindGroupLayout(pipe, 0), .entryCount = 4, .entries = e};
    gpu_run r = {.group = wgpuDeviceCreateBindGroup(device, &bd), .gx = 2 * W, .gy = 1, .gz = 1};
    dispatch(pipe, &r, 1);
    finish();
    wgpuBindGroupRelease(r.group);
    wgpuBufferRelease(params);
    wgpuComputePipelineRelease(pipe);
    uint32_t got[2 * W];
    read_buffer(out, got, sizeof got);
    float g[2] = {0, 0}, want[2] = {0, 0};
    for (int i = 0; i < 2 * W; i++) {
        float v;
        uint32_t finite = got[i] & 0x7fffffffu; /* (bit 31: an infinity or NaN met) */
        memcpy(&v, &finite, 4);
        g[i / W] = fmaxf(g[i / W], v);
    }
    for (int64_t i = 0; i < h->a_elems; i++) want[0] = fmaxf(want[0], fabsf(h->a[i]));
    for (int64_t i = 0; i < h->b_elems; i++) want[1] = fmaxf(want[1], fabsf(h->b[i]));
    if (g[0] != want[0] || g[1] != want[1]) {
        fprintf(stderr, "max-abs kernel: %g %g, want %g %g\n", g[0], g[1], want[0], want[1]);
        wgpuBufferRelease(out);
        return NULL;
    }
    return out;
}

static void prepare(prepared *p, const problem *q, int max_split)
{
    p->q = *q;
    make_host(q, &p->h);
    p->a = upload_operand(p->h.a, p->h.a_elems, q->a_f16);
    p->b = upload_operand(p->h.b, p->h.b_elems, q->b_f16);
    p->bias = upload(p->h.bias, (uint64_t)q->N * 4);
    int64_t batch = q->L0 * q->L1;
    p->c_elems = (batch > max_split ? batch : max_split) * q->M * q->N;
    p->c = make_buffer((uint64_t)p->c_elems * 4, WGPUBufferUsage_Storage | WGPUBufferUsage_CopyDst | WGPUBufferUsage_CopySrc);
    p->scales = hilo_wanted() && !q->a_f16 && !q->b_f16 ? operand_maxima(p) : NULL;
}

static void release(prepared *p)
{
    wgpuBufferRelease(p->a), wgpuBufferRelease(p->b), wgpuBufferRelease(p->bias), wgpuBufferRelease(p->c);
    if (p->scales) wgpuBufferRelease(p->scales);
    free_host(&p->h);
}

/* Runs the prepared problem (with q->split chunks of K) under cfg: returns seconds per GEMM
   (reps > 0; 0 when not timed or wrong), the error ratio via *err (<= 1 passes), or -1 when
   it could not run (*why says why). */
static double run_config(const prepared *pp, int split, const wgml_sgmat_config *base, int reps, double *err,
                         int64_t *checked, char *why)
{
    const problem *q = &pp->q;
    const operands_host *h = &pp->h;
    int64_t S = split > 1 ? split : 1, Kc = q->K / S;
    wgml_sgmat_config cfg = config_for(base, q, h, Kc, S);
    const char *problem_text = wgml_sgmat_config_problem(&cfg);
    if (!problem_text && cfg.hilo && !pp->scales) problem_text = "no operand maxima";
    if (problem_text || wgml_sgmat_workgroup_bytes(&cfg, q->ta, q->tb) > wg_storage_limit) {
        snprintf(why, 256, "%s", problem_text ? problem_text : "workgroup memory over the limit");
        return -1;
    }
    char *src = wgml_sgmat_gemm_source(&cfg, q->ta, q->tb, act_wgsl[q->act]);
    src = variant_of(src, &cfg);
    if (emulate) src = emulated(src, &cfg);
    if (getenv("SGMAT_DUMP")) fputs(src, stderr); /* before compiling: a compiler that fails hard still shows it */
    WGPUComputePipeline pipe = compile(src, why);
    free(src);
    if (!pipe) return -1;
    gpu_run r = {0};
    int64_t batch = S > 1 ? S : q->L0 * q->L1, ncols = batch * q->M * q->N;
    uint64_t tiles = tiles_of(&cfg, q);
    r.gx = tiles > 65535 ? 65535 : (uint32_t)tiles;
    r.gy = (uint32_t)((tiles + r.gx - 1) / r.gx);
    r.gz = (uint32_t)batch;
    uint32_t p[20];
    if (S > 1) /* chunk s: A's columns (rows if transposed) and B's rows s Kc on */
        put_params(p, q, h, Kc, S, 1, q->ta ? Kc * h->lda : Kc, q->tb ? Kc : Kc * h->ldb, r.gx, 0);
    else put_params(p, q, h, q->K, batch, q->L1, h->a_bs0, h->b_bs0, r.gx, 0);
    if (S > 1) p[16] = p[17] = 0;
    r.params = make_buffer(80, WGPUBufferUsage_Uniform | WGPUBufferUsage_CopyDst);
    wgpuQueueWriteBuffer(queue, r.params, 0, p, 80);
    if (q->accumulate && c_f16) { /* halves, two a word (the buffer holds ncols floats) */
        uint16_t *hv = calloc((size_t)ncols + 2, 2);
        for (int64_t i = 0; hv && i < ncols; i++) hv[i] = to_half(h->c0[i]);
        if (hv) wgpuQueueWriteBuffer(queue, pp->c, 0, hv, (uint64_t)(ncols + 1) / 2 * 4);
        free(hv);
    } else if (q->accumulate) wgpuQueueWriteBuffer(queue, pp->c, 0, h->c0, (uint64_t)ncols * 4);
    WGPUBindGroupEntry e[6] = {
        {.binding = 0, .buffer = r.params, .size = 80}, {.binding = 1, .buffer = pp->a, .size = WGPU_WHOLE_SIZE},
        {.binding = 2, .buffer = pp->b, .size = WGPU_WHOLE_SIZE}, {.binding = 3, .buffer = pp->bias, .size = WGPU_WHOLE_SIZE},
        {.binding = 4, .buffer = pp->c, .size = WGPU_WHOLE_SIZE},
        {.binding = (uint32_t)wgml_sgmat_scales_binding(&cfg), .buffer = pp->scales, .size = WGPU_WHOLE_SIZE}};
    WGPUBindGroupDescriptor bd = {.layout = wgpuComputePipelineGetBindGroupLayout(pipe, 0), .entryCount = cfg.hilo ? 6 : 5,
                                  .entries = e};
    r.group = wgpuDeviceCreateBindGroup(device, &bd);
    dispatch(pipe, &r, 1);
    finish();
    float *c = calloc((size_t)ncols + 4, 4);
    if (c_f16) { /* halves: widened in place from the back (each half's float lies at or past it) */
        read_buffer(pp->c, c, (uint64_t)(ncols + 1) / 2 * 4);
        for (int64_t i = ncols - 1; i >= 0; i--) {
            uint16_t hv;
            memcpy(&hv, (const char *)c + 2 * i, 2);
            c[i] = from_half(hv);
        }
    } else {
        read_buffer(pp->c, c, (uint64_t)ncols * 4);
    }
    if (S > 1) { /* the partials' sum: wgml's reduce launch does this */
        float *sum = calloc((size_t)(q->M * q->N), 4);
        for (int64_t s = 0; s < S; s++)
            for (int64_t i = 0; i < q->M * q->N; i++) sum[i] += c[s * q->M * q->N + i];
        free(c);
        c = sum;
    }
    *err = last_error[0] ? INFINITY : check(q, h, c, checked);
    if (variant() && !last_error[0]) *err = 0; /* a variant computes something else on purpose */
    if (last_error[0]) snprintf(why, 256, "%.200s", last_error), last_error[0] = 0;
    double t_best = 0;
    if (reps > 0 && *err <= 1 && !q->accumulate) {
        /* a quarter second of work first (clocks up, caches warm), then the best of 5 runs
           of at least 20 ms each: a few short runs between compiles read the GPU idle */
        double t0 = seconds(), t_one = 0;
        int warm = 0;
        while (seconds() - t0 < 0.25) dispatch(pipe, &r, reps), finish(), warm += reps;
        t_one = (seconds() - t0) / warm;
        int n = (int)(0.02 / t_one) + 1;
        if (n < reps) n = reps;
        for (int i = 0; i < 5; i++) {
            double t1 = seconds();
            dispatch(pipe, &r, n);
            finish();
            double t = (seconds() - t1) / n;
            if (t_best <= 0 || t < t_best) t_best = t;
        }
    }
    free(c);
    wgpuBindGroupRelease(r.group);
    wgpuBufferRelease(r.params);
    wgpuComputePipelineRelease(pipe);
    return t_best;
}

/* The configs tried: subgroups (m x n), fragments (m x n), K depth, double buffering, vector
   reads, for each of the adapter's f16 -> f32 shapes. */
typedef struct { int sg_m, sg_n, fm, fn, bk, db, vec, prefetch; } knob;
static const knob knobs[] = {
    {4, 4, 2, 2, 32, 0, 8, 0}, {4, 4, 2, 2, 16, 1, 8, 0}, {2, 2, 2, 2, 16, 0, 8, 0}, {2, 2, 2, 2, 16, 1, 4, 0},
    {2, 2, 4, 4, 32, 1, 8, 0}, {2, 2, 4, 4, 16, 1, 8, 0}, {2, 4, 4, 2, 32, 1, 8, 0}, {4, 2, 2, 4, 32, 1, 8, 0},
    {2, 4, 4, 4, 16, 1, 8, 0}, {4, 2, 4, 4, 16, 1, 8, 0}, {4, 4, 2, 4, 16, 1, 8, 0}, {2, 2, 4, 4, 64, 0, 8, 0},
    {2, 2, 4, 4, 32, 1, 4, 0}, {2, 4, 4, 4, 32, 0, 8, 0}, {2, 4, 2, 2, 32, 0, 8, 0}, {4, 2, 2, 2, 32, 0, 8, 0},
    {4, 4, 2, 2, 32, 0, 0, 0}, {4, 4, 2, 2, 32, 0, 8, 1}, {2, 4, 2, 2, 32, 0, 8, 1}, {4, 4, 2, 4, 32, 0, 8, 0},
    {2, 4, 2, 2, 64, 0, 8, 0}, {4, 2, 2, 2, 64, 0, 8, 0}, {2, 2, 2, 4, 32, 0, 8, 0}, {4, 4, 2, 4, 32, 0, 8, 1},
    {2, 4, 2, 4, 32, 0, 8, 0}, {4, 2, 4, 2, 32, 0, 8, 0},
    /* 26-34: 128x128 tiles of 256 invocations, 256x128 tiles, prefetch and two buffers elsewhere */
    {4, 2, 2, 4, 32, 0, 8, 0}, {4, 2, 2, 4, 32, 0, 8, 1}, {4, 4, 4, 2, 32, 0, 8, 1}, {4, 4, 2, 4, 16, 0, 8, 1},
    {2, 4, 4, 2, 32, 0, 8, 1}, {4, 4, 2, 2, 16, 1, 8, 0}, {2, 4, 2, 2, 32, 1, 8, 0}, {4, 4, 4, 2, 32, 0, 8, 0},
    {2, 2, 2, 4, 32, 0, 8, 1},
    /* 35-36: K slices of 64 with prefetch on 256 invocations */
    {4, 2, 2, 4, 64, 0, 8, 1}, {2, 4, 2, 2, 64, 0, 8, 1},
    /* 37-41: 128x128 with two buffers of 32 or K slices of 64 (they fit 48 KiB only with a
       smaller result block: 16x8 matrices'), 64x256 and 128x256 of 256 invocations, 64x256 of
       512 */
    {4, 4, 2, 2, 32, 1, 8, 0}, {4, 4, 2, 2, 64, 0, 8, 1}, {2, 4, 2, 4, 32, 0, 8, 1}, {2, 4, 4, 4, 32, 0, 8, 1},
    {4, 4, 1, 4, 32, 0, 8, 1},
    /* 42: 128x256 in K slices of 48 (48 KiB with 16x8 matrices' result block) */
    {4, 4, 2, 4, 48, 0, 8, 1},
    /* 43-47 (ROUNDS_FROM on): results in two rounds (half the result block): the policy's
       128x256 and 128x128, 128x256 in K slices of 48, 128x128 with two buffers of 32 or in K
       slices of 64 */
    {4, 4, 2, 4, 32, 0, 8, 1}, {4, 4, 2, 2, 32, 0, 8, 1}, {4, 4, 2, 4, 48, 0, 8, 1}, {4, 4, 2, 2, 32, 1, 8, 0},
    {4, 4, 2, 2, 64, 0, 8, 1},
    /* 48-56 (results in EXTRA_ROUNDS' rounds): 128x256 of 256 invocations (warp tiles 64x64)
       with results in two rounds, 256x128 of 256; 384 invocations: 128x192 prefetched, 128x192
       with two buffers of 32 (four rounds: 49,152 bytes), 96x256 prefetched; 1024 invocations
       of 2x2 fragments (four rounds): 128x256, 256x128; 128x192 of 512 prefetched, in one
       round and in two */
    {2, 4, 4, 4, 32, 0, 8, 1}, {4, 2, 4, 4, 32, 0, 8, 1}, {4, 3, 2, 4, 32, 0, 8, 1}, {4, 3, 2, 4, 32, 1, 8, 0},
    {3, 4, 2, 4, 32, 0, 8, 1}, {4, 8, 2, 2, 32, 0, 8, 1}, {8, 4, 2, 2, 32, 0, 8, 1}, {4, 4, 2, 3, 32, 0, 8, 1},
    {4, 4, 2, 3, 32, 0, 8, 1},
};
#define ROUNDS_FROM 43
#define N_KNOBS (int)(sizeof knobs / sizeof knobs[0])
/* the result rounds of the knobs from EXTRA_FROM on */
#define EXTRA_FROM 48
static const int extra_rounds[] = {2, 1, 1, 4, 1, 4, 4, 1, 2};
_Static_assert(sizeof extra_rounds / sizeof extra_rounds[0] == N_KNOBS - EXTRA_FROM, "a round count for every knob");

/* Whether v is in a comma-separated list of numbers ("0,4,6") */
static bool in_list(const char *list, long v)
{
    for (const char *p = list; *p;) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p) return false;
        if (x == v) return true;
        p = *end ? end + 1 : end;
    }
    return false;
}

/* SGMAT_KNOBS="0,4,6": those knobs only; else all for the first matrix shape and a few for
   the others (checks: every third, every fourth) */
static bool knob_wanted(int s, int k, bool checking)
{
    const char *only = getenv("SGMAT_KNOBS");
    if (getenv("SGMAT_FIRST_SHAPE") && s > 0) return false;
    /* SGMAT_SM="16x16x16,16x8x16": those matrix shapes of the adapter's only */
    const char *sm = getenv("SGMAT_SM");
    if (sm) {
        char want[24];
        snprintf(want, sizeof want, "%dx%dx%d", sm_shapes[s].m, sm_shapes[s].n, sm_shapes[s].k);
        bool found = false;
        for (const char *p = sm; (p = strstr(p, want)) && !found; p++)
            found = (p == sm || p[-1] == ',') && (p[strlen(want)] == ',' || !p[strlen(want)]);
        if (!found) return false;
    }
    if (only) return in_list(only, k);
    if (emulate) return k == 2 || k == 3 || k == 17;
    if (checking) return s == 0 ? k % 3 == 0 : k == 4 || k == 8;
    return s == 0 || k == 4 || k == 6 || k == 8;
}

static wgml_sgmat_config config_of(const knob *k, shape3 s)
{
    /* with narrow matrices (sm_n 8), twice the fragments along N keep the tile */
    int widen = s.n < 16 && !emulate ? 16 / s.n : 1;
    return (wgml_sgmat_config){.sm_m = s.m, .sm_n = s.n, .sm_k = s.k, .subgroup_size = subgroup_size, .sg_m = k->sg_m,
                               .sg_n = k->sg_n, .frag_m = k->fm, .frag_n = k->fn * widen, .bk = k->bk,
                               .double_buffer = k->db, .prefetch = k->prefetch, .a_vec = k->vec, .b_vec = k->vec,
                               .cs_rounds = k - knobs >= EXTRA_FROM ? extra_rounds[k - knobs - EXTRA_FROM]
                                            : k - knobs >= ROUNDS_FROM ? 2 : 0};
}

static void describe(char *out, size_t n, const wgml_sgmat_config *c)
{
    snprintf(out, n, "%dx%dx%d sg%dx%d fr%dx%d bk%d %s v%d%s%s", c->sm_m, c->sm_n, c->sm_k, c->sg_m, c->sg_n, c->frag_m,
             c->frag_n, c->bk, c->double_buffer ? "db" : c->prefetch ? "sb+pf" : "sb", c->a_vec,
             c->cs_rounds == 4 ? " r4" : c->cs_rounds > 1 ? " r2" : "", c_vec_wanted() ? " cv" : "");
}

static int cmd_parse(void)
{
    /* every form and epilogue for every config, compiled by Tint: needs no matrix units to
       run, but the feature (the null backend and Vulkan adapters with it offer it) */
    shape3 shapes[3] = {{16, 16, 16}, {16, 8, 16}, {16, 8, 8}};
    int n_shapes = n_sm_shapes ? n_sm_shapes : 3, failed = 0, done = 0;
    for (int s = 0; s < n_shapes; s++)
        for (int k = 0; k < N_KNOBS; k++)
            for (int form = 0; form < 4; form++)
                for (int store = 0; store < 4; store++) {
                    wgml_sgmat_config c = config_of(&knobs[k], n_sm_shapes ? sm_shapes[s] : shapes[s]);
                    c.a_f16 = store & 1, c.b_f16 = store & 2;
                    c.a_vec = store == 3 ? c.a_vec : (store ? 4 : 0);
                    c.b_vec = c.a_vec;
                    c.two_leading = store == 2;
                    int act = (form + store) % 3;
                    bool ta = form & 1, tb = form & 2;
                    c.c_f16 = c_vec_wanted() && form == 3;
                    c.c_vec = c_vec_wanted() && wgml_sgmat_c_vec_fits(&c, act != 0, 8, 0); /* (generated only: any N of runs) */
                    if (wgml_sgmat_workgroup_bytes(&c, ta, tb) > wg_storage_limit) continue;
                    char *src = wgml_sgmat_gemm_source(&c, ta, tb, act_wgsl[act]), why[2048], name[96];
                    describe(name, sizeof name, &c);
                    WGPUComputePipeline p = src ? compile(src, why) : NULL;
                    done++;
                    if (!p) {
                        failed++;
                        printf("FAIL %s A%s B%s store %d act %d: %s\n", name, ta ? "^T" : "", tb ? "^T" : "", store, act,
                               src ? why : "no source");
                        if (failed == 1 && src) fputs(src, stdout);
                    } else wgpuComputePipelineRelease(p);
                    free(src);
                }
    printf("parse: %d of %d kernels compiled\n", done - failed, done);
    return failed != 0 || done == 0;
}

static int cmd_check(void)
{
    if (!n_sm_shapes) return printf("no f16 subgroup matrices: nothing to check\n"), 1;
    /* awkward sizes through every form, storage and epilogue; batched, broadcast, split K */
    static const problem probs[] = {
        /* a bias with alpha 1 and no activation: whole tiles, then edges */
        {64, 64, 48, 1, 1, false, false, true, true, false, false, 0, true, false, 1, 0},
        {65, 70, 40, 1, 1, false, true, false, true, false, false, 0, true, false, 1, 0},
        /* batches, broadcasts and split K first: a run cut short by its time limit has them */
        {20, 24, 12, 2, 3, false, true, true, false, true, false, 1, true, false, 1, 0},
        {24, 40, 64, 1, 1, true, false, false, true, false, false, 0, false, false, 1, 4},
        {100, 72, 40, 3, 5, false, false, true, true, true, false, 0, false, false, 1, 0},
        /* whole tiles of halves, a K past the last whole slice */
        {64, 64, 48, 1, 1, false, true, true, true, false, false, 1, true, false, 1, 0},
        {32, 64, 56, 2, 1, true, false, true, true, true, false, 0, false, false, 1, 0},
        {48, 32, 64, 1, 1, false, false, true, true, false, false, 2, false, true, 0.5f, 0},
        {256, 512, 96, 1, 1, true, true, true, true, false, false, 0, false, false, 1, 0},
        {256, 512, 80, 1, 1, false, false, true, true, false, false, 0, false, false, 1, 0},
        {65, 129, 96, 2, 3, true, true, true, true, false, true, 1, true, false, 1, 0},
        {130, 70, 33, 2, 2, false, true, false, true, true, true, 0, false, true, 1, 0},
        {384, 1152, 16384, 1, 1, true, false, true, true, false, false, 0, false, false, 1, 8},
        {200, 96, 4096, 1, 1, false, true, false, true, false, false, 0, false, false, 1, 4},
        {1, 1, 1, 1, 1, false, false, true, true, false, false, 0, false, false, 1, 0},
        {7, 33, 7, 1, 1, false, false, true, true, false, false, 0, false, false, 1, 0},
        {33, 7, 1023, 1, 1, true, false, true, true, false, false, 1, true, false, 1, 0},
        {1023, 33, 7, 1, 1, false, true, false, true, false, false, 2, true, false, 0.5f, 0},
        {33, 1023, 33, 1, 1, true, true, true, false, false, false, 0, false, true, 1, 0},
        {4097, 7, 33, 1, 1, false, false, false, false, false, false, 0, true, true, -2, 0},
        {7, 4097, 33, 1, 1, false, true, true, true, false, false, 1, false, false, 1, 0},
        {1023, 1023, 1023, 1, 1, false, false, true, true, false, false, 0, false, false, 1, 0},
        {1023, 1023, 1023, 1, 1, true, false, true, true, false, false, 0, true, false, 1, 0},
        {1023, 1023, 1023, 1, 1, false, true, false, false, false, false, 2, true, true, 1, 0},
        {256, 256, 256, 1, 1, false, false, true, true, false, false, 0, false, false, 1, 0},
    };
    /* SGMAT_C_F16=1: every problem with C in halves */
    c_f16 = getenv("SGMAT_C_F16") && atoi(getenv("SGMAT_C_F16"));
    int bad = 0, runs = 0;
    for (size_t i = 0; i < sizeof probs / sizeof probs[0]; i++) {
        problem qf = probs[i];
        if (hilo_wanted()) qf.a_f16 = qf.b_f16 = false; /* (hi and lo are of f32 operands) */
        const problem *q = &qf;
        /* SGMAT_CHECK="0,7": those problems only */
        const char *only = getenv("SGMAT_CHECK");
        if (only && !in_list(only, (long)i)) continue;
        /* emulated, every lane does a subgroup's work: small problems only */
        if (emulate && (double)q->M * q->N * q->K * q->L0 * q->L1 > 3e5) continue;
        prepared pp;
        prepare(&pp, q, q->split);
        for (int s = 0; s < n_sm_shapes; s++)
            for (int k = 0; k < N_KNOBS; k++) {
                if (!knob_wanted(s, k, true)) continue;
                wgml_sgmat_config base = config_of(&knobs[k], sm_shapes[s]);
                char name[96], why[2048] = "";
                describe(name, sizeof name, &base);
                double err = 0;
                int64_t checked = 0;
                double t = run_config(&pp, q->split, &base, 0, &err, &checked, why);
                if (t < 0) {
                    if (strstr(why, "workgroup memory")) continue;
                    printf("FAIL %s | %lldx%lldx%lld: %s\n", name, (long long)q->M, (long long)q->N, (long long)q->K, why);
                    bad++;
                    continue;
                }
                runs++;
                bool ok = err <= 1;
                if (!ok) bad++;
                if (!ok || k == 0 || emulate)
                    printf("%s %s | %lldx%lldx%lld batch %lldx%lld A%s%s B%s%s act %d%s%s%s split %d: %lld checked, worst %.3g of bound (%.2g of sum |ab|)\n",
                           ok ? "ok  " : "FAIL", name, (long long)q->M, (long long)q->N, (long long)q->K, (long long)q->L0,
                           (long long)q->L1, q->ta ? "^T" : "", q->a_f16 ? " f16" : " f32", q->tb ? "^T" : "",
                           q->b_f16 ? " f16" : " f32", q->act, q->bias ? " bias" : "", q->accumulate ? " acc" : "",
                           q->a_bcast0 || q->b_bcast1 ? " bcast" : "", q->split, (long long)checked, err, last_rel);
            }
        release(&pp);
    }
    printf("check: %d runs, %d failed\n", runs, bad);
    return bad != 0;
}

static int cmd_bench(int argc, char **argv)
{
    if (!n_sm_shapes) return printf("no f16 subgroup matrices: nothing to time\n"), 1;
    problem shapes[16];
    int n = 0;
    /* SGMAT_F32=1: operands stored as f32 (converted while staged), as the graph's f32 tensors */
    bool f16 = !getenv("SGMAT_F32") || !atoi(getenv("SGMAT_F32"));
    /* SGMAT_BIAS=1, SGMAT_C_F16=1: every timed problem with a bias, with C in halves (the GPT's
       forward GEMMs: the epilogue through workgroup memory) */
    bool with_bias = getenv("SGMAT_BIAS") && atoi(getenv("SGMAT_BIAS"));
    c_f16 = getenv("SGMAT_C_F16") && atoi(getenv("SGMAT_C_F16"));
    if (argc >= 5)
        for (int i = 0; i + 4 < argc && n < 16; i += 5)
            shapes[n++] = (problem){atoll(argv[i]), atoll(argv[i + 1]), atoll(argv[i + 2]), 1, 1, atoi(argv[i + 3]) != 0,
                                    atoi(argv[i + 4]) != 0, f16, f16, .alpha = 1};
    else {
        static const int64_t def[][5] = {{4096, 4096, 4096, 0, 0}, {4096, 4096, 4096, 0, 1}, {4096, 4096, 4096, 1, 0},
                                         {16384, 1152, 384, 0, 0}, {16384, 1536, 384, 0, 0}, {16384, 384, 1536, 0, 0},
                                         {16384, 384, 1152, 0, 1}, {384, 1152, 16384, 1, 0}};
        for (int i = 0; i < 8; i++)
            shapes[n++] = (problem){def[i][0], def[i][1], def[i][2], 1, 1, def[i][3] != 0, def[i][4] != 0, f16, f16, .alpha = 1};
    }
    for (int i = 0; i < n; i++) {
        problem q = shapes[i];
        q.bias = with_bias;
        int max_split = q.M * q.N <= 1 << 20 && q.K >= 4096 ? 8 : 1;
        if (getenv("SGMAT_MAX_SPLIT") && atoi(getenv("SGMAT_MAX_SPLIT")) < max_split) max_split = atoi(getenv("SGMAT_MAX_SPLIT"));
        /* SGMAT_SPLIT_FROM past the default's splits: that split is timed too */
        if (getenv("SGMAT_SPLIT_FROM") && atoi(getenv("SGMAT_SPLIT_FROM")) > max_split) max_split = atoi(getenv("SGMAT_SPLIT_FROM"));
        prepared pp;
        prepare(&pp, &q, max_split);
        double flops = 2.0 * (double)q.M * (double)q.N * (double)q.K, best = 0;
        char best_name[128] = "-";
        for (int s = 0; s < n_sm_shapes; s++)
            for (int k = 0; k < N_KNOBS; k++) {
                if (!knob_wanted(s, k, false)) continue;
                wgml_sgmat_config base = config_of(&knobs[k], sm_shapes[s]);
                base.hilo = hilo_wanted();
                char name[96], why[2048] = "";
                describe(name, sizeof name, &base);
                /* SGMAT_SPLIT_FROM=4: only splits of 4 and more */
                int split_from = getenv("SGMAT_SPLIT_FROM") ? atoi(getenv("SGMAT_SPLIT_FROM")) : 1;
                for (int split = split_from > 1 ? split_from : 1; split <= max_split; split *= 2) {
                    double err = 0;
                    int64_t checked = 0;
                    double t = run_config(&pp, split, &base, 10, &err, &checked, why);
                    if (t <= 0) {
                        if (t < 0 && !strstr(why, "workgroup memory")) printf("  %s: %s\n", name, why);
                        if (t == 0) printf("  %s: WRONG (worst %.3g of bound)\n", name, err);
                        continue;
                    }
                    double tf = flops / t / 1e12;
                    printf("%6lldx%-6lldx%-6lld A%s B%s  %-36s split %d: %8.3f ms %7.1f TFLOP/s (err %.2g of bound, %.2g of sum |ab|) "
                           "%d inv %u B\n",
                           (long long)q.M, (long long)q.N, (long long)q.K, q.ta ? "^T" : " ", q.tb ? "^T" : " ", name, split,
                           t * 1e3, tf, err, last_rel, wgml_sgmat_threads(&base), wgml_sgmat_workgroup_bytes(&base, q.ta, q.tb));
                    if (tf > best) best = tf, snprintf(best_name, sizeof best_name, "%s split %d", name, split);
                }
            }
        printf("BEST %lldx%lldx%lld A%s B%s %s: %.1f TFLOP/s with %s\n", (long long)q.M, (long long)q.N, (long long)q.K,
               q.ta ? "^T" : "", q.tb ? "^T" : "", f16 ? "f16" : "f32", best, best_name);
        release(&pp);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : "check";
    setvbuf(stdout, NULL, _IOLBF, 0);
    WGPUBackendType backend = WGPUBackendType_Vulkan;
    int first = 2;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (!strcmp(argv[first], "--emulate")) emulate = true;
        else if (!strcmp(argv[first], "--backend") && first + 1 < argc)
            backend = !strcmp(argv[++first], "null") ? WGPUBackendType_Null : WGPUBackendType_Vulkan;
    }
    if (bring_up(backend, !strcmp(cmd, "parse"))) return 1;
    if (emulate) {
        /* small matrices and subgroups: a CPU compiles and runs a lane's whole-matrix work in
           reasonable time, and the generator's indexing is the same for every shape */
        sm_shapes[0] = (shape3){4, 4, 8}, sm_shapes[1] = (shape3){8, 4, 8};
        n_sm_shapes = 2;
        /* results 8 a lane (SGMAT_C_VEC) need fragments of 8 x subgroup size, 8 wide */
        if (c_vec_wanted()) sm_shapes[n_sm_shapes++] = (shape3){4, 8, 8};
        subgroup_size = 4;
    }
    if (!wg_storage_limit) wg_storage_limit = 16384;
    if (!subgroup_size) subgroup_size = 32;
    if (!strcmp(cmd, "parse")) return cmd_parse();
    if (!strcmp(cmd, "check")) return cmd_check();
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - first, argv + first);
    fprintf(stderr, "usage: sgmat_gemm parse|check|bench [--backend null|vulkan] [M N K ta tb]...\n");
    return 2;
}
