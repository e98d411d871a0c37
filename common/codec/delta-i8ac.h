/* SPDX-License-Identifier: MIT */
#pragma once

/* The i8ac layout's coding (delta.h, "i8ac"), for delta.c: @out apart from the inputs. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Groups shorter than this are coded as i8 (a coded stream's fixed cost would not fit them). */
#define DELTA_I8AC_MIN 64u

/* False when the coded group does not fit @len bytes (@out then holds nothing useful). */
bool delta_i8ac_encode(const uint8_t *base, const uint8_t *target, size_t len, uint8_t *out);
void delta_i8ac_decode(const uint8_t *base, const uint8_t *delta, size_t len, uint8_t *out);
