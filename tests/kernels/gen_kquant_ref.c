/* gen_kquant_ref.c - the dequantization oracle: llama.cpp's own to_float
 * (ggml_get_type_traits(type)->to_float, from libggml-base) applied to every
 * K-quant (Q2_K .. Q6_K), legacy or IQ4 quant (Q4_1, Q5_0, Q5_1, IQ4_NL,
 * IQ4_XS) and BF16 tensor of the GGUF files named on the command line;
 * prints, as JSON on stdout, one FNV-1a 64 digest of the dequantized f32
 * bytes (native little-endian order) per tensor, and the digest of the
 * block bytes ggml's reference Q8_1 quantizer (from_float_ref of
 * GGML_TYPE_Q8_1) writes for a fixed input (gk_q8_1_input).
 *
 * Not part of the product nor of the meson build (CI has no llama.cpp):
 * gen_kquant_ref.sh beside this file compiles it against ~/.cache/llama-ref
 * and writes tests/kernels/data/kquant_dequant_ref.json, which the kernel
 * test suite (test_kquant_oracle.c) compares Strata's to_float against.
 *
 *   gen_kquant_ref REFERENCE DIR FILE.gguf...
 *     REFERENCE: a one-line description of the llama.cpp build (recorded
 *     in the JSON); files are read from DIR/FILE.gguf.
 *
 * Exit status 0 on success; 1 with a message on stderr on any error (a
 * missing file, a truncated tensor, an unsupported type). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "gguf.h"

#define GK_FNV_OFFSET 0xcbf29ce484222325ull /* FNV-1a 64 offset basis */
#define GK_FNV_PRIME 0x100000001b3ull       /* FNV-1a 64 prime */
#define GK_PATH_MAX 4096

/* gk_fnv1a64 - FNV-1a 64 of n bytes, continuing from h. */
static uint64_t gk_fnv1a64(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= GK_FNV_PRIME;
    }
    return h;
}

/* gk_wanted - the types whose dequantization the oracle records. */
static int gk_wanted(enum ggml_type t)
{
    return t == GGML_TYPE_Q2_K || t == GGML_TYPE_Q3_K || t == GGML_TYPE_Q4_K ||
           t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K || t == GGML_TYPE_BF16 ||
           t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1 ||
           t == GGML_TYPE_IQ4_NL || t == GGML_TYPE_IQ4_XS;
}

#define GK_Q8_1_N 4096 /* values of the Q8_1 quantizer's input (128 blocks) */

/* gk_q8_1_input - the fixed input of the Q8_1 digest, exact in float on
 * any machine: integers in [-1000, 1000] / 137, one block of zeros (block
 * 5), one block whose values are all equal (block 6). The same formula is
 * in test_legacy.c. */
static void gk_q8_1_input(float *x)
{
    for (uint32_t i = 0; i < GK_Q8_1_N; i++)
        x[i] = (float)((int)((i * 2654435761u) % 2001u) - 1000) / 137.0f;
    for (int i = 5 * 32; i < 6 * 32; i++)
        x[i] = 0.0f;
    for (int i = 6 * 32; i < 7 * 32; i++)
        x[i] = -3.25f;
}

/* gk_q8_1 - prints the digest of ggml's reference Q8_1 blocks of the fixed
 * input; 0 or -1. */
static int gk_q8_1(void)
{
    const struct ggml_type_traits *tr = ggml_get_type_traits(GGML_TYPE_Q8_1);
    float *x = malloc(sizeof(float) * GK_Q8_1_N);
    const size_t bytes = ggml_row_size(GGML_TYPE_Q8_1, GK_Q8_1_N);
    void *q = malloc(bytes);
    if (x == NULL || q == NULL || tr->from_float_ref == NULL) {
        fprintf(stderr, "gen_kquant_ref: no Q8_1 reference quantizer\n");
        free(x);
        free(q);
        return -1;
    }
    gk_q8_1_input(x);
    tr->from_float_ref(x, q, GK_Q8_1_N);
    printf("  \"q8_1_quantize\": {\"n\": %d, \"bytes\": %zu, \"fnv1a64\": \"%016" PRIx64 "\"},\n",
           GK_Q8_1_N, bytes, gk_fnv1a64(GK_FNV_OFFSET, q, bytes));
    free(x);
    free(q);
    return 0;
}

/* gk_file - prints the JSON array of one file's digests; 0 or -1. */
static int gk_file(const char *dir, const char *name)
{
    char path[GK_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct gguf_init_params ip = {.no_alloc = true, .ctx = NULL};
    struct gguf_context *g = gguf_init_from_file(path, ip);
    if (g == NULL) {
        fprintf(stderr, "gen_kquant_ref: cannot read %s\n", path);
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "gen_kquant_ref: cannot open %s\n", path);
        gguf_free(g);
        return -1;
    }
    int rc = 0, first = 1;
    printf("    \"%s\": [", name);
    for (int64_t i = 0; i < gguf_get_n_tensors(g) && rc == 0; i++) {
        const enum ggml_type t = gguf_get_tensor_type(g, i);
        if (!gk_wanted(t))
            continue;
        const struct ggml_type_traits *tr = ggml_get_type_traits(t);
        const int64_t *ne = gguf_get_tensor_ne(g, i);
        int64_t nelem = 1;
        for (int d = 0; d < GGML_MAX_DIMS; d++)
            nelem *= ne[d];
        const size_t bytes = gguf_get_tensor_size(g, i);
        void *q = malloc(bytes);
        float *y = malloc(sizeof(float) * (size_t)nelem);
        if (q == NULL || y == NULL || tr->to_float == NULL ||
            fseek(f, (long)(gguf_get_data_offset(g) + gguf_get_tensor_offset(g, i)), SEEK_SET) ||
            fread(q, 1, bytes, f) != bytes) {
            fprintf(stderr, "gen_kquant_ref: %s: cannot read tensor %s\n", path,
                    gguf_get_tensor_name(g, i));
            rc = -1;
        } else {
            tr->to_float(q, y, nelem);
            const uint64_t h = gk_fnv1a64(GK_FNV_OFFSET, y, sizeof(float) * (size_t)nelem);
            printf("%s\n      {\"tensor\": \"%s\", \"type\": \"%s\", \"ne0\": %" PRId64
                   ", \"nelem\": %" PRId64 ", \"fnv1a64\": \"%016" PRIx64 "\"}",
                   first ? "" : ",", gguf_get_tensor_name(g, i), ggml_type_name(t), ne[0], nelem,
                   h);
            first = 0;
        }
        free(q);
        free(y);
    }
    printf("\n    ]");
    fclose(f);
    gguf_free(g);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 4 || strchr(argv[1], '"') != NULL || strchr(argv[1], '\\') != NULL) {
        fprintf(stderr, "usage: gen_kquant_ref REFERENCE DIR FILE.gguf...\n");
        return 1;
    }
    printf("{\n  \"reference\": \"%s\",\n", argv[1]);
    printf("  \"digest\": \"FNV-1a 64 of the dequantized f32 bytes (little-endian)\",\n");
    if (gk_q8_1() != 0)
        return 1;
    printf("  \"files\": {\n");
    for (int a = 3; a < argc; a++) {
        if (gk_file(argv[2], argv[a]) != 0)
            return 1;
        printf("%s\n", a + 1 < argc ? "," : "");
    }
    printf("  }\n}\n");
    return 0;
}
