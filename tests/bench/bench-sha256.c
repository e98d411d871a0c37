/* SPDX-License-Identifier: MIT */
/*
 * In-memory SHA-256 throughput of every kernel this CPU can run: single-stream
 * and multi-buffer (equal chunks, as the slots' per-chunk hash tables use).
 * Prints one line per kernel: "<family> <kernel> <MB/s>", best of several runs.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dispatch.h"
#include "sha256.h"

#define TOTAL (64u << 20)       /* bytes hashed per run */
#define CHUNK (64u << 10)       /* multi-buffer chunk size */
#define RUNS 5

static double now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static double bench_single(const uint8_t *buf) {
        double best = 1e9;
        uint8_t d[SHA256_DIGEST_SIZE];

        for (int r = 0; r < RUNS; r++) {
                double t = now();
                sha256_digest(buf, TOTAL, d);
                t = now() - t;
                if (t < best)
                        best = t;
        }
        return TOTAL / best / 1e6;
}

static double bench_multi(const uint8_t *buf) {
        enum { N = TOTAL / CHUNK };
        static const uint8_t *chunks[N];
        static uint8_t digests[N][SHA256_DIGEST_SIZE];
        double best = 1e9;

        for (size_t i = 0; i < N; i++)
                chunks[i] = buf + i * CHUNK;
        for (int r = 0; r < RUNS; r++) {
                double t = now();
                sha256_multi(chunks, N, CHUNK, digests);
                t = now() - t;
                if (t < best)
                        best = t;
        }
        return TOTAL / best / 1e6;
}

int main(void) {
        uint8_t *buf = malloc(TOTAL);
        const char *name;
        bool ok;

        if (!buf) {
                fprintf(stderr, "bench-sha256: out of memory\n");
                return 1;
        }
        for (size_t i = 0; i < TOTAL; i++)
                buf[i] = (uint8_t) (i * 2654435761u >> 11);

        for (KernelFamily f = 0; f < _KERNEL_FAMILY_MAX; f++)
                for (size_t i = 0; (name = kernel_impl(f, i, &ok)); i++) {
                        if (!ok || kernels_force(name) < 0)
                                continue;
                        double mbs = f == KERNEL_SHA256 ? bench_single(buf) : bench_multi(buf);
                        printf("%s %s %.0f\n", kernel_family_to_string(f), name, mbs);
                }
        free(buf);
        return 0;
}
