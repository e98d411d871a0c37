/* SPDX-License-Identifier: MIT */

/*
 * gguf-fixture: deterministic llama-architecture GGUF v3 models whose quantized bytes come from
 * ggml's own quantizer (ggml_quantize_chunk of a prebuilt libggml-base.so, through dlopen): a
 * base, a task with a LoRA folded into some tensors, or random bytes there (the worst case),
 * and the LoRA as llama.cpp's adapter GGUF. --help says it all. Memory is bounded by a chunk
 * of rows: the header goes first, then each tensor is generated, quantized and written a chunk
 * at a time (ggml quantizes row by row: the chunk size never changes the output).
 * Bytes are the same on every x86-64 machine; ggml's arm64 build quantizes K-quants slightly
 * differently (same floats in), so compare fixtures within one architecture.
 */

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "fixture-rng.h"
#include "ggml.h"
#include "macro.h"
#include "quant.h"

#define GGUF_DEFAULT_ALIGNMENT 32
#define WEIGHT_STD 0.02
#define CHUNK_FLOATS (1u << 20)
#define NAME_MAX_LEN 96
#define SPM_FIRST_PIECE 259 /* <unk> <s> </s> and the 256 byte tokens come first */

/* ---- ggml, through dlopen ------------------------------------------------------------ */

/*
 * As ggml/include/ggml.h declares them (llama.cpp of node-llama-cpp 3.21.1), enum ggml_type as
 * the int it is. No init call is needed: ggml_quantize_chunk runs ggml_quantize_init (tables of
 * IQ types only, not offered here), and libggml-base's reference quantizers need no backend.
 */
typedef size_t (*ggml_quantize_chunk_fn)(int type, const float *src, void *dst, int64_t start, int64_t nrows,
                                         int64_t n_per_row, const float *imatrix);
typedef size_t (*ggml_row_size_fn)(int type, int64_t ne);

typedef struct Ggml {
        void *handle;
        ggml_quantize_chunk_fn quantize_chunk;
        ggml_row_size_fn row_size;
} Ggml;

/* @path: libggml-base.so, or the directory holding it. */
static int ggml_open(Ggml *g, const char *path) {
        char buf[4096];
        struct stat st;

        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
                int k = snprintf(buf, sizeof buf, "%s/libggml-base.so", path);
                if (k < 0 || (size_t) k >= sizeof buf)
                        return -ENAMETOOLONG;
                path = buf;
        }
        g->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!g->handle) {
                fprintf(stderr, "gguf-fixture: dlopen %s: %s\n", path, dlerror());
                return -ENOENT;
        }
        g->quantize_chunk = (ggml_quantize_chunk_fn) dlsym(g->handle, "ggml_quantize_chunk");
        g->row_size = (ggml_row_size_fn) dlsym(g->handle, "ggml_row_size");
        if (!g->quantize_chunk || !g->row_size) {
                fprintf(stderr, "gguf-fixture: %s lacks ggml_quantize_chunk or ggml_row_size\n", path);
                return -ENOENT;
        }
        return 0;
}

/* ---- the model ----------------------------------------------------------------------- */

/* The tensors of the model in file order; names as llama.cpp spells them. */
enum {
        KIND_TOKEN_EMBD, KIND_ATTN_NORM, KIND_ATTN_Q, KIND_ATTN_K, KIND_ATTN_V, KIND_ATTN_OUTPUT,
        KIND_FFN_NORM, KIND_FFN_GATE, KIND_FFN_UP, KIND_FFN_DOWN, KIND_OUTPUT_NORM, KIND_OUTPUT, KIND_MAX,
};
#define KIND_LAYER_FIRST KIND_ATTN_NORM
#define KIND_LAYER_LAST KIND_FFN_DOWN

static const char *const kind_names[KIND_MAX] = {
        "token_embd", "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
        "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "output_norm", "output",
};

enum { MODE_BASE, MODE_LORA, MODE_RANDOM };

typedef struct Options {
        const char *ggml_path, *output, *adapter, *name, *targets;
        int type, mode, adapter_type;
        uint64_t dim, ff, layers, vocab, heads, heads_kv, ctx, alignment, chunk_rows;
        uint64_t seed, task_seed, rank;
        double alpha, delta_rel;
} Options;

typedef struct Tensor Tensor;
struct Tensor {
        char name[NAME_MAX_LEN];
        int kind;
        uint32_t n_dims, type;
        uint64_t ne[2]; /* ne[0] = row length (inputs), ne[1] = rows (outputs) */
        uint64_t offset; /* from the start of the data section */
        uint64_t bytes;
        bool target;
        const Tensor *source; /* adapter tensors: the model tensor they adapt */
};

static uint64_t align_up(uint64_t x, uint64_t a) {
        return (x + a - 1) / a * a;
}

static bool is_norm(int kind) {
        return kind == KIND_ATTN_NORM || kind == KIND_FFN_NORM || kind == KIND_OUTPUT_NORM;
}

/* Shapes as src/models/llama.cpp creates them: {n_embd, n_vocab}, {n_embd, n_embd_k_gqa}, ... */
static int tensor_init(Tensor *t, const Options *o, int kind, int layer) {
        int k = layer < 0 ? snprintf(t->name, sizeof t->name, "%s.weight", kind_names[kind])
                          : snprintf(t->name, sizeof t->name, "blk.%d.%s.weight", layer, kind_names[kind]);
        if (k < 0 || (size_t) k >= sizeof t->name)
                return -ENAMETOOLONG;
        t->kind = kind;
        t->type = is_norm(kind) ? GGML_TYPE_F32 : (uint32_t) o->type;
        t->ne[0] = kind == KIND_FFN_DOWN ? o->ff : o->dim;
        t->ne[1] = is_norm(kind) ? 1
                   : kind == KIND_TOKEN_EMBD || kind == KIND_OUTPUT ? o->vocab
                   : kind == KIND_ATTN_K || kind == KIND_ATTN_V ? o->dim / o->heads * o->heads_kv
                   : kind == KIND_FFN_GATE || kind == KIND_FFN_UP ? o->ff
                   : o->dim;
        t->n_dims = t->ne[1] == 1 ? 1 : 2;
        return ggml_tensor_bytes(t->type, t->ne[0] * t->ne[1], &t->bytes);
}

/* Every tensor of the model, in file order, with its data offset. */
static int model_tensors(const Options *o, Tensor **ret, size_t *ret_n) {
        size_t per_layer = KIND_LAYER_LAST - KIND_LAYER_FIRST + 1, n = 3 + per_layer * o->layers;
        _cleanup_free_ Tensor *t = calloc(n, sizeof *t);
        uint64_t off = 0;
        int r;

        if (!t)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                bool in_layer = i > 0 && i < n - 2;
                int kind = i == 0 ? KIND_TOKEN_EMBD : i == n - 2 ? KIND_OUTPUT_NORM : i == n - 1 ? KIND_OUTPUT
                                                    : KIND_LAYER_FIRST + (int) ((i - 1) % per_layer);
                if ((r = tensor_init(&t[i], o, kind, in_layer ? (int) ((i - 1) / per_layer) : -1)) < 0)
                        return r;
                t[i].offset = off;
                off = align_up(off + t[i].bytes, o->alignment);
        }
        *ret = TAKE_PTR(t);
        *ret_n = n;
        return 0;
}

/* Mark the tensors named by the comma-separated --targets (kinds, or full names). */
static int mark_targets(const Options *o, Tensor *t, size_t n) {
        _cleanup_free_ char *list = strdup(o->targets);
        char *save = NULL;

        if (!list)
                return -ENOMEM;
        for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                size_t matched = 0, len = strlen(tok);
                for (size_t i = 0; i < n; i++) {
                        bool full = strncmp(t[i].name, tok, len) == 0 &&
                                    (t[i].name[len] == 0 || strcmp(t[i].name + len, ".weight") == 0);
                        if (!full && strcmp(kind_names[t[i].kind], tok) != 0)
                                continue;
                        if (o->mode == MODE_LORA && t[i].n_dims != 2) {
                                fprintf(stderr, "gguf-fixture: --targets: %s is 1-D, a LoRA needs a matrix\n",
                                        t[i].name);
                                return -EINVAL;
                        }
                        t[i].target = true;
                        matched++;
                }
                if (matched == 0) {
                        fprintf(stderr, "gguf-fixture: --targets: '%s' names no tensor (kinds: attn_q, attn_k, "
                                "attn_v, attn_output, ffn_gate, ffn_up, ffn_down, token_embd, output; or full "
                                "names such as blk.0.attn_q.weight)\n", tok);
                        return -EINVAL;
                }
        }
        return 0;
}

/* ---- GGUF output ----------------------------------------------------------------------- */

typedef struct Out {
        FILE *f; /* NULL: only count bytes and keys */
        uint64_t written, n_kv;
} Out;

/* GGUF is little-endian, as every machine this runs on (x86-64, aarch64). */
static void out_bytes(Out *out, const void *p, size_t n) {
        out->written += n;
        if (out->f && n > 0)
                fwrite(p, 1, n, out->f); /* errors: ferror() at the end */
}

#define out_u32(out, v) out_bytes(out, &(uint32_t) { v }, 4)
#define out_u64(out, v) out_bytes(out, &(uint64_t) { v }, 8)

static void out_str(Out *out, const char *s) {
        out_u64(out, strlen(s));
        out_bytes(out, s, strlen(s));
}

static void out_pad(Out *out, uint64_t alignment) {
        static const uint8_t zeros[256];

        while (out->written % alignment != 0) {
                uint64_t k = alignment - out->written % alignment;
                out_bytes(out, zeros, k < sizeof zeros ? k : sizeof zeros);
        }
}

enum { GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9 };

/* A key, its value type and the value's bytes (none for strings and arrays: they follow). */
static void kv(Out *out, const char *key, uint32_t type, const void *v, size_t n) {
        out->n_kv++;
        out_str(out, key);
        out_u32(out, type);
        out_bytes(out, v, n);
}
#define kv_u32(out, key, v) kv(out, key, GGUF_U32, &(uint32_t) { v }, 4)
#define kv_f32(out, key, v) kv(out, key, GGUF_F32, &(float) { v }, 4)
#define kv_bool(out, key, v) kv(out, key, GGUF_BOOL, &(uint8_t) { v }, 1)

static void kv_str(Out *out, const char *key, const char *v) {
        kv(out, key, GGUF_STRING, NULL, 0);
        out_str(out, v);
}

static void kv_array(Out *out, const char *key, uint32_t item_type, uint64_t n) {
        kv(out, key, GGUF_ARRAY, NULL, 0);
        out_u32(out, item_type);
        out_u64(out, n);
}

/* ---- metadata -------------------------------------------------------------------------- */

/* llama_ftype for general.file_type: the "pure" variant (_S for K-quants), every tensor one type. */
static const uint32_t file_types[GGML_TYPE_COUNT] = {
        [GGML_TYPE_F16] = 1, [GGML_TYPE_Q4_0] = 2, [GGML_TYPE_Q4_1] = 3, [GGML_TYPE_Q8_0] = 7,
        [GGML_TYPE_Q5_0] = 8, [GGML_TYPE_Q5_1] = 9, [GGML_TYPE_Q2_K] = 10, [GGML_TYPE_Q3_K] = 11,
        [GGML_TYPE_Q4_K] = 14, [GGML_TYPE_Q5_K] = 16, [GGML_TYPE_Q6_K] = 18, [GGML_TYPE_BF16] = 32,
};

/* SentencePiece token @i: <unk> <s> </s>, <0x00>..<0xFF>, then "▁a" "a" "▁b" ... "▁aa" ... */
static void spm_token(uint64_t i, char buf[static 64]) {
        static const char *const special[] = { "<unk>", "<s>", "</s>" };
        char word[16];
        size_t n = 0, p = 0;

        if (i < 3) {
                snprintf(buf, 64, "%s", special[i]);
                return;
        }
        if (i < SPM_FIRST_PIECE) {
                snprintf(buf, 64, "<0x%02X>", (unsigned) (i - 3));
                return;
        }
        uint64_t j = i - SPM_FIRST_PIECE;
        for (uint64_t k = j / 2 + 1; k > 0 && n < sizeof word; k = (k - 1) / 26)
                word[n++] = (char) ('a' + (k - 1) % 26);
        if (j % 2 == 0) {
                memcpy(buf, "\xe2\x96\x81", 3); /* U+2581, SentencePiece's word start */
                p = 3;
        }
        while (n > 0)
                buf[p++] = word[--n];
        buf[p] = 0;
}

enum { TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3, TOKEN_BYTE = 6 };

static void write_tokenizer(Out *out, const Options *o) {
        char piece[64];

        kv_str(out, "tokenizer.ggml.model", "llama");
        kv_array(out, "tokenizer.ggml.tokens", GGUF_STRING, o->vocab);
        for (uint64_t i = 0; i < o->vocab; i++) {
                spm_token(i, piece);
                out_str(out, piece);
        }
        kv_array(out, "tokenizer.ggml.scores", GGUF_F32, o->vocab);
        for (uint64_t i = 0; i < o->vocab; i++) {
                float s = i < SPM_FIRST_PIECE ? 0.0f : -(float) (i - SPM_FIRST_PIECE);
                out_bytes(out, &s, sizeof s);
        }
        kv_array(out, "tokenizer.ggml.token_type", GGUF_I32, o->vocab);
        for (uint64_t i = 0; i < o->vocab; i++) {
                int32_t tt = i == 0 ? TOKEN_UNKNOWN : i < 3 ? TOKEN_CONTROL : i < SPM_FIRST_PIECE ? TOKEN_BYTE : TOKEN_NORMAL;
                out_bytes(out, &tt, sizeof tt);
        }
        kv_u32(out, "tokenizer.ggml.bos_token_id", 1);
        kv_u32(out, "tokenizer.ggml.eos_token_id", 2);
        kv_u32(out, "tokenizer.ggml.unknown_token_id", 0);
        kv_bool(out, "tokenizer.ggml.add_bos_token", true);
        kv_bool(out, "tokenizer.ggml.add_eos_token", false);
}

static void write_kvs(Out *out, const Options *o, bool adapter) {
        kv_str(out, "general.architecture", "llama");
        kv_str(out, "general.type", adapter ? "adapter" : "model");
        kv_str(out, "general.name", o->name);
        if (o->alignment != GGUF_DEFAULT_ALIGNMENT)
                kv_u32(out, "general.alignment", (uint32_t) o->alignment);
        if (adapter) {
                kv_str(out, "adapter.type", "lora");
                kv_f32(out, "adapter.lora.alpha", (float) o->alpha);
                return;
        }
        kv_u32(out, "llama.block_count", (uint32_t) o->layers);
        kv_u32(out, "llama.context_length", (uint32_t) o->ctx);
        kv_u32(out, "llama.embedding_length", (uint32_t) o->dim);
        kv_u32(out, "llama.feed_forward_length", (uint32_t) o->ff);
        kv_u32(out, "llama.attention.head_count", (uint32_t) o->heads);
        kv_u32(out, "llama.attention.head_count_kv", (uint32_t) o->heads_kv);
        kv_f32(out, "llama.rope.freq_base", 10000.0f);
        kv_f32(out, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
        kv_u32(out, "llama.rope.dimension_count", (uint32_t) (o->dim / o->heads));
        kv_u32(out, "llama.vocab_size", (uint32_t) o->vocab);
        kv_u32(out, "general.file_type", file_types[o->type]);
        write_tokenizer(out, o);
        kv_u32(out, "general.quantization_version", 2);
}

/* ---- tensor data ----------------------------------------------------------------------- */

/*
 * The LoRA factors of a target in one allocation: A [rank][in] ~ N(0, 1/in) (Kaiming-like),
 * then B [out][rank] ~ N(0, sb²) with sb such that (alpha/rank)·B·A has an RMS of --delta-rel
 * times the base weights' (WEIGHT_STD).
 */
static float *lora_make(const Options *o, const Tensor *t) {
        uint64_t in = t->ne[0], out = t->ne[1], r = o->rank;
        double sa = 1.0 / sqrt((double) in);
        double sb = o->delta_rel * WEIGHT_STD / (o->alpha / (double) r * sqrt((double) r) * sa);
        float *ab = malloc((r * in + out * r) * sizeof(float));
        Rng rng;

        if (!ab)
                return NULL;
        rng_init(&rng, o->task_seed, "lora_a", t->name);
        for (uint64_t i = 0; i < r * in; i++)
                ab[i] = (float) (sa * rng_normal(&rng));
        rng_init(&rng, o->task_seed, "lora_b", t->name);
        for (uint64_t i = 0; i < out * r; i++)
                ab[r * in + i] = (float) (sb * rng_normal(&rng));
        return ab;
}

/* The next @nrows rows (from @row0) of the float weights of @t, the LoRA folded in when given. */
static void tensor_rows(const Options *o, const Tensor *t, Rng *rng, const float *lora, uint64_t row0,
                        uint64_t nrows, float *dst) {
        uint64_t in = t->ne[0];
        double scale = o->alpha / (double) o->rank;

        for (uint64_t row = 0; row < nrows; row++) {
                float *w = dst + row * in;
                if (is_norm(t->kind)) {
                        for (uint64_t i = 0; i < in; i++)
                                w[i] = (float) (1.0 + 0.05 * rng_normal(rng));
                        continue;
                }
                double row_std = WEIGHT_STD * (0.75 + 0.5 * rng_uniform(rng)); /* rows differ in scale */
                for (uint64_t i = 0; i < in; i++)
                        w[i] = (float) (row_std * rng_normal(rng));
                if (!lora)
                        continue;
                const float *a = lora, *b = lora + o->rank * in + (row0 + row) * o->rank;
                for (uint64_t i = 0; i < in; i++) {
                        double acc = 0;
                        for (uint64_t k = 0; k < o->rank; k++)
                                acc += (double) b[k] * a[k * in + i];
                        w[i] = (float) ((double) w[i] + scale * acc);
                }
        }
}

static int write_tensor(Out *out, const Options *o, const Ggml *g, const Tensor *t) {
        uint64_t in = t->ne[0], rows = t->ne[1], row_bytes = t->bytes / rows;
        uint64_t chunk = o->chunk_rows ? o->chunk_rows : (CHUNK_FLOATS / in ? CHUNK_FLOATS / in : 1);
        _cleanup_free_ float *src = NULL, *lora = NULL;
        _cleanup_free_ uint8_t *dst = NULL;
        Rng rng;

        chunk = chunk < rows ? chunk : rows;
        if ((uint64_t) g->row_size((int) t->type, (int64_t) in) != row_bytes) {
                fprintf(stderr, "gguf-fixture: %s: ggml's row size %zu != common/artifact/ggml.c's %" PRIu64 "\n",
                        t->name, g->row_size((int) t->type, (int64_t) in), row_bytes);
                return -EPROTO;
        }
        if (!(dst = malloc(chunk * row_bytes)) || !(src = malloc(chunk * in * sizeof(float))))
                return -ENOMEM;

        if (t->target && o->mode == MODE_RANDOM) {
                rng_init(&rng, o->task_seed, "random", t->name);
                for (uint64_t left = t->bytes, n; left > 0; left -= n) {
                        n = left < chunk * row_bytes ? left : chunk * row_bytes;
                        for (uint64_t i = 0; i < n; i++) /* a byte per draw: chunking cannot matter */
                                dst[i] = (uint8_t) (rng_next(&rng) >> 56);
                        out_bytes(out, dst, n);
                }
                return 0;
        }
        if (t->target && o->mode == MODE_LORA && !(lora = lora_make(o, t)))
                return -ENOMEM;
        rng_init(&rng, o->seed, "weights", t->name);
        for (uint64_t row0 = 0; row0 < rows; row0 += chunk) {
                uint64_t n = rows - row0 < chunk ? rows - row0 : chunk;
                tensor_rows(o, t, &rng, lora, row0, n, src);
                size_t k = g->quantize_chunk((int) t->type, src, dst, 0, (int64_t) n, (int64_t) in, NULL);
                if (k != n * row_bytes)
                        return -EPROTO;
                out_bytes(out, dst, k);
        }
        return 0;
}

/*
 * The adapter's tensor data, F32: lora_a = A [rank][in] and lora_b = B [out][rank], so that
 * llama.cpp adds (alpha/rank)·B·(A·x). token_embd is looked up by row instead (llama-graph.cpp,
 * build_inp_embd): lora_a = B [vocab][rank] and lora_b = Aᵀ [dim][rank].
 */
/* @n floats as the adapter's type: F32 as they are, F16 and BF16 rounded to nearest even. */
static void out_factor(Out *out, const Options *o, const float *p, size_t n) {
        uint8_t buf[2048];

        if (o->adapter_type == GGML_TYPE_F32) {
                out_bytes(out, p, n * sizeof(float));
                return;
        }
        for (size_t done = 0; done < n;) {
                size_t k = n - done < 1024 ? n - done : 1024;
                out_bytes(out, buf, quantize_rows((uint32_t) o->adapter_type, p + done, buf, k, 1));
                done += k;
        }
}

static int write_adapter_tensor(Out *out, const Options *o, const Tensor *t, bool b) {
        uint64_t in = t->ne[0], rows = t->ne[1], rank = o->rank;
        _cleanup_free_ float *lora = lora_make(o, t);

        if (!lora)
                return -ENOMEM;
        if (t->kind == KIND_TOKEN_EMBD && b) {
                for (uint64_t i = 0; i < in; i++)
                        for (uint64_t k = 0; k < rank; k++)
                                out_factor(out, o, &lora[k * in + i], 1);
        } else if (t->kind == KIND_TOKEN_EMBD || b)
                out_factor(out, o, lora + rank * in, rows * rank);
        else
                out_factor(out, o, lora, rank * in);
        return 0;
}

/* ---- files ----------------------------------------------------------------------------- */

static void write_header(Out *out, const Options *o, const Tensor *t, size_t n, bool adapter) {
        Out count = {};

        write_kvs(&count, o, adapter); /* the header says how many keys follow */
        out_bytes(out, "GGUF", 4);
        out_u32(out, 3);
        out_u64(out, n);
        out_u64(out, count.n_kv);
        write_kvs(out, o, adapter);
        for (size_t i = 0; i < n; i++) {
                char name[NAME_MAX_LEN + 16];
                snprintf(name, sizeof name, "%s%s", t[i].name, adapter ? (i % 2 ? ".lora_b" : ".lora_a") : "");
                out_str(out, name);
                out_u32(out, t[i].n_dims);
                for (uint32_t d = 0; d < t[i].n_dims; d++)
                        out_u64(out, t[i].ne[d]);
                out_u32(out, t[i].type);
                out_u64(out, t[i].offset);
        }
        out_pad(out, o->alignment);
}

/* Write the tensors @t (an adapter's when @adapter) to @path through @path.tmp and a rename. */
static int write_file(const char *path, const Options *o, const Ggml *g, const Tensor *t, size_t n, bool adapter) {
        AtomicFile f = ATOMIC_FILE_NULL;
        Out out = {};
        int r = atomic_file_open(path, &f), fd;

        f.no_sync = true; /* test fixtures: atomic, not durable */
        fd = r < 0 ? -1 : fcntl(f.fd, F_DUPFD_CLOEXEC, 3);
        if (r < 0 || fd < 0 || !(out.f = fdopen(fd, "w"))) {
                r = r < 0 ? r : negative_errno();
                safe_close(fd);
                fprintf(stderr, "gguf-fixture: %s: %s\n", path, atomic_file_strerror(r));
                atomic_file_abort(&f);
                return r;
        }
        write_header(&out, o, t, n, adapter);
        uint64_t data_start = out.written;
        for (size_t i = 0; r >= 0 && i < n; i++) {
                if (out.written - data_start != t[i].offset)
                        r = -EPROTO;
                else if (adapter)
                        r = write_adapter_tensor(&out, o, t[i].source, i % 2);
                else
                        r = write_tensor(&out, o, g, &t[i]);
                out_pad(&out, o->alignment);
        }
        if (r >= 0 && (fflush(out.f) != 0 || ferror(out.f)))
                r = negative_errno();
        if (fclose(out.f) != 0 && r >= 0)
                r = negative_errno();
        if (r >= 0)
                r = atomic_file_commit(&f);
        if (r < 0)
                fprintf(stderr, "gguf-fixture: writing %s: %s\n", path, strerror(-r));
        atomic_file_abort(&f);
        return r;
}

/* The adapter's tensors: for each target <name>.lora_a [in, rank], <name>.lora_b [rank, out]. */
static int adapter_tensors(const Options *o, const Tensor *t, size_t n, Tensor **ret, size_t *ret_n) {
        size_t m = 0, j = 0;
        uint64_t off = 0;

        for (size_t i = 0; i < n; i++)
                m += t[i].target ? 2 : 0;
        Tensor *a = calloc(m ? m : 1, sizeof *a);
        if (!a)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                for (int b = 0; t[i].target && b < 2; b++, j++) {
                        a[j] = t[i];
                        a[j].source = &t[i];
                        a[j].type = (uint32_t) o->adapter_type;
                        /* token_embd is looked up by token: lora_a [rank, vocab], lora_b [rank, dim]. */
                        bool embd = t[i].kind == KIND_TOKEN_EMBD;
                        a[j].ne[0] = embd || b ? o->rank : t[i].ne[0];
                        a[j].ne[1] = embd ? t[i].ne[!b] : b ? t[i].ne[1] : o->rank;
                        a[j].n_dims = a[j].ne[1] == 1 ? 1 : 2;
                        a[j].bytes = a[j].ne[0] * a[j].ne[1] * (o->adapter_type == GGML_TYPE_F32 ? 4 : 2);
                        a[j].offset = off;
                        off = align_up(off + a[j].bytes, o->alignment);
                }
        *ret = a;
        *ret_n = m;
        return 0;
}

/* ---- command line ---------------------------------------------------------------------- */

static void help(void) {
        printf("Usage: gguf-fixture [OPTIONS] -o OUT.gguf\n\n"
               "A deterministic llama-architecture GGUF v3 model quantized by ggml's own quantizer\n"
               "(ggml_quantize_chunk of a prebuilt libggml-base.so: tests/tools/npm-ggml.sh installs it).\n"
               "Same arguments, same bytes. Norms are F32, every other tensor has --type.\n\n"
               "  --ggml PATH         libggml-base.so or its directory (default $TASKPATCH_GGML_LIB)\n"
               "  --type T            f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K (q4_0);\n"
               "                      --dim and --ff multiples of 256 for K-quants, else of 32\n"
               "  --dim N --ff N --layers N --vocab N --heads N --heads-kv N --ctx N   llama.* sizes\n"
               "                      (256, 768, 2, 512, 4, = heads, 2048); the SentencePiece vocabulary\n"
               "                      starts with <unk> <s> </s> and 256 byte tokens: --vocab >= 259\n"
               "  --alignment N       general.alignment, a power of two (32: the default, not written)\n"
               "  --name S            general.name (taskpatch-fixture); base and task must agree\n"
               "  --seed N            base weights (1): 0.02·s·N(0,1), s in [0.75,1.25) per row; norms\n"
               "                      1 + 0.05·N(0,1)\n"
               "  --mode base|lora|random  base: quantize W; lora: W + (alpha/rank)·B·A on --targets;\n"
               "                      random: random bytes in the --targets tensors (the worst case).\n"
               "                      Every tensor that is no target is byte-identical to base.\n"
               "  --targets LIST      comma-separated kinds for every layer (attn_q attn_k attn_v attn_output\n"
               "                      ffn_gate ffn_up ffn_down token_embd output) or full tensor names\n"
               "                      (blk.1.attn_q.weight); attn_q,attn_v\n"
               "  --rank N --alpha X  LoRA rank (8) and alpha (16); scale alpha/rank as in llama.cpp\n"
               "  --delta-rel X       RMS of (alpha/rank)·B·A over the weights' 0.02 (0.1); A ~ N(0,1/in)\n"
               "  --task-seed N       seed of A, B and the random bytes (7)\n"
               "  --adapter FILE      lora: also write the LoRA as a llama.cpp adapter GGUF (F32\n"
               "                      <name>.lora_a ne=[in,rank], <name>.lora_b ne=[rank,out], alpha)\n"
               "  --adapter-type T    its factors' type: f32 (default), f16 or bf16 (rounded to nearest even;\n"
               "                      the model -o folds the F32 values either way)\n"
               "  --chunk-rows N      rows per quantizer call (~4 MiB of floats): bounds memory only\n"
               "  -o, --output FILE   the model (written to a temporary beside it, then renamed)\n\n"
               "Example: gguf-fixture --ggml DIR --type q4_K --layers 4 -o base.gguf\n"
               "         gguf-fixture --ggml DIR --type q4_K --layers 4 --mode lora --targets attn_q,attn_v\n"
               "             --rank 8 --alpha 16 --task-seed 7 --adapter lora.gguf -o task.gguf\n");
}

/* A long option: a string, an integer in [min, max], a number >= 0, a ggml type or a word. */
typedef struct OptionSpec {
        const char *name;
        enum { OPT_STR, OPT_U64, OPT_F64, OPT_TYPE, OPT_WORD } kind;
        void *v;
        uint64_t min, max;
        const char *const *words;
} OptionSpec;

static int set_option(const OptionSpec *spec, const char *arg) {
        char *end = NULL;

        errno = 0;
        switch (spec->kind) {
        case OPT_STR:
                *(const char **) spec->v = arg;
                return 0;
        case OPT_U64: {
                unsigned long long v = strtoull(arg, &end, 10);
                if (errno == 0 && end != arg && *end == 0 && arg[0] != '-' && v >= spec->min && v <= spec->max) {
                        *(uint64_t *) spec->v = v;
                        return 0;
                }
                fprintf(stderr, "gguf-fixture: --%s: '%s' is not an integer in [%" PRIu64 ", %" PRIu64 "]\n",
                        spec->name, arg, spec->min, spec->max);
                return -EINVAL;
        }
        case OPT_F64: {
                double v = strtod(arg, &end);
                if (errno == 0 && end != arg && *end == 0 && isfinite(v) && v >= 0) {
                        *(double *) spec->v = v;
                        return 0;
                }
                fprintf(stderr, "gguf-fixture: --%s: '%s' is not a number >= 0\n", spec->name, arg);
                return -EINVAL;
        }
        case OPT_TYPE: {
                int t = ggml_type_from_name(arg);
                if (t == GGML_TYPE_F32 || (t > 0 && t < GGML_TYPE_COUNT && file_types[t])) {
                        *(int *) spec->v = t;
                        return 0;
                }
                fprintf(stderr, "gguf-fixture: --type: '%s' is none of f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 "
                        "q8_0 q2_K q3_K q4_K q5_K q6_K\n", arg);
                return -EINVAL;
        }
        case OPT_WORD:
                for (int i = 0; spec->words[i]; i++)
                        if (strcmp(spec->words[i], arg) == 0) {
                                *(int *) spec->v = i;
                                return 0;
                        }
                fprintf(stderr, "gguf-fixture: --%s: '%s' is not a choice (try --help)\n", spec->name, arg);
                return -EINVAL;
        }
        abort();
}

static int check_options(Options *o) {
        const GgmlType *gt = ggml_type((uint32_t) o->type);
        const char *why = NULL;

        if (o->heads_kv == 0)
                o->heads_kv = o->heads;
        if (!o->output)
                why = "-o OUT.gguf is required";
        else if (!o->ggml_path || !*o->ggml_path)
                why = "no ggml library: give --ggml PATH or set TASKPATCH_GGML_LIB (tests/tools/npm-ggml.sh prints it)";
        else if (o->dim % gt->block_size || o->ff % gt->block_size)
                why = "--dim and --ff must be multiples of the type's block size (32, 256 for K-quants)";
        else if (o->dim % o->heads || o->heads % o->heads_kv || (o->dim / o->heads) % 2)
                why = "--heads must divide --dim into even head sizes, --heads-kv must divide --heads";
        else if (o->vocab < SPM_FIRST_PIECE)
                why = "--vocab must be at least 259 (<unk> <s> </s> and 256 byte tokens)";
        else if (o->alignment & (o->alignment - 1))
                why = "--alignment must be a power of two";
        else if (o->mode == MODE_LORA && (o->rank > o->dim || o->rank > o->ff || o->alpha <= 0))
                why = "--rank must not exceed the matrix sizes, --alpha must be > 0";
        else if (o->adapter && o->mode != MODE_LORA)
                why = "--adapter needs --mode lora";
        else if (o->adapter_type != GGML_TYPE_F32 && o->adapter_type != GGML_TYPE_F16 && o->adapter_type != GGML_TYPE_BF16)
                why = "--adapter-type is f32, f16 or bf16";
        if (why) {
                fprintf(stderr, "gguf-fixture: %s (try --help)\n", why);
                return -EINVAL;
        }
        return 0;
}

static int parse_args(int argc, char **argv, Options *o) {
        static const char *const modes[] = { "base", "lora", "random", NULL };
        const uint64_t big = UINT64_C(1) << 20;
        const OptionSpec specs[] = {
                { "ggml", OPT_STR, &o->ggml_path }, { "name", OPT_STR, &o->name },
                { "targets", OPT_STR, &o->targets }, { "adapter", OPT_STR, &o->adapter },
                { "output", OPT_STR, &o->output }, { "type", OPT_TYPE, &o->type },
                { "adapter-type", OPT_TYPE, &o->adapter_type },
                { "mode", OPT_WORD, &o->mode, .words = modes },
                { "alpha", OPT_F64, &o->alpha }, { "delta-rel", OPT_F64, &o->delta_rel },
                { "dim", OPT_U64, &o->dim, 2, big }, { "ff", OPT_U64, &o->ff, 1, big },
                { "layers", OPT_U64, &o->layers, 1, 4096 }, { "vocab", OPT_U64, &o->vocab, 1, big },
                { "heads", OPT_U64, &o->heads, 1, 4096 }, { "heads-kv", OPT_U64, &o->heads_kv, 1, 4096 },
                { "ctx", OPT_U64, &o->ctx, 1, UINT32_MAX }, { "alignment", OPT_U64, &o->alignment, 1, 1 << 16 },
                { "seed", OPT_U64, &o->seed, 0, UINT64_MAX }, { "task-seed", OPT_U64, &o->task_seed, 0, UINT64_MAX },
                { "rank", OPT_U64, &o->rank, 1, 4096 }, { "chunk-rows", OPT_U64, &o->chunk_rows, 1, big },
        };
        struct option longopts[ELEMENTSOF(specs) + 2] = {};
        int c, r = 0;

        for (size_t i = 0; i < ELEMENTSOF(specs); i++)
                longopts[i] = (struct option) { specs[i].name, required_argument, NULL, 0x100 + (int) i };
        longopts[ELEMENTSOF(specs)] = (struct option) { "help", no_argument, NULL, 'h' };
        while (r >= 0 && (c = getopt_long(argc, argv, "o:h", longopts, NULL)) >= 0) {
                if (c == 'h') {
                        help();
                        exit(EXIT_SUCCESS);
                } else if (c == 'o')
                        o->output = optarg;
                else if (c >= 0x100 && c < 0x100 + (int) ELEMENTSOF(specs))
                        r = set_option(&specs[c - 0x100], optarg);
                else
                        return -EINVAL;
        }
        if (r >= 0 && optind < argc) {
                fprintf(stderr, "gguf-fixture: unexpected argument '%s' (try --help)\n", argv[optind]);
                r = -EINVAL;
        }
        return r < 0 ? r : check_options(o);
}

int main(int argc, char **argv) {
        Options o = {
                .ggml_path = getenv("TASKPATCH_GGML_LIB"), .name = "taskpatch-fixture", .targets = "attn_q,attn_v",
                .type = GGML_TYPE_Q4_0, .mode = MODE_BASE, .dim = 256, .ff = 768, .layers = 2, .vocab = 512,
                .heads = 4, .ctx = 2048, .alignment = GGUF_DEFAULT_ALIGNMENT, .seed = 1, .task_seed = 7,
                .rank = 8, .alpha = 16, .delta_rel = 0.1, .adapter_type = GGML_TYPE_F32,
        };
        _cleanup_free_ Tensor *tensors = NULL, *adapter = NULL;
        Ggml g = {};
        size_t n = 0, m = 0;
        int r;

        if (parse_args(argc, argv, &o) < 0)
                return 2;
        if (ggml_open(&g, o.ggml_path) < 0)
                return 1;
        if ((r = model_tensors(&o, &tensors, &n)) < 0) {
                fprintf(stderr, "gguf-fixture: model layout: %s\n", strerror(-r));
                return 1;
        }
        if (o.mode != MODE_BASE && mark_targets(&o, tensors, n) < 0)
                return 2;
        r = write_file(o.output, &o, &g, tensors, n, false);
        if (r >= 0 && o.adapter && (r = adapter_tensors(&o, tensors, n, &adapter, &m)) >= 0)
                r = write_file(o.adapter, &o, &g, adapter, m, true);
        dlclose(g.handle);
        return r < 0 ? 1 : 0;
}
