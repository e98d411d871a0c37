/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <string.h>

#include "diff.h"
#include "fileio.h"

#define DIFF_CHUNK (1u << 20)

Diff *diff_free(Diff *d) {
        if (!d)
                return NULL;
        free(d->regions);
        free(d);
        return NULL;
}

bool artifact_same_layout(const Artifact *a, const Artifact *b) {
        /* The fingerprints also bind a directory's file names and sizes. */
        if (a->kind != b->kind || a->size != b->size || a->n_sites != b->n_sites ||
            memcmp(a->layout, b->layout, sizeof(a->layout)) != 0)
                return false;
        for (size_t i = 0; i < a->n_sites; i++) {
                const Site *x = &a->sites[i], *y = &b->sites[i];
                if (x->offset != y->offset || x->length != y->length || x->type != y->type ||
                    strcmp(x->name, y->name) != 0)
                        return false;
        }
        return true;
}

typedef struct Scan {
        const FileSet *base_files, *target_files;
        uint8_t *a, *b;                 /* DIFF_CHUNK each */
        Diff *diff;
        size_t cap;
        TpError *err;
} Scan;

static int read_at(const FileSet *f, uint8_t *buf, size_t n, uint64_t off, const char *which, TpError *err) {
        int r = fileset_pread(f, buf, n, off);
        if (r == -ENODATA)
                return tp_error(err, -EIO, "the %s shrank while being read (offset %" PRIu64 ")", which, off);
        if (r < 0)
                return tp_error(err, r, "reading the %s at offset %" PRIu64 ": %s", which, off, strerror(-r));
        return 0;
}

static int add_region(Scan *s, uint64_t off, uint64_t len, uint64_t changed, ssize_t site) {
        Diff *d = s->diff;

        if (d->n_regions == s->cap) {
                size_t cap = s->cap ? 2 * s->cap : 64;
                DiffRegion *p = realloc(d->regions, cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                d->regions = p;
                s->cap = cap;
        }
        d->regions[d->n_regions++] = (DiffRegion) { off, len, changed, site };
        d->changed_bytes += changed;
        return 0;
}

/*
 * Compare [off, off + len) of both files. For a site (site >= 0) emit one
 * region from the first to the last differing byte; for gap bytes emit runs,
 * merging runs less than DIFF_GAP_MERGE bytes apart.
 */
static int scan_segment(Scan *s, uint64_t off, uint64_t len, ssize_t site) {
        uint64_t first = UINT64_MAX, last = 0, run_changed = 0;
        int r;

        for (uint64_t pos = off; pos < off + len;) {
                size_t n = off + len - pos < DIFF_CHUNK ? (size_t) (off + len - pos) : DIFF_CHUNK;
                if ((r = read_at(s->base_files, s->a, n, pos, "base", s->err)) < 0 ||
                    (r = read_at(s->target_files, s->b, n, pos, "target", s->err)) < 0)
                        return r;

                for (size_t i = 0; i < n;) {
                        /* Skip equal 8-byte words quickly; most of a model is unchanged. */
                        if (i + 8 <= n && memcmp(s->a + i, s->b + i, 8) == 0) {
                                i += 8;
                                continue;
                        }
                        if (s->a[i] == s->b[i]) {
                                i++;
                                continue;
                        }
                        uint64_t at = pos + i;
                        if (site < 0 && first != UINT64_MAX && at - last > DIFF_GAP_MERGE) {
                                r = add_region(s, first, last + 1 - first, run_changed, -1);
                                if (r < 0)
                                        return r;
                                first = UINT64_MAX;
                                run_changed = 0;
                        }
                        if (first == UINT64_MAX)
                                first = at;
                        last = at;
                        run_changed++;
                        i++;
                }
                pos += n;
        }

        if (first != UINT64_MAX) {
                r = add_region(s, first, last + 1 - first, run_changed, site);
                if (r < 0)
                        return r;
                if (site >= 0)
                        s->diff->sites_changed++;
        }
        return 0;
}

/* Bytes that differ in [0, @len) of both files, for the report of a layout change. */
static int count_differences(Scan *s, uint64_t len, uint64_t *ret) {
        uint64_t changed = 0;

        for (uint64_t pos = 0; pos < len;) {
                size_t n = len - pos < DIFF_CHUNK ? (size_t) (len - pos) : DIFF_CHUNK;
                int r;
                if ((r = read_at(s->base_files, s->a, n, pos, "base", s->err)) < 0 ||
                    (r = read_at(s->target_files, s->b, n, pos, "target", s->err)) < 0)
                        return r;
                for (size_t i = 0; i < n; i++)
                        changed += s->a[i] != s->b[i];
                pos += n;
        }
        *ret = changed;
        return 0;
}

int diff_compute(const FileSet *base_files, const Artifact *base, const FileSet *target_files, const Artifact *target, Diff **ret,
                 TpError *err) {
        _cleanup_(diff_freep) Diff *d = NULL;
        _cleanup_free_ uint8_t *a = NULL, *b = NULL;
        Scan s = { .base_files = base_files, .target_files = target_files, .err = err };
        int r;

        if (base->kind != target->kind)
                return tp_error(err, -EINVAL, "the base is %s but the target is %s: both must be the same kind",
                                artifact_kind_to_string(base->kind), artifact_kind_to_string(target->kind));

        d = calloc(1, sizeof(*d));
        a = malloc(DIFF_CHUNK);
        b = malloc(DIFF_CHUNK);
        if (!d || !a || !b)
                return -ENOMEM;
        s.diff = d;
        s.a = a;
        s.b = b;
        d->sites_total = target->n_sites;

        if (!artifact_same_layout(base, target)) {
                /* Layout change: one region for the whole target, exact byte counts for the report. */
                uint64_t common = base->size < target->size ? base->size : target->size;
                uint64_t changed;
                d->layout_changed = true;
                r = count_differences(&s, common, &changed);
                if (r < 0)
                        return r;
                changed += target->size - common;
                if (target->size > 0) {
                        r = add_region(&s, 0, target->size, changed, -1);
                        if (r < 0)
                                return r;
                }
                d->sites_changed = target->n_sites;
                *ret = TAKE_PTR(d);
                return 0;
        }

        uint64_t pos = 0;
        for (size_t i = 0; i <= target->n_sites; i++) {
                uint64_t gap_end = i < target->n_sites ? target->sites[i].offset : target->size;
                if (gap_end > pos) {
                        r = scan_segment(&s, pos, gap_end - pos, -1);
                        if (r < 0)
                                return r;
                }
                if (i == target->n_sites)
                        break;
                const Site *site = &target->sites[i];
                r = scan_segment(&s, site->offset, site->length, (ssize_t) i);
                if (r < 0)
                        return r;
                pos = site->offset + site->length;
        }

        *ret = TAKE_PTR(d);
        return 0;
}
