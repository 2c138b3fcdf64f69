/* rope.h — partial rotary position embedding, NeoX (rotate_half) pairing.
 *
 * Only the first rd dims of a head rotate; dims rd..hd pass through. Pair m
 * (m < rd/2) is (x[m], x[m + rd/2]) rotated by angle pos * theta^(-2m/rd)
 * (spec §3.5 step 4). For text input Qwen3.5's interleaved mRoPE reduces to
 * exactly this, since the temporal, height and width positions are equal. */
#ifndef NX_KERNELS_ROPE_H
#define NX_KERNELS_ROPE_H

#include <stdint.h>

/* cos_sin receives rd floats for position pos: [cos_0..cos_{rd/2-1}, sin_0..]. The
 * angles are computed in double so a position's table does not depend on how
 * tokens were batched. */
void kn_rope_table(float *cos_sin, int64_t pos, int rd, double theta);

/* Rotates the first rd dims of one head vector x in place. */
void kn_rope_apply(float *x, const float *cos_sin, int rd);

#endif
