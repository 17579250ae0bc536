/* farmhash.c — TensorFlow's string fingerprints, exported: Fingerprint64 and FingerprintCat64
 * (Fingerprint64 is FarmHash's farmhashna::Hash64). */
/*
 * The functions themselves are in farmhash.h, shared with the CPU
 * transform's inline short-string path (transform/columns.h) and the CUDA transform
 * (kernels/transform.cu); that header says where they come from and how
 * they are checked against TensorFlow and libfarmhash.
 *
 * Debian's libfarmhash-dev is not linked: it exports a C++ API only
 * (namespace util, mangled names), so a C library would need a C++ shim,
 * and the call could not be inlined into the transform's inner loop.
 */
#include "core/core.h"
#include "transform/columns.h"
#include "transform/farmhash.h"

uint64_t wisp_fingerprint64(const void *data, size_t len)
{
    return wisp__fingerprint64(data, len);
}

uint64_t wisp_fingerprint_cat64(uint64_t fp1, uint64_t fp2)
{
    return wisp__cat64(fp1, fp2);
}
