/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for common/artifact/onnx.c (and onnx-external.c, pbwire.c under it). The
 * input becomes a memfd (onnx_read wants a file descriptor); a failure must
 * be -EBADMSG or -ENOMEM with a message and no result, a success must keep
 * every promise onnx.h makes (external_data fields included), and
 * onnx_initializer_bytes() must give a size or one of its errors for every
 * tensor. Anything else aborts. onnx_probe() runs on the same bytes.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz-input.h"
#include "onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The external_data promises of onnx.h: set only when external, offsets within INT64_MAX. */
static void check_external(const OnnxInitializer *t) {
        static const uint8_t zeros[ONNX_SHA1_SIZE];

        if (!t->external) {
                if (t->ext_offset || t->ext_length || t->ext_has_length || t->ext_has_checksum)
                        abort();
        } else if (!t->location[0] || strlen(t->location) > ONNX_MAX_NAME || t->ext_offset > INT64_MAX ||
                   t->ext_length > (uint64_t) INT64_MAX - t->ext_offset || (!t->ext_has_length && t->ext_length))
                abort();
        if (!t->ext_has_checksum && memcmp(t->ext_checksum, zeros, sizeof(zeros)) != 0)
                abort();
}

/* onnx_initializer_bytes() on whatever data_type and dims the input gave. */
static void check_bytes(const OnnxInitializer *t) {
        uint64_t n = UINT64_MAX;
        int r = onnx_initializer_bytes(t, &n);

        if (r == 0 ? n > INT64_MAX : (r != -EOPNOTSUPP && r != -EINVAL && r != -EOVERFLOW) || n != UINT64_MAX)
                abort();
        if (r == -EOPNOTSUPP && t->data_type > 0 && t->data_type <= ONNX_TYPE_INT2 && t->data_type != ONNX_TYPE_STRING)
                abort();
}

static void check(const Onnx *o, size_t size) {
        if (o->file_size != size || o->n_inits > ONNX_MAX_INITIALIZERS)
                abort();
        bool external = false;
        for (size_t i = 0; i < o->n_inits; i++) {
                const OnnxInitializer *t = &o->inits[i];
                if (!t->name || strlen(t->name) > 2 * ONNX_MAX_NAME || t->n_dims > ONNX_MAX_DIMS)
                        abort();
                if (t->tensor_offset > size || t->tensor_length > size - t->tensor_offset)
                        abort();
                if (t->offset < t->tensor_offset || t->length > t->tensor_offset + t->tensor_length - t->offset)
                        abort();
                if (t->external != (t->location != NULL) || (t->external && t->offset != t->tensor_offset))
                        abort();
                check_external(t);
                check_bytes(t);
                external |= t->external;
                if (i > 0) {
                        const OnnxInitializer *u = &o->inits[i - 1];
                        if (u->tensor_offset + u->tensor_length > t->tensor_offset || u->offset + u->length > t->offset)
                                abort();
                }
                for (size_t j = 0; j < i && o->n_inits <= 512; j++)
                        if (strcmp(o->inits[j].name, t->name) == 0)
                                abort();
        }
        if (external != o->has_external)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        int fd = fuzz_input_fd(data, size, 0);
        Onnx *o = NULL;
        TpError err = {0};

        (void) onnx_probe(data, size);
        int r = onnx_read(fd, &o, &err);
        if (r == 0) {
                check(o, size);
                onnx_free(o);
        } else if ((r != -EBADMSG && r != -ENOMEM) || !err.message[0] || err.code != r || o)
                abort();
        return 0;
}
