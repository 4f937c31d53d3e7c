/* rope.c - rotary angles (see rope.h). */
#include "kernels/rope.h"

#include <math.h>

/* The lower bound of YaRN's ramp width (ggml's). */
#define ROPE_YARN_MIN_WIDTH 0.001f
/* YaRN's magnitude correction: 1 + ROPE_YARN_MSCALE_COEF * ln(factor). */
#define ROPE_YARN_MSCALE_COEF 0.1f

static float rope_yarn_ramp(float lo, float hi, int64_t pair)
{
    const float w = hi - lo > ROPE_YARN_MIN_WIDTH ? hi - lo : ROPE_YARN_MIN_WIDTH;
    const float y = ((float)pair - lo) / w;
    return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

void st_rope_cs(const st_rope_params *p, int64_t pos, float *cs)
{
    const float theta_scale = powf(p->base, -2.0f / (float)p->n_rot);
    float theta_base = (float)pos;
    for (int64_t i = 0; i < p->n_rot / 2; i++) {
        const float theta_ext = p->freq_factors ? theta_base / p->freq_factors[i] : theta_base;
        float theta = p->freq_scale * theta_ext;
        float mscale = p->attn_factor;
        if (p->ext_factor != 0.0f) {
            const float mix = rope_yarn_ramp(p->corr_dims[0], p->corr_dims[1], i) * p->ext_factor;
            theta = theta * (1.0f - mix) + theta_ext * mix;
            mscale *= 1.0f + ROPE_YARN_MSCALE_COEF * logf(1.0f / p->freq_scale);
        }
        cs[2 * i] = cosf(theta) * mscale;
        cs[2 * i + 1] = sinf(theta) * mscale;
        theta_base *= theta_scale;
    }
}

/* the dim whose wavelength makes n_turns turns over n_ctx_orig positions */
static float rope_corr_dim(int64_t n_rot, int64_t n_ctx_orig, float n_turns, float base)
{
    return (float)n_rot * logf((float)n_ctx_orig / (n_turns * 2.0f * (float)M_PI)) /
           (2.0f * logf(base));
}

void st_rope_yarn_corr_dims(int64_t n_rot, int64_t n_ctx_orig, float base, float beta_fast,
                            float beta_slow, float dims[2])
{
    const float lo = floorf(rope_corr_dim(n_rot, n_ctx_orig, beta_fast, base));
    const float hi = ceilf(rope_corr_dim(n_rot, n_ctx_orig, beta_slow, base));
    dims[0] = lo > 0.0f ? lo : 0.0f;
    dims[1] = hi < (float)(n_rot - 1) ? hi : (float)(n_rot - 1);
}
