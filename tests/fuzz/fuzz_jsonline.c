/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the socket framing and request decoding
 * (common/text/jsonline.c): the input is a byte stream from a client. It goes
 * into a LineReader in pieces whose sizes come from a PRNG seeded with a
 * hash of the input itself (so every input replays the same way), once
 * with the daemon's cap and once with a small one. Every line must be the
 * exact next line of the stream; -EMSGSIZE must come exactly when a line
 * outgrows the cap. Every line that parses must dump (compact, one line,
 * the cap exact to the byte) and parse back to an equal object.
 */

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jsonline.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct Stream {
        const uint8_t *data;
        size_t size;
        size_t fed;             /* bytes given to the reader */
        size_t off;             /* start of the first line not returned yet */
        size_t max;
        bool decode;            /* parse and round-trip each line */
} Stream;

static uint64_t fnv1a(const uint8_t *data, size_t size) {
        uint64_t h = 0xcbf29ce484222325u;
        for (size_t i = 0; i < size; i++)
                h = (h ^ data[i]) * 0x100000001b3u;
        return h;
}

static uint64_t splitmix64(uint64_t *s) {
        uint64_t z = (*s += 0x9e3779b97f4a7c15u);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
        return z ^ (z >> 31);
}

/* Mostly small pieces, some empty, some around the cap, some the whole rest. */
static size_t piece_size(uint64_t *seed, size_t left, size_t max) {
        uint64_t r = splitmix64(seed);
        size_t n;

        switch (r & 7) {
        case 0:
                n = 0;
                break;
        case 6:
                n = max - 1 + (size_t) ((r >> 8) % 3);
                break;
        case 7:
                n = left;
                break;
        default:
                n = 1 + (size_t) ((r >> 8) % 16);
                break;
        }
        return n < left ? n : left;
}

static void round_trip(const char *line, size_t len) {
        json_t *a = NULL, *b = NULL;
        char *copy, *text = NULL, *again = NULL;
        size_t n, m;
        TpError err = {};
        int r;

        /* An exact-size copy without the reader's NUL, so ASan sees any read past @len. */
        copy = malloc(len ? len : 1);
        if (!copy)
                abort();
        memcpy(copy, line, len);
        r = jsonline_parse(copy, len, &a, &err);
        free(copy);
        if (r < 0) {
                if (r != -EBADMSG || !err.message[0] || err.code != r || a)
                        abort();
                return;
        }
        if (r != 0 || !json_is_object(a))
                abort();

        /* A request line is at most 64 KiB; its compact dump cannot grow past the 1 MiB a daemon line may use. */
        if (jsonline_dump(a, JSONLINE_MAX_MESSAGE, &text, &n) < 0)
                abort();
        if (n < 3 || strlen(text) != n || text[n - 1] != '\n' || memchr(text, '\n', n - 1))
                abort();
        /* The cap counts the newline, to the byte. */
        if (jsonline_dump(a, n, &again, &m) < 0 || m != n || memcmp(again, text, n) != 0)
                abort();
        free(again);
        again = NULL;
        if (jsonline_dump(a, n - 1, &again, &m) != -EMSGSIZE || again)
                abort();

        if (jsonline_parse(text, n - 1, &b, &err) < 0 || !json_equal(a, b))
                abort();
        /* The dump is canonical: dumping the copy gives the same bytes. */
        if (jsonline_dump(b, JSONLINE_MAX_MESSAGE, &again, &m) < 0 || m != n || memcmp(again, text, n) != 0)
                abort();
        free(again);
        free(text);
        json_decref(b);
        json_decref(a);
}

/* Take every complete line the reader holds: each must be the next line of the stream. */
static void drain(LineReader *lr, Stream *s) {
        char *line;
        size_t len;
        int r;

        while ((r = line_reader_next(lr, &line, &len)) > 0) {
                if (len >= s->max || s->off + len >= s->fed || line[len] != '\0' ||
                    memcmp(line, s->data + s->off, len) != 0 || s->data[s->off + len] != '\n')
                        abort();
                if (s->decode)
                        round_trip(line, len);
                s->off += len + 1;
        }
        if (r != 0)
                abort();
}

static void run(const uint8_t *data, size_t size, size_t max, uint64_t seed, bool decode) {
        LineReader lr = LINE_READER_INIT(max);
        Stream s = { .data = data, .size = size, .max = max, .decode = decode };
        int r = 0;

        while (s.fed < size) {
                size_t n = piece_size(&seed, size - s.fed, max);

                r = line_reader_feed(&lr, data + s.fed, n);
                if (r < 0 && r != -EMSGSIZE)
                        abort();
                s.fed += n;
                drain(&lr, &s);
                if (r < 0)
                        break;
                /* Not a byte later than needed: what is held is one unfinished line, shorter than the cap. */
                if (memchr(data + s.off, '\n', s.fed - s.off) || s.fed - s.off >= max)
                        abort();
        }
        if (r == -EMSGSIZE) {
                /*
                 * Not a byte early: the line at off really is too long (its first max bytes hold no newline),
                 * and every complete line before it was returned (jsonline.c keeps them).
                 */
                if (s.fed - s.off < max || memchr(data + s.off, '\n', max))
                        abort();
                /* The reader stays refused and holds nothing more. */
                if (line_reader_feed(&lr, "\n", 1) != -EMSGSIZE)
                        abort();
                drain(&lr, &s);
        }
        line_reader_done(&lr);
        line_reader_done(&lr);  /* done twice is fine */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        uint64_t seed = fnv1a(data, size);

        run(data, size, JSONLINE_MAX_REQUEST, seed, true);
        /* A small cap so the fuzzer reaches the overflow paths with short inputs. */
        run(data, size, 1 + (size_t) (seed % 64), seed, false);
        return 0;
}
