/* columns.h — private: the parsed column description behind wisp_columns (columns.c), TensorFlow's
 * fingerprints inline for the transform's loops, and the row-at-a-time reference transform. */
#ifndef WISP_COLUMNS_H
#define WISP_COLUMNS_H

#include "core/core.h"
#include "transform/farmhash.h"

enum { WISP_NODE_NUMERIC = 0, WISP_NODE_BUCKETIZED, WISP_NODE_HASH, WISP_NODE_VOCAB,
       WISP_NODE_IDENTITY, WISP_NODE_CROSSED };
enum { WISP_NORM_NONE = 0, WISP_NORM_STANDARD = 1, WISP_NORM_AFFINE = 2 };

struct wisp_input {
    char *name;
    size_t name_len;
    int dtype;                   /* WISP_INPUT_* */
    bool sparse;
    bool has_default;            /* dense inputs: the value of a missing cell */
    float def_f;
    int64_t def_i;
    char *def_s;
    uint32_t def_len;
    bool need_fp;                /* a string input whose fingerprints a column uses */
};

/* A crossed column's key: a raw input, or a categorical node. */
struct wisp_cross_key {
    bool raw;
    uint32_t index;              /* input index (raw) or node index */
};

struct wisp_node {
    int kind;                    /* WISP_NODE_* */
    bool scalar;                 /* at most one id (or value) per row: every input it reads is dense */
    uint32_t input;              /* numeric, hash, vocabulary, identity */
    /* numeric: y = (x - a) / b (standard) or x * a + b (affine), in float32 */
    int norm;
    float norm_a, norm_b;
    /* bucketized */
    uint32_t source;             /* a numeric node */
    float *bounds;
    uint32_t nbounds;
    /* hash, identity, crossed: the bucket count; vocabulary: size + oov */
    uint64_t buckets;
    uint64_t magic_lo, magic_hi; /* 2^128 / buckets + 1, for h % buckets without a division */
    uint64_t pow2_mask;          /* buckets - 1 when buckets is a power of two (> 1), else 0 */
    /* vocabulary, identity */
    bool has_default;
    int64_t default_value;
    uint64_t num_oov;
    uint32_t vocab_n;
    int64_t *vocab_int;          /* int64 vocabularies */
    char **vocab_str;            /* string vocabularies */
    uint32_t *vocab_len;
    uint64_t *vocab_hash;        /* per entry: the key's hash (strings: Fingerprint64) */
    uint32_t *vocab_slots;       /* open addressing: entry + 1, 0 = empty */
    uint32_t vocab_mask;
    /* crossed: keys in TensorFlow's order (sparse ones first, then dense raw inputs) */
    struct wisp_cross_key *keys;
    uint32_t nkeys;
    uint64_t hash_key;
};

struct wisp_column {
    char *name;
    uint32_t node;
    uint64_t offset, size;
};

struct wisp_columns {
    atomic_int refs;
    struct wisp_input *inputs;  size_t ninputs;
    struct wisp_node *nodes;    size_t nnodes;
    struct wisp_column *cols;   size_t ncols;
    uint64_t num_features;
    uint32_t *name_slots;        /* input names, open addressing: index + 1 */
    uint32_t name_mask;
};

void wisp__columns_retain(wisp_columns *c);

/* TensorFlow's Fingerprint64 and FingerprintCat64 (farmhash.h): wisp__cat64
 * and wisp__fp64_short (at most 16 bytes) inline for the transform's loops;
 * wisp_fingerprint64/wisp_fingerprint_cat64 (farmhash.c) are the same, exported.
 * Longer strings call the exported function. */
static inline uint64_t wisp__fp64(const char *s, size_t len)
{
    return len <= 16 ? wisp__fp64_short(s, len) : wisp_fingerprint64(s, len);
}

/* Input name -> index (-1). */
long wisp__columns_find_input(const wisp_columns *c, const char *name, size_t len);

/* The reference transform, one row at a time (wisp_transform goes column by
 * column over chunks of rows); the tests check that both give the same batch. */
int  wisp__transform_rowwise(const wisp_raw *r, wisp_batch *b);

#endif /* WISP_COLUMNS_H */
