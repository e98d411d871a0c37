/* SPDX-License-Identifier: MIT */

#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include "gguf.h"
#include "siteset.h"

#define SITE_LIST_MAX_BYTES (16u << 20)
#define SITE_LINE_MAX_BYTES (64u << 10)      /* one line, newline included: a name is far shorter */

void site_set_done(SiteSet *s) {
        for (size_t i = 0; i < s->n; i++)
                free(s->names[i]);
        free(s->names);
        *s = (SiteSet) {};
}

static size_t lower_bound(const SiteSet *s, const char *name) {
        size_t lo = 0, hi = s->n;
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (strcmp(s->names[mid], name) < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

bool site_set_contains(const SiteSet *s, const char *name) {
        size_t i = lower_bound(s, name);
        return i < s->n && strcmp(s->names[i], name) == 0;
}

int site_set_add(SiteSet *s, const char *name) {
        size_t i = lower_bound(s, name);
        if (i < s->n && strcmp(s->names[i], name) == 0)
                return 0;
        char **p = realloc(s->names, (s->n + 1) * sizeof(char *));
        if (!p)
                return -ENOMEM;
        s->names = p;
        char *copy = strdup(name);
        if (!copy)
                return -ENOMEM;
        memmove(s->names + i + 1, s->names + i, (s->n - i) * sizeof(char *));
        s->names[i] = copy;
        s->n++;
        return 1;
}

static int load_adapter(int fd, const char *path, SiteSet *set, TpError *err) {
        _cleanup_(gguf_freep) Gguf *g = NULL;
        static const char suffix[] = ".lora_a";
        int r = gguf_read(fd, &g, err);

        if (r < 0)
                return tp_error_prefix(err, r, "%s", path);
        for (uint64_t i = 0; i < g->n_tensors; i++) {
                const char *name = g->tensors[i].name;
                size_t len = strlen(name);
                if (len <= sizeof(suffix) - 1 || strcmp(name + len - (sizeof(suffix) - 1), suffix) != 0)
                        continue;
                _cleanup_free_ char *site = strndup(name, len - (sizeof(suffix) - 1));
                if (!site || (r = site_set_add(set, site)) < 0)
                        return -ENOMEM;
        }
        if (set->n == 0)
                return tp_error(err, -EINVAL, "%s: a GGUF without any '*.lora_a' tensor: not a LoRA adapter", path);
        return 0;
}

/*
 * The next line of @f into @buf (NUL-terminated, newline kept): its length, 0 at the end, or -EFBIG
 * when it has more than @max bytes. getline() would grow one endless line without bound.
 */
static ssize_t read_line(FILE *f, char *buf, size_t max) {
        size_t n = 0;
        int c;

        while (n < max && (c = getc(f)) != EOF) {
                buf[n++] = (char) c;
                if (c == '\n')
                        break;
        }
        if (n == max && buf[n - 1] != '\n' && (c = getc(f)) != EOF)
                return -EFBIG;
        buf[n] = '\0';
        return (ssize_t) n;
}

static int load_text(FILE *f, const char *path, SiteSet *set, TpError *err) {
        _cleanup_free_ char *line = malloc(SITE_LINE_MAX_BYTES + 1);
        size_t total = 0;
        ssize_t n;
        unsigned lineno = 0;
        int r = 0;

        if (!line)
                return -ENOMEM;
        while ((n = read_line(f, line, SITE_LINE_MAX_BYTES)) != 0) {
                lineno++;
                if (n < 0)
                        return tp_error(err, -EFBIG, "%s: line %u is longer than %u bytes", path, lineno,
                                        SITE_LINE_MAX_BYTES);
                total += (size_t) n;
                if (total > SITE_LIST_MAX_BYTES)
                        return tp_error(err, -EFBIG, "%s: larger than %u bytes", path, SITE_LIST_MAX_BYTES);
                while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
                        line[--n] = '\0';
                char *p = line;
                while (*p == ' ' || *p == '\t')
                        p++;
                if (*p == '\0' || *p == '#')
                        continue;
                if (strlen(p) != (size_t) (n - (p - line)))
                        return tp_error(err, -EINVAL, "%s: line %u holds a NUL byte", path, lineno);
                if ((r = site_set_add(set, p)) < 0)
                        return r;
        }
        if (ferror(f))
                return tp_error(err, -EIO, "%s: read error", path);
        return 0;
}

int site_set_load(const char *path, SiteSet *ret, TpError *err) {
        SiteSet set = {};
        char magic[4] = {};
        int r;

        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
        if (pread(fd, magic, sizeof(magic), 0) == (ssize_t) sizeof(magic) && memcmp(magic, "GGUF", 4) == 0) {
                r = load_adapter(fd, path, &set, err);
                close(fd);
        } else {
                FILE *f = fdopen(fd, "re");
                if (!f) {
                        close(fd);
                        return -ENOMEM;
                }
                r = load_text(f, path, &set, err);
                fclose(f);
        }
        if (r < 0) {
                site_set_done(&set);
                return r;
        }
        *ret = set;
        return 0;
}
