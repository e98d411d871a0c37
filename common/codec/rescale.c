/* SPDX-License-Identifier: MIT */
/* The prediction of rescale spans (rescale.h). */

#include <inttypes.h>
#include <stdlib.h>

#include "rescale.h"

int rescale_shape_check(const RescaleShape *s, TpError *err) {
        if (s->channels == 0 || s->channels > RESCALE_MAX_CHANNELS)
                return tp_error(err, -EBADMSG, "a rescale span of %" PRIu64 " channels (expected 1 .. %u)",
                                s->channels, RESCALE_MAX_CHANNELS);
        if (s->inner == 0 || s->inner > RESCALE_MAX_INNER)
                return tp_error(err, -EBADMSG, "a rescale span with %" PRIu64 " elements per channel run (expected 1 .. "
                                "2^40)", s->inner);
        return 0;
}

uint64_t rescale_shape_param_bytes(const RescaleShape *s) {
        return 8 * s->channels;
}

int rescale_params_new(const RescaleShape *s, RescaleParams **ret) {
        RescaleParams *p = calloc(1, sizeof(*p));

        if (!p)
                return -ENOMEM;
        p->shape = *s;
        p->ratio = calloc(s->channels, sizeof(int32_t));
        p->offset = calloc(s->channels, sizeof(int32_t));
        if (!p->ratio || !p->offset) {
                rescale_params_free(p);
                return -ENOMEM;
        }
        *ret = p;
        return 0;
}

RescaleParams *rescale_params_free(RescaleParams *p) {
        if (p) {
                free(p->ratio);
                free(p->offset);
                free(p);
        }
        return NULL;
}

/* Value @i of the frame's array: R[i], then O[i - channels]. */
static int32_t *param(const RescaleParams *p, uint64_t i) {
        return i < p->shape.channels ? &p->ratio[i] : &p->offset[i - p->shape.channels];
}

void rescale_params_store(const RescaleParams *p, uint8_t *out) {
        uint64_t n = 2 * p->shape.channels;

        for (unsigned plane = 0; plane < 4; plane++)
                for (uint64_t i = 0; i < n; i++)
                        out[plane * n + i] = (uint8_t) ((uint32_t) *param(p, i) >> 8 * plane);
}

void rescale_params_load_plane(RescaleParams *p, unsigned plane, uint64_t first, const uint8_t *bytes, size_t n) {
        for (size_t k = 0; k < n; k++) {
                int32_t *v = param(p, first + k);
                uint32_t u = (uint32_t) *v & ~(UINT32_C(0xff) << 8 * plane);
                *v = (int32_t) (u | (uint32_t) bytes[k] << 8 * plane);
        }
}

void rescale_predict(const RescaleParams *p, uint64_t first, const uint8_t *base, size_t n, uint8_t *out,
                     uint8_t *flip) {
        const RescaleShape *s = &p->shape;
        uint64_t c = first / s->inner % s->channels, left = s->inner - first % s->inner;

        for (size_t i = 0; i < n;) {
                const int32_t r = p->ratio[c], o = p->offset[c];
                size_t run = left < n - i ? (size_t) left : n - i;
                for (size_t end = i + run; i < end; i++) {
                        bool f;
                        out[i] = (uint8_t) rescale_predict_value(r, o, s->is_signed ? (int8_t) base[i] : base[i],
                                                                 s->is_signed, &f);
                        flip[i] = f;
                }
                left = s->inner;
                if (++c == s->channels)
                        c = 0;
        }
}

void rescale_flip(const uint8_t *predicted, const uint8_t *flip, uint8_t *bytes, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (flip[i])
                        bytes[i] = (uint8_t) (2 * predicted[i] - bytes[i]);
}
