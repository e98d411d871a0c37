/* SPDX-License-Identifier: MIT */

#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <zstd.h>

#include "bundle.h"
#include "create-impl.h"
#include "create.h"
#include "delta.h"
#include "encryption.h"
#include "fileio.h"
#include "ggml.h"
#include "hashfile.h"
#include "match.h"
#include "sign.h"

_Static_assert(MATCH_REF_MAX == SPAN_REF_MAX, "the matcher's references must fit a device's");

int hash_model(const FileSet *set, uint64_t chunk_size, uint8_t (*ret_file_sha256)[32], uint8_t ret_sha256[32],
               uint8_t ret_chunk_root[32], TpError *err) {
        _cleanup_free_ uint8_t *buf = NULL;
        _cleanup_free_ uint8_t (*file_sha)[32] = NULL;
        Sha256 file, chunk, root;
        uint64_t in_chunk = 0;
        uint8_t d[SHA256_DIGEST_SIZE];
        const size_t bufsize = 1u << 20;

        buf = malloc(bufsize);
        file_sha = calloc(set->n_files, sizeof(*file_sha));
        if (!buf || !file_sha)
                return -ENOMEM;
        sha256_init(&chunk);
        sha256_init(&root);
        for (size_t i = 0; i < set->n_files; i++) {
                const FileSetFile *f = &set->files[i];

                (void) posix_fadvise(f->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
                sha256_init(&file);
                for (uint64_t pos = 0; pos < f->size;) {
                        size_t n = f->size - pos < bufsize ? (size_t) (f->size - pos) : bufsize;
                        int r = pread_full(f->fd, buf, n, pos);
                        if (r < 0)
                                return tp_error(err, r == -ENODATA ? -EIO : r, "%s: reading at offset %" PRIu64 ": %s",
                                                f->path, pos, r == -ENODATA ? "the file shrank" : strerror(-r));
                        sha256_update(&file, buf, n);
                        for (size_t k = 0; chunk_size > 0 && k < n;) {
                                size_t step = chunk_size - in_chunk < n - k ? (size_t) (chunk_size - in_chunk) : n - k;
                                sha256_update(&chunk, buf + k, step);
                                in_chunk += step;
                                k += step;
                                if (in_chunk == chunk_size) {
                                        sha256_final(&chunk, d);
                                        sha256_update(&root, d, sizeof(d));
                                        sha256_init(&chunk);
                                        in_chunk = 0;
                                }
                        }
                        pos += n;
                }
                sha256_final(&file, file_sha[i]);
        }
        if (in_chunk > 0) {
                sha256_final(&chunk, d);
                sha256_update(&root, d, sizeof(d));
        }
        fileset_digest(set, (const uint8_t (*)[32]) file_sha, ret_sha256);
        if (ret_chunk_root)
                sha256_final(&root, ret_chunk_root);
        if (ret_file_sha256)
                memcpy(ret_file_sha256, file_sha, set->n_files * sizeof(*file_sha));
        return 0;
}

/* Round a site's changed region out to whole delta units, relative to the site's start. */
static Plan plan_region(const Artifact *base, const Artifact *target, const DiffRegion *reg) {
        Plan p = { reg->offset, reg->length, reg->site, DELTA_BYTES, reg->offset, 0, false };

        if (reg->site >= 0) {
                const Site *s = &target->sites[reg->site];
                DeltaLayout l = site_delta_layout(target, s);
                uint64_t unit = delta_unit(l);
                if (s->length % unit != 0)
                        l = DELTA_BYTES, unit = 1;
                uint64_t start = s->offset + (reg->offset - s->offset) / unit * unit;
                uint64_t end_rel = reg->offset + reg->length - s->offset;
                uint64_t end = s->offset + (end_rel + unit - 1) / unit * unit;
                p = (Plan) { start, end - start, reg->site, l, start, 0, false };
        }
        /* Delta needs base bytes under the whole span. */
        if (p.offset + p.length > base->size)
                p.layout = _DELTA_LAYOUT_INVALID;
        return p;
}

/* A piece of a relocating plan (format 2) as a span to build. */
static Plan plan_piece(const MatchPiece *q) {
        Plan p = { q->offset, q->length, q->site, _DELTA_LAYOUT_INVALID, q->base_offset, 0, false };

        switch (q->kind) {
        case MATCH_COPY:
                p.copy = true;
                break;
        case MATCH_CHANGED:
                p.layout = q->layout;
                if (delta_unit(p.layout) == 0 || q->length % delta_unit(p.layout) != 0)
                        p.layout = DELTA_BYTES;
                break;
        case MATCH_REF:
                p.ref_length = q->base_length;
                break;
        default:
                break;
        }
        return p;
}

uint64_t bundle_changed_bytes(const Artifact *base, const Artifact *target, const Diff *diff, const Match *match) {
        uint64_t n = 0;

        if (match) {
                for (size_t i = 0; i < match->n_pieces; i++)
                        if (match->pieces[i].kind != MATCH_COPY)
                                n += match->pieces[i].length;
                return n;
        }
        for (size_t i = 0; i < diff->n_regions; i++)
                n += plan_region(base, target, &diff->regions[i]).length;
        return n;
}

/* A copy: no frame; its hash is of the base bytes it copies. */
static int hash_copy(Coder *c, const Plan *p, uint8_t sha[32]) {
        Sha256 h;

        sha256_init(&h);
        for (uint64_t pos = 0; pos < p->length;) {
                size_t n = p->length - pos < c->group_max ? (size_t) (p->length - pos) : c->group_max;
                int r = fileset_pread(c->base_files, c->b, n, p->base_offset + pos);
                if (r < 0)
                        return tp_error(c->err, r == -ENODATA ? -EIO : r, "reading the base at %" PRIu64,
                                        p->base_offset + pos);
                sha256_update(&h, c->b, n);
                pos += n;
        }
        sha256_final(&h, sha);
        return 0;
}

static int tmpfile_near(const char *path) {
        _cleanup_free_ char *dir = strdup(path);
        if (!dir)
                return -ENOMEM;
        char *slash = strrchr(dir, '/');
        const char *d = slash ? (slash == dir ? "/" : (*slash = '\0', dir)) : ".";
        int fd = open(d, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        return fd < 0 ? negative_errno() : fd;
}

static int copy_range(int from, uint64_t off, uint64_t len, int to, uint8_t *buf, size_t bufsize, Sha256 *hash) {
        while (len > 0) {
                size_t n = len < bufsize ? (size_t) len : bufsize;
                int r = pread_full(from, buf, n, off);
                if (r < 0)
                        return r == -ENODATA ? -EIO : r;
                if (hash)
                        sha256_update(hash, buf, n);
                r = write_full(to, buf, n);
                if (r < 0)
                        return r;
                off += n;
                len -= n;
        }
        return 0;
}

/*
 * Encrypt the payload for @o's recipients: each span's frame, read from @plain_fd, is sealed
 * into @sealed_fd (encryption.h), and the spans' frame offsets and sizes become the sealed
 * ones. Returns the sealed payload's size.
 */
static int seal_payload(Manifest *m, const CreateOptions *o, int plain_fd, int sealed_fd, uint8_t *buf, size_t bufsize,
                        uint64_t *ret_size, TpError *err) {
        _cleanup_(frame_cipher_freep) FrameCipher *cipher = NULL;
        uint8_t key[ENCRYPTION_KEY_SIZE], tag[ENCRYPTION_TAG_SIZE];
        uint64_t at = 0;
        int r;

        r = encryption_new(o->recipients, o->n_recipients, key, &m->encryption, err);
        if (r < 0)
                return tp_error_prefix(err, r, "encrypting the payload");
        r = frame_cipher_new(key, &cipher);
        encryption_wipe(key, sizeof(key));
        if (r < 0)
                return r;
        if (ftruncate(sealed_fd, 0) < 0 || lseek(sealed_fd, 0, SEEK_SET) < 0)
                return negative_errno();
        bufsize &= ~(size_t) 15;        /* whole GCM blocks but for a frame's last piece */
        for (size_t i = 0; i < m->n_spans; i++) {
                ManifestSpan *s = &m->spans[i];
                if (s->frame_size == 0)
                        continue;
                frame_cipher_start(cipher, i, true);
                for (uint64_t pos = 0; pos < s->frame_size;) {
                        size_t n = s->frame_size - pos < bufsize ? (size_t) (s->frame_size - pos) : bufsize;
                        if ((r = pread_full(plain_fd, buf, n, s->frame_offset + pos)) < 0)
                                return tp_error(err, r == -ENODATA ? -EIO : r, "reading back the payload: %s",
                                                strerror(r == -ENODATA ? EIO : -r));
                        frame_cipher_update(cipher, buf, buf, n);
                        if ((r = write_full(sealed_fd, buf, n)) < 0)
                                return tp_error(err, r, "writing the payload: %s", strerror(-r));
                        pos += n;
                }
                frame_cipher_tag(cipher, tag);
                if ((r = write_full(sealed_fd, tag, sizeof(tag))) < 0)
                        return tp_error(err, r, "writing the payload: %s", strerror(-r));
                s->frame_offset = at;
                s->frame_size += ENCRYPTION_TAG_SIZE;
                at += s->frame_size;
        }
        *ret_size = at;
        return 0;
}

static int plan_cmp_names(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

/*
 * In a directory model no span crosses a file's end (each names its file): a plan is cut where a
 * target file ends and, when it reads base bytes as they lie (a copy, a delta), where a base
 * file ends. Sites never cross; copies of gap bytes and runs of changed gap bytes may. A ref's
 * reference is cut to the base file it overlaps most.
 */
static int split_plans(const FileSet *bf, const FileSet *tf, Plan **plans, size_t *n) {
        _cleanup_free_ Plan *out = NULL;
        size_t n_out = 0, cap = *n ? *n : 1;

        if (!bf->directory && !tf->directory)
                return 0;
        out = malloc(cap * sizeof(Plan));
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < *n; i++) {
                Plan p = (*plans)[i];
                bool reads_base = p.copy || p.layout != _DELTA_LAYOUT_INVALID;

                if (p.ref_length > 0) {
                        /* The reference: its part in the base file it overlaps most. */
                        uint64_t end = p.base_offset + p.ref_length, best_off = p.base_offset, best = 0;
                        for (size_t k = fileset_locate(bf, p.base_offset); k < bf->n_files; k++) {
                                const FileSetFile *f = &bf->files[k];
                                if (f->offset >= end)
                                        break;
                                uint64_t lo = f->offset > p.base_offset ? f->offset : p.base_offset;
                                uint64_t hi = f->offset + f->size < end ? f->offset + f->size : end;
                                if (hi > lo && hi - lo > best)
                                        best = hi - lo, best_off = lo;
                        }
                        p.base_offset = best_off;
                        p.ref_length = best;
                }
                while (p.length > 0) {
                        const FileSetFile *t = &tf->files[fileset_locate(tf, p.offset)];
                        uint64_t len = t->offset + t->size - p.offset;
                        if (reads_base) {
                                const FileSetFile *b = &bf->files[fileset_locate(bf, p.base_offset)];
                                if (b->offset + b->size - p.base_offset < len)
                                        len = b->offset + b->size - p.base_offset;
                        }
                        if (len > p.length)
                                len = p.length;
                        if (n_out == cap) {
                                Plan *x = reallocarray(out, cap *= 2, sizeof(Plan));
                                if (!x)
                                        return -ENOMEM;
                                out = x;
                        }
                        out[n_out] = p;
                        out[n_out++].length = len;
                        p.offset += len;
                        p.length -= len;
                        if (reads_base)
                                p.base_offset += len;
                }
        }
        free(*plans);
        *plans = TAKE_PTR(out);
        *n = n_out;
        return 0;
}

/* Truncate @fd to nothing, ready for a candidate. */
static int rewind_fd(int fd) {
        return ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0 ? negative_errno() : 0;
}

/* A lora candidate in its smallest form (code_lora_decide(), at the first call: the screening level's when there is one). */
static int code_lora_candidate(Coder *c, const Plan *p, CodeLora *l, int fd, uint64_t *ret_size, uint8_t base_sha[32],
                               uint8_t new_sha[32]) {
        uint64_t counted;
        int r;

        if (!l->decided) {
                l->decided = true;
                if ((r = code_lora_decide(c, p, l, &counted, base_sha, new_sha)) < 0)
                        return r;
                if (fd < 0) {                   /* only counting: done */
                        *ret_size = counted;
                        return 0;
                }
        }
        return code_span(c, p, true, false, l, NULL, fd, ret_size, base_sha, new_sha);
}

/* Candidate @k of a plan: raw, delta or ref, lora (with or without the importance row), rescale. */
static int code_candidate(Coder *c, const Plan *p, CreateCostIndex k, CodeLora *const loras[2],
                          const CodeRescale *rescale, int fd, uint64_t *ret_size, uint8_t base_sha[32],
                          uint8_t new_sha[32]) {
        switch (k) {
        case CREATE_COST_RAW:
                return code_span(c, p, false, false, NULL, NULL, fd, ret_size, base_sha, new_sha);
        case CREATE_COST_ALT:
                return code_span(c, p, p->ref_length == 0, p->ref_length > 0, NULL, NULL, fd, ret_size, base_sha,
                                 new_sha);
        case CREATE_COST_LORA:
        case CREATE_COST_LORA_IMATRIX:
                return code_lora_candidate(c, p, loras[k - CREATE_COST_LORA], fd, ret_size, base_sha, new_sha);
        case CREATE_COST_RESCALE:
                return code_span(c, p, true, false, NULL, rescale, fd, ret_size, base_sha, new_sha);
        default:
                abort();
        }
}

/*
 * Screening (CreateSpanCost): each candidate of @tried compressed at the fast level, counted and
 * not written; those worth the level asked for stay in @tried, the others' sizes go to @frames.
 * The raw pass's digests (of the span's base and new bytes) go to @base_sha and @new_sha.
 */
static int screen(Coder *c, const Plan *p, bool tried[_CREATE_COST_MAX], CodeLora *const loras[2],
                  const CodeRescale *rescale, uint64_t *const frames[_CREATE_COST_MAX], CreateSpanCost *cost,
                  uint8_t base_sha[32], uint8_t new_sha[32]) {
        uint64_t size[_CREATE_COST_MAX], least = UINT64_MAX;
        uint8_t bsha[32] = { 0 }, nsha[32] = { 0 };  /* the other candidates' digests: not kept */
        int r = 0;

        ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_compressionLevel, c->screen_level);
        c->screening = true;
        for (int k = 0; k < _CREATE_COST_MAX && r >= 0; k++)
                if (tried[k] && !(k == CREATE_COST_ALT && p->ref_length > 0)) {     /* a ref stays */
                        r = code_candidate(c, p, k, loras, rescale, -1, &size[k], k ? bsha : base_sha,
                                           k ? nsha : new_sha);
                        if (size[k] < least)
                                least = size[k];
                }
        ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_compressionLevel, c->level);
        c->screening = false;
        if (r < 0)
                return r;
        for (int k = 0; k < _CREATE_COST_MAX; k++)
                if (tried[k] && !(k == CREATE_COST_ALT && p->ref_length > 0) &&
                    size[k] - least > least / 100 * CREATE_SCREEN_MARGIN) {
                        tried[k] = false;
                        *frames[k] = size[k];
                        cost->screened |= 1u << k;
                }
        return 0;
}

/*
 * Code plan @p as one span @s: a copy (no frame), or the smallest frame of raw (written into the
 * payload, @fd[0], as it goes), delta or ref (into @fd[1]), lora (into @fd[2]), lora with the
 * tensor's importance row (into @fd[3]) and rescale (into @fd[2]: an ONNX tensor's, never beside
 * a lora); the winner ends up in the payload. @cost gets each candidate's size (UINT64_MAX: not
 * tried).
 */
static int code_plan_as(Coder *c, const CreateOptions *o, const Artifact *base, const Artifact *target, bool relocating,
                        const Plan *p, const int fd[4], ManifestSpan *s, CreateSpanCost *cost) {
        enum { RAW = CREATE_COST_RAW, ALT, LORA, LORA_IMATRIX, RESCALE, _N };
        _cleanup_(code_lora_done) CodeLora lora = {}, lora_imatrix = {};
        _cleanup_(code_rescale_done) CodeRescale rescale = {};
        CodeLora *const loras[2] = { &lora, &lora_imatrix };
        uint64_t *const frames[_N] = { &cost->raw, &cost->alt, &cost->lora, &cost->lora_imatrix, &cost->rescale };
        const int fds[_N] = { fd[0], fd[1], fd[2], fd[3], fd[2] };
        uint8_t bsha[_N][32], nsha[32];
        bool tried[_N] = { [RAW] = true };
        int r;

        *cost = (CreateSpanCost) { UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX };
        s->offset = p->offset;
        s->length = p->length;
        if (p->site >= 0 && !(s->site = strdup(target->sites[p->site].name)))
                return -ENOMEM;
        if (p->copy) {
                s->encoding = SPAN_COPY;
                s->base_offset = p->base_offset;
                s->base_length = p->length;
                r = hash_copy(c, p, s->new_sha256);
                memcpy(s->base_sha256, s->new_sha256, 32);
                return r;
        }
        off_t mark = lseek(fd[0], 0, SEEK_CUR);
        if (mark < 0)
                return negative_errno();
        tried[ALT] = p->layout != _DELTA_LAYOUT_INVALID || p->ref_length > 0;
        /* The prediction with the importance row is tried beside the one without: it is not always
         * the closer one (the base's own rounding dominates the residual), and the row costs bytes. */
        for (int k = 0; k < 2; k++) {
                if ((r = code_lora_prepare(c, o, base, target, p, k == 1, loras[k])) < 0)
                        return r;
                tried[LORA + k] = r > 0;
        }
        if (!lora.factors && (r = code_rescale_prepare(c, base, target, p, &rescale)) < 0)
                return r;
        tried[RESCALE] = rescale.params != NULL;

        /* Screening hashes the span's base and new bytes in its raw pass; else the raw pass below does. */
        const bool raw_hashed = c->screen_level != 0;
        if (c->screen_level && (r = screen(c, p, tried, loras, &rescale, frames, cost, s->base_sha256,
                                           s->new_sha256)) < 0)
                return r;
        /* Raw goes straight into the payload; the others into their own files, the winner copied. */
        for (int k = RAW; k < _N; k++) {
                if (!tried[k])
                        continue;
                if (k != RAW && (r = rewind_fd(fds[k])) < 0)
                        return r;
                if ((r = code_candidate(c, p, k, loras, &rescale, fds[k], frames[k],
                                        k == RAW && !raw_hashed ? s->base_sha256 : bsha[k],
                                        k == RAW && !raw_hashed ? s->new_sha256 : nsha)) < 0)
                        return r;
        }

        /* A rescale span's map costs its manifest about this much (compressed): a tie goes to the others. */
        const uint64_t extra[_N] = { [RESCALE] = 16 };
        int best = -1;
        for (int k = RAW; k < _N; k++)
                if (tried[k] && (best < 0 || *frames[k] + extra[k] < *frames[best] + extra[best]))
                        best = k;
        s->encoding = best == RAW ? SPAN_RAW : best == ALT ? (p->ref_length ? SPAN_REF : SPAN_DELTA) :
                      best == RESCALE ? SPAN_RESCALE : SPAN_LORA;
        s->frame_size = *frames[best];
        if (best != RAW) {
                if (ftruncate(fd[0], mark) < 0 || lseek(fd[0], mark, SEEK_SET) < 0)
                        return negative_errno();
                if ((r = copy_range(fds[best], 0, s->frame_size, fd[0], c->x, c->group_max, NULL)) < 0)
                        return r;
                memcpy(s->base_sha256, bsha[best], 32);
        }
        if ((s->encoding == SPAN_DELTA || span_predicted(s)) && !(s->layout = strdup(delta_layout_to_string(p->layout))))
                return -ENOMEM;
        if (s->encoding == SPAN_LORA) {
                const CodeLora *l = loras[best - LORA];
                s->lora = l->shape;
                s->lora_first = l->first_block * ggml_type(l->shape.type)->block_size;
        }
        if (s->encoding == SPAN_RESCALE) {
                s->rescale = rescale.params->shape;
                s->rescale_first = rescale.first;
        }
        s->base_offset = s->encoding == SPAN_RAW && relocating ? 0 : p->base_offset;
        s->base_length = s->encoding == SPAN_REF ? p->ref_length : s->encoding == SPAN_RAW && relocating ? 0 : p->length;
        if (s->encoding == SPAN_RAW && (relocating || p->layout == _DELTA_LAYOUT_INVALID))
                memset(s->base_sha256, 0, 32);
        return 0;
}

/* code_plan_as(); a span whose differences the entropy-coded i8ac (or i8acp) cannot fit is coded as i8. */
static int code_plan(Coder *c, const CreateOptions *o, const Artifact *base, const Artifact *target, bool relocating,
                     const Plan *p, const int fd[4], ManifestSpan *s, CreateSpanCost *cost) {
        off_t mark = lseek(fd[0], 0, SEEK_CUR);
        int r;

        if (mark < 0)
                return negative_errno();
        r = code_plan_as(c, o, base, target, relocating, p, fd, s, cost);
        if (r != -E2BIG || (p->layout != DELTA_I8AC && p->layout != DELTA_I8ACP))
                return r;
        Plan q = *p;
        q.layout = DELTA_I8;
        free(s->site);
        free(s->layout);
        *s = (ManifestSpan) {};
        if (ftruncate(fd[0], mark) < 0 || lseek(fd[0], mark, SEEK_SET) < 0)
                return negative_errno();
        return code_plan_as(c, o, base, target, relocating, &q, fd, s, cost);
}

/* A tensor that may be a lora span stays a span of its own: a lora span predicts one tensor. */
static bool own_span(const Site *s, void *userdata) {
        const CreateMatchContext *c = userdata;
        const CreateOptions *o = c->o;
        if ((o->lora && lora_find(o->lora, s->name)) || (o->lowrank && s->row > 0))
                return true;
        return s->length >= CREATE_OWN_QUANT_MIN && artifact_quant(c->target, s->name) &&
               create_rescale_alone(c->base_files, c->base, c->target_files, c->target, s);
}

MatchOptions create_match_options(const CreateMatchContext *c) {
        return (MatchOptions) { .own_span = own_span, .userdata = (void *) c };
}

void create_result_done(CreateResult *r) {
        free(r->costs);
        r->costs = NULL;
        r->n_costs = 0;
}

int bundle_create(const FileSet *base_files, const Artifact *base, const FileSet *target_files,
                  const Artifact *target, const Diff *diff, const CreateOptions *o, const char *out_path,
                  CreateResult *ret, TpError *err) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_close_ int payload_fd = -1, cand_fd = -1, lora_fd = -1, imatrix_fd = -1;
        _cleanup_free_ uint8_t *b = NULL, *t = NULL, *x = NULL, *out = NULL, *sig = NULL, *ref = NULL;
        _cleanup_(match_freep) Match *own_match = NULL;
        _cleanup_free_ char *text = NULL;
        AtomicFile af = ATOMIC_FILE_NULL;
        _cleanup_(create_result_done) CreateResult res = {};
        _cleanup_free_ uint8_t (*base_sha)[32] = NULL, (*target_sha)[32] = NULL;
        _cleanup_free_ Plan *plans = NULL;
        Coder c = { .base_files = base_files, .target_files = target_files, .target = target, .err = err };
        Sha256 payload_hash;
        size_t text_len = 0, sig_len = 0;
        int r;

        if (!task_name_valid(o->task))
                return tp_error(err, -EINVAL, "invalid task name '%s' (expected [a-z0-9][a-z0-9._-]{0,63})", o->task);
        if (o->model && !task_name_valid(o->model))
                return tp_error(err, -EINVAL, "invalid model name '%s' (expected [a-z0-9][a-z0-9._-]{0,63})", o->model);

        m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        m->format = MANIFEST_FORMAT;
        m->role = o->role;
        m->task = strdup(o->task);
        m->model = strdup(o->model ? o->model : MANIFEST_DEFAULT_MODEL);
        if (!m->task || !m->model)
                return -ENOMEM;
        m->version = o->version;
        m->created = o->created;
        m->expires = o->expires;
        m->kind = target->kind;
        m->base.size = base->size;
        memcpy(m->base.layout, base->layout, sizeof(m->base.layout));
        m->target.size = target->size;
        m->target.chunk_size = o->chunk_size ? o->chunk_size : CREATE_DEFAULT_CHUNK;

        /* The base needs only its hashes; the target its chunk table too. */
        base_sha = calloc(base_files->n_files, sizeof(*base_sha));
        target_sha = calloc(target_files->n_files, sizeof(*target_sha));
        if (!base_sha || !target_sha)
                return -ENOMEM;
        if ((r = hash_model(base_files, 0, base_sha, m->base.sha256, NULL, err)) < 0)
                return tp_error_prefix(err, r, "base");
        r = hash_model(target_files, m->target.chunk_size, target_sha, m->target.sha256, m->target.chunk_root, err);
        if (r < 0)
                return tp_error_prefix(err, r, "target");
        if ((r = manifest_files_set(&m->base.files, base_files, (const uint8_t (*)[32]) base_sha)) < 0 ||
            (r = manifest_files_set(&m->target.files, target_files, (const uint8_t (*)[32]) target_sha)) < 0)
                return r;
        memcpy(res.target_sha256, m->target.sha256, 32);

        /* A layout that moved: sites matched by name wherever they sit (format 2); also an ONNX
         * model's 8-bit tensors that code better so (create_prefers_relocating()). */
        const Match *match = o->match;
        CreateMatchContext mc = { o, base_files, target_files, base, target };
        MatchOptions mo = create_match_options(&mc);
        bool relocate = diff->layout_changed;
        if (!relocate && (r = create_prefers_relocating(base_files, base, target_files, target, diff, &relocate, err)) < 0)
                return r;
        if (relocate) {
                if (!match && (r = match_compute(base_files, base, target_files, target, &mo, &own_match, err)) < 0)
                        return r;
                match = match ? match : own_match;
                m->format = MANIFEST_FORMAT_RELOCATING;
        }
        size_t n_plans = match ? match->n_pieces : diff->n_regions;
        plans = calloc(n_plans ? n_plans : 1, sizeof(Plan));
        if (!plans)
                return -ENOMEM;
        for (size_t i = 0; i < n_plans; i++)
                plans[i] = match ? plan_piece(&match->pieces[i]) : plan_region(base, target, &diff->regions[i]);
        if ((r = split_plans(base_files, target_files, &plans, &n_plans)) < 0)
                return r;

        /* The site set: names of the sites the task changes (format 2: also adds, resizes, renames, removes), sorted. */
        size_t n_names = match ? target->n_sites + match->n_removed : diff->n_regions;
        m->sites = calloc(n_names ? n_names : 1, sizeof(char *));
        m->spans = calloc(n_plans ? n_plans : 1, sizeof(ManifestSpan));
        if (!m->sites || !m->spans)
                return -ENOMEM;
        if (match) {
                for (size_t i = 0; i < target->n_sites; i++)
                        if (match->fate[i] != SITE_SAME && match->fate[i] != SITE_MOVED &&
                            !(m->sites[m->n_sites++] = strdup(target->sites[i].name)))
                                return -ENOMEM;
                for (size_t j = 0; j < match->n_removed; j++)
                        if (!(m->sites[m->n_sites++] = strdup(base->sites[match->removed[j]].name)))
                                return -ENOMEM;
        } else {
                for (size_t i = 0; i < diff->n_regions; i++)
                        if (diff->regions[i].site >= 0 &&
                            !(m->sites[m->n_sites++] = strdup(target->sites[diff->regions[i].site].name)))
                                return -ENOMEM;
        }
        if (m->n_sites > 1)
                qsort(m->sites, m->n_sites, sizeof(char *), plan_cmp_names);
        sites_fingerprint(m->sites, m->n_sites, m->sites_fingerprint);

        c.group_max = 1u << 20;
        for (DeltaLayout l = 0; l < _DELTA_LAYOUT_MAX; l++)
                if (delta_group_bytes(l) > c.group_max)
                        c.group_max = delta_group_bytes(l);
        c.out_cap = ZSTD_CStreamOutSize();
        b = malloc(c.group_max);
        t = malloc(c.group_max);
        x = malloc(c.group_max);
        out = malloc(c.out_cap);
        ref = match ? malloc(SPAN_REF_MAX) : NULL;
        c.cctx = ZSTD_createCCtx();
        if (!b || !t || !x || !out || (match && !ref) || !c.cctx) {
                ZSTD_freeCCtx(c.cctx);
                return -ENOMEM;
        }
        c.b = b, c.t = t, c.x = x, c.out = out, c.ref = ref;
        c.level = o->level ? o->level : CREATE_DEFAULT_LEVEL;
        c.screen_level = c.level >= CREATE_SCREEN_FROM ? CREATE_SCREEN_LEVEL : 0;
        ZSTD_CCtx_setParameter(c.cctx, ZSTD_c_compressionLevel, c.level);
        ZSTD_CCtx_setParameter(c.cctx, ZSTD_c_windowLog, BUNDLE_WINDOW_LOG);

        payload_fd = tmpfile_near(out_path);
        cand_fd = payload_fd >= 0 ? tmpfile_near(out_path) : -1;
        lora_fd = cand_fd >= 0 ? tmpfile_near(out_path) : -1;
        imatrix_fd = lora_fd >= 0 ? tmpfile_near(out_path) : -1;
        if (payload_fd < 0 || cand_fd < 0 || lora_fd < 0 || imatrix_fd < 0) {
                r = payload_fd < 0 ? payload_fd : cand_fd < 0 ? cand_fd : lora_fd < 0 ? lora_fd : imatrix_fd;
                ZSTD_freeCCtx(c.cctx);
                return tp_error(err, r, "%s: cannot create a temporary file beside it: %s", out_path, strerror(-r));
        }

        sha256_init(&payload_hash);
        if (!(res.costs = calloc(n_plans ? n_plans : 1, sizeof(*res.costs)))) {
                ZSTD_freeCCtx(c.cctx);
                return -ENOMEM;
        }
        const int fds[4] = { payload_fd, cand_fd, lora_fd, imatrix_fd };
        for (size_t i = 0; i < n_plans; i++) {
                ManifestSpan *s = &m->spans[m->n_spans];
                if ((r = code_plan(&c, o, base, target, match != NULL, &plans[i], fds, s, &res.costs[i])) < 0) {
                        ZSTD_freeCCtx(c.cctx);
                        return tp_error_prefix(err, r, "span at offset %" PRIu64, plans[i].offset);
                }
                s->frame_offset = res.payload_bytes;
                res.payload_bytes += s->frame_size;
                res.n_spans++;
                res.n_costs++;
                switch (s->encoding) {
                case SPAN_COPY:
                        res.n_copy++;
                        res.copied_bytes += s->length;
                        break;
                case SPAN_REF:
                        res.n_ref++;
                        res.span_bytes += s->length;
                        break;
                case SPAN_DELTA:
                        res.n_delta++;
                        res.span_bytes += s->length;
                        break;
                case SPAN_LORA:
                        res.n_lora++;
                        res.n_lora_imatrix += s->lora.importance;
                        res.span_bytes += s->length;
                        break;
                case SPAN_RESCALE:
                        res.n_rescale++;
                        res.span_bytes += s->length;
                        break;
                default:
                        res.n_raw++;
                        res.span_bytes += s->length;
                        break;
                }
                m->n_spans++;
        }
        ZSTD_freeCCtx(c.cctx);

        if (o->n_recipients > 0) {
                if ((r = seal_payload(m, o, payload_fd, cand_fd, x, c.group_max, &res.payload_bytes, err)) < 0)
                        return r;
                int plain_fd = payload_fd;
                payload_fd = cand_fd;
                cand_fd = plain_fd;
        }

        /* Hash the payload as it will be stored. */
        if (lseek(payload_fd, 0, SEEK_SET) < 0)
                return negative_errno();
        for (uint64_t pos = 0; pos < res.payload_bytes;) {
                size_t n = res.payload_bytes - pos < c.group_max ? (size_t) (res.payload_bytes - pos) : c.group_max;
                if ((r = pread_full(payload_fd, x, n, pos)) < 0)
                        return tp_error(err, r, "reading back the payload: %s", strerror(-r));
                sha256_update(&payload_hash, x, n);
                pos += n;
        }
        m->payload.size = res.payload_bytes;
        sha256_final(&payload_hash, m->payload.sha256);

        /* Compressed in both formats unless asked: a manifest is mostly hashes and names. */
        bool compress = !o->plain_manifest || m->format == MANIFEST_FORMAT_RELOCATING;
        r = manifest_section_write(m, compress, &text, &text_len, err);
        if (r < 0)
                return r;
        if (o->signer) {
                r = signer_sign(o->signer, text, text_len, &sig, &sig_len, err);
                if (r < 0)
                        return tp_error_prefix(err, r, "signing the manifest");
        }

        BundleHeader h = { (uint32_t) m->format, text_len, sig_len, res.payload_bytes,
                           m->format == MANIFEST_FORMAT && compress ? BUNDLE_FLAG_MANIFEST_ZSTD : 0 };
        uint8_t hdr[BUNDLE_HEADER_SIZE];
        bundle_header_encode(&h, hdr);

        r = atomic_file_open(out_path, &af);
        if (r < 0)
                return tp_error(err, r, "%s: %s", out_path, atomic_file_strerror(r));
        if ((r = write_full(af.fd, hdr, sizeof(hdr))) < 0 || (r = write_full(af.fd, text, text_len)) < 0 ||
            (sig_len > 0 && (r = write_full(af.fd, sig, sig_len)) < 0) ||
            (r = copy_range(payload_fd, 0, res.payload_bytes, af.fd, x, c.group_max, NULL)) < 0 ||
            (r = atomic_file_commit(&af)) < 0) {
                atomic_file_abort(&af);
                return tp_error(err, r, "%s: writing the bundle: %s", out_path, strerror(-r));
        }
        res.bundle_bytes = sizeof(hdr) + text_len + sig_len + res.payload_bytes;
        res.format = (unsigned) m->format;
        res.manifest_bytes = text_len;
        if (match) {
                memcpy(res.fates, match->count, sizeof(res.fates));
                res.sites_removed = match->n_removed;
                /* Nothing matched: every byte is new, a whole-file bundle (a different model). */
                res.whole_file = res.n_copy == 0 && res.n_delta == 0 && res.n_ref == 0;
        }
        if (ret) {
                *ret = res;
                res.costs = NULL;       /* the caller's now */
        }
        return 0;
}
