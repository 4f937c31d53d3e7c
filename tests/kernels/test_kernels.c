/* test_kernels.c - unit tests of kernels/: conversions and the row and
 * element-wise ops; main runs every suite of the 'kernels' test.
 *
 * Every op test runs over each variant st_kernels_get returns on this
 * machine (tk_util.h: none is skipped silently, a supported variant
 * without a table fails, and each suite prints which variants it runs),
 * against a double-precision oracle with a per-dtype bound, so a new
 * variant is checked without new test code. Conversions must be bit-exact
 * across variants, and the Q8_0 / Q4_0 / F16 converters must reproduce the
 * shared synth-s files (written by llama.cpp's tools from the same values
 * as synth-s-f32.gguf) byte for byte; a minimal GGUF reader (tk_gguf.c)
 * finds the tensors. The other suites: the dtype table, variant selection
 * and the variant list (test_dtype.c), the products (test_mul_mat.c), the
 * K-quants (test_kquant.c, and against llama.cpp's dequantization in
 * test_kquant_oracle.c), the legacy and IQ4 quants (test_legacy.c). */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/kernels.h"
#include "kernels/rope.h"
#include "tests/kernels/tk_gguf.h"
#include "tests/kernels/tk_suites.h"
#include "tests/kernels/tk_util.h"

static int tk_is_nan(float f) { return f != f; }

/* ---- f16 / bf16 conversions (each variant) ---- */

static uint16_t tk_to_f16(const st_kernel_ops *ops, float f)
{
    uint16_t h;
    ops->from_float[ST_DT_F16](&f, &h, 1);
    return h;
}

static uint16_t tk_to_bf16(const st_kernel_ops *ops, float f)
{
    uint16_t h;
    ops->from_float[ST_DT_BF16](&f, &h, 1);
    return h;
}

START_TEST(test_f16_convert)
{
    const st_kernel_ops *ops = tk_variant(_i);
    static const struct {
        float f;
        uint16_t h;
    } cases[] = {
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {65504.0f, 0x7bff},
        {65519.99f, 0x7bff},
        {65520.0f, 0x7c00},
        {1e9f, 0x7c00},
        {-1e9f, 0xfc00},
        {0x1p-14f, 0x0400},
        {0x1p-24f, 0x0001},
        {0x1p-25f, 0x0000},
        {0x1.8p-25f, 0x0001},
        {0x1.8p-24f, 0x0002},
        {0x1p-26f, 0x0000},
        {1.0f + 0x1p-11f, 0x3c00},
        /* tie -> even */ {1.0f + 0x3p-11f, 0x3c02},
        {1.0f + 0x1.01p-11f, 0x3c01},
        {0.1f, 0x2e66},
        {-0x1p-24f, 0x8001},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
        ck_assert_msg(tk_to_f16(ops, cases[k].f) == cases[k].h, "%s: f16(%a) = 0x%04x, want 0x%04x",
                      ops->name, (double)cases[k].f, tk_to_f16(ops, cases[k].f), cases[k].h);
    ck_assert_uint_eq(tk_to_f16(ops, NAN) & 0x7c00u, 0x7c00u);
    ck_assert_uint_ne(tk_to_f16(ops, NAN) & 0x3ffu, 0);
    /* every half widens exactly and narrows back to itself (NaN stays NaN) */
    uint16_t *h = tk_alloc(65536 * 2), *h2 = tk_alloc(65536 * 2);
    float *f = tk_alloc(65536 * sizeof(float));
    for (uint32_t i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    ops->to_float[ST_DT_F16](h, f, 65536);
    ops->from_float[ST_DT_F16](f, h2, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        const int nan = (i & 0x7c00u) == 0x7c00u && (i & 0x3ffu) != 0;
        ck_assert_msg(f[i] == st_f16_to_f32(h[i]) || (nan && tk_is_nan(f[i])), "widen 0x%04x", i);
        if (nan)
            ck_assert_msg(tk_is_nan(f[i]) && (h2[i] & 0x7c00u) == 0x7c00u && (h2[i] & 0x3ffu),
                          "nan 0x%04x", i);
        else
            ck_assert_msg(h2[i] == i, "%s: 0x%04x -> %a -> 0x%04x", ops->name, i, (double)f[i],
                          h2[i]);
    }
    free(h);
    free(h2);
    free(f);
}
END_TEST

START_TEST(test_bf16_convert)
{
    const st_kernel_ops *ops = tk_variant(_i);
    static const struct {
        float f;
        uint16_t h;
    } cases[] = {
        {1.0f, 0x3f80},
        {-2.0f, 0xc000},
        {1.0f + 0x1p-8f, 0x3f80},
        {1.0f + 0x3p-8f, 0x3f82},
        {1.0f + 0x1.02p-8f, 0x3f81},
        {0x1p-127f, 0x0000},
        {-0x1p-130f, 0x8000},
        {0x1p-126f, 0x0080},
        {3.0e38f, 0x7f62},
        {FLT_MAX, 0x7f80},
        {INFINITY, 0x7f80},
        {-INFINITY, 0xff80},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
        ck_assert_msg(tk_to_bf16(ops, cases[k].f) == cases[k].h,
                      "%s: bf16(%a) = 0x%04x, want 0x%04x", ops->name, (double)cases[k].f,
                      tk_to_bf16(ops, cases[k].f), cases[k].h);
    const uint16_t hn = tk_to_bf16(ops, st_bits_f32(0x7f800001u)); /* signalling NaN */
    ck_assert_msg((hn & 0x7f80u) == 0x7f80u && (hn & 0x7fu) != 0, "nan -> 0x%04x", hn);
    uint16_t *h = tk_alloc(65536 * 2), *h2 = tk_alloc(65536 * 2);
    float *f = tk_alloc(65536 * sizeof(float));
    for (uint32_t i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    ops->to_float[ST_DT_BF16](h, f, 65536);
    ops->from_float[ST_DT_BF16](f, h2, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        ck_assert_uint_eq(st_f32_bits(f[i]), i << 16);
        const int nan = (i & 0x7f80u) == 0x7f80u && (i & 0x7fu) != 0;
        const int sub = (i & 0x7f80u) == 0 && (i & 0x7fu) != 0;
        if (nan)
            ck_assert_msg((h2[i] & 0x7f80u) == 0x7f80u && (h2[i] & 0x7fu), "nan 0x%04x", i);
        else if (sub)
            ck_assert_msg(h2[i] == (i & 0x8000u), "subnormal 0x%04x not flushed: 0x%04x", i, h2[i]);
        else
            ck_assert_msg(h2[i] == i, "%s: 0x%04x -> 0x%04x", ops->name, i, h2[i]);
    }
    free(h);
    free(h2);
    free(f);
}
END_TEST

/* ---- Q8_0 / Q4_0 quantization ---- */

START_TEST(test_quant_error_bounds)
{
    const st_kernel_ops *ops = tk_variant(_i);
    const int64_t n = 32 * 64;
    tk_rng r = {7};
    float *x = tk_alloc(n * sizeof(float)), *y = tk_alloc(n * sizeof(float));
    void *q = tk_alloc(n * 2);
    for (int64_t i = 0; i < n; i++) /* blocks of very different scales */
        x[i] = tk_unif(&r) * ldexpf(1.0f, (int)(i / 32) % 20 - 10);
    for (int64_t j = 0; j < 32; j++) /* one all-zero block */
        x[5 * 32 + j] = 0.0f;
    const st_dtype qt[] = {ST_DT_Q8_0, ST_DT_Q4_0};
    for (int k = 0; k < 2; k++) {
        ops->from_float[qt[k]](x, q, n);
        ops->to_float[qt[k]](q, y, n);
        for (int64_t ib = 0; ib < n / 32; ib++) {
            float amax = 0.0f;
            for (int j = 0; j < 32; j++)
                amax = fmaxf(amax, fabsf(x[ib * 32 + j]));
            /* step = amax/127 (resp. amax/8); the clamp at q = 15 in Q4_0 costs one step */
            const double step = qt[k] == ST_DT_Q8_0 ? amax / 127.0 : amax / 8.0;
            /* plus |q| times the f16 rounding of d (absolute 2^-25 when subnormal) */
            const double bound = (qt[k] == ST_DT_Q8_0 ? 0.5 : 1.0) * step * (1.0 + 0x1p-9) +
                                 130.0 * (step * 0x1p-11 + 0x1p-25);
            for (int j = 0; j < 32; j++) {
                const double e = fabs((double)x[ib * 32 + j] - (double)y[ib * 32 + j]);
                ck_assert_msg(e <= bound, "%s %s block %ld: |%a - %a| > %g", ops->name,
                              st_dtype_info_of(qt[k])->name, (long)ib, (double)x[ib * 32 + j],
                              (double)y[ib * 32 + j], bound);
            }
        }
        for (int j = 0; j < 32; j++)
            ck_assert(y[5 * 32 + j] == 0.0f);
    }
    /* exact layouts: Q8_0 d = 1 (amax 127), Q4_0 d = -1 (max -8): integers survive */
    float v[32];
    for (int j = 0; j < 32; j++)
        v[j] = (float)(j * 8 - 127) * (j == 0 ? 1.0f : 1.0f);
    st_block_q8_0 b8;
    ops->from_float[ST_DT_Q8_0](v, &b8, 32);
    ck_assert_uint_eq(b8.d, 0x3c00);
    for (int j = 0; j < 32; j++)
        ck_assert_int_eq(b8.qs[j], j * 8 - 127);
    for (int j = 0; j < 32; j++)
        v[j] = (float)((j % 16) - 8) * (j < 16 ? 1.0f : -1.0f) * (j == 16 ? 0.0f : 1.0f);
    v[0] = -8.0f;
    st_block_q4_0 b4;
    ops->from_float[ST_DT_Q4_0](v, &b4, 32);
    ck_assert_uint_eq(b4.d, 0x3c00); /* d = -8 / -8 = 1 */
    for (int j = 0; j < 16; j++) {
        ck_assert_int_eq(b4.qs[j] & 0xf, (int)v[j] + 8);
        const int hi = (int)v[j + 16] + 8;
        ck_assert_int_eq(b4.qs[j] >> 4, hi > 15 ? 15 : hi); /* +8 clamps to 15 */
    }
    free(x);
    free(y);
    free(q);
}
END_TEST

/* tk_check_file_bytes - converts every f32 tensor of synth-s-f32.gguf that
 * `file` stores as dtype t, row by row, and compares the bytes. */
static void tk_check_file_bytes(const st_kernel_ops *ops, const char *file, st_dtype t)
{
    tk_gguf gf, gq;
    tk_gguf_load(&gf, "synth-s-f32.gguf");
    tk_gguf_load(&gq, file);
    const uint32_t want = st_dtype_info_of(t)->ggml_type;
    int compared = 0;
    int64_t bad_rows = 0, rows_total = 0;
    for (uint64_t i = 0; i < gq.nt; i++) {
        const tk_tensor *q = &gq.t[i];
        if (q->type != want)
            continue;
        const tk_tensor *f = tk_gguf_find(&gf, q->name);
        ck_assert_msg(f != NULL && f->type == ST_GGML_TYPE_F32 && f->nelem == q->nelem &&
                          f->ne0 == q->ne0,
                      "%s: no matching f32 tensor", q->name);
        size_t rs;
        ck_assert_int_eq(st_row_size(t, q->ne0, &rs), ST_K_OK);
        unsigned char *row = tk_alloc(rs);
        const int64_t nrows = q->nelem / q->ne0;
        ck_assert(gf.data + f->off + (size_t)q->nelem * 4 <= gf.buf + gf.len);
        ck_assert(gq.data + q->off + (size_t)nrows * rs <= gq.buf + gq.len);
        for (int64_t r = 0; r < nrows; r++) {
            float *src = tk_alloc((size_t)q->ne0 * 4); /* aligned copy */
            memcpy(src, gf.data + f->off + (size_t)(r * q->ne0) * 4, (size_t)q->ne0 * 4);
            ops->from_float[t](src, row, q->ne0);
            if (memcmp(row, gq.data + q->off + (size_t)r * rs, rs) != 0)
                bad_rows++;
            free(src);
        }
        rows_total += nrows;
        free(row);
        compared++;
    }
    ck_assert_msg(compared > 0, "%s: no %s tensor", file, st_dtype_info_of(t)->name);
    ck_assert_msg(bad_rows == 0, "%s %s: %ld of %ld rows differ from llama.cpp's bytes", ops->name,
                  file, (long)bad_rows, (long)rows_total);
    free(gf.buf);
    free(gf.t);
    free(gq.buf);
    free(gq.t);
}

START_TEST(test_quant_matches_llama_cpp)
{
    const st_kernel_ops *ops = tk_variant(_i);
    tk_check_file_bytes(ops, "synth-s-q8_0.gguf", ST_DT_Q8_0);
    tk_check_file_bytes(ops, "synth-s-q4_0.gguf", ST_DT_Q4_0);
    tk_check_file_bytes(ops, "synth-s-f16.gguf", ST_DT_F16);
}
END_TEST

/* ---- row and element-wise ops ---- */

START_TEST(test_rmsnorm)
{
    const st_kernel_ops *ops = tk_variant(_i);
    tk_rng r = {42};
    const int64_t n = 256;
    float x[256], w[256], y[256];
    tk_fill(&r, x, n, 3.0f);
    for (int64_t i = 0; i < n; i++)
        w[i] = 1.0f + 0.2f * tk_unif(&r);
    const float eps = 1e-5f;
    ops->rmsnorm(x, w, y, n, eps);
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    const double scale = 1.0 / sqrt(ss / n + (double)eps);
    for (int64_t i = 0; i < n; i++) {
        const double want = (double)x[i] * scale * w[i];
        ck_assert_msg(fabs(y[i] - want) <= 2e-6 * fabs(want) + 1e-12, "%s y[%ld]=%.9g want %.9g",
                      ops->name, (long)i, (double)y[i], want);
    }
    ops->rmsnorm(x, w, x, n, eps); /* in place */
    ck_assert(memcmp(x, y, sizeof y) == 0);
}
END_TEST

/* tk_rope_cs_plain - the angles of unscaled rope (kernels/rope.h) */
static void tk_rope_cs_plain(int64_t n_rot, float base, int64_t pos, float *cs)
{
    const st_rope_params p = {.n_rot = n_rot, .base = base, .freq_scale = 1.0f,
                              .attn_factor = 1.0f};
    st_rope_cs(&p, pos, cs);
}

/* st_rope_cs with frequency factors, linear scaling and YaRN against the
 * same formulas in double (kernels/rope.h's definition, independently
 * written): per pair the angle's float iteration errs by at most about
 * (i + 4) ulp of pos, so |cs - exact| <= mscale * pos * (n_rot/2 + 4) *
 * 2^-23 + 1e-6. The cases: Llama 3.1's factors (1 x8, 2.6945, 8 x7,
 * as in the w3-llama31 file), linear scaling by 2, and YaRN by 4 over an
 * original context of 4096 (corr dims checked against the double ones). */
START_TEST(test_rope_scaled)
{
    enum { N_ROT = 32, PAIRS = N_ROT / 2 };
    float ff[PAIRS];
    for (int i = 0; i < PAIRS; i++)
        ff[i] = i < 8 ? 1.0f : i == 8 ? 2.6945f : 8.0f;
    const double base = 500000.0;
    const int64_t poss[] = {0, 7, 3000};
    for (int kind = 0; kind < 3; kind++) {
        st_rope_params p = {.n_rot = N_ROT, .base = (float)base, .freq_scale = 1.0f,
                            .attn_factor = 1.0f};
        double fs = 1.0, ext = 0.0, lo = 0.0, hi = 0.0, mscale = 1.0;
        if (kind == 0)
            p.freq_factors = ff;
        if (kind == 1)
            p.freq_scale = 0.5f, fs = 0.5;
        if (kind == 2) {
            p.freq_scale = 0.25f, fs = 0.25, p.ext_factor = 1.0f, ext = 1.0;
            st_rope_yarn_corr_dims(N_ROT, 4096, p.base, ST_ROPE_YARN_BETA_FAST,
                                   ST_ROPE_YARN_BETA_SLOW, p.corr_dims);
            const double two_pi = 2.0 * 3.14159265358979323846;
            double dlo = floor(N_ROT * log(4096.0 / (32.0 * two_pi)) / (2.0 * log(base)));
            double dhi = ceil(N_ROT * log(4096.0 / (1.0 * two_pi)) / (2.0 * log(base)));
            lo = dlo < 0 ? 0 : dlo;
            hi = dhi > N_ROT - 1 ? N_ROT - 1 : dhi;
            ck_assert_msg(p.corr_dims[0] == (float)lo && p.corr_dims[1] == (float)hi,
                          "corr dims (%g, %g) want (%g, %g)", (double)p.corr_dims[0],
                          (double)p.corr_dims[1], lo, hi);
            mscale = 1.0 + 0.1 * log(1.0 / fs);
        }
        for (size_t b = 0; b < sizeof poss / sizeof poss[0]; b++) {
            float cs[N_ROT];
            st_rope_cs(&p, poss[b], cs);
            const double tol = mscale * ((double)poss[b] * (PAIRS + 4) * 0x1p-23 + 1e-6);
            for (int i = 0; i < PAIRS; i++) {
                double th_ext = (double)poss[b] * pow(base, -2.0 * i / N_ROT) /
                                (p.freq_factors ? (double)ff[i] : 1.0);
                double th = fs * th_ext;
                if (ext != 0.0) {
                    double w = hi - lo > 0.001 ? hi - lo : 0.001;
                    double y = (i - lo) / w;
                    double mix = (1.0 - fmin(1.0, fmax(0.0, y))) * ext;
                    th = th * (1.0 - mix) + th_ext * mix;
                }
                ck_assert_msg(fabs(cs[2 * i] - cos(th) * mscale) <= tol &&
                                  fabs(cs[2 * i + 1] - sin(th) * mscale) <= tol,
                              "rope kind %d pos %ld pair %d: (%g, %g) want (%g, %g)", kind,
                              (long)poss[b], i, (double)cs[2 * i], (double)cs[2 * i + 1],
                              cos(th) * mscale, sin(th) * mscale);
            }
        }
    }
}
END_TEST

/* gelu_mul: llama.cpp's f16-table GELU (0 at <= -10, x at >= 10, else
 * f16(gelu(f16(x)))) times u, against the tanh formula in double on the
 * f16-rounded input (the table's f32 tanhf may round the f16 result one
 * step apart: 2^-10 relative; where 1 + tanh cancels, float's tanhf errs
 * by up to 0.5 |x| 2^-23 absolute; f16 subnormals are 2^-24 apart: those
 * bounds times |u|); every variant
 * bit-identical to the reference */
START_TEST(test_gelu_mul)
{
    const st_kernel_ops *ops = tk_variant(_i);
    enum { N = 1000 };
    float g[N], u[N], g0[N], gr[N];
    tk_rng r = {11};
    tk_fill(&r, g0, N, 12.0f);
    tk_fill(&r, u, N, 2.0f);
    g0[0] = -10.0f, g0[1] = 10.0f, g0[2] = 9.999f, g0[3] = -9.999f, g0[4] = 0.0f;
    memcpy(g, g0, sizeof g);
    memcpy(gr, g0, sizeof gr);
    ops->gelu_mul(g, u, N);
    st_kernels_ref()->gelu_mul(gr, u, N);
    ck_assert_msg(memcmp(g, gr, sizeof g) == 0, "%s gelu_mul differs from the reference",
                  ops->name);
    for (int i = 0; i < N; i++) {
        double x = g0[i], want;
        if (x <= -10.0)
            want = 0.0;
        else if (x >= 10.0)
            want = x;
        else {
            double xh = st_f16_to_f32(st_f32_to_f16(g0[i]));
            want = 0.5 * xh * (1.0 + tanh(0.79788456080286535588 * xh * (1.0 + 0.044715 * xh * xh)));
        }
        const double tol = fabs(want) * 0x1p-10 + fabs((double)u[i]) * (0.5 * fabs(x) * 0x1p-23 + 0x1p-24);
        want *= u[i];
        ck_assert_msg(fabs(g[i] - want) <= fabs(want) * 0x1p-10 + tol,
                      "%s gelu_mul(%g) * %g = %g, want %g", ops->name, x, (double)u[i],
                      (double)g[i], want);
    }
}
END_TEST

START_TEST(test_rope)
{
    const st_kernel_ops *ops = tk_variant(_i);
    const int64_t n_head = 3, head_dim = 64;
    const int64_t n_rots[] = {64, 32};
    const int64_t poss[] = {0, 3, 300};
    tk_rng r = {5};
    for (size_t a = 0; a < 2; a++) {
        for (size_t b = 0; b < 3; b++) {
            const int64_t n_rot = n_rots[a], pos = poss[b];
            float x[3 * 64], x0[3 * 64];
            tk_fill(&r, x0, n_head * head_dim, 1.0f);
            memcpy(x, x0, sizeof x);
            float cs[64];
            tk_rope_cs_plain(n_rot, 10000.0f, pos, cs);
            ops->rope(x, n_head, head_dim, n_rot, cs);
            float xr[3 * 64];
            memcpy(xr, x0, sizeof xr);
            st_kernels_ref()->rope(xr, n_head, head_dim, n_rot, cs);
            ck_assert_msg(memcmp(x, xr, sizeof x) == 0, "%s rope differs from the reference",
                          ops->name);
            /* float theta iteration: relative error grows ~ one ulp per pair */
            const double tol = (double)pos * (double)(n_rot / 2 + 4) * 0x1p-23 + 1e-6;
            for (int64_t h = 0; h < n_head; h++) {
                for (int64_t i = 0; i < head_dim; i += 2) {
                    const float *s = x0 + h * head_dim + i;
                    const float *d = x + h * head_dim + i;
                    if (i >= n_rot) {
                        ck_assert(d[0] == s[0] && d[1] == s[1]);
                        continue;
                    }
                    const double th = (double)pos * pow(10000.0, -(double)i / (double)n_rot);
                    const double w0 = s[0] * cos(th) - s[1] * sin(th);
                    const double w1 = s[0] * sin(th) + s[1] * cos(th);
                    const double m = fabs(s[0]) + fabs(s[1]);
                    ck_assert_msg(fabs(d[0] - w0) <= tol * m && fabs(d[1] - w1) <= tol * m,
                                  "%s rope pos %ld dim %ld: (%g, %g) want (%g, %g)", ops->name,
                                  (long)pos, (long)i, (double)d[0], (double)d[1], w0, w1);
                    if (pos == 0)
                        ck_assert(d[0] == s[0] && d[1] == s[1]);
                }
            }
        }
    }
}
END_TEST

START_TEST(test_rope_neox)
{
    /* NEOX pairing (i, i + n_rot/2) against double math, and bit-identical
     * to the reference in every variant; n_rot 40: a tail of 4 pairs after
     * the 8-wide SIMD steps, and 24 untouched dims per head */
    const st_kernel_ops *ops = tk_variant(_i);
    const int64_t n_head = 3, head_dim = 64;
    const int64_t n_rots[] = {64, 40};
    const int64_t poss[] = {0, 3, 300};
    const float base = 1000000.0f;
    tk_rng r = {7};
    for (size_t a = 0; a < 2; a++) {
        for (size_t b = 0; b < 3; b++) {
            const int64_t n_rot = n_rots[a], pos = poss[b], half = n_rot / 2;
            float x[3 * 64], x0[3 * 64], xr[3 * 64];
            tk_fill(&r, x0, n_head * head_dim, 1.0f);
            memcpy(x, x0, sizeof x);
            memcpy(xr, x0, sizeof xr);
            float cs[64];
            tk_rope_cs_plain(n_rot, base, pos, cs);
            ops->rope_neox(x, n_head, head_dim, n_rot, cs);
            st_kernels_ref()->rope_neox(xr, n_head, head_dim, n_rot, cs);
            ck_assert_msg(memcmp(x, xr, sizeof x) == 0, "%s rope_neox differs from the reference",
                          ops->name);
            const double tol = (double)pos * (double)(half + 4) * 0x1p-23 + 1e-6;
            for (int64_t h = 0; h < n_head; h++) {
                const float *s = x0 + h * head_dim, *d = x + h * head_dim;
                for (int64_t i = n_rot; i < head_dim; i++)
                    ck_assert(d[i] == s[i]);
                for (int64_t i = 0; i < half; i++) {
                    const double th = (double)pos *
                                      pow((double)base, -2.0 * (double)i / (double)n_rot);
                    const double w0 = s[i] * cos(th) - s[i + half] * sin(th);
                    const double w1 = s[i] * sin(th) + s[i + half] * cos(th);
                    const double m = fabs(s[i]) + fabs(s[i + half]);
                    ck_assert_msg(fabs(d[i] - w0) <= tol * m && fabs(d[i + half] - w1) <= tol * m,
                                  "%s rope_neox pos %ld dim %ld: (%g, %g) want (%g, %g)", ops->name,
                                  (long)pos, (long)i, (double)d[i], (double)d[i + half], w0, w1);
                }
            }
        }
    }
}
END_TEST

static void tk_softmax_exact(const float *x, double *p, int64_t n)
{
    double mx = -INFINITY, s = 0.0;
    for (int64_t i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    for (int64_t i = 0; i < n; i++)
        s += (p[i] = exp((double)x[i] - mx));
    for (int64_t i = 0; i < n; i++)
        p[i] /= s;
}

START_TEST(test_softmax_silu_add)
{
    const st_kernel_ops *ops = tk_variant(_i);
    tk_rng r = {9};
    const int64_t n = 300;
    float x[300], g[300], u[300], y[300];
    double p[300];
    tk_fill(&r, x, n, 8.0f);
    tk_softmax_exact(x, p, n);
    ops->softmax(x, n);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabs(x[i] - p[i]) <= 2e-6 * p[i] + 1e-12, "%s softmax[%ld]=%g want %g",
                      ops->name, (long)i, (double)x[i], p[i]);
    float one = 3.0f;
    ops->softmax(&one, 1);
    ck_assert(one == 1.0f);
    tk_fill(&r, g, n, 10.0f);
    tk_fill(&r, u, n, 2.0f);
    memcpy(y, g, sizeof y);
    ops->silu_mul(y, u, n);
    for (int64_t i = 0; i < n; i++) {
        const double want = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        ck_assert_msg(fabs(y[i] - want) <= 1e-6 * fabs(want) + 1e-30, "%s silu_mul[%ld]", ops->name,
                      (long)i);
    }
    memcpy(y, g, sizeof y);
    ops->add(y, u, n);
    for (int64_t i = 0; i < n; i++)
        ck_assert(y[i] == g[i] + u[i]);
}
END_TEST

START_TEST(test_argmax)
{
    const st_kernel_ops *ops = tk_variant(_i);
    const float a[] = {1.0f, 3.0f, 3.0f, 2.0f};
    ck_assert_int_eq(ops->argmax(a, 4), 1);
    const float b[] = {-5.0f, -5.0f, -5.0f};
    ck_assert_int_eq(ops->argmax(b, 3), 0);
    const float c[] = {-1.0f, -0.5f, -7.0f, -0.5f};
    ck_assert_int_eq(ops->argmax(c, 4), 1);
    float d[1000];
    tk_rng r = {3};
    tk_fill(&r, d, 1000, 1.0f);
    d[999] = 2.0f;
    d[617] = 2.0f;
    ck_assert_int_eq(ops->argmax(d, 1000), 617);
    ck_assert_int_eq(ops->argmax(d, 1), 0);
}
END_TEST

/* ---- variants against the reference ---- */

START_TEST(test_variant_conversions_match_ref)
{
    const st_kernel_ops *ops = tk_variant(_i); /* _i >= 1: a SIMD variant */
    const st_kernel_ops *ref = st_kernels_ref();
    const int64_t n = 32 * 40;
    tk_rng r = {77};
    float *x = tk_alloc(n * 4), *a = tk_alloc(n * 4), *b = tk_alloc(n * 4);
    unsigned char *qa = tk_alloc(n * 4), *qb = tk_alloc(n * 4);
    for (int64_t i = 0; i < n; i++)
        x[i] = tk_unif(&r) * ldexpf(1.0f, (int)(i % 61) - 30);
    for (int t = 0; t < TK_N_PLAIN_DTYPES; t++) {
        size_t rs;
        ck_assert_int_eq(st_row_size((st_dtype)t, n, &rs), ST_K_OK);
        ref->from_float[t](x, qa, n);
        ops->from_float[t](x, qb, n);
        ck_assert_msg(memcmp(qa, qb, rs) == 0, "%s from_float %s differs from ref", ops->name,
                      st_dtype_info_of((st_dtype)t)->name);
        ref->to_float[t](qa, a, n);
        ops->to_float[t](qa, b, n);
        ck_assert_msg(memcmp(a, b, (size_t)n * 4) == 0, "%s to_float %s differs from ref",
                      ops->name, st_dtype_info_of((st_dtype)t)->name);
    }
    free(x);
    free(a);
    free(b);
    free(qa);
    free(qb);
}
END_TEST

static Suite *kernels_suite(void)
{
    Suite *s = suite_create("kernels");
    tk_variants_print("kernels");
    const int nv = tk_variant_count();
    /* every op test runs once per variant present (tk_variant(_i)) */
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_f16_convert, 0, nv);
    tcase_add_loop_test(tc, test_bf16_convert, 0, nv);
    tcase_add_loop_test(tc, test_quant_error_bounds, 0, nv);
    tcase_add_loop_test(tc, test_quant_matches_llama_cpp, 0, nv);
    tcase_add_loop_test(tc, test_rmsnorm, 0, nv);
    tcase_add_loop_test(tc, test_rope, 0, nv);
    tcase_add_loop_test(tc, test_rope_neox, 0, nv);
    tcase_add_test(tc, test_rope_scaled);
    tcase_add_loop_test(tc, test_gelu_mul, 0, nv);
    tcase_add_loop_test(tc, test_softmax_silu_add, 0, nv);
    tcase_add_loop_test(tc, test_argmax, 0, nv);
    /* against the reference: the variants after it */
    tcase_add_loop_test(tc, test_variant_conversions_match_ref, 1, nv);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(tk_dtype_suite());
    srunner_add_suite(sr, kernels_suite());
    srunner_add_suite(sr, tk_mul_mat_suite());
    srunner_add_suite(sr, tk_attn_suite());
    srunner_add_suite(sr, tq_kquant_suite());
    srunner_add_suite(sr, tqo_oracle_suite());
    srunner_add_suite(sr, tl_legacy_suite());
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
