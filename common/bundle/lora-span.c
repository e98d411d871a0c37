/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "delta.h"
#include "ggml.h"
#include "lora-span.h"
#include "parse.h"

#define W "manifest"

static int span_error(const YamlNode *n, size_t idx, TpError *err, const char *what) {
        return tp_error(err, -EBADMSG, W ": line %u: span #%zu: lora: %s", n->line, idx, what);
}

/* A factor's type: f32, f16, bf16 or i8 (codec/predict.h), nothing else. */
static int factor_type(const YamlNode *l, const char *key, size_t idx, uint32_t *ret, TpError *err) {
        const char *name;
        int r = yaml_get_str(l, key, true, W, &name, err);

        if (r < 0)
                return r;
        if (strcmp(name, "f32") == 0)
                *ret = GGML_TYPE_F32;
        else if (strcmp(name, "f16") == 0)
                *ret = GGML_TYPE_F16;
        else if (strcmp(name, "bf16") == 0)
                *ret = GGML_TYPE_BF16;
        else if (strcmp(name, "i8") == 0)
                *ret = GGML_TYPE_I8;
        else
                return tp_error(err, -EBADMSG, W ": line %u: span #%zu: lora: '%s' is '%.16s' (expected f32, f16, "
                                "bf16 or i8)", l->line, idx, key, name);
        return 0;
}

int lora_span_parse(const YamlNode *n, size_t idx, const char *layout, ManifestSpan *s, TpError *err) {
        static const char *const keys[] = { "type", "in", "out", "rank", "first", "factor", "a", "b", "embd", "imatrix",
                                             "residual", NULL };
        const YamlNode *l;
        const char *type, *factor, *embd = "false", *imatrix = "false", *residual = "planes";
        uint8_t bits[4];
        int r, t;

        if ((r = yaml_get_map(n, "lora", true, W, &l, err)) < 0 || (r = yaml_check_keys(l, keys, W " lora", err)) < 0 ||
            (r = yaml_get_str(l, "type", true, W, &type, err)) < 0 ||
            (r = yaml_get_u64(l, "in", true, W, &s->lora.in, err)) < 0 ||
            (r = yaml_get_u64(l, "out", true, W, &s->lora.out, err)) < 0 ||
            (r = yaml_get_u64(l, "rank", true, W, &s->lora.rank, err)) < 0 ||
            (r = yaml_get_u64(l, "first", true, W, &s->lora_first, err)) < 0 ||
            (r = yaml_get_str(l, "factor", true, W, &factor, err)) < 0 ||
            (r = factor_type(l, "a", idx, &s->lora.a_type, err)) < 0 ||
            (r = factor_type(l, "b", idx, &s->lora.b_type, err)) < 0 ||
            (r = yaml_get_str(l, "embd", false, W, &embd, err)) < 0 ||
            (r = yaml_get_str(l, "imatrix", false, W, &imatrix, err)) < 0 ||
            (r = yaml_get_str(l, "residual", false, W, &residual, err)) < 0)
                return r;
        if ((t = ggml_type_from_name(type)) < 0 || strcmp(ggml_type((uint32_t) t)->name, type) != 0)
                return span_error(n, idx, err, "'type' names no ggml type (as ggml spells it: q8_0, q4_K, f16, ...)");
        s->lora.type = (uint32_t) t;
        if (strcmp(embd, "true") != 0 && strcmp(embd, "false") != 0)
                return span_error(n, idx, err, "'embd' is true or false");
        s->lora.embd = strcmp(embd, "true") == 0;
        if (strcmp(imatrix, "true") != 0 && strcmp(imatrix, "false") != 0)
                return span_error(n, idx, err, "'imatrix' is true or false");
        s->lora.importance = strcmp(imatrix, "true") == 0;
        if (strcmp(residual, "planes") != 0 && strcmp(residual, "ac") != 0)
                return span_error(n, idx, err, "'residual' is planes or ac");
        s->lora.ac = strcmp(residual, "ac") == 0;
        if (parse_hex(factor, bits, sizeof(bits)) < 0)
                return span_error(n, idx, err, "'factor' is the 8 hex digits of a float32's bits");
        uint32_t u = (uint32_t) bits[0] << 24 | (uint32_t) bits[1] << 16 | (uint32_t) bits[2] << 8 | bits[3];
        memcpy(&s->lora.factor, &u, sizeof(u));

        TpError why = {};
        if ((r = lora_shape_check(&s->lora, &why)) < 0)
                return span_error(n, idx, err, why.message);
        if (strcmp(layout, delta_layout_to_string(delta_layout_for_ggml(s->lora.type))) != 0)
                return span_error(n, idx, err, "its layout is not its type's");
        const GgmlType *gt = ggml_type(s->lora.type);
        /* in, out <= PREDICT_MAX_FACTOR_FLOATS (2^22): in * out cannot overflow. */
        uint64_t elems = s->lora.in * s->lora.out;
        if (s->length % gt->type_size != 0 || s->lora_first % gt->block_size != 0 || s->lora_first > elems ||
            s->length / gt->type_size > (elems - s->lora_first) / gt->block_size)
                return span_error(n, idx, err, "the span is not whole blocks of the tensor from its element 'first'");
        if (s->lora.importance && (s->lora_first % s->lora.in != 0 || s->length % lora_shape_row_bytes(&s->lora) != 0))
                return span_error(n, idx, err, "a span with an importance row must be whole rows of the tensor");
        return 0;
}

void lora_span_write(YamlWriter *w, const ManifestSpan *s) {
        uint32_t u;
        char hex[9];

        memcpy(&u, &s->lora.factor, sizeof(u));
        snprintf(hex, sizeof(hex), "%08" PRIx32, u);
        yaml_writer_str(w, "lora");
        yaml_writer_map_start(w, true);
        yaml_writer_kv(w, "type", ggml_type(s->lora.type)->name);
        yaml_writer_kv_u64(w, "in", s->lora.in);
        yaml_writer_kv_u64(w, "out", s->lora.out);
        yaml_writer_kv_u64(w, "rank", s->lora.rank);
        yaml_writer_kv_u64(w, "first", s->lora_first);
        yaml_writer_kv(w, "factor", hex);
        yaml_writer_kv(w, "a", ggml_type(s->lora.a_type)->name);     /* f32, f16, bf16, i8 */
        yaml_writer_kv(w, "b", ggml_type(s->lora.b_type)->name);
        if (s->lora.embd)
                yaml_writer_kv(w, "embd", "true");
        if (s->lora.importance)
                yaml_writer_kv(w, "imatrix", "true");
        if (s->lora.ac)
                yaml_writer_kv(w, "residual", "ac");
        yaml_writer_map_end(w);
}

uint64_t lora_span_blocks(const ManifestSpan *s) {
        return s->length / ggml_type(s->lora.type)->type_size;
}

uint64_t lora_span_first_block(const ManifestSpan *s) {
        return s->lora_first / ggml_type(s->lora.type)->block_size;
}
