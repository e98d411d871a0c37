/* SPDX-License-Identifier: MIT */
#pragma once

/* The i8 layout's transform (delta.h, "i8"), for delta.c: any @len, @out apart from the inputs. */

#include <stddef.h>
#include <stdint.h>

void delta_i8_encode(const uint8_t *base, const uint8_t *target, size_t len, uint8_t *out);
void delta_i8_decode(const uint8_t *base, const uint8_t *delta, size_t len, uint8_t *out);
