/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Inside the delta coder: a layout's description, kept in delta.c's table beside its blocks'
 * pack and unpack functions (the coder's loops are specialized per entry there); delta-types.c
 * answers delta.h's questions about names, sizes and blocks from it.
 */

#include <stdint.h>

#include "delta.h"

typedef struct Layout {
        const char *name;
        uint16_t unit;          /* bytes per block */
        uint8_t word_size;      /* bytes per word: 1, 2 (fp16 in quant layouts) or 4 */
        uint8_t n_words;
        uint8_t word_off[2];
        uint16_t n_q;           /* elements per block; 0: a plain word layout */
        uint8_t q_bits;
        uint8_t q_sub;          /* elements per sub-block */
        uint8_t q_zero;         /* c = -q_zero * a, where the offset is neither a word nor a min */
        uint8_t n_s;            /* sub-scales per block: n_q / q_sub scales, then as many mins, if any */
        uint8_t s_bits;
        uint8_t s_zero;         /* a scale s stands for d * (s - s_zero) */
        uint8_t ordered;        /* sub-blocks go out ordered by bucket */
        uint16_t flip;          /* FLIP: residuals are negated where the exact prediction is below the rounded one */
        uint8_t q_planes[4];    /* plane widths from the low bits up, 0-terminated */
        uint8_t s_planes[4];
        void (*unpack_q)(const uint8_t *blk, uint8_t *q);
        void (*pack_q)(const uint8_t *q, uint8_t *blk);         /* writes the element bytes only */
        void (*unpack_s)(const uint8_t *blk, uint8_t *s);
        void (*pack_s)(const uint8_t *s, uint8_t *blk);         /* writes the sub-scale bytes only */
        uint8_t q_at;           /* decoding keeps the n_q / q_sub buckets in element bytes from here (ordered) */
} Layout;

/* Layout @l's entry, or NULL when @l is out of range. */
const Layout *delta_layout_get(DeltaLayout l);
