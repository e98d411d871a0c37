/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Reader for llama.cpp's importance-matrix files (llama-imatrix's output), giving the values
 * llama-quantize --imatrix hands to the quantizer: what tools/quantize/quantize.cpp
 * load_imatrix() makes of common/imatrix-loader.cpp common_imatrix_load(). Nothing is written.
 *
 * Two forms. A file starting with "GGUF" is the GGUF form and is refused when it does not
 * parse as one; anything else is the legacy form. (llama.cpp tries GGUF, then legacy: a legacy
 * file starting with "GGUF" would declare 1,179,994,951 entries, far past the caps below, so
 * both rules take and refuse the same files.)
 *
 * GGUF form (common/artifact/gguf.h reads the container, refusing also what ggml's reader,
 * which llama.cpp loads the file with, refuses and gguf.h does not: arrays of arrays, tensors
 * not packed in table order, a file ending before the last tensor's padding):
 *   - keys imatrix.datasets (array of strings), imatrix.chunk_count and imatrix.chunk_size
 *     (uint32). All three must be present: llama-quantize refuses the file otherwise ("missing
 *     imatrix metadata"). The two counts must be uint32 (llama.cpp aborts on another type); a
 *     datasets key of another type than an array of strings gives no datasets, as in llama.cpp.
 *   - tensors "<name>.in_sum2" (F32, ne0 × n_experts sums of squared activations) and
 *     "<name>.counts" (F32, n_experts counts, usually one). Each <name> needs both, both F32;
 *     other tensors are ignored. Counts are rounded with llroundf (llama.cpp: std::lround).
 *     Values: ne0 = n_in_sum2 / n_counts; for expert j, in_sum2[j*ne0 + i] / (float) count_j
 *     when count_j > 0, else 1.0f for all ne0 of that expert's values.
 *   - <name> is what precedes the suffix, and may be empty (a tensor named ".counts"), as in
 *     llama.cpp, which skips only tensors whose whole name is empty.
 *
 * Legacy form (all little-endian, int32 = two's complement):
 *
 *     int32 n_entries (>= 1)
 *     n_entries × { int32 len, len bytes of name, int32 ncall, int32 nval (>= 1), nval float32 sums }
 *     optional: int32 chunk_count, then int32 len and, when len > 0, len bytes of a dataset name
 *
 *   - a name is its bytes up to the first NUL (llama.cpp builds a std::string from a char *);
 *   - values: sums[i] / (float) ncall when ncall > 0 (llama.cpp's float / int64_t converts the
 *     count to float), else sums[i] unchanged; n_experts is 1;
 *   - two entries of one name: the later one replaces the earlier (llama.cpp assigns into a
 *     std::map), whatever their sizes;
 *   - the trailer is read only when bytes remain after the entries, and as llama.cpp's
 *     std::istream reads it: 1 to 3 bytes left are still a chunk_count (those bytes, the upper
 *     ones zero: the partial read lands in the int32 llama.cpp then assigns); the dataset
 *     follows only when its length was read whole, is > 0 and its bytes are all there (otherwise
 *     no dataset, and no error); bytes after it are ignored. chunk_size is 0.
 *
 * Refused, with -EBADMSG and a message naming the field, the entry (#index from 0, name,
 * offset) and what was found, where llama.cpp is more lenient or would misbehave:
 *   - a file over IMATRIX_FILE_SIZE_MAX; counts, lengths and sizes over the caps below or
 *     running past the end of the file (checked before anything is allocated); negative
 *     lengths (llama.cpp allocates len + 1 bytes: a crash for len < -1);
 *   - a legacy entry truncated anywhere, n_entries < 1, nval < 1;
 *   - GGUF: no tensors ("no data", as llama.cpp); tensors but no <name>.in_sum2/<name>.counts
 *     pair at all (llama.cpp loads no entries and quantizes as if without an imatrix); an
 *     in_sum2 without values or a counts tensor without counts (llama.cpp divides by zero), an
 *     in_sum2 whose element count is not a multiple of the counts' (llama.cpp's ne0 would drop
 *     the remainder, and read values of one expert as another's);
 *   - a sum (legacy sums, GGUF in_sum2) or count that is NaN, infinite or below 0, or a count
 *     of 2^63 or more (past llroundf's range). llama.cpp takes them, but a sum of squares
 *     cannot be any of these, and quantizing with such an importance is meaningless: NaN and
 *     infinite weights make every rounding choice equal, negative ones reward larger errors.
 * Names are bytes: not checked as UTF-8 (llama.cpp does not), quoted in messages.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "macro.h"

/* The GGUF form's keys (llama.cpp's LLM_KV_IMATRIX_*) and tensor name suffixes. */
#define IMATRIX_KEY_DATASETS    "imatrix.datasets"
#define IMATRIX_KEY_CHUNK_COUNT "imatrix.chunk_count"
#define IMATRIX_KEY_CHUNK_SIZE  "imatrix.chunk_size"
#define IMATRIX_SUFFIX_SUMS     ".in_sum2"
#define IMATRIX_SUFFIX_COUNTS   ".counts"

/*
 * Caps. Real files are below: a dense 70B model has ~560 entries (80 layers × 7 matrices) of
 * 8192 to 28672 values; a DeepSeek-V3-sized MoE, 58 layers × 256 experts × (7168 + 7168 + 2048)
 * inputs, ~243 million values (1 GB of floats). Whatever the file, memory is the normalized
 * values (4 bytes per value read), the names, and one 64 KiB read buffer.
 */
#define IMATRIX_FILE_SIZE_MAX    (UINT64_C(2) << 30) /* bytes of the file */
#define IMATRIX_ENTRIES_MAX      1000000u            /* legacy n_entries (GGUF: gguf.h's tensor cap) */
#define IMATRIX_NAME_LEN_MAX     4096u               /* bytes of a legacy entry's name */
#define IMATRIX_VALUES_MAX       (1u << 28)          /* values of one entry */
#define IMATRIX_VALUES_TOTAL_MAX (1u << 29)          /* floats read, sums and counts (what 2 GiB holds) */
#define IMATRIX_DATASETS_MAX     1024u               /* GGUF imatrix.datasets elements */
#define IMATRIX_DATASET_LEN_MAX  4096u               /* bytes of one dataset name */

typedef struct ImatrixEntry {
        char *name;         /* NUL-terminated, without NUL inside; may be empty; unique in the Imatrix */
        float *values;      /* n_values normalized values: n_experts runs of n_values / n_experts */
        size_t n_values;    /* >= 1, <= IMATRIX_VALUES_MAX, a multiple of n_experts */
        uint32_t n_experts; /* >= 1; 1 in the legacy form */
} ImatrixEntry;

typedef struct Imatrix {
        ImatrixEntry *entries; /* n_entries >= 1, sorted by name (strcmp: bytes as unsigned) */
        size_t n_entries;
        char **datasets; /* n_datasets NUL-terminated names (cut at their first NUL, as llama.cpp) */
        size_t n_datasets;
        /*
         * As llama.cpp's common_imatrix holds them: int32. GGUF: the uint32 keys converted
         * (wrapping past INT32_MAX, as llama.cpp's assignment does); legacy: the trailer's
         * chunk_count (0 without one), chunk_size 0. llama-quantize records chunk_count in the
         * output (quantize.imatrix.chunks_count) only when it is > 0.
         */
        int32_t chunk_count;
        int32_t chunk_size;
        bool legacy;
} Imatrix;

/*
 * Read the imatrix file open on @fd (a regular file; pread, so the descriptor's offset is
 * neither used nor moved; the caller keeps @fd). On success *@ret owns a new Imatrix (free
 * with imatrix_free). Returns -EBADMSG for a malformed or refused file (see above), -EINVAL
 * if @fd is not a regular file, -ENOMEM, or the -errno of a failed read; @err (may be NULL)
 * then says what and where, and *@ret is untouched.
 */
_warn_unused_result_ int imatrix_read(int fd, Imatrix **ret, TpError *err);

/* imatrix_read() of the file at @path (opened O_RDONLY | O_CLOEXEC); messages start with @path. */
_warn_unused_result_ int imatrix_open(const char *path, Imatrix **ret, TpError *err);

/* Accepts NULL; returns NULL. */
Imatrix *imatrix_free(Imatrix *im);
DEFINE_POINTER_CLEANUP(Imatrix, imatrix_free)

/* The entry named exactly @tensor_name (a binary search), or NULL (also for NULL arguments). */
const ImatrixEntry *imatrix_find(const Imatrix *im, const char *tensor_name);
