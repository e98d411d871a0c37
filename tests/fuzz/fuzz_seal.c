/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the slot records the daemon reads back from its
 * state directory (common/device/slot.c): seal_load() and undo_record_open(). They
 * take paths, so the input goes into a memfd opened as /proc/self/fd/N.
 *
 * The same input is tried as both. As a seal: a failure must carry a
 * message and leave *ret alone; a loaded seal must be one seal_save() could
 * have written, and save and load back to the same values. As an undo
 * record: the fuzzer cannot forge a SHA-256, so an input that does not end
 * in the digest of what precedes it gets that digest appended, and the
 * "seal" it is checked against is made up from the input: n from its
 * header, file_size where its furthest span ends (and one byte less, which
 * no record may fit). A record that opens must describe exactly its bytes,
 * and undo_writer must write it back byte for byte. Relocated records
 * (TPUNDO2) alike: file_size where the furthest slot range ends; an open
 * one must tile its base, and its stored entries hold exactly its bytes.
 */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "fuzz-input.h"
#include "slot.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- seals ---- */

static bool seal_equal(const Seal *a, const Seal *b) {
        return a->dirty == b->dirty && strcmp(a->task, b->task) == 0 && a->version == b->version &&
               memcmp(a->sites_fingerprint, b->sites_fingerprint, SHA256_DIGEST_SIZE) == 0 &&
               memcmp(a->sha256, b->sha256, SHA256_DIGEST_SIZE) == 0 && a->size == b->size &&
               a->chunk_size == b->chunk_size && memcmp(a->chunk_root, b->chunk_root, SHA256_DIGEST_SIZE) == 0 &&
               memcmp(a->base_sha256, b->base_sha256, SHA256_DIGEST_SIZE) == 0 &&
               memcmp(a->base_layout, b->base_layout, SHA256_DIGEST_SIZE) == 0 && a->undo_spans == b->undo_spans &&
               memcmp(a->undo_sha256, b->undo_sha256, SHA256_DIGEST_SIZE) == 0 && a->relocated == b->relocated &&
               a->dev == b->dev &&
               a->ino == b->ino && a->mtime_ns == b->mtime_ns;
}

static void fuzz_seal(const char *path) {
        Seal s, before, again;
        TpError err = {};
        char buf[128];
        uint64_t bytes = 0;
        int r;

        memset(&s, 0xa5, sizeof(s));
        memcpy(&before, &s, sizeof(s));
        r = seal_load(path, &s, &err);
        if (r < 0) {
                if (r != -EBADMSG || !err.message[0] || err.code != r || memcmp(&s, &before, sizeof(s)) != 0)
                        abort();
                return;
        }
        if (r != 0 || memchr(s.task, '\0', sizeof(s.task)) == NULL || (s.task[0] && !task_name_valid(s.task)))
                abort();
        if (s.chunk_size && (s.chunk_size < CHUNK_MIN_SIZE || chunk_count(s.size, s.chunk_size) > CHUNK_MAX_ENTRIES))
                abort();
        if (s.version > INT64_MAX || s.size > INT64_MAX || s.undo_spans > INT64_MAX)
                abort();

        fuzz_scratch_path("fuzz-seal", "slot.seal", buf);
        if (seal_save(buf, &s, &bytes, &err) < 0 || bytes == 0 || bytes > SEAL_MAX_BYTES)
                abort();
        memset(&again, 0x5a, sizeof(again));
        if (seal_load(buf, &again, &err) < 0 || !seal_equal(&s, &again))
                abort();
        if (unlink(buf) < 0)
                abort();
}

/* ---- undo records ---- */

static uint64_t le64(const uint8_t *p) {
        uint64_t v = 0;
        for (unsigned i = 0; i < 8; i++)
                v |= (uint64_t) p[i] << (8 * i);
        return v;
}

/*
 * The end of the furthest span in the record's table (as far as @body holds one), saturated:
 * a TPUNDO1 span's (offset, length), a TPUNDO2 entry's (slot offset, length) unless stored.
 */
static uint64_t spans_end(const uint8_t *body, size_t len, uint64_t n, bool relocated) {
        uint64_t head = relocated ? 24 : 16, entry = relocated ? 24 : 16, end = 0;

        for (uint64_t i = 0; i < n && head + entry * (i + 1) <= len; i++) {
                const uint8_t *e = body + head + entry * i;
                uint64_t at = relocated ? le64(e + 16) : le64(e), x;
                if (relocated && at == UNDO_STORED)
                        continue;
                if (__builtin_add_overflow(at, le64(e + 8), &x))
                        x = UINT64_MAX;
                if (x > end)
                        end = x;
        }
        return end;
}

/* Write the opened record back with undo_writer: the same spans and stored bytes must give the same file. */
static void rewrite_undo(const UndoRecord *u, const uint8_t digest[SHA256_DIGEST_SIZE], uint64_t record_size) {
        uint8_t chunk[4096], d[SHA256_DIGEST_SIZE];
        UndoWriter *w = NULL;
        TpError err = {};
        char buf[128];
        uint64_t bytes = 0;

        fuzz_scratch_path("fuzz-seal", "slot.undo", buf);
        if ((u->relocated ? undo_writer_new_relocated(buf, u->spans, u->n, u->base_size, &w, &err)
                          : undo_writer_new(buf, u->spans, u->n, &w, &err)) < 0)
                abort();
        for (uint64_t i = 0; i < u->n; i++)
                for (uint64_t done = 0; u->spans[i].slot_offset == UNDO_STORED && done < u->spans[i].length;) {
                        size_t k = u->spans[i].length - done < sizeof(chunk) ? (size_t) (u->spans[i].length - done)
                                                                            : sizeof(chunk);
                        if (pread_full(u->fd, chunk, k, u->spans[i].data_offset + done) < 0 ||
                            undo_writer_append(w, chunk, k, &err) < 0)
                                abort();
                        done += k;
                }
        if (undo_writer_commit(w, d, &bytes, &err) < 0 || bytes != record_size ||
            memcmp(d, digest, SHA256_DIGEST_SIZE) != 0)
                abort();
        undo_writer_free(w);
        if (unlink(buf) < 0)
                abort();
}

/* A relocated record that opened: its entries tile the base, and its stored bytes are all it holds. */
static void check_relocated(const UndoRecord *u, const uint8_t *data, size_t body, uint64_t file_size,
                            const uint8_t digest[SHA256_DIGEST_SIZE]) {
        uint64_t pos = 0, expect = 24 + 24 * u->n;

        if (!u->relocated || u->base_size != le64(data + 16) || body < expect)
                abort();
        for (uint64_t i = 0; i < u->n; i++) {
                const UndoSpan *e = &u->spans[i];
                if (e->offset != pos || e->length == 0 || e->offset != le64(data + 24 + 24 * i) ||
                    e->length != le64(data + 32 + 24 * i) || e->slot_offset != le64(data + 40 + 24 * i))
                        abort();
                if (e->slot_offset == UNDO_STORED) {
                        if (e->data_offset != expect)
                                abort();
                        expect += e->length;
                } else if (e->slot_offset > file_size || e->length > file_size - e->slot_offset)
                        abort();
                pos += e->length;
        }
        if (pos != u->base_size || expect != body)
                abort();
        rewrite_undo(u, digest, (uint64_t) body + SHA256_DIGEST_SIZE);
}

static void fuzz_undo(int fd, const char *path, const uint8_t *data, size_t size) {
        uint8_t digest[SHA256_DIGEST_SIZE];
        size_t body = size;
        UndoRecord *u = NULL;
        TpError err = {};
        uint64_t n, file_size, expect;
        int r;

        /* A record that already ends in its own digest (a real one) is taken as it is. */
        if (size >= SHA256_DIGEST_SIZE) {
                sha256_digest(data, size - SHA256_DIGEST_SIZE, digest);
                if (memcmp(digest, data + size - SHA256_DIGEST_SIZE, SHA256_DIGEST_SIZE) == 0)
                        body = size - SHA256_DIGEST_SIZE;
        }
        if (body == size) {
                sha256_digest(data, size, digest);
                if (pwrite(fd, digest, sizeof(digest), (off_t) size) != (ssize_t) sizeof(digest))
                        abort();
        }
        n = body >= 16 ? le64(data + 8) : 0;
        bool relocated = body >= 8 && memcmp(data, UNDO_MAGIC_RELOCATED, 8) == 0;
        file_size = spans_end(data, body, n, relocated);

        /* One byte short of where the furthest span ends, no record fits. */
        if (file_size > 0) {
                r = undo_record_open(path, n, digest, file_size - 1, &u, &err);
                if (r != -EBADMSG || !err.message[0] || err.code != r || u)
                        abort();
        }
        r = undo_record_open(path, n, digest, file_size, &u, &err);
        if (r < 0) {
                if (r != -EBADMSG || !err.message[0] || err.code != r || u)
                        abort();
                return;
        }
        if (relocated) {
                if (r != 0 || !u || u->fd < 0 || u->n != n || (n && !u->spans))
                        abort();
                check_relocated(u, data, body, file_size, digest);
                undo_record_free(u);
                return;
        }
        if (r != 0 || !u || u->fd < 0 || u->n != n || (n && !u->spans) || body < 16 + 16 * n ||
            memcmp(data, UNDO_MAGIC, 8) != 0)
                abort();
        expect = 16 + 16 * n;
        for (uint64_t i = 0; i < n; i++) {
                const UndoSpan *s = &u->spans[i];
                if (s->offset != le64(data + 16 + 16 * i) || s->length != le64(data + 24 + 16 * i) || s->length == 0 ||
                    s->offset > file_size || s->length > file_size - s->offset || s->data_offset != expect ||
                    (i > 0 && s->offset < u->spans[i - 1].offset + u->spans[i - 1].length))
                        abort();
                expect += s->length;
        }
        if (expect != body)
                abort();
        rewrite_undo(u, digest, (uint64_t) body + SHA256_DIGEST_SIZE);
        undo_record_free(u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        int fd = fuzz_input_fd(data, size, 0);
        char path[64];

        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        fuzz_seal(path);
        fuzz_undo(fd, path, data, size);
        return 0;
}
