/* SPDX-License-Identifier: MIT */

#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <string.h>

#include "fileio.h"
#include "jsonline.h"
#include "slot.h"
#include "yaml-doc.h"

static const char *const slot_names[_SLOT_ID_MAX] = { [SLOT_A] = "a", [SLOT_B] = "b" };

const char *slot_id_to_string(SlotId s) {
        return s >= 0 && s < _SLOT_ID_MAX ? slot_names[s] : NULL;
}

SlotId slot_id_from_string(const char *s) {
        for (SlotId i = 0; i < _SLOT_ID_MAX; i++)
                if (s && strcmp(s, slot_names[i]) == 0)
                        return i;
        return _SLOT_ID_INVALID;
}

/* ---- seals ---- */

#define SEAL_FORMAT 1

int seal_save(const char *path, const Seal *s, uint64_t *ret_bytes, TpError *err) {
        json_t *o = json_pack("{s:i, s:b, s:o, s:I, s:o, s:o, s:I, s:I, s:o, s:{s:o, s:o}, s:{s:I, s:o}, s:{s:I, s:I, s:I}}",
                              "format", SEAL_FORMAT, "dirty", s->dirty,
                              "task", s->task[0] ? json_string(s->task) : json_null(),
                              "version", (json_int_t) s->version,
                              "sites_fingerprint", json_sha256(s->sites_fingerprint), "sha256", json_sha256(s->sha256),
                              "size", (json_int_t) s->size, "chunk_size", (json_int_t) s->chunk_size,
                              "chunk_root", json_sha256(s->chunk_root),
                              "base", "sha256", json_sha256(s->base_sha256), "layout", json_sha256(s->base_layout),
                              "undo", "spans", (json_int_t) s->undo_spans, "sha256", json_sha256(s->undo_sha256),
                              "file", "dev", (json_int_t) s->dev, "ino", (json_int_t) s->ino,
                              "mtime_ns", (json_int_t) s->mtime_ns);
        if (!o)
                return -ENOMEM;
        /* Only a relocated slot says so: seals of in-layout slots read the same by older daemons. */
        if (s->relocated && json_object_set_new(o, "relocated", json_true()) < 0) {
                json_decref(o);
                return -ENOMEM;
        }
        /* Only a directory slot has files: a one-file slot's seal is as it always was. */
        if (s->n_files && json_object_set_new(o, "files", json_pack("{s:I, s:o}", "count", (json_int_t) s->n_files,
                                                                    "identity", json_sha256(s->files_identity))) < 0) {
                json_decref(o);
                return -ENOMEM;
        }
        return json_save_atomic(path, o, JSON_INDENT(2) | JSON_SORT_KEYS, ret_bytes, err);
}

static int get_digest(json_t *o, const char *key, const char *path, uint8_t ret[SHA256_DIGEST_SIZE], TpError *err) {
        const char *s = json_string_value(json_object_get(o, key));
        if (!s || parse_sha256_hex(s, ret) < 0)
                return tp_error(err, -EBADMSG, "%s: '%s': expected a SHA-256 in hex", path, key);
        return 0;
}

static int get_u64(json_t *o, const char *key, const char *path, uint64_t *ret, TpError *err) {
        json_t *v = json_object_get(o, key);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
                return tp_error(err, -EBADMSG, "%s: '%s': expected an unsigned integer", path, key);
        *ret = (uint64_t) json_integer_value(v);
        return 0;
}

/* dev, ino and mtime are stored as jansson's signed integers: read the 64 bits back as they were. */
static int get_bits64(json_t *o, const char *key, const char *path, uint64_t *ret, TpError *err) {
        json_t *v = json_object_get(o, key);
        if (!json_is_integer(v))
                return tp_error(err, -EBADMSG, "%s: '%s': expected an integer", path, key);
        *ret = (uint64_t) json_integer_value(v);
        return 0;
}

int seal_load(const char *path, Seal *ret, TpError *err) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        char buf[SEAL_MAX_BYTES + 1];   /* one more, to tell a file at the cap from one over it */
        json_error_t je;
        Seal s = { 0 };
        uint64_t format = 0, mtime = 0;
        ssize_t n;
        int r;

        if (fd < 0)
                return tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
        n = read(fd, buf, sizeof(buf));
        if (n < 0)
                return tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
        if ((size_t) n > SEAL_MAX_BYTES)
                return tp_error(err, -EBADMSG, "%s: larger than the %u-byte cap of a seal", path, SEAL_MAX_BYTES);

        json_t *o = json_loadb(buf, (size_t) n, JSON_REJECT_DUPLICATES, &je);
        if (!o)
                return tp_error(err, -EBADMSG, "%s: line %d: %s", path, je.line, je.text);
        json_t *task = json_object_get(o, "task"), *base = json_object_get(o, "base"),
               *undo = json_object_get(o, "undo"), *file = json_object_get(o, "file");
        if ((r = get_u64(o, "format", path, &format, err)) < 0)
                goto out;
        if (format != SEAL_FORMAT) {
                r = tp_error(err, -EBADMSG, "%s: format %" PRIu64 ", this daemon reads format %d", path, format,
                             SEAL_FORMAT);
                goto out;
        }
        if (!json_is_boolean(json_object_get(o, "dirty")) || !json_is_object(base) || !json_is_object(undo) ||
            !json_is_object(file) || !(json_is_null(task) || json_is_string(task))) {
                r = tp_error(err, -EBADMSG, "%s: not a seal (dirty, task, base, undo or file missing)", path);
                goto out;
        }
        s.dirty = json_is_true(json_object_get(o, "dirty"));
        json_t *relocated = json_object_get(o, "relocated");
        if (relocated && !json_is_boolean(relocated)) {
                r = tp_error(err, -EBADMSG, "%s: 'relocated': expected true or false", path);
                goto out;
        }
        s.relocated = json_is_true(relocated);
        json_t *files = json_object_get(o, "files");
        if (files) {
                uint64_t count = 0;
                if (!json_is_object(files) || (r = get_u64(files, "count", path, &count, err)) < 0 ||
                    (r = get_digest(files, "identity", path, s.files_identity, err)) < 0) {
                        r = r < 0 ? r : tp_error(err, -EBADMSG, "%s: 'files': expected count and identity", path);
                        goto out;
                }
                if (count == 0 || count > FILESET_MAX_FILES) {
                        r = tp_error(err, -EBADMSG, "%s: 'files': %" PRIu64 " files, expected 1 to %u", path, count,
                                     FILESET_MAX_FILES);
                        goto out;
                }
                s.n_files = (uint32_t) count;
        }
        if (json_is_string(task)) {
                if (!task_name_valid(json_string_value(task))) {
                        r = tp_error(err, -EBADMSG, "%s: 'task': not a valid task name", path);
                        goto out;
                }
                strncpy(s.task, json_string_value(task), TASK_NAME_MAX);
        }
        if ((r = get_u64(o, "version", path, &s.version, err)) < 0 ||
            (r = get_digest(o, "sites_fingerprint", path, s.sites_fingerprint, err)) < 0 ||
            (r = get_digest(o, "sha256", path, s.sha256, err)) < 0 ||
            (r = get_u64(o, "size", path, &s.size, err)) < 0 ||
            (r = get_u64(o, "chunk_size", path, &s.chunk_size, err)) < 0 ||
            (r = get_digest(o, "chunk_root", path, s.chunk_root, err)) < 0 ||
            (r = get_digest(base, "sha256", path, s.base_sha256, err)) < 0 ||
            (r = get_digest(base, "layout", path, s.base_layout, err)) < 0 ||
            (r = get_u64(undo, "spans", path, &s.undo_spans, err)) < 0 ||
            (r = get_digest(undo, "sha256", path, s.undo_sha256, err)) < 0 ||
            (r = get_bits64(file, "dev", path, &s.dev, err)) < 0 || (r = get_bits64(file, "ino", path, &s.ino, err)) < 0 ||
            (r = get_bits64(file, "mtime_ns", path, &mtime, err)) < 0)
                goto out;
        if (s.chunk_size != 0 && s.chunk_size < CHUNK_MIN_SIZE) {
                r = tp_error(err, -EBADMSG, "%s: chunk_size %" PRIu64 " is below the minimum of %u", path,
                             s.chunk_size, CHUNK_MIN_SIZE);
                goto out;
        }
        if (s.chunk_size != 0 && chunk_count(s.size, s.chunk_size) > CHUNK_MAX_ENTRIES) {
                r = tp_error(err, -EBADMSG, "%s: %" PRIu64 " bytes in chunks of %" PRIu64 " make %" PRIu64
                             " chunks, more than the cap of %u", path, s.size, s.chunk_size,
                             chunk_count(s.size, s.chunk_size), CHUNK_MAX_ENTRIES);
                goto out;
        }
        s.mtime_ns = (int64_t) mtime;
        *ret = s;
        r = 0;
out:
        json_decref(o);
        return r;
}

void seal_set_identity(Seal *s, const struct stat *st) {
        s->dev = (uint64_t) st->st_dev;
        s->ino = (uint64_t) st->st_ino;
        s->size = (uint64_t) st->st_size;
        s->mtime_ns = (int64_t) st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

bool seal_identity_matches(const Seal *s, const struct stat *st) {
        return s->dev == (uint64_t) st->st_dev && s->ino == (uint64_t) st->st_ino &&
               s->size == (uint64_t) st->st_size &&
               s->mtime_ns == (int64_t) st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static void hash_le64(Sha256 *h, uint64_t v) {
        uint8_t b[8];
        for (unsigned i = 0; i < 8; i++)
                b[i] = (uint8_t) (v >> (8 * i));
        sha256_update(h, b, sizeof(b));
}

/* The identity digest of a directory slot's files as they are now. */
static int files_identity(const struct stat *dir_st, const FileSet *set, uint8_t ret[SHA256_DIGEST_SIZE]) {
        static const char tag[] = "taskpatch-slot-identity-v1";
        Sha256 h;

        sha256_init(&h);
        sha256_update(&h, tag, sizeof(tag));
        hash_le64(&h, (uint64_t) dir_st->st_dev);
        hash_le64(&h, (uint64_t) dir_st->st_ino);
        for (size_t i = 0; i < set->n_files; i++) {
                struct stat st;
                if (fstat(set->files[i].fd, &st) < 0)
                        return negative_errno();
                sha256_update(&h, set->files[i].path, strlen(set->files[i].path) + 1);
                hash_le64(&h, (uint64_t) st.st_size);
                hash_le64(&h, (uint64_t) st.st_dev);
                hash_le64(&h, (uint64_t) st.st_ino);
                hash_le64(&h, (uint64_t) st.st_mtim.tv_sec * 1000000000 + (uint64_t) st.st_mtim.tv_nsec);
        }
        sha256_final(&h, ret);
        return 0;
}

int seal_set_identity_files(Seal *s, const struct stat *dir_st, const FileSet *set) {
        int r = files_identity(dir_st, set, s->files_identity);
        if (r < 0)
                return r;
        seal_set_identity(s, dir_st);
        s->size = set->size;
        s->n_files = (uint32_t) set->n_files;
        return 0;
}

bool seal_identity_matches_files(const Seal *s, const struct stat *dir_st, const FileSet *set) {
        uint8_t d[SHA256_DIGEST_SIZE];
        return s->n_files == set->n_files && s->size == set->size && s->dev == (uint64_t) dir_st->st_dev &&
               s->ino == (uint64_t) dir_st->st_ino && files_identity(dir_st, set, d) == 0 &&
               memcmp(d, s->files_identity, SHA256_DIGEST_SIZE) == 0;
}

/* ---- chunk tables ---- */

void chunk_table_root(const uint8_t *table, uint64_t n, uint8_t ret[SHA256_DIGEST_SIZE]) {
        sha256_digest(table, (size_t) n * SHA256_DIGEST_SIZE, ret);
}

int chunk_table_load(const char *path, uint64_t size, uint64_t chunk_size, const uint8_t root[SHA256_DIGEST_SIZE],
                     uint8_t **ret_table, TpError *err) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        _cleanup_free_ uint8_t *t = NULL;
        uint64_t n = chunk_size ? chunk_count(size, chunk_size) : 0;
        uint8_t d[SHA256_DIGEST_SIZE];
        struct stat st;
        int r;

        if (fd < 0)
                return tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
        if (chunk_size == 0)
                return tp_error(err, -EINVAL, "%s: no chunk table for chunk size 0", path);
        if (n > CHUNK_MAX_ENTRIES)
                return tp_error(err, -EINVAL, "%s: %" PRIu64 " chunks of %" PRIu64 " bytes, more than the cap of %u",
                                path, n, chunk_size, CHUNK_MAX_ENTRIES);
        if (fstat(fd, &st) < 0)
                return tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
        if ((uint64_t) st.st_size != n * SHA256_DIGEST_SIZE)
                return tp_error(err, -EBADMSG, "%s: %jd bytes, expected %" PRIu64 " chunk digests", path,
                                (intmax_t) st.st_size, n);
        t = malloc(n * SHA256_DIGEST_SIZE + 1);
        if (!t)
                return -ENOMEM;
        r = pread_full(fd, t, n * SHA256_DIGEST_SIZE, 0);
        if (r < 0)
                return tp_error(err, r == -ENODATA ? -EBADMSG : r, "%s: %s", path, strerror(-r));
        chunk_table_root(t, n, d);
        if (memcmp(d, root, SHA256_DIGEST_SIZE) != 0)
                return tp_error(err, -EBADMSG, "%s: the chunk table does not match its seal", path);
        *ret_table = TAKE_PTR(t);
        return 0;
}

int chunk_table_save(const char *path, const uint8_t *table, uint64_t n, uint64_t *ret_bytes, TpError *err) {
        int r = atomic_file_write(path, table, (size_t) n * SHA256_DIGEST_SIZE);
        if (r < 0)
                return tp_error(err, r, "%s: %s", path, strerror(-r));
        if (ret_bytes)
                *ret_bytes = n * SHA256_DIGEST_SIZE;
        return 0;
}

/* ---- undo records ---- */

static void put_u64(uint8_t *p, uint64_t v) {
        for (unsigned i = 0; i < 8; i++)
                p[i] = (uint8_t) (v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p) {
        uint64_t v = 0;
        for (unsigned i = 0; i < 8; i++)
                v |= (uint64_t) p[i] << (8 * i);
        return v;
}

/* The check of a record's SHA-256: at once (undo_record_open()) or when asked (undo_record_checked()). */
struct UndoCheck {
        int fd;                         /* the record's: borrowed */
        uint64_t body;                  /* the bytes the digest covers; the digest follows them */
        uint8_t sha256[SHA256_DIGEST_SIZE];
        char *path;
        bool done;
        int r;                          /* the verdict, once done */
        TpError err;
};

static int undo_check_run(UndoCheck *c, TpError *err) {
        uint8_t buf[64 << 10], d[SHA256_DIGEST_SIZE], tail[SHA256_DIGEST_SIZE];
        Sha256 h;
        int r;

        sha256_init(&h);
        for (uint64_t pos = 0; pos < c->body;) {
                size_t k = c->body - pos < sizeof(buf) ? (size_t) (c->body - pos) : sizeof(buf);
                if ((r = pread_full(c->fd, buf, k, pos)) < 0)
                        return tp_error(err, r == -ENODATA ? -EBADMSG : r, "%s: %s", c->path, strerror(-r));
                sha256_update(&h, buf, k);
                pos += k;
        }
        sha256_final(&h, d);
        if ((r = pread_full(c->fd, tail, sizeof(tail), c->body)) < 0)
                return tp_error(err, -EBADMSG, "%s: truncated", c->path);
        if (memcmp(d, tail, SHA256_DIGEST_SIZE) != 0 || memcmp(d, c->sha256, SHA256_DIGEST_SIZE) != 0)
                return tp_error(err, -EBADMSG, "%s: damaged (its SHA-256 does not match the seal)", c->path);
        return 0;
}

static UndoCheck *undo_check_free(UndoCheck *c) {
        if (!c)
                return NULL;
        free(c->path);
        free(c);
        return NULL;
}

int undo_record_checked(UndoRecord *u, TpError *err) {
        UndoCheck *c = u->check;

        if (!c)
                return 0;
        if (!c->done) {
                c->r = undo_check_run(c, &c->err);
                c->done = true;
        }
        if (c->r < 0)
                *err = c->err;
        return c->r;
}

UndoRecord *undo_record_free(UndoRecord *u) {
        if (!u)
                return NULL;
        u->check = undo_check_free(u->check);
        safe_close(u->fd);
        free(u->spans);
        free(u);
        return NULL;
}

/* The span table of a TPUNDO1 record: sorted, not overlapping, inside the slot file. */
static int undo_table_v1(UndoRecord *u, const char *path, uint64_t file_size, uint64_t data, uint64_t body,
                         TpError *err) {
        uint64_t prev_end = 0, expect_data = data;
        int r;

        for (uint64_t i = 0; i < u->n; i++) {
                uint8_t e[16];
                if ((r = pread_full(u->fd, e, sizeof(e), 16 + 16 * i)) < 0)
                        return tp_error(err, -EBADMSG, "%s: truncated span table", path);
                UndoSpan *s = &u->spans[i];
                *s = (UndoSpan) { get_le64(e), get_le64(e + 8), expect_data, UNDO_STORED };
                if (s->length == 0 || s->offset < prev_end || s->offset > file_size || s->length > file_size - s->offset)
                        return tp_error(err, -EBADMSG, "%s: span #%" PRIu64 " out of order or outside the file", path, i);
                if (s->length > body - expect_data)
                        return tp_error(err, -EBADMSG, "%s: span #%" PRIu64 " runs past the record's data", path, i);
                expect_data += s->length;
                prev_end = s->offset + s->length;
        }
        if (expect_data != body)
                return tp_error(err, -EBADMSG, "%s: holds %" PRIu64 " bytes of data, its spans need %" PRIu64, path,
                                body - data, expect_data - data);
        u->base_size = file_size;
        return 0;
}

/* The entry table of a TPUNDO2 record: tiling [0, base_size), slot ranges inside the slot file. */
static int undo_table_v2(UndoRecord *u, const char *path, uint64_t file_size, uint64_t data, uint64_t body,
                         TpError *err) {
        uint64_t pos = 0, expect_data = data;
        int r;

        for (uint64_t i = 0; i < u->n; i++) {
                uint8_t e[24];
                if ((r = pread_full(u->fd, e, sizeof(e), 24 + 24 * i)) < 0)
                        return tp_error(err, -EBADMSG, "%s: truncated entry table", path);
                UndoSpan *s = &u->spans[i];
                *s = (UndoSpan) { get_le64(e), get_le64(e + 8), 0, get_le64(e + 16) };
                if (s->offset != pos || s->length == 0 || s->length > u->base_size - pos)
                        return tp_error(err, -EBADMSG, "%s: entry #%" PRIu64 " (base offset %" PRIu64
                                        ") does not continue the base at %" PRIu64 " inside its %" PRIu64 " bytes",
                                        path, i, s->offset, pos, u->base_size);
                if (s->slot_offset == UNDO_STORED) {
                        if (s->length > body - expect_data)
                                return tp_error(err, -EBADMSG, "%s: entry #%" PRIu64 " runs past the record's data",
                                                path, i);
                        s->data_offset = expect_data;
                        expect_data += s->length;
                } else if (s->slot_offset > file_size || s->length > file_size - s->slot_offset)
                        return tp_error(err, -EBADMSG, "%s: entry #%" PRIu64 " points outside the %" PRIu64
                                        "-byte slot", path, i, file_size);
                pos += s->length;
        }
        if (pos != u->base_size)
                return tp_error(err, -EBADMSG, "%s: the entries end at %" PRIu64 ", the base is %" PRIu64 " bytes",
                                path, pos, u->base_size);
        if (expect_data != body)
                return tp_error(err, -EBADMSG, "%s: holds %" PRIu64 " bytes of data, its entries need %" PRIu64, path,
                                body - data, expect_data - data);
        return 0;
}

static int undo_open(const char *path, uint64_t n, const uint8_t sha256[SHA256_DIGEST_SIZE], uint64_t file_size,
                     bool deferred, UndoRecord **ret, TpError *err) {
        _cleanup_(undo_record_freep) UndoRecord *u = calloc(1, sizeof(*u));
        uint8_t buf[24];
        struct stat st;
        int r;

        if (!u)
                return -ENOMEM;
        u->fd = open(path, O_RDONLY | O_CLOEXEC);
        if (u->fd < 0)
                return tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
        if (fstat(u->fd, &st) < 0)
                return tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
        uint64_t size = (uint64_t) st.st_size;
        if (n > UNDO_MAX_ENTRIES)
                return tp_error(err, -EBADMSG, "%s: %" PRIu64 " spans, more than the cap of %u", path, n,
                                UNDO_MAX_ENTRIES);
        if (size < 16 + SHA256_DIGEST_SIZE)
                return tp_error(err, -EBADMSG, "%s: too short for an undo record", path);

        /* The digest covers everything before it. */
        uint64_t body = size - SHA256_DIGEST_SIZE;
        UndoCheck *c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        *c = (UndoCheck) { .fd = u->fd, .body = body, .path = strdup(path) };
        memcpy(c->sha256, sha256, SHA256_DIGEST_SIZE);
        u->check = c;
        if (!c->path)
                return -ENOMEM;
        if (!deferred) {
                if ((r = undo_check_run(c, err)) < 0)
                        return r;
                u->check = undo_check_free(c);
        }

        if ((r = pread_full(u->fd, buf, 16, 0)) < 0 || get_le64(buf + 8) != n ||
            (memcmp(buf, UNDO_MAGIC, 8) != 0 && memcmp(buf, UNDO_MAGIC_RELOCATED, 8) != 0))
                return tp_error(err, -EBADMSG, "%s: not an undo record of %" PRIu64 " spans", path, n);
        u->relocated = memcmp(buf, UNDO_MAGIC_RELOCATED, 8) == 0;
        uint64_t head = u->relocated ? 24 : 16, entry = u->relocated ? 24 : 16;
        if (body < head + entry * n)
                return tp_error(err, -EBADMSG, "%s: too short for %" PRIu64 " spans", path, n);
        if (u->relocated && (r = pread_full(u->fd, buf, 8, 16)) < 0)
                return tp_error(err, -EBADMSG, "%s: truncated", path);
        u->base_size = u->relocated ? get_le64(buf) : 0;
        u->spans = calloc(n ? n : 1, sizeof(UndoSpan));
        if (!u->spans)
                return -ENOMEM;
        u->n = n;
        r = u->relocated ? undo_table_v2(u, path, file_size, head + entry * n, body, err)
                         : undo_table_v1(u, path, file_size, head + entry * n, body, err);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(u);
        return 0;
}

int undo_record_open(const char *path, uint64_t n, const uint8_t sha256[SHA256_DIGEST_SIZE], uint64_t file_size,
                     UndoRecord **ret, TpError *err) {
        return undo_open(path, n, sha256, file_size, false, ret, err);
}

int undo_record_open_deferred(const char *path, uint64_t n, const uint8_t sha256[SHA256_DIGEST_SIZE],
                              uint64_t file_size, UndoRecord **ret, TpError *err) {
        return undo_open(path, n, sha256, file_size, true, ret, err);
}

/* The first span that ends after @pos (u->n when none). */
static uint64_t undo_find(const UndoRecord *u, uint64_t pos) {
        uint64_t lo = 0, hi = u->n;
        while (lo < hi) {
                uint64_t mid = lo + (hi - lo) / 2;
                if (u->spans[mid].offset + u->spans[mid].length <= pos)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

uint64_t undo_base_run(const UndoRecord *u, uint64_t pos, uint64_t max, uint64_t *ret_slot_offset) {
        if (!u) {
                *ret_slot_offset = pos;
                return max;
        }
        uint64_t i = undo_find(u, pos);
        if (i == u->n) {
                /* Past every span: the slot's own bytes (a relocated record tiles the base, so never there). */
                *ret_slot_offset = u->relocated ? UNDO_STORED : pos;
                return u->relocated ? 0 : max;
        }
        const UndoSpan *s = &u->spans[i];
        if (pos < s->offset) {
                /* TPUNDO1, between spans. */
                *ret_slot_offset = pos;
                return s->offset - pos < max ? s->offset - pos : max;
        }
        uint64_t run = s->offset + s->length - pos < max ? s->offset + s->length - pos : max;
        *ret_slot_offset = s->slot_offset == UNDO_STORED ? UNDO_STORED : s->slot_offset + (pos - s->offset);
        return run;
}

int undo_read_base(const UndoRecord *u, const FileSet *slot, uint64_t pos, size_t n, uint8_t *buf, TpError *err) {
        while (n > 0) {
                uint64_t at, run = undo_base_run(u, pos, n, &at);
                int r;
                if (run == 0)
                        return tp_error(err, -EBADMSG, "base offset %" PRIu64 " lies outside the %" PRIu64
                                        "-byte base the undo record maps", pos, u->base_size);
                if (at != UNDO_STORED)
                        r = fileset_pread(slot, buf, run, at);
                else {
                        const UndoSpan *s = &u->spans[undo_find(u, pos)];
                        r = pread_full(u->fd, buf, run, s->data_offset + (pos - s->offset));
                }
                if (r < 0)
                        return tp_error(err, r == -ENODATA ? -EIO : r, "%s: reading base offset %" PRIu64 ": %s",
                                        at != UNDO_STORED ? "slot" : "undo record", pos, strerror(r == -ENODATA ? EIO : -r));
                buf += run;
                pos += run;
                n -= run;
        }
        return 0;
}

struct UndoWriter {
        AtomicFile file;
        Sha256 hash;
        uint64_t bytes, unkicked;
};

UndoWriter *undo_writer_free(UndoWriter *w) {
        if (!w)
                return NULL;
        atomic_file_abort(&w->file);
        free(w);
        return NULL;
}

void undo_writer_start_writeback(UndoWriter *w) {
        (void) sync_file_range(w->file.fd, 0, 0, SYNC_FILE_RANGE_WRITE);
        w->unkicked = 0;
}

static int undo_write_raw(UndoWriter *w, const void *data, size_t n) {
        w->bytes += n;
        w->unkicked += n;
        if (w->unkicked >= (4u << 20))
                undo_writer_start_writeback(w);   /* so that the commit's fsync finds little left to do */
        return write_full(w->file.fd, data, n);
}

static int undo_write(UndoWriter *w, const void *data, size_t n) {
        sha256_update(&w->hash, data, n);
        return undo_write_raw(w, data, n);
}

static int writer_new(const char *path, const UndoSpan *spans, uint64_t n, bool relocated, uint64_t base_size,
                      UndoWriter **ret, TpError *err) {
        _cleanup_(undo_writer_freep) UndoWriter *w = calloc(1, sizeof(*w));
        uint8_t head[24];
        int r;

        if (!w)
                return -ENOMEM;
        w->file = ATOMIC_FILE_NULL;
        r = atomic_file_open(path, &w->file);
        if (r < 0)
                return tp_error(err, r, "%s: cannot create a temporary beside it: %s", path, strerror(-r));
        sha256_init(&w->hash);
        memcpy(head, relocated ? UNDO_MAGIC_RELOCATED : UNDO_MAGIC, 8);
        put_u64(head + 8, n);
        put_u64(head + 16, base_size);
        r = undo_write(w, head, relocated ? 24 : 16);
        for (uint64_t i = 0; r >= 0 && i < n; i++) {
                uint8_t e[24];
                put_u64(e, spans[i].offset);
                put_u64(e + 8, spans[i].length);
                put_u64(e + 16, spans[i].slot_offset);
                r = undo_write(w, e, relocated ? 24 : 16);
        }
        if (r < 0)
                return tp_error(err, r, "%s: %s", path, strerror(-r));
        *ret = TAKE_PTR(w);
        return 0;
}

int undo_writer_new(const char *path, const UndoSpan *spans, uint64_t n, UndoWriter **ret, TpError *err) {
        return writer_new(path, spans, n, false, 0, ret, err);
}

int undo_writer_new_relocated(const char *path, const UndoSpan *spans, uint64_t n, uint64_t base_size,
                              UndoWriter **ret, TpError *err) {
        return writer_new(path, spans, n, true, base_size, ret, err);
}

int undo_writer_append(UndoWriter *w, const void *data, size_t n, TpError *err) {
        int r = undo_write(w, data, n);
        if (r < 0)
                return tp_error(err, r, "%s: %s", w->file.path, strerror(-r));
        return 0;
}

int undo_writer_append_unhashed(UndoWriter *w, const void *data, size_t n, TpError *err) {
        int r = undo_write_raw(w, data, n);
        if (r < 0)
                return tp_error(err, r, "%s: %s", w->file.path, strerror(-r));
        return 0;
}

Sha256 *undo_writer_hash(UndoWriter *w) {
        return &w->hash;
}

int undo_writer_commit(UndoWriter *w, uint8_t ret_sha256[SHA256_DIGEST_SIZE], uint64_t *ret_bytes, TpError *err) {
        uint8_t d[SHA256_DIGEST_SIZE];
        _cleanup_free_ char *path = strdup(w->file.path);
        int r;

        if (!path)
                return -ENOMEM;
        sha256_final(&w->hash, d);
        r = write_full(w->file.fd, d, sizeof(d));
        if (r >= 0)
                r = atomic_file_commit(&w->file);
        if (r < 0)
                return tp_error(err, r, "%s: %s", path, strerror(-r));
        memcpy(ret_sha256, d, sizeof(d));
        if (ret_bytes)
                *ret_bytes = w->bytes + sizeof(d);
        return 0;
}

/* ---- leases ---- */

int file_lease_take(int fd, int sig) {
        if (fcntl(fd, F_SETSIG, sig) < 0)
                return negative_errno();
        if (fcntl(fd, F_SETLEASE, F_WRLCK) < 0)
                return errno == EAGAIN ? -EBUSY : negative_errno();
        return 0;
}

void file_lease_release(int fd) {
        (void) fcntl(fd, F_SETLEASE, F_UNLCK);
}

bool file_lease_held(int fd) {
        return fcntl(fd, F_GETLEASE) == F_WRLCK;
}
