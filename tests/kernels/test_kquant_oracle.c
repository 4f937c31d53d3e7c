/* test_kquant_oracle.c - dequantization bit for bit as llama.cpp's.
 *
 * tests/kernels/data/kquant_dequant_ref.json holds, for every K-quant
 * (Q2_K .. Q6_K), legacy or IQ4 quant (Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS)
 * and BF16 tensor of the shared files synth-s-q2_k, -q3_k_m, -q4_k_m,
 * -q5_k_m, -q6_k, -bf16.gguf and w3-qwen3-q4_1, -q5_0, -q5_1, -iq4_nl,
 * -iq4_xs.gguf, the FNV-1a 64 digest of the f32 values llama.cpp's own
 * dequantizer (ggml's to_float) gives, and the digest of the Q8_1 blocks
 * ggml's reference quantizer writes for a fixed input (written by
 * gen_kquant_ref.sh, which needs a llama.cpp build; the suite does not):
 * each variant's from_float[Q8_1] of the same input must write the same
 * bytes. Each variant's to_float of the same tensors, row by row, must
 * give the same digest: equal bytes. The file's tensor set must equal the
 * JSON's (no tensor left out on either side), and the type recorded by
 * llama.cpp must be the one Strata reads.
 * A suite of the 'kernels' test (test_kernels.c runs it). */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/kernels.h"
#include "tests/kernels/tk_gguf.h"
#include "tests/kernels/tk_suites.h"
#include "tests/kernels/tk_util.h"

#ifndef TQO_DATA_DIR
#error "TQO_DATA_DIR (tests/kernels/data) must be defined by the build"
#endif
#define TQO_JSON TQO_DATA_DIR "/kquant_dequant_ref.json"
#define TQO_FNV_OFFSET 0xcbf29ce484222325ull /* FNV-1a 64 offset basis */
#define TQO_FNV_PRIME 0x100000001b3ull       /* FNV-1a 64 prime */
#define TQO_N_FILES 11                       /* the files the JSON must cover */
#define TQO_Q8_1_N 4096 /* values of the Q8_1 quantizer's input (gen_kquant_ref.c's) */

static const char *const tqo_files[TQO_N_FILES] = {"synth-s-q2_k.gguf",   "synth-s-q3_k_m.gguf",
                                                   "synth-s-q4_k_m.gguf", "synth-s-q5_k_m.gguf",
                                                   "synth-s-q6_k.gguf",   "synth-s-bf16.gguf",
                                                   "w3-qwen3-q4_1.gguf",  "w3-qwen3-q5_0.gguf",
                                                   "w3-qwen3-q5_1.gguf",  "w3-qwen3-iq4_nl.gguf",
                                                   "w3-qwen3-iq4_xs.gguf"};

/* tqo_fnv1a64 - FNV-1a 64 of n bytes, continuing from h (the same as
 * gen_kquant_ref.c's). */
static uint64_t tqo_fnv1a64(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= TQO_FNV_PRIME;
    }
    return h;
}

/* tqo_checked - the dtypes the oracle covers. */
static int tqo_checked(st_dtype t)
{
    return t == ST_DT_BF16 || (t >= ST_DT_Q2_K && t <= ST_DT_Q6_K) ||
           (t >= ST_DT_Q4_1 && t <= ST_DT_IQ4_XS);
}

static cJSON *tqo_load_json(void)
{
    FILE *f = fopen(TQO_JSON, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", TQO_JSON);
    ck_assert(fseek(f, 0, SEEK_END) == 0);
    const long len = ftell(f);
    ck_assert(len > 0 && fseek(f, 0, SEEK_SET) == 0);
    char *buf = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert(fread(buf, 1, (size_t)len, f) == (size_t)len);
    buf[len] = '\0';
    fclose(f);
    cJSON *root = cJSON_Parse(buf);
    free(buf);
    ck_assert_msg(root != NULL, "%s: not JSON", TQO_JSON);
    return root;
}

/* tqo_digest - variant ops' to_float of tensor q of g, row by row, as one
 * FNV-1a 64 over the f32 bytes. */
static uint64_t tqo_digest(const st_kernel_ops *ops, const tk_gguf *g, const tk_tensor *q,
                           st_dtype t)
{
    size_t rs;
    ck_assert_int_eq(st_row_size(t, q->ne0, &rs), ST_K_OK);
    const int64_t rows = q->nelem / q->ne0;
    ck_assert(q->nelem % q->ne0 == 0 && g->data + q->off + (size_t)rows * rs <= g->buf + g->len);
    uint8_t *w = malloc(rs);
    float *y = malloc(sizeof(float) * (size_t)q->ne0);
    ck_assert(w != NULL && y != NULL);
    uint64_t h = TQO_FNV_OFFSET;
    for (int64_t row = 0; row < rows; row++) {
        memcpy(w, g->data + q->off + (size_t)row * rs, rs); /* aligned copy */
        ops->to_float[t](w, y, q->ne0);
        h = tqo_fnv1a64(h, y, sizeof(float) * (size_t)q->ne0);
    }
    free(w);
    free(y);
    return h;
}

/* tqo_check_file - compares every entry of the file's JSON array; returns
 * the number of tensors compared, adding them per dtype to per_type. */
static int tqo_check_file(const st_kernel_ops *ops, const char *file, const cJSON *entries,
                          int per_type[ST_DT_COUNT])
{
    tk_gguf g;
    tk_gguf_load(&g, file);
    int in_file = 0, compared = 0;
    for (uint64_t i = 0; i < g.nt; i++) {
        st_dtype t;
        if (st_dtype_from_ggml(g.t[i].type, &t) == ST_K_OK && tqo_checked(t))
            in_file++;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, entries)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "tensor");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(e, "type");
        const cJSON *nelem = cJSON_GetObjectItemCaseSensitive(e, "nelem");
        const cJSON *digest = cJSON_GetObjectItemCaseSensitive(e, "fnv1a64");
        ck_assert_msg(cJSON_IsString(name) && cJSON_IsString(type) && cJSON_IsNumber(nelem) &&
                          cJSON_IsString(digest),
                      "%s: malformed entry", file);
        const tk_tensor *q = tk_gguf_find(&g, name->valuestring);
        ck_assert_msg(q != NULL, "%s: no tensor %s", file, name->valuestring);
        st_dtype t;
        ck_assert_int_eq(st_dtype_from_ggml(q->type, &t), ST_K_OK);
        ck_assert_msg(tqo_checked(t) &&
                          strcasecmp(st_dtype_info_of(t)->name, type->valuestring) == 0,
                      "%s %s: llama.cpp type %s, Strata reads %s", file, q->name, type->valuestring,
                      st_dtype_info_of(t)->name);
        ck_assert_msg((double)q->nelem == nelem->valuedouble, "%s %s: element count", file,
                      q->name);
        char got[17];
        snprintf(got, sizeof got, "%016llx", (unsigned long long)tqo_digest(ops, &g, q, t));
        ck_assert_msg(strcmp(got, digest->valuestring) == 0,
                      "%s: %s %s (%s): dequantized digest %s, llama.cpp's %s", ops->name, file,
                      q->name, st_dtype_info_of(t)->name, got, digest->valuestring);
        per_type[t]++;
        compared++;
    }
    ck_assert_msg(compared == in_file,
                  "%s: %d tensors in the JSON, %d of the checked types in "
                  "the file",
                  file, compared, in_file);
    free(g.buf);
    free(g.t);
    return compared;
}

START_TEST(test_dequant_equals_llama_cpp)
{
    const st_kernel_ops *ops = tk_variant(_i);
    cJSON *root = tqo_load_json();
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    ck_assert(cJSON_IsObject(files));
    ck_assert_int_eq(cJSON_GetArraySize(files), TQO_N_FILES);
    int per_type[ST_DT_COUNT] = {0};
    for (int k = 0; k < TQO_N_FILES; k++) {
        const cJSON *entries = cJSON_GetObjectItemCaseSensitive(files, tqo_files[k]);
        ck_assert_msg(cJSON_IsArray(entries), "%s: no %s", TQO_JSON, tqo_files[k]);
        const int n = tqo_check_file(ops, tqo_files[k], entries, per_type);
        printf("kquant oracle: %s %-20s %3d tensors equal to llama.cpp's dequantization\n",
               ops->name, tqo_files[k], n);
    }
    for (int t = 0; t < ST_DT_COUNT; t++)
        if (tqo_checked((st_dtype)t))
            ck_assert_msg(per_type[t] > 0, "no %s tensor compared", st_dtype_info_of(t)->name);
    cJSON_Delete(root);
}
END_TEST

/* tqo_q8_1_input - gen_kquant_ref.c's fixed input (gk_q8_1_input): exact
 * integers / 137, block 5 zeros, block 6 all -3.25. */
static void tqo_q8_1_input(float *x)
{
    for (uint32_t i = 0; i < TQO_Q8_1_N; i++)
        x[i] = (float)((int)((i * 2654435761u) % 2001u) - 1000) / 137.0f;
    for (int i = 5 * ST_QK; i < 6 * ST_QK; i++)
        x[i] = 0.0f;
    for (int i = 6 * ST_QK; i < 7 * ST_QK; i++)
        x[i] = -3.25f;
}

START_TEST(test_q8_1_equals_llama_cpp)
{
    const st_kernel_ops *ops = tk_variant(_i);
    cJSON *root = tqo_load_json();
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "q8_1_quantize");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(q, "n");
    const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(q, "bytes");
    const cJSON *digest = cJSON_GetObjectItemCaseSensitive(q, "fnv1a64");
    ck_assert_msg(cJSON_IsNumber(n) && cJSON_IsNumber(bytes) && cJSON_IsString(digest),
                  "%s: no q8_1_quantize entry", TQO_JSON);
    ck_assert(n->valuedouble == TQO_Q8_1_N);
    size_t rs;
    ck_assert_int_eq(st_row_size(ST_DT_Q8_1, TQO_Q8_1_N, &rs), ST_K_OK);
    ck_assert((double)rs == bytes->valuedouble);
    float *x = tk_alloc(sizeof(float) * TQO_Q8_1_N);
    uint8_t *b = tk_alloc(rs);
    tqo_q8_1_input(x);
    ops->from_float[ST_DT_Q8_1](x, b, TQO_Q8_1_N);
    char got[17];
    snprintf(got, sizeof got, "%016llx", (unsigned long long)tqo_fnv1a64(TQO_FNV_OFFSET, b, rs));
    ck_assert_msg(strcmp(got, digest->valuestring) == 0,
                  "%s: Q8_1 blocks digest %s, llama.cpp's quantize_row_q8_1_ref %s", ops->name, got,
                  digest->valuestring);
    printf("kquant oracle: %s q8_1 quantizer equal to llama.cpp's on %d values\n", ops->name,
           TQO_Q8_1_N);
    free(x);
    free(b);
    cJSON_Delete(root);
}
END_TEST

Suite *tqo_oracle_suite(void)
{
    Suite *s = suite_create("kquant_oracle");
    tk_variants_print("kquant_oracle");
    TCase *tc = tcase_create("kquant_oracle");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_dequant_equals_llama_cpp, 0, tk_variant_count());
    tcase_add_loop_test(tc, test_q8_1_equals_llama_cpp, 0, tk_variant_count());
    suite_add_tcase(s, tc);
    return s;
}
