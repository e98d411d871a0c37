/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The bundle manifest: a YAML document that binds everything a device
 * needs to check before and while applying a task. The signature covers
 * the manifest's exact bytes; the manifest covers every payload byte
 * (payload.sha256, and per span the hashes of the base bytes it replaces
 * and of the new bytes it writes). Format: packaging/docs/bundle-format.md.
 */

#include <stdbool.h>
#include <stdint.h>

#include "artifact.h"
#include "error.h"
#include "fileset.h"
#include "parse.h"            /* task_name_valid(), TASK_NAME_MAX */
#include "predict.h"
#include "rescale.h"
#include "sha256.h"

typedef struct Encryption Encryption;  /* encryption.h */

#define MANIFEST_FORMAT 1               /* in place: the target keeps the base's layout */
#define MANIFEST_FORMAT_RELOCATING 2    /* the spans tile the target; each names its base bytes */
#define MANIFEST_FORMAT_MAX 2
/* A manifest without a "model" key is for this model (so bundles of one-model devices stay as they were). */
#define MANIFEST_DEFAULT_MODEL "default"
/* A ref span's reference: the base bytes a device holds in memory while decoding it. */
#define SPAN_REF_MAX (1u << 20)
#define MANIFEST_MAX_BYTES (64u << 20)
#define MANIFEST_MAX_SPANS (1u << 20)
#define MANIFEST_MAX_SITES (1u << 20)
/* Versions travel as JSON integers (socket, state file, seals), which are signed 64-bit. */
#define MANIFEST_MAX_VERSION INT64_MAX

/*
 * What a bundle rebuilds: a task of its base, or (a base bundle) the base a model should run
 * from now on, from the base it has (a delta) or from nothing (full: base.size is 0 and every
 * span raw). A base bundle's "task" names the line of bases (its versions are that line's).
 */
typedef enum ManifestRole {
        MANIFEST_ROLE_TASK,
        MANIFEST_ROLE_BASE,
        _MANIFEST_ROLE_MAX,
        _MANIFEST_ROLE_INVALID = -EINVAL,
} ManifestRole;

const char *manifest_role_to_string(ManifestRole r);   /* "task", "base" */

typedef enum SpanEncoding {
        SPAN_RAW,               /* the frame holds the new bytes */
        SPAN_DELTA,             /* the frame holds delta_encode(layout, base bytes, new bytes) */
        SPAN_COPY,              /* format 2: no frame; the new bytes are the base bytes */
        SPAN_REF,               /* format 2: a zstd frame coded with the base bytes as its reference prefix */
        SPAN_LORA,              /* the frame holds the LoRA factors, then delta_encode(layout, prediction, new bytes) */
        SPAN_RESCALE,           /* format 2: the frame holds per-channel ratios, then delta_encode(i8, prediction, new bytes) */
        _SPAN_ENCODING_MAX,
        _SPAN_ENCODING_INVALID = -EINVAL,
} SpanEncoding;

/*
 * A model of several files (fileset.h): base.files and target.files list them (paths, sizes,
 * their offsets in the set's space) with their SHA-256s, and base.sha256 / target.sha256 are the
 * sets' digests. Offsets below are in the set's space; the YAML names each span's file
 * ("file", "base_file": indexes into the lists) and its offsets relative to that file, and no
 * span crosses a file's end. A single-file base or target has an empty list.
 */
typedef struct ManifestFiles {
        FileSet set;                            /* fds -1; n_files 0 for a single file */
        uint8_t (*sha256)[SHA256_DIGEST_SIZE];  /* per file */
} ManifestFiles;

typedef struct ManifestSpan {
        uint64_t offset;                        /* in the target file (a directory: in its set's space) */
        uint64_t length;                        /* bytes written there */
        SpanEncoding encoding;
        char *layout;                           /* SPAN_DELTA: the delta layout name ("q4_0", "bytes", ...) */
        char *site;                             /* the site it belongs to, or NULL for header/gap bytes */
        /* The base bytes it reads: [base_offset, base_offset + base_length). Format 1: the bytes under
         * the span (base_offset == offset; fewer where it reaches past a shorter base). Format 2: a
         * copy's and a delta's source (base_length == length), a ref span's reference, none for raw. */
        uint64_t base_offset;
        uint64_t base_length;
        uint8_t base_sha256[SHA256_DIGEST_SIZE];/* of those base bytes (a copy: equal to new_sha256) */
        uint8_t new_sha256[SHA256_DIGEST_SIZE]; /* of the bytes written */
        uint64_t frame_offset;                  /* of its zstd frame, from the payload start */
        uint64_t frame_size;                    /* 0 for a copy */
        /* SPAN_LORA: the tensor and its factors (codec/predict.h); the span's base bytes are the base
         * tensor's blocks under it, its first element the tensor's element lora_first. */
        LoraShape lora;
        uint64_t lora_first;
        /* SPAN_RESCALE: the 8-bit tensor's channels (codec/rescale.h); the span's first element is
         * the tensor's element rescale_first. */
        RescaleShape rescale;
        uint64_t rescale_first;
} ManifestSpan;

typedef struct Manifest {
        uint64_t format;                        /* MANIFEST_FORMAT or MANIFEST_FORMAT_RELOCATING */
        ManifestRole role;                      /* "role: base", or a task (the key absent) */
        char *task;
        char *model;                            /* the device model it is for; MANIFEST_DEFAULT_MODEL when absent */
        uint64_t version;
        int64_t created;                        /* seconds since the epoch, UTC */
        int64_t expires;                        /* 0: never */
        ArtifactKind kind;
        struct {
                uint8_t sha256[SHA256_DIGEST_SIZE];
                uint64_t size;
                uint8_t layout[SHA256_DIGEST_SIZE];     /* artifact layout fingerprint */
                ManifestFiles files;
        } base;
        struct {
                uint8_t sha256[SHA256_DIGEST_SIZE];
                uint64_t size;
                uint64_t chunk_size;
                uint8_t chunk_root[SHA256_DIGEST_SIZE]; /* SHA-256 of the concatenated chunk digests (of the set's space) */
                ManifestFiles files;
        } target;
        char **sites;                           /* the task's site set: names of the sites it changes, sorted */
        size_t n_sites;
        uint8_t sites_fingerprint[SHA256_DIGEST_SIZE];
        struct {
                uint64_t size;
                uint8_t sha256[SHA256_DIGEST_SIZE];     /* of the payload as stored (encrypted: the sealed frames) */
        } payload;
        Encryption *encryption;                 /* NULL: the frames are plain zstd frames (encryption.h) */
        /* Sorted by offset, not overlapping; frames back to back. Format 1: where they do not write,
         * the target is the base's bytes at the same offset. Format 2: they tile [0, target.size). */
        ManifestSpan *spans;
        size_t n_spans;
} Manifest;

Manifest *manifest_free(Manifest *m);
void manifest_files_done(ManifestFiles *f);
/* A copy of @set's paths and sizes with @sha256 (n_files entries); for a single file, an empty list. */
_warn_unused_result_ int manifest_files_set(ManifestFiles *f, const FileSet *set, const uint8_t (*sha256)[SHA256_DIGEST_SIZE]);
DEFINE_POINTER_CLEANUP(Manifest, manifest_free)

/* Whether a span's frame holds its new bytes as a residual against a prediction from its base bytes. */
static inline bool span_predicted(const ManifestSpan *s) {
        return s->encoding == SPAN_LORA || s->encoding == SPAN_RESCALE;
}

/* Bytes a span's frame decodes to before its new bytes: a lora span's factors, a rescale span's parameters. */
static inline uint64_t span_frame_prefix_bytes(const ManifestSpan *s) {
        return s->encoding == SPAN_LORA ? lora_shape_factor_bytes(&s->lora) :
               s->encoding == SPAN_RESCALE ? rescale_shape_param_bytes(&s->rescale) : 0;
}

/* Format 2: whether a span reads its base bytes piece by piece beside its new ones (copy, delta, lora, rescale). */
static inline bool span_base_in_pieces(const ManifestSpan *s) {
        return s->encoding == SPAN_COPY || s->encoding == SPAN_DELTA || span_predicted(s);
}

const char *span_encoding_to_string(SpanEncoding e);   /* "raw", "delta", "copy", "ref", "lora", "rescale" */
SpanEncoding span_encoding_from_string(const char *s);


/* SHA-256 over the sorted names, each followed by a NUL byte. */
void sites_fingerprint(char *const *sorted_names, size_t n, uint8_t ret[SHA256_DIGEST_SIZE]);

/* Serialise @m as YAML (malloc'ed, not NUL-terminated). */
_warn_unused_result_ int manifest_write(const Manifest *m, char **ret_text, size_t *ret_len, TpError *err);

/*
 * The manifest section of a bundle, the bytes the signature covers: the YAML itself, or one
 * zstd frame of it (MANIFEST_WINDOW_LOG, its size in the frame header), which a manifest of
 * mostly hashes and names needs about a third of: always in format 2, with @compress in format
 * 1 (the bundle header then says so: BUNDLE_FLAG_MANIFEST_ZSTD).
 */
#define MANIFEST_WINDOW_LOG 23
_warn_unused_result_ int manifest_section_write(const Manifest *m, bool compress, char **ret_section, size_t *ret_len,
                                                TpError *err);

/*
 * Parse the manifest section of a bundle of @format (its header's): the YAML as
 * manifest_parse(), or, @compressed (always for format 2), exactly one zstd frame (no bytes
 * after it, no skippable frame) that declares its decoded size, at most @max_text bytes (0:
 * MANIFEST_MAX_BYTES); either way the manifest must say @format. Errors name what was expected
 * and what was found.
 */
_warn_unused_result_ int manifest_section_parse(uint64_t format, bool compressed, const char *section, size_t len,
                                                uint64_t max_text, Manifest **ret, TpError *err);

/*
 * Parse and validate: known keys only, every field present and well-formed,
 * task name valid, spans sorted, non-overlapping, inside the target, frames
 * contiguous from 0 and adding up to payload.size, site set sorted, unique
 * and matching its fingerprint; an encryption section well-formed (encryption.h) and then every
 * frame longer than its tag. Format 2 also: the spans tile the target
 * (no hole, no overlap), each span's base bytes lie inside the base, copy
 * and ref only in format 2. Errors name the line, the span and its offset.
 */
_warn_unused_result_ int manifest_parse(const char *text, size_t len, Manifest **ret, TpError *err);
