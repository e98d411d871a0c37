/* SPDX-License-Identifier: MIT */
/* common/text/jsonline.c: line splitting and its cap, parse/dump, fd passing over a socketpair. */

#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "check-main.h"
#include "jsonline.h"
#include "test-buf.h"

/* Feed @text in chunks of @chunk bytes, draining after each feed; the lines joined by '|'. */
static char *split(const char *text, size_t len, size_t chunk, size_t max) {
        LineReader r = LINE_READER_INIT(max);
        Buf out = {};

        for (size_t off = 0; off < len; off += chunk) {
                size_t n = len - off < chunk ? len - off : chunk;
                char *line;
                size_t l;

                ck_assert_int_eq(line_reader_feed(&r, text + off, n), 0);
                while (line_reader_next(&r, &line, &l) > 0) {
                        ck_assert_uint_eq(strlen(line), l);     /* NUL-terminated in place */
                        put(&out, line, l);
                        put(&out, "|", 1);
                }
                /* Consumed bytes are compacted away: only an unfinished line stays. */
                ck_assert_uint_lt(r.len - r.start, max + chunk);
        }
        put(&out, "", 1);
        line_reader_done(&r);
        return (char *) out.p;
}

START_TEST(test_split_any_boundaries) {
        static const char text[] = "{\"cmd\":\"status\"}\n\n{\"a\":[1,2,3]}\nx\n{\"long\":\"0123456789abcdef\"}\n";
        const char *want = "{\"cmd\":\"status\"}||{\"a\":[1,2,3]}|x|{\"long\":\"0123456789abcdef\"}|";

        for (size_t chunk = 1; chunk <= sizeof(text); chunk++) {
                char *got = split(text, sizeof(text) - 1, chunk, 64);
                ck_assert_msg(strcmp(got, want) == 0, "chunk %zu: %s", chunk, got);
                free(got);
        }
}
END_TEST

START_TEST(test_unfinished_line_waits) {
        LineReader r = LINE_READER_INIT(64);
        char *line;
        size_t len;

        ck_assert_int_eq(line_reader_feed(&r, "abc", 3), 0);
        ck_assert_int_eq(line_reader_next(&r, &line, &len), 0);
        ck_assert_int_eq(line_reader_feed(&r, "", 0), 0);
        ck_assert_int_eq(line_reader_next(&r, &line, &len), 0);
        ck_assert_int_eq(line_reader_feed(&r, "d\ne", 3), 0);
        ck_assert_int_eq(line_reader_next(&r, &line, &len), 1);
        ck_assert_str_eq(line, "abcd");
        ck_assert_uint_eq(len, 4);
        ck_assert_int_eq(line_reader_next(&r, &line, &len), 0);
        line_reader_done(&r);
        line_reader_done(&r);   /* twice is harmless */
}
END_TEST

/* A line of max bytes (newline included) passes; one byte more is refused, in one feed or byte by byte. */
START_TEST(test_exactly_max) {
        const size_t max = 32;
        char text[64];
        char *line;
        size_t len;

        memset(text, 'a', sizeof(text));
        text[max - 1] = '\n';
        LineReader r = LINE_READER_INIT(max);
        ck_assert_int_eq(line_reader_feed(&r, text, max), 0);
        ck_assert_int_eq(line_reader_next(&r, &line, &len), 1);
        ck_assert_uint_eq(len, max - 1);
        line_reader_done(&r);

        memset(text, 'a', sizeof(text));
        text[max] = '\n';
        r = LINE_READER_INIT(max);
        ck_assert_int_eq(line_reader_feed(&r, text, max + 1), -EMSGSIZE);
        ck_assert_int_eq(line_reader_next(&r, &line, &len), 0);
        /* Unusable afterwards. */
        ck_assert_int_eq(line_reader_feed(&r, "{}\n", 3), -EMSGSIZE);
        line_reader_done(&r);

        r = LINE_READER_INIT(max);
        int rc = 0;
        size_t fed = 0;
        for (; fed <= max && rc == 0; fed++)
                rc = line_reader_feed(&r, text + fed, 1);
        ck_assert_int_eq(rc, -EMSGSIZE);
        /* Refused at the max-th byte without a newline: the buffer never outgrows the cap. */
        ck_assert_uint_eq(fed, max);
        ck_assert_uint_le(r.len, max);
        line_reader_done(&r);
}
END_TEST

/* Lines finished before an overlong one in the same feed are still delivered. */
START_TEST(test_overlong_after_good_lines) {
        LineReader r = LINE_READER_INIT(8);
        char *line;
        size_t len;

        ck_assert_int_eq(line_reader_feed(&r, "ab", 2), 0);
        ck_assert_int_eq(line_reader_feed(&r, "c\nok\n0123456789\n", 17), -EMSGSIZE);
        ck_assert_int_eq(line_reader_next(&r, &line, &len), 1);
        ck_assert_str_eq(line, "abc");
        ck_assert_int_eq(line_reader_next(&r, &line, &len), 1);
        ck_assert_str_eq(line, "ok");
        ck_assert_int_eq(line_reader_next(&r, &line, &len), 0);
        line_reader_done(&r);

        /* An overlong line that began in an earlier feed is dropped whole. */
        r = LINE_READER_INIT(8);
        ck_assert_int_eq(line_reader_feed(&r, "x\n01234", 7), 0);
        ck_assert_int_eq(line_reader_feed(&r, "567\n", 4), -EMSGSIZE);
        ck_assert_int_eq(line_reader_next(&r, &line, &len), 1);
        ck_assert_str_eq(line, "x");
        ck_assert_int_eq(line_reader_next(&r, &line, &len), 0);
        line_reader_done(&r);
}
END_TEST

START_TEST(test_many_lines_one_feed) {
        Buf in = {};
        char tmp[32];
        LineReader r = LINE_READER_INIT(JSONLINE_MAX_REQUEST);
        char *line;
        size_t len, count = 0;

        for (int i = 0; i < 5000; i++) {
                int n = snprintf(tmp, sizeof(tmp), "{\"i\":%d}\n", i);
                put(&in, tmp, (size_t) n);
        }
        ck_assert_int_eq(line_reader_feed(&r, in.p, in.n), 0);
        while (line_reader_next(&r, &line, &len) > 0) {
                json_t *j = NULL;
                TpError err = {};

                ck_assert_msg(jsonline_parse(line, len, &j, &err) == 0, "%s", err.message);
                ck_assert_int_eq(json_integer_value(json_object_get(j, "i")), (json_int_t) count);
                json_decref(j);
                count++;
        }
        ck_assert_uint_eq(count, 5000);
        /* All consumed: the next feed starts from an empty buffer. */
        ck_assert_int_eq(line_reader_feed(&r, "{}\n", 3), 0);
        ck_assert_uint_eq(r.len, 3);
        free(in.p);
        line_reader_done(&r);
}
END_TEST

/* Many small feeds, drained as they come: the buffer stays small however much went through. */
START_TEST(test_compaction) {
        LineReader r = LINE_READER_INIT(64);
        char *line;
        size_t len, total = 0;

        for (int i = 0; i < 20000; i++) {
                ck_assert_int_eq(line_reader_feed(&r, "0123456789\n01234", 16), 0);
                while (line_reader_next(&r, &line, &len) > 0)
                        total += len;
                ck_assert_uint_le(r.len, 64 + 16);
                ck_assert_int_eq(line_reader_feed(&r, "56789\n", 6), 0);
                while (line_reader_next(&r, &line, &len) > 0)
                        total += len;
        }
        ck_assert_uint_eq(total, 20000 * 20);
        line_reader_done(&r);
}
END_TEST

START_TEST(test_nul_in_line) {
        static const char text[] = "{\"a\":\"b\0c\"}\n";
        LineReader r = LINE_READER_INIT(64);
        char *line;
        size_t len;
        json_t *j = NULL;
        TpError err = {};

        ck_assert_int_eq(line_reader_feed(&r, text, sizeof(text) - 1), 0);
        ck_assert_int_eq(line_reader_next(&r, &line, &len), 1);
        ck_assert_uint_eq(len, sizeof(text) - 2);      /* the NUL does not end the line */
        ck_assert_int_eq(jsonline_parse(line, len, &j, &err), -EBADMSG);
        ck_assert_ptr_null(j);
        ck_assert_msg(strstr(err.message, "NUL byte at column 8"), "%s", err.message);
        line_reader_done(&r);
}
END_TEST

static const struct {
        const char *line;
        const char *message;    /* a part of the error; NULL: accepted */
} parse_cases[] = {
        { "{\"cmd\":\"status\"}", NULL },
        { "  {\"cmd\" : \"status\"} \r", NULL },
        { "{}", NULL },
        { "{\"é\":\"ü\"}", NULL },
        { "x", "line is not JSON: '[' or '{' expected near 'x' at column 1" },
        { "", "line is not JSON: '[' or '{' expected near end of file at column 1" },
        { "{\"cmd\":", "at column 7" },
        { "{\"a\":1} {\"b\":2}", "end of file expected" },
        { "{\"a\":1,\"a\":2}", "duplicate object key near '\"a\"' at column 10" },
        { "[1,2]", "a request must be a JSON object" },
        { "\"string\"", "line is not JSON" },
        { "{\"a\":\"\xff\"}", "line is not JSON" },
        /* jansson quotes the first byte of the broken sequence; the message must stay valid UTF-8 (fuzz_request). */
        { "{\"a\":\"\\\xf0\x9f\x98\x80\"}", "invalid escape near '\"\\?' at column" },
        { "{\"a\":\"\\\xc3\xa9\"}", "invalid escape near '\"\\?' at column" },
};

START_TEST(test_parse_table) {
        const char *line = parse_cases[_i].line;
        const char *want = parse_cases[_i].message;
        json_t *j = NULL;
        TpError err = {};
        int r = jsonline_parse(line, strlen(line), &j, &err);

        if (!want) {
                ck_assert_msg(r == 0, "'%s': %s", line, err.message);
                ck_assert(json_is_object(j));
                json_decref(j);
                return;
        }
        ck_assert_int_eq(r, -EBADMSG);
        ck_assert_ptr_null(j);
        ck_assert_msg(strstr(err.message, want), "'%s': got \"%s\", want \"%s\"", line, err.message, want);
        /* The daemon sends the message back in a JSON reply: jansson must accept it as a string. */
        json_t *msg = json_string(err.message);
        ck_assert_msg(msg, "'%s': the message is not valid UTF-8: %s", line, err.message);
        json_decref(msg);
}
END_TEST

/* jsonline_scrub_utf8(): well-formed sequences stay, every other byte becomes '?'; jansson takes the result. */
START_TEST(test_scrub_utf8) {
        static const struct {
                const char *in, *out;
        } cases[] = {
                { "", "" },
                { "plain ascii", "plain ascii" },
                { "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80" },
                { "cut \xc3", "cut ?" },
                { "\xc3\x28", "?(" },
                { "\xc0\xaf", "??" },                  /* overlong '/' */
                { "\xe0\x80\xaf", "???" },            /* overlong, three bytes */
                { "\xed\xa0\x80", "???" },            /* a UTF-16 surrogate */
                { "\xf4\x90\x80\x80", "????" },      /* past U+10FFFF */
                { "\xf0\x9f\x98", "???" },            /* cut four-byte sequence */
                { "\xff\xfe", "??" },
                { "\x80x", "?x" },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char buf[64];
                snprintf(buf, sizeof(buf), "%s", cases[i].in);
                jsonline_scrub_utf8(buf);
                ck_assert_msg(strcmp(buf, cases[i].out) == 0, "case %zu: got '%s'", i, buf);
                json_t *j = json_string(buf);
                ck_assert_msg(j, "case %zu: jansson refuses '%s'", i, buf);
                json_decref(j);
        }
}
END_TEST

START_TEST(test_dump) {
        json_t *o = json_pack("{s:s, s:b, s:n, s:[i,i]}", "cmd", "switch", "wait", 1, "task", "v", 1, 2);
        char *s = NULL;
        size_t len = 0;

        ck_assert_ptr_nonnull(o);
        ck_assert_int_eq(jsonline_dump(o, JSONLINE_MAX_REQUEST, &s, &len), 0);
        ck_assert_uint_eq(len, strlen(s));
        ck_assert_int_eq(s[len - 1], '\n');
        ck_assert_ptr_null(strchr(s, ' '));     /* compact */
        ck_assert_ptr_null(memchr(s, '\n', len - 1));

        /* The cap counts the newline: exactly len fits, len - 1 does not. */
        char *t = NULL;
        size_t tlen = 0;
        ck_assert_int_eq(jsonline_dump(o, len, &t, &tlen), 0);
        ck_assert_str_eq(s, t);
        free(t);
        t = NULL;
        ck_assert_int_eq(jsonline_dump(o, len - 1, &t, &tlen), -EMSGSIZE);
        ck_assert_ptr_null(t);
        ck_assert_int_eq(jsonline_dump(o, 1, &t, &tlen), -EMSGSIZE);

        /* A newline inside a string is escaped: one object, one line. */
        json_object_set_new(o, "task", json_string("a\nb"));
        free(s);
        ck_assert_int_eq(jsonline_dump(o, JSONLINE_MAX_REQUEST, &s, &len), 0);
        ck_assert_ptr_null(memchr(s, '\n', len - 1));

        /* A big value against a big cap: stops at the cap, whatever the size. */
        char *big = malloc(JSONLINE_MAX_MESSAGE);
        ck_assert_ptr_nonnull(big);
        memset(big, 'x', JSONLINE_MAX_MESSAGE - 1);
        big[JSONLINE_MAX_MESSAGE - 1] = '\0';
        json_object_set_new(o, "big", json_string(big));
        ck_assert_int_eq(jsonline_dump(o, JSONLINE_MAX_MESSAGE, &t, &tlen), -EMSGSIZE);
        ck_assert_int_eq(jsonline_dump(o, 2 * JSONLINE_MAX_MESSAGE, &t, &tlen), 0);
        free(t);
        free(big);
        free(s);
        json_decref(o);

        json_t *n = json_integer(3);
        ck_assert_int_eq(jsonline_dump(n, 64, &t, &tlen), -EINVAL);
        json_decref(n);
}
END_TEST

static size_t count_open_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        size_t n = 0;

        ck_assert_ptr_nonnull(d);
        while (readdir(d))
                n++;
        closedir(d);
        return n;
}

static void socketpair_stream(int sv[2]) {
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

START_TEST(test_fd_passing) {
        static const char content[] = "a bundle, in a memfd";
        static const char req[] = "{\"cmd\":\"install\",\"wait\":true}\n";
        int sv[2], fds[JSONLINE_MAX_FDS];
        size_t nfds = 99;
        char buf[256], got[64] = {};

        socketpair_stream(sv);
        int mfd = memfd_with(content, sizeof(content) - 1);
        ck_assert_int_eq(jsonline_send(sv[0], req, sizeof(req) - 1, mfd), 0);
        close(mfd);

        ssize_t n = jsonline_recv(sv[1], buf, sizeof(buf), fds, &nfds);
        ck_assert_int_eq(n, (ssize_t) sizeof(req) - 1);
        ck_assert_mem_eq(buf, req, sizeof(req) - 1);
        ck_assert_uint_eq(nfds, 1);
        ck_assert_int_eq(fcntl(fds[0], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
        ck_assert_int_eq(pread(fds[0], got, sizeof(got), 0), (ssize_t) sizeof(content) - 1);
        ck_assert_str_eq(got, content);
        close(fds[0]);

        /* Without a descriptor: none counted. */
        ck_assert_int_eq(jsonline_send(sv[0], "{}\n", 3, -1), 0);
        ck_assert_int_eq(jsonline_recv(sv[1], buf, sizeof(buf), fds, &nfds), 3);
        ck_assert_uint_eq(nfds, 0);

        /* A descriptor needs a byte to travel with. */
        ck_assert_int_eq(jsonline_send(sv[0], "", 0, 0), -EINVAL);
        ck_assert_int_eq(jsonline_send(sv[0], "", 0, -1), 0);

        /* EOF. */
        close(sv[0]);
        ck_assert_int_eq(jsonline_recv(sv[1], buf, sizeof(buf), fds, &nfds), 0);
        ck_assert_uint_eq(nfds, 0);
        close(sv[1]);
}
END_TEST

/* More than JSONLINE_MAX_FDS descriptors: the first ones are kept, the rest closed, none leaked. */
START_TEST(test_too_many_fds) {
        enum { SENT = JSONLINE_MAX_FDS + 3 };
        int sv[2], out[SENT], fds[JSONLINE_MAX_FDS];
        size_t nfds = 0;
        char buf[16];
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(out))];
        } control = {};
        struct iovec iov = { .iov_base = (void *) "{}\n", .iov_len = 3 };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                             .msg_controllen = sizeof(control.buf) };

        socketpair_stream(sv);
        for (int i = 0; i < SENT; i++)
                out[i] = memfd_with(&i, sizeof(i));
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(out));
        memcpy(CMSG_DATA(c), out, sizeof(out));
        ck_assert_int_eq(sendmsg(sv[0], &mh, 0), 3);
        for (int i = 0; i < SENT; i++)
                close(out[i]);

        size_t before = count_open_fds();
        ck_assert_int_eq(jsonline_recv(sv[1], buf, sizeof(buf), fds, &nfds), 3);
        ck_assert_uint_eq(nfds, JSONLINE_MAX_FDS);
        ck_assert_uint_eq(count_open_fds(), before + JSONLINE_MAX_FDS);
        for (size_t i = 0; i < nfds; i++) {
                int v = -1;
                ck_assert_int_eq(pread(fds[i], &v, sizeof(v), 0), (ssize_t) sizeof(v));
                ck_assert_int_eq(v, (int) i);   /* in the order sent */
                close(fds[i]);
        }
        ck_assert_uint_eq(count_open_fds(), before);
        close(sv[0]);
        close(sv[1]);
}
END_TEST

START_TEST(test_recv_nonblocking_empty) {
        int sv[2], fds[JSONLINE_MAX_FDS];
        size_t nfds = 7;
        char buf[16];

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv), 0);
        ck_assert_int_eq(jsonline_recv(sv[1], buf, sizeof(buf), fds, &nfds), -EAGAIN);
        ck_assert_uint_eq(nfds, 7);     /* untouched on failure */
        close(sv[0]);
        close(sv[1]);
}
END_TEST

/* jsonline_send() sends everything even when it takes many sendmsg() calls (a reader in a child). */
START_TEST(test_send_all) {
        const size_t total = 4u << 20;
        int sv[2];
        char *data = malloc(total);

        ck_assert_ptr_nonnull(data);
        for (size_t i = 0; i < total; i++)
                data[i] = (char) (i * 7);
        socketpair_stream(sv);
        int mfd = memfd_with("fd", 2);

        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                int fds[JSONLINE_MAX_FDS];
                size_t nfds = 0, got = 0, fds_seen = 0;
                char buf[65536];
                ssize_t n;

                close(sv[0]);
                while ((n = jsonline_recv(sv[1], buf, sizeof(buf), fds, &nfds)) > 0) {
                        for (ssize_t i = 0; i < n; i++)
                                if (buf[i] != (char) ((got + (size_t) i) * 7))
                                        _exit(2);
                        got += (size_t) n;
                        fds_seen += nfds;
                        for (size_t i = 0; i < nfds; i++)
                                close(fds[i]);
                }
                _exit(n == 0 && got == total && fds_seen == 1 ? 0 : 1);
        }
        close(sv[1]);
        ck_assert_int_eq(jsonline_send(sv[0], data, total, mfd), 0);
        close(sv[0]);
        close(mfd);
        int status = 0;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status));
        ck_assert_int_eq(WEXITSTATUS(status), 0);
        free(data);
}
END_TEST

/* Sending to a closed peer is an error, not a SIGPIPE. */
START_TEST(test_send_closed_peer) {
        int sv[2];

        socketpair_stream(sv);
        close(sv[1]);
        ck_assert_int_eq(jsonline_send(sv[0], "{}\n", 3, -1), -EPIPE);
        close(sv[0]);
}
END_TEST

static Suite *jsonline_suite(void) {
        Suite *s = suite_create("jsonline");
        TCase *tc = tcase_create("lines");

        tcase_add_test(tc, test_split_any_boundaries);
        tcase_add_test(tc, test_unfinished_line_waits);
        tcase_add_test(tc, test_exactly_max);
        tcase_add_test(tc, test_overlong_after_good_lines);
        tcase_add_test(tc, test_many_lines_one_feed);
        tcase_add_test(tc, test_compaction);
        tcase_add_test(tc, test_nul_in_line);
        suite_add_tcase(s, tc);

        tc = tcase_create("json");
        tcase_add_loop_test(tc, test_parse_table, 0, (int) ELEMENTSOF(parse_cases));
        tcase_add_test(tc, test_scrub_utf8);
        tcase_add_test(tc, test_dump);
        suite_add_tcase(s, tc);

        tc = tcase_create("socket");
        tcase_set_timeout(tc, 30);
        tcase_add_test(tc, test_fd_passing);
        tcase_add_test(tc, test_too_many_fds);
        tcase_add_test(tc, test_recv_nonblocking_empty);
        tcase_add_test(tc, test_send_all);
        tcase_add_test(tc, test_send_closed_peer);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(jsonline_suite)
