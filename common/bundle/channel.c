/* SPDX-License-Identifier: MIT */

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bundle.h"
#include "channel.h"
#include "fileio.h"
#include "le.h"
#include "sign.h"
#include "yaml-doc.h"
#include "yaml-write.h"

#define W "channel"

Channel *channel_free(Channel *c) {
        if (!c)
                return NULL;
        free(c->bundles);
        free(c->index_text);
        free(c->signature);
        free(c);
        return NULL;
}

bool channel_path_valid(const char *path) {
        size_t len = strlen(path), comp = 0;

        if (len == 0 || len > CHANNEL_PATH_MAX || path[0] == '/')
                return false;
        for (size_t i = 0; i <= len; i++) {
                char ch = path[i];
                if (ch == '/' || ch == '\0') {
                        /* empty, "." and ".." components */
                        if (comp == 0 || (comp == 1 && path[i - 1] == '.') ||
                            (comp == 2 && path[i - 1] == '.' && path[i - 2] == '.'))
                                return false;
                        comp = 0;
                        continue;
                }
                if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                      ch == '_' || ch == '-' || ch == '+'))
                        return false;
                comp++;
        }
        return true;
}

static int compare_bundles(const void *a, const void *b) {
        const ChannelBundle *x = a, *y = b;
        int c = strcmp(x->task, y->task);
        return c ? c : (x->version > y->version) - (x->version < y->version);
}

const ChannelBundle *channel_find(const Channel *c, const char *task) {
        const ChannelBundle *found = NULL;
        for (size_t i = 0; i < c->n_bundles; i++)
                if (strcmp(c->bundles[i].task, task) == 0)
                        found = &c->bundles[i];         /* sorted: the last is the newest */
        return found;
}

/* ---- parsing ---- */

static int parse_bundle(const YamlNode *n, size_t idx, ChannelBundle *b, TpError *err) {
        static const char *const keys[] = { "task", "version", "path", "size", "sha256", "kind", "base_sha256",
                                            "base_layout", NULL };
        const char *task, *path, *kind;
        int r;

        if (n->kind != YAML_MAPPING)
                return tp_error(err, -EBADMSG, W ": line %u: bundle #%zu is not a mapping", n->line, idx);
        if ((r = yaml_check_keys(n, keys, W, err)) < 0 || (r = yaml_get_str(n, "task", true, W, &task, err)) < 0 ||
            (r = yaml_get_u64(n, "version", true, W, &b->version, err)) < 0 ||
            (r = yaml_get_str(n, "path", true, W, &path, err)) < 0 ||
            (r = yaml_get_u64(n, "size", true, W, &b->size, err)) < 0 ||
            (r = yaml_get_sha256(n, "sha256", true, W, b->sha256, err)) < 0 ||
            (r = yaml_get_str(n, "kind", true, W, &kind, err)) < 0 ||
            (r = yaml_get_sha256(n, "base_sha256", true, W, b->base_sha256, err)) < 0 ||
            (r = yaml_get_sha256(n, "base_layout", true, W, b->base_layout, err)) < 0)
                return r;
        if (!task_name_valid(task))
                return tp_error(err, -EBADMSG, W ": line %u: invalid task name '%.80s'", n->line, task);
        if (!channel_path_valid(path))
                return tp_error(err, -EBADMSG, W ": line %u: path '%.80s' is not a plain relative path", n->line,
                                path);
        b->kind = artifact_kind_from_string(kind);
        if (b->kind < 0)
                return tp_error(err, -EBADMSG, W ": line %u: unknown kind '%.32s'", n->line, kind);
        if (b->size < BUNDLE_HEADER_SIZE)
                return tp_error(err, -EBADMSG, W ": line %u: size %" PRIu64 " is smaller than a bundle header",
                                n->line, b->size);
        snprintf(b->task, sizeof(b->task), "%s", task);
        snprintf(b->path, sizeof(b->path), "%s", path);
        return 0;
}

static int parse_index(Channel *c, TpError *err) {
        static const char *const keys[] = { "format", "channel", "serial", "created", "expires", "desired", "bundles",
                                            NULL };
        _cleanup_(yaml_node_freep) YamlNode *root = NULL;
        const YamlNode *bundles;
        const char *name, *desired = NULL;
        uint64_t format;
        int r;

        if ((r = yaml_doc_parse(c->index_text, c->index_len, CHANNEL_MAX_INDEX, W, &root, err)) < 0 ||
            (r = yaml_check_keys(root, keys, W, err)) < 0 || (r = yaml_get_u64(root, "format", true, W, &format, err)) < 0)
                return r;
        if (format != CHANNEL_FORMAT)
                return tp_error(err, -EPROTONOSUPPORT, W ": format %" PRIu64 " is not supported (this build reads %d)",
                                format, CHANNEL_FORMAT);
        if ((r = yaml_get_str(root, "channel", true, W, &name, err)) < 0 ||
            (r = yaml_get_u64(root, "serial", true, W, &c->serial, err)) < 0 ||
            (r = yaml_get_time(root, "created", true, W, &c->created, err)) < 0 ||
            (r = yaml_get_time(root, "expires", false, W, &c->expires, err)) < 0 ||
            (r = yaml_get_str(root, "desired", false, W, &desired, err)) < 0 ||
            (r = yaml_get_seq(root, "bundles", true, W, &bundles, err)) < 0)
                return r;
        if (!task_name_valid(name))
                return tp_error(err, -EBADMSG, W ": invalid channel name '%.80s' (expected [a-z0-9][a-z0-9._-]{0,63})",
                                name);
        snprintf(c->name, sizeof(c->name), "%s", name);
        if (desired) {
                if (!task_name_valid(desired))
                        return tp_error(err, -EBADMSG, W ": invalid desired task '%.80s'", desired);
                snprintf(c->desired, sizeof(c->desired), "%s", desired);
        }
        if (bundles->n > CHANNEL_MAX_BUNDLES)
                return tp_error(err, -E2BIG, W ": line %u: %zu bundles exceed the cap of %u", bundles->line,
                                bundles->n, CHANNEL_MAX_BUNDLES);
        c->bundles = calloc(bundles->n ? bundles->n : 1, sizeof(ChannelBundle));
        if (!c->bundles)
                return -ENOMEM;
        for (size_t i = 0; i < bundles->n; i++) {
                if ((r = parse_bundle(bundles->items[i], i, &c->bundles[i], err)) < 0)
                        return r;
                if (i > 0 && compare_bundles(&c->bundles[i - 1], &c->bundles[i]) >= 0)
                        return tp_error(err, -EBADMSG, W ": line %u: bundle %s v%" PRIu64
                                        " is out of order or repeated (sorted by task, then version)",
                                        bundles->items[i]->line, c->bundles[i].task, c->bundles[i].version);
                c->n_bundles = i + 1;
        }
        if (c->desired[0] && !channel_find(c, c->desired))
                return tp_error(err, -EBADMSG, W ": desired task '%s' has no bundle in the channel", c->desired);
        return 0;
}

int channel_parse(const uint8_t *data, size_t len, const char *what, Channel **ret, TpError *err) {
        _cleanup_(channel_freep) Channel *c = NULL;
        uint64_t index_size, signature_size;
        int r;

        if (len < CHANNEL_HEADER_SIZE)
                return tp_error(err, -EBADMSG, "%s: %zu bytes, shorter than a channel header", what, len);
        if (memcmp(data, CHANNEL_MAGIC, 8) != 0)
                return tp_error(err, -EBADMSG, "%s: not a TaskPatch channel (bad magic)", what);
        if (get_le32(data + 8) != CHANNEL_FORMAT)
                return tp_error(err, -EPROTONOSUPPORT, "%s: channel file format %" PRIu32 " is not supported", what,
                                get_le32(data + 8));
        if (get_le32(data + 12) != 0)
                return tp_error(err, -EBADMSG, "%s: header: unknown flags 0x%08" PRIx32, what, get_le32(data + 12));
        for (unsigned i = 32; i < CHANNEL_HEADER_SIZE; i++)
                if (data[i] != 0)
                        return tp_error(err, -EBADMSG, "%s: header: reserved byte %u is not zero", what, i);
        index_size = get_le64(data + 16);
        signature_size = get_le64(data + 24);
        if (index_size == 0 || index_size > CHANNEL_MAX_INDEX)
                return tp_error(err, -EBADMSG, "%s: header: index size %" PRIu64 " is outside 1..%u", what, index_size,
                                CHANNEL_MAX_INDEX);
        if (signature_size == 0)
                return tp_error(err, -EKEYREJECTED, "%s: the channel is unsigned", what);
        if (signature_size > BUNDLE_MAX_SIGNATURE)
                return tp_error(err, -EBADMSG, "%s: header: signature size %" PRIu64 " exceeds the %u-byte cap", what,
                                signature_size, BUNDLE_MAX_SIGNATURE);
        if (len - CHANNEL_HEADER_SIZE != index_size + signature_size)
                return tp_error(err, -EBADMSG, "%s: header: sections add up to %" PRIu64 " bytes, the file has %zu "
                                "(truncated or padded?)", what, CHANNEL_HEADER_SIZE + index_size + signature_size, len);

        c = calloc(1, sizeof(Channel));
        if (!c)
                return -ENOMEM;
        c->index_len = (size_t) index_size;
        c->signature_len = (size_t) signature_size;
        c->index_text = malloc(c->index_len);
        c->signature = malloc(c->signature_len);
        if (!c->index_text || !c->signature)
                return -ENOMEM;
        memcpy(c->index_text, data + CHANNEL_HEADER_SIZE, c->index_len);
        memcpy(c->signature, data + CHANNEL_HEADER_SIZE + c->index_len, c->signature_len);
        if ((r = parse_index(c, err)) < 0)
                return tp_error_prefix(err, r, "%s", what);
        *ret = TAKE_PTR(c);
        return 0;
}

int channel_load(const char *path, Channel **ret, TpError *err) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len = 0;
        ssize_t n;

        if (fd < 0)
                return tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
        buf = malloc(CHANNEL_MAX_FILE + 1);
        if (!buf)
                return -ENOMEM;
        /* One byte more than the cap: that is how a file over it shows. */
        while (len <= CHANNEL_MAX_FILE && (n = read(fd, buf + len, CHANNEL_MAX_FILE + 1 - len)) != 0) {
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
                len += (size_t) n;
        }
        if (len > CHANNEL_MAX_FILE)
                return tp_error(err, -EFBIG, "%s: larger than a channel can be (%u bytes)", path, CHANNEL_MAX_FILE);
        return channel_parse(buf, len, path, ret, err);
}

int channel_verify(const Channel *c, const char *what, const char *ca_path, time_t now, char *ret_signer,
                   TpError *err) {
        SignatureInfo info;
        int r;

        r = signature_verify(c->signature, c->signature_len, c->index_text, c->index_len, ca_path, now, &info, err);
        if (r < 0)
                return tp_error_prefix(err, r, "%s", what);
        if (c->expires != 0 && now != SIGNATURE_CLOCK_UNKNOWN && c->expires < (int64_t) now) {
                char when[21];
                format_time_utc(c->expires, when);
                return tp_error(err, -EKEYEXPIRED, "%s: the channel expired on %s", what, when);
        }
        if (ret_signer)
                snprintf(ret_signer, 256, "%s", info.subject);
        return 0;
}

/* ---- writing ---- */

static void write_index(YamlWriter *w, const Channel *c) {
        yaml_writer_map_start(w, false);
        yaml_writer_kv_u64(w, "format", CHANNEL_FORMAT);
        yaml_writer_kv(w, "channel", c->name);
        yaml_writer_kv_u64(w, "serial", c->serial);
        yaml_writer_kv_time(w, "created", c->created);
        if (c->expires != 0)
                yaml_writer_kv_time(w, "expires", c->expires);
        if (c->desired[0])
                yaml_writer_kv(w, "desired", c->desired);
        yaml_writer_str(w, "bundles");
        yaml_writer_seq_start(w, false);
        for (size_t i = 0; i < c->n_bundles; i++) {
                const ChannelBundle *b = &c->bundles[i];
                yaml_writer_map_start(w, true);
                yaml_writer_kv(w, "task", b->task);
                yaml_writer_kv_u64(w, "version", b->version);
                yaml_writer_kv(w, "path", b->path);
                yaml_writer_kv_u64(w, "size", b->size);
                yaml_writer_kv_sha(w, "sha256", b->sha256);
                yaml_writer_kv(w, "kind", artifact_kind_to_string(b->kind));
                yaml_writer_kv_sha(w, "base_sha256", b->base_sha256);
                yaml_writer_kv_sha(w, "base_layout", b->base_layout);
                yaml_writer_map_end(w);
        }
        yaml_writer_seq_end(w);
        yaml_writer_map_end(w);
}

int channel_index_write(Channel *c, char **ret_text, size_t *ret_len, TpError *err) {
        YamlWriter *w;

        if (!task_name_valid(c->name))
                return tp_error(err, -EINVAL, "invalid channel name '%s' (expected [a-z0-9][a-z0-9._-]{0,63})", c->name);
        if (c->n_bundles > CHANNEL_MAX_BUNDLES)
                return tp_error(err, -E2BIG, "%zu bundles exceed the cap of %u", c->n_bundles, CHANNEL_MAX_BUNDLES);
        qsort(c->bundles, c->n_bundles, sizeof(ChannelBundle), compare_bundles);
        for (size_t i = 1; i < c->n_bundles; i++)
                if (compare_bundles(&c->bundles[i - 1], &c->bundles[i]) == 0)
                        return tp_error(err, -EINVAL, "%s v%" PRIu64 " is listed twice (%s and %s)", c->bundles[i].task,
                                        c->bundles[i].version, c->bundles[i - 1].path, c->bundles[i].path);
        if (c->desired[0] && !channel_find(c, c->desired))
                return tp_error(err, -EINVAL, "the desired task '%s' has no bundle", c->desired);

        w = yaml_writer_new(CHANNEL_MAX_INDEX);
        if (!w)
                return -ENOMEM;
        write_index(w, c);
        return yaml_writer_finish(w, W, ret_text, ret_len, err);
}

int channel_pack(const char *text, size_t text_len, const uint8_t *sig, size_t sig_len, uint8_t **ret_data,
                 size_t *ret_len) {
        uint8_t *data = malloc(CHANNEL_HEADER_SIZE + text_len + sig_len);

        if (!data)
                return -ENOMEM;
        memset(data, 0, CHANNEL_HEADER_SIZE);
        memcpy(data, CHANNEL_MAGIC, 8);
        put_le32(data + 8, CHANNEL_FORMAT);
        put_le64(data + 16, text_len);
        put_le64(data + 24, sig_len);
        memcpy(data + CHANNEL_HEADER_SIZE, text, text_len);
        memcpy(data + CHANNEL_HEADER_SIZE + text_len, sig, sig_len);
        *ret_data = data;
        *ret_len = CHANNEL_HEADER_SIZE + text_len + sig_len;
        return 0;
}

int channel_write(Channel *c, Signer *signer, uint8_t **ret_data, size_t *ret_len, TpError *err) {
        _cleanup_free_ char *text = NULL;
        _cleanup_free_ uint8_t *sig = NULL;
        size_t text_len, sig_len;
        int r;

        if ((r = channel_index_write(c, &text, &text_len, err)) < 0 ||
            (r = signer_sign(signer, text, text_len, &sig, &sig_len, err)) < 0)
                return r;
        return channel_pack(text, text_len, sig, sig_len, ret_data, ret_len);
}
