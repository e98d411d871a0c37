/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * A rescale span's "rescale" key in the manifest (packaging/docs/bundle-format.md): how the
 * device predicts the span from its base bytes (codec/rescale.h):
 *
 *   rescale: {type: int8, channels: 128, inner: 1152, first: 0}
 *
 * type: int8 or uint8, the tensor's element type (the base's and the target's); channels,
 * inner: element e of the tensor is in channel (e / inner) % channels; first: the span's first
 * element in the tensor. Its layout is "i8" or "i8ac" (bundle format 2). The span's frame decodes to the
 * channels' ratios and offsets (8 * channels bytes, byte planes), then the residual.
 */

#include "manifest.h"
#include "yaml-doc.h"
#include "yaml-write.h"

/* Parse @n's "rescale" into @s (its length and encoding read), @layout the span's. */
_warn_unused_result_ int rescale_span_parse(const YamlNode *n, size_t idx, const char *layout, ManifestSpan *s,
                                            TpError *err);
void rescale_span_write(YamlWriter *w, const ManifestSpan *s);
