/* SPDX-License-Identifier: MIT */
/* taskpatch publish: list a folder's bundles in a signed channel index that devices poll. */

#include <dirent.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "channel.h"
#include "cli.h"
#include "fileio.h"
#include "hashfile.h"
#include "parse.h"
#include "revoke.h"
#include "taskpatch.h"
#include "trust-root.h"
#include "yaml-doc.h"

static void help(void) {
        printf("Usage: taskpatch publish DIR --channel NAME --serial N (--key KEY | --pkcs11-uri URI) --cert CERT\n"
               "                         [--expires DAYS] [--revocations FILE] [--root FILE] [--json]\n"
               "                         [--model MODEL] [--desired TASK] [--base BASE]\n"
               "                         [--rollout PERCENT [--rollout-seed SEED]] ...\n"
               "\n"
               "List every bundle DIR/*.tpb (model, task, version, path, size, SHA-256, base) in a\n"
               "channel index signed like the bundles, written atomically to DIR/NAME.channel.\n"
               "Upload DIR to any server that serves files (nginx, a CDN); devices poll the\n"
               "channel's URL. Each model the bundles name (taskpatch create --model) gets its own\n"
               "section; --model opens one, and the options after it, up to the next --model, are\n"
               "its own (before any --model they are the model 'default''s).\n"
               "\n"
               "  --channel NAME   the channel, [a-z0-9][a-z0-9._-]{0,63} (e.g. stable)\n"
               "  --serial N       must be higher than the serial of the channel already in DIR:\n"
               "                   devices refuse a channel older than the last one they accepted\n"
               "  --expires DAYS   devices refuse the channel DAYS days from now (republish before)\n"
               "  --key FILE, --cert FILE  ECDSA P-256 signing key and certificate chain (PEM)\n"
               "  --pkcs11-uri URI         the key in a PKCS#11 token instead (see taskpatch create);\n"
               "                   a key and --cert per signer, when devices need several (trust.threshold)\n"
               "  --revocations FILE  a revocation list (taskpatch revoke) the channel carries: copied\n"
               "                   into DIR and named with its version, size and SHA-256; devices\n"
               "                   fetch it when it is newer than theirs. Without it, the list the\n"
               "                   channel in DIR carries is kept\n"
               "  --root FILE      a trust root (taskpatch root) the channel carries, the same way:\n"
               "                   devices fetch it before they check the channel's signature\n"
               "  --json           print the summary as JSON\n"
               "\n"
               "For each model:\n"
               "  --model MODEL    the model the next options are for\n"
               "  --desired TASK   the task the fleet should run (it must have a bundle in DIR)\n"
               "  --base BASE      the base the fleet should run for this model: its SHA-256, or the\n"
               "                   model file or directory itself; the desired task's bundle must be\n"
               "                   made for it\n"
               "  --rollout P      only devices whose cohort (0..99, from their device id and the\n"
               "                   seed) is below P take this model's update; raise P to widen the\n"
               "                   same cohort, 100 for every device\n"
               "  --rollout-seed S the seed (0..4294967295); by default derived from the desired\n"
               "                   bundle, so publishing the same update again keeps the cohort\n"
               "\n"
               "Without --model, --base and --rollout, and with every bundle made for the model\n"
               "'default', the channel is written in format 1, which every daemon reads; else in\n"
               "format 2.\n");
}

/* Read DIR/NAME (a .tpb) into @b: manifest fields, size, and the SHA-256 of the whole file. */
static int describe_bundle(const char *dir, const char *name, ChannelBundle *b) {
        _cleanup_(bundle_freep) Bundle *bundle = NULL;
        _cleanup_free_ char *path = NULL;
        TpError err = {};
        int r;

        if (asprintf(&path, "%s/%s", dir, name) < 0)
                return -ENOMEM;
        if (!channel_path_valid(name)) {
                cli_error("%s: the name is not a plain file name a URL can carry ([A-Za-z0-9._+-])", path);
                return -EINVAL;
        }
        if ((r = bundle_open(path, &bundle, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return r;
        }
        if ((r = hash_file(path, b->sha256, &b->size)) < 0) {
                cli_error("%s: %s", path, strerror(-r));
                return r;
        }
        const Manifest *m = bundle->manifest;
        if (!bundle->signature)
                cli_error("warning: %s is unsigned: devices will refuse it", path);
        snprintf(b->model, sizeof(b->model), "%s", m->model);
        b->role = m->role;
        snprintf(b->task, sizeof(b->task), "%s", m->task);
        snprintf(b->path, sizeof(b->path), "%s", name);
        b->version = m->version;
        b->kind = m->kind;
        memcpy(b->base_sha256, m->base.sha256, SHA256_DIGEST_SIZE);
        memcpy(b->base_layout, m->base.layout, SHA256_DIGEST_SIZE);
        memcpy(b->target_sha256, m->target.sha256, SHA256_DIGEST_SIZE);
        return 0;
}

static int scan_dir(const char *dir, Channel *c) {
        DIR *d = opendir(dir);
        struct dirent *de;
        int r = 0;

        if (!d) {
                cli_error("%s: %s", dir, strerror(errno));
                return -errno;
        }
        while (r >= 0 && (de = readdir(d))) {
                size_t len = strlen(de->d_name);
                if (de->d_name[0] == '.' || len < 5 || strcmp(de->d_name + len - 4, ".tpb") != 0)
                        continue;
                if (c->n_bundles >= CHANNEL_MAX_BUNDLES) {
                        cli_error("%s: more than %u bundles", dir, CHANNEL_MAX_BUNDLES);
                        r = -E2BIG;
                        break;
                }
                ChannelBundle *p = realloc(c->bundles, (c->n_bundles + 1) * sizeof(ChannelBundle));
                if (!p) {
                        r = -ENOMEM;
                        break;
                }
                c->bundles = p;
                c->bundles[c->n_bundles] = (ChannelBundle) {};
                if ((r = describe_bundle(dir, de->d_name, &c->bundles[c->n_bundles])) >= 0)
                        c->n_bundles++;
        }
        closedir(d);
        return r;
}

static void print_summary(const Channel *c, const char *path, uint64_t bytes, bool json) {
        if (json) {
                json_t *j = channel_to_json(c);
                json_object_set_new(j, "path", json_string(path));
                json_object_set_new(j, "bytes", json_integer((json_int_t) bytes));
                json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                fputc('\n', stdout);
                json_decref(j);
                return;
        }
        printf("wrote %s (%" PRIu64 " bytes, signed)\n", path, bytes);
        channel_print(c);
}

/* What the command line says about one model. */
typedef struct ModelOptions {
        const char *name;
        const char *desired, *base;
        bool rollout, have_seed;
        uint64_t percent, seed;
} ModelOptions;

typedef struct PublishOptions {
        ModelOptions models[CHANNEL_MAX_MODELS];
        size_t n_models;
        bool sections;                  /* --model, --base or --rollout: format 2 */
} PublishOptions;

static const ModelOptions *model_options_find(const PublishOptions *o, const char *name) {
        for (size_t i = 0; i < o->n_models; i++)
                if (strcmp(o->models[i].name, name) == 0)
                        return &o->models[i];
        return NULL;
}

/* The options of @name (added when new); NULL when there are too many. */
static ModelOptions *model_options(PublishOptions *o, const char *name) {
        for (size_t i = 0; i < o->n_models; i++)
                if (strcmp(o->models[i].name, name) == 0)
                        return &o->models[i];
        if (o->n_models >= CHANNEL_MAX_MODELS)
                return NULL;
        o->models[o->n_models] = (ModelOptions) { .name = name };
        return &o->models[o->n_models++];
}

/* The section of @name in @c, added when new. */
static ChannelModel *channel_section(Channel *c, const char *name) {
        for (size_t i = 0; i < c->n_models; i++)
                if (strcmp(c->models[i].name, name) == 0)
                        return &c->models[i];
        if (c->n_models >= CHANNEL_MAX_MODELS)
                return NULL;
        ChannelModel *p = realloc(c->models, (c->n_models + 1) * sizeof(ChannelModel));
        if (!p)
                return NULL;
        c->models = p;
        p[c->n_models] = (ChannelModel) {};
        snprintf(p[c->n_models].name, sizeof(p[c->n_models].name), "%s", name);
        return &p[c->n_models++];
}

/* --base: a SHA-256 in hex, or the model (a file or a directory) to hash. */
static int parse_base(const char *model, const char *value, uint8_t digest[SHA256_DIGEST_SIZE]) {
        uint64_t size;
        size_t files;
        int r;

        if (strlen(value) == 2 * SHA256_DIGEST_SIZE && parse_sha256_hex(value, digest) >= 0)
                return 0;
        if ((r = hash_file(value, digest, &size)) == -EISDIR)
                return hash_model_dir(value, digest, &size, &files);
        if (r < 0)
                cli_error("model %s: --base %s: %s (expected a SHA-256 or the base model)", model, value, strerror(-r));
        return r;
}

/*
 * The default seed: the first four bytes of the desired bundle's SHA-256 (of the model's
 * name when there is no desired task), so publishing the same update again keeps its cohort.
 */
static uint64_t default_seed(const Channel *c, const ChannelModel *cm) {
        const ChannelBundle *b = channel_desired(c, cm, NULL);
        uint8_t name_sha[SHA256_DIGEST_SIZE];
        const uint8_t *d = b ? b->sha256 : name_sha;

        if (!b)
                sha256_digest(cm->name, strlen(cm->name), name_sha);
        return (uint64_t) d[0] << 24 | (uint64_t) d[1] << 16 | (uint64_t) d[2] << 8 | d[3];
}

/* The sections: one per model the bundles name or the options set; format 1 when that says all. */
static int build_sections(Channel *c, const PublishOptions *o) {
        bool all_default = !o->sections;
        int r;

        for (size_t i = 0; i < c->n_bundles; i++)
                all_default = all_default && strcmp(c->bundles[i].model, MANIFEST_DEFAULT_MODEL) == 0 &&
                              c->bundles[i].role == MANIFEST_ROLE_TASK;
        for (size_t i = 0; i < o->n_models; i++)
                all_default = all_default && strcmp(o->models[i].name, MANIFEST_DEFAULT_MODEL) == 0;
        c->format = all_default ? CHANNEL_FORMAT_1 : CHANNEL_FORMAT;
        if (all_default)
                for (size_t i = 0; i < c->n_bundles; i++)
                        c->bundles[i].model[0] = '\0';
        if (all_default && !channel_section(c, ""))
                return -ENOMEM;
        for (size_t i = 0; i < c->n_bundles; i++)
                if (!channel_section(c, c->bundles[i].model)) {
                        cli_error("more than %u models", CHANNEL_MAX_MODELS);
                        return -E2BIG;
                }
        for (size_t i = 0; i < o->n_models; i++) {
                const ModelOptions *mo = &o->models[i];
                ChannelModel *cm = channel_section(c, all_default ? "" : mo->name);
                if (!cm)
                        return -ENOMEM;
                snprintf(cm->desired, sizeof(cm->desired), "%s", mo->desired ? mo->desired : "");
                if (mo->base && (r = parse_base(mo->name, mo->base, cm->base_sha256)) < 0)
                        return r;
                cm->has_base = mo->base != NULL;
                cm->rollout = (ChannelRollout) { .set = mo->rollout, .percent = (uint32_t) mo->percent,
                                                 .seed = mo->seed };
        }
        /* A default seed needs the desired bundle: found once the writer sorted the bundles into sections. */
        _cleanup_free_ char *text = NULL;
        TpError err = {};
        size_t len;
        if ((r = channel_index_write(c, &text, &len, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return r;
        }
        for (size_t i = 0; i < c->n_models; i++) {
                const ModelOptions *mo = model_options_find(o, c->models[i].name);
                if (mo && mo->rollout && !mo->have_seed)
                        c->models[i].rollout.seed = default_seed(c, &c->models[i]);
        }
        return 0;
}

static int parse_model_option(PublishOptions *o, ModelOptions **cur, int opt, const char *value);

/* What the channel can carry besides bundles: a revocation list, a trust root. */
typedef struct TrustFileKind {
        const char *option;             /* "revocations", "root" */
        /* Parse the file: its version and (@ret_data not NULL) the signed bytes as a file again. */
        int (*load)(const char *path, uint64_t *ret_version, uint8_t **ret_data, size_t *ret_len, TpError *err);
} TrustFileKind;

static int revocations_version(const char *path, uint64_t *ret, uint8_t **ret_data, size_t *ret_len, TpError *err) {
        _cleanup_(revocations_freep) Revocations *rl = NULL;
        int r = revocations_load(path, &rl, err);

        if (r < 0)
                return r;
        *ret = rl->version;
        return ret_data ? revocations_pack(rl->text, rl->text_len, rl->signature, rl->signature_len, ret_data, ret_len)
                        : 0;
}

static int root_version(const char *path, uint64_t *ret, uint8_t **ret_data, size_t *ret_len, TpError *err) {
        _cleanup_(trust_root_freep) TrustRoot *t = NULL;
        int r = trust_root_load(path, &t, err);

        if (r < 0)
                return r;
        *ret = t->version;
        return ret_data ? trust_root_pack(t->text, t->text_len, t->signature, t->signature_len, ret_data, ret_len) : 0;
}

static const TrustFileKind revocations_file = { "revocations", revocations_version };
static const TrustFileKind root_file = { "root", root_version };

/* DIR/NAME's version, size and SHA-256 into @rv (the file must be of @k's kind). */
static int describe_trust_file(const TrustFileKind *k, const char *dir, const char *name, ChannelTrustFile *rv) {
        _cleanup_free_ char *path = NULL;
        TpError err = {};
        int r;

        if (asprintf(&path, "%s/%s", dir, name) < 0)
                return -ENOMEM;
        if ((r = k->load(path, &rv->version, NULL, NULL, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return r;
        }
        if ((r = hash_file(path, rv->sha256, &rv->size)) < 0) {
                cli_error("%s: %s", path, strerror(-r));
                return r;
        }
        snprintf(rv->path, sizeof(rv->path), "%s", name);
        rv->set = true;
        return 0;
}

/*
 * The file of @k's kind the channel carries (into @rv): @file copied into @dir (under its
 * own name), or the one the channel it replaces named (@before, may be unset), while it is
 * still there; never an older version.
 */
static int carry_trust_file(const TrustFileKind *k, ChannelTrustFile *rv, const ChannelTrustFile *before,
                            const char *dir, const char *file) {
        _cleanup_free_ char *copy = NULL, *dest = NULL;
        _cleanup_free_ uint8_t *data = NULL;
        uint64_t version;
        size_t len;
        TpError err = {};
        int r;

        if (!file) {
                if (before->set && describe_trust_file(k, dir, before->path, rv) < 0) {
                        cli_error("the channel in %s named %s: publish --%s FILE again", dir, before->path, k->option);
                        return -ENOENT;
                }
                return 0;
        }
        if (!(copy = strdup(file)))
                return -ENOMEM;
        const char *name = basename(copy);
        if (!channel_path_valid(name)) {
                cli_error("--%s %s: the name '%s' is not a plain file name for a channel", k->option, file, name);
                return -EINVAL;
        }
        if (asprintf(&dest, "%s/%s", dir, name) < 0)
                return -ENOMEM;
        if ((r = k->load(file, &version, &data, &len, &err)) < 0) {
                cli_error("--%s: %s", k->option, tp_error_message(&err, r));
                return r;
        }
        if (before->set && version < before->version) {
                cli_error("--%s %s: version %" PRIu64 ", lower than the %" PRIu64 " the channel carried: devices "
                          "keep the newer one", k->option, file, version, before->version);
                return -EINVAL;
        }
        /* The very bytes that were signed, in a file of its own (the header is fixed by them). */
        if ((r = atomic_file_write(dest, data, len)) < 0) {
                cli_error("%s: %s", dest, strerror(-r));
                return r;
        }
        return describe_trust_file(k, dir, name, rv);
}

int verb_publish(int argc, char *argv[]) {
        enum { OPT_CHANNEL = 256, OPT_SERIAL, OPT_DESIRED, OPT_EXPIRES, OPT_JSON, OPT_MODEL,
               OPT_BASE, OPT_ROLLOUT, OPT_SEED, OPT_REVOCATIONS, OPT_ROOT };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "channel", required_argument, NULL, OPT_CHANNEL },
                { "serial", required_argument, NULL, OPT_SERIAL },
                { "desired", required_argument, NULL, OPT_DESIRED },
                { "expires", required_argument, NULL, OPT_EXPIRES },
                CLI_SIGNER_OPTIONS,
                { "json", no_argument, NULL, OPT_JSON },
                { "model", required_argument, NULL, OPT_MODEL },
                { "base", required_argument, NULL, OPT_BASE },
                { "rollout", required_argument, NULL, OPT_ROLLOUT },
                { "rollout-seed", required_argument, NULL, OPT_SEED },
                { "revocations", required_argument, NULL, OPT_REVOCATIONS },
                { "root", required_argument, NULL, OPT_ROOT },
                {},
        };
        _cleanup_(channel_freep) Channel *c = calloc(1, sizeof(Channel));
        _cleanup_(channel_freep) Channel *old = NULL;
        _cleanup_(signer_freep) Signer *signer = NULL;
        _cleanup_free_ PublishOptions *po = calloc(1, sizeof(PublishOptions));
        _cleanup_free_ uint8_t *data = NULL;
        _cleanup_free_ char *path = NULL;
        const char *name = NULL, *revocations = NULL, *root = NULL;
        CliSigners signers = {};
        ModelOptions *cur = NULL;       /* the model the per-model options are for */
        int64_t expires = 0;             /* seconds from now; 0: never */
        bool json = false, have_serial = false;
        TpError err = {};
        size_t len;
        int opt, r;

        cli_program = "taskpatch publish";
        if (!c || !po)
                return EXIT_FAILED;
        while ((opt = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (opt) {
                case 'h':
                        help();
                        return EXIT_OK;
                case OPT_CHANNEL:
                        name = optarg;
                        break;
                case OPT_SERIAL:
                        if (cli_parse_u64("serial", optarg, &c->serial) < 0)
                                return EXIT_USAGE;
                        have_serial = true;
                        break;
                case OPT_EXPIRES:
                        if (cli_parse_days("expires", optarg, &expires) < 0)
                                return EXIT_USAGE;
                        break;
                case CLI_OPT_KEY:
                case CLI_OPT_PKCS11_URI:
                case CLI_OPT_CERT:
                        cli_signers_option(&signers, opt, optarg);
                        break;
                case OPT_JSON:
                        json = true;
                        break;
                case OPT_REVOCATIONS:
                        revocations = optarg;
                        break;
                case OPT_ROOT:
                        root = optarg;
                        break;
                case OPT_MODEL:
                case OPT_DESIRED:
                case OPT_BASE:
                case OPT_ROLLOUT:
                case OPT_SEED:
                        if (parse_model_option(po, &cur, opt == OPT_MODEL ? 'm' : opt == OPT_DESIRED ? 'd' :
                                               opt == OPT_BASE ? 'b' : opt == OPT_ROLLOUT ? 'r' : 's', optarg) < 0)
                                return EXIT_USAGE;
                        break;
                default:
                        return EXIT_USAGE;
                }
        if (argc - optind != 1 || !name || !have_serial || !cli_signers_valid(&signers)) {
                cli_error("expected DIR --channel NAME --serial N (--key KEY | --pkcs11-uri URI) --cert CERT (see --help)");
                return EXIT_USAGE;
        }
        if (!task_name_valid(name)) {
                cli_error("--channel '%s': expected [a-z0-9][a-z0-9._-]{0,63}", name);
                return EXIT_USAGE;
        }
        for (size_t i = 0; i < po->n_models; i++)
                if (po->models[i].have_seed && !po->models[i].rollout) {
                        cli_error("model %s: --rollout-seed without --rollout", po->models[i].name);
                        return EXIT_USAGE;
                }
        const char *dir = argv[optind];
        snprintf(c->name, sizeof(c->name), "%s", name);
        if (asprintf(&path, "%s/%s.channel", dir, name) < 0)
                return EXIT_FAILED;

        /* Devices keep the highest serial they accepted: a lower one would be refused everywhere. */
        r = channel_load(path, &old, &err);
        if (r >= 0 && old->serial >= c->serial) {
                cli_error("--serial %" PRIu64 ": %s has serial %" PRIu64 " already; devices refuse a channel whose "
                          "serial does not increase", c->serial, path, old->serial);
                return EXIT_USAGE;
        }
        if (r < 0 && r != -ENOENT) {
                cli_error("%s (remove it to start the channel over)", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        if (cli_load_signers(&signers, &signer) < 0)
                return EXIT_FAILED;
        if (scan_dir(dir, c) < 0)
                return EXIT_FAILED;
        if (c->n_bundles == 0)
                cli_error("warning: %s holds no bundle (*.tpb): the channel lists none", dir);
        c->created = (int64_t) clock_wall();
        c->expires = expires ? c->created + expires : 0;
        static const ChannelTrustFile none = {};
        if (build_sections(c, po) < 0 ||
            carry_trust_file(&revocations_file, &c->revocations, old ? &old->revocations : &none, dir, revocations) < 0 ||
            carry_trust_file(&root_file, &c->root, old ? &old->root : &none, dir, root) < 0)
                return EXIT_FAILED;
        if ((r = channel_write(c, signer, &data, &len, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        if ((r = atomic_file_write(path, data, len)) < 0) {
                cli_error("%s: %s", path, strerror(-r));
                return EXIT_FAILED;
        }
        print_summary(c, path, len, json);
        return EXIT_OK;
}

static int given_twice(const ModelOptions *m, const char *option) {
        cli_error("model %s: --%s given twice (a second model's options follow its own --model)", m->name, option);
        return -EINVAL;
}

/* --model opens a model's options; the others set the open one's ('default' before any --model). */
static int parse_model_option(PublishOptions *o, ModelOptions **cur, int which, const char *value) {
        ModelOptions *m = *cur;

        if ((which == 'm' || which == 'd') && !task_name_valid(value)) {
                cli_error("--%s '%s': expected [a-z0-9][a-z0-9._-]{0,63}", which == 'm' ? "model" : "desired", value);
                return -EINVAL;
        }
        if (which == 'm') {
                if (!(m = model_options(o, value))) {
                        cli_error("--model: more than %u models", CHANNEL_MAX_MODELS);
                        return -E2BIG;
                }
                o->sections = true;
                *cur = m;
                return 0;
        }
        if (!m && !(m = *cur = model_options(o, MANIFEST_DEFAULT_MODEL)))
                return -ENOMEM;
        switch (which) {
        case 'd':
                if (m->desired)
                        return given_twice(m, "desired");
                m->desired = value;
                return 0;
        case 'b':
                if (m->base)
                        return given_twice(m, "base");
                m->base = value;
                o->sections = true;
                return 0;
        case 'r':
                if (m->rollout)
                        return given_twice(m, "rollout");
                if (cli_parse_u64("rollout", value, &m->percent) < 0)
                        return -EINVAL;
                if (m->percent > 100) {
                        cli_error("--rollout %s: expected a percent from 0 to 100", value);
                        return -EINVAL;
                }
                m->rollout = o->sections = true;
                return 0;
        default:
                if (m->have_seed)
                        return given_twice(m, "rollout-seed");
                if (cli_parse_u64("rollout-seed", value, &m->seed) < 0)
                        return -EINVAL;
                if (m->seed > UINT32_MAX) {
                        cli_error("--rollout-seed %s: expected 0 to 4294967295", value);
                        return -EINVAL;
                }
                m->have_seed = true;
                return 0;
        }
}
