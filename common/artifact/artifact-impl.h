/* SPDX-License-Identifier: MIT */
#pragma once

/* What artifact.c shares with artifact-set.c: building an Artifact's site list. */

#include "artifact.h"
#include "fileset.h"

/* Append a site; a->sites must have room for it. */
_warn_unused_result_ int artifact_add_site(Artifact *a, const char *name, uint64_t offset, uint64_t length, int32_t type);

/* The format a file of @size bytes claims by its first @n bytes (up to 64): GGUF's magic, onnx_probe(), safetensors_probe(). */
ArtifactKind artifact_probe(const uint8_t *head, size_t n, uint64_t size);

/* Sort the sites, refuse overlaps, compute the layout fingerprint (@set: the model's files, NULL for one file). */
_warn_unused_result_ int artifact_finish(Artifact *a, const FileSet *set, TpError *err);
