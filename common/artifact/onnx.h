/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * ONNX reader: walks the protobuf wire format of a ModelProto (no generated
 * code, no protobuf library) and lists every tensor whose data the file
 * holds, with the exact byte range of that data. This is what turns an ONNX
 * file into sites (common/artifact/artifact.h).
 *
 * Where tensors are found:
 *   ModelProto.graph(7), .training_info(20).{initialization,algorithm},
 *   .functions(25) →
 *   GraphProto.initializer(5)            named by TensorProto.name
 *   GraphProto.sparse_initializer(15)    values/indices named "<values.name>.values" / ".indices"
 *   GraphProto.node(1), FunctionProto.node(7) → NodeProto.attribute(5),
 *   FunctionProto.attribute_proto(11) → AttributeProto:
 *       .g(6), .graphs(11)               nested subgraphs, walked recursively
 *       .t(5), .tensors(10)              Constant node (domain "" or "ai.onnx"): named after the
 *       .sparse_tensor(22), (23)         node's first output; other nodes: "<node>.<attribute>",
 *                                        <node> being the node's name, else its first output,
 *                                        else its op_type; function attribute defaults:
 *                                        "<function>.<attribute>". The i-th element of a list
 *                                        gets ".<i>" appended, sparse ones ".values"/".indices".
 * A tensor without a usable name is named after where it is ("graph.initializer #3").
 * TensorProto.name of an attribute's tensor is ignored.
 * Names are unique across the file: a name the file holds once is kept;
 * the second, third... tensor of the same name (in file order) gets "@k"
 * appended, k >= 2 the smallest that no tensor of the file is named.
 *
 * The data range (offset, length) of a tensor is the payload of its one
 * data-bearing field when the data is one contiguous length-delimited
 * payload: raw_data, or a single packed float_data / int32_data /
 * int64_data / double_data / uint64_data. In every other case — a typed
 * field written unpacked (one tag per element) or split over several
 * packed chunks, string_data, several data fields, no data at all, or
 * external data — it is the whole TensorProto message. Ranges never
 * overlap (TensorProtos do not nest).
 *
 * Tensor data is never read into memory: raw_data and packed arrays are
 * skipped, not decoded. Memory is one reader buffer plus the list.
 *
 * Untrusted input. The wire format is walked by common/artifact/pbwire.h: every
 * length must fit inside its parent message (the top-level ModelProto is
 * the whole file); varints are at most 10 bytes and 64 bits (non-minimal
 * ones are accepted, as protobuf does); only wire types 0, 1, 2 and 5 are
 * accepted; field number 0 is refused; a field this reader looks at must
 * have one of its declared wire types (packed or not, for repeated
 * numbers); messages nest at most ONNX_MAX_DEPTH deep. On top of that,
 * -EBADMSG for: a packed float_data/double_data payload that is not a
 * whole number of elements, data_location other than 0 or 1, an
 * external_data entry breaking the rules below, a sparse tensor with two
 * values or two indices, a name (or op_type, domain, an external_data key
 * or value) holding a NUL byte, and every cap below.
 *
 * External data (data_location EXTERNAL): TensorProto.external_data is a
 * list of key/value strings (onnx/onnx.proto, docs/ExternalData.md). The
 * keys read are:
 *   "location"  required, not empty: the data file, a path relative to the
 *               model's directory, taken as it is (no check of '..',
 *               absolute paths or symlinks here: that is the job of whoever
 *               opens it);
 *   "offset"    where the data starts in that file; 0 when absent;
 *   "length"    how many bytes; absent: up to the end of the file;
 *   "checksum"  the SHA-1 of the whole file named by "location" (onnx.proto:
 *               "SHA1 digest of file specified in under 'location' key"),
 *               not of the tensor's range. The spec names no encoding; it is
 *               read as 40 hex digits (either case), what sha1sum and
 *               hashlib's hexdigest() print. onnx stores one when its
 *               caller passes it; neither onnx nor ONNX Runtime computes
 *               or checks it, nor does this reader (it does not open the file).
 * Numbers are plain decimal (common/base/parse.h: digits only, no sign,
 * no leading zeros, no spaces, not empty); offset, and offset + length,
 * must be at most INT64_MAX (the largest file offset). Each of the four
 * keys may appear once; a key without a value has the empty one. Any
 * other key ("basepath", ORT's "prepacked_*"...) and an entry without a
 * key are ignored, as onnx does (ONNX Runtime refuses most). Keys and
 * values are read (caps, no NUL) in every tensor, but these rules apply
 * to EXTERNAL ones only: like ONNX Runtime, this reader ignores a DEFAULT
 * tensor's external_data.
 *
 * Truncation: a ModelProto has no length of its own, so a file cut at a
 * top-level field boundary is a valid shorter message. It is accepted as
 * long as it still holds a graph (a ModelProto without graph(7) is
 * refused); every range reported lies inside the file. A cut anywhere
 * else makes some field run past the end of the file: -EBADMSG.
 *
 * Errors: -EBADMSG for malformed input or a cap exceeded, -ENOMEM, -EINVAL
 * for an fd that is not a regular file, or -errno from I/O. The message in
 * @err names where: "graph.initializer #3 ('conv1.weight') at offset 1234:
 * raw_data length 99999 runs past the end of its TensorProto (ends at
 * 2000)". "#n" counts occurrences of that field in its parent message,
 * from 0. An external_data rule names the entry's key and, quoted, its
 * value, at the offset of the entry: "graph.initializer #3 ('w') at offset
 * 1234: external_data \"offset\" '12x' is not a decimal number".
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "macro.h"

/* TensorProto.DataType (onnx/onnx.proto); a file may hold other values, kept as numbers. */
enum {
        ONNX_TYPE_UNDEFINED = 0,
        ONNX_TYPE_FLOAT = 1,
        ONNX_TYPE_UINT8 = 2,
        ONNX_TYPE_INT8 = 3,
        ONNX_TYPE_UINT16 = 4,
        ONNX_TYPE_INT16 = 5,
        ONNX_TYPE_INT32 = 6,
        ONNX_TYPE_INT64 = 7,
        ONNX_TYPE_STRING = 8,
        ONNX_TYPE_BOOL = 9,
        ONNX_TYPE_FLOAT16 = 10,
        ONNX_TYPE_DOUBLE = 11,
        ONNX_TYPE_UINT32 = 12,
        ONNX_TYPE_UINT64 = 13,
        ONNX_TYPE_COMPLEX64 = 14,
        ONNX_TYPE_COMPLEX128 = 15,
        ONNX_TYPE_BFLOAT16 = 16,
        ONNX_TYPE_FLOAT8E4M3FN = 17,
        ONNX_TYPE_FLOAT8E4M3FNUZ = 18,
        ONNX_TYPE_FLOAT8E5M2 = 19,
        ONNX_TYPE_FLOAT8E5M2FNUZ = 20,
        ONNX_TYPE_UINT4 = 21,
        ONNX_TYPE_INT4 = 22,
        ONNX_TYPE_FLOAT4E2M1 = 23,
        ONNX_TYPE_FLOAT8E8M0 = 24,
        ONNX_TYPE_UINT2 = 25,
        ONNX_TYPE_INT2 = 26,
};

#define ONNX_MAX_DIMS 16                        /* dims per tensor */
#define ONNX_MAX_DEPTH 32                       /* nested messages below the ModelProto */
#define ONNX_MAX_INITIALIZERS 65536u            /* tensors per file */
#define ONNX_MAX_NAME 4096                      /* bytes of one name, op_type, external_data key or value */
#define ONNX_MAX_NAME_BYTES (8u << 20)          /* bytes of all names (and locations) of one file together */

#define ONNX_SHA1_SIZE 20                       /* bytes of an external_data "checksum" */

typedef struct OnnxInitializer {
        char *name;             /* unique across the file (see above) */
        int32_t data_type;      /* TensorProto.DataType, 0 when absent */
        uint32_t n_dims;
        int64_t dims[ONNX_MAX_DIMS];
        uint64_t offset, length;        /* absolute byte range of the data (see above) */
        uint64_t tensor_offset, tensor_length;  /* the whole TensorProto message (its bytes, not its tag) */
        bool external;          /* data_location == EXTERNAL */
        /* external_data (see above); when !external: NULL, 0 and false. */
        char *location;         /* "location": non-NULL, not empty, exactly when external */
        uint64_t ext_offset;    /* "offset" in that file, 0 when absent; <= INT64_MAX */
        uint64_t ext_length;    /* "length" when ext_has_length (ext_offset + ext_length <= INT64_MAX), else 0 */
        bool ext_has_length;    /* false: the data runs from ext_offset to the end of the file */
        bool ext_has_checksum;
        uint8_t ext_checksum[ONNX_SHA1_SIZE];   /* "checksum": SHA-1 of the whole file; zeros when absent */
} OnnxInitializer;

/*
 * A quantized tensor as a node of the graph uses it. onnx_read() collects one for every node of
 * these op_types (domain "", "ai.onnx" or "com.microsoft"), which decide what its inputs are:
 *
 *   DequantizeLinear    data = input 0, scale 1, zero_point 2; axis: its attribute (default 1),
 *                       blocked when its block_size attribute is above 0 (opset 21)
 *   QLinearConv         data = input 3 (w), scale 4, zero_point 5; axis 0 (output channels)
 *   QLinearMatMul       data = input 3 (b), scale 4, zero_point 5; axis -1 (b's columns)
 *   ConvInteger         data = input 1 (w), no scale, zero_point 3; axis 0
 *   MatMulInteger       data = input 1 (b), no scale, zero_point 3; axis -1
 *
 * Names are the graph's value names: an initializer's TensorProto.name when the input is one
 * (onnx_quant_use_of() pairs them). An input the node leaves out or gives as "" is NULL.
 */
typedef struct OnnxQuantUse {
        char *data, *scale, *zero_point;
        int64_t axis;           /* as the node says: negative counts from the last dimension */
        bool blocked;
} OnnxQuantUse;

typedef struct Onnx {
        OnnxInitializer *inits; /* sorted by offset, non-overlapping */
        size_t n_inits;
        OnnxQuantUse *uses;     /* sorted by data name; at most ONNX_MAX_INITIALIZERS, their names within ONNX_MAX_NAME_BYTES */
        size_t n_uses;
        bool has_external;      /* some initializer keeps its data in a side file */
        int64_t ir_version;     /* 0 when absent */
        uint64_t file_size;
} Onnx;

/*
 * Walk the ONNX model in @fd (a regular file, read with pread: the fd's
 * offset is not used) and return its tensors in *@ret (owned by the
 * caller, free with onnx_free). @err may be NULL.
 */
_warn_unused_result_ int onnx_read(int fd, Onnx **ret, TpError *err);

/* Accepts NULL; returns NULL. */
Onnx *onnx_free(Onnx *o);

/*
 * How the graph uses the initializer @t as a quantized tensor: its use, when every node that
 * uses it so agrees (same scale, zero point, and axis once a negative one is counted from @t's last
 * dimension); NULL when none does, when uses disagree, or
 * when its use is blocked. O(log n_uses).
 */
const OnnxQuantUse *onnx_quant_use_of(const Onnx *o, const OnnxInitializer *t);
DEFINE_POINTER_CLEANUP(Onnx, onnx_free)

/*
 * The size in bytes of @t's data as raw_data or an external data file holds
 * it, from data_type and dims: the product of the dims (1 when there are
 * none: a scalar) times the element size; 4-bit types (INT4, UINT4,
 * FLOAT4E2M1) two to a byte and 2-bit ones (INT2, UINT2) four to a byte,
 * rounded up to a whole byte. Returns 0 and *@ret, -EOPNOTSUPP for a type
 * without a fixed element size (UNDEFINED, STRING, a value onnx.proto does
 * not list), -EINVAL for a negative dim, -EOVERFLOW when the size passes
 * INT64_MAX. Does not look at the data itself.
 */
_warn_unused_result_ int onnx_initializer_bytes(const OnnxInitializer *t, uint64_t *ret);

/*
 * Does this look like an ONNX ModelProto? A cheap check of the first
 * bytes for format detection, not a parse: the file must start with
 * ir_version (field 1, a varint from 1 to 100, which every protobuf
 * serializer writes first), followed — when @len reaches it — by another
 * ModelProto field with its declared wire type.
 */
bool onnx_probe(const uint8_t *head, size_t len);
