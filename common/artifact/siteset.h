/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * A set of site names: what a task is expected to change. Loaded from a
 * text file (one name per line; blank lines and '#' comments ignored) or
 * from a llama.cpp LoRA adapter GGUF, whose "<site>.lora_a" tensors name
 * the sites the adapter touches.
 */

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

typedef struct SiteSet {
        char **names;           /* sorted, unique */
        size_t n;
} SiteSet;

void site_set_done(SiteSet *s);
_warn_unused_result_ int site_set_add(SiteSet *s, const char *name);   /* keeps order and uniqueness */
bool site_set_contains(const SiteSet *s, const char *name);
_warn_unused_result_ int site_set_load(const char *path, SiteSet *ret, TpError *err);
