/* rope.c — partial NeoX RoPE (see rope.h). */
#include "kernels/rope.h"

#include <assert.h>
#include <math.h>

void kn_rope_table(float *cos_sin, int64_t pos, int rd, double theta) {
    assert(rd >= 2 && rd % 2 == 0);
    int half = rd / 2;
    for (int m = 0; m < half; m++) {
        double inv_freq = pow(theta, -2.0 * m / rd);
        double angle = (double)pos * inv_freq;
        cos_sin[m] = (float)cos(angle);
        cos_sin[half + m] = (float)sin(angle);
    }
}

void kn_rope_apply(float *x, const float *cos_sin, int rd) {
    int half = rd / 2;
    for (int m = 0; m < half; m++) {
        float c = cos_sin[m], s = cos_sin[half + m];
        float a = x[m], b = x[m + half];
        x[m] = a * c - b * s;
        x[m + half] = b * c + a * s;
    }
}
