/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Quantize a GGUF model as llama.cpp's llama_model_quantize() does with default parameters:
 * the type of every tensor from common/model/quant-mix.h, the metadata copied in order with
 * general.quantization_version and general.file_type set last (split.* keys dropped), the
 * tensors in llama.cpp's order, the bytes from kernels/quant.h (ggml's reference
 * quantizer, bit for bit). The output file is then byte-identical to llama.cpp's for the
 * same input (tests/oracle/file-oracle.sh checks it). One difference by design: an input
 * whose general.alignment is not 32 keeps its alignment (llama.cpp pads to 32 but keeps
 * the key, writing a file its own reader refuses).
 *
 * Streaming: the header is written first, then each tensor in row chunks of about
 * QUANTIZE_CHUNK_FLOATS floats; memory is a few chunk buffers whatever the model's size.
 * The output goes to a temporary beside OUT, fsynced and renamed over it (no partial file
 * is ever visible under OUT). Threads split each chunk's rows; ggml quantizes row by row,
 * so the bytes do not depend on the thread count or the chunk size.
 *
 * Hooks let a caller change a tensor's float rows before they are quantized (the fold,
 * common/model/fold.h): a hooked tensor is converted to float, passed to the hook chunk by chunk,
 * and quantized to its planned type even when that is its own type.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "ggml.h"
#include "gguf.h"
#include "imatrix.h"
#include "macro.h"
#include "quant-mix.h"

#define QUANTIZE_CHUNK_FLOATS (1u << 20) /* 4 MiB of floats per chunk (whole rows; at least one) */

typedef struct QuantizeHooks {
        /*
         * Before tensor @t of the input is written as @type: return 1 to have its rows passed
         * to rows(), 0 to leave the tensor alone, or a negative errno (with @err) to stop.
         */
        int (*begin)(void *userdata, const GgufTensor *t, uint32_t type, TpError *err);
        /*
         * Change rows [@row0, @row0 + @nrows) of @t in place: @rows holds nrows × ne[0] floats.
         * Called from several threads at once, for disjoint rows of the same tensor (between
         * begin() calls): it must not write state shared between calls.
         */
        int (*rows)(void *userdata, const GgufTensor *t, uint64_t row0, size_t nrows, float *rows, TpError *err);
        void *userdata;
} QuantizeHooks;

typedef struct QuantizeOptions {
        const QuantFtype *ftype;
        bool no_sync;                /* skip the fsyncs (scratch output) */
        size_t chunk_floats;         /* 0: QUANTIZE_CHUNK_FLOATS */
        unsigned threads;            /* quantizer threads per chunk (rows split evenly); 0 or 1: one */
        const QuantizeHooks *hooks;  /* may be NULL */
        /*
         * An importance matrix (may be NULL), as llama-quantize --imatrix uses it: each tensor
         * quantized with the entry of its name (ne[0] values per expert; a tensor without one is
         * quantized without), the Q4_0/Q5_0 mixes' first ffn_down layers raised, and the keys
         * quantize.imatrix.file (@imatrix_name, as the user named it), .dataset, .entries_count
         * and .chunks_count added last.
         */
        const Imatrix *imatrix;
        const char *imatrix_name;
        /* Called before each tensor (may be NULL): the @i-th of @n, its output type. */
        void (*progress)(void *userdata, size_t i, size_t n, const GgufTensor *t, uint32_t type);
        void *progress_userdata;
} QuantizeOptions;

typedef struct QuantizeResult {
        uint64_t in_bytes, out_bytes;    /* file sizes */
        size_t n_tensors;
        size_t n_converted;              /* changed type (or hooked) */
        size_t n_copied;                 /* bytes copied unchanged */
        size_t n_hooked;                 /* rows changed by the hooks */
        size_t n_fallback;               /* a fallback type (row length not a multiple of the block) */
        size_t n_imatrix;                /* quantized with an importance matrix entry */
        size_t n_imatrix_missing;        /* quantized without one: the imatrix has no entry of its name */
        size_t type_count[GGML_TYPE_COUNT]; /* output tensors per ggml type */
} QuantizeResult;

/*
 * Quantize the model @g (open on @fd) into @out_path. On failure nothing is left at
 * @out_path's temporary and @err says why (tensor, row, what). -EOPNOTSUPP for models and
 * types that cannot be converted (quant_plan(), a type kernels/quant.h lacks), -EDOM for
 * NaN or infinite weights (llama.cpp refuses them too), -EIO etc. for I/O.
 */
_warn_unused_result_ int model_quantize(int fd, const Gguf *g, const char *out_path, const QuantizeOptions *o,
                                        QuantizeResult *ret, TpError *err);

/* Float rows from F32, F16 or BF16 data: @n elements of @type at @src into @dst. */
void quantize_to_float(uint32_t type, const void *src, float *dst, size_t n);
