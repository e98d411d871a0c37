/* SPDX-License-Identifier: MIT */

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileio.h"
#include "le.h"
#include "signed-file.h"

int signed_file_split(const SignedFileKind *k, const uint8_t *data, size_t len, const char *what, SignedFile *ret,
                      TpError *err) {
        if (len < SIGNED_FILE_HEADER_SIZE)
                return tp_error(err, -EBADMSG, "%s: %zu bytes, shorter than a %s header", what, len, k->noun);
        if (memcmp(data, k->magic, 8) != 0)
                return tp_error(err, -EBADMSG, "%s: not a TaskPatch %s (bad magic)", what, k->noun);
        uint32_t format = get_le32(data + 8);
        if (format < k->format_min || format > k->format_max) {
                char reads[48];
                if (k->format_min == k->format_max)
                        snprintf(reads, sizeof(reads), "%" PRIu32, k->format_min);
                else
                        snprintf(reads, sizeof(reads), "%" PRIu32 " %s %" PRIu32, k->format_min,
                                 k->format_max == k->format_min + 1 ? "and" : "to", k->format_max);
                return tp_error(err, -EPROTONOSUPPORT, "%s: %s file format %" PRIu32 " is not supported (this build "
                                "reads %s)", what, k->noun, format, reads);
        }
        if (get_le32(data + 12) != 0)
                return tp_error(err, -EBADMSG, "%s: header: unknown flags 0x%08" PRIx32, what, get_le32(data + 12));
        for (unsigned i = 32; i < SIGNED_FILE_HEADER_SIZE; i++)
                if (data[i] != 0)
                        return tp_error(err, -EBADMSG, "%s: header: reserved byte %u is not zero", what, i);
        uint64_t text_size = get_le64(data + 16), signature_size = get_le64(data + 24);
        if (text_size == 0 || text_size > k->max_text)
                return tp_error(err, -EBADMSG, "%s: header: index size %" PRIu64 " is outside 1..%zu", what, text_size,
                                k->max_text);
        if (signature_size == 0)
                return tp_error(err, -EKEYREJECTED, "%s: the %s is unsigned", what, k->noun);
        if (signature_size > BUNDLE_MAX_SIGNATURE)
                return tp_error(err, -EBADMSG, "%s: header: signature size %" PRIu64 " exceeds the %u-byte cap", what,
                                signature_size, BUNDLE_MAX_SIGNATURE);
        if (len - SIGNED_FILE_HEADER_SIZE != text_size + signature_size)
                return tp_error(err, -EBADMSG, "%s: header: sections add up to %" PRIu64 " bytes, the file has %zu "
                                "(truncated or padded?)", what, SIGNED_FILE_HEADER_SIZE + text_size + signature_size,
                                len);
        *ret = (SignedFile) {
                .format = format,
                .text = data + SIGNED_FILE_HEADER_SIZE,
                .text_len = (size_t) text_size,
                .signature = data + SIGNED_FILE_HEADER_SIZE + text_size,
                .signature_len = (size_t) signature_size,
        };
        return 0;
}

int signed_file_copy(const SignedFile *f, char **ret_text, uint8_t **ret_sig) {
        char *text = malloc(f->text_len);
        uint8_t *sig = malloc(f->signature_len);

        if (!text || !sig) {
                free(text);
                free(sig);
                return -ENOMEM;
        }
        memcpy(text, f->text, f->text_len);
        memcpy(sig, f->signature, f->signature_len);
        *ret_text = text;
        *ret_sig = sig;
        return 0;
}

int signed_file_pack(const SignedFileKind *k, uint32_t format, const char *text, size_t text_len, const uint8_t *sig,
                     size_t sig_len, uint8_t **ret_data, size_t *ret_len) {
        uint8_t *data = malloc(SIGNED_FILE_HEADER_SIZE + text_len + sig_len);

        if (!data)
                return -ENOMEM;
        memset(data, 0, SIGNED_FILE_HEADER_SIZE);
        memcpy(data, k->magic, 8);
        put_le32(data + 8, format);
        put_le64(data + 16, text_len);
        put_le64(data + 24, sig_len);
        memcpy(data + SIGNED_FILE_HEADER_SIZE, text, text_len);
        memcpy(data + SIGNED_FILE_HEADER_SIZE + text_len, sig, sig_len);
        *ret_data = data;
        *ret_len = SIGNED_FILE_HEADER_SIZE + text_len + sig_len;
        return 0;
}

int signed_file_read(const SignedFileKind *k, const char *path, uint8_t **ret_data, size_t *ret_len, TpError *err) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len = 0, max = signed_file_max(k);
        ssize_t n;

        if (fd < 0)
                return tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
        buf = malloc(max + 1);
        if (!buf)
                return -ENOMEM;
        /* One byte more than the cap: that is how a file over it shows. */
        while (len <= max && (n = read(fd, buf + len, max + 1 - len)) != 0) {
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
                len += (size_t) n;
        }
        if (len > max)
                return tp_error(err, -EFBIG, "%s: larger than a %s can be (%zu bytes)", path, k->noun, max);
        *ret_data = TAKE_PTR(buf);
        *ret_len = len;
        return 0;
}
