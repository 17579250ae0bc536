/* vw.h — private: what the Vowpal Wabbit files share (transform/vw_hash.c: hashing and options;
 * parse/vw_text.c: the text format): the options object behind wisp_vw and VW's hash of a name. */
#ifndef WISP_VW_H
#define WISP_VW_H

#include "core/core.h"

#include <stdbool.h>

#define VW_CONSTANT   11650396u
#define VW_FNV_PRIME  16777619u
#define VW_MAX_PAIRS  256

struct wisp_vw {
    int bits;
    uint32_t mask;
    uint32_t seed;
    uint32_t default_ns_hash;
    bool hash_all;
    bool noconstant;
    bool leave_duplicates;
    int npairs;
    unsigned char pairs[VW_MAX_PAIRS][2];
    bool needq[256];             /* namespace first bytes that appear in a pair */
    unsigned char qns[2 * VW_MAX_PAIRS]; int nqns;   /* those bytes, each once */
    bool drop[256];              /* --ignore / --keep: namespaces whose features are dropped */
    bool nolinear[256];          /* --ignore_linear: namespaces without linear terms */
    bool any_drop, any_nolinear;
    char ignore[257], keep[257], ignore_linear[257];
    char *options;               /* canonical option string */
};

/* VW's hash of a name under v's --hash option (hashstring, or murmur3 for --hash all). */
static inline uint32_t vw_hash(const wisp_vw *v, const char *s, size_t len, uint32_t seed)
{
    return v->hash_all ? wisp_vw_murmur3(s, len, seed) : wisp_vw_hashstring(s, len, seed);
}

#endif /* WISP_VW_H */
