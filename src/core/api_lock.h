/*
 * What the generated public entry points (scripts/gen_api_locks.py) call: each public call on
 * a context runs between wgml_context_enter and wgml_context_leave, so two threads never run
 * inside one context at once (the second waits), and a context used in a child process after
 * fork() is refused instead of reaching a device that belongs to the parent.
 */
#ifndef WGML_CORE_API_LOCK_H
#define WGML_CORE_API_LOCK_H

#include <stdbool.h>

#include "wgml.h"

/* Waits for ctx's lock (recursive: a call made from inside a call, such as a gradient hook's,
   passes). In a process that is not the one that made ctx (a fork's child) it takes no lock
   and returns WGML_ERROR_CONTEXT with the message naming fn: the parent's lock may have been
   held by a thread the child does not have, and its device is the parent's. */
wgml_status wgml_context_enter(wgml_context *ctx, const char *fn);
void wgml_context_leave(wgml_context *ctx);
/* Whether ctx was made by this process (not by a parent before a fork). In a fork's child the
   calls that read or clear the last failure answer from the child's copy, lock-free (the child
   has one thread there), so that reading the message of a refused call does not replace it. */
bool wgml_context_in_own_process(const wgml_context *ctx);
/* An error tensor for a refused op (core/context.c). */
wgml_tensor *wgml_refused_tensor(wgml_context *ctx);

/* The context a handle belongs to; NULL for NULL (the call then reports that itself). */
wgml_context *wgml_tensor_owner(const wgml_tensor *t);       /* core/tensor.c */
wgml_context *wgml_optimizer_owner(const wgml_optimizer *o); /* train/optim.c */
wgml_context *wgml_file_owner(const wgml_file *f);           /* io/tensor_file.c */

#endif
