/* SPDX-License-Identifier: MIT */
/* kernels/sha256.c and every compression kernel, at every dispatch level this CPU has. */

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check-main.h"
#include "dispatch.h"
#include "sha256.h"

static const struct {
        const char *msg;
        size_t repeat;          /* msg is repeated this many times */
        const char *hex;
} vectors[] = {
        /* FIPS 180-4 examples (NIST CSRC "SHA256.pdf", "SHA2_Additional.pdf"). */
        { "", 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
        { "abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
        { "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
        { "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrst"
          "nopqrstu", 1, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1" },
        { "a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0" },
};

/* Force the idx-th implementation of @family; false when this CPU cannot run it. */
static bool force_impl(KernelFamily family, int idx, const char **ret_name) {
        bool supported;
        const char *name = kernel_impl(family, (size_t) idx, &supported);

        ck_assert_ptr_nonnull(name);
        *ret_name = name;
        if (!supported) {
                /* Not runnable here: forcing it must be refused, never silently used. */
                ck_assert_int_eq(kernels_force(name), -ENOTSUP);
                return false;
        }
        ck_assert_int_eq(kernels_force(name), 0);
        ck_assert_str_eq(kernel_active(family), name);
        return true;
}

static size_t n_impls(KernelFamily family) {
        size_t n = 0;
        while (kernel_impl(family, n, NULL))
                n++;
        return n;
}

static uint8_t *random_bytes(size_t len, unsigned seed) {
        uint8_t *p = malloc(len ? len : 1);
        ck_assert_ptr_nonnull(p);
        srand(seed);
        for (size_t i = 0; i < len; i++)
                p[i] = (uint8_t) rand();
        return p;
}

START_TEST(test_vectors) {
        const char *name;
        if (!force_impl(KERNEL_SHA256, _i, &name))
                return;

        for (size_t v = 0; v < sizeof(vectors) / sizeof(vectors[0]); v++) {
                uint8_t d[SHA256_DIGEST_SIZE];
                char hex[SHA256_HEX_SIZE];
                Sha256 s;

                sha256_init(&s);
                for (size_t r = 0; r < vectors[v].repeat; r++)
                        sha256_update(&s, vectors[v].msg, strlen(vectors[v].msg));
                sha256_final(&s, d);
                sha256_to_hex(d, hex);
                ck_assert_msg(strcmp(hex, vectors[v].hex) == 0, "kernel %s, vector %zu: got %s, want %s", name, v,
                              hex, vectors[v].hex);
        }
}
END_TEST

/* Random lengths 0..4097 and random split points, against the portable kernel. */
START_TEST(test_random_lengths) {
        const char *name;
        uint8_t *data = random_bytes(4097, 42);
        uint8_t want[4098][SHA256_DIGEST_SIZE];

        ck_assert_int_eq(kernels_force("generic"), 0);
        for (size_t len = 0; len <= 4097; len++)
                sha256_digest(data, len, want[len]);

        if (force_impl(KERNEL_SHA256, _i, &name)) {
                srand(7);
                for (size_t len = 0; len <= 4097; len++) {
                        uint8_t got[SHA256_DIGEST_SIZE];
                        size_t cut1 = len ? (size_t) rand() % (len + 1) : 0;
                        size_t cut2 = cut1 + (len - cut1 ? (size_t) rand() % (len - cut1 + 1) : 0);
                        Sha256 s;

                        sha256_init(&s);
                        sha256_update(&s, data, cut1);
                        sha256_update(&s, data + cut1, cut2 - cut1);
                        sha256_update(&s, data + cut2, len - cut2);
                        sha256_final(&s, got);
                        ck_assert_msg(memcmp(got, want[len], SHA256_DIGEST_SIZE) == 0,
                                      "kernel %s, length %zu split at %zu/%zu differs from generic", name, len,
                                      cut1, cut2);

                        sha256_digest(data, len, got);
                        ck_assert_msg(memcmp(got, want[len], SHA256_DIGEST_SIZE) == 0,
                                      "kernel %s, length %zu one-shot differs from generic", name, len);
                }
        }
        free(data);
}
END_TEST

/* Byte-at-a-time feeding crosses every buffer boundary. */
START_TEST(test_bytewise) {
        const char *name;
        uint8_t *data = random_bytes(300, 3);
        uint8_t want[SHA256_DIGEST_SIZE], got[SHA256_DIGEST_SIZE];
        Sha256 s;

        if (force_impl(KERNEL_SHA256, _i, &name)) {
                sha256_digest(data, 300, want);
                sha256_init(&s);
                for (size_t i = 0; i < 300; i++)
                        sha256_update(&s, data + i, 1);
                sha256_final(&s, got);
                ck_assert_msg(memcmp(got, want, SHA256_DIGEST_SIZE) == 0, "kernel %s: bytewise differs", name);
        }
        free(data);
}
END_TEST

/* Every lane of every multi-buffer kernel equals the single-stream digest of its chunk. */
START_TEST(test_multi) {
        static const size_t lengths[] = { 0, 1, 55, 56, 63, 64, 65, 119, 120, 127, 128, 1000, 4096, 4097 };
        const char *name;
        enum { MAX_CHUNKS = 19 };
        uint8_t *data = random_bytes(MAX_CHUNKS * 4097, 11);
        const uint8_t *chunks[MAX_CHUNKS];
        uint8_t want[MAX_CHUNKS][SHA256_DIGEST_SIZE], got[MAX_CHUNKS][SHA256_DIGEST_SIZE];

        for (size_t li = 0; li < sizeof(lengths) / sizeof(lengths[0]); li++) {
                size_t len = lengths[li];

                /* Unaligned, interleaved chunk starts: lanes must not assume anything. */
                for (size_t c = 0; c < MAX_CHUNKS; c++)
                        chunks[c] = data + (c * 4097 + c) % (MAX_CHUNKS * 4097 - len + 1);

                ck_assert_int_eq(kernels_force("generic"), 0);
                for (size_t c = 0; c < MAX_CHUNKS; c++)
                        sha256_digest(chunks[c], len, want[c]);

                if (!force_impl(KERNEL_SHA256_MULTI, _i, &name))
                        break;
                for (size_t n = 0; n <= MAX_CHUNKS; n++) {
                        memset(got, 0xa5, sizeof(got));
                        sha256_multi(chunks, n, len, got);
                        for (size_t c = 0; c < n; c++)
                                ck_assert_msg(memcmp(got[c], want[c], SHA256_DIGEST_SIZE) == 0,
                                              "multi kernel %s: %zu chunks of %zu bytes, chunk %zu differs", name,
                                              n, len, c);
                }
        }
        free(data);
}
END_TEST

/*
 * sha256_update2 and sha256_update_pair (two messages) equal two updates, whatever the states'
 * buffered lengths.
 */
START_TEST(test_update2) {
        const char *name;
        uint8_t *data = random_bytes(5000, 17);

        if (force_impl(KERNEL_SHA256, _i, &name)) {
                srand(23);
                for (int round = 0; round < 300; round++) {
                        size_t pre_a = (size_t) rand() % 200, pre_b = round % 3 ? pre_a : (size_t) rand() % 200;
                        size_t len = (size_t) rand() % 4000;
                        Sha256 a, b, ra, rb;
                        uint8_t da[32], db[32], wa[32], wb[32];

                        sha256_init(&a);
                        sha256_init(&b);
                        sha256_update(&a, data + 4000, pre_a);
                        sha256_update(&b, data + 4500, pre_b);
                        ra = a;
                        rb = b;
                        const uint8_t *mb = round % 2 ? data : data + 900;     /* b's message */
                        if (mb == data)
                                sha256_update2(&a, &b, data, len);
                        else
                                sha256_update_pair(&a, data, &b, mb, len);
                        sha256_update(&ra, data, len);
                        sha256_update(&rb, mb, len);
                        sha256_final(&a, da);
                        sha256_final(&b, db);
                        sha256_final(&ra, wa);
                        sha256_final(&rb, wb);
                        ck_assert_msg(memcmp(da, wa, 32) == 0 && memcmp(db, wb, 32) == 0,
                                      "kernel %s: update2/pair differs (pre %zu/%zu, len %zu, round %d)", name, pre_a, pre_b, len,
                                      round);
                }
        }
        free(data);
}
END_TEST

START_TEST(test_force) {
        ck_assert_int_eq(kernels_force("no-such-kernel"), -ENOENT);
        ck_assert_int_eq(kernels_force(NULL), 0);
        const char *best = kernel_active(KERNEL_SHA256);
        ck_assert_int_eq(kernels_force("generic"), 0);
        ck_assert_str_eq(kernel_active(KERNEL_SHA256), "generic");
        ck_assert_str_eq(kernel_active(KERNEL_SHA256_MULTI), "generic");
        ck_assert_int_eq(kernels_force(NULL), 0);
        ck_assert_str_eq(kernel_active(KERNEL_SHA256), best);

        /* The portable implementation is last in every family and always runnable. */
        for (KernelFamily f = 0; f < _KERNEL_FAMILY_MAX; f++) {
                bool ok = false;
                size_t n = n_impls(f);
                ck_assert_uint_ge(n, 1);
                ck_assert_str_eq(kernel_impl(f, n - 1, &ok), "generic");
                ck_assert(ok);
        }

        /* TASKPATCH_KERNEL drives kernels_init(). */
        setenv("TASKPATCH_KERNEL", "generic", 1);
        ck_assert_int_eq(kernels_init(), 0);
        ck_assert_str_eq(kernel_active(KERNEL_SHA256), "generic");
        setenv("TASKPATCH_KERNEL", "bogus", 1);
        ck_assert_int_eq(kernels_init(), -ENOENT);
        unsetenv("TASKPATCH_KERNEL");
        ck_assert_int_eq(kernels_init(), 0);
        ck_assert_str_eq(kernel_active(KERNEL_SHA256), best);
}
END_TEST

START_TEST(test_hex) {
        uint8_t d[SHA256_DIGEST_SIZE];
        char hex[SHA256_HEX_SIZE];

        for (unsigned i = 0; i < SHA256_DIGEST_SIZE; i++)
                d[i] = (uint8_t) (i * 9);
        sha256_to_hex(d, hex);
        ck_assert_str_eq(hex, "0009121b242d363f48515a636c757e879099a2abb4bdc6cfd8e1eaf3fc050e17");
}
END_TEST

static Suite *sha256_suite(void) {
        Suite *s = suite_create("sha256");
        TCase *tc = tcase_create("kernels");

        tcase_set_timeout(tc, 120);  /* the generic kernel under qemu-user is slow */
        tcase_add_loop_test(tc, test_vectors, 0, (int) n_impls(KERNEL_SHA256));
        tcase_add_loop_test(tc, test_random_lengths, 0, (int) n_impls(KERNEL_SHA256));
        tcase_add_loop_test(tc, test_bytewise, 0, (int) n_impls(KERNEL_SHA256));
        tcase_add_loop_test(tc, test_multi, 0, (int) n_impls(KERNEL_SHA256_MULTI));
        tcase_add_loop_test(tc, test_update2, 0, (int) n_impls(KERNEL_SHA256));
        tcase_add_test(tc, test_force);
        tcase_add_test(tc, test_hex);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(sha256_suite)
