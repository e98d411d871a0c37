/* SPDX-License-Identifier: MIT */
#pragma once

/* The i8ac and i8acp layouts' coding (delta.h, "i8ac", "i8acp"), for delta.c: @out apart from the inputs. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "delta.h"

/* Groups shorter than this are coded as i8 (a coded stream's fixed cost would not fit them). */
#define DELTA_I8AC_MIN 64u

/* False when the coded group does not fit @len bytes (@out then holds nothing useful). */
bool delta_i8ac_encode(const uint8_t *base, const uint8_t *target, size_t len, uint8_t *out);
void delta_i8ac_decode(const uint8_t *base, const uint8_t *delta, size_t len, uint8_t *out);

/* i8acp: the rules found among @runs (delta_encode_floats()), then i8ac's stream against the prediction. */
bool delta_i8acp_encode(const uint8_t *base, const uint8_t *target, size_t len, const DeltaFloatRun *runs,
                        size_t n_runs, uint8_t *out);
void delta_i8acp_decode(const uint8_t *base, const uint8_t *delta, size_t len, uint8_t *out);
