/* SPDX-License-Identifier: MIT */
/*
 * common/device/stage.c, common/device/slot.c, common/device/filejob.c: staging tasks into a slot file in place;
 * and the span decoder it shares with bundle_apply() (common/bundle/span.c) refusing damage in the same words.
 */

#include <check.h>
#include <endian.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apply.h"
#include "artifact.h"
#include "check-main.h"
#include "create.h"
#include "diff.h"
#include "fileio.h"
#include "filejob.h"
#include "fileset.h"
#include "stage.h"

#define SIZE ((3u << 20) + 123)
#define CHUNK (64u << 10)

static char dir[64];
static uint8_t *base, *task_a, *task_b;
static uint8_t base_root[32];           /* the base's chunk root: the target of a return to the base */

static uint32_t rng = 12345;
static uint8_t next_byte(void) {
        rng = rng * 1103515245u + 12345u;
        return (uint8_t) (rng >> 16);
}

static char *path_of(const char *name) {
        static char p[4][128];
        static unsigned k;
        k = (k + 1) % 4;
        snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
        return p[k];
}

static void write_file(const char *name, const uint8_t *d, size_t n) {
        ck_assert_int_eq(atomic_file_write(path_of(name), d, n), 0);
}

static void change(uint8_t *t, uint64_t off, uint64_t len) {
        for (uint64_t i = 0; i < len; i++)
                t[off + i] ^= (uint8_t) (1 + (next_byte() % 255));
}

static void make_bundle(const char *target_name, const char *out, const char *task, uint64_t version) {
        _cleanup_close_ int bfd = open(path_of("base"), O_RDONLY | O_CLOEXEC);
        _cleanup_close_ int tfd = open(path_of(target_name), O_RDONLY | O_CLOEXEC);
        _cleanup_(artifact_freep) Artifact *ba = NULL, *ta = NULL;
        _cleanup_(diff_freep) Diff *d = NULL;
        CreateOptions o = { .task = task, .version = version, .created = 1, .level = 3, .chunk_size = CHUNK,
                            .plain_manifest = true };      /* test_same_refusal_as_apply edits its YAML */
        TpError err = {};

        ck_assert_int_eq(artifact_open(bfd, &ba, &err), 0);
        ck_assert_int_eq(artifact_open(tfd, &ta, &err), 0);
        ck_assert_int_eq(diff_compute(&FILESET_ONE(bfd, ba->size), ba, &FILESET_ONE(tfd, ta->size), ta, &d, &err), 0);
        ck_assert_msg(bundle_create(&FILESET_ONE(bfd, ba->size), ba, &FILESET_ONE(tfd, ta->size), ta, d, &o, path_of(out), NULL, &err) == 0, "%s", err.message);
}

static void setup(void) {
        snprintf(dir, sizeof(dir), "/tmp/check-stage.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
        base = malloc(SIZE);
        task_a = malloc(SIZE);
        task_b = malloc(SIZE);
        for (size_t i = 0; i < SIZE; i++)
                base[i] = next_byte();
        memcpy(task_a, base, SIZE);
        memcpy(task_b, base, SIZE);
        change(task_a, 100000, 5000);
        change(task_a, (2u << 20) + 7, 70000);
        change(task_b, 101000, 8000);           /* overlaps A's first span */
        change(task_b, 1536u << 10, 3000);
        change(task_b, SIZE - 10, 10);          /* the short last chunk */
        write_file("base", base, SIZE);
        write_file("a", task_a, SIZE);
        write_file("b", task_b, SIZE);
        make_bundle("a", "a.tpb", "alpha", 1);
        make_bundle("b", "b.tpb", "beta", 1);
}

static void teardown(void) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        ck_assert_int_eq(system(cmd), 0);
        free(base);
        free(task_a);
        free(task_b);
}

/* What a test's slot holds: its seal, chunk table and undo record path. */
typedef struct Held {
        Seal seal;
        uint8_t *chunks;
} Held;

static void seal_base(int fd, Held *h) {
        _cleanup_(file_hash_freep) FileHash *fh = NULL;
        ck_assert_int_eq(file_hash_new(fd, SIZE, CHUNK, &fh), 0);
        while (file_hash_step(fh, 100000) > 0)
                ;
        memset(h, 0, sizeof(*h));
        file_hash_result(fh, h->seal.sha256, &h->chunks);
        h->seal.size = SIZE;
        h->seal.chunk_size = CHUNK;
        chunk_table_root(h->chunks, chunk_count(SIZE, CHUNK), h->seal.chunk_root);
        memcpy(base_root, h->seal.chunk_root, 32);
        memcpy(h->seal.base_sha256, h->seal.sha256, 32);
}

/* A slot file holding the base, open read-write, its seal and chunk table in @h. */
static int base_slot(Held *h) {
        write_file("slot", base, SIZE);
        int fd = open(path_of("slot"), O_RDWR | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        seal_base(fd, h);
        return fd;
}

static Bundle *open_bundle(const char *name) {
        Bundle *b = NULL;
        BundleTrust t = { .allow_unsigned = true };
        TpError err = {};
        ck_assert_int_eq(bundle_open(path_of(name), &b, &err), 0);
        ck_assert_int_eq(bundle_verify(b, &t, &err), 0);
        return b;
}

/* Each stage_into() runs its stager with this time cap (stager_set_time_cap()) and counts its steps;
 * it opens the source's undo record with undo_record_open_deferred() when undo_deferred is set. */
static uint64_t time_cap;
static unsigned steps;
static bool undo_deferred;

/*
 * Stage @b (NULL: the base) into @slot from @h, the target's digest @sha256 (NULL: the one-file
 * digest, the bundle's or the base's), keeping a chunk table unless @no_chunks (as the daemon in
 * full verification); returns the stager's result code, updates @h on success.
 */
static int stage_into(const FileSet *slot, Held *h, Bundle *b, const uint8_t *sha256, VerifyMode mode, bool no_chunks,
                      StageProgress *ret_p, TpError *err) {
        _cleanup_(stager_freep) Stager *st = NULL;
        _cleanup_(undo_record_freep) UndoRecord *u = NULL;
        StageTarget t = { .bundle = b, .size = SIZE, .chunk_size = no_chunks ? 0 : CHUNK };
        int r;

        if (b) {
                memcpy(t.sha256, b->manifest->target.sha256, 32);
                memcpy(t.chunk_root, b->manifest->target.chunk_root, 32);
        } else {
                memcpy(t.sha256, h->seal.base_sha256, 32);
                memcpy(t.chunk_root, base_root, 32);
        }
        if (sha256)
                memcpy(t.sha256, sha256, 32);
        if (h->seal.undo_spans)
                ck_assert_int_eq((undo_deferred ? undo_record_open_deferred : undo_record_open)(
                                         path_of("slot.undo"), h->seal.undo_spans, h->seal.undo_sha256, SIZE, &u, err),
                                 0);
        StageSource src = { .seal = &h->seal, .undo = u, .chunks = h->chunks };
        r = stager_new(slot, &src, &t, mode, path_of("slot.undo"), &st, err);
        if (r < 0)
                return r;
        stager_set_time_cap(st, time_cap);
        steps = 0;
        while ((r = stager_step(st, 100000, err)) > 0)
                steps++;
        *ret_p = *stager_progress(st);
        if (r < 0)
                return r;
        const uint8_t *chunks;
        stager_result(st, &chunks, &h->seal.undo_spans, h->seal.undo_sha256);
        ck_assert(!chunks == no_chunks);
        if (chunks)
                memcpy(h->chunks, chunks, chunk_count(SIZE, CHUNK) * 32);
        memcpy(h->seal.sha256, t.sha256, 32);
        memcpy(h->seal.chunk_root, t.chunk_root, 32);
        return 0;
}

static int stage(int fd, Held *h, Bundle *b, VerifyMode mode, StageProgress *ret_p, TpError *err) {
        return stage_into(&FILESET_ONE(fd, SIZE), h, b, NULL, mode, false, ret_p, err);
}

static void assert_slot_is(int fd, const uint8_t *want) {
        uint8_t *got = malloc(SIZE);
        ck_assert_int_eq(pread_full(fd, got, SIZE, 0), 0);
        ck_assert_msg(memcmp(got, want, SIZE) == 0, "the slot does not hold the expected bytes");
        free(got);
}

static void run_sequence(VerifyMode mode) {
        _cleanup_close_ int fd = -1;
        _cleanup_(bundle_freep) Bundle *a = open_bundle("a.tpb"), *b = open_bundle("b.tpb");
        StageProgress p;
        Held h;
        TpError err = {};

        fd = base_slot(&h);

        ck_assert_msg(stage(fd, &h, a, mode, &p, &err) == 0, "%s", err.message);
        assert_slot_is(fd, task_a);
        ck_assert_uint_eq(p.slot_bytes, a->manifest->spans[0].length + a->manifest->spans[1].length);
        /* Progress: "write" covers the pass up to the end of the last span, "verify" the rest. */
        const ManifestSpan *last = &a->manifest->spans[a->manifest->n_spans - 1];
        ck_assert_uint_le(p.write_total, p.total);
        if (mode == VERIFY_FULL)
                ck_assert_uint_eq(p.write_total, last->offset + last->length);
        else
                ck_assert_uint_lt(p.total - p.write_total, CHUNK);  /* what is left of the last chunk touched */
        ck_assert_uint_eq(p.done, p.total);

        /* Sibling switch: undo A, write B, in one pass. */
        uint64_t a_bytes = p.slot_bytes, b_bytes = 0;
        for (size_t i = 0; i < b->manifest->n_spans; i++)
                b_bytes += b->manifest->spans[i].length;
        ck_assert_msg(stage(fd, &h, b, mode, &p, &err) == 0, "%s", err.message);
        assert_slot_is(fd, task_b);
        ck_assert_uint_le(p.slot_bytes * 10, (a_bytes + b_bytes) * 11);
        if (mode == VERIFY_INCREMENTAL) {
                ck_assert(p.incremental);
                ck_assert_uint_lt(p.read_bytes, SIZE / 2);
                /* B's pieces inside a chunk went to the pipe to decode and write (span_decoder_read_ahead()). */
                ck_assert_uint_gt(p.ahead_bytes, 0);
                ck_assert_uint_lt(p.ahead_bytes, b_bytes + 1);
        } else {
                ck_assert_uint_ge(p.read_bytes, SIZE);
                ck_assert_uint_eq(p.ahead_bytes, 0);
        }

        /* Back to the base: only the undo record's bytes are written. */
        ck_assert_msg(stage(fd, &h, NULL, mode, &p, &err) == 0, "%s", err.message);
        assert_slot_is(fd, base);
        ck_assert_uint_eq(h.seal.undo_spans, 0);
        ck_assert_int_eq(access(path_of("slot.undo"), F_OK), -1);
        free(h.chunks);
}

START_TEST(test_full) {
        run_sequence(VERIFY_FULL);
}
END_TEST

START_TEST(test_incremental) {
        run_sequence(VERIFY_INCREMENTAL);
}
END_TEST

/* A time cap ends each step after its first window (1 ns has passed by then): more steps, the same bytes. */
START_TEST(test_time_cap) {
        _cleanup_close_ int fd = -1;
        _cleanup_(bundle_freep) Bundle *a = open_bundle("a.tpb");
        StageProgress p;
        Held h;
        TpError err = {};
        unsigned uncapped;

        fd = base_slot(&h);
        ck_assert_msg(stage(fd, &h, a, VERIFY_FULL, &p, &err) == 0, "%s", err.message);
        uncapped = steps;
        ck_assert_msg(stage(fd, &h, NULL, VERIFY_FULL, &p, &err) == 0, "%s", err.message);
        time_cap = 1;
        ck_assert_msg(stage(fd, &h, a, VERIFY_FULL, &p, &err) == 0, "%s", err.message);
        time_cap = 0;
        assert_slot_is(fd, task_a);
        ck_assert_msg(steps > uncapped, "%u steps with a time cap, %u without", steps, uncapped);
        free(h.chunks);
}
END_TEST

/* ---- a slot of several files: the same bytes, the set's digest ---- */

#define CUT ((1u << 20) + 4097)         /* inside a gap between spans, a read window and a chunk */

/* A slot of two files whose concatenation is @bytes, cut at CUT: the set a directory slot is. */
typedef struct TwoFiles {
        FileSetFile f[2];
        FileSet set;
} TwoFiles;

static void two_files_open(TwoFiles *t, const uint8_t *bytes) {
        t->f[0] = (FileSetFile) { .path = (char *) "model-00001-of-00002.gguf", .size = CUT };
        t->f[1] = (FileSetFile) { .path = (char *) "model-00002-of-00002.gguf", .offset = CUT, .size = SIZE - CUT };
        t->set = (FileSet) { .files = t->f, .n_files = 2, .size = SIZE, .directory = true };
        for (int i = 0; i < 2; i++) {
                write_file(t->f[i].path, bytes + t->f[i].offset, t->f[i].size);
                t->f[i].fd = open(path_of(t->f[i].path), O_RDWR | O_CLOEXEC);
                ck_assert_int_ge(t->f[i].fd, 0);
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
        uint8_t *got = malloc(SIZE);
        for (int i = 0; i < 2; i++) {
                struct stat st;
                ck_assert_int_eq(fstat(t->f[i].fd, &st), 0);
                ck_assert_uint_eq((uint64_t) st.st_size, t->f[i].size);
                ck_assert_int_eq(pread_full(t->f[i].fd, got + t->f[i].offset, t->f[i].size, 0), 0);
        }
        ck_assert_msg(memcmp(got, want, SIZE) == 0, "the slot's files do not hold the expected bytes");
        free(got);
}

static void run_two_files(VerifyMode mode, bool no_chunks) {
        _cleanup_(bundle_freep) Bundle *a = open_bundle("a.tpb"), *b = open_bundle("b.tpb");
        _cleanup_close_ int fd = -1;
        uint8_t want_a[32], want_b[32], want_base[32];
        StageProgress p;
        TwoFiles t;
        Held h;
        TpError err = {};

        /* The sealed base: its chunk table is over the space, the same as the one file's. */
        fd = base_slot(&h);
        two_files_open(&t, base);
        two_files_digest(&t, task_a, want_a);
        two_files_digest(&t, task_b, want_b);
        two_files_digest(&t, base, want_base);
        memcpy(h.seal.sha256, want_base, 32);
        ck_assert_int_ne(memcmp(want_a, a->manifest->target.sha256, 32), 0);

        ck_assert_msg(stage_into(&t.set, &h, a, want_a, mode, no_chunks, &p, &err) == 0, "%s", err.message);
        assert_files_are(&t, task_a);
        ck_assert_uint_eq(p.slot_bytes, a->manifest->spans[0].length + a->manifest->spans[1].length);
        ck_assert_uint_eq(p.done, p.total);
        ck_assert_msg(stage_into(&t.set, &h, b, want_b, mode, no_chunks, &p, &err) == 0, "%s", err.message);
        assert_files_are(&t, task_b);
        ck_assert_mem_eq(h.seal.sha256, want_b, 32);
        ck_assert_msg(stage_into(&t.set, &h, NULL, want_base, mode, no_chunks, &p, &err) == 0, "%s", err.message);
        assert_files_are(&t, base);
        ck_assert_uint_eq(h.seal.undo_spans, 0);
        two_files_close(&t);

        if (mode == VERIFY_FULL) {
                /* The one file's SHA-256 (the manifest's, for a one-file target) is not what a set is held to. */
                two_files_open(&t, base);
                ck_assert_int_eq(stage_into(&t.set, &h, a, NULL, mode, no_chunks, &p, &err), -EBADMSG);
                char hex[SHA256_HEX_SIZE], msg[256];
                sha256_to_hex(want_a, hex);
                snprintf(msg, sizeof(msg), "the staged slot's SHA-256 %s is not the target's", hex);
                ck_assert_msg(strstr(err.message, msg), "%s", err.message);
                two_files_close(&t);
        }
        free(h.chunks);
}

START_TEST(test_two_files_full) {
        run_two_files(VERIFY_FULL, false);
}
END_TEST

/* The daemon's full verification keeps no chunk table: the set's digest alone. */
START_TEST(test_two_files_full_no_chunks) {
        run_two_files(VERIFY_FULL, true);
}
END_TEST

START_TEST(test_two_files_incremental) {
        run_two_files(VERIFY_INCREMENTAL, false);
}
END_TEST

/*
 * A slot whose bytes under a span are not the base's is refused, naming the span: in incremental
 * mode too, where the span's check is deferred to the end of the pass.
 */
START_TEST(test_wrong_base_bytes) {
        _cleanup_(bundle_freep) Bundle *a = open_bundle("a.tpb");

        for (int k = 0; k < 2; k++) {
                _cleanup_close_ int fd = -1;
                StageProgress p;
                Held h;
                TpError err = {};

                fd = base_slot(&h);
                ck_assert_int_eq(pwrite_full(fd, "x", 1, 100001), 0);
                ck_assert_int_eq(stage(fd, &h, a, k ? VERIFY_INCREMENTAL : VERIFY_FULL, &p, &err), -EBADMSG);
                ck_assert_msg(strstr(err.message, "span #0") && strstr(err.message, "base bytes"), "%s", err.message);
                ck_assert(p.incremental == (k == 1));
                free(h.chunks);
        }
}
END_TEST

/*
 * A slot sealed with another chunk size (a bundle made with 1 MiB chunks, a slot sealed with 256
 * KiB, or the other way round) has no usable chunk table: the switch is verified in full, and
 * its result carries the target's table.
 */
START_TEST(test_other_chunk_size_full) {
        _cleanup_close_ int fd = -1;
        _cleanup_(bundle_freep) Bundle *a = open_bundle("a.tpb");
        StageProgress p;
        Held h;
        TpError err = {};

        fd = base_slot(&h);
        h.seal.chunk_size = 4 * CHUNK;
        ck_assert_msg(stage(fd, &h, a, VERIFY_INCREMENTAL, &p, &err) == 0, "%s", err.message);
        ck_assert(!p.incremental);
        ck_assert_uint_eq(p.total, SIZE);
        assert_slot_is(fd, task_a);
        free(h.chunks);
}
END_TEST

/* Outside the spans, full verification catches a flipped byte that incremental mode never reads. */
START_TEST(test_full_catches_outside_damage) {
        _cleanup_close_ int fd = -1;
        _cleanup_(bundle_freep) Bundle *a = open_bundle("a.tpb");
        StageProgress p;
        Held h;
        TpError err = {};

        fd = base_slot(&h);
        ck_assert_int_eq(pwrite_full(fd, "x", 1, 3000000), 0);
        ck_assert_int_eq(stage(fd, &h, a, VERIFY_FULL, &p, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "SHA-256"), "%s", err.message);
        free(h.chunks);
}
END_TEST

/* A damaged undo record is refused before it is used. */
START_TEST(test_damaged_undo) {
        _cleanup_close_ int fd = -1;
        _cleanup_(bundle_freep) Bundle *a = open_bundle("a.tpb");
        _cleanup_(undo_record_freep) UndoRecord *u = NULL;
        StageProgress p;
        Held h;
        TpError err = {};

        fd = base_slot(&h);
        ck_assert_msg(stage(fd, &h, a, VERIFY_FULL, &p, &err) == 0, "%s", err.message);
        _cleanup_close_ int ufd = open(path_of("slot.undo"), O_RDWR | O_CLOEXEC);
        ck_assert_int_eq(pwrite_full(ufd, "\xff", 1, 100), 0);
        ck_assert_int_eq(undo_record_open(path_of("slot.undo"), h.seal.undo_spans, h.seal.undo_sha256, SIZE, &u, &err),
                         -EBADMSG);
        ck_assert_msg(strstr(err.message, "damaged"), "%s", err.message);
        free(h.chunks);
}
END_TEST

/*
 * A damaged undo record whose check is deferred (undo_record_open_deferred(), as the daemon stages
 * in place): the pass reads it and fails on whatever it meets first (the restored bytes' digest, or
 * the base bytes of B's span that overlaps A's), and the record's damage is what the stager
 * reports, not a target mismatch. Loop: {full, incremental} x the damaged byte at slot offset
 * 100,500 (restored only), 102,000 (under B's span: B's base), 2 MiB + 1000 (A's second span,
 * restored only), or the record's table: its first span moved 64 bytes down (still a sound table,
 * so only the pass can tell).
 */
START_TEST(test_damaged_undo_deferred) {
        static const uint64_t at[] = { 100500, 102000, (2u << 20) + 1000, UINT64_MAX };
        VerifyMode mode = _i % 2 ? VERIFY_INCREMENTAL : VERIFY_FULL;
        _cleanup_close_ int fd = -1;
        _cleanup_(bundle_freep) Bundle *a = open_bundle("a.tpb"), *b = open_bundle("b.tpb");
        StageProgress p;
        Held h;
        TpError err = {};

        fd = base_slot(&h);
        ck_assert_msg(stage(fd, &h, a, mode, &p, &err) == 0, "%s", err.message);

        /* The record's byte for slot offset at[]: found through its own span table. */
        uint64_t pos = at[_i / 2], in_record = 0;
        {
                _cleanup_(undo_record_freep) UndoRecord *u = NULL;
                ck_assert_int_eq(undo_record_open(path_of("slot.undo"), h.seal.undo_spans, h.seal.undo_sha256, SIZE,
                                                  &u, &err), 0);
                for (uint64_t i = 0; i < u->n; i++)
                        if (pos >= u->spans[i].offset && pos < u->spans[i].offset + u->spans[i].length)
                                in_record = u->spans[i].data_offset + (pos - u->spans[i].offset);
                ck_assert_uint_ge(u->spans[0].offset, 64);
        }
        _cleanup_close_ int ufd = open(path_of("slot.undo"), O_RDWR | O_CLOEXEC);
        if (pos == UINT64_MAX) {        /* TPUNDO1: 16 bytes of head, then offset and length per span */
                uint64_t le;
                ck_assert_int_eq(pread_full(ufd, &le, 8, 16), 0);
                le = htole64(le64toh(le) - 64);
                ck_assert_int_eq(pwrite_full(ufd, &le, 8, 16), 0);
        } else {
                uint8_t x;
                ck_assert_uint_gt(in_record, 0);
                ck_assert_int_eq(pread_full(ufd, &x, 1, in_record), 0);
                x ^= 0x5a;
                ck_assert_int_eq(pwrite_full(ufd, &x, 1, in_record), 0);
        }

        undo_deferred = true;
        ck_assert_int_eq(stage(fd, &h, b, mode, &p, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "slot.undo: damaged"), "%s", err.message);
        ck_assert(p.source_damaged);
        ck_assert(!p.target_mismatch);
        free(h.chunks);
}
END_TEST

/*
 * A slot that refuses writes (open read-only): the first write into it fails the pass with the
 * same words in both modes, though in incremental mode the pipe did the writes of B's pieces
 * (span_decoder_read_ahead()) and their failure shows once the pass looks at them.
 */
START_TEST(test_write_refused) {
        VerifyMode mode = _i ? VERIFY_INCREMENTAL : VERIFY_FULL;
        _cleanup_(bundle_freep) Bundle *b = open_bundle("b.tpb");
        StageProgress p;
        Held h;
        TpError err = {};

        close(base_slot(&h));
        _cleanup_close_ int fd = open(path_of("slot"), O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(stage(fd, &h, b, mode, &p, &err), -EBADF);
        char want[96];
        snprintf(want, sizeof(want), "slot: writing at offset %" PRIu64 ": Bad file descriptor",
                 b->manifest->spans[0].offset);
        ck_assert_str_eq(err.message, want);
        ck_assert(mode == VERIFY_FULL || p.ahead_bytes > 0);
        free(h.chunks);
}
END_TEST

/* A sound record opened deferred stages as one checked up front does (the sequence, both modes). */
START_TEST(test_undo_deferred_sequence) {
        undo_deferred = true;
        run_sequence(_i ? VERIFY_INCREMENTAL : VERIFY_FULL);
}
END_TEST

/* ---- apply and the stager share one span decoder: the same damage, the same words ---- */

static uint8_t *read_all(const char *name, size_t *ret_n) {
        _cleanup_close_ int fd = open(path_of(name), O_RDONLY | O_CLOEXEC);
        struct stat st;
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(fstat(fd, &st), 0);
        uint8_t *p = malloc((size_t) st.st_size);
        ck_assert_int_eq(pread_full(fd, p, (size_t) st.st_size, 0), 0);
        *ret_n = (size_t) st.st_size;
        return p;
}

/*
 * `taskpatch apply` of "bad.tpb" to a base holding @bytes, and the stager (full, then
 * incremental verification) staging it into a slot holding @bytes: all three refuse it with
 * the same message, which must contain @want.
 */
static void same_refusal(const uint8_t *bytes, const char *want) {
        char msg[3][TP_ERROR_MAX];

        write_file("damaged-base", bytes, SIZE);
        {
                _cleanup_(bundle_freep) Bundle *b = open_bundle("bad.tpb");
                _cleanup_close_ int fd = open(path_of("damaged-base"), O_RDONLY | O_CLOEXEC);
                TpError err = {};
                ck_assert_int_eq(bundle_apply(b, &FILESET_ONE(fd, SIZE), path_of("damaged-base"), path_of("out"), false,
                                              NULL, &err),
                                 -EBADMSG);
                ck_assert_int_eq(access(path_of("out"), F_OK), -1);
                snprintf(msg[0], sizeof(msg[0]), "%s", err.message);
        }
        for (int k = 1; k <= 2; k++) {
                _cleanup_(bundle_freep) Bundle *b = open_bundle("bad.tpb");
                _cleanup_close_ int fd = -1;
                StageProgress p;
                Held h;
                TpError err = {};

                write_file("slot", bytes, SIZE);
                fd = open(path_of("slot"), O_RDWR | O_CLOEXEC);
                seal_base(fd, &h);
                ck_assert_int_eq(stage(fd, &h, b, k == 1 ? VERIFY_FULL : VERIFY_INCREMENTAL, &p, &err), -EBADMSG);
                snprintf(msg[k], sizeof(msg[k]), "%s", err.message);
                free(h.chunks);
        }
        ck_assert_msg(strstr(msg[0], want), "wanted \"%s\" in: %s", want, msg[0]);
        ck_assert_str_eq(msg[1], msg[0]);
        ck_assert_str_eq(msg[2], msg[0]);
}

START_TEST(test_same_refusal_as_apply) {
        _cleanup_(bundle_freep) Bundle *a = open_bundle("a.tpb");
        const ManifestSpan *s0 = &a->manifest->spans[0];
        char prefix[256], hexd[SHA256_HEX_SIZE];
        uint8_t *damaged = malloc(SIZE);
        size_t n;
        uint8_t *f = read_all("a.tpb", &n);

        snprintf(prefix, sizeof(prefix), "%s: span #0 (offset %" PRIu64 ", %" PRIu64 " bytes%s%s): ", path_of("bad.tpb"),
                 s0->offset, s0->length, s0->site ? ", site " : "", s0->site ? s0->site : "");

        /* The manifest's new-bytes hash of span #0 edited (an unsigned bundle: nothing else notices). */
        sha256_to_hex(s0->new_sha256, hexd);
        uint8_t *at = memmem(f, n, hexd, 64);
        ck_assert_ptr_nonnull(at);
        at[10] = at[10] == '0' ? '1' : '0';
        write_file("bad.tpb", f, n);
        char want[512];
        snprintf(want, sizeof(want), "%sthe new bytes' SHA-256 is %s, the manifest says ", prefix, hexd);
        same_refusal(base, want);
        at[10] = hexd[10];

        /* The base bytes under span #0 are not the base's. */
        write_file("bad.tpb", f, n);
        memcpy(damaged, base, SIZE);
        damaged[s0->offset + 3] ^= 0x20;
        snprintf(want, sizeof(want), "%sthe base bytes' SHA-256 is ", prefix);
        same_refusal(damaged, want);

        /* A flipped payload byte in the middle of span #0's frame. */
        f[a->payload_offset + s0->frame_offset + s0->frame_size / 2] ^= 0x04;
        write_file("bad.tpb", f, n);
        same_refusal(base, prefix);

        free(f);
        free(damaged);
}
END_TEST

START_TEST(test_seal_round_trip) {
        Seal s = { .dirty = true, .version = 7, .size = 5, .chunk_size = CHUNK, .undo_spans = 3, .dev = 1, .ino = 2,
                   .mtime_ns = 1234567890123 }, t;
        TpError err = {};
        uint64_t bytes;
        struct stat st = { .st_dev = 1, .st_ino = 2, .st_size = 5 };

        strcpy(s.task, "json");
        s.sha256[0] = 0xab;
        ck_assert_int_eq(seal_save(path_of("x.seal"), &s, &bytes, &err), 0);
        ck_assert_uint_gt(bytes, 100);
        ck_assert_int_eq(seal_load(path_of("x.seal"), &t, &err), 0);
        ck_assert_mem_eq(&s, &t, sizeof(s));
        st.st_mtim.tv_sec = 1;
        st.st_mtim.tv_nsec = 234567890123 % 1000000000;
        ck_assert(!seal_identity_matches(&s, &st));
        seal_set_identity(&s, &st);
        ck_assert(seal_identity_matches(&s, &st));
        /* Inode numbers past 2^63 and times before 1970 come back as they went in. */
        s.ino = UINT64_MAX - 5;
        s.mtime_ns = -1000;
        ck_assert_int_eq(seal_save(path_of("x.seal"), &s, &bytes, &err), 0);
        ck_assert_int_eq(seal_load(path_of("x.seal"), &t, &err), 0);
        ck_assert_mem_eq(&s, &t, sizeof(s));
        write_file("bad.seal", (const uint8_t *) "{\"format\": 1}", 13);
        ck_assert_int_eq(seal_load(path_of("bad.seal"), &t, &err), -EBADMSG);
        ck_assert_int_eq(seal_load(path_of("none.seal"), &t, &err), -ENOENT);
}
END_TEST

/* Copy and hash in slices give what one pass gives. */
START_TEST(test_filejob) {
        _cleanup_close_ int src = open(path_of("a"), O_RDONLY | O_CLOEXEC);
        _cleanup_close_ int dst = open(path_of("copy"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        _cleanup_(file_hash_freep) FileHash *fh = NULL;
        FileCopy c;
        uint8_t d[32], want[32];
        int r;

        file_copy_init(&c, src, dst, SIZE);
        while ((r = file_copy_step(&c, 300000)) > 0)
                ;
        ck_assert_int_eq(r, 0);
        ck_assert_int_eq(file_hash_new(dst, SIZE, 0, &fh), 0);
        while ((r = file_hash_step(fh, 77777)) > 0)
                ;
        ck_assert_int_eq(r, 0);
        file_hash_result(fh, d, NULL);
        sha256_digest(task_a, SIZE, want);
        ck_assert_mem_eq(d, want, 32);
}
END_TEST

static Suite *stage_suite(void) {
        Suite *s = suite_create("stage");
        TCase *tc = tcase_create("stage");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_full);
        tcase_add_test(tc, test_incremental);
        tcase_add_test(tc, test_time_cap);
        tcase_add_test(tc, test_two_files_full);
        tcase_add_test(tc, test_two_files_full_no_chunks);
        tcase_add_test(tc, test_two_files_incremental);
        tcase_add_test(tc, test_wrong_base_bytes);
        tcase_add_test(tc, test_other_chunk_size_full);
        tcase_add_test(tc, test_full_catches_outside_damage);
        tcase_add_test(tc, test_damaged_undo);
        tcase_add_loop_test(tc, test_damaged_undo_deferred, 0, 8);
        tcase_add_loop_test(tc, test_undo_deferred_sequence, 0, 2);
        tcase_add_loop_test(tc, test_write_refused, 0, 2);
        tcase_add_test(tc, test_same_refusal_as_apply);
        tcase_add_test(tc, test_seal_round_trip);
        tcase_add_test(tc, test_filejob);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(stage_suite)
