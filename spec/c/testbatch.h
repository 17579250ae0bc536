/* testbatch.h — the C tests' batch comparison: everything a caller can see of two batches, bit for bit. */
#ifndef WISP_TESTBATCH_H
#define WISP_TESTBATCH_H

#include "internal.h"

#include <stdio.h>
#include <string.h>

/* Everything a caller can see of two batches, equal bit for bit? Says where not. */
static inline int same_batches(const wisp_batch *a, const wisp_batch *b, char *why, size_t whylen)
{
    size_t rows = wisp_batch_rows(a);
    if (rows != wisp_batch_rows(b) || wisp_batch_nnz(a) != wisp_batch_nnz(b) || wisp_batch_nvals(a) != wisp_batch_nvals(b)) {
        snprintf(why, whylen, "rows %zu/%zu nnz %zu/%zu nvals %zu/%zu", rows, wisp_batch_rows(b), wisp_batch_nnz(a),
                 wisp_batch_nnz(b), wisp_batch_nvals(a), wisp_batch_nvals(b));
        return 0;
    }
    if (a->value_mode != b->value_mode) { snprintf(why, whylen, "value modes differ"); return 0; }
    if (memcmp(wisp_batch_row_ptr(a), wisp_batch_row_ptr(b), (rows + 1) * 4)) { snprintf(why, whylen, "row_ptr"); return 0; }
    if (wisp_batch_nnz(a) && memcmp(wisp_batch_ids(a), wisp_batch_ids(b), wisp_batch_nnz(a) * 4)) {
        snprintf(why, whylen, "ids");
        return 0;
    }
    const uint32_t *va = wisp_batch_val_ptr(a), *vb = wisp_batch_val_ptr(b);
    if (!va != !vb || (va && memcmp(va, vb, (rows + 1) * 4))) { snprintf(why, whylen, "val_ptr"); return 0; }
    if (wisp_batch_nvals(a) && memcmp(wisp_batch_vals(a), wisp_batch_vals(b), wisp_batch_nvals(a) * 4)) {
        snprintf(why, whylen, "values (bits)");
        return 0;
    }
    if (wisp_batch_bad_count(a) != wisp_batch_bad_count(b)) { snprintf(why, whylen, "bad-row counts"); return 0; }
    for (size_t i = 0; i < wisp_batch_bad_count(a); i++) {
        size_t ra, rb;
        uint64_t la, lb;
        const char *ma, *mb;
        wisp_batch_bad_row(a, i, &ra, &la, &ma);
        wisp_batch_bad_row(b, i, &rb, &lb, &mb);
        if (ra != rb || la != lb || strcmp(ma, mb)) {
            snprintf(why, whylen, "bad row %zu: '%s' vs '%s'", i, ma, mb);
            return 0;
        }
    }
    return 1;
}

#endif
