/*
 * The wgml_dist_ functions in one process (no launcher: rank 0 of 1, whether or not the build
 * has MPI; the multi-rank runs are tests/test_dist_train.sh), and the optimiser's gradient
 * hook, which data parallelism rides on: what the hook leaves in the gradients is what the
 * norm and the update use; and the optimiser's gradient buckets, which the overlapped
 * all-reduce rides on: the buckets' ranges, the same update as one evaluation, and no
 * result computed twice.
 */
#define _GNU_SOURCE /* sched_setaffinity, CPU_* */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/half.h"
#include "harness.h"
#include "train/dist_shm.h"
#include "train/grad_buckets.h"

/* The shared-memory reduction's f16 widening (eight at a time where the CPU has F16C) gives
   the scalar conversion's bits for every f16 value, at lengths that leave tails of 1 and 7 */
static void f16_widening_is_exact(void)
{
    static uint16_t in[65536 + 7];
    static float out[65536 + 7];
    for (uint32_t i = 0; i < 65536 + 7; i++) in[i] = (uint16_t)(i * 40503u); /* every value, shuffled */
    const size_t lengths[] = {1, 7, 9, 1023, 65536 + 7};
    for (size_t k = 0; k < sizeof lengths / sizeof *lengths; k++) {
        size_t n = lengths[k];
        memset(out, 0xff, sizeof out);
        wgml_f16_to_f32(in, out, n);
        for (size_t i = 0; i < n; i++) {
            float want = wgml_half_to_f32(in[i]);
            bool same = isnan(want) ? isnan(out[i]) : memcmp(&want, &out[i], 4) == 0;
            if (!same) {
                FAILF("length %zu, value %zu (bits 0x%04x): %a, want %a", n, i, in[i], (double)out[i], (double)want);
                break;
            }
        }
    }
}

/* A segment of two ranks (3 threads each) with slots of slot_bytes, both ranks mapped in this
   process (rank 1's half run by a thread of its own); false, said, where it cannot be made */
static bool two_ranks(size_t slot_bytes, wgml_shm **s0, wgml_shm **s1)
{
    char name[WGML_SHM_NAME], err[256] = "";
    *s0 = *s1 = NULL;
    if (!wgml_shm_create(2, 3, slot_bytes, name, s0, err, sizeof err)) {
        FAILF("segment: %s", err);
        return false;
    }
    bool attached = wgml_shm_attach(name, 2, 1, s1, err, sizeof err);
    wgml_shm_unlink(name);
    if (!attached) {
        FAILF("attach: %s", err);
        wgml_shm_close(*s0);
    }
    return attached;
}

/* Two ranks of one segment, as two threads of this process: rank 1's half of
   wgml_shm_reduce_slots, while the main thread runs rank 0's */
typedef struct slots_job {
    wgml_shm *s;
    size_t from, count;
    bool f16;
} slots_job;

static void *reduce_as_rank1(void *arg)
{
    slots_job *j = arg;
    wgml_shm_reduce_slots(j->s, j->from, j->count, j->f16, true);
    return NULL;
}

/* The mean of two ranks' values as the segment makes it: each as it crossed (f16: rounded),
   summed in rank order in f32, divided in f32 */
static float mean_of_two(float x0, float x1, bool f16)
{
    if (f16) x0 = wgml_half_to_f32(wgml_f32_to_half(x0)), x1 = wgml_half_to_f32(wgml_f32_to_half(x1));
    float want = x0;
    want += x1;
    return want / 2.0f;
}

/* wgml_shm_allreduce's rank 1 (send, f16 or f32, into recv), as reduce_as_rank1 */
typedef struct allreduce_job {
    wgml_shm *s;
    const void *send;
    float *recv;
    size_t count;
    bool f16;
} allreduce_job;

static void *allreduce_as_rank1(void *arg)
{
    allreduce_job *j = arg;
    wgml_shm_allreduce(j->s, j->send, j->f16, j->recv, j->count, true);
    return NULL;
}

/* The staging path's all-reduce through slots of one page (1024 floats: 65537 are 65 rounds of
   copies in, sums and copies out), 3 threads a rank, two ranks as two threads: the mean in rank
   order bit for bit on both ranks, f32 (rank 0 in place) and f16; counts 1, 7, 1023, 65537 */
static void allreduce_over_rounds(void)
{
    enum { N = 65537 };
    wgml_shm *s0, *s1;
    if (!two_ranks(WGML_SHM_PAGE, &s0, &s1)) return;
    static float a[2][N], recv[2][N];
    static uint16_t h[2][N];
    test_fill_uniform(a[0], N, -3, 3);
    test_fill_uniform(a[1], N, -3, 3);
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < N; i++) h[r][i] = wgml_f32_to_half(a[r][i]);
    const size_t counts[] = {1, 7, 1023, N};
    for (int f16 = 0; f16 < 2; f16++)
        for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
            size_t count = counts[k];
            memcpy(recv[0], a[0], sizeof recv[0]); /* (f32: rank 0 in place) */
            for (size_t i = 0; i < N; i++) recv[1][i] = -1234.5f;
            allreduce_job j1 = {s1, f16 ? (const void *)h[1] : a[1], recv[1], count, f16};
            pthread_t t;
            if (pthread_create(&t, NULL, allreduce_as_rank1, &j1)) {
                FAILF("no thread");
                break;
            }
            wgml_shm_allreduce(s0, f16 ? (const void *)h[0] : recv[0], f16, recv[0], count, true);
            pthread_join(t, NULL);
            size_t bad = 0;
            for (int r = 0; r < 2; r++)
                for (size_t i = 0; i < N; i++) {
                    float want = i < count ? mean_of_two(a[0][i], a[1][i], f16) : r == 0 ? a[0][i] : -1234.5f;
                    if (memcmp(&want, &recv[r][i], 4) != 0 && bad++ < 3)
                        FAILF("%s, count %zu: rank %d's element %zu is %a, want %a", f16 ? "f16" : "f32", count, r, i,
                              (double)recv[r][i], (double)want);
                }
        }
    wgml_shm_close(s1);
    wgml_shm_close(s0);
}

/* The sums in place of the GPU-mapped path (dist.c's slots): rank r's floats [from, from +
   count) at their place in its slot (f16 from the same byte as f32), the result's the mean in
   rank order, bit for bit, on both ranks' threads (3 a rank), nothing outside the range
   written; counts 1, 7, 1023 and 65537 at an offset that is no multiple of 16 */
static void slots_sum_in_place(void)
{
    enum { N = 70000 };
    size_t slot = (N * 4 + WGML_SHM_PAGE - 1) / WGML_SHM_PAGE * WGML_SHM_PAGE;
    wgml_shm *s0, *s1;
    if (!two_ranks(slot, &s0, &s1)) return;
    CHECK(wgml_shm_slot_bytes(s0) == slot && wgml_shm_slot_bytes(s1) == slot);
    CHECK(wgml_shm_slot(s0, 1) == (char *)wgml_shm_slot(s0, 0) + slot);
    static float a[2][N];
    test_fill_uniform(a[0], N, -3, 3);
    test_fill_uniform(a[1], N, -3, 3);
    const size_t counts[] = {1, 7, 1023, 65537};
    float *result = wgml_shm_slot(s0, 2);
    for (int f16 = 0; f16 < 2; f16++)
        for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
            size_t from = 37 + k, count = counts[k];
            for (int r = 0; r < 2; r++) {
                unsigned char *slot_r = wgml_shm_slot(s0, r);
                for (size_t i = 0; i < count; i++) {
                    if (f16) ((uint16_t *)(slot_r + 4 * from))[i] = wgml_f32_to_half(a[r][from + i]);
                    else ((float *)slot_r)[from + i] = a[r][from + i];
                }
            }
            for (size_t i = 0; i < N; i++) result[i] = -1234.5f;
            slots_job j1 = {s1, from, count, f16};
            pthread_t t;
            if (pthread_create(&t, NULL, reduce_as_rank1, &j1)) {
                FAILF("no thread");
                break;
            }
            wgml_shm_reduce_slots(s0, from, count, f16, true);
            pthread_join(t, NULL);
            size_t bad = 0;
            for (size_t i = 0; i < N; i++) {
                float want = i >= from && i < from + count ? mean_of_two(a[0][i], a[1][i], f16) : -1234.5f;
                if (memcmp(&want, &result[i], 4) != 0 && bad++ < 3)
                    FAILF("%s, from %zu, count %zu: element %zu is %a, want %a", f16 ? "f16" : "f32", from, count, i,
                          (double)result[i], (double)want);
            }
        }
    wgml_shm_close(s1);
    wgml_shm_close(s0);
}

static void one_rank_collectives_leave_data_as_it_is(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    CHECK_OK(NULL, wgml_dist_init());
    CHECK_OK(NULL, wgml_dist_init()); /* again: nothing */
    CHECK(wgml_dist_rank() == 0 && wgml_dist_size() == 1);
    CHECK(wgml_dist_local_rank() == 0 && wgml_dist_local_size() == 1);
    int64_t n7 = 7, n1023 = 1023;
    float a[7], b[1023], got[1023];
    test_fill_uniform(a, 7, -3, 3);
    test_fill_uniform(b, 1023, -3, 3);
    wgml_tensor *ts[2] = {test_tensor(ctx, 1, &n7, a), test_tensor(ctx, 1, &n1023, b)};
    CHECK_OK(ctx, wgml_dist_allreduce(ctx, 2, ts, WGML_REDUCE_MEAN));
    CHECK_OK(ctx, wgml_dist_allreduce(ctx, 2, ts, WGML_REDUCE_SUM));
    CHECK_OK(ctx, wgml_dist_broadcast(ctx, 2, ts));
    CHECK_OK(ctx, wgml_tensor_read(ts[0], got, 7));
    CHECK(memcmp(got, a, sizeof a) == 0);
    CHECK_OK(ctx, wgml_tensor_read(ts[1], got, 1023));
    CHECK(memcmp(got, b, sizeof b) == 0);
    double h[3] = {1.5, -2, 7};
    CHECK_OK(NULL, wgml_dist_allreduce_host(h, 3, WGML_REDUCE_MEAN));
    CHECK(h[0] == 1.5 && h[1] == -2 && h[2] == 7);
    CHECK_OK(NULL, wgml_dist_broadcast_host(h, sizeof h));
    CHECK_OK(NULL, wgml_dist_barrier());
    wgml_dist_abort(3); /* one rank: returns */

    /* bad input: a status and words, never a crash */
    CHECK_STATUS(ctx, wgml_dist_allreduce(ctx, 2, ts, (wgml_reduce_op)7), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(wgml_dist_error_message(), "op 7"));
    CHECK_STATUS(ctx, wgml_dist_allreduce(ctx, 1, NULL, WGML_REDUCE_SUM), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_dist_allreduce(NULL, 2, ts, WGML_REDUCE_SUM), WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor *lazy[1] = {wgml_add(ctx, ts[0], ts[0])};
    CHECK_STATUS(ctx, wgml_dist_broadcast(ctx, 1, lazy), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "evaluated and contiguous"));
    int32_t ids[2] = {1, 2};
    int64_t two = 2;
    wgml_tensor *ints[1] = {test_tensor_i32(ctx, 1, &two, ids)};
    CHECK_STATUS(ctx, wgml_dist_allreduce(ctx, 1, ints, WGML_REDUCE_SUM), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "f32"));
    CHECK_STATUS(NULL, wgml_dist_allreduce_host(NULL, 2, WGML_REDUCE_SUM), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(NULL, wgml_dist_data_parallel(NULL), WGML_ERROR_INVALID_ARGUMENT);
    wgml_dist_stats s;
    wgml_dist_stats_get(&s);
    CHECK(s.calls == 0); /* one rank: nothing went through MPI */
    wgml_tensor_free(ts[0]), wgml_tensor_free(ts[1]), wgml_tensor_free(lazy[0]), wgml_tensor_free(ints[0]);
    CHECK_OK(NULL, wgml_dist_finalize());
}

/* The hook's view, what it does to it, and how many elements it saw. */
typedef struct hook_state {
    float scale;
    wgml_status fail; /* returned instead of working */
    int64_t seen;
    float first[5];
} hook_state;

static wgml_status scale_gradients(wgml_optimizer *opt, wgml_tensor *grads, void *user)
{
    hook_state *h = user;
    h->seen = wgml_tensor_numel(grads);
    if (h->fail) return h->fail;
    float buf[256];
    if (h->seen > 256) return WGML_ERROR_LIMIT;
    wgml_status st = wgml_tensor_read(grads, buf, (size_t)h->seen);
    if (st) return st;
    memcpy(h->first, buf, sizeof h->first);
    for (int64_t i = 0; i < h->seen; i++) buf[i] *= h->scale;
    (void)opt;
    return wgml_tensor_write(grads, buf, (size_t)h->seen);
}

/* p read back equals p0 - k c */
static void p_moved_by(wgml_context *ctx, wgml_tensor *p, const float *p0, const float *c, double k, const char *what)
{
    float got[5];
    double want[5];
    CHECK_OK(ctx, wgml_tensor_read(p, got, 5));
    for (int i = 0; i < 5; i++) want[i] = p0[i] - k * c[i];
    CHECK(test_close(what, got, want, 5, 1e-6, 1));
}

/* SGD with lr 1: p -= the gradient the hook leaves. loss = sum(p * c), so the gradient is c. */
static void the_hook_decides_the_update(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const float p0[5] = {1, 2, 3, 4, 5}, c[5] = {0.5f, -1, 2, 0.25f, -3};
    int64_t five = 5;
    wgml_tensor *p = test_tensor(ctx, 1, &five, p0), *ct = test_tensor(ctx, 1, &five, c);
    wgml_optim_desc d = {.kind = WGML_OPTIM_SGD, .lr = 1};
    wgml_optimizer *opt = NULL;
    CHECK_OK(ctx, wgml_optimizer_create(ctx, &d, 1, &p, &opt));
    if (!opt) return;
    hook_state h = {.scale = 2};
    CHECK_OK(ctx, wgml_optimizer_set_grad_hook(opt, scale_gradients, &h));
    float got[5], norm = 0;
    double want[5], n2 = 0;

    wgml_scope_begin(ctx);
    CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, wgml_mul(ctx, p, ct))));
    CHECK_OK(ctx, wgml_optimizer_step(opt, 0, NULL));
    wgml_scope_end(ctx);
    CHECK(h.seen >= 5);                        /* the whole flat buffer, padding included */
    CHECK(memcmp(h.first, c, sizeof c) == 0); /* the hook saw the evaluated gradient */
    CHECK_OK(ctx, wgml_tensor_read(p, got, 5));
    for (int i = 0; i < 5; i++) want[i] = p0[i] - 2.0 * c[i], n2 += 4.0 * c[i] * c[i];
    CHECK(test_close("p after a step with doubled gradients", got, want, 5, 1e-6, 1));
    CHECK_OK(ctx, wgml_optimizer_grad_norm(opt, &norm));
    CHECK(fabs(norm - sqrt(n2)) < 1e-5 * sqrt(n2)); /* the norm of what the hook left */

    /* a failing hook: its status, no update, the step count unchanged */
    h.fail = WGML_ERROR_IO;
    wgml_scope_begin(ctx);
    CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, wgml_mul(ctx, p, ct))));
    CHECK_STATUS(ctx, wgml_optimizer_step(opt, 0, NULL), WGML_ERROR_IO);
    wgml_scope_end(ctx);
    CHECK(wgml_optimizer_steps(opt) == 1);
    float after[5];
    CHECK_OK(ctx, wgml_tensor_read(p, after, 5));
    CHECK(memcmp(after, got, sizeof got) == 0);

    /* the failed step's gradient (it had landed in the flat buffer before the hook failed) is
       kept: the same step again takes it (a retry once copied it from that buffer into itself
       in one dispatch, which wgpu-native aborts on), p -= 2 c */
    h.fail = WGML_OK;
    CHECK_OK(ctx, wgml_optimizer_step(opt, 0, NULL));
    CHECK(wgml_optimizer_steps(opt) == 2);
    p_moved_by(ctx, p, p0, c, 4, "p after the failed step again");
    /* a failed step, then a second backward adding to what it left: both taken, p -= 2 (c + c) */
    h.fail = WGML_ERROR_IO;
    wgml_scope_begin(ctx);
    CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, wgml_mul(ctx, p, ct))));
    CHECK_STATUS(ctx, wgml_optimizer_step(opt, 0, NULL), WGML_ERROR_IO);
    h.fail = WGML_OK;
    CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, wgml_mul(ctx, p, ct))));
    CHECK_OK(ctx, wgml_optimizer_step(opt, 0, NULL));
    wgml_scope_end(ctx);
    p_moved_by(ctx, p, p0, c, 8, "p after a failed step and a second backward");

    /* the hook ran (doubling them), then the update's submit was refused (the third: the
       gradients', the hook's read, the update's): the gradients, now the hook's output, are
       dropped (a retry would double them again), said so; a new backward and step: p -= 2 c */
    wgml_scope_begin(ctx);
    CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, wgml_mul(ctx, p, ct))));
    wgml_debug_fail_submits(ctx, 2, 1);
    CHECK_STATUS(ctx, wgml_optimizer_step(opt, 0, NULL), WGML_ERROR_DEVICE);
    wgml_debug_fail_submits(ctx, 0, 0);
    CHECK(test_message_has(ctx, "the gradients were dropped"));
    CHECK_STATUS(ctx, wgml_optimizer_step(opt, 0, NULL), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, wgml_mul(ctx, p, ct))));
    CHECK_OK(ctx, wgml_optimizer_step(opt, 0, NULL));
    wgml_scope_end(ctx);
    p_moved_by(ctx, p, p0, c, 10, "p after a refused update past the hook, then a new backward");

    /* no hook: the plain step, p -= c */
    CHECK_OK(ctx, wgml_optimizer_set_grad_hook(opt, NULL, NULL));
    wgml_scope_begin(ctx);
    CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, wgml_mul(ctx, p, ct))));
    CHECK_OK(ctx, wgml_optimizer_step(opt, 0, NULL));
    wgml_scope_end(ctx);
    p_moved_by(ctx, p, p0, c, 11, "p after a plain step");
    CHECK_STATUS(ctx, wgml_optimizer_set_grad_hook(NULL, NULL, NULL), WGML_ERROR_INVALID_ARGUMENT);
    wgml_optimizer_free(opt);
    wgml_tensor_free(p), wgml_tensor_free(ct);
}

/* What the bucket callbacks saw. */
typedef struct bucket_log {
    int n;
    int64_t from[8], count[8];
    int finished;
    wgml_status finish_status;
    int fail_at; /* ready fails at this bucket (0: never) */
} bucket_log;

static wgml_status log_ready(wgml_context *ctx, struct wgml_buffer *G, int64_t from, int64_t count, void *user)
{
    (void)ctx, (void)G;
    bucket_log *l = user;
    if (l->n < 8) l->from[l->n] = from, l->count[l->n] = count;
    return ++l->n == l->fail_at ? WGML_ERROR_IO : WGML_OK;
}

static wgml_status log_finish(wgml_context *ctx, struct wgml_buffer *G, wgml_status st, void *user)
{
    (void)ctx, (void)G;
    bucket_log *l = user;
    l->finished++;
    l->finish_status = st;
    return WGML_OK;
}

/* A three-layer network's loss sum(c * (tanh(tanh(x W1 + b1) W2 + b2) W3)) on p[0..4]. */
static wgml_tensor *mlp_loss(wgml_context *ctx, wgml_tensor *const *p, wgml_tensor *x, wgml_tensor *c)
{
    wgml_tensor *h = wgml_tanh(ctx, wgml_add(ctx, wgml_matmul(ctx, x, p[0]), p[1]));
    h = wgml_tanh(ctx, wgml_add(ctx, wgml_matmul(ctx, h, p[2]), p[3]));
    return wgml_sum_all(ctx, wgml_mul(ctx, wgml_matmul(ctx, h, p[4]), c));
}

/* Two copies of one network, one stepped plainly and one in buckets of at least 100 floats:
   the buckets are whole parameters' slots from the end of the flat buffer back, the updates
   agree, and the bucketed step runs no more kernels than the plain one (a result that a later
   bucket reads and an earlier one computed is kept, not computed again). A failing bucket
   fails the step without an update, and finish still runs. */
/* A step of opt on mlp_loss (the loss as an extra), in a scope of its own; its count after */
static int64_t mlp_step(wgml_context *ctx, wgml_optimizer *opt, wgml_tensor **p, wgml_tensor *x, wgml_tensor *c)
{
    wgml_scope_begin(ctx);
    wgml_tensor *loss = mlp_loss(ctx, p, x, c);
    CHECK_OK(ctx, wgml_backward(loss));
    CHECK_OK(ctx, wgml_optimizer_step(opt, 1, &loss));
    wgml_scope_end(ctx);
    return wgml_optimizer_steps(opt);
}

static void buckets_give_the_plain_update(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t shapes[5][2] = {{17, 13}, {1, 13}, {13, 11}, {1, 11}, {11, 5}}, xs[2] = {7, 17}, cs[2] = {7, 5};
    float data[300], x[7 * 17], c[7 * 5];
    wgml_tensor *pa[5], *pb[5], *pc[5];
    for (int i = 0; i < 5; i++) {
        test_fill_uniform(data, (size_t)(shapes[i][0] * shapes[i][1]), -0.6, 0.6);
        pa[i] = test_tensor(ctx, 2, shapes[i], data);
        pb[i] = test_tensor(ctx, 2, shapes[i], data);
        pc[i] = test_tensor(ctx, 2, shapes[i], data);
    }
    test_fill_uniform(x, 7 * 17, -1, 1);
    test_fill_uniform(c, 7 * 5, -1, 1);
    wgml_tensor *xt = test_tensor(ctx, 2, xs, x), *ct = test_tensor(ctx, 2, cs, c);
    wgml_optim_desc d = {.kind = WGML_OPTIM_ADAMW, .lr = 0.05f, .weight_decay = 0.01f, .max_grad_norm = 0.5f};
    wgml_optimizer *oa = NULL, *ob = NULL, *oc = NULL;
    CHECK_OK(ctx, wgml_optimizer_create(ctx, &d, 5, pa, &oa));
    CHECK_OK(ctx, wgml_optimizer_create(ctx, &d, 5, pb, &ob));
    CHECK_OK(ctx, wgml_optimizer_create(ctx, &d, 5, pc, &oc));
    if (!oa || !ob || !oc) return;
    bucket_log log = {0}, logc = {0};
    wgml_grad_buckets gb = {.bucket_floats = 100, .ready = log_ready, .finish = log_finish, .user = &log};
    CHECK_OK(ctx, wgml_optimizer_set_grad_buckets(ob, &gb));
    /* the third copy defers each step's end until the next step or a read needs it */
    wgml_grad_buckets gc = {.bucket_floats = 100, .ready = log_ready, .finish = log_finish, .user = &logc, .defer = true};
    CHECK_OK(ctx, wgml_optimizer_set_grad_buckets(oc, &gc));
    float lr_before = wgml_optimizer_lr(oc);
    uint64_t kernels[2] = {0, 0};
    for (int step = 0; step < 3; step++) {
        for (int which = 0; which < 2; which++) {
            wgml_stats before, after;
            wgml_stats_get(ctx, &before);
            wgml_scope_begin(ctx);
            wgml_tensor *loss = mlp_loss(ctx, which ? pb : pa, xt, ct);
            CHECK_OK(ctx, wgml_backward(loss));
            CHECK_OK(ctx, wgml_optimizer_step(which ? ob : oa, 1, &loss)); /* the loss as an extra */
            wgml_scope_end(ctx);
            wgml_stats_get(ctx, &after);
            kernels[which] = after.dispatches - before.dispatches;
        }
        /* slots of 64 floats: W1 [0, 256), b1 [256, 320), W2 [320, 512), b2 [512, 576), W3 [576, 640) */
        CHECK(log.n == 3 && log.finished == 1 && log.finish_status == WGML_OK);
        CHECK(log.from[0] == 512 && log.count[0] == 128);
        CHECK(log.from[1] == 320 && log.count[1] == 192);
        CHECK(log.from[2] == 0 && log.count[2] == 320);
        if (kernels[1] > kernels[0]) FAILF("step %d: %llu kernels in buckets, %llu in one evaluation", step,
                                           (unsigned long long)kernels[1], (unsigned long long)kernels[0]);
        log.n = log.finished = 0;
        /* deferred: buckets submitted, the end waits; the step counts as taken */
        wgml_scope_begin(ctx);
        wgml_tensor *loss = mlp_loss(ctx, pc, xt, ct);
        CHECK_OK(ctx, wgml_backward(loss));
        CHECK_OK(ctx, wgml_optimizer_step(oc, 1, &loss));
        wgml_scope_end(ctx);
        CHECK(logc.n == 3 * (step + 1) && logc.finished == step); /* the previous step's end ran at this one's start */
        CHECK(wgml_optimizer_steps(oc) == step + 1);
    }
    CHECK(wgml_optimizer_lr(oc) == lr_before); /* a constant lr, whatever the count */
    for (int i = 0; i < 5; i++) {
        size_t n = (size_t)(shapes[i][0] * shapes[i][1]);
        float a[300], b[300];
        double want[300];
        CHECK_OK(ctx, wgml_tensor_read(pa[i], a, n));
        CHECK_OK(ctx, wgml_tensor_read(pb[i], b, n));
        for (size_t k = 0; k < n; k++) want[k] = a[k];
        CHECK(test_close("bucketed AdamW against one evaluation", b, want, n, 1e-6, 1e-6));
        CHECK_OK(ctx, wgml_tensor_read(pc[i], b, n)); /* a read of the parameters ends the step in flight */
        CHECK(test_close("deferred bucketed AdamW against one evaluation", b, want, n, 1e-6, 1e-6));
        CHECK(logc.finished == 3);
    }
    float na = 0, nc = 0;
    CHECK_OK(ctx, wgml_optimizer_grad_norm(oa, &na));
    CHECK_OK(ctx, wgml_optimizer_grad_norm(oc, &nc));
    CHECK(fabsf(na - nc) <= 1e-6f * na);
    /* a write into the parameters ends a step in flight first: the write wins */
    wgml_scope_begin(ctx);
    wgml_tensor *loss = mlp_loss(ctx, pc, xt, ct);
    CHECK_OK(ctx, wgml_backward(loss));
    CHECK_OK(ctx, wgml_optimizer_step(oc, 1, &loss));
    wgml_scope_end(ctx);
    CHECK(logc.finished == 3);
    float ones[55];
    for (int k = 0; k < 55; k++) ones[k] = 1;
    CHECK_OK(ctx, wgml_tensor_write(pc[4], ones, 55));
    CHECK(logc.finished == 4 && wgml_optimizer_steps(oc) == 4);
    float back[55];
    CHECK_OK(ctx, wgml_tensor_read(pc[4], back, 55));
    CHECK(memcmp(back, ones, sizeof ones) == 0);

    /* a deferred step, then the next one's submit refused where it ends the step in flight
       (the update's: that step's update is lost, and said so) or just after (its own first
       bucket's): the call fails, and the loss it evaluated with its first bucket reads as an
       error, never as the value it never computed; after zeroed gradients the next steps go on */
    for (int skip = 0; skip <= 1; skip++) {
        const int64_t taken = mlp_step(ctx, oc, pc, xt, ct);
        wgml_scope_begin(ctx);
        loss = mlp_loss(ctx, pc, xt, ct);
        const int64_t one = 1;
        wgml_tensor *view = wgml_reshape(ctx, loss, 1, &one); /* (a view of it, taken before) */
        CHECK_OK(ctx, wgml_backward(loss));
        wgml_debug_fail_submits(ctx, skip, 1);
        CHECK_STATUS(ctx, wgml_optimizer_step(oc, 1, &loss), WGML_ERROR_DEVICE);
        wgml_debug_fail_submits(ctx, 0, 0);
        CHECK(skip ? wgml_optimizer_steps(oc) == taken : test_message_has(ctx, "its update is lost") && wgml_optimizer_steps(oc) == taken - 1);
        float v = 4242;
        CHECK(wgml_tensor_read(loss, &v, 1) != WGML_OK && v == 4242);
        CHECK(wgml_tensor_read(view, &v, 1) != WGML_OK && v == 4242);
        CHECK(wgml_tensor_read(wgml_add(ctx, view, view), &v, 1) != WGML_OK && v == 4242); /* (nor a node reading it) */
        wgml_scope_end(ctx);
        for (int i = 0; i < 5; i++) wgml_zero_grad(pc[i]);
        for (int k = 0; k < 2; k++) {
            wgml_scope_begin(ctx);
            loss = mlp_loss(ctx, pc, xt, ct);
            CHECK_OK(ctx, wgml_backward(loss));
            CHECK_OK(ctx, wgml_optimizer_step(oc, 1, &loss));
            CHECK_OK(ctx, wgml_tensor_read(loss, &v, 1));
            CHECK(isfinite(v));
            wgml_scope_end(ctx);
        }
    }
    /* a deferred step ended by a read of a parameter, its submit refused: the read fails saying
       the step's update is lost, and the parameter then reads as it was before that step */
    {
        float was[55], now4[55];
        CHECK_OK(ctx, wgml_tensor_read(pc[4], was, 55));
        const int64_t taken = mlp_step(ctx, oc, pc, xt, ct);
        wgml_debug_fail_submits(ctx, 0, 1);
        CHECK_STATUS(ctx, wgml_tensor_read(pc[4], now4, 55), WGML_ERROR_DEVICE);
        wgml_debug_fail_submits(ctx, 0, 0);
        CHECK(test_message_has(ctx, "its update is lost") && wgml_optimizer_steps(oc) == taken - 1);
        CHECK_OK(ctx, wgml_tensor_read(pc[4], now4, 55));
        CHECK(memcmp(now4, was, sizeof was) == 0);
    }

    /* losses held across steps (as a trainer holds them until it reads them) keep no memory of
       their step: what the buckets kept for each other goes back to the pool (results still
       held by a handle keep their buffers: those the step's graph was built with are let go
       before the step here, as wgml_gpt_train_step_submit does) */
    wgml_tensor *held[4];
    wgml_stats s0, s1;
    for (int step = 0; step < 4; step++) {
        if (step == 1) wgml_stats_get(ctx, &s0);
        wgml_scope_begin(ctx); /* the layers' handles end here; the loss's lives on */
        held[step] = mlp_loss(ctx, pb, xt, ct);
        CHECK_OK(ctx, wgml_backward(held[step]));
        wgml_keep(held[step]);
        wgml_scope_end(ctx);
        CHECK_OK(ctx, wgml_optimizer_step(ob, 1, &held[step]));
    }
    wgml_stats_get(ctx, &s1);
    if (s1.bytes_in_use > s0.bytes_in_use + 4096)
        FAILF("3 steps with their losses held: %llu bytes more in use", (unsigned long long)(s1.bytes_in_use - s0.bytes_in_use));
    for (int step = 0; step < 4; step++) wgml_tensor_free(held[step]);
    log.n = log.finished = 0;

    /* the second bucket fails: the step returns its status, finish saw it, nothing moved */
    float before[300], now[300];
    CHECK_OK(ctx, wgml_tensor_read(pb[4], before, 55));
    log.fail_at = 2;
    wgml_scope_begin(ctx);
    CHECK_OK(ctx, wgml_backward(mlp_loss(ctx, pb, xt, ct)));
    CHECK_STATUS(ctx, wgml_optimizer_step(ob, 0, NULL), WGML_ERROR_IO);
    wgml_scope_end(ctx);
    CHECK(log.finished == 1 && log.finish_status == WGML_ERROR_IO);
    CHECK(wgml_optimizer_steps(ob) == 7);
    CHECK_OK(ctx, wgml_tensor_read(pb[4], now, 55));
    CHECK(memcmp(now, before, 55 * sizeof *now) == 0);
    CHECK_STATUS(ctx, wgml_optimizer_set_grad_buckets(ob, &(wgml_grad_buckets){.bucket_floats = 0, .ready = log_ready,
                                                                                .finish = log_finish}),
                 WGML_ERROR_INVALID_ARGUMENT);
    wgml_optimizer_free(oa);
    wgml_optimizer_free(ob);
    wgml_optimizer_free(oc);
    for (int i = 0; i < 5; i++) wgml_tensor_free(pa[i]), wgml_tensor_free(pb[i]), wgml_tensor_free(pc[i]);
    wgml_tensor_free(xt), wgml_tensor_free(ct);
}

/* Started by a launcher for 2 ranks (Open MPI's or MPICH's variable), a process that cannot
   load MPI (this test links none, WGML_MPI_LIBRARY names no file, and a build may have none)
   is refused rather than run as a lone rank beside the others; one rank's worth of launcher
   is fine. Before any dist_init. */
static void a_launch_without_mpi_is_refused(void)
{
    setenv("WGML_MPI_LIBRARY", "/nonexistent/libmpi.so.40", 1);
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (int v = 0; v < 2; v++) {
        setenv(vars[v], "2", 1);
        CHECK(wgml_dist_init() == WGML_ERROR_UNSUPPORTED);
        const char *msg = wgml_dist_error_message();
        if (!msg || !strstr(msg, "2 ranks") || !(strstr(msg, "/nonexistent/libmpi.so.40") || strstr(msg, "without MPI")))
            FAILF("%s=2: message '%s'", vars[v], msg ? msg : "(none)");
        CHECK(wgml_dist_size() == 1);
        setenv(vars[v], "1", 1);
        CHECK_OK(NULL, wgml_dist_init());
        CHECK_OK(NULL, wgml_dist_finalize());
        unsetenv(vars[v]);
    }
#ifdef WGML_TEST_MPI
    /* PMIx's variable alone (srun --mpi=pmix, say) does not tell Open MPI from MPICH: refused,
       naming the way out, rather than guessed (and without MPI_LIBRARY: no count of ranks) */
    unsetenv("WGML_MPI_LIBRARY");
    setenv("PMIX_RANK", "0", 1);
    CHECK(wgml_dist_init() == WGML_ERROR_UNSUPPORTED);
    const char *msg = wgml_dist_error_message();
    if (!msg || !strstr(msg, "cannot be told") || !strstr(msg, "WGML_MPI_LIBRARY")) FAILF("PMIX_RANK: message '%s'", msg ? msg : "(none)");
    CHECK(wgml_dist_size() == 1);
    unsetenv("PMIX_RANK");
#endif
}

/* The reduction's threads are sized by the CPUs this process may use: within the online ones,
   and one where its affinity allows one (as under a launcher's binding or a container's) */
static void usable_cpus_follow_the_affinity(void)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int all = wgml_usable_cpus();
    if (all < 1 || all > online) FAILF("usable CPUs %d, online %ld", all, online);
#ifdef __linux__
    cpu_set_t old, one;
    if (sched_getaffinity(0, sizeof old, &old) != 0) return;
    int first = 0;
    while (first < CPU_SETSIZE && !CPU_ISSET(first, &old)) first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) return;
    int pinned = wgml_usable_cpus();
    sched_setaffinity(0, sizeof old, &old);
    if (pinned != 1) FAILF("usable CPUs %d with one CPU in the affinity, want 1", pinned);
    if (wgml_usable_cpus() != all) FAILF("usable CPUs %d after the affinity's restore, want %d", wgml_usable_cpus(), all);
#endif
}

int main(void)
{
    TEST_RUN(f16_widening_is_exact);
    TEST_RUN(slots_sum_in_place);
    TEST_RUN(allreduce_over_rounds);
    TEST_RUN(usable_cpus_follow_the_affinity);
    TEST_RUN(a_launch_without_mpi_is_refused);
    TEST_RUN(one_rank_collectives_leave_data_as_it_is);
    TEST_RUN(the_hook_decides_the_update);
    TEST_RUN(buckets_give_the_plain_update);
    test_context_release();
    return test_summary();
}
