/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for common/model/imatrix.c. The input becomes a memfd (imatrix_read wants a
 * file descriptor); a failure must be -EBADMSG (or -ENOMEM) with a message and no result, a
 * success must keep every promise imatrix.h makes: the form the magic says, at least one entry,
 * entries sorted by unique names that imatrix_find finds, values finite and not negative in
 * runs of n_experts, every count and length within its cap. Anything else aborts.
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz-input.h"
#include "imatrix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const Imatrix *im, const uint8_t *data, size_t size) {
        uint64_t total = 0;

        if (im->legacy != !(size >= 4 && memcmp(data, "GGUF", 4) == 0))
                abort();
        if (im->n_entries < 1 || !im->entries || (im->legacy && im->n_entries > IMATRIX_ENTRIES_MAX))
                abort();
        for (size_t i = 0; i < im->n_entries; i++) {
                const ImatrixEntry *e = &im->entries[i];
                if (!e->name || !e->values || e->n_values < 1 || e->n_values > IMATRIX_VALUES_MAX)
                        abort();
                if (e->n_experts < 1 || e->n_values % e->n_experts != 0 || (im->legacy && e->n_experts != 1))
                        abort();
                if (im->legacy && strlen(e->name) > IMATRIX_NAME_LEN_MAX)
                        abort();
                if (i > 0 && strcmp(im->entries[i - 1].name, e->name) >= 0)
                        abort();
                if (imatrix_find(im, e->name) != e)
                        abort();
                for (size_t j = 0; j < e->n_values; j++)
                        if (!isfinite(e->values[j]) || e->values[j] < 0)
                                abort();
                total += e->n_values;
        }
        /* Each value was read from 4 bytes of the file. */
        if (total > IMATRIX_VALUES_TOTAL_MAX || total * 4 > size)
                abort();
        if (im->n_datasets > (im->legacy ? 1 : IMATRIX_DATASETS_MAX) || (im->n_datasets && !im->datasets))
                abort();
        for (size_t i = 0; i < im->n_datasets; i++)
                if (!im->datasets[i] || strlen(im->datasets[i]) > IMATRIX_DATASET_LEN_MAX)
                        abort();
        if (im->legacy && im->chunk_size != 0)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        int fd = fuzz_input_fd(data, size, 0);
        Imatrix *im = NULL;
        TpError err = {0};

        int r = imatrix_read(fd, &im, &err);
        if (r == 0) {
                check(im, data, size);
                imatrix_free(im);
        } else if ((r != -EBADMSG && r != -ENOMEM) || !err.message[0] || err.code != r || im)
                abort();
        return 0;
}
