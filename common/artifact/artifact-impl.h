/* SPDX-License-Identifier: MIT */
#pragma once

/* What artifact.c shares with artifact-set.c: building an Artifact's site list. */

#include "artifact.h"
#include "fileset.h"
#include "gguf.h"
#include "onnx.h"
#include "safetensors.h"

/* Append a site (@row: Site.row); a->sites must have room for it. The row helpers below give @row. */
_warn_unused_result_ int artifact_add_site(Artifact *a, const char *name, uint64_t offset, uint64_t length, int32_t type,
                                           uint64_t row);

/* The 8-bit initializers of @o that its graph dequantizes, into a->quants (artifact_finish() sorts them). */
_warn_unused_result_ int artifact_add_onnx_quants(Artifact *a, const Onnx *o);

/* Site.row of a GGUF tensor, an ONNX initializer, a safetensors tensor. */
uint64_t artifact_row_gguf(const GgufTensor *t);
uint64_t artifact_row_onnx(const OnnxInitializer *t);
uint64_t artifact_row_safetensors(const SafetensorsTensor *t);

/* The format a file of @size bytes claims by its first @n bytes (up to 64): GGUF's magic, onnx_probe(), safetensors_probe(). */
ArtifactKind artifact_probe(const uint8_t *head, size_t n, uint64_t size);

/* Sort the sites, refuse overlaps, compute the layout fingerprint (@set: the model's files, NULL for one file). */
_warn_unused_result_ int artifact_finish(Artifact *a, const FileSet *set, TpError *err);
