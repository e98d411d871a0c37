/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Matching a target's sites to a base's by identity, wherever they sit:
 * the plan of a relocating bundle (format 2). The plan is a list of pieces
 * that tile the target in order; each says where its bytes come from:
 *
 *   MATCH_COPY     the base bytes at base_offset, unchanged (a site, and the
 *                  padding or framing that follows it when that matches too);
 *   MATCH_CHANGED  a site whose base site of the same name has the same type
 *                  and length: the changed window, coded against the base
 *                  site's bytes (delta or raw, whichever is smaller);
 *   MATCH_REF      header bytes, framing, or the rest of a resized site:
 *                  coded with nearby base bytes as a reference (at most
 *                  MATCH_REF_MAX bytes), or raw;
 *   MATCH_NEW      bytes with no counterpart in the base (a new site): raw.
 *
 * Adjacent copies of contiguous base bytes are one piece, so a model whose
 * metadata grew keeps its data section as a handful of copies.
 *
 * Every piece becomes a span, and a span costs a manifest entry with its
 * hashes and a zstd frame with its tables: so short copies are folded into
 * the coded pieces around them where that is cheaper than a span of their
 * own. Changed pieces that read the base at the same displacement, with
 * copies of at most MATCH_FOLD_COPY between them, are one changed piece
 * (the copies' bytes code to zeros in the delta: a few bytes per 128 KiB);
 * a ref piece takes in the copies and short raw pieces next to it when
 * their base bytes fit its reference (one match each).
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "artifact.h"
#include "delta.h"
#include "error.h"

#define MATCH_REF_MAX (1u << 20)       /* the most base bytes a piece refers to: manifest.h's SPAN_REF_MAX */
#define MATCH_REF_PIECE (512u << 10)   /* target bytes per ref piece */
#define MATCH_REF_SLACK (256u << 10)   /* base bytes on either side of a ref piece's counterpart */
#define MATCH_FOLD_COPY (1u << 20)     /* the longest copy folded into the coded pieces around it */
#define MATCH_REF_SPAN (4u << 20)      /* the longest ref piece folding makes: its reference stays in zstd's
                                        * 8 MiB window (BUNDLE_WINDOW_LOG) to its end */

typedef enum MatchKind {
        MATCH_COPY,
        MATCH_CHANGED,
        MATCH_REF,
        MATCH_NEW,
        _MATCH_KIND_MAX,
} MatchKind;

typedef struct MatchPiece {
        uint64_t offset, length;        /* in the target */
        MatchKind kind;
        uint64_t base_offset, base_length;      /* COPY, CHANGED: base_length == length; REF: the reference */
        ssize_t site;                   /* target site index, or -1 for header/gap bytes or several sites */
        DeltaLayout layout;             /* CHANGED: the delta layout its bytes are coded in (a whole number of units) */
} MatchPiece;

/* What became of a target site. */
typedef enum SiteFate {
        SITE_SAME,                      /* same name, same bytes, same offset */
        SITE_MOVED,                     /* same name, same bytes, another offset */
        SITE_RENAMED,                   /* a removed base site's bytes under a new name */
        SITE_CHANGED,                   /* same name, type and length, other bytes */
        SITE_RESIZED,                   /* same name, another length or type */
        SITE_ADDED,                     /* no counterpart */
        _SITE_FATE_MAX,
} SiteFate;

const char *site_fate_to_string(SiteFate f);   /* "same", "moved", "renamed", "changed", "resized", "added" */

typedef struct Match {
        MatchPiece *pieces;
        size_t n_pieces;
        SiteFate *fate;                 /* per target site */
        ssize_t *counterpart;           /* per target site: base site index, -1 when added */
        size_t *removed;                /* base sites with no counterpart, by index */
        size_t n_removed;
        size_t count[_SITE_FATE_MAX];
} Match;

/* The delta layout of a site's bytes: by its ggml, ONNX or safetensors type (F32, F16, BF16 their own,
 * the other dtypes bytes); DELTA_BYTES for other files. */
DeltaLayout site_delta_layout(const Artifact *a, const Site *s);
/* The same for a relocating bundle (format 2), which may also use the layouts format 1 cannot (DELTA_I8AC for 8-bit ONNX tensors). */
DeltaLayout site_delta_layout_relocating(const Artifact *a, const Site *s);

Match *match_free(Match *m);
DEFINE_POINTER_CLEANUP(Match, match_free)

/*
 * How a plan is made (may be NULL: every changed piece may be folded with its neighbours):
 * @own_span says which target sites' changed pieces stay spans of their own, never folded with
 * another site's (a lora span predicts one tensor: the tensors a LoRA adapter adapts; a rescale
 * span one quantized tensor, create_match_options()).
 */
typedef struct MatchOptions {
        bool (*own_span)(const Site *target_site, void *userdata);
        void *userdata;
} MatchOptions;

/* Plan @target from @base (same kind, else -EINVAL); reads both files. */
_warn_unused_result_ int match_compute(const FileSet *base_files, const Artifact *base, const FileSet *target_files,
                                       const Artifact *target, const MatchOptions *o, Match **ret, TpError *err);
