/* The test harness: checks that print evidence, a seeded random source, comparisons
   against double-precision references. Each tests/test_*.c is one CTest test whose main()
   calls TEST_RUN for each case and returns test_summary(). */
#ifndef WGML_TESTS_HARNESS_H
#define WGML_TESTS_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wgml.h"

extern int test_failures;
extern const char *test_current;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "FAIL %s (%s:%d): %s\n", test_current, __FILE__, __LINE__, \
                    #cond);                                                            \
            test_failures++;                                                           \
        }                                                                              \
    } while (0)

/* Checks a wgml status, printing the context's message on failure. */
#define CHECK_STATUS(ctx, expr, want)                                                     \
    do {                                                                                  \
        wgml_status st_ = (expr);                                                         \
        if (st_ != (want)) {                                                              \
            fprintf(stderr, "FAIL %s (%s:%d): %s gave %s, want %s: %s\n", test_current,   \
                    __FILE__, __LINE__, #expr, wgml_status_name(st_),                     \
                    wgml_status_name(want), (ctx) ? wgml_error_message(ctx) : "");        \
            test_failures++;                                                              \
        }                                                                                 \
    } while (0)
#define CHECK_OK(ctx, expr) CHECK_STATUS(ctx, expr, WGML_OK)

/* A failure of the current test described by a printf format. */
#define FAILF(...)                                                   \
    do {                                                             \
        fprintf(stderr, "FAIL %s: ", test_current);                  \
        fprintf(stderr, __VA_ARGS__);                                \
        fprintf(stderr, "\n");                                       \
        test_failures++;                                             \
    } while (0)

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* WGML_TEST_ONLY=name runs only the cases whose name holds it (a developer's run of one case) */
#define TEST_RUN(fn)                          \
    do {                                      \
        const char *only_ = getenv("WGML_TEST_ONLY"); \
        if (only_ && *only_ && !strstr(#fn, only_)) break; \
        test_current = #fn;                   \
        int before_ = test_failures;          \
        fn();                                 \
        fprintf(stderr, "%s %s\n", test_failures == before_ ? "ok  " : "FAIL", #fn); \
    } while (0)

/* A case that exposes a known, open defect: run only with WGML_KNOWN_BUGS=1, so CI stays
   green while the failing test stays in the tree (see docs/KNOWN_BUGS.md). */
#define TEST_KNOWN_BUG(fn)                                                       \
    do {                                                                         \
        if (getenv("WGML_KNOWN_BUGS")) TEST_RUN(fn);                             \
        else fprintf(stderr, "SKIP %s (known bug, docs/KNOWN_BUGS.md)\n", #fn); \
    } while (0)

int test_summary(void);

/* Deterministic random numbers (seed from WGML_TEST_SEED, default 12345). */
void test_seed(uint64_t seed);
uint64_t test_rand_u64(void);
double test_uniform(double lo, double hi);
void test_fill_uniform(float *x, size_t n, double lo, double hi);

/* x (n floats) widened to double in a new array (free it; NULL if malloc fails): what the
   CPU reference (tests/ref/ref.h) reads, exactly the values the GPU was given. */
double *test_to_double(const float *x, size_t n);
/* Reads t of any dtype into floats (i32 values converted, exact up to 2^24). */
wgml_status test_read(wgml_tensor *t, float *out, size_t n);
/* ... into a new array (free it); NULL, and a failure of the current test naming `what`,
   when the read fails */
float *test_read_new(wgml_context *ctx, const char *what, wgml_tensor *t, int64_t n);
/* whether ctx's last message contains s; prints the message when it does not */
int test_message_has(wgml_context *ctx, const char *s);
/* the element count of a shape, and the shape as "[2,3,4]" */
int64_t test_numel(int nd, const int64_t *sh);
/* Checks of generated WGSL: occurrences of `what` in s; the bytes of its `var<workgroup> X:
   array<T, n>` declarations (f16 2 bytes, else 4); brackets and parentheses balanced. */
int test_count(const char *s, const char *what);
uint32_t test_wgsl_workgroup_bytes(const char *s);
bool test_balanced(const char *s);
void test_shape_str(char *out, size_t cap, int nd, const int64_t *sh);
/* wgml_ref_matmul (tests/ref/ref.h; the arguments as there) of float operands, each widened with
   test_to_double first. */
void test_ref_matmul(int64_t batch, int64_t M, int64_t N, int64_t K, const float *A, int64_t batch_a,
                     int trans_a, const float *B, int64_t batch_b, int trans_b, double alpha,
                     const float *bias, int act, double *C);

/* x is (outer, len, inner): the least distance between the max and the runner-up of the
   runs along len that a max reduction takes (0 at a tie; +inf when len < 2). max's
   derivative jumps at a tie, so gradient tests keep their inputs this far from one. */
double test_max_gap(int64_t outer, int64_t len, int64_t inner, const double *x);

/* Max relative error of got against want: |g - w| / max(|w|, floor). NaN/inf must match
   exactly (same class and sign) or the result is +inf. */
double test_max_rel_err(const float *got, const double *want, size_t n, double floor);
/* Prints the worst element side by side when err > tol; returns err <= tol. */
int test_close(const char *what, const float *got, const double *want, size_t n, double tol,
               double floor);

/* An f32 tensor of this shape from host data (CHECKs the upload; NULL if it failed). */
wgml_tensor *test_tensor(wgml_context *ctx, int ndim, const int64_t *shape, const float *data);
/* ... of i32 host data */
wgml_tensor *test_tensor_i32(wgml_context *ctx, int ndim, const int64_t *shape, const int32_t *data);

/* A shared context on the default adapter (lavapipe in CI); NULL (and a FAIL) if none. */
wgml_context *test_context(void);
void test_context_release(void);

/* A fresh context that writes its profile (WGML_PROFILE's table of launches) to a new
   temporary file when freed; the file's name goes into path (TEST_PROFILE_PATH bytes). NULL
   (and a FAIL) if none. */
#define TEST_PROFILE_PATH 40
wgml_context *test_profiled_context(char *path);
/* The launches of that profile (read after its context is freed) whose names start with
   `part` ("" for all of them) */
long test_profile_count(const char *path, const char *part);

/* Runs `suite` with the GEMM kernel the adapter does not pick by default (WGML_GEMM_CPU: the
   tiled kernels on a CPU adapter, the CPU kernel on a GPU), on a fresh context. */
void test_with_other_gemm_kernel(void (*suite)(void));

#endif
