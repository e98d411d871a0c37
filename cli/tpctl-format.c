/* SPDX-License-Identifier: MIT */
/* tpctl: turning the daemon's JSON into text for a person. */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tpctl.h"

const char *get_str(json_t *obj, const char *key) {
        return json_string_value(json_object_get(obj, key));
}

bool get_u64(json_t *obj, const char *key, uint64_t *ret) {
        json_t *v = json_object_get(obj, key);

        if (!json_is_integer(v) || json_integer_value(v) < 0)
                return false;
        *ret = (uint64_t) json_integer_value(v);
        return true;
}

void json_sanitize(json_t *j) {
        size_t i;

        /* Iterators rather than jansson's foreach macros, which cppcheck cannot see through. */
        if (json_is_object(j)) {
                for (void *it = json_object_iter(j); it; it = json_object_iter_next(j, it))
                        json_sanitize(json_object_iter_value(it));
        } else if (json_is_array(j)) {
                for (i = 0; i < json_array_size(j); i++)
                        json_sanitize(json_array_get(j, i));
        } else if (json_is_string(j)) {
                const char *s = json_string_value(j);
                size_t n = json_string_length(j);
                bool bad = false;

                for (i = 0; i < n && !bad; i++)
                        bad = (unsigned char) s[i] < 0x20 || s[i] == 0x7f;
                if (!bad)
                        return;
                /* Escape sequences from the daemon must not reach the terminal as such. */
                _cleanup_free_ char *copy = malloc(n + 1);
                if (!copy)
                        return;
                for (i = 0; i < n; i++)
                        copy[i] = (unsigned char) s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
                copy[n] = '\0';
                (void) json_string_set(j, copy);
        }
}

const char *format_task(json_t *obj, char *buf, size_t n) {
        json_t *task = json_object_get(obj, "task");
        uint64_t version;

        if (json_is_null(task))
                snprintf(buf, n, "base model");
        else if (!json_is_string(task))
                return NULL;
        else if (get_u64(obj, "version", &version))
                snprintf(buf, n, "%s v%" PRIu64, json_string_value(task), version);
        else
                snprintf(buf, n, "%s", json_string_value(task));
        return buf;
}

const char *format_bytes(uint64_t v, char *buf, size_t n) {
        static const char *const units[] = { "KiB", "MiB", "GiB", "TiB" };
        double d = (double) v;
        size_t u = 0;

        if (v < 1024) {
                snprintf(buf, n, "%" PRIu64 " B", v);
                return buf;
        }
        d /= 1024.0;
        while (d >= 1024.0 && u + 1 < ELEMENTSOF(units)) {
                d /= 1024.0;
                u++;
        }
        snprintf(buf, n, "%.1f %s", d, units[u]);
        return buf;
}

size_t utf8_width(const char *s) {
        size_t n = 0;

        for (; *s; s++)
                n += ((unsigned char) *s & 0xc0) != 0x80;       /* continuation bytes are not characters */
        return n;
}

const char *format_truncate(const char *s, size_t max, char *buf, size_t n) {
        size_t len = strlen(s), i = 0, chars = 0;

        if (n == 0)
                return buf;
        if (utf8_width(s) <= max && len < n) {
                memcpy(buf, s, len + 1);
                return buf;
        }
        /* Whole characters while they and the "..." (when there is room for one) fit both caps. */
        size_t dots = max >= 3 && n >= 4 ? 3 : 0;
        while (s[i] && chars + dots < max) {
                size_t k = i + 1;
                while (((unsigned char) s[k] & 0xc0) == 0x80)
                        k++;
                if (k + dots + 1 > n)
                        break;
                i = k;
                chars++;
        }
        memcpy(buf, s, i);
        memcpy(buf + i, "...", dots);
        buf[i + dots] = '\0';
        return buf;
}

int parse_iso8601(const char *s, int64_t *ret) {
        struct tm tm = {};
        const char *p;

        if (!s)
                return -EINVAL;
        p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
        if (!p)
                return -EINVAL;
        if (*p == '.') {                /* fractions of a second: dropped */
                p++;
                if (*p < '0' || *p > '9')
                        return -EINVAL;
                while (*p >= '0' && *p <= '9')
                        p++;
        }
        if (strcmp(p, "Z") != 0 && strcmp(p, "+00:00") != 0)
                return -EINVAL;
        time_t t = timegm(&tm);
        if (t == (time_t) -1)
                return -EINVAL;
        *ret = (int64_t) t;
        return 0;
}
