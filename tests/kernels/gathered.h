/* gathered.h — the check test_quant.c (affine) and test_fpq.c (mxfp4, nvfp4)
 * run on products over gathered rows (kernels/quant.h:
 * kn_matmul_qx_gathered), with whichever kernel set is active. */
#ifndef NX_TESTS_KERNELS_GATHERED_H
#define NX_TESTS_KERNELS_GATHERED_H

#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "test.h"

#define GATHERED_MAX 37   /* rows a check gathers at most */

/* kn_gather_rows(w, b) is b / the packed row's bytes where w has packed rows
 * and the active set is a SIMD one, else 0; where it gathers, runs of 1 to
 * GATHERED_MAX of w's rows (rows apart, in descending order, one row again
 * and again, the first and last rows) give the bits want holds for them
 * (want: kn_matmul_qx_rows over all of w's rows in place with qx, which has
 * one row), and nothing past n is written. Says what failed under `what`;
 * returns 1 where it gathered, 0 where it rightly did not. */
static int gathered_rows_match(const kn_mat *w, const kn_qx *qx, const float *want, const char *what) {
    const int64_t rb = kn_lanes_packed_row_bytes(w), rows = w->rows;
    const int gathers = w->packed != NULL && kn_isa_active() != KN_ISA_SCALAR;
    CHECKF(kn_gather_rows(w, (size_t)(10 * rb + rb - 1)) == (gathers ? 10 : 0), "%s: kn_gather_rows", what);
    if (!gathers) return 0;
    unsigned char *buf = aligned_alloc(64, (size_t)(GATHERED_MAX * rb));
    int32_t idx[GATHERED_MAX];
    float got[GATHERED_MAX + 1];
    int ok = 1;
    for (int n = 1; n <= GATHERED_MAX; n += 3)
        for (int order = 0; order < 4; order++) {
            for (int i = 0; i < n; i++)
                idx[i] = (int32_t)(order == 0   ? (i * 7 + n) % rows             /* rows apart, wrapping */
                                   : order == 1 ? rows - 1 - (i * 3) % rows      /* descending */
                                   : order == 2 ? n % rows                       /* one row again */
                                                : (i % 2 ? rows - 1 : 0));       /* first and last */
            for (int i = 0; i <= n; i++) got[i] = NAN;
            kn_matmul_qx_gathered(w, qx, idx, n, buf, got);
            for (int i = 0; i < n; i++) ok &= memcmp(&got[i], &want[idx[i]], sizeof *got) == 0;
            ok &= isnan(got[n]);
        }
    CHECKF(ok, "%s: gathered rows differ from the rows in place (or spill)", what);
    free(buf);
    return 1;
}

#endif
