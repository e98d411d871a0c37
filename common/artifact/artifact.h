/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * An artifact is a model file seen as a list of *sites*: the byte ranges
 * that hold one tensor (GGUF, safetensors) or one initializer (ONNX).
 * Everything outside the sites (headers, metadata, the safetensors JSON
 * header, protobuf framing, padding) is "gap" and is diffed byte-wise.
 * Files of any other format are one gap.
 */

#include <errno.h>
#include <stdint.h>

#include "error.h"
#include "fileset.h"
#include "macro.h"
#include "sha256.h"

typedef enum ArtifactKind {
        ARTIFACT_RAW,           /* any other file: no sites */
        ARTIFACT_GGUF,
        ARTIFACT_ONNX,
        ARTIFACT_SAFETENSORS,
        _ARTIFACT_KIND_MAX,
        _ARTIFACT_KIND_INVALID = -EINVAL,
} ArtifactKind;

/* A site's type when the format has none (raw files). */
#define SITE_TYPE_NONE (-1)

typedef struct Site {
        char *name;             /* tensor / initializer name */
        uint64_t offset;        /* absolute offset of its bytes in the file (a directory: in its set's space) */
        uint64_t length;        /* bytes */
        int32_t type;           /* GGUF: ggml type id; ONNX: TensorProto.DataType; safetensors: SafetensorsDtype;
                                 * else SITE_TYPE_NONE */
        uint64_t row;           /* elements per row (the innermost dimension) of a tensor of 2 or more
                                 * dimensions; 0 for vectors, scalars and header bytes */
} Site;

#define ARTIFACT_MAX_DIMS 16

/*
 * An 8-bit tensor (ONNX INT8 or UINT8) the model's graph dequantizes (onnx_quant_use_of()): its
 * shape, and the sites of its scale and zero point. What a producer needs to predict a changed
 * one from its base (a rescale span, codec/rescale.h).
 */
typedef struct ArtifactQuant {
        char *site;                     /* the tensor's site name */
        char *scale, *zero_point;       /* their sites' names; NULL when the node has none (zero point 0) */
        uint32_t n_dims;
        uint64_t dims[ARTIFACT_MAX_DIMS];
        uint32_t axis;                  /* the scale's axis (< n_dims; 0 for a scalar tensor) */
} ArtifactQuant;

typedef struct Artifact {
        ArtifactKind kind;
        uint64_t size;          /* file size (a directory: the set's) */
        Site *sites;            /* sorted by offset, non-overlapping */
        size_t n_sites;
        /* SHA-256 over kind, size and every site's (name, type, offset, length): two files with
         * the same layout fingerprint differ only in site bytes and gap bytes. */
        uint8_t layout[SHA256_DIGEST_SIZE];
        ArtifactQuant *quants;  /* ONNX: sorted by site name; not part of the layout fingerprint */
        size_t n_quants;
} Artifact;

const char *artifact_kind_to_string(ArtifactKind k);   /* "raw", "gguf", "onnx", "safetensors" */
ArtifactKind artifact_kind_from_string(const char *s);

/*
 * Recognise the format of @fd and list its sites: GGUF by its magic, ONNX
 * by onnx_probe(), safetensors by safetensors_probe() (it has no magic: a
 * plausible header length and a '{'). A file that claims a format but does
 * not parse as it is an error (with the reason in @err), not a raw file.
 */
_warn_unused_result_ int artifact_open(int fd, Artifact **ret, TpError *err);
Artifact *artifact_free(Artifact *a);

/* The quantization of site @name, or NULL. */
const ArtifactQuant *artifact_quant(const Artifact *a, const char *name);

/* The index of @a's first site that ends after @offset (its sites are sorted), or n_sites when none does. */
size_t artifact_site_after(const Artifact *a, uint64_t offset);
DEFINE_POINTER_CLEANUP(Artifact, artifact_free)

/*
 * The artifact of a model that may be several files (fileset.h): for one file, artifact_open()
 * of it; for a directory, every file's sites in the set's space, one model family per directory
 * (see artifact-set.c) and site names unique across it. Errors name the file.
 */
_warn_unused_result_ int artifact_open_set(const FileSet *set, Artifact **ret, TpError *err);

/* A model opened for reading: its files and their artifact. */
typedef struct ModelSet {
        FileSet files;
        Artifact *artifact;
} ModelSet;

#define MODEL_SET_NULL ((ModelSet) { .artifact = NULL })

/*
 * Open the model on @fd, which this takes (closed on failure too): a regular file is a
 * single-file model named @name; a directory is walked (fileset_open_dir()) and read as a set.
 */
_warn_unused_result_ int model_set_open(int fd, const char *name, ModelSet *ret, TpError *err);
void model_set_done(ModelSet *m);
