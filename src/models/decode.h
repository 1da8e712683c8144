/*
 * The decode plan (models/decode.c): generation without building a graph per token.
 *
 * Made once per sampling session from a model: its weights copied into a GEMV-friendly layout
 * (each output's weights contiguous, optionally as f16; laid out by a graph on the GPU), a KV
 * cache per layer for `batch` sequences (slots; f32, or halves), the activations, and every
 * pipeline and bind group. A token then costs a
 * fixed list of dispatches that reads two small buffers the GPU itself updates: each row's
 * (slot, position, token) and the tokens sampled so far. The sampling kernel writes the next
 * token and position there, so several tokens are recorded into one submit and read back
 * together; the host only writes a pass's rows for a prefill (a prompt, or the sliding window
 * restarting past the block, as wgml_gpt_generate_step does).
 *
 * Dispatches per token and layer: GPT-2 3 where the shapes allow (norm+QKV+bias+cache append,
 * with the embedding in layer 0; attention+output projection, a partial sum per K/V head;
 * norm+MLP-up+GELU+MLP-down, a partial sum per block of hidden units: each launch adds up the
 * partial sums of the one before as it reads its input, and its workgroup 0 writes the
 * residual stream), else 5 (norm+QKV+bias+append, attention, projection+residual,
 * norm+MLP-up+GELU, MLP-down+residual); Llama 5 (QK-norm+RoPE+append inside the attention);
 * one more a layer where the decode step's attention is split over chunks of positions (its
 * combine, unless the chunks' last workgroup does it on wgpu-native; by default where the block
 * is 512 or longer, or too long for a whole row of scores: then with a few chunk sizes, each
 * submit taking the one its positions call for); plus the final norm+head (each of its
 * workgroups leaving its best noised logit as a candidate) and the sampler over the candidates
 * (and the embedding, where not fused).
 *
 * Lives in models/ (layer 5) because it reads the model; it uses core's pipeline cache and the
 * runtime directly instead of the lazy graph (both lower layers), and owns its buffers and
 * bind groups (the bind cache may drop its entries; the plan's must stay).
 */
#ifndef WGML_MODELS_DECODE_H
#define WGML_MODELS_DECODE_H

#include <stdint.h>

#include "models/gpt.h"

typedef struct wgml_decode_desc {
    int64_t batch;            /* sequences (slots) sampled together, at most 256; 0 means 1 */
    int64_t max_prefill;      /* rows of one prefill pass; 0 means min(block, 256) */
    int64_t steps_per_submit; /* tokens per slot recorded into one submit; 0 means 16, more than 4096 as 4096 */
    int f16_weights;          /* the matrices stored as f16 (f32 sums): half the bytes read */
    float temperature;        /* 0 (below 1e-4): the argmax; else Gumbel-max at this temperature */
    uint64_t seed;            /* the Gumbel noise's: a hash of (seed, slot, position, token) */
    int unfused;              /* 1: GPT-2 in the five launches a layer, not three (tests, comparisons) */
    int lanes;                /* threads summing one output of a GEMV: 8, 16, 32, 64, 128; 0 by its size (tests) */
    int head_lanes;           /* the LM head's: 8, 16, 32, 64, 128; 0 as lanes (over 65,536 rows or more: 32 at batch 1, else 16) */
    int attn_parts;           /* at most this many threads share an attention output (0: all; tests) */
    int x_chunk;              /* a GEMV's inputs staged at a time, a multiple of 8 (0: as many as fit; tests) */
    int mlp_block;            /* hidden units a workgroup of GPT-2's fused MLP, a multiple of 8 (0: 32, or 64 where
                                 32 would make more than 64 partial sums) */
    int attn_chunk;           /* the decode step's attention split over chunks of this many positions, a workgroup
                                 each, and combined (combine_launch); 0: where the block is >= 512 or its whole row
                                 of scores does not fit the workgroup memory, 64 at batch 1, else 16 times the batch
                                 rounded up to a power of two (unsplit where that reaches a block that fits whole),
                                 -1: never (refused where the whole row does not fit); a chunk >= such a block does
                                 not split either, nor does the fused GPT-2 form; halved until the chunk fits */
    int combine_launch;       /* 1: the split attention's chunks combined by a launch of their own; 0: by the last
                                 chunk workgroup of each K/V head to finish, where the runtime is wgpu-native (its
                                 storageBarrier is a device-scope fence: decode_wgsl.c), else the launch */
    int attn_wgs;             /* threads a workgroup of the split attention with its loads first (256, 512, 1024; 0:
                                 8 a position of the chunk, at least 256, at most the adapter's widest; comparisons) */
    int attn_late;            /* 1: the split attention's cache loads after its prologue (as before; comparisons), not
                                 issued first */
    int attn_cols;            /* GPT-2's fused attention + projection: the projection's columns in this many blocks, a
                                 workgroup each that works out its K/V head's attention again (0: 4) */
    int sample_logits;        /* 1: the sampler reads every logit; 0: the candidates the head's workgroups leave, each
                                 its best noised logit (the same draw: comparisons) */
    int subgroups;            /* the GEMVs' lanes' sums and norm statistics, and the split attention's QK-norm and softmax
                                 sums, by subgroup operations: 1 on (the adapter must have subgroups), -1 off (trees in
                                 workgroup memory), 0 on where the adapter has them */
    int head_wgs;             /* the LM head in this many workgroups, each staging x once and going over tiles of rows,
                                 the next tile's loads before this one's sums (its candidates then this many a row);
                                 -1: a workgroup a tile; 0: where the tiles number 4096 or more 528 at 32 lanes, else
                                 512; a tile each where they are fewer */
    int f16_cache;            /* 1: the K/V cache in halves (f32 sums) where the adapter has shader-f16 and K/V heads
                                 times head size is even: half its memory and its reads; 0: f32 */
    int attn_target;          /* the decode step's attention takes, for each submit, the shortest of its chunk sizes
                                 (attn_chunk's, then doubled while a sixteenth of the block and the workgroup memory
                                 allow, at most 4 more) whose workgroups at the
                                 longest position reached number at most this many (0: 192: chunks of 256 for Qwen3's
                                 shape at 4,096 positions, the best of an H200's sweep there) */
    int host_layout;          /* 1: the matrices laid out for the GEMVs on the host (as before; comparisons), not by a
                                 graph on the GPU (where rows need no padding and each fits a binding) */
    int grid_block;           /* Llama, or GPT-2 with an even head size (not unfused), at batch 1 on wgpu-native over
                                 Vulkan, a GPU: each layer's projection, norm + MLP up and down, and the next layer's
                                 norm + QKV, in one launch of this many workgroups (a power of two) apart by barriers
                                 across the grid, not four launches (GPT-2: instead of its fused form). A trial launch
                                 at the plan's making checks they are all resident at once: a forced count that is
                                 not, WGML_ERROR_UNSUPPORTED. 0: the policy's, 256 where a phase has 4,096 rows or
                                 more, else 128, or half that where the trial passes, else the launches apart (so too
                                 where the block's staged inputs pass the workgroup memory: Llama's F past 11,752 at 48 KB;
                                 and on a CPU adapter); -1: apart (GPT-2: fused where it fits).
                                 Tokens read after a barrier gave up waiting: WGML_ERROR_DEVICE (the next
                                 wgml_decode_start begins afresh) */
    int graph_prefill;        /* prefills of at least this many positions (a prompt's all but its last token; a window
                                 restart's) go through the model's graph (GEMMs), shorter ones by the plan's rows;
                                 0: 64, -1: never */
    int gemv_wgs;             /* past batch 1, the decode step's normed GEMVs (QKV, the MLP's up) in this many
                                 workgroups, each staging x once and going over tiles of rows as the head's; 0: 132
                                 where they have 256 tiles or more, else a workgroup a tile; -1: a workgroup a tile */
    int gemv_rows;            /* where a pass has several rows (past batch 1; the prefill passes), rows each lane group
                                 of every GEMV sums (wgml_decode_gemv.nr: 2, 4);
                                 0: 2 for the GEMVs without a norm (the projection, MLP down), 1 for the others; -1: 1 */
    int gemv_row_groups;      /* so too (several rows), the GEMVs without a norm take their rows in this many groups, a workgroup
                                 each (grid y), each staging only its rows: more workgroups; 0: 2 rows a group, -1: one group */
    int grid_counters;        /* the grid block's barrier: the workgroups' arrivals spread over this many counters (a
                                 power of two up to 16; more than the grid's workgroups: as many), each workgroup waiting
                                 on all of them (fewer atomics at one word); 0: the policy's, 8 at 256 workgroups or
                                 more, else 1 */
    int grid_wait;            /* how the grid block's phases wait for the one before (wgml_grid_wait + 1): 1 a barrier
                                 across the grid, 2 its arrivals without its fences and the outputs' words tagged as
                                 this launch's, 3 no arrivals, a few threads reading the tags; 0: the policy's, 2 at
                                 256 workgroups or more or where a workgroup would have no rows in a phase (probed
                                 refuses those), else 3 (an H200: Qwen3-0.6B b1 +3.1-3.9% against the barrier, the
                                 character GPT b1 f16 +9%: docs/MEASUREMENTS.md) */
    int gemv_planes;          /* the GEMVs and the grid block over f16 weights stage x in planes (wgml_decode_gemv.planes,
                                 wgml_decode_block.planes): 0 or 1 on, -1 off (an H200: Qwen3-0.6B b8 3.52 -> 3.03 ms a
                                 step, b1 +4.3%; the character GPT b1 f16 +2.9%) */
} wgml_decode_desc;

typedef struct wgml_decode_plan wgml_decode_plan;

/* g must outlive the plan: long prompts are prefilled through its graph.
   WGML_ERROR_UNSUPPORTED when the shapes are past what the kernels take (the attention keeps a
   row's scores in workgroup memory: (H / Hkv) floats a position of a chunk, or of the whole
   block where it fits or attn_chunk is -1); the caller then keeps the graph path. */
wgml_status wgml_decode_plan_create(wgml_gpt *g, const wgml_decode_desc *d, wgml_decode_plan **out);
void wgml_decode_plan_free(wgml_decode_plan *p); /* NULL is fine */

/* Starts slots 0..count-1 (count <= batch) on prompts[s][0..lens[s]) (each >= 1 token),
   forgetting what they held: each slot's last `block` tokens are fed in prefill passes (the
   rows of several prompts in one pass, many rows a dispatch), and first[s] gets its first new
   token. */
wgml_status wgml_decode_start(wgml_decode_plan *p, int64_t count, const int32_t *const *prompts, const int64_t *lens,
                              int32_t *first);
/* Every started slot draws `steps` more tokens, out[s * steps + k] (s < the started count).
   Recorded `steps_per_submit` tokens a submit and read back together; past the block a slot
   restarts from its last block / 2 tokens (a prefill), as wgml_gpt_generate_step does. */
wgml_status wgml_decode_generate(wgml_decode_plan *p, int64_t steps, int32_t *out);
/* As wgml_decode_generate, each token also passed to each(slot, token, user) as its chunk is read
   (step by step, the slots in order); each returning nonzero stops: no chunk is submitted after,
   those in flight are read (their tokens in out and the slots' state, not passed to each). */
typedef int (*wgml_decode_token_fn)(int64_t slot, int32_t token, void *user);
wgml_status wgml_decode_generate_each(wgml_decode_plan *p, int64_t steps, int32_t *out, wgml_decode_token_fn each, void *user);

/* wgml_gpt_generate's sampler at batch 1: n_new tokens after prompt, greedy or at a
   temperature (the Gumbel seed drawn from the context's generator), the plan's matrices f16
   where f16_weights, into out and on_token as
   wgml_gpt_generate gives them. *used = 0 (and nothing done) where the plan does not take the
   model, or the adapter is a CPU (lavapipe, where the graph path is faster) and on_cpu is 0
   (1: the tests'): the caller then keeps the graph path. */
wgml_status wgml_decode_sample_tokens(wgml_gpt *g, const int32_t *prompt, int64_t n_prompt, int64_t n_new, float temperature,
                               int f16_weights, int32_t *out, int (*on_token)(int32_t, void *), void *user, int on_cpu,
                               int *used);

/* wgml_gpt_generate_batch's sampler: n_seq sequences through one plan of up to
   WGML_DECODE_BATCH_SLOTS slots in turns (half as many while the slots' caches pass a limit of
   the adapter or its memory), n_new tokens each into out[s * n_new + k], greedy or at a
   temperature (each turn's Gumbel seed apart). *used = 0 (and nothing done) where the plan does
   not take the model even at one slot, or the adapter is a CPU and on_cpu is 0 (1: the tests'). */
#define WGML_DECODE_BATCH_SLOTS 8
wgml_status wgml_decode_sample_batch(wgml_gpt *g, int64_t n_seq, const int32_t *const *prompts, const int64_t *lens, int64_t n_new,
                                     float temperature, int f16_weights, int32_t *out, int on_cpu, int *used);

/* What one decode step costs: dispatches (structural; the policy's chunk: a longer one may
   differ by the combine's launches), and the host's encoding time of the last generate call
   per token, in seconds. */
int64_t wgml_decode_dispatches_per_step(const wgml_decode_plan *p);
/* The attention's chunk (positions a workgroup; 0: whole) the next `steps` decode steps would
   take from the started slots' positions now (attn_target). */
unsigned wgml_decode_step_chunk(const wgml_decode_plan *p, int64_t steps);
double wgml_decode_host_seconds_per_token(const wgml_decode_plan *p);
/* Bytes of weights one step reads (for the bandwidth it reaches). */
int64_t wgml_decode_weight_bytes(const wgml_decode_plan *p);
/* Bytes of the K/V caches (every layer's, both, all slots): halves with wgml_decode_desc's
   f16_cache where the adapter has shader-f16. */
int64_t wgml_decode_cache_bytes(const wgml_decode_plan *p);
/* The workgroups of the decode step's MLP block in one launch (wgml_decode_desc's grid_block;
   0: its launches apart). */
unsigned wgml_decode_grid_workgroups(const wgml_decode_plan *p);
/* Tests: the grid barrier's words set as if earlier launches had left them (count: as if that
   many arrivals had come, a multiple of the workgroups; with several counters each is set 1/K
   of count's distance to 2^32 short of it, so that they wrap at the barrier one counter would;
   gave_up: the word a wait sets where it gave up); wgml_decode_start sets them afresh.
   WGML_ERROR_UNSUPPORTED where the plan has no grid. */
wgml_status wgml_decode_grid_words(wgml_decode_plan *p, uint32_t count, uint32_t gave_up);
/* (what each of k counters is set to for count: 1/k of count's distance to 2^32 short of it) */
uint32_t wgml_decode_grid_counter_start(uint32_t count, unsigned k);

/* A step's GPU time by kind of launch: each launch of `steps` decode steps of the started slots
   runs in a compute pass of its own between two timestamps (rows[r]: its kind, launches of that
   kind a step, seconds a step; at most max_rows kinds, in the step's order); *step_seconds is a
   whole step's in one pass, as generation runs it, and rows[r].without_seconds the same pass with
   that kind's launches left out (so step - without is what the kind costs inside the pass, its
   share of the gaps between launches included: alone, each launch pays a pass's start and
   drain; 0 where a slot's block has no room for (2 + kinds) x steps positions). Needs timestamp
   queries (else WGML_ERROR_UNSUPPORTED) and room for 2 x steps positions in every slot's block;
   it draws tokens: start the slots again after. */
typedef struct wgml_decode_profile_row {
    const char *what;
    int64_t launches;
    double seconds;
    double without_seconds;
} wgml_decode_profile_row;
wgml_status wgml_decode_profile(wgml_decode_plan *p, int64_t steps, wgml_decode_profile_row *rows, int max_rows, int *n_rows,
                                double *step_seconds);

#endif
