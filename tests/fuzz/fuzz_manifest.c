/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the manifest parser and the YAML tree under it, and for format 2's
 * manifest section (one zstd frame of the YAML: the frame checks, then the same parser). An
 * encryption section's wrapped keys are unwrapped with a fixed test key (a seed is encrypted to
 * it), so a fuzzed ephemeral point and wrapped key reach the key agreement.
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "encryption.h"
#include "manifest.h"

/* A throw-away P-256 key for this target only; its public key encrypted the corpus's seed. */
static const char fuzz_key_pem[] =
        "-----BEGIN PRIVATE KEY-----\n"
        "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgvpVL4XgXslhcrSIw\n"
        "nEwXoFHjONbOWxDSvIAb60VTXw6hRANCAARZT7SVS1+yk6NHhJDlVnzc+4OaxoBN\n"
        "t3e4iVCPCx828WQvH7xhkwj+UrIWmIZzuLeIcKLINuu+3ehSqASTcXie\n"
        "-----END PRIVATE KEY-----\n";

static const DecryptKey *fuzz_key(void) {
        static DecryptKey *k;
        char path[64];
        TpError err = {};

        if (k)
                return k;
        int fd = memfd_create("fuzz-key", MFD_CLOEXEC);
        if (fd < 0 || write(fd, fuzz_key_pem, sizeof(fuzz_key_pem) - 1) != (ssize_t) sizeof(fuzz_key_pem) - 1)
                abort();
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        if (decrypt_key_load(path, &k, &err) < 0)
                abort();
        close(fd);
        return k;
}

/* Every outcome of an unwrap is a content key or a refusal with a message. */
static void unwrap(const Manifest *m) {
        uint8_t key[ENCRYPTION_KEY_SIZE];
        TpError err = {};

        if (m->encryption && encryption_unwrap(m->encryption, fuzz_key(), key, &err) < 0 && !err.message[0])
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A parsed manifest re-serialises, and its section parses again. */
static void rewrite(const Manifest *m) {
        Manifest *again = NULL;
        char *text = NULL;
        size_t len;
        TpError err = {};

        if (manifest_write(m, &text, &len, &err) < 0)
                abort();
        free(text);
        if (manifest_section_write(m, true, &text, &len, &err) < 0 ||
            manifest_section_parse(m->format, true, text, len, 0, &again, &err) < 0)
                abort();
        free(text);
        manifest_free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Manifest *m = NULL;
        TpError err = {};
        int r = manifest_parse((const char *) data, size, &m, &err);

        if (r < 0) {
                if (m || (!err.message[0] && r != -ENOMEM))
                        abort();
        } else {
                rewrite(m);
                unwrap(m);
                m = manifest_free(m);
        }

        /* The same bytes as a compressed section, of format 2 or 1 (a cap on the YAML, to keep the fuzzer's memory small). */
        err = (TpError) {};
        r = manifest_section_parse(MANIFEST_FORMAT_RELOCATING, true, (const char *) data, size, 1u << 20, &m, &err);
        if (r < 0) {
                /* Or a format-1 bundle's compressed section (BUNDLE_FLAG_MANIFEST_ZSTD). */
                if (m || (!err.message[0] && r != -ENOMEM))
                        abort();
                err = (TpError) {};
                r = manifest_section_parse(MANIFEST_FORMAT, true, (const char *) data, size, 1u << 20, &m, &err);
        }
        if (r < 0) {
                if (m || (!err.message[0] && r != -ENOMEM))
                        abort();
                return 0;
        }
        rewrite(m);
        manifest_free(m);
        return 0;
}
