/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for model directories (common/base/fileset.c, common/artifact/artifact-set.c):
 * the input is cut into up to FILES_MAX files, each given one of a few names that make the
 * directory layer do its work (an ONNX model and its data file, safetensors shards and their
 * index, split GGUF shards, a side file), written into a scratch directory and opened as one
 * model. A failure must carry a message; a success must keep the promises: the set's files
 * sorted and back to back, every site inside one file of it, sites sorted and not
 * overlapping, names unique, the layout fingerprint stable on a second open.
 *
 * Input: records of { u8 name index, u16 little-endian length, that many bytes }, until the
 * input ends (a short last record takes what is left).
 */

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "artifact.h"
#include "fuzz-input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FILES_MAX 6

static const char *const names[] = {
        "model.onnx",
        "model.onnx.data",
        "weights.bin",
        "model.safetensors.index.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "m-00001-of-00002.gguf",
        "m-00002-of-00002.gguf",
        "config.json",
};
#define N_NAMES (sizeof(names) / sizeof(*names))

static void check(const ModelSet *m) {
        const FileSet *s = &m->files;
        const Artifact *a = m->artifact;
        uint64_t at = 0;

        if (!s->directory || s->n_files == 0 || a->size != s->size)
                abort();
        for (size_t i = 0; i < s->n_files; i++) {
                if (s->files[i].offset != at || !fileset_path_valid(s->files[i].path) ||
                    (i > 0 && strcmp(s->files[i - 1].path, s->files[i].path) >= 0))
                        abort();
                at += s->files[i].size;
        }
        if (at != s->size)
                abort();
        for (size_t i = 0; i < a->n_sites; i++) {
                const Site *x = &a->sites[i];
                if (x->offset > a->size || x->length > a->size - x->offset)
                        abort();
                if (x->length > 0 && !fileset_in_one_file(s, x->offset, x->length))
                        abort();
                if (i > 0 && x->offset < a->sites[i - 1].offset + a->sites[i - 1].length)
                        abort();
                for (size_t j = 0; j < i && a->n_sites <= 256; j++)
                        if (strcmp(a->sites[j].name, x->name) == 0)
                                abort();
        }
}

static int open_scratch(ModelSet *ret, TpError *err) {
        char buf[128];
        int fd = open(fuzz_scratch_path("fuzz-modelset", ".", buf), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                abort();
        return model_set_open(fd, "model", ret, err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        bool used[N_NAMES] = {};
        char buf[128];
        size_t pos = 0, n_files = 0;

        /* A clean directory: this input's files only. */
        for (size_t i = 0; i < N_NAMES; i++)
                (void) unlink(fuzz_scratch_path("fuzz-modelset", names[i], buf));
        while (pos < size && n_files < FILES_MAX) {
                size_t k = data[pos++] % N_NAMES, len = 0;
                if (pos + 2 <= size)
                        len = (size_t) data[pos] | (size_t) data[pos + 1] << 8;
                pos = pos + 2 <= size ? pos + 2 : size;
                if (len > size - pos)
                        len = size - pos;
                if (used[k])
                        continue;
                int fd = open(fuzz_scratch_path("fuzz-modelset", names[k], buf), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                              0600);
                if (fd < 0 || write(fd, data + pos, len) != (ssize_t) len)
                        abort();
                close(fd);
                used[k] = true;
                n_files++;
                pos += len;
        }

        ModelSet m = MODEL_SET_NULL, again = MODEL_SET_NULL;
        TpError err = {};
        int r = open_scratch(&m, &err);
        if (r < 0) {
                if (r != -ENOMEM && err.message[0] == '\0')
                        abort();
                return 0;
        }
        check(&m);
        TpError err2 = {};
        if (open_scratch(&again, &err2) < 0 || memcmp(again.artifact->layout, m.artifact->layout, 32) != 0)
                abort();
        model_set_done(&again);
        model_set_done(&m);
        return 0;
}
