/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The test PKI of the signing tests (check_sign.c, check_signer.c): tests/tools/make-pki.sh run
 * once per test case into a temporary directory (an unchecked fixture), a few extra files for the
 * refusal cases, and the paths, dates and assertions those tests share.
 */

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "error.h"
#include "sign.h"

/* The fixture's directory and the PKI in it (one per test binary). */
static char tmp[64];
static char pki[128];

/* PKI file @name as a path; a few rotating buffers so one call can use several. */
static inline const char *P(const char *name) {
        static char bufs[8][300];
        static unsigned i;
        char *b = bufs[i++ % 8];

        snprintf(b, sizeof(bufs[0]), "%s/%s", pki, name);
        return b;
}

static inline time_t T(int y, int mo, int d, int h, int mi, int s) {
        struct tm tm = { .tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi, .tm_sec = s };
        return timegm(&tm);
}
#define DAY(y, m, d) T(y, m, d, 0, 0, 0)
#define NOW T(2026, 11, 29, 13, 0, 0)

static inline void sh(const char *cmd) {
        ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
}

static inline void write_text(const char *path, const char *text) {
        FILE *f = fopen(path, "we");
        ck_assert_ptr_nonnull(f);
        fputs(text, f);
        ck_assert_int_eq(fclose(f), 0);
}

/* Unchecked fixture: runs once per test case in the parent, so the PKI is made once. */
static inline void pki_setup(void) {
        char script[300], cmd[800];
        const char *env = getenv("TASKPATCH_MAKE_PKI");

        if (env)
                snprintf(script, sizeof(script), "%s", env);
        else {
                /* __FILE__ is tests/unit/pki-fixture.h, relative to the top directory tests run from. */
                snprintf(script, sizeof(script), "%s", __FILE__);
                char *slash = strrchr(script, '/');
                if (slash)
                        *slash = '\0';
                slash = strrchr(script, '/');
                snprintf(slash ? slash : script, sizeof(script) - (size_t) (slash ? slash - script : 0),
                         "%s", slash ? "/tools/make-pki.sh" : "tests/tools/make-pki.sh");
        }

        snprintf(tmp, sizeof(tmp), "/tmp/check_sign.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(tmp));
        snprintf(pki, sizeof(pki), "%s/pki", tmp);
        snprintf(cmd, sizeof(cmd), "sh '%s' '%s'", script, pki);
        sh(cmd);

        /* Extra fixtures for the refusal cases. */
        ck_assert_int_eq(mkdir(P("empty.d"), 0700), 0);
        ck_assert_int_eq(mkdir(P("junk.d"), 0700), 0);
        write_text(P("junk.d/bad.pem"), "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n");
        write_text(P("empty.pem"), "");
        snprintf(cmd, sizeof(cmd),
                 "cd '%s' && openssl pkey -in signer.key -aes256 -passout pass:secret -out encrypted.key 2>/dev/null"
                 " && cat signer.crt intermediate.pem intermediate.pem intermediate.pem intermediate.pem"
                 " intermediate.pem intermediate.pem intermediate.pem > long.crt"
                 /* One byte over each file cap (sparse: the size is refused before a byte is read). */
                 " && truncate -s 65537 big.key && truncate -s 262145 big.crt && truncate -s 1048577 big-ca.pem"
                 " && mkdir many.d && for i in $(seq 0 1024); do : > many.d/$i.pem; done",
                 pki);
        sh(cmd);
}

static inline void pki_teardown(void) {
        char cmd[128];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
        ck_assert_int_eq(system(cmd), 0);
}

/* @r must be @want, and the message contain @substr (when not NULL); @what names the case. */
static inline void expect(int r, const TpError *err, int want, const char *substr, const char *what) {
        ck_assert_msg(r == want, "%s: returned %d (%s), want %d", what, r, err->message, want);
        if (substr)
                ck_assert_msg(strstr(err->message, substr), "%s: message '%s' lacks '%s'", what, err->message, substr);
}

/* A block from signer_load()/signer_sign() with NAME.key and NAME.crt. */
static inline void sign_ok(const char *name, const void *data, size_t len, uint8_t **ret, size_t *ret_len) {
        _cleanup_(signer_freep) Signer *s = NULL;
        char key[64], crt[64];
        TpError err = {};
        int r;

        snprintf(key, sizeof(key), "%s.key", name);
        snprintf(crt, sizeof(crt), "%s.crt", name);
        r = signer_load(P(key), P(crt), &s, &err);
        ck_assert_msg(r == 0, "signer_load(%s): %d %s", name, r, err.message);
        r = signer_sign(s, data, len, ret, ret_len, &err);
        ck_assert_msg(r == 0, "signer_sign(%s): %d %s", name, r, err.message);
}
