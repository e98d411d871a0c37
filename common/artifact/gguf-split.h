/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The file names of a split GGUF's shards. llama.cpp's llama-gguf-split writes shard i
 * (0-based) of N as llama_split_path() spells it,
 *
 *     "%s-%05d-of-%05d.gguf" of (prefix, i + 1, N)
 *
 * and llama.cpp loads a split model from the first shard's path, finding the others by
 * cutting that suffix off and formatting it again (llama_split_prefix(), then
 * llama_split_path() for each i). Each shard's own keys (Gguf.split, gguf.h) say the same
 * no and count; checking that a name and its file agree is the caller's.
 *
 * split.count is a uint16, so a set has 1..GGUF_SPLIT_COUNT_MAX shards and every number
 * fits the 5 digits exactly: these helpers accept exactly that and nothing else (no 6-digit
 * numbers, no 00000, no shard past the count, no upper-case ".GGUF"), so a name they
 * accept is one llama.cpp finds and one it would write. Names are file names, not paths:
 * the directory is the caller's.
 */

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "macro.h"

#define GGUF_SPLIT_COUNT_MAX  65535u /* split.count is a uint16 */
#define GGUF_SPLIT_NAME_MAX   255u   /* bytes of a shard's file name: Linux's NAME_MAX */
#define GGUF_SPLIT_SUFFIX     "-NNNNN-of-NNNNN.gguf"
#define GGUF_SPLIT_SUFFIX_LEN (sizeof(GGUF_SPLIT_SUFFIX) - 1)

/*
 * Parse @name, a shard's file name (no directory): "<prefix>-<no + 1>-of-<count>.gguf" with
 * both numbers exactly 5 decimal digits, 1 <= no + 1 <= count <= GGUF_SPLIT_COUNT_MAX, and a
 * nonempty prefix without '/'; at most GGUF_SPLIT_NAME_MAX bytes in all. On success sets
 * *@ret_prefix_len (the prefix is the first that many bytes of @name), *@ret_no (0-based,
 * as split.no) and *@ret_count, each output may be NULL, and returns 0. Otherwise returns
 * -EINVAL, with @err (may be NULL) saying what does not match, and touches no output.
 */
_warn_unused_result_ int gguf_split_name_parse(const char *name, size_t *ret_prefix_len, uint16_t *ret_no,
                                               uint16_t *ret_count, TpError *err);

/*
 * The file name of shard @no (0-based) of @count with @prefix, as llama_split_path() writes
 * it: a new string in *@ret (the caller frees it). Returns -EINVAL (with @err) when @count
 * is 0 or over GGUF_SPLIT_COUNT_MAX, @no is not below @count, @prefix is NULL, empty or holds
 * a '/', or the name would pass GGUF_SPLIT_NAME_MAX bytes; -ENOMEM. Whatever it returns,
 * gguf_split_name_parse() gives back @prefix, @no and @count.
 */
_warn_unused_result_ int gguf_split_name_format(const char *prefix, unsigned no, unsigned count, char **ret,
                                                TpError *err);
