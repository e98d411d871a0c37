/* SPDX-License-Identifier: MIT */

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "parse.h"

int parse_u64(const char *s, uint64_t *ret) {
        uint64_t v = 0;

        if (!s || !*s)
                return -EINVAL;
        for (const char *p = s; *p; p++) {
                if (*p < '0' || *p > '9')
                        return -EINVAL;
                if (v > (UINT64_MAX - (uint64_t) (*p - '0')) / 10)
                        return -ERANGE;
                v = v * 10 + (uint64_t) (*p - '0');
        }
        if (s[0] == '0' && s[1])
                return -EINVAL;  /* no leading zeros: one spelling per number in signed documents */
        *ret = v;
        return 0;
}

int hex_digit(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

/* The canonical form is lowercase: an uppercase digit is not one. */
static int lower_hex(char c) {
        return c >= 'A' && c <= 'F' ? -1 : hex_digit(c);
}

int parse_hex(const char *s, uint8_t *ret, size_t n) {
        if (!s || strlen(s) != 2 * n)
                return -EINVAL;
        for (size_t i = 0; i < n; i++)
                if (lower_hex(s[2 * i]) < 0 || lower_hex(s[2 * i + 1]) < 0)
                        return -EINVAL;
        for (size_t i = 0; i < n; i++)
                ret[i] = (uint8_t) (lower_hex(s[2 * i]) << 4 | lower_hex(s[2 * i + 1]));
        return 0;
}

void format_hex(const uint8_t *p, size_t n, char *ret) {
        static const char digits[] = "0123456789abcdef";

        for (size_t i = 0; i < n; i++) {
                ret[2 * i] = digits[p[i] >> 4];
                ret[2 * i + 1] = digits[p[i] & 15];
        }
        ret[2 * n] = '\0';
}

int parse_sha256_hex(const char *s, uint8_t ret[SHA256_DIGEST_SIZE]) {
        return parse_hex(s, ret, SHA256_DIGEST_SIZE);
}

int parse_time_utc(const char *s, int64_t *ret) {
        struct tm tm = {};
        const char *end;

        if (!s || strlen(s) != 20)
                return -EINVAL;
        end = strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm);
        if (!end || *end)
                return -EINVAL;
        time_t t = timegm(&tm);
        if (t == (time_t) -1)
                return -EINVAL;
        char back[21];
        format_time_utc(t, back);
        if (strcmp(back, s) != 0)
                return -EINVAL;  /* out-of-range fields (Feb 30) normalise differently: refuse them */
        *ret = t;
        return 0;
}

void format_time_utc(int64_t t, char buf[21]) {
        struct tm tm;
        time_t tt = (time_t) t;

        if (!gmtime_r(&tt, &tm) || strftime(buf, 21, "%Y-%m-%dT%H:%M:%SZ", &tm) != 20)
                snprintf(buf, 21, "invalid-time");
}

bool task_name_valid(const char *name) {
        size_t n = name ? strlen(name) : 0;

        if (n == 0 || n > TASK_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = name[i];
                bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
                if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
                        return false;
        }
        return true;
}
