/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Building a bundle: from a base, a target and their diff to a signed
 * .tpb file. When the target keeps the base's layout (format 1), each
 * changed region becomes a span, coded both raw and as a block-layout delta
 * against the base bytes, and the smaller zstd frame goes into the payload.
 * When the layout moved (diff->layout_changed), the sites are matched by
 * name (match.h) and the bundle is relocating (format 2): copies of base
 * bytes, changed sites as deltas against their base site, header and
 * resized bytes as ref frames (zstd with base bytes as a reference prefix)
 * or raw, whichever is smaller.
 */

#include <stdbool.h>
#include <stdint.h>

#include "artifact.h"
#include "diff.h"
#include "error.h"
#include "lora.h"
#include "manifest.h"
#include "match.h"

typedef struct Signer Signer;
typedef struct RecipientKey RecipientKey;

#define CREATE_DEFAULT_LEVEL 19
/*
 * The chunk size of a target's chunk table (and of a slot provisioned without a bundle). An
 * incremental switch rehashes every chunk a span touches, so each span costs up to a chunk of
 * slack on each side: 256 KiB read about 26 MB for the bench's 24 MB sibling switch where 1 MiB
 * read 35 MB. A slot sealed with another chunk size is verified in full once, then resealed.
 */
#define CREATE_DEFAULT_CHUNK (256u << 10)

/* One tensor's importance row as the target's quantizer took it (model/imatrix.h reads them). */
typedef struct ImportanceRow {
        const char *name;               /* the tensor's */
        const float *values;
        size_t n;
} ImportanceRow;

typedef struct CreateOptions {
        ManifestRole role;              /* a task bundle, or a base bundle (a delta, or full: from an empty base) */
        const char *task;
        const char *model;              /* the device model it is for; NULL: MANIFEST_DEFAULT_MODEL */
        uint64_t version;
        int64_t created;                /* seconds since the epoch */
        int64_t expires;                /* 0: never */
        Signer *signer;                 /* NULL: unsigned (tests only) */
        int level;                      /* zstd level */
        uint64_t chunk_size;            /* target chunk-hash table granularity */
        const Match *match;             /* the layout moved: match_compute()'s plan (NULL: computed here) */
        /* Encrypt the payload to these keys (encryption.h): each frame sealed with a fresh content
         * key, wrapped for each in the manifest; none: a plain payload. */
        RecipientKey *const *recipients;
        size_t n_recipients;
        /* The LoRA adapter the task was folded with (lora.h), or NULL: a changed tensor it adapts may
         * be a lora span (codec/predict.h), the factors and a residual against the prediction, when
         * that is smaller than its delta and its raw bytes. @lora_scale: the fold's scale (1.0). */
        const Lora *lora;
        float lora_scale;
        /* The importance rows the target was quantized with (llama-quantize --imatrix), or none: a
         * lora span of a tensor with a row of its length whose quantizer takes one carries the row
         * and is predicted with it (codec/predict.h), when the span is whole rows. */
        const ImportanceRow *importance;
        size_t n_importance;
        /* Without an adapter: find a changed float tensor's low-rank change (codec/lowrank.h; any kind of
         * model) and try it as a lora span with those factors. Costs the producer time (a randomized SVD
         * of each changed float tensor). */
        bool lowrank;
        /* Format 1: the manifest as plain YAML (readers made before BUNDLE_FLAG_MANIFEST_ZSTD need it),
         * instead of one zstd frame of it, about a third of its size. Format 2 always compresses. */
        bool plain_manifest;
} CreateOptions;

/* What each candidate frame of a span cost (UINT64_MAX: not tried; all of them for a copy). */
/*
 * What each candidate of a span costs in the payload (UINT64_MAX: not tried). At a high level
 * (CREATE_SCREEN_FROM and up) every candidate is first compressed at CREATE_SCREEN_LEVEL, and only
 * those within CREATE_SCREEN_MARGIN of the smallest (and a ref frame, whose prefix a fast level
 * matches poorly) are compressed again at the level asked for; the others' costs are their
 * screening sizes, flagged in @screened (1 << CREATE_COST_RAW, ...).
 */
typedef enum CreateCostIndex {
        CREATE_COST_RAW,
        CREATE_COST_ALT,
        CREATE_COST_LORA,
        CREATE_COST_LORA_IMATRIX,
        CREATE_COST_RESCALE,
        _CREATE_COST_MAX,
} CreateCostIndex;

#define CREATE_SCREEN_LEVEL 3
#define CREATE_SCREEN_FROM 10
#define CREATE_SCREEN_MARGIN 10         /* percent */

typedef struct CreateSpanCost {
        uint64_t raw, alt, lora;        /* alt: the delta against the base bytes, or the ref frame */
        uint64_t lora_imatrix;          /* lora, predicted with the tensor's importance row */
        uint64_t rescale;               /* an 8-bit tensor requantized per channel (codec/rescale.h) */
        unsigned screened;              /* the costs that are screening sizes */
} CreateSpanCost;

typedef struct CreateResult {
        unsigned format;                /* 1: in place; 2: relocating (the layout moved) */
        size_t n_spans, n_raw, n_delta, n_copy, n_ref, n_lora;
        size_t n_lora_imatrix;          /* lora spans that carry an importance row */
        size_t n_rescale;
        uint64_t span_bytes;            /* target bytes the spans code (not copies): the bundle's changed_bytes */
        uint64_t copied_bytes;          /* format 2: target bytes copied from the base */
        uint64_t manifest_bytes;
        size_t fates[_SITE_FATE_MAX];   /* format 2: target sites per SiteFate */
        size_t sites_removed;           /* format 2: base sites with no counterpart */
        bool whole_file;                /* format 2: nothing matched the base */
        uint64_t payload_bytes;
        uint64_t bundle_bytes;
        uint8_t target_sha256[32];
        CreateSpanCost *costs;          /* per span, in span order; freed by create_result_done() */
        size_t n_costs;
} CreateResult;

void create_result_done(CreateResult *r);

/* Whether @lora fits @target: each tensor it adapts there, with the size its factors make (-EINVAL naming it). */
_warn_unused_result_ int create_check_lora(const Lora *lora, const Artifact *target, TpError *err);

/* What create_match_options() decides with: the options and both models (all must outlive the match). */
typedef struct CreateMatchContext {
        const CreateOptions *o;
        const FileSet *base_files, *target_files;
        const Artifact *base, *target;
} CreateMatchContext;

/*
 * The options of match_compute() that suit @c (which must outlive them): with an adapter, each
 * tensor it adapts a span of its own; with lowrank, each matrix; an 8-bit tensor the graph
 * quantizes, of CREATE_OWN_QUANT_MIN bytes or more, when its rescale prediction saves a share of
 * its delta worth a span's manifest line (create_rescale_alone()).
 */
#define CREATE_OWN_QUANT_MIN (16u << 10)
MatchOptions create_match_options(const CreateMatchContext *c);

/*
 * Write the bundle to @out_path atomically (no file on failure). @ret (may be NULL) must be
 * released with create_result_done(). @base_files and @target_files
 * are the models' files (fileset.h); in a directory model no span crosses a file's end.
 */
_warn_unused_result_ int bundle_create(const FileSet *base_files, const Artifact *base, const FileSet *target_files,
                                       const Artifact *target, const Diff *diff, const CreateOptions *o,
                                       const char *out_path, CreateResult *ret, TpError *err);

/*
 * changed_bytes, one meaning in every command: the target bytes a bundle's
 * spans code, i.e. every byte not taken from the base as it is (format 1:
 * the spans, each a site's changed window in whole delta blocks; format 2:
 * every span but the copies). @match: the plan when the layout moved.
 */
uint64_t bundle_changed_bytes(const Artifact *base, const Artifact *target, const Diff *diff, const Match *match);

/*
 * Hash a model and its chunk table in one pass: each file's SHA-256 (into @ret_file_sha256, one
 * per file, unless NULL), the model's (fileset_digest(): a single file's own SHA-256), and when
 * @chunk_size > 0 the SHA-256 of the concatenated SHA-256s of each @chunk_size chunk of the
 * set's space (the last may be shorter). The chunk table lets a device re-verify only the
 * chunks a patch touched.
 */
_warn_unused_result_ int hash_model(const FileSet *set, uint64_t chunk_size, uint8_t (*ret_file_sha256)[32],
                                    uint8_t ret_sha256[32], uint8_t ret_chunk_root[32], TpError *err);
