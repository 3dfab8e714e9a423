/* elastic.c - the clock elasticity of a claim's work, learned online (see elastic.h). */
#include "elastic.h"

#include <string.h>

void hk_elastic_init(hk_elastic *e, uint32_t prior_milli, int learn) {
    memset(e, 0, sizeof *e);
    e->phi_milli = prior_milli > 1000 ? 1000 : prior_milli;
    e->learn = learn != 0;
    e->xbar = 1.0;
}

static double clamp(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

static double absd(double v) { return v < 0 ? -v : v; }

/* phi from the slope k of d on u at mean clock xbar (elastic.h); clamped to [0, 1]. */
static double phi_of(double k, double xbar) {
    double den = 1.0 - k * (xbar - 1.0);
    if (den <= 0.05) return k > 0 ? 1.0 : 0.0; /* a slope steeper than any phi explains */
    return clamp(k / den, 0.0, 1.0);
}

int hk_elastic_observe(hk_elastic *e, uint64_t sig, int64_t t_ns, uint32_t x_milli) {
    if (!e->learn || sig == 0 || x_milli == 0 || t_ns < HK_ELASTIC_MIN_NS) return 0;
    double x = x_milli / 1000.0, t = (double)t_ns;
    hk_elastic_ref *r = &e->ref[(sig ^ (sig >> 31)) % HK_ELASTIC_REFS];
    if (r->sig != sig || r->rejected >= HK_ELASTIC_REF_RESET) { /* a new signature, or one that moved */
        r->sig = sig;
        r->x = x;
        r->t = t;
        r->n = 1;
        r->rejected = 0;
        return 0;
    }
    double u = x - r->x, d = t / r->t - 1.0, bound = HK_ELASTIC_SLOPE_MAX * absd(u) + HK_ELASTIC_NOISE;
    if (d < -bound) { /* faster than the clock explains: the means were inflated (contention never speeds
                         work up); start them over from this batch */
        r->x = x;
        r->t = t;
        r->n = 1;
        r->rejected = 0;
        e->rejected++;
        return 0;
    }
    if (d > bound) { /* slower: another tenant's work in its window, or a stall */
        r->rejected++;
        e->rejected++;
        return 0;
    }
    r->rejected = 0;
    r->x += (x - r->x) * HK_ELASTIC_REF_ALPHA;
    r->t += (t - r->t) * HK_ELASTIC_REF_ALPHA;
    r->n++;
    double keep = 1.0 - 1.0 / HK_ELASTIC_MEMORY;
    e->sxy = e->sxy * keep + u * d;
    e->sxx = e->sxx * keep + u * u;
    e->xbar += (x - e->xbar) / HK_ELASTIC_MEMORY;
    e->accepted++;
    if (e->sxx >= HK_ELASTIC_MIN_SXX) {
        /* d = k u with t falling as the clock rises: x = f_full / f grows as f falls, so k >= 0 */
        double target = phi_of(e->sxy / e->sxx, e->xbar) * 1000.0;
        double step = clamp(target - (double)e->phi_milli, -HK_ELASTIC_STEP_MILLI, HK_ELASTIC_STEP_MILLI);
        e->phi_milli = (uint32_t)(clamp((double)e->phi_milli + step, 0.0, 1000.0) + 0.5);
        e->fitted = 1;
    }
    return 1;
}

int hk_power_bound(uint32_t p_now_mw, uint32_t p_idle_mw, uint32_t p_limit_mw, uint32_t duty_pct, int prev) {
    if (!p_now_mw || !p_limit_mw || duty_pct > 100) return prev;
    if (duty_pct < HK_POWER_MIN_DUTY_PCT) return 0; /* a nearly idle device: nothing there is power-bound */
    double idle = p_idle_mw < p_now_mw ? (double)p_idle_mw : (double)p_now_mw;
    double awake = idle + (double)p_limit_mw * HK_POWER_AWAKE_PCT / 100.0;
    if ((double)p_now_mw <= awake) return 0; /* no more than an awake device draws doing nothing */
    double full = awake + ((double)p_now_mw - awake) * 100.0 / (double)duty_pct;
    if (full >= (double)p_limit_mw * HK_POWER_BOUND_PCT / 100.0) return 1;
    if (full < (double)p_limit_mw * HK_POWER_FREE_PCT / 100.0) return 0;
    return prev;
}

uint32_t hk_elastic_factor_milli(const hk_elastic *e, uint32_t x_milli) {
    if (x_milli == 0 || x_milli >= 1000) return 1000;
    double phi = e->phi_milli / 1000.0, x = x_milli / 1000.0;
    double den = 1.0 - phi + phi * x; /* in (x, 1]: x > 0 */
    double f = 1000.0 / den;
    return f <= 1000.0 ? 1000u : (uint32_t)(f + 0.5);
}
