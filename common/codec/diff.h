/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Site-aware diff of two artifacts of the same kind. Only changed bytes
 * become regions: one region per changed site (from its first to its last
 * differing byte), and byte runs for changed header/gap bytes — never one
 * region spanning unchanged data between sites. When the layouts differ
 * (tensors moved, file size changed), the whole target is one region and
 * layout_changed says so: correct, just not small.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "artifact.h"
#include "error.h"

/* Changed gap bytes closer than this are one run (headers change in a few nearby places). */
#define DIFF_GAP_MERGE 256

typedef struct DiffRegion {
        uint64_t offset;                /* first differing byte */
        uint64_t length;                /* through the last differing byte */
        uint64_t changed_bytes;         /* bytes in the region that differ */
        ssize_t site;                   /* index into the target's sites, -1 for header/gap bytes */
} DiffRegion;

typedef struct Diff {
        DiffRegion *regions;            /* sorted by offset, not overlapping */
        size_t n_regions;
        bool layout_changed;
        uint64_t changed_bytes;         /* total differing bytes (+ size difference) */
        size_t sites_changed;
        size_t sites_total;
} Diff;

Diff *diff_free(Diff *d);
DEFINE_POINTER_CLEANUP(Diff, diff_free)

/* Compare @base and @target (same kind, else -EINVAL with a message); streams both models' files. */
_warn_unused_result_ int diff_compute(const FileSet *base_files, const Artifact *base, const FileSet *target_files,
                                      const Artifact *target, Diff **ret, TpError *err);

/*
 * Whether two artifacts have the same layout (kind, size, every site's name, type, offset,
 * length, and for a directory its files' names and sizes).
 */
bool artifact_same_layout(const Artifact *a, const Artifact *b);
