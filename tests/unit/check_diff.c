/* SPDX-License-Identifier: MIT */
/* common/codec/diff.c: regions per changed site, runs in gaps, layout changes. */

#include <check.h>
#include <string.h>
#include <sys/mman.h>

#include "check-main.h"
#include "diff.h"
#include "fileio.h"
#include "test-buf.h"

#define SIZE 100000

/* Two sites: [10000, 30000) "a" and [50000, 90000) "b"; the rest is gap. */
static Artifact *artifact(ArtifactKind kind, uint64_t size) {
        static char a[] = "a", b[] = "b";
        Artifact *art = calloc(1, sizeof(*art));
        art->kind = kind;
        art->size = size;
        art->n_sites = 2;
        art->sites = calloc(2, sizeof(Site));
        art->sites[0] = (Site) { a, 10000, 20000, 2 };
        art->sites[1] = (Site) { b, 50000, 40000, 2 };
        return art;
}

static void artifact_release(Artifact *a) {
        free(a->sites);
        free(a);
}

START_TEST(test_sites_and_gaps) {
        static uint8_t base[SIZE], target[SIZE];
        Artifact *ab = artifact(ARTIFACT_GGUF, SIZE), *at = artifact(ARTIFACT_GGUF, SIZE);
        Diff *d = NULL;
        TpError err = {};

        for (size_t i = 0; i < SIZE; i++)
                base[i] = (uint8_t) (i * 7);
        memcpy(target, base, SIZE);
        target[100] ^= 1;                       /* gap: two changes 50 bytes apart: one run */
        target[150] ^= 1;
        target[5000] ^= 1;                      /* gap: far away: a second run */
        target[12000] ^= 1;                     /* site a: first and last changed bytes */
        target[25000] ^= 1;
        target[20000] ^= 1;
        /* site b unchanged */

        int fb = memfd_with(base, SIZE), ft = memfd_with(target, SIZE);
        ck_assert_int_eq(diff_compute(&FILESET_ONE(fb, ab->size), ab, &FILESET_ONE(ft, at->size), at, &d, &err), 0);
        ck_assert(!d->layout_changed);
        ck_assert_uint_eq(d->n_regions, 3);
        ck_assert_uint_eq(d->regions[0].offset, 100);
        ck_assert_uint_eq(d->regions[0].length, 51);
        ck_assert_uint_eq(d->regions[0].changed_bytes, 2);
        ck_assert_int_eq(d->regions[0].site, -1);
        ck_assert_uint_eq(d->regions[1].offset, 5000);
        ck_assert_uint_eq(d->regions[1].length, 1);
        ck_assert_int_eq(d->regions[2].site, 0);
        ck_assert_uint_eq(d->regions[2].offset, 12000);
        ck_assert_uint_eq(d->regions[2].length, 13001);
        ck_assert_uint_eq(d->regions[2].changed_bytes, 3);
        ck_assert_uint_eq(d->sites_changed, 1);
        ck_assert_uint_eq(d->sites_total, 2);
        ck_assert_uint_eq(d->changed_bytes, 6);
        diff_free(d);

        /* Identical files: nothing. */
        int fb2 = memfd_with(base, SIZE);
        ck_assert_int_eq(diff_compute(&FILESET_ONE(fb, ab->size), ab, &FILESET_ONE(fb2, at->size), at, &d, &err), 0);
        ck_assert_uint_eq(d->n_regions, 0);
        diff_free(d);
        close(fb);
        close(ft);
        close(fb2);
        artifact_release(ab);
        artifact_release(at);
}
END_TEST

START_TEST(test_layout_change) {
        static uint8_t base[SIZE], target[SIZE];
        Artifact *ab = artifact(ARTIFACT_GGUF, SIZE), *at = artifact(ARTIFACT_GGUF, SIZE - 10);
        Diff *d = NULL;
        TpError err = {};

        memcpy(target, base, SIZE);
        target[7] = 1;
        int fb = memfd_with(base, SIZE), ft = memfd_with(target, SIZE - 10);
        ck_assert_int_eq(diff_compute(&FILESET_ONE(fb, ab->size), ab, &FILESET_ONE(ft, at->size), at, &d, &err), 0);
        ck_assert(d->layout_changed);
        ck_assert_uint_eq(d->n_regions, 1);
        ck_assert_uint_eq(d->regions[0].offset, 0);
        ck_assert_uint_eq(d->regions[0].length, SIZE - 10);
        ck_assert_uint_eq(d->regions[0].changed_bytes, 1);
        diff_free(d);

        /* Same size, a site moved: also a layout change. */
        Artifact *moved = artifact(ARTIFACT_GGUF, SIZE);
        moved->sites[1].offset += 32;
        ck_assert(!artifact_same_layout(ab, moved));
        at->kind = ARTIFACT_ONNX;
        ck_assert_int_eq(diff_compute(&FILESET_ONE(fb, ab->size), ab, &FILESET_ONE(ft, at->size), at, &d, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "same kind"));
        close(fb);
        close(ft);
        artifact_release(ab);
        artifact_release(at);
        artifact_release(moved);
}
END_TEST

static Suite *diff_suite(void) {
        Suite *s = suite_create("diff");
        TCase *tc = tcase_create("diff");

        tcase_add_test(tc, test_sites_and_gaps);
        tcase_add_test(tc, test_layout_change);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(diff_suite)
