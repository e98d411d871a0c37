/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * CPU capability detection: which instruction-set extensions the running
 * CPU and OS support. x86-64 uses cpuid (and xgetbv for the OS-enabled
 * register state: AVX needs YMM, AVX-512 needs ZMM/opmask state saved);
 * aarch64 uses getauxval(AT_HWCAP/AT_HWCAP2), i.e. what the kernel (or
 * qemu-user) reports.
 */

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum CpuFeature {
        /* x86-64 */
        CPU_SSE41,
        CPU_SSSE3,
        CPU_AVX,
        CPU_AVX2,
        CPU_AVX512F,
        CPU_SHA_NI,
        /* aarch64 */
        CPU_NEON,
        CPU_AES,
        CPU_PMULL,
        CPU_SHA1,
        CPU_SHA2,
        CPU_SHA3,
        CPU_SHA512,
        CPU_CRC32,
        CPU_ATOMICS,
        CPU_FP16,
        CPU_DOTPROD,
        CPU_I8MM,
        CPU_BF16,
        CPU_SVE,
        CPU_SVE2,
        CPU_SME,
        CPU_SME2,
        _CPU_FEATURE_MAX,
        _CPU_FEATURE_INVALID = -EINVAL,
} CpuFeature;

#define CPU_BIT(f) (UINT64_C(1) << (f))

/* "x86_64", "aarch64", or "unknown" for the architecture this was built for. */
const char *cpu_arch(void);

/* Bitmask of CPU_BIT(feature) for every feature present. Queries the CPU each call. */
uint64_t cpu_detect(void);

/* Whether @f is a feature of the architecture this was built for (x86-64 or aarch64 names). */
bool cpu_feature_native(CpuFeature f);

/* Name as `taskpatch caps` spells it ("sha_ni", "neon", ...); NULL when out of range. */
const char *cpu_feature_to_string(CpuFeature f);
CpuFeature cpu_feature_from_string(const char *s);
