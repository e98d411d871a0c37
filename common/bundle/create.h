/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Building a bundle: from a base, a target and their diff to a signed
 * .tpb file. Each changed region becomes a span; each span is coded both
 * raw and as a block-layout delta against the base bytes, and the smaller
 * zstd frame goes into the payload.
 */

#include <stdint.h>

#include "artifact.h"
#include "diff.h"
#include "error.h"

typedef struct Signer Signer;

#define CREATE_DEFAULT_LEVEL 19
#define CREATE_DEFAULT_CHUNK (1u << 20)

typedef struct CreateOptions {
        const char *task;
        uint64_t version;
        int64_t created;                /* seconds since the epoch */
        int64_t expires;                /* 0: never */
        Signer *signer;                 /* NULL: unsigned (tests only) */
        int level;                      /* zstd level */
        uint64_t chunk_size;            /* target chunk-hash table granularity */
} CreateOptions;

typedef struct CreateResult {
        size_t n_spans, n_raw, n_delta;
        uint64_t span_bytes;            /* bytes the spans write */
        uint64_t payload_bytes;
        uint64_t bundle_bytes;
        uint8_t target_sha256[32];
} CreateResult;

/* Write the bundle to @out_path atomically (no file on failure). */
_warn_unused_result_ int bundle_create(int base_fd, const Artifact *base, int target_fd, const Artifact *target,
                                       const Diff *diff, const CreateOptions *o, const char *out_path,
                                       CreateResult *ret, TpError *err);

/*
 * Hash a whole file and its chunk table in one pass: the file's SHA-256 and
 * the SHA-256 of the concatenated SHA-256s of each @chunk_size chunk (the
 * last may be shorter). The chunk table lets a device re-verify only the
 * chunks a patch touched.
 */
_warn_unused_result_ int hash_file_chunks(int fd, uint64_t size, uint64_t chunk_size, uint8_t ret_sha256[32],
                                          uint8_t ret_chunk_root[32], TpError *err);
