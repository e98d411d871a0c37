/* SPDX-License-Identifier: MIT */

#include <string.h>

#include "cpu.h"

#if defined(__x86_64__)
#  include <cpuid.h>
#elif defined(__aarch64__)
#  include <sys/auxv.h>
#endif

static const char *const cpu_feature_table[_CPU_FEATURE_MAX] = {
        [CPU_SSE41] = "sse4.1",   [CPU_SSSE3] = "ssse3",     [CPU_AVX] = "avx",
        [CPU_AVX2] = "avx2",      [CPU_AVX512F] = "avx512f", [CPU_SHA_NI] = "sha_ni",
        [CPU_NEON] = "neon",      [CPU_AES] = "aes",         [CPU_PMULL] = "pmull",
        [CPU_SHA1] = "sha1",      [CPU_SHA2] = "sha2",       [CPU_SHA3] = "sha3",
        [CPU_SHA512] = "sha512",  [CPU_CRC32] = "crc32",     [CPU_ATOMICS] = "atomics",
        [CPU_FP16] = "fp16",      [CPU_DOTPROD] = "dotprod", [CPU_I8MM] = "i8mm",
        [CPU_BF16] = "bf16",      [CPU_SVE] = "sve",         [CPU_SVE2] = "sve2",
        [CPU_SME] = "sme",        [CPU_SME2] = "sme2",
};

const char *cpu_feature_to_string(CpuFeature f) {
        if (f < 0 || f >= _CPU_FEATURE_MAX)
                return NULL;
        return cpu_feature_table[f];
}

CpuFeature cpu_feature_from_string(const char *s) {
        if (!s)
                return _CPU_FEATURE_INVALID;
        for (CpuFeature f = 0; f < _CPU_FEATURE_MAX; f++)
                if (strcmp(cpu_feature_table[f], s) == 0)
                        return f;
        return _CPU_FEATURE_INVALID;
}

bool cpu_feature_native(CpuFeature f) {
#if defined(__x86_64__)
        return f >= CPU_SSE41 && f <= CPU_SHA_NI;
#elif defined(__aarch64__)
        return f >= CPU_NEON && f <= CPU_SME2;
#else
        (void) f;
        return false;
#endif
}

const char *cpu_arch(void) {
#if defined(__x86_64__)
        return "x86_64";
#elif defined(__aarch64__)
        return "aarch64";
#else
        return "unknown";
#endif
}

#if defined(__x86_64__)

/* XCR0 bits: which register state the OS saves on context switch. */
#define XCR0_SSE      (UINT64_C(1) << 1)
#define XCR0_AVX      (UINT64_C(1) << 2)
#define XCR0_AVX512   (UINT64_C(7) << 5)   /* opmask, ZMM_Hi256, Hi16_ZMM */

static uint64_t xgetbv0(void) {
        uint32_t eax, edx;
        __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
        return (uint64_t) edx << 32 | eax;
}

uint64_t cpu_detect(void) {
        unsigned eax, ebx, ecx, edx;
        uint64_t r = 0;

        if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
                return 0;
        if (ecx & bit_SSSE3)
                r |= CPU_BIT(CPU_SSSE3);
        if (ecx & bit_SSE4_1)
                r |= CPU_BIT(CPU_SSE41);

        /* AVX is usable only when the OS has enabled XSAVE and saves YMM state. */
        uint64_t xcr0 = 0;
        if (ecx & bit_OSXSAVE)
                xcr0 = xgetbv0();
        bool ymm = (xcr0 & (XCR0_SSE | XCR0_AVX)) == (XCR0_SSE | XCR0_AVX);
        bool zmm = ymm && (xcr0 & XCR0_AVX512) == XCR0_AVX512;
        if ((ecx & bit_AVX) && ymm)
                r |= CPU_BIT(CPU_AVX);

        if (__get_cpuid_max(0, NULL) >= 7) {
                __cpuid_count(7, 0, eax, ebx, ecx, edx);
                if ((ebx & bit_AVX2) && (r & CPU_BIT(CPU_AVX)))
                        r |= CPU_BIT(CPU_AVX2);
                if ((ebx & bit_AVX512F) && zmm)
                        r |= CPU_BIT(CPU_AVX512F);
                if (ebx & bit_SHA)
                        r |= CPU_BIT(CPU_SHA_NI);
        }
        return r;
}

#elif defined(__aarch64__)

/* Bit numbers from the kernel's uapi <asm/hwcap.h>, spelled out so older headers work. */
#define HWCAP_ASIMD_    (1UL << 1)
#define HWCAP_AES_      (1UL << 3)
#define HWCAP_PMULL_    (1UL << 4)
#define HWCAP_SHA1_     (1UL << 5)
#define HWCAP_SHA2_     (1UL << 6)
#define HWCAP_CRC32_    (1UL << 7)
#define HWCAP_ATOMICS_  (1UL << 8)
#define HWCAP_FPHP_     (1UL << 9)
#define HWCAP_ASIMDHP_  (1UL << 10)
#define HWCAP_SHA3_     (1UL << 17)
#define HWCAP_ASIMDDP_  (1UL << 20)
#define HWCAP_SHA512_   (1UL << 21)
#define HWCAP_SVE_      (1UL << 22)
#define HWCAP2_SVE2_    (1UL << 1)
#define HWCAP2_I8MM_    (1UL << 13)
#define HWCAP2_BF16_    (1UL << 14)
#define HWCAP2_SME_     (1UL << 23)
#define HWCAP2_SME2_    (1UL << 37)

uint64_t cpu_detect(void) {
        static const struct {
                bool hwcap2;
                unsigned long mask;
                CpuFeature feature;
        } map[] = {
                { false, HWCAP_ASIMD_, CPU_NEON },      { false, HWCAP_AES_, CPU_AES },
                { false, HWCAP_PMULL_, CPU_PMULL },     { false, HWCAP_SHA1_, CPU_SHA1 },
                { false, HWCAP_SHA2_, CPU_SHA2 },       { false, HWCAP_SHA3_, CPU_SHA3 },
                { false, HWCAP_SHA512_, CPU_SHA512 },   { false, HWCAP_CRC32_, CPU_CRC32 },
                { false, HWCAP_ATOMICS_, CPU_ATOMICS }, { false, HWCAP_ASIMDDP_, CPU_DOTPROD },
                { false, HWCAP_SVE_, CPU_SVE },         { true, HWCAP2_SVE2_, CPU_SVE2 },
                { true, HWCAP2_I8MM_, CPU_I8MM },       { true, HWCAP2_BF16_, CPU_BF16 },
                { true, HWCAP2_SME_, CPU_SME },         { true, HWCAP2_SME2_, CPU_SME2 },
        };
        unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
        uint64_t r = 0;

        for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
                if ((map[i].hwcap2 ? hw2 : hw) & map[i].mask)
                        r |= CPU_BIT(map[i].feature);
        /* Half-precision arithmetic needs both the scalar and the vector form. */
        if ((hw & HWCAP_FPHP_) && (hw & HWCAP_ASIMDHP_))
                r |= CPU_BIT(CPU_FP16);
        return r;
}

#else

uint64_t cpu_detect(void) {
        return 0;
}

#endif
