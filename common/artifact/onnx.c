/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "onnx-external.h"
#include "onnx-quant.h"
#include "onnx.h"
#include "pbwire.h"

_Static_assert(ONNX_MAX_DEPTH == PB_MAX_DEPTH, "onnx.h promises the walker's depth cap");

/* The ONNX messages and fields this reader looks at (onnx/onnx.proto), with their wire types. */
#define F(n, name, wires) { n, name, wires }
#define LEN PB_W(PB_LEN)
static const PbFieldInfo model_fields[] = {
        F(1, "ir_version", PB_W(PB_VARINT)), F(7, "graph", LEN), F(20, "training_info", LEN), F(25, "functions", LEN),
};
static const PbFieldInfo graph_fields[] = {
        F(1, "node", LEN), F(5, "initializer", LEN), F(15, "sparse_initializer", LEN),
};
static const PbFieldInfo node_fields[] = {
        F(1, "input", LEN), F(2, "output", LEN), F(3, "name", LEN), F(4, "op_type", LEN), F(5, "attribute", LEN), F(7, "domain", LEN),
};
static const PbFieldInfo attribute_fields[] = {
        F(1, "name", LEN),           F(3, "i", PB_W(PB_VARINT)), F(5, "t", LEN), F(6, "g", LEN),
        F(10, "tensors", LEN),       F(11, "graphs", LEN), F(22, "sparse_tensor", LEN),
        F(23, "sparse_tensors", LEN),
};
static const PbFieldInfo tensor_fields[] = {
        F(1, "dims", PB_W(PB_VARINT) | LEN),
        F(2, "data_type", PB_W(PB_VARINT)),
        F(4, "float_data", LEN | PB_W(PB_FIXED32)),
        F(5, "int32_data", LEN | PB_W(PB_VARINT)),
        F(6, "string_data", LEN),
        F(7, "int64_data", LEN | PB_W(PB_VARINT)),
        F(8, "name", LEN),
        F(9, "raw_data", LEN),
        F(10, "double_data", LEN | PB_W(PB_FIXED64)),
        F(11, "uint64_data", LEN | PB_W(PB_VARINT)),
        F(13, "external_data", LEN),
        F(14, "data_location", PB_W(PB_VARINT)),
};
static const PbFieldInfo sparse_fields[] = { F(1, "values", LEN), F(2, "indices", LEN) };
static const PbFieldInfo function_fields[] = { F(1, "name", LEN), F(7, "node", LEN), F(11, "attribute_proto", LEN) };
static const PbFieldInfo training_fields[] = { F(1, "initialization", LEN), F(2, "algorithm", LEN) };
#undef F
#undef LEN

#define SCHEMA(type, f) { type, f, ELEMENTSOF(f) }
static const PbSchema model_type = SCHEMA("ModelProto", model_fields);
static const PbSchema graph_type = SCHEMA("GraphProto", graph_fields);
static const PbSchema node_type = SCHEMA("NodeProto", node_fields);
static const PbSchema attribute_type = SCHEMA("AttributeProto", attribute_fields);
static const PbSchema tensor_type = SCHEMA("TensorProto", tensor_fields);
static const PbSchema sparse_type = SCHEMA("SparseTensorProto", sparse_fields);
static const PbSchema function_type = SCHEMA("FunctionProto", function_fields);
static const PbSchema training_type = SCHEMA("TrainingInfoProto", training_fields);
#undef SCHEMA

typedef struct Walker {
        PbWalker pb;            /* first: the callbacks get &pb */
        Onnx *o;
        size_t cap;             /* allocated o->inits */
        size_t uses_cap;        /* allocated o->uses */
        size_t name_bytes;
} Walker;

static Walker *walker(PbWalker *pb) {
        return (Walker *) pb;
}

static void initializer_done(OnnxInitializer *t) {
        free(t->name);
        free(t->location);
        *t = (OnnxInitializer) {};
}

static bool nonempty(const char *s) {
        return s && s[0];
}

_printf_(1, 2) static char *strfmt(const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        int n = vsnprintf(NULL, 0, fmt, ap);
        va_end(ap);
        if (n < 0)
                return NULL;
        char *s = malloc((size_t) n + 1);
        if (!s)
                return NULL;
        va_start(ap, fmt);
        vsnprintf(s, (size_t) n + 1, fmt, ap);
        va_end(ap);
        return s;
}

/* The current path with @suffix: the name of a tensor that has none. */
static char *path_name(PbWalker *pb, const char *suffix) {
        char path[320];
        pb_path(pb, path, sizeof(path));
        return strfmt("%s%s", path, suffix);
}

/* Append @t, its name set, to the result. Takes @t's contents in every case. */
static int add_tensor(PbWalker *pb, OnnxInitializer *t) {
        Walker *w = walker(pb);
        Onnx *o = w->o;
        size_t bytes = strlen(t->name) + 1 + (t->location ? strlen(t->location) + 1 : 0);
        int k = 0;

        if (o->n_inits >= ONNX_MAX_INITIALIZERS)
                k = pb_error(pb, t->tensor_offset, "more than %u tensors", ONNX_MAX_INITIALIZERS);
        else if (bytes > ONNX_MAX_NAME_BYTES - w->name_bytes)
                k = pb_error(pb, t->tensor_offset, "names take more than %u bytes", ONNX_MAX_NAME_BYTES);
        else if (o->n_inits == w->cap) {
                size_t cap = w->cap ? w->cap * 2 : 16;
                OnnxInitializer *p = reallocarray(o->inits, cap, sizeof(*p));
                if (!p)
                        k = pb_oom(pb);
                else {
                        o->inits = p;
                        w->cap = cap;
                }
        }
        if (k < 0) {
                initializer_done(t);
                return k;
        }
        w->name_bytes += bytes;
        o->inits[o->n_inits++] = *t;
        *t = (OnnxInitializer) {};
        return 0;
}

/* Name @t @name (taken; NULL: out of memory) and add it. */
static int add_named(PbWalker *pb, OnnxInitializer *t, char *name) {
        if (!name) {
                initializer_done(t);
                return pb_oom(pb);
        }
        free(t->name);
        t->name = name;
        return add_tensor(pb, t);
}

/* ---- TensorProto ----------------------------------------------------------------------------- */

typedef struct TensorState {
        OnnxInitializer t;
        unsigned n_data;        /* data-bearing field occurrences, saturating at 2 */
        bool payload;           /* the last of them is one length-delimited payload */
        uint64_t data_start, data_length;
        int64_t n_entries;
        OnnxExternal ext;
} TensorState;

static int tensor_dims(PbWalker *w, const PbField *f, OnnxInitializer *t) {
        uint64_t v, end = f->start + f->length;

        do {
                if (f->wire == PB_LEN) {
                        if (w->r.pos >= end)
                                break;
                        int k = pb_read_varint(w, end, "packed dims", &v);
                        if (k < 0)
                                return k;
                } else
                        v = f->value;
                if (t->n_dims >= ONNX_MAX_DIMS)
                        return pb_error(w, f->offset, "more than %d dims", ONNX_MAX_DIMS);
                t->dims[t->n_dims++] = (int64_t) v;
        } while (f->wire == PB_LEN);
        return 0;
}

static int tensor_field(PbWalker *w, const PbField *f, void *userdata) {
        TensorState *s = userdata;
        unsigned elem = 0;

        switch (f->number) {
        case 1:
                return tensor_dims(w, f, &s->t);
        case 2:
                s->t.data_type = (int32_t) (uint32_t) f->value;
                return 0;
        case 4:
                elem = 4;
                break;
        case 10:
                elem = 8;
                break;
        case 5:
        case 6:
        case 7:
        case 9:
        case 11:
                break;
        case 8: {
                int k = pb_read_string(w, f, ONNX_MAX_NAME, &s->t.name);
                if (k >= 0)
                        pb_set_label(w, s->t.name);
                return k;
        }
        case 13:
                return onnx_external_entry(w, f, s->n_entries++, &s->ext);
        case 14:
                if (f->value > 1)
                        return pb_error(w, f->offset, "data_location %" PRIu64 " is neither DEFAULT (0) nor EXTERNAL (1)",
                                            f->value);
                s->t.external = f->value == 1;
                return 0;
        default:
                return 0;
        }

        /* A data-bearing field. */
        if (f->wire == PB_LEN && elem && f->length % elem != 0)
                return pb_error(w, f->offset, "packed %s length %" PRIu64 " is not a multiple of %u", f->label,
                                    f->length, elem);
        if (s->n_data < 2)
                s->n_data++;
        s->payload = f->wire == PB_LEN && f->number != 6;
        s->data_start = f->start;
        s->data_length = f->length;
        return 0;
}

static int walk_tensor(PbWalker *w, void *userdata) {
        TensorState *s = userdata;

        int k = pb_walk_fields(w, tensor_field, s);
        if (k < 0)
                return k;
        return s->t.external ? onnx_external_parse(w, &s->ext, &s->t) : 0;
}

/* Walk the TensorProto in @f's payload into *@ret (its name as the file has it, maybe NULL). */
static int read_tensor(PbWalker *w, const PbField *f, int64_t index, OnnxInitializer *ret) {
        TensorState s = {};

        int k = pb_descend(w, f, &tensor_type, index, walk_tensor, &s);
        onnx_external_done(&s.ext);
        if (k < 0) {
                initializer_done(&s.t);
                return k;
        }
        s.t.tensor_offset = f->start;
        s.t.tensor_length = f->length;
        if (s.n_data == 1 && s.payload && !s.t.external) {
                s.t.offset = s.data_start;
                s.t.length = s.data_length;
        } else {
                s.t.offset = f->start;
                s.t.length = f->length;
        }
        *ret = s.t;
        return 0;
}

/* ---- SparseTensorProto ----------------------------------------------------------------------- */

typedef struct SparseState {
        OnnxInitializer values, indices;
        bool have_values, have_indices;
} SparseState;

static int sparse_field(PbWalker *w, const PbField *f, void *userdata) {
        SparseState *s = userdata;

        if (f->number != 1 && f->number != 2)
                return 0;
        bool *have = f->number == 1 ? &s->have_values : &s->have_indices;
        if (*have)
                return pb_error(w, f->offset, "%s appears twice", f->label);
        *have = true;
        return read_tensor(w, f, -1, f->number == 1 ? &s->values : &s->indices);
}

/* Adds values and indices as "<base>.values" / "<base>.indices"; base NULL: values' own name. */
static int walk_sparse_with(PbWalker *w, SparseState *s, const char *base) {
        _cleanup_free_ char *own = NULL;
        int k = pb_walk_fields(w, sparse_field, s);
        if (k < 0)
                return k;
        if (!base) {
                /* A copy: adding values frees its name. */
                own = nonempty(s->values.name) ? strdup(s->values.name) : path_name(w, "");
                if (!own)
                        return pb_oom(w);
                base = own;
        }

        /* In file order, so the list stays sorted as it grows. */
        bool indices_first = s->have_indices && (!s->have_values || s->indices.offset < s->values.offset);
        for (int i = 0; i < 2; i++) {
                bool values = (i == 0) != indices_first;
                if (!(values ? s->have_values : s->have_indices))
                        continue;
                OnnxInitializer *t = values ? &s->values : &s->indices;
                k = add_named(w, t, strfmt("%s.%s", base, values ? "values" : "indices"));
                if (k < 0)
                        return k;
        }
        return 0;
}

typedef struct SparseArgs {
        const char *base;
} SparseArgs;

static int walk_sparse(PbWalker *w, void *userdata) {
        const SparseArgs *a = userdata;
        SparseState s = {};

        int k = walk_sparse_with(w, &s, a->base);
        initializer_done(&s.values);
        initializer_done(&s.indices);
        return k;
}

/* ---- GraphProto, NodeProto, AttributeProto, FunctionProto ------------------------------------ */

typedef struct NodeInfo {
        bool constant;
        const char *base;       /* Constant: its first output; else the node's name, output or op_type */
        OnnxQuantAttributes quant;      /* its "axis" and "block_size" */
} NodeInfo;

static int walk_graph(PbWalker *w, void *userdata);
static int walk_node(PbWalker *w, void *userdata);

typedef struct AttrState {
        const char *base;
        int64_t n_tensors, n_graphs, n_sparse;
        bool has_i;
        int64_t i;
} AttrState;

static int attribute_field(PbWalker *w, const PbField *f, void *userdata) {
        AttrState *s = userdata;
        OnnxInitializer t = {};
        int64_t i;
        int k;

        switch (f->number) {
        case 3:
                s->has_i = true;
                s->i = (int64_t) f->value;
                return 0;
        case 5:
                k = read_tensor(w, f, -1, &t);
                return k < 0 ? k : add_named(w, &t, strdup(s->base));
        case 10:
                i = s->n_tensors++;
                k = read_tensor(w, f, i, &t);
                return k < 0 ? k : add_named(w, &t, strfmt("%s.%" PRId64, s->base, i));
        case 6:
                return pb_descend(w, f, &graph_type, -1, walk_graph, NULL);
        case 11:
                return pb_descend(w, f, &graph_type, s->n_graphs++, walk_graph, NULL);
        case 22:
                return pb_descend(w, f, &sparse_type, -1, walk_sparse, &(SparseArgs) { s->base });
        case 23: {
                i = s->n_sparse++;
                _cleanup_free_ char *base = strfmt("%s.%" PRId64, s->base, i);
                if (!base)
                        return pb_oom(w);
                return pb_descend(w, f, &sparse_type, i, walk_sparse, &(SparseArgs) { base });
        }
        default:
                return 0;
        }
}

static int walk_attribute(PbWalker *w, void *userdata) {
        NodeInfo *node = userdata;
        static const uint32_t numbers[] = { 1 };
        _cleanup_free_ char *name = NULL, *base = NULL;

        int k = pb_scan_strings(w, numbers, &name, 1, ONNX_MAX_NAME);
        if (k < 0)
                return k;
        if (name && name[0])
                pb_set_label(w, name);
        if (node->constant)
                base = strdup(node->base);
        else if (name && name[0])
                base = strfmt("%s.%s", node->base, name);
        else
                base = strfmt("%s.attribute #%" PRId64, node->base, pb_frame(w)->index);
        if (!base)
                return pb_oom(w);
        AttrState s = { .base = base };
        k = pb_walk_fields(w, attribute_field, &s);
        if (k >= 0 && s.has_i)
                onnx_quant_attribute(&node->quant, name, s.i);
        return k;
}

typedef struct NodeState {
        NodeInfo info;
        int64_t n_attributes;
        const OnnxQuantOp *quant;       /* a quantizing node: its first ONNX_QUANT_INPUTS inputs are kept */
        size_t n_inputs;
        char *inputs[ONNX_QUANT_INPUTS];
} NodeState;

static int node_field(PbWalker *w, const PbField *f, void *userdata) {
        NodeState *s = userdata;

        if (f->number == 5)
                return pb_descend(w, f, &attribute_type, s->n_attributes++, walk_attribute, &s->info);
        if (f->number == 1 && s->quant && s->n_inputs < ONNX_QUANT_INPUTS)
                return pb_read_string(w, f, ONNX_MAX_NAME, &s->inputs[s->n_inputs++]);
        return 0;
}

/* Record a quantizing node's use of its data input (onnx.h). */
static int add_quant_use(PbWalker *pb, NodeState *s) {
        Walker *w = walker(pb);
        OnnxQuantUse u;
        int k = 0;

        onnx_quant_use_make(s->quant, s->inputs, s->n_inputs, &s->info.quant, &u);
        if (!u.data) {
                onnx_quant_use_done(&u);        /* its scale and zero point, if named */
                return 0;
        }
        size_t bytes = onnx_quant_use_name_bytes(&u);
        if (w->o->n_uses >= ONNX_MAX_INITIALIZERS)
                k = pb_error(pb, pb_frame(pb)->start, "more than %u quantizing nodes", ONNX_MAX_INITIALIZERS);
        else if (bytes > ONNX_MAX_NAME_BYTES - w->name_bytes)
                k = pb_error(pb, pb_frame(pb)->start, "names take more than %u bytes", ONNX_MAX_NAME_BYTES);
        else if (onnx_quant_uses_append(w->o, &w->uses_cap, &u) < 0)
                k = pb_oom(pb);
        if (k < 0)
                onnx_quant_use_done(&u);
        else
                w->name_bytes += bytes;
        return k;
}

static int walk_node(PbWalker *w, void *userdata) {
        enum { OUTPUT, NAME, OP_TYPE, DOMAIN, _N };
        static const uint32_t numbers[_N] = { 2, 3, 4, 7 };
        char *s[_N] = {};
        _cleanup_free_ char *fallback = NULL;
        NodeState state = {};
        (void) userdata;

        int k = pb_scan_strings(w, numbers, s, _N, ONNX_MAX_NAME);
        if (k >= 0) {
                const char *label = nonempty(s[NAME]) ? s[NAME] : nonempty(s[OUTPUT]) ? s[OUTPUT] : s[OP_TYPE];
                if (!nonempty(label))
                        label = fallback = path_name(w, "");
                if (!label)
                        k = pb_oom(w);
                else {
                        pb_set_label(w, label);
                        state.info.constant = s[OP_TYPE] && strcmp(s[OP_TYPE], "Constant") == 0 &&
                                              (!nonempty(s[DOMAIN]) || strcmp(s[DOMAIN], "ai.onnx") == 0);
                        state.info.base = state.info.constant && nonempty(s[OUTPUT]) ? s[OUTPUT] : label;
                        state.quant = onnx_quant_op(s[OP_TYPE], s[DOMAIN]);
                        k = pb_walk_fields(w, node_field, &state);
                        if (k >= 0 && state.quant)
                                k = add_quant_use(w, &state);
                }
        }
        for (size_t i = 0; i < _N; i++)
                free(s[i]);
        for (size_t i = 0; i < state.n_inputs; i++)
                free(state.inputs[i]);
        return k;
}

typedef struct GraphState {
        int64_t n_nodes, n_initializers, n_sparse;
} GraphState;

static int graph_field(PbWalker *w, const PbField *f, void *userdata) {
        GraphState *s = userdata;
        OnnxInitializer t = {};
        int64_t i;
        int k;

        switch (f->number) {
        case 1:
                return pb_descend(w, f, &node_type, s->n_nodes++, walk_node, NULL);
        case 5:
                i = s->n_initializers++;
                k = read_tensor(w, f, i, &t);
                if (k < 0)
                        return k;
                if (nonempty(t.name))
                        return add_tensor(w, &t);
                char suffix[48];
                snprintf(suffix, sizeof(suffix), ".initializer #%" PRId64, i);
                return add_named(w, &t, path_name(w, suffix));
        case 15:
                return pb_descend(w, f, &sparse_type, s->n_sparse++, walk_sparse, &(SparseArgs) {});
        default:
                return 0;
        }
}

static int walk_graph(PbWalker *w, void *userdata) {
        GraphState s = {};
        (void) userdata;
        return pb_walk_fields(w, graph_field, &s);
}

typedef struct FunctionState {
        NodeInfo info;
        int64_t n_nodes, n_attributes;
} FunctionState;

static int function_field(PbWalker *w, const PbField *f, void *userdata) {
        FunctionState *s = userdata;

        if (f->number == 7)
                return pb_descend(w, f, &node_type, s->n_nodes++, walk_node, NULL);
        if (f->number == 11)
                return pb_descend(w, f, &attribute_type, s->n_attributes++, walk_attribute, &s->info);
        return 0;
}

/* Its nodes, and the default values of its attributes (named "<function>.<attribute>"). */
static int walk_function(PbWalker *w, void *userdata) {
        static const uint32_t numbers[] = { 1 };
        _cleanup_free_ char *name = NULL;
        FunctionState s = {};
        (void) userdata;

        int k = pb_scan_strings(w, numbers, &name, 1, ONNX_MAX_NAME);
        if (k < 0)
                return k;
        if (nonempty(name))
                pb_set_label(w, name);
        else {
                free(name);
                if (!(name = path_name(w, "")))
                        return pb_oom(w);
        }
        s.info.base = name;
        return pb_walk_fields(w, function_field, &s);
}

static int training_field(PbWalker *w, const PbField *f, void *userdata) {
        (void) userdata;
        if (f->number == 1 || f->number == 2)
                return pb_descend(w, f, &graph_type, -1, walk_graph, NULL);
        return 0;
}

static int walk_training(PbWalker *w, void *userdata) {
        return pb_walk_fields(w, training_field, userdata);
}

typedef struct ModelState {
        int64_t n_graphs, n_training, n_functions;
} ModelState;

static int model_field(PbWalker *w, const PbField *f, void *userdata) {
        ModelState *s = userdata;

        switch (f->number) {
        case 1:
                walker(w)->o->ir_version = (int64_t) f->value;
                return 0;
        case 7:
                s->n_graphs++;
                return pb_descend(w, f, &graph_type, -1, walk_graph, NULL);
        case 20:
                return pb_descend(w, f, &training_type, s->n_training++, walk_training, NULL);
        case 25:
                return pb_descend(w, f, &function_type, s->n_functions++, walk_function, NULL);
        default:
                return 0;
        }
}

/* ---- the result ------------------------------------------------------------------------------ */

static int cmp_offset(const void *a, const void *b) {
        const OnnxInitializer *x = a, *y = b;
        return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* By name, then file order (the list is sorted by offset, so by address). */
static int cmp_name(const void *a, const void *b) {
        const OnnxInitializer *x = *(OnnxInitializer *const *) a, *y = *(OnnxInitializer *const *) b;
        int c = strcmp(x->name, y->name);
        return c ? c : (x > y) - (x < y);
}

static bool name_taken(OnnxInitializer *const *by_name, size_t n, const char *name) {
        size_t lo = 0, hi = n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(by_name[mid]->name, name);
                if (c == 0)
                        return true;
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return false;
}

/*
 * The second, third... occurrence of a name (in file order) becomes "<name>@<k>" with the
 * smallest k >= 2 that no tensor of the file is named. Names the file holds once stay as they
 * are. A made-up name cannot equal another base's (the last '@' splits it back uniquely), so
 * checking against the file's own names is enough. O(n log n) whatever the names.
 */
static int dedup_names(Walker *w) {
        Onnx *o = w->o;
        size_t n = o->n_inits;

        if (n < 2)
                return 0;
        _cleanup_free_ OnnxInitializer **by_name = calloc(n, sizeof(*by_name));
        _cleanup_free_ char **renamed = calloc(n, sizeof(*renamed));
        if (!by_name || !renamed)
                return pb_oom(&w->pb);
        for (size_t i = 0; i < n; i++)
                by_name[i] = &o->inits[i];
        qsort(by_name, n, sizeof(*by_name), cmp_name);

        int k = 0;
        uint64_t suffix = 2;    /* the next to try in this group of equal names */
        for (size_t i = 1; i < n && k >= 0; i++) {
                if (strcmp(by_name[i]->name, by_name[i - 1]->name) != 0) {
                        suffix = 2;
                        continue;
                }
                char *name;
                for (;; suffix++) {
                        name = strfmt("%s@%" PRIu64, by_name[i]->name, suffix);
                        if (!name || !name_taken(by_name, n, name))
                                break;
                        free(name);
                }
                suffix++;
                if (!name)
                        k = pb_oom(&w->pb);
                else if (strlen(name) - strlen(by_name[i]->name) > ONNX_MAX_NAME_BYTES - w->name_bytes) {
                        free(name);
                        k = tp_error(w->pb.err, -EBADMSG, "names take more than %u bytes", ONNX_MAX_NAME_BYTES);
                } else {
                        w->name_bytes += strlen(name) - strlen(by_name[i]->name);
                        renamed[by_name[i] - o->inits] = name;
                }
        }
        for (size_t i = 0; i < n; i++)
                if (renamed[i]) {
                        free(o->inits[i].name);
                        o->inits[i].name = renamed[i];
                }
        return k;
}

Onnx *onnx_free(Onnx *o) {
        if (!o)
                return NULL;
        for (size_t i = 0; i < o->n_inits; i++)
                initializer_done(&o->inits[i]);
        free(o->inits);
        onnx_quant_uses_free(o);
        free(o);
        return NULL;
}

int onnx_read(int fd, Onnx **ret, TpError *err) {
        struct stat st;
        ModelState m = {};

        if (fstat(fd, &st) < 0)
                return tp_error(err, negative_errno(), "cannot stat the model: %s", strerror(errno));
        if (!S_ISREG(st.st_mode))
                return tp_error(err, -EINVAL, "the model is not a regular file");

        _cleanup_(onnx_freep) Onnx *o = calloc(1, sizeof(Onnx));
        _cleanup_free_ Walker *w = calloc(1, sizeof(Walker));
        if (!o || !w)
                return tp_error(err, -ENOMEM, "out of memory");
        o->file_size = (uint64_t) st.st_size;
        w->o = o;
        int k = pb_walker_init(&w->pb, fd, o->file_size, &model_type, err);
        if (k < 0)
                return k;
        k = pb_walk_fields(&w->pb, model_field, &m);
        pb_walker_done(&w->pb);
        if (k < 0)
                return k;
        if (m.n_graphs == 0)
                return tp_error(err, -EBADMSG, "ModelProto: no graph (field 7) in %" PRIu64 " bytes", o->file_size);

        if (o->n_inits > 1)
                qsort(o->inits, o->n_inits, sizeof(OnnxInitializer), cmp_offset);
        onnx_quant_uses_sort(o);
        k = dedup_names(w);
        if (k < 0)
                return k;
        for (size_t i = 0; i < o->n_inits; i++)
                o->has_external |= o->inits[i].external;
        *ret = TAKE_PTR(o);
        return 0;
}

/* ---- data sizes ------------------------------------------------------------------------------ */

/* Bits per element of each TensorProto.DataType; 0: no fixed size (UNDEFINED, STRING). */
static const uint8_t type_bits[] = {
        [ONNX_TYPE_FLOAT] = 32,          [ONNX_TYPE_UINT8] = 8,           [ONNX_TYPE_INT8] = 8,
        [ONNX_TYPE_UINT16] = 16,         [ONNX_TYPE_INT16] = 16,          [ONNX_TYPE_INT32] = 32,
        [ONNX_TYPE_INT64] = 64,          [ONNX_TYPE_BOOL] = 8,            [ONNX_TYPE_FLOAT16] = 16,
        [ONNX_TYPE_DOUBLE] = 64,         [ONNX_TYPE_UINT32] = 32,         [ONNX_TYPE_UINT64] = 64,
        [ONNX_TYPE_COMPLEX64] = 64,      [ONNX_TYPE_COMPLEX128] = 128,    [ONNX_TYPE_BFLOAT16] = 16,
        [ONNX_TYPE_FLOAT8E4M3FN] = 8,    [ONNX_TYPE_FLOAT8E4M3FNUZ] = 8,  [ONNX_TYPE_FLOAT8E5M2] = 8,
        [ONNX_TYPE_FLOAT8E5M2FNUZ] = 8,  [ONNX_TYPE_UINT4] = 4,           [ONNX_TYPE_INT4] = 4,
        [ONNX_TYPE_FLOAT4E2M1] = 4,      [ONNX_TYPE_FLOAT8E8M0] = 8,      [ONNX_TYPE_UINT2] = 2,
        [ONNX_TYPE_INT2] = 2,
};

int onnx_initializer_bytes(const OnnxInitializer *t, uint64_t *ret) {
        unsigned bits = t->data_type >= 0 && (size_t) t->data_type < ELEMENTSOF(type_bits) ? type_bits[t->data_type] : 0;
        uint64_t n = 1;
        bool empty = false;

        if (bits == 0)
                return -EOPNOTSUPP;
        for (uint32_t i = 0; i < t->n_dims; i++) {
                if (t->dims[i] < 0)
                        return -EINVAL;
                empty |= t->dims[i] == 0;
        }
        /* A zero dim anywhere makes it empty, however large the others. */
        for (uint32_t i = 0; i < t->n_dims && !empty; i++) {
                if (n > (uint64_t) INT64_MAX / (uint64_t) t->dims[i])
                        return -EOVERFLOW;
                n *= (uint64_t) t->dims[i];
        }
        if (empty)
                n = 0;
        else if (bits >= 8) {
                if (n > (uint64_t) INT64_MAX / (bits / 8))
                        return -EOVERFLOW;
                n *= bits / 8;
        } else {
                unsigned per_byte = 8 / bits;
                n = n / per_byte + (n % per_byte != 0);
        }
        *ret = n;
        return 0;
}

/* ---- format detection ------------------------------------------------------------------------ */

static bool probe_varint(const uint8_t *p, size_t len, size_t *pos, uint64_t *ret) {
        uint64_t v = 0;
        for (size_t i = 0; i < 10 && *pos < len; i++) {
                uint8_t b = p[(*pos)++];
                v |= (uint64_t) (b & 0x7f) << (7 * i);
                if (!(b & 0x80)) {
                        *ret = v;
                        return true;
                }
        }
        return false;
}

bool onnx_probe(const uint8_t *head, size_t len) {
        /* ModelProto fields and their wire types (0: varint, 2: length-delimited). */
        static const struct {
                uint8_t number, wire;
        } model[] = { { 2, 2 }, { 3, 2 }, { 4, 2 }, { 5, 0 }, { 6, 2 }, { 7, 2 }, { 8, 2 },
                      { 14, 2 }, { 20, 2 }, { 25, 2 }, { 26, 2 } };
        size_t pos = 1;
        uint64_t v;

        if (!head || len < 3 || head[0] != 0x08)
                return false;
        if (!probe_varint(head, len, &pos, &v) || v < 1 || v > 100)
                return false;
        if (!probe_varint(head, len, &pos, &v))
                return false;
        for (size_t i = 0; i < ELEMENTSOF(model); i++)
                if (v == (uint64_t) (model[i].number << 3 | model[i].wire))
                        return true;
        return false;
}
