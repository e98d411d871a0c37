/* SPDX-License-Identifier: MIT */
#pragma once

/* Internal to bundle_create() (create.c) and its lora spans (create-lora.c). */

#include <stdbool.h>
#include <stdint.h>
#include <zstd.h>

#include "create.h"
#include "delta.h"
#include "predict.h"
#include "rescale.h"

/* A span to build: where, which site, which delta layout, which base bytes. */
typedef struct Plan {
        uint64_t offset, length;
        ssize_t site;
        DeltaLayout layout;     /* DELTA_BYTES when nothing better; _DELTA_LAYOUT_INVALID: no delta */
        uint64_t base_offset;   /* of the delta's base bytes, a copy's source, a ref's reference */
        uint64_t ref_length;    /* > 0: a ref candidate against [base_offset, +ref_length) */
        bool copy;              /* format 2: the base bytes as they are */
} Plan;

typedef struct Coder {
        const FileSet *base_files, *target_files;
        const Artifact *target;         /* its sites: where an i8acp span's groups hold float32 values */
        ZSTD_CCtx *cctx;
        uint8_t *b, *t, *x, *out;       /* group buffers: base, target, transformed; zstd output */
        uint8_t *ref;                   /* a ref span's reference (SPAN_REF_MAX) */
        size_t group_max, out_cap;
        int level, screen_level;        /* the zstd level asked for; the screening one (0: none) */
        bool screening;                 /* cctx compresses at screen_level now */
        TpError *err;
} Coder;

/* A lora candidate for a plan (create-lora.c): the shape, the factors as stored and as floats. */
typedef struct CodeLora {
        LoraShape shape;
        uint64_t first_block;           /* the plan's first block in the tensor */
        uint8_t *a, *b;                 /* lora_a's and lora_b's bytes as stored: the adapter's, or another form */
        uint64_t na, nb;
        LoraFactors *factors;
        uint8_t *predicted;             /* one group */
        float *scratch;
        bool decided;                   /* shape.ac and the factors' form settled: the smallest */
        /* A quantized tensor's: lora_a's and lora_b's elements as the adapter gives them, as floats,
         * in its order; the other forms are made from them. NULL for a float tensor's. */
        float *source[2];
        bool source_bf16;               /* the adapter stores both as BF16 */
        /* Another form of the factors (make_form()), to trade places with (swap_form()). */
        struct {
                uint8_t *a, *b;
                uint64_t na, nb;
                uint32_t a_type, b_type;
                LoraFactors *factors;
        } alt;
} CodeLora;

/*
 * The smallest form of lora candidate @l, each counted at the current level: its residual
 * range-coded (shape.ac) or in the layout's planes (the range coder wins where the base's own
 * rounding scatters the residual, the planes where a near-exact prediction leaves runs of zeros
 * for zstd); then, with the better coder, its factors in the other forms a quantized tensor's
 * may take (make_form()): BF16, then I8 with ever coarser steps (|k| up to 127, 63, ..., 1)
 * while each is the smallest yet, those counted at the level asked for even while screening
 * (Coder.screening: the fast level misjudges the forms against each other). The smallest
 * form's size at the current level into @ret_size.
 */
_warn_unused_result_ int code_lora_decide(Coder *c, const Plan *p, CodeLora *l, uint64_t *ret_size, uint8_t base_sha[32],
                                         uint8_t new_sha[32]);

/* A rescale candidate for a plan (create-rescale.c): each channel's ratio and offset, and the prediction. */
typedef struct CodeRescale {
        RescaleParams *params;
        uint64_t first;                 /* the plan's first element in the tensor */
        uint8_t *predicted, *flip;      /* one group: the prediction, its flips (rescale.h) */
        uint8_t *leaned;                /* one group: the target's bytes flipped */
} CodeRescale;

/*
 * Compress one span's bytes into @fd: raw; a delta against the base bytes when @delta; a ref
 * frame when @ref; with @lora, the factors and then the delta against the prediction; with
 * @rescale, its parameters and then the delta against its prediction. Hashes the base and new
 * bytes on the way. -E2BIG, with no error set, when a group's delta does not fit its layout (an
 * entropy-coded layout, delta_encode()).
 */
_warn_unused_result_ int code_span(Coder *c, const Plan *p, bool delta, bool ref, const CodeLora *lora,
                                   const CodeRescale *rescale, int fd, uint64_t *ret_size, uint8_t base_sha[32],
                                   uint8_t new_sha[32]);

/* Feed @n bytes that precede a span's bytes in its frame into the frame (the zstd stream of @c). */
_warn_unused_result_ int code_frame_prefix(Coder *c, const uint8_t *bytes, uint64_t n, int fd, uint64_t *written);

/*
 * The lora candidate of @p, when @o has an adapter with a pair for its site, the base and
 * target sites are that tensor of the same predictable type, and the plan lies inside it:
 * 1 and @ret filled, 0 when there is none, < 0 on error (reading the adapter). With
 * @importance, the candidate predicted with the tensor's importance row (o->importance), and
 * none when it has no row the span can carry.
 */
_warn_unused_result_ int code_lora_prepare(Coder *c, const CreateOptions *o, const Artifact *base,
                                           const Artifact *target, const Plan *p, bool importance, CodeLora *ret);
void code_lora_done(CodeLora *l);
/* Write the factors' bytes into the frame (the zstd stream of @c); adds what it wrote to @written. */
_warn_unused_result_ int code_lora_factors(Coder *c, const CodeLora *l, int fd, uint64_t *written);
/* The prediction of the plan's bytes [pos, pos + n) from their base bytes @base, into l->predicted. */
void code_lora_predict(const CodeLora *l, uint64_t pos, const uint8_t *base, size_t n);

/*
 * The rescale candidate of @p, when its site is an 8-bit tensor the graph quantizes on both
 * sides (ArtifactQuant) with the same shape, the plan lies inside it with its base bytes at the
 * same place, and some channel is predicted better than by its base bytes: 1 and @ret filled,
 * 0 when there is none, < 0 on error.
 */
_warn_unused_result_ int code_rescale_prepare(Coder *c, const Artifact *base, const Artifact *target, const Plan *p,
                                              CodeRescale *ret);
void code_rescale_done(CodeRescale *l);
_warn_unused_result_ int code_rescale_params(Coder *c, const CodeRescale *l, int fd, uint64_t *written);
/* The residual of the plan's bytes [pos, pos + n) (@target) against their prediction from their base
 * bytes @base, delta_encode()d in @layout into @out; false when it does not fit (delta_encode()). */
_warn_unused_result_ bool code_rescale_residual(const CodeRescale *l, DeltaLayout layout, uint64_t pos,
                                                const uint8_t *base, const uint8_t *target, size_t n, uint8_t *out);
/*
 * Whether an ONNX model's change that keeps its layout (@diff) still codes better as a relocating
 * bundle (format 2), which the i8 layout and rescale spans need: 32 KiB or more of its changed
 * bytes are 8-bit tensors', or a changed tensor the graph quantizes is predicted better by a
 * rescale span by more than a few hundred bytes.
 */
/*
 * Whether target site @ts, a changed 8-bit tensor the graph quantizes, is worth a span of its own:
 * its rescale prediction saves at least 1/RESCALE_ALONE_SHARE of what its plain delta costs
 * (estimated). Less, and the manifest line and frame of a span of its own cost more than the
 * prediction saves: the tensor is folded with its neighbours. Unchanged or unreadable: false.
 */
#define RESCALE_ALONE_SHARE 50
bool create_rescale_alone(const FileSet *bf, const Artifact *base, const FileSet *tf, const Artifact *target,
                          const Site *ts);
_warn_unused_result_ int create_prefers_relocating(const FileSet *bf, const Artifact *base, const FileSet *tf,
                                                   const Artifact *target, const Diff *diff, bool *ret, TpError *err);
