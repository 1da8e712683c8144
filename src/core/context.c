/*
 * Context creation and teardown: the runtime opened below, core's own state around it, and
 * the extensions of the layers above freed through their hooks.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/api_lock.h"
#include "core/context.h"

static _Thread_local char create_error[1024];

/* Forks this process has gone through (counted in the child): a context whose count differs
   was made by an ancestor. A counter rather than getpid() on every call: it costs a load. */
static atomic_uint fork_count;
static pthread_once_t fork_hook_once = PTHREAD_ONCE_INIT;
static void count_fork_in_child(void) { atomic_fetch_add(&fork_count, 1); }
static void install_fork_hook(void) { pthread_atfork(NULL, NULL, count_fork_in_child); }

bool wgml_context_in_own_process(const wgml_context *ctx) { return ctx->fork_generation == atomic_load(&fork_count); }

wgml_status wgml_context_enter(wgml_context *ctx, const char *fn)
{
    if (!wgml_context_in_own_process(ctx))
        return wgml_fail(ctx, WGML_ERROR_CONTEXT,
                         "%s: this context was made by process %ld, and this process (%ld) is a child of it made by "
                         "fork(): a context belongs to the process that made it; start GPU work in a new program "
                         "(exec, posix_spawn, Python's spawn): GPU drivers may refuse a device to a fork's child",
                         fn, ctx->pid, (long)getpid());
    pthread_mutex_lock(&ctx->lock);
    return WGML_OK;
}

void wgml_context_leave(wgml_context *ctx) { pthread_mutex_unlock(&ctx->lock); }

wgml_tensor *wgml_refused_tensor(wgml_context *ctx)
{
    return wgml_tensor_error(ctx, WGML_ERROR_CONTEXT, "%s", wgml_error_message(ctx));
}

wgml_status wgml_context_lock(wgml_context *ctx)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    return wgml_context_enter(ctx, "wgml_context_lock");
}

void wgml_context_unlock(wgml_context *ctx)
{
    if (ctx && wgml_context_in_own_process(ctx)) wgml_context_leave(ctx);
}

const char *wgml_last_create_error(void) { return create_error; }

wgml_status wgml_context_create(const wgml_context_desc *desc_in, wgml_context **out)
{
    create_error[0] = 0;
    if (!out) {
        snprintf(create_error, sizeof create_error, "wgml_context_create: out is NULL");
        return WGML_ERROR_INVALID_ARGUMENT;
    }
    *out = NULL;
    wgml_context_desc desc = desc_in ? *desc_in : (wgml_context_desc){0}; /* checked by wgml_settings_resolve */
    wgml_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        snprintf(create_error, sizeof create_error, "out of host memory");
        return WGML_ERROR_OUT_OF_MEMORY;
    }
    pthread_once(&fork_hook_once, install_fork_hook);
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    int lock_failed = pthread_mutex_init(&ctx->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    if (lock_failed) {
        free(ctx);
        snprintf(create_error, sizeof create_error, "wgml_context_create: could not make the context's lock");
        return WGML_ERROR_OUT_OF_MEMORY;
    }
    ctx->fork_generation = atomic_load(&fork_count);
    ctx->pid = (long)getpid();
    wgml_status st = wgml_runtime_open(&ctx->rt, &desc, create_error, sizeof create_error);
    if (st) {
        pthread_mutex_destroy(&ctx->lock);
        free(ctx);
        return st;
    }
    ctx->trusted_kernels = !ctx->rt.settings.bounds_checks;
    ctx->desc = desc;
    wgml_settings_forget_strings(&ctx->desc); /* the caller's (ctx->rt.settings has copies) */
    *out = ctx;
    return WGML_OK;
}

void wgml_context_free(wgml_context *ctx)
{
    if (!ctx) return;
    /* a fork's child leaves the parent's context alone: releasing its device here could wait
       on the parent's threads forever */
    if (!wgml_context_in_own_process(ctx)) return;
    /* waits for a call another thread is inside (freeing a context while another thread
       still calls it, or will, is the caller's bug, as in wgml.h) */
    pthread_mutex_lock(&ctx->lock);
    wgml_tensors_free_all(ctx);
    for (int i = ctx->n_ext - 1; i >= 0; i--) {
        if (ctx->ext[i].release) ctx->ext[i].release(ctx, ctx->ext[i].state);
        free(ctx->ext[i].state);
    }
    wgml_pool_destroy(ctx);
    wgml_bind_cache_clear(ctx);
    wgml_pipelines_destroy(ctx);
    wgml_runtime_close(&ctx->rt);
    pthread_mutex_unlock(&ctx->lock);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

void *wgml_extension_get(wgml_context *ctx, const void *key)
{
    for (int i = 0; i < ctx->n_ext; i++)
        if (ctx->ext[i].key == key) return ctx->ext[i].state;
    return NULL;
}

void *wgml_extension_make(wgml_context *ctx, const void *key, size_t size, wgml_extension_release release)
{
    void *state = wgml_extension_get(ctx, key);
    if (state) return state;
    if (ctx->n_ext == WGML_MAX_EXTENSIONS) {
        wgml_fail(ctx, WGML_ERROR_LIMIT, "internal: more than %d layer extensions on one context", WGML_MAX_EXTENSIONS);
        return NULL;
    }
    if (!(state = calloc(1, size))) {
        wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
        return NULL;
    }
    ctx->ext[ctx->n_ext].key = key;
    ctx->ext[ctx->n_ext].state = state;
    ctx->ext[ctx->n_ext].release = release;
    ctx->n_ext++;
    return state;
}

wgml_status wgml_adapter_info_get(wgml_context *ctx, wgml_adapter_info *info)
{
    if (!ctx || !info) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_adapter_info_get: NULL argument");
    *info = ctx->rt.info;
    return WGML_OK;
}

wgml_status wgml_synchronize(wgml_context *ctx)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    return wgml_wait_idle(&ctx->rt);
}

void wgml_debug_destroy_device(wgml_context *ctx)
{
    if (ctx && ctx->rt.device) wgml_runtime_destroy_device(&ctx->rt);
}

void wgml_debug_fail_submits(wgml_context *ctx, int skip, int n)
{
    if (ctx) ctx->rt.debug_pass_submits = skip > 0 ? skip : 0, ctx->rt.debug_fail_submits = n > 0 ? n : 0;
}

bool wgml_sgmat_adapter_shape(const wgml_context *ctx, int *m, int *n, int *k, int *subgroup_size)
{
    const wgml_adapter_info *in = &ctx->rt.info;
    if (!in->has_subgroup_matrix || !in->subgroup_min_size || in->subgroup_min_size != in->subgroup_max_size) return false;
    int best = -1;
    for (int i = 0; i < in->subgroup_matrix_count; i++) {
        const wgml_subgroup_matrix_config *c = &in->subgroup_matrix[i];
        if (!c->component || !c->result || strcmp(c->component, "f16") || strcmp(c->result, "f32")) continue;
        /* 16x16x16 where offered: the narrower shapes were never ahead (docs/MEASUREMENTS.md) */
        if (best < 0 || (c->m == 16 && c->n == 16 && c->k == 16)) best = i;
    }
    if (best < 0) return false;
    const wgml_subgroup_matrix_config *c = &in->subgroup_matrix[best];
    *m = (int)c->m, *n = (int)c->n, *k = (int)c->k, *subgroup_size = (int)in->subgroup_min_size;
    return true;
}
