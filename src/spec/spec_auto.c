/* spec_auto.c — choosing the draft length per round (--draft auto).
 *
 * A round with k drafts emits on average E(k) = 1 + sum_{i<k} prod_{j<=i} alpha_j
 * tokens, where alpha_j is the measured probability that draft j is accepted
 * once the drafts before it were, and costs C(k) seconds, measured per k
 * (verify of k+1 tokens, k-1 recursive head steps, the commit). The policy
 * picks the k with the most tokens per second, k = 0 being plain decoding
 * (the drafter's entries are then deferred, so a round costs one target
 * step). While plain decoding pays more, a drafted round is still tried now
 * and then so the acceptance estimate follows the text: after
 * SPEC_PROBE_EVERY plain rounds, then twice as long after every probe that
 * did not pay (up to SPEC_PROBE_MAX), so a useless head costs next to
 * nothing. */
#include "spec/spec.h"

#define SPEC_EMA 0.2            /* weight of the newest observation           */
#define SPEC_PROBE_EVERY 16     /* plain rounds before the first drafted probe */
#define SPEC_PROBE_MAX 512      /* longest wait between probes                 */
#define SPEC_ALPHA_PRIOR 0.5    /* acceptance assumed before any measurement   */

void spec_auto_init(nx_spec *s) {
    for (int i = 0; i < NX_SPEC_MAX_DRAFT; i++) s->au.alpha[i] = SPEC_ALPHA_PRIOR;
    s->au.probe_every = SPEC_PROBE_EVERY;
}

/* Cost of a round with k drafts: measured, or extrapolated from the nearest
 * measured k assuming each extra token in the block adds 25% of a step. */
static double cost_of(const spec_auto *au, int k, int k_max) {
    if (au->measured[k]) return au->cost[k];
    for (int dist = 1; dist <= k_max; dist++)
        for (int sgn = -1; sgn <= 1; sgn += 2) {
            int j = k + sgn * dist;
            if (j >= 0 && j <= k_max && au->measured[j]) return au->cost[j] * (1.0 + 0.25 * k) / (1.0 + 0.25 * j);
        }
    return 1.0 + 0.25 * k;
}

int spec_auto_choose(nx_spec *s) {
    spec_auto *au = &s->au;
    if (!s->d) return 0;
    /* nothing measured yet: start from the drafter's own block size */
    int any = 0;
    for (int k = 0; k <= s->k_max; k++) any |= au->measured[k];
    if (!any) return s->d->block_size - 1 < s->k_max ? s->d->block_size - 1 : s->k_max;
    int best = 0;
    double best_rate = 1.0 / cost_of(au, 0, s->k_max), expect = 1.0, chain = 1.0;
    for (int k = 1; k <= s->k_max; k++) {
        chain *= au->alpha[k - 1];
        expect += chain;
        double rate = expect / cost_of(au, k, s->k_max);
        if (rate > best_rate) {
            best_rate = rate;
            best = k;
        }
    }
    if (best > 0) {
        au->probe_every = SPEC_PROBE_EVERY;
        au->since_probe = 0;
        return best;
    }
    if (++au->since_probe >= au->probe_every) {
        au->since_probe = 0;
        if (au->probe_every < SPEC_PROBE_MAX) au->probe_every *= 2;
        return 1;
    }
    return 0;
}

void spec_auto_observe(nx_spec *s, int k, int a, double seconds) {
    spec_auto *au = &s->au;
    au->cost[k] = au->measured[k] ? (1 - SPEC_EMA) * au->cost[k] + SPEC_EMA * seconds : seconds;
    au->measured[k]++;
    for (int i = 0; i < k && i <= a; i++) {
        double hit = i < a ? 1.0 : 0.0;
        au->alpha[i] = (1 - SPEC_EMA) * au->alpha[i] + SPEC_EMA * hit;
    }
}
