/* kernels.h - the math of Strata: dtypes, block layouts, and the operations
 * of a llama forward pass, as one table of function pointers per variant.
 *
 * Design. Every operation has a scalar reference (variant "ref"); SIMD
 * variants ("avx2", ...) fill the same table and are tested against it with
 * per-dtype error bounds. st_kernels_select() picks the best variant the CPU
 * and the OS support once at start-up; st_kernels_get(ST_KVAR_REF) forces
 * the reference. Kernels never allocate, never lock and never use
 * thread-local state: callers give scratch memory and split work by output
 * rows ([i0, i1) of mul_mat), never along a reduction, so every output
 * element has one accumulation order whatever the batch size, the row's
 * place in the batch or the thread count (batch invariance, INV-7).
 *
 * Weights are immutable; a matrix W of dtype t with n columns is stored as
 * rows of st_row_size(t, n) bytes (ggml's layout: ne0 = n is contiguous).
 * Before a product, activation rows are converted to the weight's
 * "activation dtype" (st_dtype_info.act): f32 for F32, f16 for F16, bf16
 * for BF16, Q8_0 blocks for Q8_0, Q4_0, Q5_0 and IQ4_NL, Q8_1 blocks for
 * Q4_1 and Q5_1, Q8_K super-blocks for the K-quants Q2_K..Q6_K and IQ4_XS
 * (as llama.cpp's CPU backend).
 *
 * This layer depends on nothing else of Strata; it reports errors as
 * ST_K_* codes that callers map to st_err. */
#ifndef ST_KERNELS_H
#define ST_KERNELS_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum st_dtype {
    ST_DT_F32 = 0,
    ST_DT_F16 = 1,
    ST_DT_BF16 = 2,
    ST_DT_Q8_0 = 3,
    ST_DT_Q4_0 = 4,
    ST_DT_Q2_K = 5,
    ST_DT_Q3_K = 6,
    ST_DT_Q4_K = 7,
    ST_DT_Q5_K = 8,
    ST_DT_Q6_K = 9,
    ST_DT_Q8_K = 10, /* activations of K-quant products only: never a weight */
    /* the legacy and IQ4 quants (kernels/legacy.h) */
    ST_DT_Q4_1 = 11,
    ST_DT_Q5_0 = 12,
    ST_DT_Q5_1 = 13,
    ST_DT_IQ4_NL = 14,
    ST_DT_IQ4_XS = 15,
    ST_DT_Q8_1 = 16, /* activations of Q4_1 / Q5_1 products only: never a weight */
    ST_DT_COUNT
} st_dtype;

/* The ggml/GGUF type numbers of the dtypes above: the numbers of a GGUF
 * tensor table, named after ggml's enum ggml_type (GGML_TYPE_F32 = 0, ...).
 * ggml's other types (Q8_1 as a weight, IQ2_XXS = 16, ...) are not
 * supported. */
typedef enum st_ggml_type {
    ST_GGML_TYPE_F32 = 0,
    ST_GGML_TYPE_F16 = 1,
    ST_GGML_TYPE_Q4_0 = 2,
    ST_GGML_TYPE_Q4_1 = 3,
    ST_GGML_TYPE_Q5_0 = 6,
    ST_GGML_TYPE_Q5_1 = 7,
    ST_GGML_TYPE_Q8_0 = 8,
    ST_GGML_TYPE_Q8_1 = 9,
    ST_GGML_TYPE_Q2_K = 10,
    ST_GGML_TYPE_Q3_K = 11,
    ST_GGML_TYPE_Q4_K = 12,
    ST_GGML_TYPE_Q5_K = 13,
    ST_GGML_TYPE_Q6_K = 14,
    ST_GGML_TYPE_Q8_K = 15,
    ST_GGML_TYPE_IQ4_NL = 20,
    ST_GGML_TYPE_IQ4_XS = 23,
    ST_GGML_TYPE_BF16 = 30,
} st_ggml_type;

/* Status codes of the kernel layer (0 = success). */
enum {
    ST_K_OK = 0,
    ST_K_ESHAPE = 1, /* a length is not a multiple of the dtype's block */
    ST_K_ETYPE = 2,  /* dtype out of range or not supported by the op */
};

#define ST_QK 32 /* elements per Q8_0 / Q4_0 block (and Q4_1, Q5_0, Q5_1, IQ4_NL, Q8_1) */

/* Q8_0 block: x[i] = d * qs[i], d an IEEE half. */
typedef struct st_block_q8_0 {
    uint16_t d;
    int8_t qs[ST_QK];
} st_block_q8_0;
static_assert(sizeof(st_block_q8_0) == 34, "q8_0 block is 34 bytes");

/* Q4_0 block: x[i] = d * (q[i] - 8); qs[j] holds q[j] in its low nibble and
 * q[j + 16] in its high nibble (ggml's layout). */
typedef struct st_block_q4_0 {
    uint16_t d;
    uint8_t qs[ST_QK / 2];
} st_block_q4_0;
static_assert(sizeof(st_block_q4_0) == 18, "q4_0 block is 18 bytes");

/* ---- K-quants: super-blocks of ST_QK_K values (ggml's layouts) ----
 * A super-block holds 16 sub-blocks of 16 values (Q2_K, Q3_K, Q6_K) or 8
 * sub-blocks of 32 (Q4_K, Q5_K), each with its own small integer scale
 * (and min), scaled again by the super-block's f16 d (and dmin). */
#define ST_QK_K 256
#define ST_K_SCALE_BYTES                                                                           \
    12 /* 8 six-bit scales + 8 six-bit mins (Q4_K, Q5_K); 16 six-bit scales (Q3_K) */

/* Q2_K: x = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4), q 2 bits,
 * sub-block s of 16 values. qs: 4 values per byte (see kernels/kquant_ref.c). */
typedef struct st_block_q2_k {
    uint8_t scales[ST_QK_K / 16];
    uint8_t qs[ST_QK_K / 4];
    uint16_t d;
    uint16_t dmin;
} st_block_q2_k;
static_assert(sizeof(st_block_q2_k) == 84, "q2_k block is 84 bytes");

/* Q3_K: x = d * (sc[s] - 32) * (q - 4 * !hbit), q 2 low bits in qs plus a
 * high bit in hmask, sc 6-bit scales packed in scales[12]. */
typedef struct st_block_q3_k {
    uint8_t hmask[ST_QK_K / 8];
    uint8_t qs[ST_QK_K / 4];
    uint8_t scales[ST_K_SCALE_BYTES];
    uint16_t d;
} st_block_q3_k;
static_assert(sizeof(st_block_q3_k) == 110, "q3_k block is 110 bytes");

/* Q4_K: x = d * sc[s] * q - dmin * m[s], q 4 bits, 8 sub-blocks of 32,
 * sc and m 6-bit values packed in scales[12]. */
typedef struct st_block_q4_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[ST_K_SCALE_BYTES];
    uint8_t qs[ST_QK_K / 2];
} st_block_q4_k;
static_assert(sizeof(st_block_q4_k) == 144, "q4_k block is 144 bytes");

/* Q5_K: Q4_K with a fifth bit per value in qh. */
typedef struct st_block_q5_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[ST_K_SCALE_BYTES];
    uint8_t qh[ST_QK_K / 8];
    uint8_t qs[ST_QK_K / 2];
} st_block_q5_k;
static_assert(sizeof(st_block_q5_k) == 176, "q5_k block is 176 bytes");

/* Q6_K: x = d * scales[s] * (q - 32), q 4 low bits in ql and 2 high bits
 * in qh, 16 sub-blocks of 16 with int8 scales. */
typedef struct st_block_q6_k {
    uint8_t ql[ST_QK_K / 2];
    uint8_t qh[ST_QK_K / 4];
    int8_t scales[ST_QK_K / 16];
    uint16_t d;
} st_block_q6_k;
static_assert(sizeof(st_block_q6_k) == 210, "q6_k block is 210 bytes");

/* Q8_K (activations): x = d * qs[i], d an f32; bsums[g] = the sum of the
 * 16 quants qs[16 g .. 16 g + 15] (the min terms of Q2_K/Q4_K/Q5_K). */
typedef struct st_block_q8_k {
    float d;
    int8_t qs[ST_QK_K];
    int16_t bsums[ST_QK_K / 16];
} st_block_q8_k;
static_assert(sizeof(st_block_q8_k) == 292, "q8_k block is 292 bytes");

/* ---- legacy and IQ4 quants (ggml's layouts; kernels in legacy_ref.c) ----
 * Within a 32-value block, the low nibble of qs[j] is value j and its high
 * nibble value j + 16; the fifth bit of value k (Q5_0, Q5_1) is bit k of
 * the little-endian 32-bit qh. */

/* Q4_1: x[i] = d * q[i] + m, q 4 bits. */
typedef struct st_block_q4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[ST_QK / 2];
} st_block_q4_1;
static_assert(sizeof(st_block_q4_1) == 20, "q4_1 block is 20 bytes");

/* Q5_0: x[i] = d * (q[i] - 16), q 5 bits (4 in qs, the fifth in qh). */
typedef struct st_block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[ST_QK / 2];
} st_block_q5_0;
static_assert(sizeof(st_block_q5_0) == 22, "q5_0 block is 22 bytes");

/* Q5_1: x[i] = d * q[i] + m, q 5 bits as in Q5_0. */
typedef struct st_block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[ST_QK / 2];
} st_block_q5_1;
static_assert(sizeof(st_block_q5_1) == 24, "q5_1 block is 24 bytes");

/* IQ4_NL: x[i] = d * st_iq4nl_values[q[i]] (kernels/legacy.h: ggml's 16
 * signed levels), q 4 bits. */
typedef struct st_block_iq4_nl {
    uint16_t d;
    uint8_t qs[ST_QK / 2];
} st_block_iq4_nl;
static_assert(sizeof(st_block_iq4_nl) == 18, "iq4_nl block is 18 bytes");

/* IQ4_XS: ST_QK_K values in 8 sub-blocks of 32; sub-block s has the 6-bit
 * scale ls = (low nibble of scales_l[s / 2] for even s, high for odd) |
 * (bits 2 s, 2 s + 1 of scales_h) << 4, and x = d * (ls - 32) *
 * st_iq4nl_values[q]; qs: 16 bytes per sub-block, nibbles as in IQ4_NL. */
typedef struct st_block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[ST_QK_K / 64];
    uint8_t qs[ST_QK_K / 2];
} st_block_iq4_xs;
static_assert(sizeof(st_block_iq4_xs) == 136, "iq4_xs block is 136 bytes");

/* Q8_1 (activations): x[i] = d * qs[i] as Q8_0, plus s = d * sum(qs) as
 * an IEEE half (the term that meets a Q4_1 / Q5_1 weight's m). */
typedef struct st_block_q8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[ST_QK];
} st_block_q8_1;
static_assert(sizeof(st_block_q8_1) == 36, "q8_1 block is 36 bytes");

typedef struct st_dtype_info {
    const char *name;   /* "f32", "f16", "bf16", "q8_0", "q4_0", "q2_k", ... "q8_k", "q4_1",
                           "q5_0", "q5_1", "iq4_nl", "iq4_xs", "q8_1" */
    int64_t blck;       /* elements per block (1 for float types) */
    size_t blck_bytes;  /* bytes per block */
    st_dtype act;       /* dtype activations take in products with it */
    uint32_t ggml_type; /* the GGUF/ggml type number (an st_ggml_type) */
} st_dtype_info;

/* st_dtype_info_of - static description of t (NULL if t is out of range). */
const st_dtype_info *st_dtype_info_of(st_dtype t);

/* st_dtype_from_ggml - maps a ggml type number; returns ST_K_ETYPE if we
 * do not support it. */
int st_dtype_from_ggml(uint32_t ggml_type, st_dtype *out);

/* st_dtype_from_name - parses "f32" ... "q4_0"; returns ST_K_ETYPE if unknown. */
int st_dtype_from_name(const char *name, st_dtype *out);

/* st_row_size - bytes of n elements of t; sets *out. ST_K_ESHAPE if n is not
 * a multiple of the block size (never truncates). */
int st_row_size(st_dtype t, int64_t n, size_t *out);

typedef enum st_kvariant {
    ST_KVAR_REF = 0,
    ST_KVAR_AVX2 = 1,   /* AVX2 + FMA + F16C */
    ST_KVAR_AVX512 = 2, /* AVX-512 F/BW/VL/VNNI/BF16 */
    ST_KVAR_COUNT
} st_kvariant;

/* st_attn_args - the arguments of attn_head (one query head). K and V
 * rows of a Q8_0 cache are head_dim / ST_QK blocks (head_dim a multiple of
 * ST_QK: the cache refuses other shapes before any kernel runs). */
typedef struct st_attn_args {
    const float *q;    /* [head_dim] one query head */
    const void *k, *v; /* row of position 0 of this KV head, in kv_dtype */
    size_t kv_stride;  /* bytes from one position's row to the next */
    st_dtype kv_dtype; /* ST_DT_F32, ST_DT_F16 or ST_DT_Q8_0 */
    int64_t kv0, n_kv; /* attend over positions [kv0, n_kv) (kv0 > 0: sliding window) */
    int64_t head_dim;
    float scale;   /* s_t = scale * dot(q, k_t) */
    float softcap; /* 0: none; else s_t = softcap * tanh(s_t / softcap) before softmax */
    float *scores; /* scratch, at least n_kv floats */
    float *out;    /* [head_dim] = sum_t softmax(s)_t * v_t over [kv0, n_kv) */
} st_attn_args;

typedef struct st_kernel_ops {
    const char *name;
    st_kvariant variant;

    /* to_float[t](src, dst, n) - dequantizes n elements of t (n a multiple
     * of the block size; callers check with st_row_size). */
    void (*to_float[ST_DT_COUNT])(const void *src, float *dst, int64_t n);

    /* from_float[t](src, dst, n) - converts n f32 values to t: rounding to
     * nearest even for f16/bf16, ggml's reference quantizers for Q8_0 and
     * Q4_0 (d = absmax / 127, resp. d = max / -8), so converted files are
     * byte-identical to llama.cpp's, and for Q8_K activations (d = max /
     * -127, with bsums) and Q8_1 activations (Q8_0's quants and d, s =
     * d * sum(q)). NULL for the K-quant weights Q2_K..Q6_K and for Q4_1,
     * Q5_0, Q5_1, IQ4_NL, IQ4_XS: Strata reads them from files and never
     * writes them. */
    void (*from_float[ST_DT_COUNT])(const float *src, void *dst, int64_t n);

    /* mul_mat[t] - y[j * y_stride + i] = dot(row i of W, row j of X) for
     * i in [i0, i1), j in [0, nx). W: dtype t, rows of w_stride bytes, n
     * columns. X: nx rows already converted to st_dtype_info_of(t)->act,
     * rows of x_stride bytes. Every y element is computed in the same
     * order whatever nx, j, i0 and i1 are. */
    void (*mul_mat[ST_DT_COUNT])(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                                 const void *x, size_t x_stride, int64_t nx, float *y,
                                 int64_t y_stride);

    /* mul_mat_r8[t] - mul_mat[t] for weights in the R8 layout of
     * kernels/repack.h (NULL for dtypes without one): w is the repacked
     * matrix, w_stride the plain row size; i0 must be a multiple of 8 and
     * i1 too, or the matrix's last row. Results are bit-identical to
     * mul_mat[t] on the plain matrix (each element in the same order). */
    void (*mul_mat_r8[ST_DT_COUNT])(int64_t n, const void *w, size_t w_stride, int64_t i0,
                                    int64_t i1, const void *x, size_t x_stride, int64_t nx,
                                    float *y, int64_t y_stride);

    /* rmsnorm - y = x * (1 / sqrt(mean(x^2) + eps)) * w; the sum of squares
     * is accumulated sequentially in double (llama.cpp's order). y may be x. */
    void (*rmsnorm)(const float *x, const float *w, float *y, int64_t n, float eps);

    /* rope - rotates one token's heads in place, llama's "normal" pairing
     * (x[2i], x[2i+1]) over the first n_rot dims of each head, by the
     * angles of cs (kernels/rope.h's st_rope_cs: cs[2i] = cos, cs[2i+1] =
     * sin of pair i): x0' = x0 c - x1 s, x1' = x0 s + x1 c. x: [n_head,
     * head_dim]; the dims after n_rot are left as they are. */
    void (*rope)(float *x, int64_t n_head, int64_t head_dim, int64_t n_rot, const float *cs);

    /* rope_neox - rope with GPT-NeoX's pairing (x[i], x[i + n_rot/2]),
     * i < n_rot/2 (qwen2 and other NEOX-layout architectures); the same
     * multiplications per pair. */
    void (*rope_neox)(float *x, int64_t n_head, int64_t head_dim, int64_t n_rot, const float *cs);

    /* softmax - in place, max-subtracted; sum accumulated in double. */
    void (*softmax)(float *x, int64_t n);

    /* silu_mul - g[i] = silu(g[i]) * u[i], silu(x) = x / (1 + exp(-x)). */
    void (*silu_mul)(float *g, const float *u, int64_t n);

    /* gelu_mul - g[i] = gelu(g[i]) * u[i] with the tanh GELU
     * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) as llama.cpp's CPU
     * backend computes it: 0 for x <= -10, x for x >= 10, else x rounded
     * to f16, its GELU in f32 rounded to f16 (ggml's f16 table). */
    void (*gelu_mul)(float *g, const float *u, int64_t n);

    /* add - y[i] += x[i]. */
    void (*add)(float *y, const float *x, int64_t n);

    /* attn_head - one query head of one token against its KV head over a
     * typed cache (st_attn_args). Scores s_t = scale * dot(q, k_t), then
     * s_t = softcap * tanh(s_t / softcap) when softcap != 0, softmax over
     * [kv0, n_kv), out = sum_t p_t * v_t. K and V rows are dequantized on
     * the fly (q stays f32; a Q8_0 block's dot is sum(q_i * qs_i) times the
     * block's d, a V element is d * qs_i); no variant quantizes q. F32 with
     * kv0 = 0 and softcap = 0 computes what the f32-only kernel computed
     * before the typed cache, bit for bit. */
    void (*attn_head)(const st_attn_args *a);

    /* argmax - index of the largest value (first one on ties). */
    int64_t (*argmax)(const float *x, int64_t n);
} st_kernel_ops;

/* st_kvariant_name - "ref", "avx2", "avx512" (the name field of the
 * variant's table), or NULL if v is out of range. */
const char *st_kvariant_name(st_kvariant v);

/* st_kvariant_from_name - the variant st_kvariant_name calls name, or
 * ST_KVAR_COUNT if none does. */
st_kvariant st_kvariant_from_name(const char *name);

/* st_kernels_cpu_has - whether this CPU implements the instructions of
 * variant v (cpuid) and the OS saves their registers (xgetbv), whether or
 * not this build contains v's table: true for ST_KVAR_REF, false for
 * ST_KVAR_COUNT and on non-x86 machines for the SIMD variants. */
bool st_kernels_cpu_has(st_kvariant v);

/* st_kernels_get - the table of variant v, or NULL if v is not compiled in
 * or not supported by this CPU and OS (st_kernels_cpu_has). Ignores
 * STRATA_KERNELS (which only the selectors read). */
const st_kernel_ops *st_kernels_get(st_kvariant v);

/* st_kernels_select - the fastest supported variant, or the reference when
 * force_ref is nonzero or the environment sets STRATA_KERNELS=ref. */
const st_kernel_ops *st_kernels_select(int force_ref);

/* st_kernels_ref - the scalar reference table (never NULL). */
const st_kernel_ops *st_kernels_ref(void);

#endif
