/* Threads and processes on one context (wgml.h, "Threads" and "fork()"): calls from two
   threads are serialised by the context's lock (right values, no crash); a child made by fork()
   gets WGML_ERROR_CONTEXT at once from every call on the parent's context, even when a thread
   of the parent held the context's lock at the fork. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define ITERS 60

typedef struct worker {
    wgml_context *ctx;
    int id;
    int bad; /* iterations whose result or status was wrong */
    char why[256];
} worker;

/* Each iteration: y = sum over rows of (x * w + id), a matmul and a read, on data of its own;
   checked against the double-precision answer. Both threads build, evaluate, read and free
   on the one context at the same time. */
static void *work(void *arg)
{
    worker *w = arg;
    enum { R = 37, C = 29, N = 11 };
    float x[R * C], m[C * N], out[R * N];
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < R * C; i++) x[i] = (float)(((i * 7 + it * 13 + w->id * 31) % 97) - 48) / 17.0f;
        for (int i = 0; i < C * N; i++) m[i] = (float)(((i * 5 + it * 3 + w->id) % 89) - 44) / 23.0f;
        wgml_tensor *a = NULL, *b = NULL;
        wgml_status st = wgml_tensor_from_data(w->ctx, 2, (int64_t[]){R, C}, x, R * C, &a);
        if (!st) st = wgml_tensor_from_data(w->ctx, 2, (int64_t[]){C, N}, m, C * N, &b);
        wgml_tensor *y = st ? NULL : wgml_binary_scalar(w->ctx, WGML_ADD, wgml_matmul(w->ctx, a, b), (float)w->id);
        if (!st) st = wgml_tensor_read(y, out, R * N);
        double worst = 0;
        for (int r = 0; r < R && !st; r++)
            for (int n = 0; n < N; n++) {
                double want = w->id;
                for (int k = 0; k < C; k++) want += (double)x[r * C + k] * m[k * N + n];
                worst = fmax(worst, fabs(out[r * N + n] - want) / fmax(1.0, fabs(want)));
            }
        if (st || worst > 1e-5) {
            if (!w->bad) snprintf(w->why, sizeof w->why, "iteration %d: %s, error %g", it, wgml_status_name(st), worst);
            w->bad++;
        }
        wgml_tensor_free(a);
        wgml_tensor_free(b);
        wgml_tensor_free(y);
    }
    return NULL;
}

static void two_threads_one_context(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    worker w[2] = {{.ctx = ctx, .id = 1}, {.ctx = ctx, .id = 2}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, work, &w[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++)
        if (w[i].bad) FAILF("thread %d: %d of %d iterations wrong, first %s", w[i].id, w[i].bad, ITERS, w[i].why);
}

/* wgml_context_lock keeps a sequence together: while one thread holds it, another's call
   waits until the unlock. */
typedef struct holder {
    wgml_context *ctx;
    volatile int locked, release, done;
} holder;

static void *hold(void *arg)
{
    holder *h = arg;
    if (wgml_context_lock(h->ctx)) return NULL;
    h->locked = 1;
    while (!h->release) nanosleep(&(struct timespec){0, 1000000}, NULL);
    wgml_context_unlock(h->ctx);
    return NULL;
}

static void *query(void *arg)
{
    holder *h = arg;
    wgml_stats s;
    wgml_stats_get(h->ctx, &s); /* takes the lock */
    wgml_tensor *t = NULL;
    wgml_tensor_zeros(h->ctx, 1, (int64_t[]){3}, &t);
    wgml_tensor_free(t);
    h->done = 1;
    return NULL;
}

static void lock_holds_other_threads(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    holder h = {.ctx = ctx};
    pthread_t a, b;
    CHECK(pthread_create(&a, NULL, hold, &h) == 0);
    while (!h.locked) nanosleep(&(struct timespec){0, 1000000}, NULL);
    CHECK(pthread_create(&b, NULL, query, &h) == 0);
    nanosleep(&(struct timespec){0, 200 * 1000000}, NULL);
    CHECK(!h.done); /* waiting for the holder */
    h.release = 1;
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    CHECK(h.done);
    /* the same thread may take it again inside (recursive), and calls inside pass */
    CHECK_OK(ctx, wgml_context_lock(ctx));
    CHECK_OK(ctx, wgml_context_lock(ctx));
    wgml_tensor *t = NULL;
    CHECK_OK(ctx, wgml_tensor_zeros(ctx, 1, (int64_t[]){3}, &t));
    wgml_context_unlock(ctx);
    wgml_context_unlock(ctx);
    wgml_tensor_free(t);
}

/* The child's checks; its exit code is the number that failed (printed on stderr). */
static int child_checks(wgml_context *ctx, wgml_tensor *parent_tensor)
{
    int bad = 0;
    float host[5];
    wgml_status st = wgml_tensor_read(parent_tensor, host, 5);
    if (st != WGML_ERROR_CONTEXT) fprintf(stderr, "child: read gave %s\n", wgml_status_name(st)), bad++;
    /* the message names the call refused (reading it is not refused in turn) */
    if (!strstr(wgml_error_message(ctx), "wgml_tensor_read: this context was made by process") ||
        wgml_last_status(ctx) != WGML_ERROR_CONTEXT)
        fprintf(stderr, "child: message \"%s\"\n", wgml_error_message(ctx)), bad++;
    wgml_tensor *y = wgml_exp(ctx, parent_tensor);
    if (!y || wgml_tensor_status(y) != WGML_ERROR_CONTEXT) fprintf(stderr, "child: op not refused\n"), bad++;
    int not_a_tensor;
    wgml_tensor *z = (wgml_tensor *)&not_a_tensor; /* the refusal must set it to NULL */
    st = wgml_tensor_zeros(ctx, 1, (int64_t[]){4}, &z);
    if (st != WGML_ERROR_CONTEXT || z) fprintf(stderr, "child: zeros gave %s\n", wgml_status_name(st)), bad++;
    st = wgml_synchronize(ctx);
    if (st != WGML_ERROR_CONTEXT) fprintf(stderr, "child: synchronize gave %s\n", wgml_status_name(st)), bad++;
    if (wgml_context_lock(ctx) != WGML_ERROR_CONTEXT) fprintf(stderr, "child: lock not refused\n"), bad++;
    wgml_tensor_free(parent_tensor); /* do nothing, return */
    wgml_context_free(ctx);
    /* a context of the child's own: refused with a message (NVIDIA's driver makes no device in
       the child of a process that has one), or right (lavapipe); the child leaves by _exit */
    wgml_context *own = NULL;
    if (wgml_context_create(NULL, &own) != WGML_OK) {
        if (!*wgml_last_create_error()) fprintf(stderr, "child: its own context failed without a message\n"), bad++;
        return bad;
    }
    const float v[3] = {0.25f, -2.0f, 1.5f};
    wgml_tensor *x = NULL;
    float out[3] = {0};
    st = wgml_tensor_from_data(own, 1, (int64_t[]){3}, v, 3, &x);
    if (!st) st = wgml_tensor_read(wgml_exp(own, x), out, 3);
    for (int i = 0; i < 3; i++)
        if (st || fabs((double)out[i] - exp((double)v[i])) > 1e-6 * exp((double)v[i]))
            fprintf(stderr, "child: its own context gave %s, exp(%g) = %g\n", wgml_status_name(st), (double)v[i], (double)out[i]), bad++;
    wgml_context_free(own);
    return bad;
}

/* Forks with `locked_by_thread` set: while another thread of the parent holds the context's
   lock (a call in progress), so the child's copy of that lock is held by a thread it lacks. */
static void fork_child_is_refused_case(int locked_by_thread)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const float v[5] = {0.5f, -1.25f, 2, 3.5f, -0.75f};
    wgml_tensor *t = test_tensor(ctx, 1, (int64_t[]){5}, v);
    wgml_tensor *e = wgml_exp(ctx, t);
    float out[5];
    CHECK_OK(ctx, wgml_tensor_read(e, out, 5)); /* the parent has used the device */
    holder h = {.ctx = ctx};
    pthread_t a;
    if (locked_by_thread) {
        CHECK(pthread_create(&a, NULL, hold, &h) == 0);
        while (!h.locked) nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(30); /* a hang ends the child by SIGALRM, which the parent reports */
        _exit(child_checks(ctx, e));
    }
    CHECK(pid > 0);
    if (locked_by_thread) {
        h.release = 1;
        pthread_join(a, NULL);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    if (WIFSIGNALED(status)) FAILF("the child died of signal %d (%s)", WTERMSIG(status),
                                   WTERMSIG(status) == SIGALRM ? "it hung" : "a crash");
    else if (WEXITSTATUS(status)) FAILF("%d of the child's checks failed", WEXITSTATUS(status));
    /* the parent's context works as before */
    CHECK_OK(ctx, wgml_tensor_read(e, out, 5));
    CHECK(fabsf(out[1] - expf(-1.25f)) < 1e-6f);
    wgml_tensor_free(t);
    wgml_tensor_free(e);
}

static void fork_child_is_refused(void) { fork_child_is_refused_case(0); }
static void fork_child_is_refused_while_locked(void) { fork_child_is_refused_case(1); }

int main(void)
{
    TEST_RUN(two_threads_one_context);
    TEST_RUN(lock_holds_other_threads);
    TEST_RUN(fork_child_is_refused);
    TEST_RUN(fork_child_is_refused_while_locked);
    test_context_release();
    return test_summary();
}
