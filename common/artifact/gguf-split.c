/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf-split.h"
#include "quote.h"

/* Exactly 5 ASCII digits at @s, as a number. */
static int five_digits(const char *s, unsigned *ret) {
        unsigned v = 0;

        for (unsigned i = 0; i < 5; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -EINVAL;
                v = v * 10 + (unsigned) (s[i] - '0');
        }
        *ret = v;
        return 0;
}

int gguf_split_name_parse(const char *name, size_t *ret_prefix_len, uint16_t *ret_no, uint16_t *ret_count,
                          TpError *err) {
        char qb[QUOTE_BUF];
        unsigned no, count;

        if (!name)
                return tp_error(err, -EINVAL, "no shard name");
        size_t len = strlen(name);
        if (len > GGUF_SPLIT_NAME_MAX)
                return tp_error(err, -EINVAL, "shard name '%s': %zu bytes, over the cap of %u", quote(name, qb), len,
                                GGUF_SPLIT_NAME_MAX);
        if (strchr(name, '/'))
                return tp_error(err, -EINVAL, "shard name '%s' holds a '/' (a file name, not a path, is expected)",
                                quote(name, qb));
        if (len <= GGUF_SPLIT_SUFFIX_LEN)
                return tp_error(err, -EINVAL, "shard name '%s' is not <prefix>" GGUF_SPLIT_SUFFIX " (too short)",
                                quote(name, qb));

        const char *s = name + len - GGUF_SPLIT_SUFFIX_LEN; /* "-NNNNN-of-NNNNN.gguf" */
        if (s[0] != '-' || memcmp(s + 6, "-of-", 4) != 0 || strcmp(s + 15, ".gguf") != 0 ||
            five_digits(s + 1, &no) < 0 || five_digits(s + 10, &count) < 0)
                return tp_error(err, -EINVAL,
                                "shard name '%s' does not end in " GGUF_SPLIT_SUFFIX
                                " (two numbers of exactly 5 digits)",
                                quote(name, qb));
        if (count == 0 || count > GGUF_SPLIT_COUNT_MAX)
                return tp_error(err, -EINVAL, "shard name '%s': a count of %u shards (split.count is 1..%u)",
                                quote(name, qb), count, GGUF_SPLIT_COUNT_MAX);
        if (no == 0 || no > count)
                return tp_error(err, -EINVAL, "shard name '%s': shard %05u is not in 00001..%05u", quote(name, qb), no,
                                count);

        if (ret_prefix_len)
                *ret_prefix_len = len - GGUF_SPLIT_SUFFIX_LEN;
        if (ret_no)
                *ret_no = (uint16_t) (no - 1);
        if (ret_count)
                *ret_count = (uint16_t) count;
        return 0;
}

int gguf_split_name_format(const char *prefix, unsigned no, unsigned count, char **ret, TpError *err) {
        char qb[QUOTE_BUF];

        if (count == 0 || count > GGUF_SPLIT_COUNT_MAX)
                return tp_error(err, -EINVAL, "a split of %u shards (split.count is 1..%u)", count,
                                GGUF_SPLIT_COUNT_MAX);
        if (no >= count)
                return tp_error(err, -EINVAL, "shard %u of %u: shards count from 0", no, count);
        if (!prefix || !prefix[0])
                return tp_error(err, -EINVAL, "an empty shard name prefix");
        if (strchr(prefix, '/'))
                return tp_error(err, -EINVAL, "shard name prefix '%s' holds a '/' (a file name, not a path)",
                                quote(prefix, qb));
        size_t len = strlen(prefix);
        if (len > GGUF_SPLIT_NAME_MAX - GGUF_SPLIT_SUFFIX_LEN)
                return tp_error(err, -EINVAL, "shard name prefix '%s': %zu bytes, over the cap of %zu",
                                quote(prefix, qb), len, GGUF_SPLIT_NAME_MAX - GGUF_SPLIT_SUFFIX_LEN);

        char *s = malloc(len + GGUF_SPLIT_SUFFIX_LEN + 1);
        if (!s)
                return tp_error(err, -ENOMEM, "out of memory");
        /* Both numbers are below 100000: the suffix is exactly GGUF_SPLIT_SUFFIX_LEN bytes. */
        snprintf(s, len + GGUF_SPLIT_SUFFIX_LEN + 1, "%s-%05u-of-%05u.gguf", prefix, no + 1, count);
        *ret = s;
        return 0;
}
