/* SPDX-License-Identifier: MIT */

#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "dispatch.h"
#include "yaml-doc.h"

const char *cli_program = "taskpatch";

void cli_error(const char *fmt, ...) {
        va_list ap;

        fflush(stdout);
        fprintf(stderr, "%s: ", cli_program);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
}

int cli_fail(bool json, const char *fmt, ...) {
        char message[TP_ERROR_MAX + 256];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        cli_error("%s", message);
        if (json) {
                json_t *j = json_pack("{s:b, s:s}", "ok", false, "error", message);
                if (!j)         /* not UTF-8 (a file name): still one object */
                        j = json_pack("{s:b, s:s}", "ok", false, "error", "(not UTF-8: see standard error)");
                (void) cli_print_json(j);
        }
        return EXIT_FAILED;
}

int cli_print_json(json_t *j) {
        if (!j) {
                cli_error("cannot print the result as JSON (a name that is not UTF-8, or out of memory)");
                return -EINVAL;
        }
        json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        fputc('\n', stdout);
        json_decref(j);
        return 0;
}

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

int cli_parse_days(const char *option, const char *value, int64_t *ret_seconds) {
        uint64_t v;

        if (parse_u64(value, &v) < 0 || v == 0 || v > 36500) {
                cli_error("--%s: expected a number of days, 1..36500, got '%s'", option, value);
                return -EINVAL;
        }
        *ret_seconds = (int64_t) v * 86400;
        return 0;
}

int cli_parse_u64(const char *option, const char *value, uint64_t *ret) {
        if (parse_u64(value, ret) < 0) {
                cli_error("--%s: expected a non-negative integer, got '%s'", option, value);
                return -EINVAL;
        }
        return 0;
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
