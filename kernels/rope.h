/* rope.h - the angles of rotary position embeddings, as llama.cpp's CPU
 * backend computes them (ggml_rope_ext), for every scaling it supports:
 * none, linear (freq_scale), per-pair frequency factors (Llama 3.1's
 * rope_freqs.weight, Phi-3's long/short factors) and YaRN.
 *
 * Design. The angles of a token depend on its position and the layer's
 * parameters only, not on the head: st_rope_cs computes the cos/sin of
 * every pair once per token (n_rot / 2 cosf + sinf), and the rotation
 * kernels (st_kernel_ops.rope, .rope_neox) only multiply, so every kernel
 * variant rotates with the same table and gives the same bits.
 *
 * Angle of pair i at position p (all in float, in this order, as ggml):
 *   theta_ext = p * base^(-2i/n_rot), iterated as theta *= base^(-2/n_rot)
 *   theta_ext /= freq_factors[i]                 (when factors are given)
 *   theta     = freq_scale * theta_ext           (interpolation)
 *   YaRN (ext_factor != 0): ramp = 1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1)
 *       with (lo, hi) = corr_dims; mix = ramp * ext_factor;
 *       theta = theta * (1 - mix) + theta_ext * mix;
 *       mscale = attn_factor * (1 + 0.1 ln(1 / freq_scale))
 *   otherwise mscale = attn_factor
 *   cs[2i] = cos(theta) * mscale, cs[2i + 1] = sin(theta) * mscale
 * With no scaling (freq_scale 1, no factors, ext_factor 0, attn_factor 1)
 * the values are exactly cosf/sinf of the plain iterated angle. */
#ifndef ST_ROPE_H
#define ST_ROPE_H

#include <stdint.h>

/* YaRN's defaults (llama.cpp's for the architectures Strata runs, which
 * do not read the yarn_beta_* keys). */
#define ST_ROPE_YARN_BETA_FAST 32.0f
#define ST_ROPE_YARN_BETA_SLOW 1.0f

typedef struct st_rope_params {
    int64_t n_rot;             /* rotated dims per head (even) */
    float base;                /* rope.freq_base */
    float freq_scale;          /* 1 / scaling factor (1: none) */
    const float *freq_factors; /* [n_rot / 2] divisors of the angles, or NULL */
    float ext_factor;          /* YaRN's extrapolation mix (0: not YaRN) */
    float attn_factor;         /* multiplies cos and sin (1: none) */
    float corr_dims[2];        /* YaRN's correction range (st_rope_yarn_corr_dims) */
} st_rope_params;

/* st_rope_cs - cs[2i] = cos, cs[2i + 1] = sin of pair i < n_rot / 2 at
 * position pos (see the file comment). cs: [n_rot] floats. */
void st_rope_cs(const st_rope_params *p, int64_t pos, float *cs);

/* st_rope_yarn_corr_dims - YaRN's correction dims for a model trained on
 * n_ctx_orig positions: floor/ceil of the dims whose wavelength makes
 * beta_fast / beta_slow turns over n_ctx_orig, clamped to [0, n_rot - 1]. */
void st_rope_yarn_corr_dims(int64_t n_rot, int64_t n_ctx_orig, float base, float beta_fast,
                            float beta_slow, float dims[2]);

#endif
