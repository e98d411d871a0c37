/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for common/artifact/onnx.c (and common/artifact/pbwire.c under it). The
 * input becomes a memfd (onnx_read wants a file descriptor); a failure must
 * be -EBADMSG or -ENOMEM with a message and no result, a success must keep
 * every promise onnx.h makes. Anything else aborts. onnx_probe() runs on
 * the same bytes.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz-input.h"
#include "onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
