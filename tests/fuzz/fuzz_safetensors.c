/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for common/artifact/safetensors.c. The input becomes a memfd (safetensors_read
 * wants a file descriptor); a failure must be -EBADMSG (or -ENOMEM) with a message, a success
 * must keep every promise safetensors.h makes: tensors sorted, inside the file, tiling the data
 * buffer to the end of the file, each one's bytes its shape times its dtype's bits. Then
 * artifact_open must agree: the same sites, or the same refusal when the probe says safetensors.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "artifact.h"
#include "fuzz-input.h"
#include "onnx.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const Safetensors *s, size_t size) {
        uint64_t at = 0;

        if (s->file_size != size || s->header_length > SAFETENSORS_HEADER_MAX || s->data_offset != 8 + s->header_length ||
            s->data_offset > size || s->n_tensors > SAFETENSORS_TENSORS_MAX)
                abort();
        for (size_t i = 0; i < s->n_tensors; i++) {
                const SafetensorsTensor *t = &s->tensors[i];
                uint64_t n = 1, bits;
                size_t len = t->name ? strlen(t->name) : 0;
                if (len == 0 || len > SAFETENSORS_NAME_MAX || strcmp(t->name, "__metadata__") == 0)
                        abort();
                if (!safetensors_dtype_to_string(t->dtype) || t->n_dims > SAFETENSORS_DIMS_MAX ||
                    (t->n_dims > 0) != (t->shape != NULL))
                        abort();
                for (uint32_t j = 0; j < t->n_dims; j++)
                        if (__builtin_mul_overflow(n, t->shape[j], &n))
                                abort();
                if (n != t->n_elements || __builtin_mul_overflow(n, safetensors_dtype_bits(t->dtype), &bits) ||
                    bits % 8 || bits / 8 != t->length)
                        abort();
                /* Sorted and tiling: each begins where the one before ended. */
                if (t->begin != at || t->end < t->begin || t->length != t->end - t->begin ||
                    t->offset != s->data_offset + t->begin || t->offset + t->length > size)
                        abort();
                if (i > 0 && t->begin == s->tensors[i - 1].begin && t->end == s->tensors[i - 1].end &&
                    strcmp(s->tensors[i - 1].name, t->name) >= 0)
                        abort();
                at = t->end;
        }
        if (s->data_offset + at != size)
                abort();
        /* Names are unique (a quadratic check, for small inputs). */
        for (size_t i = 0; i < s->n_tensors && s->n_tensors <= 256; i++)
                for (size_t j = 0; j < i; j++)
                        if (strcmp(s->tensors[i].name, s->tensors[j].name) == 0)
                                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        int fd = fuzz_input_fd(data, size, 0);
        Safetensors *s = NULL;
        Artifact *a = NULL;
        TpError err = {0}, aerr = {0};

        int r = safetensors_read(fd, &s, &err);
        if (r == 0)
                check(s, size);
        else if ((r != -EBADMSG && r != -ENOMEM) || !err.message[0] || err.code != r || s)
                abort();

        /* artifact_open sees safetensors exactly when the probe does, and then reads the same. */
        if (!safetensors_probe(data, size, size) || (size >= 4 && memcmp(data, "GGUF", 4) == 0) ||
            onnx_probe(data, size < 64 ? size : 64)) {
                safetensors_free(s);
                return 0;
        }
        int k = artifact_open(fd, &a, &aerr);
        if (r == 0) {
                if (k != 0 || a->kind != ARTIFACT_SAFETENSORS || a->n_sites != s->n_tensors || a->size != size)
                        abort();
                for (size_t i = 0; i < a->n_sites; i++) {
                        const Site *x = &a->sites[i];
                        if (x->offset < s->data_offset || x->offset + x->length > size ||
                            (i > 0 && x->offset != a->sites[i - 1].offset + a->sites[i - 1].length))
                                abort();
                }
        } else if (k != r || a || strncmp(aerr.message, "safetensors: ", 13) != 0)
                abort();
        artifact_free(a);
        safetensors_free(s);
        return 0;
}
