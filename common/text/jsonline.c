/* SPDX-License-Identifier: MIT */

#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "fileio.h"
#include "jsonline.h"
#include "sha256.h"

/*
 * The LineReader has no capacity field (the header fixes its layout), so the
 * buffer is always sized by alloc_size(): rounding to a power of two lets
 * glibc's realloc() return at once when the size class does not change.
 * A reader whose max is 0 refuses every byte: that is how an overflow marks
 * it unusable.
 */
static size_t alloc_size(size_t n) {
        size_t s = 256;

        if (n > SIZE_MAX / 2)   /* no power of two above: exact (still monotonic) */
                return n;
        while (s < n)
                s <<= 1;
        return s;
}

int line_reader_feed(LineReader *r, const void *data, size_t n) {
        const char *d = data;
        size_t held, partial, keep, new_len;

        if (n == 0)
                return 0;
        if (r->max == 0)
                return -EMSGSIZE;

        /* Compact: drop the lines already consumed. */
        held = r->len - r->start;
        if (r->start > 0) {
                if (held > 0)
                        memmove(r->buf, r->buf + r->start, held);
                r->start = 0;
                r->len = held;
        }

        /* Bytes of the unfinished line already held (after the last newline held). */
        const char *nl = held > 0 ? memrchr(r->buf, '\n', held) : NULL;
        size_t partial_start = nl ? (size_t) (nl - r->buf) + 1 : 0;
        partial = held - partial_start;

        /*
         * Check every line the new bytes finish, and the one they leave open,
         * before copying anything: a line of more than max bytes (newline
         * included) is refused as soon as its first max bytes hold no newline.
         */
        keep = 0;       /* bytes of @data that end in a newline of an acceptable line */
        for (size_t pos = 0; pos < n;) {
                const char *e = memchr(d + pos, '\n', n - pos);
                size_t line = partial + (e ? (size_t) (e - (d + pos)) + 1 : n - pos);

                if (e ? line > r->max : line >= r->max) {
                        /* Keep the complete lines before the bad one, drop the bad one's bytes. */
                        if (pos == 0)
                                r->len = partial_start;
                        else
                                r->len = held;
                        n = keep;
                        r->max = 0;
                        break;
                }
                if (!e)
                        break;
                partial = 0;
                pos = (size_t) (e - d) + 1;
                keep = pos;
        }

        if (r->max == 0 && n == 0)
                return -EMSGSIZE;

        if (n > SIZE_MAX - r->len - 1)
                return -ENOMEM;
        new_len = r->len + n;
        if (!r->buf || alloc_size(new_len + 1) != alloc_size(r->len + 1)) {
                char *b = realloc(r->buf, alloc_size(new_len + 1));
                if (!b)
                        return -ENOMEM;
                r->buf = b;
        }
        memcpy(r->buf + r->len, d, n);
        r->len = new_len;
        return r->max == 0 ? -EMSGSIZE : 0;
}

int line_reader_next(LineReader *r, char **ret_line, size_t *ret_len) {
        char *line, *e;
        size_t n;

        if (r->start >= r->len)
                return 0;
        line = r->buf + r->start;
        e = memchr(line, '\n', r->len - r->start);
        if (!e)
                return 0;
        n = (size_t) (e - line);
        *e = '\0';
        r->start += n + 1;
        *ret_line = line;
        *ret_len = n;
        return 1;
}

void line_reader_done(LineReader *r) {
        free(r->buf);
        r->buf = NULL;
        r->len = r->start = 0;
}

/* Length of the well-formed UTF-8 sequence (RFC 3629) starting at @s, NUL-terminated; 0 if there is none. */
static size_t utf8_sequence(const unsigned char *s) {
        unsigned char lo = 0x80, hi = 0xbf;     /* the second byte's range: no overlongs, surrogates, > U+10FFFF */
        size_t n;

        if (s[0] < 0x80)
                return 1;
        if (s[0] >= 0xc2 && s[0] <= 0xdf)
                n = 2;
        else if (s[0] >= 0xe0 && s[0] <= 0xef) {
                n = 3;
                lo = s[0] == 0xe0 ? 0xa0 : lo;
                hi = s[0] == 0xed ? 0x9f : hi;
        } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
                n = 4;
                lo = s[0] == 0xf0 ? 0x90 : lo;
                hi = s[0] == 0xf4 ? 0x8f : hi;
        } else
                return 0;
        if (s[1] < lo || s[1] > hi)
                return 0;
        for (size_t i = 2; i < n; i++)
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
        return n;
}

void jsonline_scrub_utf8(char *text) {
        for (unsigned char *p = (unsigned char *) text; *p;) {
                size_t n = utf8_sequence(p);
                if (n == 0) {
                        *p++ = '?';
                        continue;
                }
                p += n;
        }
}

int jsonline_parse(const char *line, size_t len, json_t **ret, TpError *err) {
        json_error_t jerr;
        json_t *j;

        /* jansson would refuse a raw NUL too, but this says where and what. */
        const char *nul = len > 0 ? memchr(line, '\0', len) : NULL;
        if (nul)
                return tp_error(err, -EBADMSG, "line is not JSON: NUL byte at column %zu", (size_t) (nul - line) + 1);

        j = json_loadb(len > 0 ? line : "", len, JSON_REJECT_DUPLICATES, &jerr);
        if (!j) {
                /* jansson quotes the bytes near an error as they came, even the first of a broken sequence. */
                jsonline_scrub_utf8(jerr.text);
                return tp_error(err, -EBADMSG, "line is not JSON: %s at column %d", jerr.text,
                                jerr.column > 0 ? jerr.column : 1);
        }
        if (!json_is_object(j)) {
                json_decref(j);
                return tp_error(err, -EBADMSG, "a request must be a JSON object");
        }
        *ret = j;
        return 0;
}

typedef struct DumpBuf {
        char *p;
        size_t len, cap, max;   /* max: bytes allowed before the newline */
        int error;              /* why the callback stopped jansson */
} DumpBuf;

static int dump_cb(const char *buffer, size_t size, void *data) {
        DumpBuf *b = data;

        if (size > b->max - b->len) {
                b->error = -EMSGSIZE;   /* stop at the cap: never hold more than max bytes */
                return -1;
        }
        if (b->len + size + 2 > b->cap) {
                size_t cap = alloc_size(b->len + size + 2);
                char *p = realloc(b->p, cap);
                if (!p) {
                        b->error = -ENOMEM;
                        return -1;
                }
                b->p = p;
                b->cap = cap;
        }
        memcpy(b->p + b->len, buffer, size);
        b->len += size;
        return 0;
}

int jsonline_dump(const json_t *obj, size_t max, char **ret, size_t *ret_len) {
        DumpBuf b = {};

        if (!obj || max < 1)
                return -EINVAL;
        b.max = max - 1;        /* room for the newline */
        if (json_dump_callback(obj, dump_cb, &b, JSON_COMPACT) < 0) {
                free(b.p);
                /* Not the callback: jansson refused the value itself (not a container, a cycle). */
                return b.error < 0 ? b.error : -EINVAL;
        }
        if (!b.p) {             /* cannot happen for an object ("{}"), kept for safety */
                b.p = malloc(2);
                if (!b.p)
                        return -ENOMEM;
        }
        b.p[b.len++] = '\n';
        b.p[b.len] = '\0';
        *ret = b.p;
        *ret_len = b.len;
        return 0;
}

/* Wait until @sock can take more bytes (a non-blocking socket that said EAGAIN). */
static int wait_writable(int sock) {
        struct pollfd p = { .fd = sock, .events = POLLOUT };

        for (;;) {
                int r = poll(&p, 1, -1);
                if (r >= 0)
                        return 0;
                if (errno != EINTR)
                        return negative_errno();
        }
}

int jsonline_send(int sock, const void *data, size_t n, int fd) {
        const char *p = data;
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(int))];
        } control;

        /* SCM_RIGHTS needs at least one byte of data to travel with on a stream socket. */
        if (fd >= 0 && n == 0)
                return -EINVAL;

        while (n > 0) {
                struct iovec iov = { .iov_base = (void *) p, .iov_len = n };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

                if (fd >= 0) {
                        memset(&control, 0, sizeof(control));
                        mh.msg_control = control.buf;
                        mh.msg_controllen = sizeof(control.buf);
                        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                        c->cmsg_level = SOL_SOCKET;
                        c->cmsg_type = SCM_RIGHTS;
                        c->cmsg_len = CMSG_LEN(sizeof(int));
                        memcpy(CMSG_DATA(c), &fd, sizeof(int));
                }

                ssize_t k = sendmsg(sock, &mh, MSG_NOSIGNAL);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN || errno == EWOULDBLOCK) {
                                int r = wait_writable(sock);
                                if (r < 0)
                                        return r;
                                continue;
                        }
                        return negative_errno();
                }
                /* The descriptor went with the first byte that was sent. */
                if (k > 0)
                        fd = -1;
                p += k;
                n -= (size_t) k;
        }
        return 0;
}

/* SCM_MAX_FD (the kernel's own cap per message): room for all, so extras are ours to close. */
#define RECV_FDS_ROOM 253

ssize_t jsonline_recv(int sock, void *buf, size_t n, int fds[JSONLINE_MAX_FDS], size_t *ret_nfds) {
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(int) * RECV_FDS_ROOM)];
        } control;
        struct iovec iov = { .iov_base = buf, .iov_len = n };
        struct msghdr mh;
        ssize_t k;
        size_t nfds = 0;

        for (;;) {
                mh = (struct msghdr) {
                        .msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = control.buf,
                        .msg_controllen = sizeof(control.buf),
                };
                k = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
                if (k >= 0)
                        break;
                if (errno != EINTR)
                        return negative_errno();
        }

        bool truncated = mh.msg_flags & MSG_CTRUNC;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < count; i++) {
                        int fd;

                        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                        /* A truncated set is not what the peer meant to send: keep none of it. */
                        if (fds && !truncated && nfds < JSONLINE_MAX_FDS)
                                fds[nfds++] = fd;
                        else
                                safe_close(fd);
                }
        }

        if (ret_nfds)
                *ret_nfds = nfds;
        return k;
}

json_t *json_sha256(const uint8_t digest[32]) {
        char h[SHA256_HEX_SIZE];
        sha256_to_hex(digest, h);
        return json_string(h);
}

int json_save_atomic(const char *path, json_t *o, size_t flags, uint64_t *ret_bytes, TpError *err) {
        char *text = o ? json_dumps(o, flags) : NULL;

        json_decref(o);
        if (!text)
                return -ENOMEM;
        size_t len = strlen(text);
        text[len] = '\n';       /* json_dumps' NUL becomes the final newline */
        int r = atomic_file_write(path, text, len + 1);
        free(text);
        if (r < 0)
                return tp_error(err, r, "%s: %s", path, strerror(-r));
        if (ret_bytes)
                *ret_bytes = len + 1;
        return 0;
}
