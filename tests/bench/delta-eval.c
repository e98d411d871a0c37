/* SPDX-License-Identifier: MIT */
/*
 * delta-eval: how small does common/codec/delta.c make a changed tensor?
 *
 *   delta-eval [--peers] [--bench] -l LAYOUT BASE TARGET     two raw tensor dumps of one layout
 *   delta-eval [--peers] [--bench] -r RANGES BASE TARGET     spans of two files: lines "OFFSET LENGTH LAYOUT [NAME]"
 *   delta-eval --decode-speed [--trials N] (-l LAYOUT | -r RANGES) BASE TARGET
 *
 * -l also takes a ggml type name (q4_K, ...). Per span and in total it
 * prints: the span's bytes, how many of them differ, zstd -19 of the target
 * bytes, of the plain byte-wise difference, and of the layout-aware delta
 * (one frame per span, groups concatenated, as the bundle stores it), and
 * what a bundle would carry (the smaller of raw and delta). --peers runs
 * bsdiff, xdelta3 -9 -e -s and zstd -19 --long --patch-from on the same
 * bytes (the spans concatenated) and prints the ratio to the best of them;
 * --bench times delta_encode/delta_decode (MB/s of span bytes, thread CPU
 * time, repeated to about 200 MB). Every span is decoded again and
 * compared with the target: a mismatch is an error (exit 1).
 *
 * --decode-speed skips zstd and the table above: per layout, it times
 * delta_decode alone over all spans of that layout, group by group as the
 * stager calls it (about 64 MB per trial), and prints the best of --trials
 * (default 5) in MB/s of span bytes: the best is the least disturbed run
 * on a shared machine.
 */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "delta.h"
#include "ggml.h"
#include "macro.h"

extern char **environ;

typedef struct Span {
        uint64_t offset, len;
        DeltaLayout layout;
        char name[64];
} Span;

typedef struct Sizes {
        uint64_t bytes, changed, raw, bytewise, delta, bundle;
        double enc_s, dec_s;
} Sizes;

static int level = 19;

/* CPU time of this thread: the number that matters on a shared machine (and the same on an idle one). */
static double now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static size_t zstd_size(const uint8_t *p, size_t len) {
        ZSTD_CCtx *c = ZSTD_createCCtx();
        size_t cap = ZSTD_compressBound(len);
        void *buf = malloc(cap);
        size_t r;

        if (!c || !buf) {
                fprintf(stderr, "delta-eval: out of memory\n");
                exit(2);
        }
        ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
        r = ZSTD_compress2(c, buf, cap, p, len);
        if (ZSTD_isError(r)) {
                fprintf(stderr, "delta-eval: zstd: %s\n", ZSTD_getErrorName(r));
                exit(2);
        }
        free(buf);
        ZSTD_freeCCtx(c);
        return r;
}

static const uint8_t *map_file(const char *path, uint64_t *ret_size) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        void *p;

        if (fd < 0 || fstat(fd, &st) < 0) {
                fprintf(stderr, "delta-eval: %s: %s\n", path, strerror(errno));
                exit(2);
        }
        *ret_size = (uint64_t) st.st_size;
        if (st.st_size == 0)
                return (const uint8_t *) "";
        p = mmap(NULL, (size_t) st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
                fprintf(stderr, "delta-eval: %s: mmap: %s\n", path, strerror(errno));
                exit(2);
        }
        return p;
}

static DeltaLayout parse_layout(const char *s) {
        DeltaLayout l = delta_layout_from_string(s);
        int t;

        if (l >= 0)
                return l;
        t = ggml_type_from_name(s);
        if (t >= 0)
                return delta_layout_for_ggml((uint32_t) t);
        fprintf(stderr, "delta-eval: unknown layout or ggml type '%s'\n", s);
        exit(2);
}

static size_t read_ranges(const char *path, Span **ret) {
        FILE *f = fopen(path, "re");
        char line[512];
        size_t n = 0, cap = 0, lineno = 0;
        Span *spans = NULL;

        if (!f) {
                fprintf(stderr, "delta-eval: %s: %s\n", path, strerror(errno));
                exit(2);
        }
        while (fgets(line, sizeof(line), f)) {
                char layout[32] = "", name[64] = "";
                char *end;
                Span s = { 0 };

                lineno++;
                if (line[0] == '#' || line[strspn(line, " \t\r\n")] == '\0')
                        continue;
                errno = 0;
                s.offset = strtoull(line, &end, 0);
                s.len = strtoull(end, &end, 0);
                if (errno || sscanf(end, "%31s %63s", layout, name) < 1) {
                        fprintf(stderr, "delta-eval: %s:%zu: want OFFSET LENGTH LAYOUT [NAME]\n", path, lineno);
                        exit(2);
                }
                s.layout = parse_layout(layout);
                snprintf(s.name, sizeof(s.name), "%s", name[0] ? name : "-");
                if (n == cap) {
                        cap = cap ? 2 * cap : 64;
                        spans = realloc(spans, cap * sizeof(Span));
                        if (!spans)
                                exit(2);
                }
                spans[n++] = s;
        }
        fclose(f);
        *ret = spans;
        return n;
}

/* Encode (and decode again) one span group by group; fills everything but the peers. */
static int eval_span(const Span *s, const uint8_t *base, const uint8_t *target, bool bench, Sizes *z) {
        size_t len = (size_t) s->len, group = delta_group_bytes(s->layout);
        uint8_t *delta = malloc(len ? len : 1), *back = malloc(group), *diff = malloc(len ? len : 1);
        int reps = 1;
        double t0, t1;

        if (!delta || !back || !diff)
                exit(2);
        if (len % delta_unit(s->layout) != 0) {
                fprintf(stderr, "delta-eval: span %s: %zu bytes is not a whole number of %s units (%zu)\n", s->name,
                        len, delta_layout_to_string(s->layout), delta_unit(s->layout));
                exit(2);
        }
        memset(z, 0, sizeof(*z));
        z->bytes = len;
        for (size_t i = 0; i < len; i++) {
                diff[i] = (uint8_t) (target[i] - base[i]);
                z->changed += diff[i] != 0;
        }

        if (bench)
                reps = (int) (200e6 / (double) (len + 1)) + 1;
        t0 = now();
        for (int r = 0; r < reps; r++)
                for (size_t at = 0; at < len; at += group) {
                        size_t g = len - at < group ? len - at : group;
                        delta_encode(s->layout, base + at, target + at, g, delta + at);
                }
        t1 = now();
        z->enc_s = (t1 - t0) / reps;

        t0 = now();
        for (int r = 0; r < reps; r++)
                for (size_t at = 0; at < len; at += group) {
                        size_t g = len - at < group ? len - at : group;
                        delta_decode(s->layout, base + at, delta + at, g, back);
                        if (r == 0 && memcmp(back, target + at, g) != 0) {
                                fprintf(stderr, "delta-eval: span %s: round trip differs in the group at %zu\n",
                                        s->name, at);
                                return -EBADMSG;
                        }
                }
        t1 = now();
        z->dec_s = (t1 - t0) / reps;

        z->raw = zstd_size(target, len);
        z->bytewise = zstd_size(diff, len);
        z->delta = zstd_size(delta, len);
        z->bundle = z->delta < z->raw ? z->delta : z->raw;
        free(delta);
        free(back);
        free(diff);
        return 0;
}

/* Encode every span of @l once, then time decoding them all; prints one row. A mismatch is an error (exit 1). */
static void decode_speed_layout(DeltaLayout l, const Span *spans, size_t n, const uint8_t *base,
                               const uint8_t *target, int trials) {
        size_t group = delta_group_bytes(l), bytes = 0, spans_l = 0;
        uint8_t **deltas = calloc(n, sizeof(uint8_t *)), *back = malloc(group);
        double best = 0;
        int reps;

        if (!deltas || !back)
                exit(2);
        for (size_t i = 0; i < n; i++) {
                const uint8_t *b = base + spans[i].offset, *t = target + spans[i].offset;
                size_t len = (size_t) spans[i].len;

                if (spans[i].layout != l)
                        continue;
                deltas[i] = malloc(len ? len : 1);
                if (!deltas[i])
                        exit(2);
                for (size_t at = 0; at < len; at += group) {
                        size_t g = len - at < group ? len - at : group;
                        delta_encode(l, b + at, t + at, g, deltas[i] + at);
                        delta_decode(l, b + at, deltas[i] + at, g, back);
                        if (memcmp(back, t + at, g) != 0) {
                                fprintf(stderr, "delta-eval: span %s: round trip differs in the group at %zu\n",
                                        spans[i].name, at);
                                exit(1);
                        }
                }
                bytes += len;
                spans_l++;
        }
        reps = (int) (64e6 / (double) (bytes + 1)) + 1;
        for (int k = 0; k < trials; k++) {
                double t0 = now();
                for (int r = 0; r < reps; r++)
                        for (size_t i = 0; i < n; i++)
                                for (size_t at = 0; deltas[i] && at < spans[i].len; at += group) {
                                        size_t len = (size_t) spans[i].len, g = len - at < group ? len - at : group;
                                        delta_decode(l, base + spans[i].offset + at, deltas[i] + at, g, back);
                                }
                double s = (now() - t0) / reps;
                if (k == 0 || s < best)
                        best = s;
        }
        printf("%-6s %6zu %12zu %10.1f\n", delta_layout_to_string(l), spans_l, bytes, (double) bytes / 1e6 / best);
        for (size_t i = 0; i < n; i++)
                free(deltas[i]);
        free(deltas);
        free(back);
}

static void decode_speed(const Span *spans, size_t n, const uint8_t *base, const uint8_t *target, int trials) {
        printf("%-6s %6s %12s %10s\n", "layout", "spans", "bytes", "dec MB/s");
        for (int l = 0; l < _DELTA_LAYOUT_MAX; l++)
                for (size_t i = 0; i < n; i++)
                        if (spans[i].layout == (DeltaLayout) l) {
                                decode_speed_layout((DeltaLayout) l, spans, n, base, target, trials);
                                break;
                        }
}

static int run(const char *const *argv) {
        pid_t pid;
        int status;
        posix_spawn_file_actions_t fa;

        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
        if (posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *) argv, environ) != 0) {
                posix_spawn_file_actions_destroy(&fa);
                return -ENOENT;
        }
        posix_spawn_file_actions_destroy(&fa);
        if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return -EIO;
        return 0;
}

static int64_t file_size(const char *path) {
        struct stat st;
        return stat(path, &st) < 0 ? -1 : (int64_t) st.st_size;
}

static void write_all(const char *path, const Span *spans, size_t n, const uint8_t *data) {
        FILE *f = fopen(path, "we");

        if (!f)
                exit(2);
        for (size_t i = 0; i < n; i++)
                if (fwrite(data + spans[i].offset, 1, spans[i].len, f) != spans[i].len)
                        exit(2);
        if (fclose(f) != 0)
                exit(2);
}

/* bsdiff, xdelta3, zstd --patch-from on the spans concatenated; -1 for a tool that failed. */
static void peers(const Span *spans, size_t n, const uint8_t *base, const uint8_t *target, int64_t out[3]) {
        char dir[] = "/tmp/delta-eval.XXXXXX", b[64], t[64], p[64], from[80];

        if (!mkdtemp(dir))
                exit(2);
        snprintf(b, sizeof(b), "%s/base", dir);
        snprintf(t, sizeof(t), "%s/target", dir);
        snprintf(p, sizeof(p), "%s/patch", dir);
        snprintf(from, sizeof(from), "--patch-from=%s", b);
        write_all(b, spans, n, base);
        write_all(t, spans, n, target);

        const char *bsdiff[] = { "bsdiff", b, t, p, NULL };
        const char *xdelta[] = { "xdelta3", "-9", "-e", "-f", "-s", b, t, p, NULL };
        const char *zstd[] = { "zstd", "-q", "-f", "-19", "--long=27", from, t, "-o", p, NULL };
        const char *const *cmds[] = { bsdiff, xdelta, zstd };
        for (size_t i = 0; i < 3; i++) {
                unlink(p);
                out[i] = run(cmds[i]) < 0 ? -1 : file_size(p);
        }
        unlink(p);
        unlink(b);
        unlink(t);
        rmdir(dir);
}

static void usage(FILE *f) {
        fputs("usage: delta-eval [--peers] [--bench] [--level N] (-l LAYOUT | -r RANGES) BASE TARGET\n"
              "       delta-eval --decode-speed [--trials N] (-l LAYOUT | -r RANGES) BASE TARGET\n"
              "  -l, --layout NAME   BASE and TARGET are raw dumps of one tensor of this layout or ggml type\n"
              "  -r, --ranges FILE   spans to compare, one per line: OFFSET LENGTH LAYOUT [NAME]\n"
              "  -p, --peers         also run bsdiff, xdelta3 -9 -e -s, zstd -19 --long --patch-from\n"
              "  -b, --bench         time encode and decode (MB/s)\n"
              "      --decode-speed  only time delta_decode, per layout, best of --trials (MB/s)\n"
              "      --trials N      runs of --decode-speed (default 5)\n"
              "      --level N       zstd level (default 19)\n",
              f);
}

static void print_row(const char *name, const char *layout, const Sizes *z, bool bench) {
        printf("%-28s %-6s %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64, name,
               layout, z->bytes, z->changed, z->raw, z->bytewise, z->delta, z->bundle);
        if (bench)
                printf("  enc %7.1f dec %7.1f MB/s", (double) z->bytes / 1e6 / z->enc_s,
                       (double) z->bytes / 1e6 / z->dec_s);
        printf("\n");
}

int main(int argc, char **argv) {
        static const struct option options[] = {
                { "layout", required_argument, NULL, 'l' }, { "ranges", required_argument, NULL, 'r' },
                { "peers", no_argument, NULL, 'p' },        { "bench", no_argument, NULL, 'b' },
                { "level", required_argument, NULL, 'L' },  { "help", no_argument, NULL, 'h' },
                { "decode-speed", no_argument, NULL, 'D' }, { "trials", required_argument, NULL, 'T' },
                {},
        };
        const char *layout = NULL, *ranges = NULL;
        bool with_peers = false, bench = false, speed = false;
        int trials = 5;
        Span *spans = NULL;
        size_t n;
        uint64_t base_size, target_size;
        int c;

        while ((c = getopt_long(argc, argv, "l:r:pbh", options, NULL)) >= 0)
                switch (c) {
                case 'l':
                        layout = optarg;
                        break;
                case 'r':
                        ranges = optarg;
                        break;
                case 'p':
                        with_peers = true;
                        break;
                case 'b':
                        bench = true;
                        break;
                case 'L':
                        level = (int) strtol(optarg, NULL, 10);
                        break;
                case 'D':
                        speed = true;
                        break;
                case 'T':
                        trials = (int) strtol(optarg, NULL, 10);
                        if (trials < 1)
                                trials = 1;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        if (argc - optind != 2 || !layout == !ranges) {
                usage(stderr);
                return 2;
        }

        const uint8_t *base = map_file(argv[optind], &base_size);
        const uint8_t *target = map_file(argv[optind + 1], &target_size);
        if (ranges)
                n = read_ranges(ranges, &spans);
        else {
                if (base_size != target_size) {
                        fprintf(stderr, "delta-eval: %s and %s differ in size\n", argv[optind], argv[optind + 1]);
                        return 2;
                }
                spans = calloc(1, sizeof(Span));
                if (!spans)
                        return 2;
                spans[0] = (Span) { 0, base_size, parse_layout(layout), "-" };
                snprintf(spans[0].name, sizeof(spans[0].name), "%s", argv[optind + 1]);
                n = 1;
        }

        for (size_t i = 0; i < n; i++)
                if (spans[i].offset > base_size || spans[i].len > base_size - spans[i].offset ||
                    spans[i].offset > target_size || spans[i].len > target_size - spans[i].offset) {
                        fprintf(stderr, "delta-eval: span %s is past the end of a file\n", spans[i].name);
                        return 2;
                }
        if (speed) {
                decode_speed(spans, n, base, target, trials);
                free(spans);
                return 0;
        }

        printf("%-28s %-6s %10s %10s %10s %10s %10s %10s\n", "span", "layout", "bytes", "changed", "zstd-raw",
               "zstd-diff", "zstd-delta", "bundle");
        Sizes total = { 0 };
        for (size_t i = 0; i < n; i++) {
                Sizes z;
                if (eval_span(&spans[i], base + spans[i].offset, target + spans[i].offset, bench, &z) < 0)
                        return 1;
                print_row(spans[i].name, delta_layout_to_string(spans[i].layout), &z, bench);
                total.bytes += z.bytes;
                total.changed += z.changed;
                total.raw += z.raw;
                total.bytewise += z.bytewise;
                total.delta += z.delta;
                total.bundle += z.bundle;
                total.enc_s += z.enc_s;
                total.dec_s += z.dec_s;
        }
        if (n > 1)
                print_row("total", "", &total, bench);

        if (with_peers) {
                int64_t p[3], best = -1;
                static const char *const names[] = { "bsdiff", "xdelta3", "zstd-patch-from" };

                peers(spans, n, base, target, p);
                for (size_t i = 0; i < 3; i++) {
                        printf("peer %-16s %10" PRId64 "\n", names[i], p[i]);
                        if (p[i] >= 0 && (best < 0 || p[i] < best))
                                best = p[i];
                }
                if (best > 0)
                        printf("bundle / best peer: %.3f  (bundle %" PRIu64 ", best peer %" PRId64 ")\n",
                               (double) total.bundle / (double) best, total.bundle, best);
        }
        free(spans);
        return 0;
}
