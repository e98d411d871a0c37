/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Applying a bundle to a base file offline: one sequential pass that copies
 * the unchanged bytes, decodes each span through span.h's decoder (the
 * checks and messages the device's stager uses too: the base bytes it
 * replaces and the new bytes it writes against the manifest), and hashes
 * base and result in full. The output is a temporary renamed into place
 * only when the result's SHA-256 equals the manifest's target: a refused
 * apply leaves no output file.
 *
 * A bundle for a model directory (fileset.h) takes the base's files and
 * writes the result as a directory (atomicdir.h); each file is hashed on
 * its own and the set's digest compared.
 *
 * A relocating bundle (format 2) is applied the same way, its spans read
 * from their base_offset wherever that is; the base's whole SHA-256 is then
 * not checked (only the base bytes the spans read, each against its own
 * hash), the result's still is.
 */

#include <stdint.h>

#include "bundle.h"
#include "error.h"

typedef struct ApplyStats {
        uint64_t span_bytes;            /* bytes written from spans */
        uint64_t copied_bytes;          /* unchanged bytes copied from the base (format 2: the copy spans) */
} ApplyStats;

/*
 * The bundle's trust must already be decided (bundle_verify()). @sync = false
 * skips the fsyncs (the rename stays atomic, not durable): for scratch output.
 */
_warn_unused_result_ int bundle_apply(Bundle *b, const FileSet *base_files, const char *base_what,
                                      const char *out_path, bool sync, ApplyStats *ret_stats, TpError *err);
