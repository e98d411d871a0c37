/* SPDX-License-Identifier: MIT */
/*
 * daemon/taskpatchd-spool.c against a fake host (tests/unit/fake-host.h), on a real
 * sd-event loop with inotify on a temporary folder: a dropped bundle is submitted once
 * with a descriptor of that very file, moved to installed/ when its install ends well and
 * to rejected/ with a .reason when it fails or is refused at once; dot-names, other names,
 * links and directories are never installed; nothing is submitted while the host cannot
 * start, and what waited goes in once it says it is idle.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>

#include "check-main.h"
#include "fake-host.h"
#include "taskpatchd-spool.h"

typedef struct Fixture {
        char root[64];
        char dir[96];
        DaemonConfig config;
        sd_event *e;
        FakeHost fake;
        Spool *spool;
} Fixture;

static void path_of(const Fixture *fx, const char *name, char *buf, size_t n) {
        snprintf(buf, n, "%s/%s", fx->dir, name);
}

static bool exists(const Fixture *fx, const char *name) {
        char p[256];
        path_of(fx, name, p, sizeof(p));
        return access(p, F_OK) == 0;
}

/* Write @name in the folder as a copy would: created, written, closed (IN_CLOSE_WRITE). */
static void drop(const Fixture *fx, const char *name, const char *content) {
        char p[256];
        path_of(fx, name, p, sizeof(p));
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, content, strlen(content)), (ssize_t) strlen(content));
        close(fd);
}

static ino_t inode_of(const Fixture *fx, const char *name) {
        char p[256];
        struct stat st;
        path_of(fx, name, p, sizeof(p));
        ck_assert_int_eq(lstat(p, &st), 0);
        return st.st_ino;
}

static void reason_has(const Fixture *fx, const char *name, const char *what) {
        char p[256], text[TP_ERROR_MAX + 2] = "";
        snprintf(p, sizeof(p), "%s/rejected/%s.reason", fx->dir, name);
        FILE *f = fopen(p, "re");
        ck_assert_msg(f, "%s: missing", p);
        size_t n = fread(text, 1, sizeof(text) - 1, f);
        fclose(f);
        text[n] = '\0';
        ck_assert_msg(strstr(text, what), "%s: '%s' lacks '%s'", p, text, what);
        ck_assert_msg(n > 0 && text[n - 1] == '\n', "%s: not one line", p);
}

/* The folder (not created yet), a loop, the fake host; the spool is created by start(). */
static void setup(Fixture *fx) {
        *fx = (Fixture) {};
        snprintf(fx->root, sizeof(fx->root), "/tmp/check-spool.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(fx->root));
        snprintf(fx->dir, sizeof(fx->dir), "%s/spool", fx->root);
        fx->config.spool = fx->dir;
        ck_assert_int_ge(sd_event_new(&fx->e), 0);
        fake_host_init(&fx->fake);
}

static void start(Fixture *fx) {
        TpError err = {};
        SourceTarget target = { &fx->config, &fx->fake.host };
        ck_assert_int_eq(spool_new(fx->e, &target, 1, &fx->spool, &err), 0);
        ck_assert_ptr_nonnull(fx->spool);
        pump(fx->e, 50);
}

static void done(Fixture *fx, int r, const char *error) {
        OperationOutcome o = { .transaction = fx->fake.transaction, .cmd = "install", .task = "json", .version = 1,
                               .r = r, .error = error };
        spool_source.operation_done(fx->spool, &o);
        pump(fx->e, 50);
}

static void teardown(Fixture *fx) {
        char cmd[128];
        spool_free(fx->spool);
        sd_event_unref(fx->e);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->root);
        ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_not_configured) {
        DaemonConfig config = {};
        FakeHost fake;
        Spool *s = (Spool *) 1;
        sd_event *e = NULL;
        TpError err = {};

        fake_host_init(&fake);
        ck_assert_int_ge(sd_event_new(&e), 0);
        SourceTarget target = { &config, &fake.host };
        ck_assert_int_eq(spool_new(e, &target, 1, &s, &err), 0);
        ck_assert_ptr_null(s);
        sd_event_unref(e);
}
END_TEST

START_TEST(test_installed) {
        Fixture fx;
        struct stat st;

        setup(&fx);
        start(&fx);
        ck_assert_int_eq(stat(fx.dir, &st), 0);
        ck_assert_int_eq(st.st_mode & 07777, 0700);
        ck_assert_uint_eq(fx.fake.installs, 0);

        drop(&fx, "json.tpb", "bundle");
        ino_t ino = inode_of(&fx, "json.tpb");
        pump(fx.e, 100);
        ck_assert_uint_eq(fx.fake.installs, 1);
        ck_assert_uint_eq(fx.fake.last_install_st.st_ino, ino);
        ck_assert(!fx.fake.last_install.allow_downgrade && !fx.fake.last_install.then_switch);
        ck_assert_int_eq(fx.fake.last_install.origin, ORIGIN_SPOOL);

        /* One at a time: another bundle waits while this one's install runs. */
        drop(&fx, "shout.tpb", "bundle 2");
        pump(fx.e, 100);
        ck_assert_uint_eq(fx.fake.installs, 1);

        /* Someone else's operation ends: nothing moves. */
        OperationOutcome other = { .transaction = "ffffffffffffffffffffffffffffffff", .cmd = "switch", .task = "",
                                   .r = 0 };
        spool_source.operation_done(fx.spool, &other);
        pump(fx.e, 50);
        ck_assert(exists(&fx, "json.tpb"));
        ck_assert_uint_eq(fx.fake.installs, 1);

        done(&fx, 0, NULL);
        ck_assert(!exists(&fx, "json.tpb"));
        ck_assert(exists(&fx, "installed/json.tpb"));
        ck_assert_uint_eq(inode_of(&fx, "installed/json.tpb"), ino);
        /* ... and the next one goes in. */
        ck_assert_uint_eq(fx.fake.installs, 2);
        ck_assert_uint_eq(fx.fake.last_install_st.st_ino, inode_of(&fx, "shout.tpb"));
        teardown(&fx);
}
END_TEST

START_TEST(test_failed) {
        Fixture fx;

        setup(&fx);
        start(&fx);
        drop(&fx, "shout.tpb", "damaged");
        pump(fx.e, 100);
        ck_assert_uint_eq(fx.fake.installs, 1);
        done(&fx, -EBADMSG, "shout v1: the payload does not match its manifest");
        ck_assert(!exists(&fx, "shout.tpb"));
        ck_assert(exists(&fx, "rejected/shout.tpb"));
        reason_has(&fx, "shout.tpb", "the payload does not match its manifest");
        ck_assert_uint_eq(fx.fake.installs, 1);         /* not retried */
        teardown(&fx);
}
END_TEST

START_TEST(test_refused_at_once) {
        Fixture fx;

        setup(&fx);
        fx.fake.install_result = -EKEYREJECTED;
        start(&fx);
        drop(&fx, "a.tpb", "unsigned");
        pump(fx.e, 100);
        ck_assert_uint_eq(fx.fake.installs, 1);
        ck_assert(exists(&fx, "rejected/a.tpb"));
        reason_has(&fx, "a.tpb", "the bundle is refused (fake)");

        /* The next one is looked at without waiting for an operation. */
        fx.fake.install_result = 1;
        drop(&fx, "b.tpb", "good");
        pump(fx.e, 100);
        ck_assert_uint_eq(fx.fake.installs, 2);
        ck_assert_uint_eq(fx.fake.last_install_st.st_ino, inode_of(&fx, "b.tpb"));
        teardown(&fx);
}
END_TEST

START_TEST(test_ignored_names) {
        Fixture fx;
        char from[256], to[256];

        setup(&fx);
        start(&fx);
        drop(&fx, ".json.tpb", "being copied");
        drop(&fx, "notes.txt", "not a bundle");
        drop(&fx, ".tpb", "only a suffix");
        drop(&fx, "json.tpb.part", "not yet");
        pump(fx.e, 150);
        ck_assert_uint_eq(fx.fake.installs, 0);
        ck_assert(exists(&fx, ".json.tpb") && exists(&fx, "notes.txt") && exists(&fx, "json.tpb.part"));

        /* Copy under a dot-name, then rename (IN_MOVED_TO): now it counts. */
        path_of(&fx, ".json.tpb", from, sizeof(from));
        path_of(&fx, "json.tpb", to, sizeof(to));
        ino_t ino = inode_of(&fx, ".json.tpb");
        ck_assert_int_eq(rename(from, to), 0);
        pump(fx.e, 100);
        ck_assert_uint_eq(fx.fake.installs, 1);
        ck_assert_uint_eq(fx.fake.last_install_st.st_ino, ino);
        teardown(&fx);
}
END_TEST

START_TEST(test_waits_for_idle) {
        Fixture fx;

        setup(&fx);
        fx.fake.can_start = false;
        start(&fx);
        drop(&fx, "json.tpb", "bundle");
        pump(fx.e, 150);
        ck_assert_uint_eq(fx.fake.installs, 0);
        ck_assert(exists(&fx, "json.tpb"));

        /* Still busy when told about another operation: still nothing. */
        done(&fx, 0, NULL);
        ck_assert_uint_eq(fx.fake.installs, 0);

        fx.fake.can_start = true;
        spool_source.idle(fx.spool);
        pump(fx.e, 50);
        ck_assert_uint_eq(fx.fake.installs, 1);
        ck_assert_uint_eq(fx.fake.last_install_st.st_ino, inode_of(&fx, "json.tpb"));
        teardown(&fx);
}
END_TEST

START_TEST(test_found_at_start) {
        Fixture fx;
        char p[256];

        setup(&fx);
        ck_assert_int_eq(mkdir(fx.dir, 0700), 0);
        drop(&fx, "b.tpb", "second");
        drop(&fx, "a.tpb", "first");
        path_of(&fx, "a.tpb", p, sizeof(p));
        char link[256];
        path_of(&fx, "0-link.tpb", link, sizeof(link));
        ck_assert_int_eq(symlink(p, link), 0);
        start(&fx);

        /* The oldest name first: the link, which is never followed, goes to rejected/ at once. */
        ck_assert(exists(&fx, "rejected/0-link.tpb"));
        reason_has(&fx, "0-link.tpb", "0-link.tpb");
        ck_assert_uint_eq(fx.fake.installs, 1);
        ck_assert_uint_eq(fx.fake.last_install_st.st_ino, inode_of(&fx, "a.tpb"));
        done(&fx, 0, NULL);
        ck_assert(exists(&fx, "installed/a.tpb"));
        ck_assert_uint_eq(fx.fake.installs, 2);
        ck_assert_uint_eq(fx.fake.last_install_st.st_ino, inode_of(&fx, "b.tpb"));
        teardown(&fx);
}
END_TEST

START_TEST(test_not_a_file) {
        Fixture fx;

        setup(&fx);
        ck_assert_int_eq(mkdir(fx.dir, 0700), 0);
        char p[256];
        path_of(&fx, "dir.tpb", p, sizeof(p));
        ck_assert_int_eq(mkdir(p, 0700), 0);
        start(&fx);
        ck_assert_uint_eq(fx.fake.installs, 0);
        ck_assert(exists(&fx, "rejected/dir.tpb"));
        reason_has(&fx, "dir.tpb", "not a regular file");
        teardown(&fx);
}
END_TEST

static Suite *spool_suite(void) {
        Suite *s = suite_create("spool");
        TCase *tc = tcase_create("spool");
        tcase_set_timeout(tc, 30);
        tcase_add_test(tc, test_not_configured);
        tcase_add_test(tc, test_installed);
        tcase_add_test(tc, test_failed);
        tcase_add_test(tc, test_refused_at_once);
        tcase_add_test(tc, test_ignored_names);
        tcase_add_test(tc, test_waits_for_idle);
        tcase_add_test(tc, test_found_at_start);
        tcase_add_test(tc, test_not_a_file);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(spool_suite)
