/* spec_auto.c — choosing the draft length per round (--draft auto).
 *
 * A round with k drafts emits on average E(k) = 1 + sum_{i<k} prod_{j<=i} alpha_j
 * tokens, where alpha_j is the measured probability that draft j is accepted
 * once the drafts before it were, and costs C(k) seconds, measured per k
 * (verify of k+1 tokens, k-1 recursive head steps, the commit). The policy
 * picks the k with the most tokens per second, k = 0 being plain decoding
 * (the drafter's entries are then deferred, so a round costs one target
 * step).
 *
 * What it must not be fooled by:
 *   - The first round of a session runs cold (first touches, caches): it is
 *     not timed, or one slow round could rank its k below the rest for good.
 *   - A draft position never reached has no acceptance of its own: it is
 *     taken to be that of the position before it (conditional acceptances
 *     along a block are alike, or rise), not a fixed prior that would keep
 *     the policy from ever trying the longer block. That assumption counts
 *     as one round in the mean of the first 1 / SPEC_ALPHA_EMA, then an EMA
 *     follows the text.
 *   - Timings drift with the machine and acceptances with the text: every
 *     SPEC_CHECK_EVERY drafted rounds one round runs a neighbour of the best
 *     k (one more, then one fewer), so no k stays judged by an old estimate:
 *     a timing of a k not timed for SPEC_STALE rounds replaces its estimate
 *     (averaged in, one slow round took ~350 rounds to wash out).
 *     Else a cost is the mean of its first 1 / SPEC_COST_EMA timings, then
 *     an EMA.
 *   - A useless head: while plain decoding pays more, a drafted round is
 *     still tried now and then so the acceptance estimate follows the text:
 *     after SPEC_PROBE_EVERY plain rounds, then twice as long after every
 *     probe that did not pay (up to SPEC_PROBE_MAX), so it costs next to
 *     nothing.
 * Before these rules, on the 0.8B-shape q8 fixture (acceptance ~0.6 a
 * position), the policy settled on one draft a round after its cold first
 * round: 59 tok/s against 66-67 with two; 0.94x of --draft 2 over 5 paired
 * runs, and now 1.00x. q4: 1.09x the old policy's speed; the bundled model
 * greedy (acceptance 0.97), 1.045x (bench/RESULTS.md). */
#include "spec/spec.h"

#define SPEC_COST_EMA 0.2       /* weight of the newest timing                  */
#define SPEC_ALPHA_EMA 0.05     /* weight of the newest accept/reject: a window
                                   of ~40 rounds (at 0.2 one run of rejections
                                   sent a head of 0.6 back to plain decoding) */
#define SPEC_PROBE_EVERY 16     /* plain rounds before the first drafted probe  */
#define SPEC_PROBE_MAX 512      /* longest wait between probes                  */
#define SPEC_CHECK_EVERY 32     /* drafted rounds between neighbour re-timings  */
#define SPEC_STALE 8            /* rounds without a timing that make k's stale  */
#define SPEC_ALPHA_PRIOR 0.5    /* acceptance assumed before any measurement    */

void spec_auto_init(spec_auto *au) { *au = (spec_auto){.probe_every = SPEC_PROBE_EVERY, .check_side = 1}; }

/* The weight of the n-th observation: the mean of the first 1 / ema, then
 * an EMA of weight ema. */
static double mean_then_ema(int n, double ema) { return 1.0 / n > ema ? 1.0 / n : ema; }

/* The acceptance of draft i as far as it is known (above). */
static double alpha_of(const spec_auto *au, int i) {
    while (i > 0 && !au->seen[i]) i--;
    return au->seen[i] ? au->alpha[i] : SPEC_ALPHA_PRIOR;
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

int spec_auto_choose(spec_auto *au, int k_max, int k_start) {
    int any = 0;
    for (int k = 0; k <= k_max; k++) any |= au->measured[k];
    if (!any) return k_start;
    int best = 0;
    double best_rate = 1.0 / cost_of(au, 0, k_max), expect = 1.0, chain = 1.0;
    for (int k = 1; k <= k_max; k++) {
        chain *= alpha_of(au, k - 1);
        expect += chain;
        double rate = expect / cost_of(au, k, k_max);
        if (rate > best_rate) {
            best_rate = rate;
            best = k;
        }
    }
    if (best > 0) {
        au->probe_every = SPEC_PROBE_EVERY;
        au->since_probe = 0;
        if (++au->since_check >= SPEC_CHECK_EVERY) {
            au->since_check = 0;
            au->check_side = -au->check_side;
            for (int side = au->check_side, n = 0; n < 2; side = -side, n++)
                if (best + side >= 1 && best + side <= k_max) return best + side;
        }
        return best;
    }
    if (++au->since_probe >= au->probe_every) {
        au->since_probe = 0;
        if (au->probe_every < SPEC_PROBE_MAX) au->probe_every *= 2;
        return 1;
    }
    return 0;
}

void spec_auto_observe(spec_auto *au, int k, int a, double seconds) {
    if (au->rounds++ > 0) {
        double w = mean_then_ema(++au->measured[k], SPEC_COST_EMA);
        if (au->rounds - au->timed_at[k] > SPEC_STALE) w = 1.0;   /* stale: replaced */
        au->cost[k] += w * (seconds - au->cost[k]);
        au->timed_at[k] = au->rounds;
    }
    for (int i = 0; i < k && i <= a; i++) {
        if (!au->seen[i]) au->alpha[i] = alpha_of(au, i);   /* what was assumed counts as one round */
        const double w = mean_then_ema(++au->seen[i] + 1, SPEC_ALPHA_EMA);
        au->alpha[i] += w * ((i < a ? 1.0 : 0.0) - au->alpha[i]);
    }
}
