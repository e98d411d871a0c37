/* SPDX-License-Identifier: MIT */

#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "dispatch.h"
#include "quant-impl.h"
#include "sha256-impl.h"

typedef struct KernelImpl {
        const char *name;
        KernelFamily family;
        uint64_t required;      /* CPU_BIT()s that must all be present */
        unsigned lanes;         /* KERNEL_SHA256_MULTI only */
        union {
                Sha256BlocksFn blocks;
                Sha256MultiBlocksFn multi;
                const QuantKernels *quant;      /* KERNEL_QUANT */
        };
        Sha256Blocks2Fn blocks2;        /* KERNEL_SHA256 only; NULL: blocks twice */
} KernelImpl;

/* A one-lane multi-buffer kernel has the single-buffer state layout, so it is the single kernel. */
static void multi1_generic(uint32_t *state, const uint8_t *const *data, size_t nblocks) {
        sha256_blocks_generic(state, data[0], nblocks);
}

#if defined(__x86_64__)
static void multi1_shani(uint32_t *state, const uint8_t *const *data, size_t nblocks) {
        sha256_blocks_shani(state, data[0], nblocks);
}
#endif

#if defined(__aarch64__)
static void multi1_armv8ce(uint32_t *state, const uint8_t *const *data, size_t nblocks) {
        sha256_blocks_armv8ce(state, data[0], nblocks);
}
#endif

/* Best first within each family; "generic" last and always supported. */
static const KernelImpl impls[] = {
#if defined(__x86_64__)
        { "shani", KERNEL_SHA256, CPU_BIT(CPU_SHA_NI) | CPU_BIT(CPU_SSE41), 1, .blocks = sha256_blocks_shani,
          .blocks2 = sha256_blocks_shani_x2 },
#elif defined(__aarch64__)
        { "armv8-ce", KERNEL_SHA256, CPU_BIT(CPU_SHA2), 1, .blocks = sha256_blocks_armv8ce,
          .blocks2 = sha256_blocks_armv8ce_x2 },
#endif
        { "generic", KERNEL_SHA256, 0, 1, .blocks = sha256_blocks_generic },

        /* A SHA-instruction core beats eight SIMD lanes; the lanes serve CPUs without one. */
#if defined(__x86_64__)
        { "shani", KERNEL_SHA256_MULTI, CPU_BIT(CPU_SHA_NI) | CPU_BIT(CPU_SSE41), 1, .multi = multi1_shani },
        { "avx2", KERNEL_SHA256_MULTI, CPU_BIT(CPU_AVX2), 8, .multi = sha256_x8_avx2 },
#elif defined(__aarch64__)
        { "armv8-ce", KERNEL_SHA256_MULTI, CPU_BIT(CPU_SHA2), 1, .multi = multi1_armv8ce },
        { "neon", KERNEL_SHA256_MULTI, CPU_BIT(CPU_NEON), 4, .multi = sha256_x4_neon },
#endif
        { "generic", KERNEL_SHA256_MULTI, 0, 1, .multi = multi1_generic },

        /* Quantizers: every implementation writes the same bytes; SIMD only makes it faster. */
#if defined(__x86_64__)
        { "avx2", KERNEL_QUANT, CPU_BIT(CPU_AVX2), 1, .quant = &quant_kernels_avx2 },
#elif defined(__aarch64__)
        { "neon", KERNEL_QUANT, CPU_BIT(CPU_NEON), 1, .quant = &quant_kernels_neon },
#endif
        { "generic", KERNEL_QUANT, 0, 1, .quant = &quant_kernels_generic },
};

#define N_IMPLS (sizeof(impls) / sizeof(impls[0]))

/* The dispatch table: the only global state of kernels/. */
static const KernelImpl *active[_KERNEL_FAMILY_MAX];

static const char *const family_table[_KERNEL_FAMILY_MAX] = {
        [KERNEL_SHA256] = "sha256",
        [KERNEL_SHA256_MULTI] = "sha256-multi",
        [KERNEL_QUANT] = "quant",
};

const char *kernel_family_to_string(KernelFamily f) {
        if (f < 0 || f >= _KERNEL_FAMILY_MAX)
                return NULL;
        return family_table[f];
}

static bool supported(const KernelImpl *k, uint64_t cpu) {
        return (k->required & cpu) == k->required;
}

static const KernelImpl *pick(KernelFamily f, const char *name, uint64_t cpu) {
        for (size_t i = 0; i < N_IMPLS; i++) {
                const KernelImpl *k = &impls[i];
                if (k->family != f || !supported(k, cpu))
                        continue;
                if (!name || strcmp(k->name, name) == 0)
                        return k;
        }
        return NULL;
}

int kernels_force(const char *name) {
        uint64_t cpu = cpu_detect();
        int r = 0;

        if (name) {
                bool known = false, runnable = false;
                for (size_t i = 0; i < N_IMPLS; i++)
                        if (strcmp(impls[i].name, name) == 0) {
                                known = true;
                                runnable = runnable || supported(&impls[i], cpu);
                        }
                r = !known ? -ENOENT : !runnable ? -ENOTSUP : 0;
                if (r < 0)
                        name = NULL;
        }

        for (KernelFamily f = 0; f < _KERNEL_FAMILY_MAX; f++) {
                const KernelImpl *k = name ? pick(f, name, cpu) : NULL;
                active[f] = k ? k : pick(f, name ? "generic" : NULL, cpu);
        }
        return r;
}

int kernels_init(void) {
        const char *e = getenv("TASKPATCH_KERNEL");
        return kernels_force(e && *e ? e : NULL);
}

static const KernelImpl *get(KernelFamily f) {
        if (!active[f])
                (void) kernels_force(NULL);
        return active[f];
}

const char *kernel_active(KernelFamily f) {
        if (f < 0 || f >= _KERNEL_FAMILY_MAX)
                return NULL;
        return get(f)->name;
}

const char *kernel_impl(KernelFamily f, size_t idx, bool *ret_supported) {
        uint64_t cpu = cpu_detect();

        for (size_t i = 0; i < N_IMPLS; i++) {
                if (impls[i].family != f)
                        continue;
                if (idx-- > 0)
                        continue;
                if (ret_supported)
                        *ret_supported = supported(&impls[i], cpu);
                return impls[i].name;
        }
        return NULL;
}

Sha256BlocksFn sha256_dispatch_blocks(void) {
        return get(KERNEL_SHA256)->blocks;
}

Sha256Blocks2Fn sha256_dispatch_blocks2(void) {
        return get(KERNEL_SHA256)->blocks2;
}

Sha256MultiBlocksFn sha256_dispatch_multi(unsigned *ret_lanes) {
        const KernelImpl *k = get(KERNEL_SHA256_MULTI);
        *ret_lanes = k->lanes;
        return k->multi;
}

const QuantKernels *quant_dispatch(void) {
        return get(KERNEL_QUANT)->quant;
}
