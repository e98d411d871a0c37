/* SPDX-License-Identifier: MIT */
/* One span's frame (create-impl.h): its bytes, raw or delta-coded against base bytes or a prediction, through zstd. */

#include <inttypes.h>
#include <string.h>
#include <zstd.h>

#include "create-impl.h"
#include "delta.h"
#include "fileio.h"
#include "match.h"
#include "predict-ac.h"

int code_frame_prefix(Coder *c, const uint8_t *bytes, uint64_t n, int fd, uint64_t *written) {
        ZSTD_inBuffer in = { bytes, n, 0 };
        int r;

        while (in.pos < in.size) {
                ZSTD_outBuffer out = { c->out, c->out_cap, 0 };
                size_t z = ZSTD_compressStream2(c->cctx, &out, &in, ZSTD_e_continue);
                if (ZSTD_isError(z))
                        return tp_error(c->err, -EIO, "zstd: %s", ZSTD_getErrorName(z));
                if (fd >= 0 && (r = write_full(fd, c->out, out.pos)) < 0)
                        return tp_error(c->err, r, "writing the payload: %s", strerror(-r));
                *written += out.pos;
        }
        return 0;
}

#define FLOAT_RUNS_MAX 64

/*
 * The float32 sites of the target wholly inside the group at [@off, +@n), by offset in the group
 * (at most FLOAT_RUNS_MAX: an i8acp group holds at most DELTA_I8ACP_RULES_MAX rules anyway).
 */
static size_t float_runs(const Artifact *target, uint64_t off, size_t n, DeltaFloatRun runs[FLOAT_RUNS_MAX]) {
        size_t k = 0;

        if (!target)
                return 0;
        for (size_t i = artifact_site_after(target, off); i < target->n_sites && k < FLOAT_RUNS_MAX; i++) {
                const Site *s = &target->sites[i];
                if (s->offset < off)            /* begins before the group */
                        continue;
                if (s->offset + s->length > off + n)
                        break;
                if (site_delta_layout(target, s) == DELTA_F32 && s->length >= 4 && s->length % 4 == 0)
                        runs[k++] = (DeltaFloatRun) { (uint32_t) (s->offset - off), (uint32_t) (s->length / 4) };
        }
        return k;
}

int code_span(Coder *c, const Plan *p, bool delta, bool ref, const CodeLora *lora, const CodeRescale *rescale, int fd,
              uint64_t *ret_size, uint8_t base_sha[32], uint8_t new_sha[32]) {
        size_t group = delta ? delta_group_bytes(p->layout) : c->group_max;
        Sha256 hb, ht;
        uint64_t written = 0;
        int r;

        if (group > c->group_max)
                group = c->group_max;
        if (lora)
                group = lora_shape_group_bytes(&lora->shape, group);
        sha256_init(&hb);
        sha256_init(&ht);
        ZSTD_CCtx_reset(c->cctx, ZSTD_reset_session_only);
        ZSTD_CCtx_setPledgedSrcSize(c->cctx, p->length + (lora ? lora_shape_factor_bytes(&lora->shape) : 0) +
                                                 (rescale ? rescale_shape_param_bytes(&rescale->params->shape) : 0));
        if (lora && (r = code_lora_factors(c, lora, fd, &written)) < 0)
                return r;
        if (rescale && (r = code_rescale_params(c, rescale, fd, &written)) < 0)
                return r;
        if (ref) {
                if ((r = fileset_pread(c->base_files, c->ref, p->ref_length, p->base_offset)) < 0)
                        return tp_error(c->err, r == -ENODATA ? -EIO : r, "reading the base at %" PRIu64, p->base_offset);
                size_t z = ZSTD_CCtx_refPrefix(c->cctx, c->ref, p->ref_length);
                if (ZSTD_isError(z))
                        return tp_error(c->err, -EIO, "zstd: %s", ZSTD_getErrorName(z));
        }

        for (uint64_t pos = 0; pos < p->length;) {
                size_t n = p->length - pos < group ? (size_t) (p->length - pos) : group;
                uint64_t off = p->offset + pos;

                if ((r = fileset_pread(c->target_files, c->t, n, off)) < 0)
                        return tp_error(c->err, r == -ENODATA ? -EIO : r, "reading the target at %" PRIu64, off);
                sha256_update(&ht, c->t, n);
                if (p->layout != _DELTA_LAYOUT_INVALID) {
                        uint64_t boff = p->base_offset + pos;
                        if ((r = fileset_pread(c->base_files, c->b, n, boff)) < 0)
                                return tp_error(c->err, r == -ENODATA ? -EIO : r, "reading the base at %" PRIu64, boff);
                        sha256_update(&hb, c->b, n);
                }
                const uint8_t *src = c->t;
                bool fits = true;
                if (lora) {
                        code_lora_predict(lora, pos, c->b, n);
                        fits = lora->shape.ac ? predict_ac_encode(lora->shape.type, lora->scratch, lora->predicted, c->t,
                                                                  n, c->x)
                                              : delta_encode(p->layout, lora->predicted, c->t, n, c->x);
                        src = c->x;
                } else if (rescale) {
                        fits = code_rescale_residual(rescale, p->layout, pos, c->b, c->t, n, c->x);
                        src = c->x;
                } else if (delta && p->layout == DELTA_I8ACP) {
                        DeltaFloatRun runs[FLOAT_RUNS_MAX];
                        size_t n_runs = float_runs(c->target, off, n, runs);
                        fits = delta_encode_floats(p->layout, c->b, c->t, n, runs, n_runs, c->x);
                        src = c->x;
                } else if (delta) {
                        fits = delta_encode(p->layout, c->b, c->t, n, c->x);
                        src = c->x;
                }
                if (!fits)
                        return -E2BIG;          /* no error: code_plan() tries the layout's fallback */
                pos += n;
                bool last = pos >= p->length;
                ZSTD_inBuffer in = { src, n, 0 };
                for (;;) {
                        ZSTD_outBuffer out = { c->out, c->out_cap, 0 };
                        size_t z = ZSTD_compressStream2(c->cctx, &out, &in, last ? ZSTD_e_end : ZSTD_e_continue);
                        if (ZSTD_isError(z))
                                return tp_error(c->err, -EIO, "zstd: %s", ZSTD_getErrorName(z));
                        if (fd >= 0 && (r = write_full(fd, c->out, out.pos)) < 0)
                                return tp_error(c->err, r, "writing the payload: %s", strerror(-r));
                        written += out.pos;
                        if (last ? z == 0 : in.pos == in.size)
                                break;
                }
        }
        if (ref)
                sha256_update(&hb, c->ref, p->ref_length);
        sha256_final(&hb, base_sha);
        sha256_final(&ht, new_sha);
        *ret_size = written;
        return 0;
}
