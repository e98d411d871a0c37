/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "delta.h"
#include "fileio.h"
#include "match.h"
#include "onnx.h"
#include "safetensors.h"

#define MATCH_CHUNK (1u << 20)
#define MATCH_MIN_COPY 4096             /* a site's unchanged head or tail shorter than this stays in its span */
#define MATCH_SMALL_GAP 64              /* changed gap bytes this short are raw: a reference costs more */
#define MATCH_SMALL_COPY 256            /* a copy this short between coded pieces joins them: a span line costs more */
#define MATCH_SMALL_DELTA 4096          /* a changed window this short may join its neighbours' reference */

static const char *const fate_table[_SITE_FATE_MAX] = {
        [SITE_SAME] = "same",       [SITE_MOVED] = "moved",     [SITE_RENAMED] = "renamed",
        [SITE_CHANGED] = "changed", [SITE_RESIZED] = "resized", [SITE_ADDED] = "added",
};

const char *site_fate_to_string(SiteFate f) {
        return f >= 0 && f < _SITE_FATE_MAX ? fate_table[f] : NULL;
}

Match *match_free(Match *m) {
        if (!m)
                return NULL;
        free(m->pieces);
        free(m->fate);
        free(m->counterpart);
        free(m->removed);
        free(m);
        return NULL;
}

typedef struct Matcher {
        const FileSet *base_files, *target_files;
        const Artifact *base, *target;
        uint8_t *a, *b;                 /* MATCH_CHUNK each */
        size_t *by_name;                /* base site indices sorted by name */
        size_t *t_by_name;              /* target site indices sorted by name */
        bool *used;                     /* per base site: some target site took it */
        Match *m;
        size_t cap;
        TpError *err;
} Matcher;

static int read_at(Matcher *x, const FileSet *f, uint8_t *buf, size_t n, uint64_t off) {
        int r = fileset_pread(f, buf, n, off);
        if (r < 0)
                return tp_error(x->err, r == -ENODATA ? -EIO : r, "reading the %s at offset %" PRIu64 ": %s",
                                f == x->base_files ? "base" : "target", off, strerror(r == -ENODATA ? EIO : -r));
        return 0;
}

/*
 * Compare base [boff, +len) with target [toff, +len): *ret_first and *ret_last
 * are the first and last differing bytes (relative), first == len when equal.
 * With @stop_at_first, the scan ends at the first difference.
 */
static int compare(Matcher *x, uint64_t boff, uint64_t toff, uint64_t len, bool stop_at_first, uint64_t *ret_first,
                   uint64_t *ret_last) {
        uint64_t first = len, last = 0;
        int r;

        for (uint64_t pos = 0; pos < len;) {
                size_t n = len - pos < MATCH_CHUNK ? (size_t) (len - pos) : MATCH_CHUNK;
                if ((r = read_at(x, x->base_files, x->a, n, boff + pos)) < 0 ||
                    (r = read_at(x, x->target_files, x->b, n, toff + pos)) < 0)
                        return r;
                if (memcmp(x->a, x->b, n) != 0) {
                        size_t i = 0, j = n;
                        while (x->a[i] == x->b[i])
                                i++;
                        while (x->a[j - 1] == x->b[j - 1])
                                j--;
                        if (first == len)
                                first = pos + i;
                        last = pos + j - 1;
                        if (stop_at_first)
                                break;
                }
                pos += n;
        }
        *ret_first = first;
        if (ret_last)
                *ret_last = last;
        return 0;
}

static bool piece_continues(const MatchPiece *p, const MatchPiece *q) {
        if (p->offset + p->length != q->offset)
                return false;
        if (p->kind == MATCH_COPY && q->kind == MATCH_COPY)
                return p->base_offset + p->length == q->base_offset;
        /* Raw bytes next to raw bytes are one frame; gap bytes join a new site's span. */
        return p->kind == MATCH_NEW && q->kind == MATCH_NEW && (p->site < 0 || q->site < 0);
}

static int emit(Matcher *x, MatchPiece q) {
        Match *m = x->m;

        if (q.length == 0)
                return 0;
        if (m->n_pieces > 0 && piece_continues(&m->pieces[m->n_pieces - 1], &q)) {
                MatchPiece *p = &m->pieces[m->n_pieces - 1];
                p->length += q.length;
                if (p->kind == MATCH_COPY)
                        p->base_length = p->length;
                if (p->site < 0 || (q.site >= 0 && q.site != p->site))
                        p->site = p->kind == MATCH_NEW && p->site < 0 ? q.site : -1;
                return 0;
        }
        if (m->n_pieces == x->cap) {
                size_t cap = x->cap ? 2 * x->cap : 256;
                MatchPiece *p = realloc(m->pieces, cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                m->pieces = p;
                x->cap = cap;
        }
        m->pieces[m->n_pieces++] = q;
        return 0;
}

/*
 * Target bytes [toff, +tlen) coded against base bytes [boff, +blen) that play
 * the same part (a header, a resized site's rest): pieces of MATCH_REF_PIECE,
 * each referring to the base bytes at the proportional place, with slack on
 * either side, at most MATCH_REF_MAX of them.
 */
static int emit_ref(Matcher *x, uint64_t toff, uint64_t tlen, uint64_t boff, uint64_t blen, ssize_t site) {
        for (uint64_t pos = 0; pos < tlen;) {
                uint64_t n = tlen - pos < MATCH_REF_PIECE ? tlen - pos : MATCH_REF_PIECE;
                uint64_t center = (uint64_t) ((double) pos * (double) blen / (double) tlen);
                uint64_t start = center > MATCH_REF_SLACK ? center - MATCH_REF_SLACK : 0;
                uint64_t end = center + n + MATCH_REF_SLACK;
                if (end > blen)
                        end = blen;
                if (end - start > MATCH_REF_MAX)
                        end = start + MATCH_REF_MAX;
                MatchPiece q = { toff + pos, n, end > start ? MATCH_REF : MATCH_NEW, boff + start, end - start, site };
                if (q.kind == MATCH_NEW)
                        q.base_offset = q.base_length = 0;
                int r = emit(x, q);
                if (r < 0)
                        return r;
                pos += n;
        }
        return 0;
}

/* Gap bytes [toff, +tlen) whose counterpart in the base is [boff, +blen) (blen 0: none). */
static int plan_gap(Matcher *x, uint64_t toff, uint64_t tlen, uint64_t boff, uint64_t blen) {
        uint64_t first;
        int r;

        if (tlen == 0)
                return 0;
        if (blen == tlen) {
                if ((r = compare(x, boff, toff, tlen, true, &first, NULL)) < 0)
                        return r;
                if (first == tlen)
                        return emit(x, (MatchPiece) { toff, tlen, MATCH_COPY, boff, tlen, -1 });
        }
        if (blen == 0 || tlen < MATCH_SMALL_GAP)
                return emit(x, (MatchPiece) { toff, tlen, MATCH_NEW, 0, 0, -1 });
        return emit_ref(x, toff, tlen, boff, blen, -1);
}

static int cmp_by_name(const void *a, const void *b, void *userdata) {
        const Artifact *art = userdata;
        return strcmp(art->sites[*(const size_t *) a].name, art->sites[*(const size_t *) b].name);
}

static ssize_t find_by_name(const Artifact *art, const size_t *index, const char *name) {
        size_t lo = 0, hi = art->n_sites;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(art->sites[index[mid]].name, name);
                if (c == 0)
                        return (ssize_t) index[mid];
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return -1;
}

static int sort_by_name(const Artifact *art, size_t **ret) {
        size_t *idx = calloc(art->n_sites ? art->n_sites : 1, sizeof(size_t));
        if (!idx)
                return -ENOMEM;
        for (size_t i = 0; i < art->n_sites; i++)
                idx[i] = i;
        qsort_r(idx, art->n_sites, sizeof(size_t), cmp_by_name, (void *) art);
        *ret = idx;
        return 0;
}

/* A base site no target site is named after, with exactly @t's bytes: a rename. */
static int find_renamed(Matcher *x, const Site *t, ssize_t *ret) {
        *ret = -1;
        for (size_t j = 0; j < x->base->n_sites; j++) {
                const Site *b = &x->base->sites[j];
                uint64_t first;
                int r;
                if (x->used[j] || b->length != t->length || b->type != t->type || t->length == 0)
                        continue;
                if (find_by_name(x->target, x->t_by_name, b->name) >= 0)
                        continue;
                if ((r = compare(x, b->offset, t->offset, t->length, true, &first, NULL)) < 0)
                        return r;
                if (first == t->length) {
                        *ret = (ssize_t) j;
                        return 0;
                }
        }
        return 0;
}

/* The base gap that follows base site @j (up to the next site or the end). */
static void gap_after(const Artifact *a, ssize_t j, uint64_t *ret_off, uint64_t *ret_len) {
        uint64_t start = j < 0 ? 0 : a->sites[j].offset + a->sites[j].length;
        uint64_t end = (size_t) (j + 1) < a->n_sites ? a->sites[j + 1].offset : a->size;
        *ret_off = start;
        *ret_len = end > start ? end - start : 0;
}

DeltaLayout site_delta_layout(const Artifact *a, const Site *s) {
        if (a->kind == ARTIFACT_GGUF)
                return delta_layout_for_ggml((uint32_t) s->type);
        if (a->kind == ARTIFACT_ONNX)
                return delta_layout_for_onnx(s->type);
        if (a->kind == ARTIFACT_SAFETENSORS)
                return s->type == SAFETENSORS_F32 ? DELTA_F32 : s->type == SAFETENSORS_F16 ? DELTA_F16
                                                  : s->type == SAFETENSORS_BF16 ? DELTA_BF16 : DELTA_BYTES;
        return DELTA_BYTES;
}

DeltaLayout site_delta_layout_relocating(const Artifact *a, const Site *s) {
        if (a->kind == ARTIFACT_ONNX && (s->type == ONNX_TYPE_INT8 || s->type == ONNX_TYPE_UINT8))
                return DELTA_I8AC;
        return site_delta_layout(a, s);
}

/* Target site @i: its counterpart by name (or a rename), and how its bytes are made. */
static int plan_site(Matcher *x, size_t i) {
        const Site *t = &x->target->sites[i];
        ssize_t j = find_by_name(x->base, x->by_name, t->name);
        uint64_t first, last;
        int r;

        if (j < 0 && (r = find_renamed(x, t, &j)) < 0)
                return r;
        x->m->counterpart[i] = j;
        if (j < 0) {
                x->m->fate[i] = SITE_ADDED;
                return emit(x, (MatchPiece) { t->offset, t->length, MATCH_NEW, 0, 0, (ssize_t) i });
        }
        const Site *b = &x->base->sites[j];
        bool renamed = strcmp(b->name, t->name) != 0;
        x->used[j] = true;

        if (b->length == t->length && b->type == t->type) {
                if ((r = compare(x, b->offset, t->offset, t->length, false, &first, &last)) < 0)
                        return r;
                if (first == t->length) {
                        x->m->fate[i] = renamed ? SITE_RENAMED : b->offset == t->offset ? SITE_SAME : SITE_MOVED;
                        return emit(x, (MatchPiece) { t->offset, t->length, MATCH_COPY, b->offset, t->length, (ssize_t) i });
                }
                x->m->fate[i] = SITE_CHANGED;
                /* The changed window in whole delta units; unchanged ends worth a copy stay copies. */
                DeltaLayout layout = site_delta_layout_relocating(x->target, t);
                uint64_t unit = delta_unit(layout);
                if (t->length % unit != 0)
                        layout = DELTA_BYTES, unit = 1;
                uint64_t start = first / unit * unit, end = (last / unit + 1) * unit;
                if (start < MATCH_MIN_COPY)
                        start = 0;
                if (t->length - end < MATCH_MIN_COPY)
                        end = t->length;
                if ((r = emit(x, (MatchPiece) { t->offset, start, MATCH_COPY, b->offset, start, (ssize_t) i })) < 0 ||
                    (r = emit(x, (MatchPiece) { t->offset + start, end - start, MATCH_CHANGED, b->offset + start,
                                                end - start, (ssize_t) i, layout })) < 0)
                        return r;
                return emit(x, (MatchPiece) { t->offset + end, t->length - end, MATCH_COPY, b->offset + end,
                                              t->length - end, (ssize_t) i });
        }

        x->m->fate[i] = SITE_RESIZED;
        if (b->type != t->type)                 /* retyped: nothing to refer to byte-wise */
                return emit(x, (MatchPiece) { t->offset, t->length, MATCH_NEW, 0, 0, (ssize_t) i });
        /* Rows added or removed: the common head is a copy, the rest refers to the base site's bytes. */
        uint64_t common = b->length < t->length ? b->length : t->length;
        if ((r = compare(x, b->offset, t->offset, common, true, &first, NULL)) < 0)
                return r;
        uint64_t head = first < MATCH_MIN_COPY ? 0 : first;
        if ((r = emit(x, (MatchPiece) { t->offset, head, MATCH_COPY, b->offset, head, (ssize_t) i })) < 0)
                return r;
        return emit_ref(x, t->offset + head, t->length - head, b->offset + (head < b->length ? head : 0),
                        head < b->length ? b->length - head : b->length, (ssize_t) i);
}

/* Whether piece @p may join a run of small coded pieces (coalesce()). */
static bool joinable(const MatchPiece *p) {
        switch (p->kind) {
        case MATCH_COPY:
                return p->length < MATCH_SMALL_COPY;
        case MATCH_CHANGED:
                return p->length < MATCH_SMALL_DELTA;
        default:
                return p->length < MATCH_REF_PIECE;
        }
}

/*
 * Small neighbours become one span: a run of short coded pieces (protobuf framing between an
 * ONNX classifier's resized initializers, say) and the short copies between them are one ref
 * piece against the base bytes they all read, or one raw piece when none reads any. Each span
 * costs a manifest line with its hashes; a run of them costs more than the bytes.
 */
static void coalesce(Match *m) {
        size_t out = 0;

        for (size_t i = 0; i < m->n_pieces;) {
                size_t j = i;
                uint64_t len = 0, lo = UINT64_MAX, hi = 0;
                unsigned coded = 0;
                while (j < m->n_pieces && joinable(&m->pieces[j]) && len + m->pieces[j].length <= MATCH_REF_PIECE) {
                        const MatchPiece *p = &m->pieces[j];
                        uint64_t nlo = lo, nhi = hi;
                        if (p->base_length > 0) {
                                nlo = p->base_offset < lo ? p->base_offset : lo;
                                nhi = p->base_offset + p->base_length > hi ? p->base_offset + p->base_length : hi;
                                if (nhi - nlo > MATCH_REF_MAX)
                                        break;
                        }
                        lo = nlo, hi = nhi;
                        len += p->length;
                        coded += p->kind != MATCH_COPY;
                        j++;
                }
                /* Worth it only when two coded pieces or more join (a lone one stays as it is), and a run
                 * may neither start nor end with a copy (it would just be a shorter copy). */
                while (j > i + 1 && m->pieces[j - 1].kind == MATCH_COPY) {
                        j--;
                        len -= m->pieces[j].length;
                }
                if (j > i + 1 && m->pieces[i].kind != MATCH_COPY && coded >= 2) {
                        MatchPiece q = { m->pieces[i].offset, len, MATCH_NEW, 0, 0, m->pieces[i].site };
                        lo = UINT64_MAX, hi = 0;
                        for (size_t k = i; k < j; k++) {
                                const MatchPiece *p = &m->pieces[k];
                                if (p->site != q.site)
                                        q.site = -1;
                                if (p->base_length > 0) {
                                        lo = p->base_offset < lo ? p->base_offset : lo;
                                        hi = p->base_offset + p->base_length > hi ? p->base_offset + p->base_length : hi;
                                }
                        }
                        if (hi > lo)
                                q = (MatchPiece) { q.offset, len, MATCH_REF, lo, hi - lo, q.site };
                        m->pieces[out++] = q;
                        i = j;
                } else {
                        m->pieces[out++] = m->pieces[i++];
                }
        }
        m->n_pieces = out;
}

/* Whether @q reads the base at @p's displacement (target offset to base offset). */
static bool same_shift(const MatchPiece *p, const MatchPiece *q) {
        return q->base_offset - q->offset == p->base_offset - p->offset;
}

/*
 * Changed pieces at one displacement, with the copies between them, as one changed piece: a copy
 * codes to zeros in the delta, a few bytes per 128 KiB zstd block, where a span of its own costs a
 * manifest entry with its hash and splits the delta into two frames with their own tables. The
 * run's layout is its first piece's; a later piece joins in that layout when it is of the same
 * layout and whole units from the run's start, or short (MATCH_SMALL_DELTA: coded in the run's
 * layout, which only costs compression); the run ends with a changed piece, whole units long.
 */
static void fold_deltas(Match *m, const bool *alone) {
        size_t out = 0;

        for (size_t i = 0; i < m->n_pieces;) {
                MatchPiece run = m->pieces[i];
                size_t last = i;        /* the last piece of the run */

                if (run.kind == MATCH_CHANGED && !(run.site >= 0 && alone[run.site])) {
                        uint64_t unit = delta_unit(run.layout);
                        for (size_t k = i + 1; k < m->n_pieces; k++) {
                                const MatchPiece *p = &m->pieces[k];
                                if (p->offset != m->pieces[k - 1].offset + m->pieces[k - 1].length ||
                                    !same_shift(&run, p))
                                        break;
                                if (p->kind == MATCH_COPY) {
                                        if (p->length > MATCH_FOLD_COPY)
                                                break;
                                        continue;
                                }
                                if (p->kind != MATCH_CHANGED || (p->site >= 0 && alone[p->site]))
                                        break;
                                bool fits = p->layout == run.layout ? (p->offset - run.offset) % unit == 0 :
                                                                      p->length <= MATCH_SMALL_DELTA;
                                if (!fits)
                                        break;
                                if ((p->offset + p->length - run.offset) % unit == 0)
                                        last = k;
                        }
                }
                for (size_t k = i + 1; k <= last; k++) {
                        if (m->pieces[k].site != run.site)
                                run.site = -1;
                        run.length = m->pieces[k].offset + m->pieces[k].length - run.offset;
                        run.base_length = run.length;
                        /* float32 tensors among int8 ones (an ONNX graph's scales): i8acp may predict them */
                        if (run.layout == DELTA_I8AC && m->pieces[k].layout == DELTA_F32)
                                run.layout = DELTA_I8ACP;
                }
                m->pieces[out++] = run;
                i = last + 1;
        }
        m->n_pieces = out;
}

/*
 * Whether ref piece @r can take in @p: a copy or raw bytes short enough, whose base bytes fit one
 * reference, while the span stays within MATCH_REF_SPAN (its reference stays inside zstd's window).
 */
static bool ref_takes(const MatchPiece *r, const MatchPiece *p, uint64_t *ret_lo, uint64_t *ret_hi) {
        uint64_t lo = r->base_offset, hi = r->base_offset + r->base_length;

        if (r->length + p->length > MATCH_REF_SPAN)
                return false;

        switch (p->kind) {
        case MATCH_COPY:
                if (p->length > MATCH_FOLD_COPY)
                        return false;
                break;
        case MATCH_NEW:
                if (p->length > MATCH_SMALL_DELTA)
                        return false;
                break;
        case MATCH_REF:
                break;
        default:
                return false;
        }
        if (p->base_length > 0) {
                lo = p->base_offset < lo ? p->base_offset : lo;
                hi = p->base_offset + p->base_length > hi ? p->base_offset + p->base_length : hi;
        }
        if (hi - lo > MATCH_REF_MAX)
                return false;
        *ret_lo = lo, *ret_hi = hi;
        return true;
}

static void ref_take(MatchPiece *r, const MatchPiece *p, uint64_t lo, uint64_t hi) {
        uint64_t start = p->offset < r->offset ? p->offset : r->offset;
        uint64_t end = p->offset + p->length > r->offset + r->length ? p->offset + p->length : r->offset + r->length;

        if (p->site != r->site)
                r->site = -1;
        *r = (MatchPiece) { start, end - start, MATCH_REF, lo, hi - lo, r->site };
}

/*
 * A ref piece takes in the copies and short raw pieces on either side (and neighbouring ref
 * pieces) while their base bytes fit one reference: a copy inside a reference is one match of
 * a few bytes, raw bytes are the same literals in either frame, and each is a span less.
 */
static void fold_refs(Match *m) {
        size_t out = 0;
        uint64_t lo, hi;

        for (size_t i = 0; i < m->n_pieces; i++) {
                MatchPiece q = m->pieces[i];
                if (q.kind == MATCH_REF) {
                        /* Backwards into what is already out, then forwards. */
                        while (out > 0 && ref_takes(&q, &m->pieces[out - 1], &lo, &hi))
                                ref_take(&q, &m->pieces[--out], lo, hi);
                        while (i + 1 < m->n_pieces && ref_takes(&q, &m->pieces[i + 1], &lo, &hi))
                                ref_take(&q, &m->pieces[++i], lo, hi);
                }
                m->pieces[out++] = q;
        }
        m->n_pieces = out;
}

int match_compute(const FileSet *base_files, const Artifact *base, const FileSet *target_files, const Artifact *target,
                  const MatchOptions *o, Match **ret, TpError *err) {
        _cleanup_(match_freep) Match *m = NULL;
        _cleanup_free_ uint8_t *a = NULL, *b = NULL;
        _cleanup_free_ size_t *by_name = NULL, *t_by_name = NULL;
        _cleanup_free_ bool *used = NULL, *alone = NULL;
        Matcher x = { .base_files = base_files, .target_files = target_files, .base = base, .target = target, .err = err };
        int r;

        if (base->kind != target->kind)
                return tp_error(err, -EINVAL, "the base is %s but the target is %s: both must be the same kind",
                                artifact_kind_to_string(base->kind), artifact_kind_to_string(target->kind));
        m = calloc(1, sizeof(*m));
        a = malloc(MATCH_CHUNK);
        b = malloc(MATCH_CHUNK);
        used = calloc(base->n_sites ? base->n_sites : 1, sizeof(bool));
        alone = calloc(target->n_sites ? target->n_sites : 1, sizeof(bool));
        if (!m || !a || !b || !used || !alone)
                return -ENOMEM;
        for (size_t i = 0; i < target->n_sites; i++)
                alone[i] = o && o->own_span && o->own_span(&target->sites[i], o->userdata);
        m->fate = calloc(target->n_sites ? target->n_sites : 1, sizeof(SiteFate));
        m->counterpart = calloc(target->n_sites ? target->n_sites : 1, sizeof(ssize_t));
        m->removed = calloc(base->n_sites ? base->n_sites : 1, sizeof(size_t));
        if (!m->fate || !m->counterpart || !m->removed)
                return -ENOMEM;
        if ((r = sort_by_name(base, &by_name)) < 0 || (r = sort_by_name(target, &t_by_name)) < 0)
                return r;
        x = (Matcher) { .base_files = base_files, .target_files = target_files, .base = base, .target = target, .a = a, .b = b,
                        .by_name = by_name, .t_by_name = t_by_name, .used = used, .m = m, .err = err };

        /* Header bytes before the first site: against the base's. */
        uint64_t goff, glen;
        gap_after(base, -1, &goff, &glen);
        uint64_t tend = target->n_sites ? target->sites[0].offset : target->size;
        if ((r = plan_gap(&x, 0, tend, goff, glen)) < 0)
                return r;
        for (size_t i = 0; i < target->n_sites; i++) {
                if ((r = plan_site(&x, i)) < 0)
                        return r;
                /* The gap after it (padding, framing): against the gap after its counterpart. */
                uint64_t tstart = target->sites[i].offset + target->sites[i].length;
                tend = i + 1 < target->n_sites ? target->sites[i + 1].offset : target->size;
                glen = 0;
                if (m->counterpart[i] >= 0)
                        gap_after(base, m->counterpart[i], &goff, &glen);
                if ((r = plan_gap(&x, tstart, tend > tstart ? tend - tstart : 0, goff, glen)) < 0)
                        return r;
        }
        fold_deltas(m, alone);
        coalesce(m);
        fold_refs(m);
        for (size_t j = 0; j < base->n_sites; j++)
                if (!used[j])
                        m->removed[m->n_removed++] = j;
        for (size_t i = 0; i < target->n_sites; i++)
                m->count[m->fate[i]]++;
        *ret = TAKE_PTR(m);
        return 0;
}
