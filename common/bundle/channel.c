/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bundle.h"
#include "channel.h"
#include "fileio.h"
#include "sign.h"
#include "signed-file.h"
#include "sigset.h"
#include "trust-root.h"
#include "yaml-doc.h"
#include "yaml-write.h"

#define W "channel"

Channel *channel_free(Channel *c) {
        if (!c)
                return NULL;
        free(c->models);
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
        int c = strcmp(x->model, y->model);
        if (!c)
                c = strcmp(x->task, y->task);
        return c ? c : (x->version > y->version) - (x->version < y->version);
}

static int compare_models(const void *a, const void *b) {
        return strcmp(((const ChannelModel *) a)->name, ((const ChannelModel *) b)->name);
}

const ChannelModel *channel_model(const Channel *c, const char *name) {
        for (size_t i = 0; i < c->n_models; i++)
                if (strcmp(c->models[i].name, name) == 0)
                        return &c->models[i];
        return NULL;
}

const ChannelBundle *channel_find(const Channel *c, const ChannelModel *cm, const char *task,
                                  const uint8_t *base_sha256) {
        const ChannelBundle *found = NULL;
        for (size_t i = cm->first; i < cm->first + cm->n_bundles; i++) {
                const ChannelBundle *b = &c->bundles[i];
                if (b->role == MANIFEST_ROLE_TASK && strcmp(b->task, task) == 0 &&
                    (!base_sha256 || memcmp(b->base_sha256, base_sha256, SHA256_DIGEST_SIZE) == 0))
                        found = b;              /* sorted: the last is the newest */
        }
        return found;
}

bool channel_bundle_full(const ChannelBundle *b) {
        uint8_t none[SHA256_DIGEST_SIZE];
        Sha256 h;

        sha256_init(&h);
        sha256_final(&h, none);
        return b->role == MANIFEST_ROLE_BASE && memcmp(b->base_sha256, none, SHA256_DIGEST_SIZE) == 0;
}

const ChannelBundle *channel_base_bundle(const Channel *c, const ChannelModel *cm, const uint8_t *device_base) {
        const ChannelBundle *delta = NULL, *full = NULL;

        if (!cm->has_base || memcmp(cm->base_sha256, device_base, SHA256_DIGEST_SIZE) == 0)
                return NULL;
        for (size_t i = cm->first; i < cm->first + cm->n_bundles; i++) {
                const ChannelBundle *b = &c->bundles[i];
                if (b->role != MANIFEST_ROLE_BASE || memcmp(b->target_sha256, cm->base_sha256, SHA256_DIGEST_SIZE) != 0)
                        continue;
                if (memcmp(b->base_sha256, device_base, SHA256_DIGEST_SIZE) == 0 &&
                    (!delta || b->version >= delta->version))
                        delta = b;
                else if (channel_bundle_full(b) && (!full || b->version >= full->version))
                        full = b;
        }
        return delta ? delta : full;
}

const ChannelBundle *channel_desired(const Channel *c, const ChannelModel *cm, const uint8_t *device_base) {
        if (!cm->desired[0])
                return NULL;
        return channel_find(c, cm, cm->desired, cm->has_base ? cm->base_sha256 : device_base);
}

unsigned channel_cohort(const char *device_id, uint64_t seed) {
        uint8_t d[SHA256_DIGEST_SIZE];
        char tail[32];
        Sha256 h;
        uint64_t v = 0;

        snprintf(tail, sizeof(tail), "\n%" PRIu64, seed);
        sha256_init(&h);
        sha256_update(&h, "taskpatch-rollout\n", strlen("taskpatch-rollout\n"));
        sha256_update(&h, device_id, strlen(device_id));
        sha256_update(&h, tail, strlen(tail));
        sha256_final(&h, d);
        for (unsigned i = 0; i < 8; i++)
                v = v << 8 | d[i];
        return (unsigned) (v % 100);
}

/* Each section's range of the sorted bundles; -EINVAL (in @bad the first) for a bundle of no section. */
static int index_models(Channel *c, const ChannelBundle **bad) {
        size_t i = 0;

        for (size_t m = 0; m < c->n_models; m++) {
                ChannelModel *cm = &c->models[m];
                while (i < c->n_bundles && strcmp(c->bundles[i].model, cm->name) < 0) {
                        *bad = &c->bundles[i];
                        return -EINVAL;
                }
                cm->first = i;
                while (i < c->n_bundles && strcmp(c->bundles[i].model, cm->name) == 0)
                        i++;
                cm->n_bundles = i - cm->first;
        }
        if (i < c->n_bundles) {
                *bad = &c->bundles[i];
                return -EINVAL;
        }
        return 0;
}

/* ---- parsing ---- */

static int parse_bundle(const YamlNode *n, size_t idx, bool format2, ChannelBundle *b, TpError *err) {
        static const char *const keys1[] = { "task", "version", "path", "size", "sha256", "kind", "base_sha256",
                                             "base_layout", NULL };
        static const char *const keys2[] = { "role", "task", "version", "path", "size", "sha256", "kind",
                                             "base_sha256", "base_layout", "target_sha256", NULL };
        const char *task, *path, *kind, *role = "task";
        int r;

        if (n->kind != YAML_MAPPING)
                return tp_error(err, -EBADMSG, W ": line %u: bundle #%zu is not a mapping", n->line, idx);
        if ((r = yaml_check_keys(n, format2 ? keys2 : keys1, W, err)) < 0 ||
            (r = yaml_get_str(n, "role", false, W, &role, err)) < 0 ||
            (r = yaml_get_str(n, "task", true, W, &task, err)) < 0 ||
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
        if (strcmp(role, "task") != 0 && strcmp(role, "base") != 0)
                return tp_error(err, -EBADMSG, W ": line %u: role '%.32s' is neither task nor base", n->line, role);
        b->role = strcmp(role, "base") == 0 ? MANIFEST_ROLE_BASE : MANIFEST_ROLE_TASK;
        /* A base bundle says which base it makes (a device picks the one that brings it to its section's base). */
        bool base = b->role == MANIFEST_ROLE_BASE;
        if (!base && yaml_map_get(n, "target_sha256"))
                return tp_error(err, -EBADMSG, W ": line %u: target_sha256 is a base bundle's key (role: base)",
                                n->line);
        if ((r = yaml_get_sha256(n, "target_sha256", base, W, b->target_sha256, err)) < 0)
                return r;
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

/* A section's bundles, appended to c->bundles under @model. */
static int parse_bundles(Channel *c, const YamlNode *bundles, const char *model, TpError *err) {
        if (bundles->n > CHANNEL_MAX_BUNDLES - c->n_bundles)
                return tp_error(err, -E2BIG, W ": line %u: more than %u bundles", bundles->line, CHANNEL_MAX_BUNDLES);
        for (size_t i = 0; i < bundles->n; i++) {
                ChannelBundle *b = &c->bundles[c->n_bundles];
                int r = parse_bundle(bundles->items[i], i, c->format != CHANNEL_FORMAT_1, b, err);
                if (r < 0)
                        return r;
                snprintf(b->model, sizeof(b->model), "%s", model);
                if (i > 0 && compare_bundles(b - 1, b) >= 0)
                        return tp_error(err, -EBADMSG, W ": line %u: bundle %s v%" PRIu64
                                        " is out of order or repeated (sorted by task, then version)",
                                        bundles->items[i]->line, b->task, b->version);
                c->n_bundles++;
        }
        return 0;
}

static int parse_desired(const YamlNode *n, const char *desired, ChannelModel *cm, TpError *err) {
        if (!desired)
                return 0;
        if (!task_name_valid(desired))
                return tp_error(err, -EBADMSG, W ": line %u: invalid desired task '%.80s'", n->line, desired);
        snprintf(cm->desired, sizeof(cm->desired), "%s", desired);
        return 0;
}

/* The desired task must have a bundle (for the section's base, when it names one). */
static int check_desired(const Channel *c, const ChannelModel *cm, TpError *err) {
        if (!cm->desired[0] || channel_desired(c, cm, NULL))
                return 0;
        if (cm->name[0])
                return tp_error(err, -EBADMSG, W ": model %s: desired task '%s' has no bundle%s in the channel",
                                cm->name, cm->desired, cm->has_base ? " for the model's base" : "");
        return tp_error(err, -EBADMSG, W ": desired task '%s' has no bundle in the channel", cm->desired);
}

static int parse_rollout(const YamlNode *n, ChannelRollout *ro, TpError *err) {
        static const char *const keys[] = { "percent", "seed", NULL };
        const YamlNode *m = yaml_map_get(n, "rollout");
        uint64_t percent;
        int r;

        if (!m)
                return 0;
        if ((r = yaml_get_map(n, "rollout", true, W, &m, err)) < 0 || (r = yaml_check_keys(m, keys, W, err)) < 0 ||
            (r = yaml_get_u64(m, "percent", true, W, &percent, err)) < 0 ||
            (r = yaml_get_u64(m, "seed", true, W, &ro->seed, err)) < 0)
                return r;
        if (percent > 100)
                return tp_error(err, -EBADMSG, W ": line %u: rollout percent %" PRIu64 " is outside 0..100", m->line,
                                percent);
        ro->set = true;
        ro->percent = (uint32_t) percent;
        return 0;
}

static int parse_model(Channel *c, const YamlNode *n, size_t idx, TpError *err) {
        static const char *const keys[] = { "model", "base", "desired", "rollout", "bundles", NULL };
        ChannelModel *cm = &c->models[idx];
        const YamlNode *bundles;
        const char *name, *desired = NULL;
        int r;

        if (n->kind != YAML_MAPPING)
                return tp_error(err, -EBADMSG, W ": line %u: model #%zu is not a mapping", n->line, idx);
        if ((r = yaml_check_keys(n, keys, W, err)) < 0 || (r = yaml_get_str(n, "model", true, W, &name, err)) < 0)
                return r;
        if (!task_name_valid(name))
                return tp_error(err, -EBADMSG, W ": line %u: invalid model name '%.80s'", n->line, name);
        snprintf(cm->name, sizeof(cm->name), "%s", name);
        if (idx > 0 && compare_models(cm - 1, cm) >= 0)
                return tp_error(err, -EBADMSG, W ": line %u: model %s is out of order or repeated (sorted by name)",
                                n->line, name);
        cm->has_base = yaml_map_get(n, "base") != NULL;
        if ((r = yaml_get_sha256(n, "base", false, W, cm->base_sha256, err)) < 0 ||
            (r = yaml_get_str(n, "desired", false, W, &desired, err)) < 0 ||
            (r = parse_desired(n, desired, cm, err)) < 0 || (r = parse_rollout(n, &cm->rollout, err)) < 0 ||
            (r = yaml_get_seq(n, "bundles", true, W, &bundles, err)) < 0)
                return r;
        cm->first = c->n_bundles;
        if ((r = parse_bundles(c, bundles, cm->name, err)) < 0)
                return r;
        cm->n_bundles = c->n_bundles - cm->first;
        return check_desired(c, cm, err);
}

/* Format 1: the desired task and the bundles at the top level, one section. */
static int parse_format1(Channel *c, const YamlNode *root, TpError *err) {
        static const char *const keys[] = { "format", "channel", "serial", "created", "expires", "revocations", "root",
                                            "desired", "bundles", NULL };
        const YamlNode *bundles;
        const char *desired = NULL;
        int r;

        if ((r = yaml_check_keys(root, keys, W, err)) < 0 ||
            (r = yaml_get_str(root, "desired", false, W, &desired, err)) < 0 ||
            (r = yaml_get_seq(root, "bundles", true, W, &bundles, err)) < 0)
                return r;
        if (bundles->n > CHANNEL_MAX_BUNDLES)
                return tp_error(err, -E2BIG, W ": line %u: %zu bundles exceed the cap of %u", bundles->line,
                                bundles->n, CHANNEL_MAX_BUNDLES);
        c->models = calloc(1, sizeof(ChannelModel));
        c->bundles = calloc(bundles->n ? bundles->n : 1, sizeof(ChannelBundle));
        if (!c->models || !c->bundles)
                return -ENOMEM;
        c->n_models = 1;
        if ((r = parse_desired(root, desired, &c->models[0], err)) < 0 ||
            (r = parse_bundles(c, bundles, "", err)) < 0)
                return r;
        c->models[0].n_bundles = c->n_bundles;
        return check_desired(c, &c->models[0], err);
}

static int parse_format2(Channel *c, const YamlNode *root, TpError *err) {
        static const char *const keys[] = { "format", "channel", "serial", "created", "expires", "revocations", "root",
                                            "models", NULL };
        const YamlNode *models;
        size_t total = 0;
        int r;

        if ((r = yaml_check_keys(root, keys, W, err)) < 0 ||
            (r = yaml_get_seq(root, "models", true, W, &models, err)) < 0)
                return r;
        if (models->n > CHANNEL_MAX_MODELS)
                return tp_error(err, -E2BIG, W ": line %u: %zu models exceed the cap of %u", models->line, models->n,
                                CHANNEL_MAX_MODELS);
        for (size_t i = 0; i < models->n; i++) {
                const YamlNode *b = models->items[i]->kind == YAML_MAPPING ?
                                    yaml_map_get(models->items[i], "bundles") : NULL;
                if (b && b->kind == YAML_SEQUENCE)
                        total += b->n;
        }
        if (total > CHANNEL_MAX_BUNDLES)
                return tp_error(err, -E2BIG, W ": line %u: %zu bundles exceed the cap of %u", models->line, total,
                                CHANNEL_MAX_BUNDLES);
        c->models = calloc(models->n ? models->n : 1, sizeof(ChannelModel));
        c->bundles = calloc(total ? total : 1, sizeof(ChannelBundle));
        if (!c->models || !c->bundles)
                return -ENOMEM;
        for (size_t i = 0; i < models->n; i++) {
                if ((r = parse_model(c, models->items[i], i, err)) < 0)
                        return r;
                c->n_models = i + 1;
        }
        return 0;
}

/* The optional entry @key of the index: a trust file of at most @max bytes. */
static int parse_trust_file(const YamlNode *root, const char *key, uint64_t max, ChannelTrustFile *rv, TpError *err) {
        static const char *const keys[] = { "version", "path", "size", "sha256", NULL };
        const YamlNode *n;
        const char *path;
        int r = yaml_get_map(root, key, false, W, &n, err);

        if (r <= 0)
                return r;
        if ((r = yaml_check_keys(n, keys, W, err)) < 0 ||
            (r = yaml_get_u64(n, "version", true, W, &rv->version, err)) < 0 ||
            (r = yaml_get_str(n, "path", true, W, &path, err)) < 0 ||
            (r = yaml_get_u64(n, "size", true, W, &rv->size, err)) < 0 ||
            (r = yaml_get_sha256(n, "sha256", true, W, rv->sha256, err)) < 0)
                return r;
        if (rv->version == 0)
                return tp_error(err, -EBADMSG, W ": line %u: %s: version must be at least 1", n->line, key);
        if (!channel_path_valid(path))
                return tp_error(err, -EBADMSG, W ": line %u: %s: path '%.80s' is not a plain relative path", n->line,
                                key, path);
        if (rv->size < 64 || rv->size > max)
                return tp_error(err, -EBADMSG, W ": line %u: %s: size %" PRIu64 " is outside 64..%" PRIu64, n->line,
                                key, rv->size, max);
        snprintf(rv->path, sizeof(rv->path), "%s", path);
        rv->set = true;
        return 0;
}

static int parse_index(Channel *c, uint32_t header_format, TpError *err) {
        _cleanup_(yaml_node_freep) YamlNode *root = NULL;
        const char *name;
        uint64_t format;
        int r;

        if ((r = yaml_doc_parse(c->index_text, c->index_len, CHANNEL_MAX_INDEX, W, &root, err)) < 0)
                return r;
        if (root->kind != YAML_MAPPING)
                return tp_error(err, -EBADMSG, W ": the index is not a mapping");
        if ((r = yaml_get_u64(root, "format", true, W, &format, err)) < 0)
                return r;
        if (format != header_format)
                return tp_error(err, -EBADMSG, W ": format %" PRIu64 " differs from the header's %" PRIu32, format,
                                header_format);
        c->format = header_format;
        if ((r = yaml_get_str(root, "channel", true, W, &name, err)) < 0 ||
            (r = yaml_get_u64(root, "serial", true, W, &c->serial, err)) < 0 ||
            (r = yaml_get_time(root, "created", true, W, &c->created, err)) < 0 ||
            (r = yaml_get_time(root, "expires", false, W, &c->expires, err)) < 0)
                return r;
        if (!task_name_valid(name))
                return tp_error(err, -EBADMSG, W ": invalid channel name '%.80s' (expected [a-z0-9][a-z0-9._-]{0,63})",
                                name);
        snprintf(c->name, sizeof(c->name), "%s", name);
        if ((r = parse_trust_file(root, "revocations", REVOCATIONS_MAX_FILE, &c->revocations, err)) < 0 ||
            (r = parse_trust_file(root, "root", TRUST_ROOT_MAX_FILE, &c->root, err)) < 0)
                return r;
        return c->format == CHANNEL_FORMAT_1 ? parse_format1(c, root, err) : parse_format2(c, root, err);
}

static const SignedFileKind channel_kind = {
        .magic = CHANNEL_MAGIC, .noun = "channel", .format_min = CHANNEL_FORMAT_1, .format_max = CHANNEL_FORMAT,
        .max_text = CHANNEL_MAX_INDEX,
};

int channel_parse(const uint8_t *data, size_t len, const char *what, Channel **ret, TpError *err) {
        _cleanup_(channel_freep) Channel *c = NULL;
        SignedFile f;
        int r;

        if ((r = signed_file_split(&channel_kind, data, len, what, &f, err)) < 0)
                return r;
        c = calloc(1, sizeof(Channel));
        if (!c)
                return -ENOMEM;
        if (signed_file_copy(&f, &c->index_text, &c->signature) < 0)
                return -ENOMEM;
        c->index_len = f.text_len;
        c->signature_len = f.signature_len;
        if ((r = parse_index(c, f.format, err)) < 0)
                return tp_error_prefix(err, r, "%s", what);
        *ret = TAKE_PTR(c);
        return 0;
}

int channel_load(const char *path, Channel **ret, TpError *err) {
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len;
        int r = signed_file_read(&channel_kind, path, &buf, &len, err);

        if (r < 0)
                return r;
        return channel_parse(buf, len, path, ret, err);
}

int channel_verify(const Channel *c, const char *what, const SignatureTrust *trust, char *ret_signer, TpError *err) {
        time_t now = trust->now;
        SignatureInfo info;
        int r;

        char signers[SIGNATURE_SIGNERS_MAX];
        r = signature_set_verify(c->signature, c->signature_len, c->index_text, c->index_len, trust, &info, signers,
                                 err);
        if (r < 0)
                return tp_error_prefix(err, r, "%s", what);
        if (c->expires != 0 && now != SIGNATURE_CLOCK_UNKNOWN && c->expires < (int64_t) now) {
                char when[21];
                format_time_utc(c->expires, when);
                return tp_error(err, -EKEYEXPIRED, "%s: the channel expired on %s", what, when);
        }
        if (ret_signer)
                snprintf(ret_signer, 256, "%s", signers);
        return 0;
}

/* ---- writing ---- */

static void write_bundles(YamlWriter *w, const Channel *c, const ChannelModel *cm) {
        yaml_writer_str(w, "bundles");
        yaml_writer_seq_start(w, false);
        for (size_t i = cm->first; i < cm->first + cm->n_bundles; i++) {
                const ChannelBundle *b = &c->bundles[i];
                yaml_writer_map_start(w, true);
                if (b->role == MANIFEST_ROLE_BASE)
                        yaml_writer_kv(w, "role", "base");
                yaml_writer_kv(w, "task", b->task);
                yaml_writer_kv_u64(w, "version", b->version);
                yaml_writer_kv(w, "path", b->path);
                yaml_writer_kv_u64(w, "size", b->size);
                yaml_writer_kv_sha(w, "sha256", b->sha256);
                yaml_writer_kv(w, "kind", artifact_kind_to_string(b->kind));
                yaml_writer_kv_sha(w, "base_sha256", b->base_sha256);
                yaml_writer_kv_sha(w, "base_layout", b->base_layout);
                if (b->role == MANIFEST_ROLE_BASE)
                        yaml_writer_kv_sha(w, "target_sha256", b->target_sha256);
                yaml_writer_map_end(w);
        }
        yaml_writer_seq_end(w);
}

static void write_model(YamlWriter *w, const Channel *c, const ChannelModel *cm) {
        yaml_writer_map_start(w, false);
        yaml_writer_kv(w, "model", cm->name);
        if (cm->has_base)
                yaml_writer_kv_sha(w, "base", cm->base_sha256);
        if (cm->desired[0])
                yaml_writer_kv(w, "desired", cm->desired);
        if (cm->rollout.set) {
                yaml_writer_str(w, "rollout");
                yaml_writer_map_start(w, true);
                yaml_writer_kv_u64(w, "percent", cm->rollout.percent);
                yaml_writer_kv_u64(w, "seed", cm->rollout.seed);
                yaml_writer_map_end(w);
        }
        write_bundles(w, c, cm);
        yaml_writer_map_end(w);
}

static void write_trust_file(YamlWriter *w, const char *key, const ChannelTrustFile *f) {
        if (!f->set)
                return;
        yaml_writer_str(w, key);
        yaml_writer_map_start(w, true);
        yaml_writer_kv_u64(w, "version", f->version);
        yaml_writer_kv(w, "path", f->path);
        yaml_writer_kv_u64(w, "size", f->size);
        yaml_writer_kv_sha(w, "sha256", f->sha256);
        yaml_writer_map_end(w);
}

static void write_index(YamlWriter *w, const Channel *c) {
        yaml_writer_map_start(w, false);
        yaml_writer_kv_u64(w, "format", c->format);
        yaml_writer_kv(w, "channel", c->name);
        yaml_writer_kv_u64(w, "serial", c->serial);
        yaml_writer_kv_time(w, "created", c->created);
        if (c->expires != 0)
                yaml_writer_kv_time(w, "expires", c->expires);
        write_trust_file(w, "revocations", &c->revocations);
        write_trust_file(w, "root", &c->root);
        if (c->format == CHANNEL_FORMAT_1) {
                if (c->models[0].desired[0])
                        yaml_writer_kv(w, "desired", c->models[0].desired);
                write_bundles(w, c, &c->models[0]);
        } else {
                yaml_writer_str(w, "models");
                yaml_writer_seq_start(w, false);
                for (size_t i = 0; i < c->n_models; i++)
                        write_model(w, c, &c->models[i]);
                yaml_writer_seq_end(w);
        }
        yaml_writer_map_end(w);
}

/* What a reader would refuse, said to the writer. */
static int check_models(Channel *c, TpError *err) {
        const ChannelBundle *bad = NULL;

        if (c->format != CHANNEL_FORMAT && c->format != CHANNEL_FORMAT_1)
                return tp_error(err, -EINVAL, "channel format %" PRIu32 " cannot be written", c->format);
        if (c->format == CHANNEL_FORMAT_1 && (c->n_models != 1 || c->models[0].name[0] || c->models[0].has_base ||
                                              c->models[0].rollout.set))
                return tp_error(err, -EINVAL, "a format-1 channel has one unnamed model, without base or rollout");
        for (size_t i = 0; c->format == CHANNEL_FORMAT_1 && i < c->n_bundles; i++)
                if (c->bundles[i].role != MANIFEST_ROLE_TASK)
                        return tp_error(err, -EINVAL, "a format-1 channel lists no base bundle (%s v%" PRIu64 ")",
                                        c->bundles[i].task, c->bundles[i].version);
        if (c->n_models > CHANNEL_MAX_MODELS)
                return tp_error(err, -E2BIG, "%zu models exceed the cap of %u", c->n_models, CHANNEL_MAX_MODELS);
        qsort(c->models, c->n_models, sizeof(ChannelModel), compare_models);
        for (size_t i = 0; i < c->n_models; i++) {
                const ChannelModel *cm = &c->models[i];
                if (c->format != CHANNEL_FORMAT_1 && !task_name_valid(cm->name))
                        return tp_error(err, -EINVAL, "invalid model name '%s'", cm->name);
                if (i > 0 && compare_models(cm - 1, cm) == 0)
                        return tp_error(err, -EINVAL, "model %s is listed twice", cm->name);
                if (cm->rollout.set && cm->rollout.percent > 100)
                        return tp_error(err, -EINVAL, "model %s: rollout percent %" PRIu32 " is outside 0..100",
                                        cm->name, cm->rollout.percent);
        }
        if (index_models(c, &bad) < 0)
                return tp_error(err, -EINVAL, "%s v%" PRIu64 " is for model '%s', which has no section", bad->task,
                                bad->version, bad->model);
        for (size_t i = 0; i < c->n_models; i++) {
                const ChannelModel *cm = &c->models[i];
                if (cm->desired[0] && !channel_desired(c, cm, NULL))
                        return tp_error(err, -EINVAL, "%s%sthe desired task '%s' has no bundle%s", cm->name,
                                        cm->name[0] ? ": " : "", cm->desired,
                                        cm->has_base ? " for the model's base" : "");
        }
        return 0;
}

int channel_index_write(Channel *c, char **ret_text, size_t *ret_len, TpError *err) {
        YamlWriter *w;
        int r;

        if (!task_name_valid(c->name))
                return tp_error(err, -EINVAL, "invalid channel name '%s' (expected [a-z0-9][a-z0-9._-]{0,63})", c->name);
        if (c->n_bundles > CHANNEL_MAX_BUNDLES)
                return tp_error(err, -E2BIG, "%zu bundles exceed the cap of %u", c->n_bundles, CHANNEL_MAX_BUNDLES);
        qsort(c->bundles, c->n_bundles, sizeof(ChannelBundle), compare_bundles);
        for (size_t i = 1; i < c->n_bundles; i++)
                if (compare_bundles(&c->bundles[i - 1], &c->bundles[i]) == 0)
                        return tp_error(err, -EINVAL, "%s v%" PRIu64 " is listed twice (%s and %s)", c->bundles[i].task,
                                        c->bundles[i].version, c->bundles[i - 1].path, c->bundles[i].path);
        if ((r = check_models(c, err)) < 0)
                return r;

        w = yaml_writer_new(CHANNEL_MAX_INDEX);
        if (!w)
                return -ENOMEM;
        write_index(w, c);
        return yaml_writer_finish(w, W, ret_text, ret_len, err);
}

int channel_pack(uint32_t format, const char *text, size_t text_len, const uint8_t *sig, size_t sig_len,
                 uint8_t **ret_data, size_t *ret_len) {
        return signed_file_pack(&channel_kind, format, text, text_len, sig, sig_len, ret_data, ret_len);
}
