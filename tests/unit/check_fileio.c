/* SPDX-License-Identifier: MIT */
/* common/base/fileio.c: the temporaries atomic_file_open() makes, and only those, are recognised as its own. */

#include <check.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check-main.h"
#include "fileio.h"

START_TEST(test_own_temporary) {
        char dir[] = "/tmp/check_fileio.XXXXXX", path[64];
        AtomicFile f = ATOMIC_FILE_NULL;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/model.gguf", dir);
        ck_assert_int_eq(atomic_file_open(path, &f), 0);
        _cleanup_free_ char *copy = strdup(f.tmp_path);
        ck_assert_msg(atomic_file_is_temporary(basename(copy)), "%s", f.tmp_path);
        atomic_file_abort(&f);
        ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

static const struct {
        const char *name;
        bool ours;
} names[] = {
        { ".model.gguf.taskpatch.a1B2c3", true },
        { ".a.seal.taskpatch.Xy12Zq", true },
        { ".x.taskpatch.000000", true },
        /* Other programs' files, which a clean-up must never remove. */
        { ".profile.backup", false },
        { ".model.gguf.abcdef", false },        /* another tool's mkstemp() beside the model */
        { "model.gguf.taskpatch.abcdef", false },
        { ".model.gguf.taskpatch.abcde", false },
        { ".model.gguf.taskpatch.abcdefg", false },
        { ".model.gguf.taskpatch.abc-ef", false },
        { ".taskpatch.abcdef", false },         /* no name before the tag */
        { ".model.gguf.taskpatchd-new", false },
        { "", false },
        { ".", false },
};

START_TEST(test_names) {
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                ck_assert_msg(atomic_file_is_temporary(names[i].name) == names[i].ours, "'%s'", names[i].name);
}
END_TEST

static Suite *fileio_suite(void) {
        Suite *s = suite_create("fileio");
        TCase *tc = tcase_create("temporaries");
        tcase_add_test(tc, test_own_temporary);
        tcase_add_test(tc, test_names);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(fileio_suite)
