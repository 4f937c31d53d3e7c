/* dtype.c - the static table of Strata's dtypes.
 *
 * One row per st_dtype: its name, block geometry, the dtype activations are
 * converted to before a product with it, and its ggml/GGUF type number.
 * Row sizes are computed only here, and never by truncating division: a
 * length that is not a whole number of blocks is an error (ST_K_ESHAPE). */
#include "kernels/kernels.h"

#include <string.h>

/* f16 and bf16 elements are their 16-bit patterns. */
static const st_dtype_info dtype_table[ST_DT_COUNT] = {
    [ST_DT_F32] = {.name = "f32",
                   .ggml_type = ST_GGML_TYPE_F32,
                   .act = ST_DT_F32,
                   .blck = 1,
                   .blck_bytes = sizeof(float)},
    [ST_DT_F16] = {.name = "f16",
                   .ggml_type = ST_GGML_TYPE_F16,
                   .act = ST_DT_F16,
                   .blck = 1,
                   .blck_bytes = sizeof(uint16_t)},
    [ST_DT_BF16] = {.name = "bf16",
                    .ggml_type = ST_GGML_TYPE_BF16,
                    .act = ST_DT_BF16,
                    .blck = 1,
                    .blck_bytes = sizeof(uint16_t)},
    [ST_DT_Q8_0] = {.name = "q8_0",
                    .ggml_type = ST_GGML_TYPE_Q8_0,
                    .act = ST_DT_Q8_0,
                    .blck = ST_QK,
                    .blck_bytes = sizeof(st_block_q8_0)},
    [ST_DT_Q4_0] = {.name = "q4_0",
                    .ggml_type = ST_GGML_TYPE_Q4_0,
                    .act = ST_DT_Q8_0,
                    .blck = ST_QK,
                    .blck_bytes = sizeof(st_block_q4_0)},
    [ST_DT_Q2_K] = {.name = "q2_k",
                    .ggml_type = ST_GGML_TYPE_Q2_K,
                    .act = ST_DT_Q8_K,
                    .blck = ST_QK_K,
                    .blck_bytes = sizeof(st_block_q2_k)},
    [ST_DT_Q3_K] = {.name = "q3_k",
                    .ggml_type = ST_GGML_TYPE_Q3_K,
                    .act = ST_DT_Q8_K,
                    .blck = ST_QK_K,
                    .blck_bytes = sizeof(st_block_q3_k)},
    [ST_DT_Q4_K] = {.name = "q4_k",
                    .ggml_type = ST_GGML_TYPE_Q4_K,
                    .act = ST_DT_Q8_K,
                    .blck = ST_QK_K,
                    .blck_bytes = sizeof(st_block_q4_k)},
    [ST_DT_Q5_K] = {.name = "q5_k",
                    .ggml_type = ST_GGML_TYPE_Q5_K,
                    .act = ST_DT_Q8_K,
                    .blck = ST_QK_K,
                    .blck_bytes = sizeof(st_block_q5_k)},
    [ST_DT_Q6_K] = {.name = "q6_k",
                    .ggml_type = ST_GGML_TYPE_Q6_K,
                    .act = ST_DT_Q8_K,
                    .blck = ST_QK_K,
                    .blck_bytes = sizeof(st_block_q6_k)},
    [ST_DT_Q8_K] = {.name = "q8_k",
                    .ggml_type = ST_GGML_TYPE_Q8_K,
                    .act = ST_DT_Q8_K,
                    .blck = ST_QK_K,
                    .blck_bytes = sizeof(st_block_q8_k)},
    [ST_DT_Q4_1] = {.name = "q4_1",
                    .ggml_type = ST_GGML_TYPE_Q4_1,
                    .act = ST_DT_Q8_1,
                    .blck = ST_QK,
                    .blck_bytes = sizeof(st_block_q4_1)},
    [ST_DT_Q5_0] = {.name = "q5_0",
                    .ggml_type = ST_GGML_TYPE_Q5_0,
                    .act = ST_DT_Q8_0,
                    .blck = ST_QK,
                    .blck_bytes = sizeof(st_block_q5_0)},
    [ST_DT_Q5_1] = {.name = "q5_1",
                    .ggml_type = ST_GGML_TYPE_Q5_1,
                    .act = ST_DT_Q8_1,
                    .blck = ST_QK,
                    .blck_bytes = sizeof(st_block_q5_1)},
    [ST_DT_IQ4_NL] = {.name = "iq4_nl",
                      .ggml_type = ST_GGML_TYPE_IQ4_NL,
                      .act = ST_DT_Q8_0,
                      .blck = ST_QK,
                      .blck_bytes = sizeof(st_block_iq4_nl)},
    [ST_DT_IQ4_XS] = {.name = "iq4_xs",
                      .ggml_type = ST_GGML_TYPE_IQ4_XS,
                      .act = ST_DT_Q8_K,
                      .blck = ST_QK_K,
                      .blck_bytes = sizeof(st_block_iq4_xs)},
    [ST_DT_Q8_1] = {.name = "q8_1",
                    .ggml_type = ST_GGML_TYPE_Q8_1,
                    .act = ST_DT_Q8_1,
                    .blck = ST_QK,
                    .blck_bytes = sizeof(st_block_q8_1)},
};

const st_dtype_info *st_dtype_info_of(st_dtype t)
{
    if ((int)t < 0 || t >= ST_DT_COUNT)
        return NULL;
    return &dtype_table[t];
}

int st_dtype_from_ggml(uint32_t ggml_type, st_dtype *out)
{
    for (int t = 0; t < ST_DT_COUNT; t++) {
        if (dtype_table[t].ggml_type == ggml_type) {
            *out = (st_dtype)t;
            return ST_K_OK;
        }
    }
    return ST_K_ETYPE;
}

int st_dtype_from_name(const char *name, st_dtype *out)
{
    if (name == NULL)
        return ST_K_ETYPE;
    for (int t = 0; t < ST_DT_COUNT; t++) {
        if (strcmp(dtype_table[t].name, name) == 0) {
            *out = (st_dtype)t;
            return ST_K_OK;
        }
    }
    return ST_K_ETYPE;
}

int st_row_size(st_dtype t, int64_t n, size_t *out)
{
    const st_dtype_info *info = st_dtype_info_of(t);
    if (info == NULL)
        return ST_K_ETYPE;
    if (n < 0 || n % info->blck != 0)
        return ST_K_ESHAPE;
    uint64_t nblocks = (uint64_t)(n / info->blck);
    if (nblocks > SIZE_MAX / info->blck_bytes)
        return ST_K_ESHAPE;
    *out = (size_t)nblocks * info->blck_bytes;
    return ST_K_OK;
}
