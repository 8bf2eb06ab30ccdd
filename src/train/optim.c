/* optim.c — AdamW, the warmup + cosine schedule and gradient clipping (see optim.h). */
#include "train/optim.h"

#include <math.h>

double sp_tr_lr_at(const tr_optim_cfg *c, long step) {
    if (c->warmup > 0 && step <= c->warmup) return c->lr * (double)step / (double)c->warmup;
    long span = c->total - c->warmup;
    if (span <= 0) return c->lr;
    double t = (double)(step - c->warmup) / (double)span;
    if (t > 1) t = 1;
    double lo = c->lr * c->min_lr_frac; /* 0 for drafters: exactly lr·½(1 + cos) */
    return (c->lr - lo) * 0.5 * (1 + cos(M_PI * t)) + lo;
}

long sp_tr_warmup_default(long total) { return (long)ceil(0.04 * (double)total); }

double sp_tr_clip_grad(float *g, size_t n, double max_norm) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)g[i] * g[i];
    double norm = sqrt(ss);
    if (max_norm > 0 && norm > max_norm) {
        float s = (float)(max_norm / (norm + 1e-6));
        for (size_t i = 0; i < n; i++) g[i] *= s;
    }
    return norm;
}

/* m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;  w −= lr·( m̂/(sqrt(v̂) + eps) + wd·w ) */
void sp_tr_adamw_step(float *w, const float *g, float *m, float *v, size_t n, long step, double lr,
                   const tr_optim_cfg *c) {
    float b1 = (float)c->beta1, b2 = (float)c->beta2;
    float bc1 = (float)(1 - pow(c->beta1, (double)step)), bc2 = (float)(1 - pow(c->beta2, (double)step));
    float flr = (float)lr, eps = (float)c->eps, wd = (float)c->weight_decay;
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        float mh = m[i] / bc1, vh = v[i] / bc2;
        w[i] -= flr * (mh / (sqrtf(vh) + eps) + wd * w[i]);
    }
}
