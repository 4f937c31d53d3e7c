/* golden.c - golden cases for the engine tests (see golden.h). */
#include "tests/engine/golden.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *golden_path(char *buf, size_t cap, const char *sub, const char *name)
{
    const char *root = getenv("STRATA_SHARED");
    snprintf(buf, cap, "%s/%s/%s", root ? root : "../shared", sub, name);
    return buf;
}

static char *golden_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        *len = (size_t)n;
    }
    return b;
}

static int32_t *golden_ids(const cJSON *arr, size_t *n)
{
    int k = cJSON_GetArraySize(arr);
    int32_t *v = malloc(sizeof *v * (size_t)(k > 0 ? k : 1));
    for (int i = 0; i < k; i++)
        v[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
    *n = (size_t)k;
    return v;
}

size_t golden_load(golden_case **cases) { return golden_load_dir("golden", cases); }

size_t golden_load_dir(const char *dir, golden_case **cases)
{
    char p[512];
    size_t len;
    char *txt = golden_slurp(golden_path(p, sizeof p, dir, "generation.json"), &len);
    if (txt == NULL)
        return 0;
    cJSON *root = cJSON_Parse(txt);
    free(txt);
    if (root == NULL)
        return 0;
    const cJSON *arr = cJSON_GetObjectItem(root, "cases");
    int n = cJSON_GetArraySize(arr);
    golden_case *c = calloc((size_t)n, sizeof *c);
    for (int i = 0; i < n; i++) {
        const cJSON *o = cJSON_GetArrayItem(arr, i);
        snprintf(c[i].model, sizeof c[i].model, "%s", cJSON_GetObjectItem(o, "model")->valuestring);
        snprintf(c[i].logits_file, sizeof c[i].logits_file, "%s",
                 cJSON_GetObjectItem(o, "logits_file")->valuestring);
        c[i].prompt = golden_ids(cJSON_GetObjectItem(o, "prompt_ids"), &c[i].n_prompt);
        c[i].expected = golden_ids(cJSON_GetObjectItem(o, "expected_ids"), &c[i].n);
        c[i].n_vocab = (int64_t)cJSON_GetObjectItem(o, "n_vocab")->valuedouble;
        snprintf(c[i].dir, sizeof c[i].dir, "%s", dir);
    }
    cJSON_Delete(root);
    *cases = c;
    return (size_t)n;
}

void golden_free(golden_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(cases[i].prompt);
        free(cases[i].expected);
    }
    free(cases);
}

float *golden_read_logits(const golden_case *gc)
{
    char p[512];
    size_t len;
    char *b = golden_slurp(golden_path(p, sizeof p, gc->dir, gc->logits_file), &len);
    if (b == NULL)
        return NULL;
    if (len != gc->n * (size_t)gc->n_vocab * sizeof(float)) {
        free(b);
        return NULL;
    }
    return (float *)b;
}
