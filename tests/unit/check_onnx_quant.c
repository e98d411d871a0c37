/* SPDX-License-Identifier: MIT */
/*
 * How common/artifact/onnx.c (onnx-quant.c) records the quantizing nodes of a graph, and
 * onnx_quant_use_of() pairs them with an initializer: DequantizeLinear (axis, default, negative,
 * block_size), QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger, left-out inputs, domains,
 * nodes that agree or not; and the ArtifactQuant list artifact_open() makes of them (axis
 * normalized, tensors the runtime would refuse and non-8-bit ones left out). Models are built
 * byte by byte (tests/unit/onnx-model.h). Malformed input: check_onnx_malformed.c.
 */

#include <check.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "artifact.h"
#include "check-main.h"
#include "onnx-model.h"
#include "onnx.h"

#define NONE INT64_MIN          /* no such attribute */

/* A node under test: op_type, domain (NULL: none), up to 8 inputs, "axis" and "block_size" (NONE: left out). */
typedef struct QNode {
        const char *op, *domain;
        const char *in[8];
        size_t n_in;
        int64_t axis, block_size;
} QNode;

#define DQL(...) \
        { "DequantizeLinear", NULL, { __VA_ARGS__ }, ELEMENTSOF(((const char *[]) { __VA_ARGS__ })), NONE, NONE }
#define DQL_AXIS(axis, ...) \
        { "DequantizeLinear", NULL, { __VA_ARGS__ }, ELEMENTSOF(((const char *[]) { __VA_ARGS__ })), axis, NONE }

static Buf qnode(const QNode *q) {
        Buf a[2];
        size_t n = 0;
        if (q->axis != NONE)
                a[n++] = attr_int("axis", q->axis);
        if (q->block_size != NONE)
                a[n++] = attr_int("block_size", q->block_size);
        return node_in(q->op, q->domain, q->in, q->n_in, a, n);
}

/* ---- onnx_quant_use_of() -------------------------------------------------------------------------- */

static const struct {
        const char *label;
        QNode nodes[3];
        size_t n_nodes;
        bool found;                     /* onnx_quant_use_of("w") is not NULL */
        const char *scale, *zero_point; /* then: its names (NULL: none) */
        int64_t axis;
} uses[] = {
        { "DequantizeLinear without axis: 1", { DQL("w", "s", "zp") }, 1, true, "s", "zp", 1 },
        { "DequantizeLinear axis 0", { DQL_AXIS(0, "w", "s", "zp") }, 1, true, "s", "zp", 0 },
        { "DequantizeLinear axis -1", { DQL_AXIS(-1, "w", "s", "zp") }, 1, true, "s", "zp", -1 },
        { "DequantizeLinear axis -4 (a 10-byte varint)", { DQL_AXIS(-4, "w", "s", "zp") }, 1, true, "s", "zp", -4 },
        { "block_size 2: blocked", { { "DequantizeLinear", NULL, { "w", "s", "zp" }, 3, 0, 2 } }, 1, false, NULL, NULL,
          0 },
        { "block_size 0: not blocked", { { "DequantizeLinear", NULL, { "w", "s", "zp" }, 3, 0, 0 } }, 1, true, "s",
          "zp", 0 },
        { "block_size -1: not blocked", { { "DequantizeLinear", NULL, { "w", "s" }, 2, 1, -1 } }, 1, true, "s", NULL,
          1 },
        { "no zero point", { DQL("w", "s") }, 1, true, "s", NULL, 1 },
        { "zero point \"\"", { DQL("w", "s", "") }, 1, true, "s", NULL, 1 },
        { "scale \"\"", { DQL("w", "", "zp") }, 1, true, NULL, "zp", 1 },
        { "data \"\": no use", { DQL("", "s", "zp") }, 1, false, NULL, NULL, 0 },
        { "no inputs at all", { { "DequantizeLinear", NULL, { NULL }, 0, NONE, NONE } }, 1, false, NULL, NULL, 0 },
        { "w as DequantizeLinear's scale: not its data", { DQL("x", "w", "zp") }, 1, false, NULL, NULL, 0 },
        { "QLinearConv: inputs 3, 4, 5, axis 0",
          { { "QLinearConv", NULL, { "x", "xs", "xzp", "w", "s", "zp", "ys", "yzp" }, 8, NONE, NONE } }, 1, true, "s",
          "zp", 0 },
        { "QLinearConv ignores axis and block_size attributes",
          { { "QLinearConv", NULL, { "x", "xs", "xzp", "w", "s", "zp", "ys", "yzp" }, 8, 1, 2 } }, 1, true, "s", "zp",
          0 },
        { "QLinearMatMul: axis -1",
          { { "QLinearMatMul", NULL, { "a", "as", "azp", "w", "s", "zp", "ys", "yzp" }, 8, NONE, NONE } }, 1, true,
          "s", "zp", -1 },
        { "QLinearMatMul without w", { { "QLinearMatMul", NULL, { "a", "as", "azp" }, 3, NONE, NONE } }, 1, false,
          NULL, NULL, 0 },
        { "ConvInteger: no scale, zero point 3",
          { { "ConvInteger", NULL, { "x", "w", "xzp", "zp" }, 4, NONE, NONE } }, 1, true, NULL, "zp", 0 },
        { "ConvInteger without zero points", { { "ConvInteger", NULL, { "x", "w" }, 2, NONE, NONE } }, 1, true, NULL,
          NULL, 0 },
        { "MatMulInteger: axis -1", { { "MatMulInteger", NULL, { "a", "w", "azp", "zp" }, 4, NONE, NONE } }, 1, true,
          NULL, "zp", -1 },
        { "domain com.microsoft", { { "DequantizeLinear", "com.microsoft", { "w", "s", "zp" }, 3, 0, NONE } }, 1, true,
          "s", "zp", 0 },
        { "domain ai.onnx", { { "DequantizeLinear", "ai.onnx", { "w", "s", "zp" }, 3, 0, NONE } }, 1, true, "s", "zp",
          0 },
        { "domain \"\"", { { "DequantizeLinear", "", { "w", "s", "zp" }, 3, 0, NONE } }, 1, true, "s", "zp", 0 },
        { "domain com.example: ignored", { { "DequantizeLinear", "com.example", { "w", "s", "zp" }, 3, 0, NONE } }, 1,
          false, NULL, NULL, 0 },
        { "Conv is not a quantizing op", { { "Conv", NULL, { "x", "w", "s" }, 3, NONE, NONE } }, 1, false, NULL, NULL,
          0 },
        { "two nodes, one use", { DQL_AXIS(0, "w", "s", "zp"), DQL_AXIS(0, "w", "s", "zp") }, 2, true, "s", "zp", 0 },
        { "default axis and axis 1 agree", { DQL("w", "s", "zp"), DQL_AXIS(1, "w", "s", "zp") }, 2, true, "s", "zp",
          1 },
        { "DequantizeLinear axis 0 and QLinearConv agree",
          { DQL_AXIS(0, "w", "s", "zp"),
            { "QLinearConv", NULL, { "x", "xs", "xzp", "w", "s", "zp", "ys", "yzp" }, 8, NONE, NONE } }, 2, true, "s",
          "zp", 0 },
        { "a third node disagrees", { DQL("w", "s", "zp"), DQL("w", "s", "zp"), DQL("w", "s", "zp2") }, 3, false, NULL,
          NULL, 0 },
        { "other zero point", { DQL("w", "s", "zp"), DQL("w", "s", "zp2") }, 2, false, NULL, NULL, 0 },
        { "zero point and none", { DQL("w", "s", "zp"), DQL("w", "s") }, 2, false, NULL, NULL, 0 },
        { "other scale", { DQL("w", "s", "zp"), DQL("w", "s2", "zp") }, 2, false, NULL, NULL, 0 },
        { "other axis", { DQL_AXIS(0, "w", "s", "zp"), DQL("w", "s", "zp") }, 2, false, NULL, NULL, 0 },
        { "axis -1 and 3 agree on a 4-D w",
          { DQL_AXIS(-1, "w", "s", "zp"), DQL_AXIS(3, "w", "s", "zp") }, 2, true, "s", "zp", -1 },
        { "axis -4 and 0 agree on a 4-D w",
          { DQL_AXIS(-4, "w", "s", "zp"), DQL_AXIS(0, "w", "s", "zp") }, 2, true, "s", "zp", -4 },
        { "QLinearMatMul's -1 and DequantizeLinear's 3 agree on a 4-D w",
          { DQL_AXIS(3, "w", "s", "zp"),
            { "QLinearMatMul", NULL, { "a", "as", "azp", "w", "s", "zp", "ys", "yzp" }, 8, NONE, NONE } }, 2, true,
          "s", "zp", 3 },
        { "axis -1 and 2 disagree on a 4-D w", { DQL_AXIS(-1, "w", "s", "zp"), DQL_AXIS(2, "w", "s", "zp") }, 2,
          false, NULL, NULL, 0 },
        { "one blocked", { DQL_AXIS(0, "w", "s", "zp"), { "DequantizeLinear", NULL, { "w", "s", "zp" }, 3, 0, 4 } }, 2,
          false, NULL, NULL, 0 },
        { "another tensor's use beside", { DQL("a", "as"), DQL("w", "s", "zp"), DQL("z", "zs") }, 3, true, "s", "zp",
          1 },
};

/* Initializers "w" INT8 [4, 3, 2, 2], "s" FLOAT [4], "zp" INT8 [4], "unused" INT8 [4]; then the case's nodes. */
static Buf uses_model(size_t i) {
        static const int8_t w[48];
        static const float s[4];
        Buf g = {}, t;

        t = tensor_raw("w", ONNX_TYPE_INT8, (int64_t[]) { 4, 3, 2, 2 }, 4, w, sizeof(w));
        f_msg(&g, 5, &t);
        t = tensor_raw("s", ONNX_TYPE_FLOAT, (int64_t[]) { 4 }, 1, s, sizeof(s));
        f_msg(&g, 5, &t);
        t = tensor_raw("zp", ONNX_TYPE_INT8, (int64_t[]) { 4 }, 1, w, 4);
        f_msg(&g, 5, &t);
        t = tensor_raw("unused", ONNX_TYPE_INT8, (int64_t[]) { 4 }, 1, w, 4);
        f_msg(&g, 5, &t);
        for (size_t k = 0; k < uses[i].n_nodes; k++) {
                Buf n = qnode(&uses[i].nodes[k]);
                f_msg(&g, 1, &n);
        }
        return model_of(&g);
}

static bool same(const char *a, const char *b) {
        return a == b || (a && b && strcmp(a, b) == 0);
}

START_TEST(test_uses) {
        Buf m = uses_model((size_t) _i);
        Onnx *o = read_ok(&m);
        const char *label = uses[_i].label;

        check_invariants(o, m.p, m.n);
        ck_assert_uint_eq(o->n_inits, 4);
        for (size_t k = 1; k < o->n_uses; k++)
                ck_assert_msg(strcmp(o->uses[k - 1].data, o->uses[k].data) <= 0, "%s: uses out of order", label);
        ck_assert_msg(!onnx_quant_use_of(o, find(o, "unused")), "%s: 'unused' has a use", label);
        ck_assert_msg(!onnx_quant_use_of(o, find(o, "zp")), "%s: 'zp' has a use", label);

        const OnnxQuantUse *u = onnx_quant_use_of(o, find(o, "w"));
        ck_assert_msg((u != NULL) == uses[_i].found, "%s: use %s", label, u ? "found" : "not found");
        if (u) {
                ck_assert_str_eq(u->data, "w");
                ck_assert_msg(same(u->scale, uses[_i].scale), "%s: scale '%s', want '%s'", label,
                              u->scale ? u->scale : "(none)", uses[_i].scale ? uses[_i].scale : "(none)");
                ck_assert_msg(same(u->zero_point, uses[_i].zero_point), "%s: zero point '%s', want '%s'", label,
                              u->zero_point ? u->zero_point : "(none)",
                              uses[_i].zero_point ? uses[_i].zero_point : "(none)");
                /* Nodes that agree may name one axis two ways ("w" is 4-D): which one the use keeps is open. */
                int64_t got = u->axis, want = uses[_i].axis;
                if (uses[_i].n_nodes > 1) {
                        got = got < 0 ? got + 4 : got;
                        want = want < 0 ? want + 4 : want;
                }
                ck_assert_msg(got == want, "%s: axis %" PRId64 ", want %" PRId64, label, u->axis, uses[_i].axis);
                ck_assert(!u->blocked);
        }
        onnx_free(o);
        free(m.p);
}
END_TEST

/* A use inside a subgraph (an If's then_branch) of the main graph's initializer is recorded too. */
START_TEST(test_use_in_subgraph) {
        static const int8_t w[6];
        const QNode dq = DQL_AXIS(0, "w", "s");
        Buf g = {}, sub = {}, t, a, n;

        t = tensor_raw("w", ONNX_TYPE_UINT8, (int64_t[]) { 2, 3 }, 2, w, sizeof(w));
        f_msg(&g, 5, &t);
        n = qnode(&dq);
        f_msg(&sub, 1, &n);
        a = attr_graph("then_branch", &sub);
        n = node("If", "if0", "y", &a, 1);
        f_msg(&g, 1, &n);
        Buf m = model_of(&g);

        Onnx *o = read_ok(&m);
        const OnnxQuantUse *u = onnx_quant_use_of(o, find(o, "w"));
        ck_assert_ptr_nonnull(u);
        ck_assert_str_eq(u->scale, "s");
        ck_assert_ptr_null(u->zero_point);
        ck_assert_int_eq(u->axis, 0);
        onnx_free(o);
        free(m.p);
}
END_TEST

/* ---- ArtifactQuant: artifact_open() of such a model --------------------------------------------------- */

/* An initializer @name of @type and @dims (zeros), and the node @q that uses it. */
typedef struct QTensor {
        const char *name;
        int32_t type;
        int64_t dims[4];
        uint32_t n_dims;
        QNode q;
} QTensor;

static const QTensor quant_tensors[] = {
        { "conv.w", ONNX_TYPE_INT8, { 4, 3, 2, 2 }, 4, DQL_AXIS(0, "conv.w", "conv.s", "conv.zp") },
        { "fc.w", ONNX_TYPE_UINT8, { 6, 5 }, 2,
          { "QLinearMatMul", NULL, { "a", "as", "azp", "fc.w", "fc.s", "fc.zp", "ys", "yzp" }, 8, NONE, NONE } },
        { "neg.w", ONNX_TYPE_INT8, { 2, 3, 4 }, 3, DQL_AXIS(-3, "neg.w", "neg.s") },
        { "default.w", ONNX_TYPE_INT8, { 5, 2 }, 2, DQL("default.w", "default.s", "default.zp") },
        { "scalar.w", ONNX_TYPE_INT8, { 0 }, 0, DQL("scalar.w", "scalar.s") },
        { "ci.w", ONNX_TYPE_UINT8, { 3, 2, 1, 1 }, 4, { "ConvInteger", NULL, { "x", "ci.w" }, 2, NONE, NONE } },
        { "mi.w", ONNX_TYPE_INT8, { 8, 3 }, 2,
          { "MatMulInteger", NULL, { "a", "mi.w", "azp", "mi.zp" }, 4, NONE, NONE } },
        { "conv1d.w", ONNX_TYPE_INT8, { 4 }, 1, { "ConvInteger", NULL, { "x", "conv1d.w" }, 2, NONE, NONE } },
        /* None of these is listed: */
        { "axis2.w", ONNX_TYPE_INT8, { 4, 4 }, 2, DQL_AXIS(2, "axis2.w", "axis2.s") },
        { "axis-3.w", ONNX_TYPE_INT8, { 4, 4 }, 2, DQL_AXIS(-3, "axis-3.w", "axis-3.s") },
        { "zero.w", ONNX_TYPE_INT8, { 0, 3 }, 2, DQL_AXIS(0, "zero.w", "zero.s") },
        { "bias", ONNX_TYPE_INT32, { 4 }, 1, DQL_AXIS(0, "bias", "bias.s") },
        { "f", ONNX_TYPE_FLOAT, { 4 }, 1, DQL_AXIS(0, "f", "f.s") },
        { "i16", ONNX_TYPE_INT16, { 4 }, 1, DQL_AXIS(0, "i16", "i16.s") },
        { "blocked.w", ONNX_TYPE_INT8, { 4, 4 }, 2, { "DequantizeLinear", NULL, { "blocked.w", "b.s" }, 2, 1, 2 } },
        { "unused.w", ONNX_TYPE_INT8, { 4, 4 }, 2, { "Relu", NULL, { "unused.w" }, 1, NONE, NONE } },
};

/* What artifact_open() must list, sorted by site name: site, scale, zero point, axis (dims: the tensor's). */
static const struct {
        const char *site, *scale, *zero_point;
        uint32_t axis;
} quant_want[] = {
        { "ci.w", NULL, NULL, 0 },
        { "conv.w", "conv.s", "conv.zp", 0 },
        { "conv1d.w", NULL, NULL, 0 },
        { "default.w", "default.s", "default.zp", 1 },
        { "fc.w", "fc.s", "fc.zp", 1 },
        { "mi.w", NULL, "mi.zp", 1 },
        { "neg.w", "neg.s", NULL, 0 },
        { "scalar.w", "scalar.s", NULL, 0 },
};

static const QTensor *quant_tensor(const char *name) {
        for (size_t i = 0; i < ELEMENTSOF(quant_tensors); i++)
                if (strcmp(quant_tensors[i].name, name) == 0)
                        return &quant_tensors[i];
        ck_abort_msg("no tensor '%s'", name);
        return NULL;
}

START_TEST(test_artifact_quants) {
        static const uint8_t zeros[256];
        Buf g = {};

        for (size_t i = 0; i < ELEMENTSOF(quant_tensors); i++) {
                const QTensor *x = &quant_tensors[i];
                uint64_t elems = 1;
                for (uint32_t k = 0; k < x->n_dims; k++)
                        elems *= (uint64_t) x->dims[k];
                size_t size = elems * (x->type == ONNX_TYPE_INT32 || x->type == ONNX_TYPE_FLOAT ? 4 :
                                       x->type == ONNX_TYPE_INT16 ? 2 : 1);
                ck_assert_uint_le(size, sizeof(zeros));
                Buf t = tensor_raw(x->name, x->type, x->dims, x->n_dims, zeros, size), n = qnode(&x->q);
                f_msg(&g, 5, &t);
                f_msg(&g, 1, &n);
        }
        Buf m = model_of(&g);
        int fd = memfd_with(m.p, m.n);
        _cleanup_(artifact_freep) Artifact *a = NULL;
        TpError err = {};
        ck_assert_msg(artifact_open(fd, &a, &err) == 0, "%s", err.message);
        close(fd);

        ck_assert_int_eq(a->kind, ARTIFACT_ONNX);
        ck_assert_uint_eq(a->n_sites, ELEMENTSOF(quant_tensors));
        ck_assert_uint_eq(a->n_quants, ELEMENTSOF(quant_want));
        for (size_t i = 0; i < ELEMENTSOF(quant_want); i++) {
                const ArtifactQuant *q = &a->quants[i];
                const QTensor *x = quant_tensor(quant_want[i].site);
                ck_assert_str_eq(q->site, quant_want[i].site);
                ck_assert_ptr_eq(artifact_quant(a, quant_want[i].site), q);
                ck_assert_msg(same(q->scale, quant_want[i].scale), "%s: scale '%s'", q->site, q->scale ? q->scale : "");
                ck_assert_msg(same(q->zero_point, quant_want[i].zero_point), "%s: zero point '%s'", q->site,
                              q->zero_point ? q->zero_point : "");
                ck_assert_msg(q->axis == quant_want[i].axis, "%s: axis %" PRIu32 ", want %" PRIu32, q->site, q->axis,
                              quant_want[i].axis);
                ck_assert_uint_eq(q->n_dims, x->n_dims);
                for (uint32_t k = 0; k < q->n_dims; k++)
                        ck_assert_uint_eq(q->dims[k], (uint64_t) x->dims[k]);
                ck_assert(q->n_dims == 0 || q->axis < q->n_dims);
        }
        for (size_t i = 0; i < ELEMENTSOF(quant_tensors); i++) {
                bool listed = false;
                for (size_t k = 0; k < ELEMENTSOF(quant_want); k++)
                        listed |= strcmp(quant_want[k].site, quant_tensors[i].name) == 0;
                ck_assert_msg((artifact_quant(a, quant_tensors[i].name) != NULL) == listed, "'%s': %s",
                              quant_tensors[i].name, listed ? "not listed" : "listed");
        }
        ck_assert_ptr_null(artifact_quant(a, "conv.s"));
        ck_assert_ptr_null(artifact_quant(a, NULL));
        free(m.p);
}
END_TEST

/* A model without quantizing nodes lists none. */
START_TEST(test_artifact_no_quants) {
        Buf m = nested_model();
        int fd = memfd_with(m.p, m.n);
        _cleanup_(artifact_freep) Artifact *a = NULL;
        TpError err = {};

        ck_assert_msg(artifact_open(fd, &a, &err) == 0, "%s", err.message);
        close(fd);
        ck_assert_uint_eq(a->n_quants, 0);
        ck_assert_ptr_null(a->quants);
        ck_assert_ptr_null(artifact_quant(a, "w"));
        free(m.p);
}
END_TEST

static Suite *onnx_quant_suite(void) {
        Suite *s = suite_create("onnx_quant");
        TCase *tc = tcase_create("quant");

        tcase_add_loop_test(tc, test_uses, 0, (int) ELEMENTSOF(uses));
        tcase_add_test(tc, test_use_in_subgraph);
        tcase_add_test(tc, test_artifact_quants);
        tcase_add_test(tc, test_artifact_no_quants);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(onnx_quant_suite)
