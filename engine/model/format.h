/* format.h — private to engine/model: the .wisp file format the loader (model.c) and the writer
 * (model_write.c) share: its layout, field offsets, byte-order helpers and the meta text check. */
#ifndef WISP_MODEL_FORMAT_H
#define WISP_MODEL_FORMAT_H

#include "model/model.h"

#include <string.h>

/*
 * On-disk layout of a .wisp file (format version 1). Every integer is
 * little-endian; offsets and sizes are in bytes from the start of the file.
 *
 *   header, 64 bytes at offset 0
 *     0  char magic[8]            "WISPMDL\0"
 *     8  u32  version             WISP_FORMAT_VERSION (1)
 *    12  u32  section_count       1 .. 256
 *    16  u64  file_size           must equal the real size of the file
 *    24  u64  section_table_off   64-byte aligned, >= 64
 *    32  u64  num_features        1 .. WISP_MAX_FEATURES; == weights' count
 *    40  f64  bias                finite
 *    48  u64  header_checksum     XXH64 (seed 0) of the 64 header bytes with
 *                                 bytes 48..55 zeroed, followed by the
 *                                 section_count * 64 bytes of the table
 *    56  8 bytes reserved         written as zero (covered by the checksum)
 *
 *   section table: section_count entries of 64 bytes at section_table_off
 *     0  char name[16]            NUL-terminated, NUL-padded, non-empty,
 *                                 printable ASCII; names are unique
 *    16  u32  dtype               0 f32, 1 f16, 2 i8 (weights), 16 text (bytes)
 *    20  f32  scale               i8: the dequantization scale (finite, > 0);
 *                                 1.0 for every other known section
 *    24  u64  offset              64-byte aligned
 *    32  u64  size                bytes; size == count * element size
 *    40  u64  count               elements
 *    48  u64  checksum            XXH64 (seed 0) of the section's `size` bytes
 *    56  8 bytes reserved         written as zero (covered by the header checksum)
 *
 *   sections (non-empty ones may not overlap each other, the header or the table):
 *     "meta"     required, dtype text: "key=value\n" lines; keys are
 *                [A-Za-z0-9_.-]+ and unique, values have no NUL or '\n';
 *                empty lines are allowed. No NUL byte anywhere.
 *     "weights"  required, dtype f32/f16/i8, count == num_features, every
 *                weight finite; weight(id) = w[id] (f16 widened; i8: scale * q).
 *     "columns"  optional, dtype text: the feature-column description (no NUL).
 *     any other name: ignored (forward compatible) after its bounds,
 *                alignment, overlap and checksum are checked.
 *
 * The writer puts the table right after the header, then meta and columns
 * (each 64-byte aligned), then the weights at a 4096-byte aligned offset
 * (page aligned: madvise and device copies work on whole pages); the file
 * ends with the last weight byte. Gaps are zero and not checksummed.
 */

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "wisp maps little-endian model files in place: a little-endian host is required"
#endif

#define HDR_SIZE        64u
#define ENTRY_SIZE      64u
#define SEC_ALIGN       64u
#define WEIGHTS_ALIGN   4096u
#define MAX_SECTIONS    256u
#define NAME_LEN        16u
#define DT_TEXT         16u
#define HUGE_PAGE       (2u << 20)

/* header field offsets */
enum { H_MAGIC = 0, H_VERSION = 8, H_COUNT = 12, H_FILE_SIZE = 16, H_TABLE = 24,
       H_NFEAT = 32, H_BIAS = 40, H_CHECKSUM = 48 };
/* section entry field offsets */
enum { E_NAME = 0, E_DTYPE = 16, E_SCALE = 20, E_OFFSET = 24, E_SIZE = 32, E_COUNT = 40,
       E_CHECKSUM = 48 };

typedef unsigned long long ull;

static inline uint32_t rd32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t rd64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline float    rdf32(const unsigned char *p) { float v; memcpy(&v, p, 4); return v; }
static inline double   rdf64(const unsigned char *p) { double v; memcpy(&v, p, 8); return v; }
static inline void wr32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void wr64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static inline void wrf32(unsigned char *p, float v) { memcpy(p, &v, 4); }
static inline void wrf64(unsigned char *p, double v) { memcpy(p, &v, 8); }

static inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static inline const char *errstr(int e, char *buf, size_t n)
{
    return strerror_r(e, buf, n);   /* GNU variant: returns the message */
}

static inline size_t dtype_size(int dtype)
{
    switch (dtype) {
    case WISP_F32: return 4;
    case WISP_F16: return 2;
    case WISP_I8:  return 1;
    default:       return 0;
    }
}

/* Validate meta text t[0..n) and build the key/value array: one allocation
 * holding (2k+1) pointers and the split strings. Failures return `status`
 * with a message prefixed by `who`. *kv_out may be NULL (validate only). (model_access.c) */
int wisp__model_parse_meta(const char *t, size_t n, int status, const char *who, char ***kv_out);

#endif /* WISP_MODEL_FORMAT_H */
