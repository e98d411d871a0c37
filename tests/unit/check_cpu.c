/* SPDX-License-Identifier: MIT */
/* kernels/cpu.c: feature names and detection. */

#include <check.h>
#include <string.h>

#include "check-main.h"
#include "cpu.h"

START_TEST(test_names_round_trip) {
        for (CpuFeature f = 0; f < _CPU_FEATURE_MAX; f++) {
                const char *name = cpu_feature_to_string(f);
                ck_assert_ptr_nonnull(name);
                ck_assert_int_eq(cpu_feature_from_string(name), f);
        }
        ck_assert_ptr_null(cpu_feature_to_string(_CPU_FEATURE_MAX));
        ck_assert_ptr_null(cpu_feature_to_string(_CPU_FEATURE_INVALID));
        ck_assert_int_eq(cpu_feature_from_string("asimd"), _CPU_FEATURE_INVALID);  /* spelled "neon" */
        ck_assert_int_eq(cpu_feature_from_string(NULL), _CPU_FEATURE_INVALID);
        ck_assert_int_eq(cpu_feature_from_string("neon"), CPU_NEON);
        ck_assert_int_eq(cpu_feature_from_string("sha_ni"), CPU_SHA_NI);
}
END_TEST

/* Detection reports only features of the architecture it runs on. */
START_TEST(test_detect_native_only) {
        uint64_t cpu = cpu_detect();
        unsigned native = 0;

        for (CpuFeature f = 0; f < _CPU_FEATURE_MAX; f++) {
                if (cpu_feature_native(f))
                        native++;
                else
                        ck_assert_msg(!(cpu & CPU_BIT(f)), "%s reported on %s", cpu_feature_to_string(f),
                                      cpu_arch());
        }
        ck_assert_uint_eq(cpu_detect(), cpu);

        if (strcmp(cpu_arch(), "x86_64") == 0) {
                ck_assert_uint_eq(native, 6);
                /* Every x86-64 CPU able to run Debian 12 userspace has SSSE3 in practice; AVX2 implies AVX. */
                if (cpu & CPU_BIT(CPU_AVX2))
                        ck_assert(cpu & CPU_BIT(CPU_AVX));
        } else if (strcmp(cpu_arch(), "aarch64") == 0) {
                ck_assert_uint_eq(native, 17);
                /* Advanced SIMD is mandatory in ARMv8-A Linux userspace. */
                ck_assert(cpu & CPU_BIT(CPU_NEON));
                if (cpu & CPU_BIT(CPU_SVE2))
                        ck_assert(cpu & CPU_BIT(CPU_SVE));
        }
}
END_TEST

static Suite *cpu_suite(void) {
        Suite *s = suite_create("cpu");
        TCase *tc = tcase_create("detect");

        tcase_add_test(tc, test_names_round_trip);
        tcase_add_test(tc, test_detect_native_only);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(cpu_suite)
