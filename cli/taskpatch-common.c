/* SPDX-License-Identifier: MIT */

/* What taskpatch's verbs share beyond cli.c: kernels, models, signers and recipients (taskpatch.h). */

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "taskpatch.h"

int cli_init_kernels(void) {
        int r = kernels_init();

        if (r == -ENOENT)
                cli_error("TASKPATCH_KERNEL=%s names no kernel (see 'taskpatch caps' for the names)",
                          getenv("TASKPATCH_KERNEL"));
        else if (r == -ENOTSUP)
                cli_error("TASKPATCH_KERNEL=%s: this CPU cannot run that kernel (see 'taskpatch caps')",
                          getenv("TASKPATCH_KERNEL"));
        return r;
}

int cli_open_model(const char *path, ModelSet *ret) {
        TpError err = {};
        int fd, r;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) {
                r = negative_errno();
                cli_error("%s: %s", path, strerror(-r));
                return r;
        }
        const char *slash = strrchr(path, '/');
        r = model_set_open(fd, slash && slash[1] ? slash + 1 : path, ret, &err);
        if (r < 0) {
                cli_error("%s: %s", path, tp_error_message(&err, r));
                return r;
        }
        return 0;
}

const char *cli_where(const FileSet *set, uint64_t off, char buf[CLI_WHERE_MAX]) {
        if (!set || !set->directory || off >= set->size) {
                snprintf(buf, CLI_WHERE_MAX, "%" PRIu64, off);
                return buf;
        }
        const FileSetFile *f = &set->files[fileset_locate(set, off)];
        snprintf(buf, CLI_WHERE_MAX, "%s+%" PRIu64, f->path, off - f->offset);
        return buf;
}

void cli_signers_option(CliSigners *s, int opt, const char *arg) {
        size_t *n = opt == CLI_OPT_CERT ? &s->n_certs : &s->n_keys;

        if (*n >= CLI_SIGNERS_MAX) {
                s->too_many = true;
                return;
        }
        if (opt == CLI_OPT_CERT)
                s->certs[(*n)++] = arg;
        else {
                s->keys[*n] = opt == CLI_OPT_KEY ? arg : NULL;
                s->uris[(*n)++] = opt == CLI_OPT_PKCS11_URI ? arg : NULL;
        }
}

bool cli_signers_any(const CliSigners *s) {
        return s->n_keys > 0 || s->n_certs > 0;
}

bool cli_signers_valid(const CliSigners *s) {
        return !s->too_many && s->n_keys > 0 && s->n_keys == s->n_certs;
}

int cli_load_signers(const CliSigners *s, Signer **ret) {
        Signer *all = NULL;
        TpError err = {};

        for (size_t i = 0; i < s->n_keys; i++) {
                Signer *one = NULL;
                int r = s->uris[i] ? signer_load_pkcs11(s->uris[i], s->certs[i], &one, &err)
                                   : signer_load(s->keys[i], s->certs[i], &one, &err);
                if (r < 0) {
                        cli_error("%s", tp_error_message(&err, r));
                        signer_free(all);
                        return r;
                }
                if (all)
                        signer_add(all, one);
                else
                        all = one;
        }
        *ret = all;
        return 0;
}

void recipient_keys_freep(RecipientKeys *k) {
        for (size_t i = 0; i < k->n; i++)
                recipient_key_free(k->keys[i]);
        free(k->keys);
        *k = (RecipientKeys) { NULL, 0 };
}

int cli_load_recipients(const char *const *paths, size_t n, RecipientKeys *ret) {
        RecipientKeys k = { n ? calloc(n, sizeof(RecipientKey *)) : NULL, 0 };
        TpError err = {};

        if (n && !k.keys)
                return -ENOMEM;
        for (; k.n < n; k.n++) {
                int r = recipient_key_load(paths[k.n], &k.keys[k.n], &err);
                if (r < 0) {
                        cli_error("--encrypt-to: %s", tp_error_message(&err, r));
                        recipient_keys_freep(&k);
                        return r;
                }
        }
        *ret = k;
        return 0;
}
