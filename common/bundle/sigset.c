/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bundle.h"
#include "le.h"
#include "sigset.h"

int signature_set_parse(const uint8_t *data, size_t len, SignatureSet *ret, TpError *err) {
        SignatureSet set = {};
        size_t off = 10;

        if (len >= SIGNATURE_MAGIC_SIZE && memcmp(data, SIGNATURE_MAGIC, SIGNATURE_MAGIC_SIZE) == 0) {
                *ret = (SignatureSet) { .n = 1, .sigs[0] = { data, len } };
                return 0;
        }
        if (len < 10 || memcmp(data, SIGNATURE_SET_MAGIC, 8) != 0)
                return tp_error(err, -EBADMSG, "signature: neither a signature block nor a set of them (bad magic)");
        set.n = get_le16(data + 8);
        if (set.n == 0 || set.n > SIGNATURE_SET_MAX)
                return tp_error(err, -EBADMSG, "signature set: %zu blocks, expected 1..%d", set.n, SIGNATURE_SET_MAX);
        for (size_t i = 0; i < set.n; i++) {
                if (len - off < 4)
                        return tp_error(err, -EBADMSG, "signature set: truncated at block %zu of %zu (offset %zu)", i + 1,
                                        set.n, off);
                uint32_t n = get_le32(data + off);
                off += 4;
                if (n == 0 || n > SIGNATURE_BLOCK_MAX || n > len - off)
                        return tp_error(err, -EBADMSG, "signature set: block %zu of %zu: length %" PRIu32 " at offset "
                                        "%zu, expected 1..%zu", i + 1, set.n, n, off - 4,
                                        len - off < SIGNATURE_BLOCK_MAX ? len - off : (size_t) SIGNATURE_BLOCK_MAX);
                set.sigs[i].block = data + off;
                set.sigs[i].len = n;
                off += n;
        }
        if (off != len)
                return tp_error(err, -EBADMSG, "signature set: %zu trailing bytes after the last block", len - off);
        *ret = set;
        return 0;
}

int signature_set_add(const uint8_t *old, size_t old_len, const uint8_t *block, size_t block_len, uint8_t **ret,
                      size_t *ret_len, TpError *err) {
        SignatureInfo add, have;
        SignatureSet set = {};
        int r;

        if ((r = signature_parse_info(block, block_len, &add, err)) < 0)
                return r;
        if (old_len > 0 && (r = signature_set_parse(old, old_len, &set, err)) < 0)
                return r;
        for (size_t i = 0; i < set.n; i++) {
                if ((r = signature_parse_info(set.sigs[i].block, set.sigs[i].len, &have, err)) < 0)
                        return tp_error_prefix(err, r, "signature %zu", i + 1);
                if (memcmp(have.key_sha256, add.key_sha256, SHA256_DIGEST_SIZE) == 0)
                        return tp_error(err, -EEXIST, "already signed with this key ('%s')", have.subject);
        }
        if (set.n >= SIGNATURE_SET_MAX)
                return tp_error(err, -E2BIG, "already %zu signatures, the most a file holds", set.n);
        set.sigs[set.n].block = block;
        set.sigs[set.n++].len = block_len;

        size_t total = set.n == 1 ? block_len : 10;
        for (size_t i = 0; set.n > 1 && i < set.n; i++)
                total += 4 + set.sigs[i].len;
        if (total > BUNDLE_MAX_SIGNATURE)
                return tp_error(err, -E2BIG, "the signatures would take %zu bytes, more than the %u a file holds",
                                total, BUNDLE_MAX_SIGNATURE);
        uint8_t *p = malloc(total);
        if (!p)
                return -ENOMEM;
        if (set.n == 1)
                memcpy(p, block, block_len);    /* one signer: the plain block, as every daemon reads */
        else {
                size_t off = 10;
                memcpy(p, SIGNATURE_SET_MAGIC, 8);
                put_le16(p + 8, (uint16_t) set.n);
                for (size_t i = 0; i < set.n; i++) {
                        put_le32(p + off, (uint32_t) set.sigs[i].len);
                        memcpy(p + off + 4, set.sigs[i].block, set.sigs[i].len);
                        off += 4 + set.sigs[i].len;
                }
        }
        *ret = p;
        *ret_len = total;
        return 0;
}

int signature_set_verify(const uint8_t *section, size_t section_len, const void *data, size_t len,
                         const SignatureTrust *trust, SignatureInfo *ret_info, char *ret_signers, TpError *err) {
        uint8_t keys[SIGNATURE_SET_MAX][SHA256_DIGEST_SIZE];
        unsigned need = trust->threshold > 1 ? trust->threshold : 1, distinct = 0;
        char signers[SIGNATURE_SIGNERS_MAX] = "";
        SignatureInfo first = {}, info;
        TpError first_err = {};
        int first_r = 0, r;
        SignatureSet set;

        if ((r = signature_set_parse(section, section_len, &set, err)) < 0)
                return r;
        for (size_t i = 0; i < set.n; i++) {
                TpError e = {};
                r = signature_verify_trust(set.sigs[i].block, set.sigs[i].len, data, len, trust, &info, &e);
                if (r < 0) {
                        if (first_r == 0) {
                                first_r = r;
                                first_err = e;
                        }
                        continue;
                }
                bool seen = false;
                for (unsigned k = 0; k < distinct; k++)
                        seen = seen || memcmp(keys[k], info.key_sha256, SHA256_DIGEST_SIZE) == 0;
                if (seen)
                        continue;       /* the same key twice is one signer */
                memcpy(keys[distinct], info.key_sha256, SHA256_DIGEST_SIZE);
                if (distinct++ == 0)
                        first = info;
                size_t o = strlen(signers);
                if (o + 2 < sizeof(signers))
                        snprintf(signers + o, sizeof(signers) - o, "%s%.*s", o ? ", " : "",
                                 (int) (sizeof(signers) - o - 3), info.subject);
        }
        if (distinct == 0) {
                *err = first_err;
                return first_r;
        }
        if (distinct < need)
                return tp_error(err, -EKEYREJECTED, "%u distinct signer%s verified (%s), %u needed (a threshold of "
                                "signers)%s%s", distinct, distinct == 1 ? "" : "s", signers, need,
                                first_r ? "; another signature: " : "", first_r ? first_err.message : "");
        if (ret_info)
                *ret_info = first;
        if (ret_signers)
                snprintf(ret_signers, SIGNATURE_SIGNERS_MAX, "%s", signers);
        return 0;
}
