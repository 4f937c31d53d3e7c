/* test_llama.c - common/model/llama.h on every model in $STRATA_SHARED/models:
 * the worker's and the coordinator's counts of a stage's bytes agree.
 *
 * For each GGUF file and each stage [a, b) of it: the bytes the worker's
 * Prepare checks (st_minfo_stage_bytes) equal the bytes the stage engine
 * binds when it loads that stage (st_model_weight_bytes), and the bytes
 * the coordinator's placement holds the stage to (st_place_stage_bytes
 * over the same st_minfo) equal them too, KV included: a reserve of
 * kv_tokens per layer is st_kv_bytes of the stage, the worker's count, in
 * each cache type (f32, f16, and q8_0 where the heads admit it).
 * One difference is known and pinned here: for a single stage of a model
 * with a tied head, placement counts the embedding twice (as the first
 * stage's and as the head's), the worker once (it binds one tensor). */
#include <check.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/opt.h"
#include "common/model/gguf_write.h"
#include "common/model/llama.h"
#include "coordinator/planner/placement.h"
#include "worker/engine/model.h"

#define TL_KV_CTX 64     /* positions per session in the KV reserve checked */
#define TL_KV_SESSIONS 3 /* sessions in it */
#define TL_PATH_MAX 1024

static char tl_dir[TL_PATH_MAX];

static void tl_setup(void)
{
    const char *sh = getenv("STRATA_SHARED");
    snprintf(tl_dir, sizeof tl_dir, "%s/models", sh ? sh : "../shared");
}

/* tl_refused - whether a wave-3 file (models/README.md) was refused as a
 * file the engine does not support yet (issue 35/36: an architecture, a
 * quant type, rope scaling or experts), by name: ST_ETYPE or ST_EINVAL
 * whose detail says what is not supported. Any other error, or any error
 * on another file, fails. */
static bool tl_refused(const char *path, bool wave3, st_err e)
{
    if (e == ST_OK)
        return false;
    ck_assert_msg(wave3 && (e == ST_ETYPE || e == ST_EINVAL) &&
                      strstr(st_errdetail(), "support") != NULL,
                  "%s: %s", path, st_errmsg(e));
    printf("%s: refused: %s\n", path, st_errmsg(e));
    return true;
}

/* tl_check_experts - a mixture of experts' facts: the counts of its
 * hyperparameters, each layer's expert bytes those of its three stacked
 * tensors, and a token's active bytes the layer's with n_used of n_expert
 * experts (the layer's own in a dense model). */
static void tl_check_experts(const char *path, const st_gguf *g, const st_hparams *hp,
                             const st_minfo *mi)
{
    ck_assert_uint_eq(mi->n_expert, (uint32_t)hp->n_expert);
    ck_assert_uint_eq(mi->n_expert_used, (uint32_t)hp->n_expert_used);
    const st_arch_tensor exps[] = {ST_AT_FFN_GATE_EXPS, ST_AT_FFN_UP_EXPS, ST_AT_FFN_DOWN_EXPS};
    for (uint32_t l = 0; l < mi->n_layer; l++) {
        uint64_t want = 0;
        for (size_t k = 0; k < sizeof exps / sizeof exps[0]; k++) {
            const st_gguf_tensor *t = st_arch_find(g, exps[k], l);
            ck_assert_msg((t != NULL) == (hp->n_expert > 0), "%s layer %u", path, l);
            want += t != NULL ? t->nbytes : 0;
        }
        ck_assert_uint_eq(mi->layer_expert_bytes[l], want);
        const uint64_t active = st_minfo_layer_active_bytes(mi, l);
        if (hp->n_expert == 0) {
            ck_assert_uint_eq(active, mi->layer_bytes[l]);
            continue;
        }
        ck_assert_uint_eq(active, mi->layer_bytes[l] - want +
                                      want / (uint64_t)hp->n_expert * (uint64_t)hp->n_expert_used);
        ck_assert_uint_lt(active, mi->layer_bytes[l]);
        printf("%s: layer %u: %llu bytes, %llu of them experts; a token reads %llu\n", path, l,
               (unsigned long long)mi->layer_bytes[l], (unsigned long long)want,
               (unsigned long long)active);
    }
}

/* tl_check_model - every assertion of the file comment on one file; false
 * when it is a wave-3 file refused by name (tl_refused). */
static bool tl_check_model(const char *path, bool wave3, int *n_stages)
{
    st_gguf *g;
    st_err e = st_gguf_open(path, &g);
    if (tl_refused(path, wave3, e))
        return false;
    st_hparams hp;
    st_minfo mi;
    e = st_hparams_from_gguf(g, &hp);
    if (tl_refused(path, wave3, e)) {
        st_gguf_close(g);
        return false;
    }
    e = st_minfo_from_gguf(g, &mi);
    ck_assert_msg(e == ST_OK, "%s: %s", path, st_errmsg(e));
    /* one reader: the coordinator's facts are the engine's hyperparameters */
    ck_assert_int_eq(mi.n_layer, hp.n_layer);
    ck_assert_int_eq(mi.n_embd, hp.n_embd);
    ck_assert_int_eq(mi.n_head, hp.n_head);
    ck_assert_int_eq(mi.n_head_kv, hp.n_head_kv);
    ck_assert_int_eq(mi.n_vocab, hp.n_vocab);
    ck_assert_int_eq(mi.n_ctx_train, hp.n_ctx_train);
    ck_assert_uint_eq(mi.kv_bytes_per_token_layer, st_kv_bytes(1, 1, hp.kv_dim, ST_KV_DEFAULT_DTYPE));
    ck_assert_int_eq(mi.kv_dim, hp.kv_dim);
    ck_assert_int_eq(mi.head_dim, hp.head_dim);
    ck_assert_uint_eq(mi.head_tied, st_arch_head_tied(g));
    tl_check_experts(path, g, &hp, &mi);
    st_place_model pm = {.n_layer = mi.n_layer,
                         .layer_bytes = mi.layer_bytes,
                         .embd_bytes = mi.embd_bytes,
                         .head_bytes = mi.head_bytes,
                         .stage_bytes = mi.rope_bytes,
                         .kv_bytes_per_token_layer = mi.kv_bytes_per_token_layer};
    const uint64_t kv_tokens = (uint64_t)TL_KV_CTX * TL_KV_SESSIONS;
    for (uint32_t a = 0; a < mi.n_layer; a++)
        for (uint32_t b = a + 1; b <= mi.n_layer; b++) {
            st_model *m;
            e = st_model_open_gguf(g, a, b, &m);
            ck_assert_msg(e == ST_OK, "%s [%u, %u): %s", path, a, b, st_errmsg(e));
            const uint64_t worker = st_minfo_stage_bytes(&mi, a, b);
            ck_assert_msg(worker == st_model_weight_bytes(m),
                          "%s [%u, %u): the worker checks %llu bytes, the engine binds %zu", path,
                          a, b, (unsigned long long)worker, st_model_weight_bytes(m));
            st_model_close(m);
            /* every cache type the model's heads admit, placed as a coordinator
             * with that --cache-type places it (coord.c) */
            const st_dtype kvt[] = {ST_DT_F32, ST_DT_F16, ST_DT_Q8_0};
            for (size_t k = 0; k < sizeof kvt / sizeof kvt[0]; k++) {
                if (st_kv_dtype_check(kvt[k], hp.head_dim) != ST_OK)
                    continue;
                pm.kv_bytes_per_token_layer = st_kv_bytes(1, 1, mi.kv_dim, kvt[k]);
                const uint64_t kv =
                    st_kv_bytes(b - a, TL_KV_CTX, hp.kv_dim, kvt[k]) * TL_KV_SESSIONS;
                uint64_t place = st_place_stage_bytes(&pm, kv_tokens, a, b);
                if (a == 0 && b == mi.n_layer && mi.head_tied)
                    place -= mi.embd_bytes; /* the known difference (file comment) */
                ck_assert_msg(place == worker + kv,
                              "%s [%u, %u) %s: placement holds %llu bytes, the worker %llu + "
                              "%llu KV",
                              path, a, b, st_dtype_info_of(kvt[k])->name,
                              (unsigned long long)place, (unsigned long long)worker,
                              (unsigned long long)kv);
            }
            st_errclear();
            (*n_stages)++;
        }
    st_minfo_free(&mi);
    st_gguf_close(g);
    return true;
}

START_TEST(worker_and_coordinator_agree)
{
    DIR *dir = opendir(tl_dir);
    ck_assert_msg(dir != NULL, "cannot open %s", tl_dir);
    int n_models = 0, n_stages = 0, n_tied = 0, n_refused = 0;
    for (struct dirent *de; (de = readdir(dir)) != NULL;) {
        size_t len = strlen(de->d_name);
        const char *ext = ".gguf";
        if (len <= strlen(ext) || strcmp(de->d_name + len - strlen(ext), ext) != 0)
            continue;
        char path[TL_PATH_MAX * 2];
        snprintf(path, sizeof path, "%s/%s", tl_dir, de->d_name);
        if (!tl_check_model(path, strncmp(de->d_name, "w3-", 3) == 0, &n_stages)) {
            n_refused++;
            continue;
        }
        st_gguf *g;
        ck_assert_int_eq(st_gguf_open(path, &g), ST_OK);
        n_tied += st_arch_head_tied(g);
        st_gguf_close(g);
        n_models++;
    }
    closedir(dir);
    printf("%d models, %d of them with a tied head, %d stages; %d wave-3 files refused by name\n",
           n_models, n_tied, n_stages, n_refused);
    ck_assert_int_gt(n_models, 0);
    ck_assert_int_gt(n_tied, 0); /* the tied case is among them */
}
END_TEST

/* tl_moe_file - an in-memory file of architecture arch: its counts, an
 * expert_count key when experts >= 0, the token embedding, and layer 0's
 * dense ffn_gate when dense_gate; *g opens it (buf to free). */
static st_err tl_moe_file(const char *arch, int64_t experts, bool dense_gate, uint8_t **buf,
                          st_gguf **g)
{
    static float data[64 * 16];
    st_gguf_writer *w;
    ck_assert_int_eq(st_gguf_writer_new(&w), ST_OK);
    char key[ST_ARCH_NAME_MAX];
    const struct {
        const char *suffix;
        uint32_t v;
    } counts[] = {{"embedding_length", 64}, {"block_count", 1}, {"attention.head_count", 4},
                  {"feed_forward_length", 16}, {"expert_used_count", 2},
                  {"expert_feed_forward_length", 16}};
    ck_assert_int_eq(st_gguf_writer_add_str(w, "general.architecture", arch), ST_OK);
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        snprintf(key, sizeof key, "%s.%s", arch, counts[i].suffix);
        ck_assert_int_eq(st_gguf_writer_add_u32(w, key, counts[i].v), ST_OK);
    }
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    ck_assert_int_eq(st_gguf_writer_add_f32(w, key, 1e-5f), ST_OK);
    if (experts >= 0) {
        snprintf(key, sizeof key, "%s.expert_count", arch);
        ck_assert_int_eq(st_gguf_writer_add_u32(w, key, (uint32_t)experts), ST_OK);
    }
    const int64_t ne[2] = {64, 16};
    ck_assert_int_eq(st_gguf_writer_add_tensor(w, "token_embd.weight", ST_DT_F32, 2, ne, data,
                                               sizeof data),
                     ST_OK);
    const int64_t ne_gate[2] = {64, 16};
    if (dense_gate)
        ck_assert_int_eq(st_gguf_writer_add_tensor(w, "blk.0.ffn_gate.weight", ST_DT_F32, 2,
                                                   ne_gate, data, sizeof data),
                         ST_OK);
    size_t len;
    ck_assert_int_eq(st_gguf_writer_to_mem(w, buf, &len), ST_OK);
    st_gguf_writer_free(w);
    return st_gguf_open_mem(*buf, len, g);
}

/* tl_moe_refused - st_hparams_from_gguf refuses the file with error want
 * and a detail holding needle. */
static void tl_moe_refused(const char *arch, int64_t experts, bool dense_gate, st_err want,
                           const char *needle)
{
    uint8_t *buf = NULL;
    st_gguf *g = NULL;
    ck_assert_int_eq(tl_moe_file(arch, experts, dense_gate, &buf, &g), ST_OK);
    st_hparams hp;
    st_err e = st_hparams_from_gguf(g, &hp);
    ck_assert_msg(e == want && strstr(st_errdetail(), needle) != NULL,
                  "%s, %lld experts: %s (want %d with '%s')", arch, (long long)experts,
                  st_errmsg(e), want, needle);
    st_gguf_close(g);
    free(buf);
}

/* Experts where an architecture has none, none where it needs them, more
 * than the engine runs, more used than there are, and a dense FFN tensor
 * in a mixture of experts: each refused naming what is wrong. */
START_TEST(moe_refusals)
{
    tl_moe_refused("qwen2", 8, false, ST_ETYPE, "no mixture-of-experts form");
    tl_moe_refused("qwen3moe", -1, false, ST_EMISSING, "needs experts");
    tl_moe_refused("olmoe", 0, false, ST_EMISSING, "needs experts");
    tl_moe_refused("qwen3moe", ST_MOE_MAX_EXPERT + 1, false, ST_ERANGE, "at most");
    tl_moe_refused("qwen3moe", 1, false, ST_ERANGE, "at most"); /* 2 used of 1 */
    tl_moe_refused("llama", 8, true, ST_EINVAL, "blk.0.ffn_gate.weight");
    /* a dense llama file is still a dense llama */
    uint8_t *buf = NULL;
    st_gguf *g = NULL;
    ck_assert_int_eq(tl_moe_file("llama", -1, true, &buf, &g), ST_OK);
    st_hparams hp;
    ck_assert_int_eq(st_hparams_from_gguf(g, &hp), ST_OK);
    ck_assert_int_eq(hp.n_expert, 0);
    ck_assert_int_eq(hp.n_ff, 16);
    st_gguf_close(g);
    free(buf);
}
END_TEST

/* The KV count: both sides' formula per cache type (f32 4 bytes a value,
 * f16 2, Q8_0 34 bytes per 32), and its refusals. */
START_TEST(kv_bytes)
{
    ck_assert_uint_eq(st_kv_bytes(3, 5, 7, ST_DT_F32), 3u * 5 * 7 * 4 * 2);
    ck_assert_uint_eq(st_kv_bytes(3, 5, 7, ST_DT_F16), 3u * 5 * 7 * 2 * 2);
    ck_assert_uint_eq(st_kv_bytes(3, 5, 64, ST_DT_Q8_0), 3u * 5 * 2 * 34 * 2);
    ck_assert_uint_eq(st_kv_bytes(3, 5, 7, ST_DT_Q8_0), 0); /* not whole blocks */
    ck_assert_uint_eq(st_kv_bytes(3, 5, 64, ST_DT_Q4_0), 0); /* not a cache type */
    ck_assert_uint_eq(st_kv_bytes(3, 5, 64, ST_DT_BF16), 0);
    ck_assert_uint_eq(st_kv_bytes(0, 5, 7, ST_DT_F32), 0);
    ck_assert_uint_eq(st_kv_bytes(3, -1, 7, ST_DT_F32), 0);
    ck_assert_uint_eq(st_kv_bytes(3, 5, 0, ST_DT_F32), 0);
    ck_assert_uint_eq(st_kv_bytes(INT64_MAX, INT64_MAX, INT64_MAX, ST_DT_F16), 0);
}
END_TEST

/* --cache-type: every name the option row admits maps to its dtype, the
 * default is f16, anything else is refused by name; q8_0 needs heads of a
 * multiple of 32 values. */
START_TEST(kv_cache_types)
{
    const st_dtype want[] = {ST_DT_F32, ST_DT_F16, ST_DT_Q8_0};
    const char *const *names = st_opt_cache_type_names();
    size_t n = 0;
    for (; names[n] != NULL; n++) {
        st_dtype t;
        ck_assert_uint_lt(n, sizeof want / sizeof want[0]);
        ck_assert_int_eq(st_kv_dtype_from_name(names[n], &t), ST_OK);
        ck_assert_int_eq(t, want[n]);
    }
    ck_assert_uint_eq(n, sizeof want / sizeof want[0]);
    st_dtype t = ST_DT_Q4_0;
    ck_assert_int_eq(st_kv_dtype_from_name(NULL, &t), ST_OK);
    ck_assert_int_eq(t, ST_DT_F16);
    ck_assert_int_eq(st_kv_dtype_from_name("q4_0", &t), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "'q4_0'"));
    ck_assert_int_eq(st_kv_dtype_from_name("f8", &t), ST_EINVAL);
    ck_assert_int_eq(st_kv_dtype_check(ST_DT_Q8_0, 64), ST_OK);
    ck_assert_int_eq(st_kv_dtype_check(ST_DT_Q8_0, 80), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "q8_0"));
    ck_assert_int_eq(st_kv_dtype_check(ST_DT_F16, 80), ST_OK);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("llama");
    TCase *tc = tcase_create("core");
    tcase_add_unchecked_fixture(tc, tl_setup, NULL);
    tcase_add_test(tc, worker_and_coordinator_agree);
    tcase_add_test(tc, kv_bytes);
    tcase_add_test(tc, kv_cache_types);
    tcase_add_test(tc, moe_refusals);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
