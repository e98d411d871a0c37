/* SPDX-License-Identifier: MIT */
/* taskpatch publish: list a folder's bundles in a signed channel index that devices poll. */

#include <dirent.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "channel.h"
#include "cli.h"
#include "fileio.h"
#include "hashfile.h"
#include "taskpatch.h"
#include "yaml-doc.h"

static void help(void) {
        printf("Usage: taskpatch publish DIR --channel NAME --serial N --key KEY --cert CERT\n"
               "                         [--desired TASK] [--expires DAYS] [--json]\n"
               "\n"
               "List every bundle DIR/*.tpb (task, version, path, size, SHA-256, base) in a channel\n"
               "index signed like the bundles, written atomically to DIR/NAME.channel. Upload DIR to\n"
               "any server that serves files (nginx, a CDN); devices poll the channel's URL.\n"
               "\n"
               "  --channel NAME   the channel, [a-z0-9][a-z0-9._-]{0,63} (e.g. stable)\n"
               "  --serial N       must be higher than the serial of the channel already in DIR:\n"
               "                   devices refuse a channel older than the last one they accepted\n"
               "  --desired TASK   the task the fleet should run (it must have a bundle in DIR)\n"
               "  --expires DAYS   devices refuse the channel DAYS days from now (republish before)\n"
               "  --key FILE, --cert FILE  ECDSA P-256 signing key and certificate chain (PEM)\n"
               "  --json           print the summary as JSON\n");
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
        snprintf(b->task, sizeof(b->task), "%s", m->task);
        snprintf(b->path, sizeof(b->path), "%s", name);
        b->version = m->version;
        b->kind = m->kind;
        memcpy(b->base_sha256, m->base.sha256, SHA256_DIGEST_SIZE);
        memcpy(b->base_layout, m->base.layout, SHA256_DIGEST_SIZE);
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

int verb_publish(int argc, char *argv[]) {
        enum { OPT_CHANNEL = 256, OPT_SERIAL, OPT_DESIRED, OPT_EXPIRES, OPT_KEY, OPT_CERT, OPT_JSON };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "channel", required_argument, NULL, OPT_CHANNEL },
                { "serial", required_argument, NULL, OPT_SERIAL },
                { "desired", required_argument, NULL, OPT_DESIRED },
                { "expires", required_argument, NULL, OPT_EXPIRES },
                { "key", required_argument, NULL, OPT_KEY },
                { "cert", required_argument, NULL, OPT_CERT },
                { "json", no_argument, NULL, OPT_JSON },
                {},
        };
        _cleanup_(channel_freep) Channel *c = calloc(1, sizeof(Channel));
        _cleanup_(channel_freep) Channel *old = NULL;
        _cleanup_(signer_freep) Signer *signer = NULL;
        _cleanup_free_ uint8_t *data = NULL;
        _cleanup_free_ char *path = NULL;
        const char *name = NULL, *desired = NULL, *key = NULL, *cert = NULL;
        int64_t expires = 0;             /* seconds from now; 0: never */
        bool json = false, have_serial = false;
        TpError err = {};
        size_t len;
        int opt, r;

        cli_program = "taskpatch publish";
        if (!c)
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
                case OPT_DESIRED:
                        desired = optarg;
                        break;
                case OPT_EXPIRES:
                        if (cli_parse_days("expires", optarg, &expires) < 0)
                                return EXIT_USAGE;
                        break;
                case OPT_KEY:
                        key = optarg;
                        break;
                case OPT_CERT:
                        cert = optarg;
                        break;
                case OPT_JSON:
                        json = true;
                        break;
                default:
                        return EXIT_USAGE;
                }
        if (argc - optind != 1 || !name || !have_serial || !key || !cert) {
                cli_error("expected DIR --channel NAME --serial N --key KEY --cert CERT (see --help)");
                return EXIT_USAGE;
        }
        if (!task_name_valid(name) || (desired && !task_name_valid(desired))) {
                cli_error("--%s '%s': expected [a-z0-9][a-z0-9._-]{0,63}", task_name_valid(name) ? "desired" : "channel",
                          task_name_valid(name) ? desired : name);
                return EXIT_USAGE;
        }
        const char *dir = argv[optind];
        snprintf(c->name, sizeof(c->name), "%s", name);
        snprintf(c->desired, sizeof(c->desired), "%s", desired ? desired : "");
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
        if ((r = signer_load(key, cert, &signer, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        if (scan_dir(dir, c) < 0)
                return EXIT_FAILED;
        if (c->n_bundles == 0)
                cli_error("warning: %s holds no bundle (*.tpb): the channel lists none", dir);
        c->created = (int64_t) clock_wall();
        c->expires = expires ? c->created + expires : 0;
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
