/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Writing the YAML documents TaskPatch signs (the bundle manifest, the
 * channel index) with libyaml's emitter: one document, block style unless
 * asked for flow, lines never folded, at most @max bytes. Errors are
 * sticky: once a call fails, the later ones do nothing, and
 * yaml_writer_finish() reports it, so a writer reads as a plain list of
 * calls.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "sha256.h"

typedef struct YamlWriter YamlWriter;

/* A writer with the stream and document started; NULL when out of memory. */
YamlWriter *yaml_writer_new(size_t max);
void yaml_writer_map_start(YamlWriter *w, bool flow);
void yaml_writer_map_end(YamlWriter *w);
void yaml_writer_seq_start(YamlWriter *w, bool flow);
void yaml_writer_seq_end(YamlWriter *w);
void yaml_writer_str(YamlWriter *w, const char *s);
void yaml_writer_kv(YamlWriter *w, const char *key, const char *value);
void yaml_writer_kv_u64(YamlWriter *w, const char *key, uint64_t v);
void yaml_writer_kv_sha(YamlWriter *w, const char *key, const uint8_t d[SHA256_DIGEST_SIZE]);
/* @value as a literal block scalar ("key: |", its lines kept as they are: PEM text) */
void yaml_writer_kv_literal(YamlWriter *w, const char *key, const char *value);
/* @t as "YYYY-MM-DDTHH:MM:SSZ" */
void yaml_writer_kv_time(YamlWriter *w, const char *key, int64_t t);

/*
 * End the document and free @w. On success *ret_text (malloc'd, not
 * NUL-terminated) holds *ret_len bytes. -EMSGSIZE over the cap, -ENOMEM.
 * @what names the document in the error ("manifest: larger than ...").
 */
_warn_unused_result_ int yaml_writer_finish(YamlWriter *w, const char *what, char **ret_text, size_t *ret_len,
                                            TpError *err);
