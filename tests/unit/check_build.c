/* SPDX-License-Identifier: MIT */
/*
 * common/device/build.c: building a slot's next content into a fresh file from a base view —
 * relocating bundles (format 2) from the base, from another relocated slot (through its TPUNDO2
 * record), an in-layout task and the base itself from a relocated slot; each byte for byte, each
 * record giving the whole base back; damaged base bytes refused before anything is committed.
 */

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "artifact.h"
#include "build.h"
#include "check-main.h"
#include "create.h"
#include "diff.h"
#include "fileio.h"
#include "test-buf.h"

#define N_TENSORS 6
#define TENSOR_BYTES (192u << 10)       /* F16 tensors of 96 Ki elements */

static char dir[64];

static char *path_of(const char *name) {
        static char p[4][128];
        static unsigned k;
        k = (k + 1) % 4;
        snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
        return p[k];
}

static void put_le(Buf *b, uint64_t v, unsigned n) {
        uint8_t x[8];
        for (unsigned i = 0; i < n; i++)
                x[i] = (uint8_t) (v >> (8 * i));
        put(b, x, n);
}

static void put_str(Buf *b, const char *s) {
        put_le(b, strlen(s), 8);
        put(b, s, strlen(s));
}

/*
 * A GGUF v3 of N_TENSORS F16 tensors named blk.I.weight with general.name @name; tensor I's
 * bytes are a hash of (I, offset), flipped in its first 4 KiB when bit I of @changed is set, and
 * tensor @grown (-1: none) has 64 more rows of 1024 elements. A longer name moves every tensor.
 */
static void write_gguf(const char *file, const char *name, unsigned changed, int grown) {
        Buf b = {};
        uint64_t offset = 0;

        put(&b, "GGUF", 4);
        put_le(&b, 3, 4);
        put_le(&b, N_TENSORS, 8);
        put_le(&b, 2, 8);
        put_str(&b, "general.architecture");
        put_le(&b, 8, 4);
        put_str(&b, "test");
        put_str(&b, "general.name");
        put_le(&b, 8, 4);
        put_str(&b, name);
        for (int i = 0; i < N_TENSORS; i++) {
                char t[32];
                uint64_t rows = TENSOR_BYTES / 2048 + (i == grown ? 64 : 0);
                snprintf(t, sizeof(t), "blk.%d.weight", i);
                put_str(&b, t);
                put_le(&b, 2, 4);
                put_le(&b, 1024, 8);
                put_le(&b, rows, 8);
                put_le(&b, 1, 4);       /* F16 */
                put_le(&b, offset, 8);
                offset += rows * 2048;
        }
        while (b.n % 32)
                put(&b, "", 1);
        for (int i = 0; i < N_TENSORS; i++) {
                uint64_t n = TENSOR_BYTES + (i == grown ? 64 * 2048 : 0);
                for (uint64_t k = 0; k < n; k++) {
                        uint32_t x = (uint32_t) (i * 1000003 + k) * 2654435761u;
                        uint8_t byte = (uint8_t) ((x ^ x >> 15) >> 7);
                        if (k < 4096 && (changed >> i & 1))
                                byte ^= 0x5a;
                        put(&b, &byte, 1);
                }
        }
        ck_assert_int_eq(atomic_file_write(path_of(file), b.p, b.n), 0);
        free(b.p);
}

static void make_bundle(const char *target, const char *out, const char *task) {
        _cleanup_close_ int bfd = open(path_of("base.gguf"), O_RDONLY | O_CLOEXEC);
        _cleanup_close_ int tfd = open(path_of(target), O_RDONLY | O_CLOEXEC);
        _cleanup_(artifact_freep) Artifact *ba = NULL, *ta = NULL;
        _cleanup_(diff_freep) Diff *d = NULL;
        CreateOptions o = { .task = task, .version = 1, .created = 1, .level = 3 };
        TpError err = {};

        ck_assert_int_eq(artifact_open(bfd, &ba, &err), 0);
        ck_assert_int_eq(artifact_open(tfd, &ta, &err), 0);
        ck_assert_int_eq(diff_compute(&FILESET_ONE(bfd, ba->size), ba, &FILESET_ONE(tfd, ta->size), ta, &d, &err), 0);
        ck_assert_msg(bundle_create(&FILESET_ONE(bfd, ba->size), ba, &FILESET_ONE(tfd, ta->size), ta, d, &o, path_of(out), NULL, &err) == 0, "%s", err.message);
}

static Bundle *open_bundle(const char *name) {
        Bundle *b = NULL;
        BundleTrust t = { .allow_unsigned = true };
        TpError err = {};
        ck_assert_int_eq(bundle_open(path_of(name), &b, &err), 0);
        ck_assert_int_eq(bundle_verify(b, &t, &err), 0);
        return b;
}

static uint64_t file_size(const char *name) {
        struct stat st;
        ck_assert_int_eq(stat(path_of(name), &st), 0);
        return (uint64_t) st.st_size;
}

static uint8_t *read_all(const char *name) {
        uint64_t n = file_size(name);
        uint8_t *p = malloc(n + 1);
        _cleanup_close_ int fd = open(path_of(name), O_RDONLY | O_CLOEXEC);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(pread_full(fd, p, n, 0), 0);
        return p;
}

static void setup(void) {
        snprintf(dir, sizeof(dir), "/tmp/check-build.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
        write_gguf("base.gguf", "base", 0, -1);
        write_gguf("r1.gguf", "a task whose name grew by far more than the alignment", 1u << 1, -1);
        write_gguf("r2.gguf", "another", 1u << 4, 3);
        write_gguf("t.gguf", "base", 1u << 2, -1);        /* the base's layout: an in-layout bundle */
        make_bundle("r1.gguf", "r1.tpb", "r1");
        make_bundle("r2.gguf", "r2.tpb", "r2");
        make_bundle("t.gguf", "t.tpb", "t");
}

static void teardown(void) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        ck_assert_int_eq(system(cmd), 0);
}

/* What a slot file holds: its seal (size and record) and the path of its record. */
typedef struct View {
        const char *file;
        Seal seal;
        char undo[128];
} View;

/* Each build_into() runs its builder with this time cap (builder_set_time_cap()) and counts its steps. */
static uint64_t time_cap;
static unsigned steps;

/*
 * Build @b (NULL: the base) from @from, whose files are @view, into the files @out, held to the
 * digest @sha256 (NULL: the one-file digest, the bundle's or the base's); its record goes beside
 * @out_name. 0 or the builder's error; @to describes the result after.
 */
static int build_into(View *from, const FileSet *view, Bundle *b, const FileSet *out, const char *out_name,
                      const uint8_t *sha256, View *to, TpError *err) {
        _cleanup_(undo_record_freep) UndoRecord *u = NULL;
        _cleanup_(builder_freep) Builder *bd = NULL;
        uint64_t base_size = file_size("base.gguf");
        StageTarget t = { .bundle = b, .size = b ? b->manifest->target.size : base_size };
        int r;

        if (b)
                memcpy(t.sha256, b->manifest->target.sha256, 32);
        else {
                uint8_t *bytes = read_all("base.gguf");
                sha256_digest(bytes, base_size, t.sha256);
                free(bytes);
        }
        if (sha256)
                memcpy(t.sha256, sha256, 32);
        if (from->seal.undo_spans &&
            (r = undo_record_open(from->undo, from->seal.undo_spans, from->seal.undo_sha256, from->seal.size, &u, err)) < 0)
                return r;
        StageSource src = { .seal = &from->seal, .undo = u };
        *to = (View) { .file = out_name };
        snprintf(to->undo, sizeof(to->undo), "%s.undo", path_of(out_name));
        if ((r = builder_new(view, &src, &t, base_size, to->undo, &bd, err)) < 0)
                return r;
        ck_assert_uint_ge(builder_space(bd), t.size);
        ck_assert_int_eq(builder_output(bd, out, err), 0);
        builder_set_time_cap(bd, time_cap);
        steps = 0;
        while ((r = builder_step(bd, 100000, err)) > 0)
                steps++;
        if (r < 0)
                return r;
        const StageProgress *p = builder_progress(bd);
        ck_assert_uint_eq(p->done, p->total);
        ck_assert_uint_eq(p->slot_bytes, t.size);
        builder_result(bd, &to->seal.undo_spans, to->seal.undo_sha256, &to->seal.relocated);
        to->seal.size = t.size;
        return 0;
}

/* Build @b (NULL: the base) from the one file @from into the file @out; 0 or the builder's error. */
static int build(View *from, Bundle *b, const char *out, View *to, TpError *err) {
        _cleanup_close_ int vfd = open(path_of(from->file), O_RDONLY | O_CLOEXEC);
        _cleanup_close_ int ofd = open(path_of(out), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        uint64_t size = b ? b->manifest->target.size : file_size("base.gguf");

        ck_assert_int_ge(vfd, 0);
        ck_assert_int_ge(ofd, 0);
        return build_into(from, &FILESET_ONE(vfd, file_size(from->file)), b, &FILESET_ONE(ofd, size), out, NULL, to,
                          err);
}

static void assert_same(const char *got, const char *want) {
        uint64_t n = file_size(want);
        ck_assert_uint_eq(file_size(got), n);
        uint8_t *a = read_all(got), *b = read_all(want);
        ck_assert_msg(memcmp(a, b, n) == 0, "%s is not %s", got, want);
        free(a);
        free(b);
}

/* The view's record gives every base byte back. */
static void assert_gives_base(View *v) {
        _cleanup_(undo_record_freep) UndoRecord *u = NULL;
        _cleanup_close_ int fd = open(path_of(v->file), O_RDONLY | O_CLOEXEC);
        uint64_t n = file_size("base.gguf");
        uint8_t *got = malloc(n), *want = read_all("base.gguf");
        TpError err = {};

        ck_assert_msg(undo_record_open(v->undo, v->seal.undo_spans, v->seal.undo_sha256, v->seal.size, &u, &err) == 0,
                      "%s", err.message);
        ck_assert_int_eq(u->relocated, v->seal.relocated);
        ck_assert_msg(undo_read_base(u, &FILESET_ONE(fd, v->seal.size), 0, n, got, &err) == 0, "%s", err.message);
        ck_assert_msg(memcmp(got, want, n) == 0, "%s with its record is not the base", v->file);
        free(got);
        free(want);
}

START_TEST(test_chain) {
        _cleanup_(bundle_freep) Bundle *r1 = open_bundle("r1.tpb"), *r2 = open_bundle("r2.tpb"), *t = open_bundle("t.tpb");
        View base = { .file = "base.gguf", .seal = { .size = file_size("base.gguf") } }, a, b, c, d, e;
        TpError err = {};

        ck_assert_int_eq(r1->manifest->format, MANIFEST_FORMAT_RELOCATING);
        ck_assert_int_eq(r2->manifest->format, MANIFEST_FORMAT_RELOCATING);
        ck_assert_int_ne(t->manifest->format, MANIFEST_FORMAT_RELOCATING);

        /* From the base; then relocated -> relocated (a grown tensor: a bigger file). */
        ck_assert_msg(build(&base, r1, "s1", &a, &err) == 0, "%s", err.message);
        assert_same("s1", "r1.gguf");
        ck_assert(a.seal.relocated);
        assert_gives_base(&a);
        ck_assert_msg(build(&a, r2, "s2", &b, &err) == 0, "%s", err.message);
        assert_same("s2", "r2.gguf");
        ck_assert_uint_gt(b.seal.size, base.seal.size);
        assert_gives_base(&b);

        /* From a relocated slot: an in-layout task (a TPUNDO1 record) and the base (no record). */
        ck_assert_msg(build(&b, t, "s3", &c, &err) == 0, "%s", err.message);
        assert_same("s3", "t.gguf");
        ck_assert(!c.seal.relocated);
        assert_gives_base(&c);
        ck_assert_msg(build(&b, NULL, "s4", &d, &err) == 0, "%s", err.message);
        assert_same("s4", "base.gguf");
        ck_assert_uint_eq(d.seal.undo_spans, 0);
        ck_assert_int_eq(access(d.undo, F_OK), -1);

        /* A relocated task from an in-layout one's record. */
        ck_assert_msg(build(&c, r1, "s5", &e, &err) == 0, "%s", err.message);
        assert_same("s5", "r1.gguf");
}
END_TEST

/* A time cap ends each step after its first piece of work: more steps, the same file. */
START_TEST(test_time_cap) {
        _cleanup_(bundle_freep) Bundle *r1 = open_bundle("r1.tpb");
        View base = { .file = "base.gguf", .seal = { .size = file_size("base.gguf") } }, a;
        TpError err = {};
        unsigned uncapped;

        ck_assert_msg(build(&base, r1, "s1", &a, &err) == 0, "%s", err.message);
        uncapped = steps;
        time_cap = 1;
        ck_assert_msg(build(&base, r1, "s1", &a, &err) == 0, "%s", err.message);
        time_cap = 0;
        assert_same("s1", "r1.gguf");
        ck_assert_msg(steps > uncapped, "%u steps with a time cap, %u without", steps, uncapped);
}
END_TEST

/* Damaged base bytes: under a coded span its base hash names the span; under a copy the target's SHA-256 catches it. */
START_TEST(test_damaged_view) {
        _cleanup_(bundle_freep) Bundle *r1 = open_bundle("r1.tpb");
        View base = { .file = "base.gguf", .seal = { .size = file_size("base.gguf") } }, a;
        const ManifestSpan *coded = NULL, *copy = NULL;
        TpError err = {};

        for (size_t i = 0; i < r1->manifest->n_spans; i++) {
                const ManifestSpan *s = &r1->manifest->spans[i];
                if (s->encoding == SPAN_DELTA && !coded)
                        coded = s;
                if (s->encoding == SPAN_COPY && s->length > 4096 && !copy)
                        copy = s;
        }
        ck_assert_ptr_nonnull(coded);
        ck_assert_ptr_nonnull(copy);
        write_gguf("view.gguf", "base", 0, -1);
        base.file = "view.gguf";
        int fd = open(path_of("view.gguf"), O_RDWR | O_CLOEXEC);
        ck_assert_int_eq(pwrite_full(fd, "X", 1, coded->base_offset + 10), 0);
        close(fd);
        ck_assert_int_eq(build(&base, r1, "s1", &a, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "base bytes' SHA-256") && strstr(err.message, "wrong base?"), "%s", err.message);
        ck_assert_int_eq(access(a.undo, F_OK), -1);    /* nothing committed */

        write_gguf("view.gguf", "base", 0, -1);
        fd = open(path_of("view.gguf"), O_RDWR | O_CLOEXEC);
        ck_assert_int_eq(pwrite_full(fd, "X", 1, copy->base_offset + 10), 0);
        close(fd);
        ck_assert_int_eq(build(&base, r1, "s1", &a, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "the built slot's SHA-256"), "%s", err.message);
        ck_assert_int_eq(access(a.undo, F_OK), -1);
}
END_TEST

/* A view of the wrong size, and a bundle for another base size: refused before a byte is written. */
START_TEST(test_refusals) {
        _cleanup_(bundle_freep) Bundle *r1 = open_bundle("r1.tpb");
        View v = { .file = "r2.gguf", .seal = { .size = file_size("r2.gguf") } }, a;
        TpError err = {};

        ck_assert_int_eq(build(&v, r1, "s1", &a, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "the slot to build from maps"), "%s", err.message);
        ck_assert_uint_eq(file_size("s1"), 0);
}
END_TEST

/* ---- a slot of several files: the same bytes, the set's digest ---- */

/* Two files @name-1 and @name-2, cut at @cut, holding @bytes (NULL: empty, to be written up to @size). */
typedef struct TwoFiles {
        char names[2][32];
        FileSetFile f[2];
        FileSet set;
} TwoFiles;

static void two_files_open(TwoFiles *t, const char *name, const uint8_t *bytes, uint64_t size, uint64_t cut) {
        t->set = (FileSet) { .files = t->f, .n_files = 2, .size = size, .directory = true };
        for (int i = 0; i < 2; i++) {
                snprintf(t->names[i], sizeof(t->names[i]), "%s-%d", name, i + 1);
                t->f[i] = (FileSetFile) { .path = t->names[i], .offset = i ? cut : 0, .size = i ? size - cut : cut };
                t->f[i].fd = open(path_of(t->names[i]), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                ck_assert_int_ge(t->f[i].fd, 0);
                if (bytes)
                        ck_assert_int_eq(pwrite_full(t->f[i].fd, bytes + t->f[i].offset, t->f[i].size, 0), 0);
        }
}

static void two_files_close(TwoFiles *t) {
        for (int i = 0; i < 2; i++)
                close(t->f[i].fd);
}

/* The set's digest of @bytes laid out as @t: each file's SHA-256, then fileset_digest(). */
static void two_files_digest(const TwoFiles *t, const uint8_t *bytes, uint8_t ret[32]) {
        uint8_t per[2][32];
        for (int i = 0; i < 2; i++)
                sha256_digest(bytes + t->f[i].offset, t->f[i].size, per[i]);
        fileset_digest(&t->set, (const uint8_t (*)[32]) per, ret);
}

/* Each file holds its part of @want, and no more. */
static void assert_files_are(const TwoFiles *t, const uint8_t *want) {
        uint8_t *got = malloc(t->set.size);
        for (int i = 0; i < 2; i++) {
                struct stat st;
                ck_assert_int_eq(fstat(t->f[i].fd, &st), 0);
                ck_assert_uint_eq((uint64_t) st.st_size, t->f[i].size);
                ck_assert_int_eq(pread_full(t->f[i].fd, got + t->f[i].offset, t->f[i].size, 0), 0);
        }
        ck_assert_msg(memcmp(got, want, t->set.size) == 0, "%s, %s do not hold the expected bytes", t->names[0],
                      t->names[1]);
        free(got);
}

/*
 * A base view of two files into a result of two, each cut inside a tensor (so copies cross both
 * cuts), then from that relocated pair and its record back to the base; each is held to the set
 * digest, and the one file's SHA-256 (what a one-file target's manifest says) is refused.
 */
START_TEST(test_two_files) {
        _cleanup_(bundle_freep) Bundle *r1 = open_bundle("r1.tpb");
        uint64_t base_size = file_size("base.gguf"), r1_size = file_size("r1.gguf");
        uint8_t *base_bytes = read_all("base.gguf"), *r1_bytes = read_all("r1.gguf");
        View base = { .file = "base.gguf", .seal = { .size = base_size } }, a, c;
        TwoFiles view, out;
        uint8_t want[32];
        char hex[SHA256_HEX_SIZE], msg[256];
        TpError err = {};

        two_files_open(&view, "view", base_bytes, base_size, base_size / 2 + 1001);
        two_files_open(&out, "s1", NULL, r1_size, r1_size / 3 + 517);
        two_files_digest(&out, r1_bytes, want);
        ck_assert_int_ne(memcmp(want, r1->manifest->target.sha256, 32), 0);
        ck_assert_msg(build_into(&base, &view.set, r1, &out.set, "s1", want, &a, &err) == 0, "%s", err.message);
        assert_files_are(&out, r1_bytes);
        ck_assert(a.seal.relocated);

        /* From the relocated pair through its TPUNDO2 record: the base, cut elsewhere. */
        TwoFiles back;
        two_files_open(&back, "s2", NULL, base_size, base_size - 4096 - 3);
        two_files_digest(&back, base_bytes, want);
        ck_assert_msg(build_into(&a, &out.set, NULL, &back.set, "s2", want, &c, &err) == 0, "%s", err.message);
        assert_files_are(&back, base_bytes);
        ck_assert_uint_eq(c.seal.undo_spans, 0);
        two_files_close(&back);
        two_files_close(&out);

        /* Held to the manifest's one-file SHA-256, the pair's own digest is what the refusal reports. */
        two_files_open(&out, "s3", NULL, r1_size, r1_size / 3 + 517);
        two_files_digest(&out, r1_bytes, want);
        ck_assert_int_eq(build_into(&base, &view.set, r1, &out.set, "s3", NULL, &a, &err), -EBADMSG);
        sha256_to_hex(want, hex);
        snprintf(msg, sizeof(msg), "the built slot's SHA-256 %s is not the target's", hex);
        ck_assert_msg(strstr(err.message, msg), "%s", err.message);
        ck_assert_int_eq(access(a.undo, F_OK), -1);
        two_files_close(&out);
        two_files_close(&view);
        free(base_bytes);
        free(r1_bytes);
}
END_TEST

static Suite *build_suite(void) {
        Suite *s = suite_create("build");
        TCase *tc = tcase_create("build");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_chain);
        tcase_add_test(tc, test_time_cap);
        tcase_add_test(tc, test_damaged_view);
        tcase_add_test(tc, test_refusals);
        tcase_add_test(tc, test_two_files);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(build_suite)
