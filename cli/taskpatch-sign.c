/* SPDX-License-Identifier: MIT */
/* taskpatch sign: add a signature to a bundle, a channel, a revocation list or a trust root another signer made. */

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bundle.h"
#include "channel.h"
#include "cli.h"
#include "fileio.h"
#include "revoke.h"
#include "sigset.h"
#include "taskpatch.h"
#include "trust-root.h"

static void help(void) {
        printf("Usage: taskpatch sign FILE (--key KEY | --pkcs11-uri URI) --cert CERT [-o OUT] [--json]\n"
               "\n"
               "Add a signature to FILE, a bundle (.tpb), a channel, a revocation list or a trust\n"
               "root (a new root needs the old root keys and its own), over the\n"
               "bytes its first signer signed: signers of a file that needs several of them\n"
               "(devices' trust.threshold, trust.bundle_threshold) need not share a machine or\n"
               "a key. The signatures it holds are kept; a key that signed it already is refused.\n"
               "\n"
               "  --key FILE, --cert FILE  the ECDSA P-256 key and certificate chain (PEM) to add;\n"
               "                           once per signer to add several\n"
               "  --pkcs11-uri URI         a key in a PKCS#11 token instead (see taskpatch create)\n"
               "  -o, --output FILE        write the signed file there (default: FILE, replaced\n"
               "                           atomically)\n"
               "  --json                   print the result as JSON: path, kind, signatures\n");
}

/* What a file's signatures cover and hold, and how to write it again with others. */
typedef struct Signable {
        const char *kind;               /* "bundle", "channel", "revocations", "trust root" */
        const uint8_t *data;            /* the signed bytes */
        size_t len;
        const uint8_t *signature;       /* the section as it is (NULL: unsigned) */
        size_t signature_len;
        Bundle *bundle;
        Channel *channel;
        Revocations *revocations;
        TrustRoot *root;
} Signable;

static void signable_done(Signable *s) {
        bundle_free(s->bundle);
        channel_free(s->channel);
        revocations_free(s->revocations);
        trust_root_free(s->root);
}

static int signable_open(const char *path, Signable *s, TpError *err) {
        int r;

        if (cli_has_magic(path, CHANNEL_MAGIC)) {
                if ((r = channel_load(path, &s->channel, err)) < 0)
                        return r;
                *s = (Signable) { "channel", (const uint8_t *) s->channel->index_text, s->channel->index_len,
                                  s->channel->signature, s->channel->signature_len, .channel = s->channel };
        } else if (cli_has_magic(path, REVOCATIONS_MAGIC)) {
                if ((r = revocations_load(path, &s->revocations, err)) < 0)
                        return r;
                Revocations *rl = s->revocations;
                *s = (Signable) { "revocations", (const uint8_t *) rl->text, rl->text_len, rl->signature,
                                  rl->signature_len, .revocations = rl };
        } else if (cli_has_magic(path, TRUST_ROOT_MAGIC)) {
                if ((r = trust_root_load(path, &s->root, err)) < 0)
                        return r;
                TrustRoot *t = s->root;
                *s = (Signable) { "trust root", (const uint8_t *) t->text, t->text_len, t->signature,
                                  t->signature_len, .root = t };
        } else {
                if ((r = bundle_open(path, &s->bundle, err)) < 0)
                        return r;
                Bundle *b = s->bundle;
                *s = (Signable) { "bundle", (const uint8_t *) b->manifest_text, b->manifest_len, b->signature,
                                  b->signature_len, .bundle = b };
        }
        return 0;
}

/* A bundle again: header, manifest, the new signatures, then its payload copied as it is. */
static int write_bundle(const Bundle *b, const uint8_t *sig, size_t sig_len, const char *out, TpError *err) {
        AtomicFile f = ATOMIC_FILE_NULL;
        BundleHeader h = b->header;
        uint8_t head[BUNDLE_HEADER_SIZE], buf[1u << 16];
        int r;

        h.signature_size = sig_len;
        bundle_header_encode(&h, head);
        if ((r = atomic_file_open(out, &f)) < 0)
                return tp_error(err, r, "%s: %s", out, atomic_file_strerror(r));
        if ((r = write_full(f.fd, head, sizeof(head))) < 0 || (r = write_full(f.fd, b->manifest_text, b->manifest_len)) < 0 ||
            (r = write_full(f.fd, sig, sig_len)) < 0)
                goto fail;
        for (uint64_t off = 0; off < h.payload_size;) {
                size_t n = h.payload_size - off < sizeof(buf) ? (size_t) (h.payload_size - off) : sizeof(buf);
                if ((r = pread_full(b->fd, buf, n, b->payload_offset + off)) < 0 || (r = write_full(f.fd, buf, n)) < 0)
                        goto fail;
                off += n;
        }
        if ((r = atomic_file_commit(&f)) < 0)
                goto fail;
        atomic_file_abort(&f);
        return 0;
fail:
        atomic_file_abort(&f);
        return tp_error(err, r, "%s: %s", out, strerror(-r));
}

int verb_sign(int argc, char *argv[]) {
        enum { OPT_JSON = 256 };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "output", required_argument, NULL, 'o' },
                CLI_SIGNER_OPTIONS,
                { "json", no_argument, NULL, OPT_JSON },
                {},
        };
        _cleanup_(signer_freep) Signer *signer = NULL;
        _cleanup_(signable_done) Signable s = {};
        _cleanup_free_ uint8_t *block = NULL, *section = NULL, *file = NULL;
        size_t block_len, section_len = 0, file_len;
        const char *out = NULL;
        CliSigners signers = {};
        bool json = false;
        TpError err = {};
        SignatureSet set;
        int opt, r;

        cli_program = "taskpatch sign";
        while ((opt = getopt_long(argc, argv, "ho:", options, NULL)) >= 0)
                switch (opt) {
                case 'h':
                        help();
                        return EXIT_OK;
                case 'o':
                        out = optarg;
                        break;
                case CLI_OPT_KEY:
                case CLI_OPT_PKCS11_URI:
                case CLI_OPT_CERT:
                        cli_signers_option(&signers, opt, optarg);
                        break;
                case OPT_JSON:
                        json = true;
                        break;
                default:
                        return EXIT_USAGE;
                }
        if (argc - optind != 1 || !cli_signers_valid(&signers)) {
                cli_error("expected FILE (--key KEY | --pkcs11-uri URI) --cert CERT (see --help)");
                return EXIT_USAGE;
        }
        const char *path = argv[optind];
        out = out ? out : path;
        if ((r = signable_open(path, &s, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        if (cli_load_signers(&signers, &signer) < 0)
                return EXIT_FAILED;
        /* Each signer adds its own block to what the file holds. */
        const uint8_t *have = s.signature;
        size_t have_len = s.signature_len;
        for (Signer *p = signer; p; p = signer_next(p)) {
                uint8_t *grown = NULL;
                size_t grown_len;
                if ((r = signer_sign_one(p, s.data, s.len, &block, &block_len, &err)) < 0 ||
                    (r = signature_set_add(have, have_len, block, block_len, &grown, &grown_len, &err)) < 0) {
                        cli_error("%s: %s", path, tp_error_message(&err, r));
                        return EXIT_FAILED;
                }
                free(block);
                block = NULL;
                free(section);
                section = grown;
                section_len = grown_len;
                have = section;
                have_len = section_len;
        }
        if (s.bundle)
                r = write_bundle(s.bundle, section, section_len, out, &err);
        else {
                r = s.channel ? channel_pack(s.channel->format, s.channel->index_text, s.channel->index_len, section,
                                             section_len, &file, &file_len)
                : s.revocations ? revocations_pack(s.revocations->text, s.revocations->text_len, section,
                                                   section_len, &file, &file_len)
                              : trust_root_pack(s.root->text, s.root->text_len, section, section_len, &file, &file_len);
                if (r >= 0 && (r = atomic_file_write(out, file, file_len)) < 0)
                        r = tp_error(&err, r, "%s: %s", out, strerror(-r));
        }
        if (r < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        if (signature_set_parse(section, section_len, &set, &err) < 0)
                set.n = 0;
        if (json)
                return cli_print_json(json_pack("{s:s, s:s, s:I}", "path", out, "kind", s.kind, "signatures",
                                                (json_int_t) set.n)) < 0 ? EXIT_FAILED : EXIT_OK;
        printf("%s: %s signed, %zu signature%s\n", out, s.kind, set.n, set.n == 1 ? "" : "s");
        return EXIT_OK;
}
