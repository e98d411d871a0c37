/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Kernel dispatch: for each family of kernels (single-buffer SHA-256,
 * multi-buffer SHA-256, ...) pick the best implementation the CPU supports,
 * once. Implementations have short names that are stable interface
 * (`taskpatch caps`, TASKPATCH_KERNEL):
 *
 *   family        x86-64                   aarch64                      portable
 *   sha256        shani                    armv8-ce                     generic
 *   sha256-multi  shani (1 lane), avx2 (8)  armv8-ce (1 lane), neon (4)  generic
 *   quant         avx2                     neon                         generic
 *
 * Forcing a name (the environment variable TASKPATCH_KERNEL=<name>, or
 * kernels_force()) makes every family that has an implementation of that
 * name use it, and every other family use "generic". That is how the tests
 * run the same vectors through every level the CPU has.
 */

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum KernelFamily {
        KERNEL_SHA256,
        KERNEL_SHA256_MULTI,
        KERNEL_QUANT,
        _KERNEL_FAMILY_MAX,
} KernelFamily;

/* "sha256", "sha256-multi", "quant". */
const char *kernel_family_to_string(KernelFamily f);

/*
 * Choose implementations: the best available, or the one TASKPATCH_KERNEL
 * names. Returns 0; -ENOENT when TASKPATCH_KERNEL names no kernel, -ENOTSUP
 * when this CPU cannot run it (the best available are chosen then).
 * Call it once early (before threads); kernels used without it dispatch
 * lazily to the best available and ignore TASKPATCH_KERNEL.
 */
int kernels_init(void);

/* Force @name (see above), or the best available when @name is NULL. Same returns as kernels_init(). */
int kernels_force(const char *name);

/* Name of the implementation in use for @f. */
const char *kernel_active(KernelFamily f);

/*
 * The idx-th implementation of @f built into this binary, best first;
 * NULL past the end. @ret_supported (may be NULL) says whether the running
 * CPU can execute it.
 */
const char *kernel_impl(KernelFamily f, size_t idx, bool *ret_supported);
