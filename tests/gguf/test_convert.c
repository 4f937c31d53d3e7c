/* test_convert.c - `strata convert`, run as a separate process.
 *
 * Usage: test_convert STRATA_EXE (meson passes the built executable).
 * llama2c: the shared stories260K.bin converts to a file whose tensors (and
 * in fact every byte) equal the shared stories260K.gguf; an unshared
 * classifier and a real tokenizer.bin are checked on a crafted checkpoint;
 * size mismatches are errors naming both sizes. synth: shapes, dtypes,
 * value statistics, determinism, dtype independence of the values, the
 * qwen2 architecture's keys and biases, and rejection of bad arguments
 * with exit status 2. */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/model/gguf.h"
#include "kernels/kernels.h"
#include "tests/gguf/tg_util.h"

static const char *strata_exe;
static char cv_err[4096]; /* stderr of the last run */

/* Runs strata with args (NULL-terminated, without argv[0]); returns its
 * exit status (or 128 + signal) and keeps its stderr in cv_err. */
static int run(const char *const *args)
{
    char errpath[] = "/tmp/st_cv_err_XXXXXX";
    int efd = mkstemp(errpath);
    ck_assert(efd >= 0);
    const char *argv[32];
    int n = 0;
    argv[n++] = strata_exe;
    for (int i = 0; args[i] != NULL && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        dup2(efd, 2);
        int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0)
            dup2(nul, 1);
        execv(strata_exe, (char *const *)argv);
        _exit(127);
    }
    int st;
    ck_assert(waitpid(pid, &st, 0) == pid);
    ssize_t got = pread(efd, cv_err, sizeof cv_err - 1, 0);
    cv_err[got > 0 ? got : 0] = '\0';
    close(efd);
    unlink(errpath);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *tmpdir_make(void)
{
    char *d = strdup("/tmp/st_cv_XXXXXX");
    ck_assert(mkdtemp(d) != NULL);
    return d;
}

static void tmpdir_rm(char *d)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    ck_assert(system(cmd) == 0);
    free(d);
}

static bool exists(const char *p) { return access(p, F_OK) == 0; }

START_TEST(test_llama2c_stories)
{
    char *dir = tmpdir_make();
    char in[8192], out[4200], ref[8192];
    tg_model_path("stories260K.bin", in, sizeof in);
    tg_model_path("stories260K.gguf", ref, sizeof ref);
    snprintf(out, sizeof out, "%s/s.gguf", dir);
    const char *args[] = {"convert", "llama2c", in, out, NULL};
    ck_assert_msg(run(args) == 0, "convert failed: %s", cv_err);

    st_gguf *a, *b;
    ck_assert(st_gguf_open(out, &a) == ST_OK);
    ck_assert(st_gguf_open(ref, &b) == ST_OK);
    ck_assert_uint_eq(st_gguf_n_tensors(a), st_gguf_n_tensors(b));
    for (uint64_t i = 0; i < st_gguf_n_tensors(b); i++) {
        const st_gguf_tensor *tb = st_gguf_tensor_at(b, i);
        const st_gguf_tensor *ta = st_gguf_tensor_at(a, i);
        ck_assert_msg(ta->name.len == tb->name.len &&
                          memcmp(ta->name.data, tb->name.data, tb->name.len) == 0,
                      "tensor %llu: name differs", (unsigned long long)i);
        ck_assert_uint_eq(ta->n_dims, tb->n_dims);
        for (int d = 0; d < 4; d++)
            ck_assert_int_eq(ta->ne[d], tb->ne[d]);
        ck_assert_uint_eq(ta->ggml_type, tb->ggml_type);
        ck_assert_uint_eq(ta->nbytes, tb->nbytes);
        ck_assert_msg(memcmp(ta->data, tb->data, tb->nbytes) == 0, "tensor '%.*s': bytes differ",
                      (int)tb->name.len, tb->name.data);
    }
    /* the metadata too: the whole file is the same */
    ck_assert_uint_eq(st_gguf_file_size(a), st_gguf_file_size(b));
    ck_assert(memcmp(st_gguf_base(a), st_gguf_base(b), st_gguf_file_size(b)) == 0);
    st_gguf_close(a);
    st_gguf_close(b);
    tmpdir_rm(dir);
}
END_TEST

/* Writes a llama2.c checkpoint: dim 8, hidden 16, 1 layer, 2 heads, 1 KV
 * head, vocab 32000 (negative: unshared classifier), seq_len 4; every float
 * is its own index, so each section's bytes are recognisable. Returns the
 * number of floats written. */
static size_t write_ckpt(const char *path, int32_t vocab_field, size_t drop_bytes)
{
    int32_t h[7] = {8, 16, 1, 2, 1, vocab_field, 4};
    int64_t V = vocab_field < 0 ? -(int64_t)vocab_field : vocab_field;
    size_t n = (size_t)(V * 8 + 8 + 64 + 2 * 32 + 64 + 8 + 3 * 128 + 8 + 2 * 4 * 2 +
                        (vocab_field < 0 ? V * 8 : 0));
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)i;
    FILE *fp = fopen(path, "wb");
    ck_assert(fp != NULL);
    ck_assert(fwrite(h, 4, 7, fp) == 7);
    ck_assert(fwrite(x, 1, n * 4 - drop_bytes, fp) == n * 4 - drop_bytes);
    ck_assert(fclose(fp) == 0);
    free(x);
    return n;
}

/* Checks that tensor name holds the floats first, first + 1, ... */
static void check_seq(const st_gguf *g, const char *name, size_t first, size_t count)
{
    const st_gguf_tensor *t = st_gguf_find_tensor(g, name);
    ck_assert_msg(t != NULL, "%s missing", name);
    ck_assert_uint_eq(t->nbytes, count * 4);
    const float *f = t->data;
    for (size_t i = 0; i < count; i++)
        ck_assert_msg(f[i] == (float)(first + i), "%s[%zu] = %g, want %zu", name, i, (double)f[i],
                      first + i);
}

START_TEST(test_llama2c_unshared_tokenizer)
{
    char *dir = tmpdir_make();
    char in[4200], out[4200], tok[8192];
    snprintf(in, sizeof in, "%s/m.bin", dir);
    snprintf(out, sizeof out, "%s/m.gguf", dir);
    tg_model_path("tokenizer.bin", tok, sizeof tok);
    size_t n = write_ckpt(in, -32000, 0);
    const char *args[] = {"convert", "llama2c", in, out, "--tokenizer", tok, NULL};
    ck_assert_msg(run(args) == 0, "convert failed: %s", cv_err);
    st_gguf *g;
    ck_assert(st_gguf_open(out, &g) == ST_OK);
    ck_assert_uint_eq(st_gguf_n_tensors(g), 2 + 9 + 1);
    size_t V = 32000, at = 0;
    check_seq(g, "token_embd.weight", at, V * 8), at += V * 8;
    check_seq(g, "blk.0.attn_norm.weight", at, 8), at += 8;
    check_seq(g, "blk.0.attn_q.weight", at, 64), at += 64;
    check_seq(g, "blk.0.attn_k.weight", at, 32), at += 32;
    check_seq(g, "blk.0.attn_v.weight", at, 32), at += 32;
    check_seq(g, "blk.0.attn_output.weight", at, 64), at += 64;
    check_seq(g, "blk.0.ffn_norm.weight", at, 8), at += 8;
    check_seq(g, "blk.0.ffn_gate.weight", at, 128), at += 128; /* w1 */
    check_seq(g, "blk.0.ffn_down.weight", at, 128), at += 128; /* w2 */
    check_seq(g, "blk.0.ffn_up.weight", at, 128), at += 128;   /* w3 */
    check_seq(g, "output_norm.weight", at, 8), at += 8;
    at += 16; /* freq_cis_real and _imag (4 x 2 each): skipped by the converter */
    check_seq(g, "output.weight", at, V * 8), at += V * 8;
    ck_assert_uint_eq(at, n);
    const st_gguf_tensor *k = st_gguf_find_tensor(g, "blk.0.attn_k.weight");
    ck_assert(k->ne[0] == 8 && k->ne[1] == 4);
    const st_gguf_tensor *dn = st_gguf_find_tensor(g, "blk.0.ffn_down.weight");
    ck_assert(dn->ne[0] == 16 && dn->ne[1] == 8);
    uint32_t u;
    ck_assert(st_gguf_get_u32(g, "llama.rope.dimension_count", &u) == ST_OK && u == 4);
    ck_assert(st_gguf_get_u32(g, "llama.context_length", &u) == ST_OK && u == 4);
    ck_assert(st_gguf_get_u32(g, "llama.attention.head_count_kv", &u) == ST_OK && u == 1);

    /* the vocabulary equals the Llama 2 tokenizer of llama.cpp's converter */
    st_gguf *r = tg_open_model("llama-2-tiny-random.gguf");
    const char *keys[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                          "tokenizer.ggml.token_type"};
    for (int i = 0; i < 3; i++) {
        const st_gguf_kv *ka, *kb;
        ck_assert(st_gguf_get_arr(g, keys[i], ST_GGUF_TYPE_COUNT, &ka) == ST_OK);
        ck_assert(st_gguf_get_arr(r, keys[i], ST_GGUF_TYPE_COUNT, &kb) == ST_OK);
        ck_assert_uint_eq(ka->arr_n, kb->arr_n);
        ck_assert_int_eq(ka->arr_type, kb->arr_type);
        for (uint64_t j = 0; j < ka->arr_n; j++) {
            if (ka->arr_type == ST_GGUF_STRING) {
                st_gguf_str x = ka->arr_strs[j], y = kb->arr_strs[j];
                ck_assert_msg(x.len == y.len && memcmp(x.data, y.data, x.len) == 0,
                              "%s[%llu] differs", keys[i], (unsigned long long)j);
            } else {
                ck_assert_msg(memcmp((const char *)ka->arr_data + 4 * j,
                                     (const char *)kb->arr_data + 4 * j, 4) == 0,
                              "%s[%llu] differs", keys[i], (unsigned long long)j);
            }
        }
    }
    st_gguf_close(r);
    st_gguf_close(g);
    tmpdir_rm(dir);
}
END_TEST

START_TEST(test_llama2c_errors)
{
    char *dir = tmpdir_make();
    char in[4200], out[4200], stories[8192], tok[8192];
    snprintf(in, sizeof in, "%s/m.bin", dir);
    snprintf(out, sizeof out, "%s/m.gguf", dir);
    tg_model_path("stories260K.bin", stories, sizeof stories);
    tg_model_path("tokenizer.bin", tok, sizeof tok);
    size_t n = write_ckpt(in, 32000, 4);
    const char *a1[] = {"convert", "llama2c", in, out, NULL};
    ck_assert_int_eq(run(a1), 1);
    char want[64];
    snprintf(want, sizeof want, "%zu", 28 + n * 4);
    ck_assert_msg(strstr(cv_err, "truncated") && strstr(cv_err, want), "stderr: %s", cv_err);
    snprintf(want, sizeof want, "%zu", 28 + n * 4 - 4);
    ck_assert_msg(strstr(cv_err, want), "stderr: %s", cv_err);
    ck_assert(!exists(out));
    /* one float too many */
    write_ckpt(in, 32000, 0);
    FILE *fp = fopen(in, "ab");
    ck_assert(fp && fwrite("abcd", 1, 4, fp) == 4 && fclose(fp) == 0);
    ck_assert_int_eq(run(a1), 1);
    ck_assert_msg(strstr(cv_err, "4 more"), "stderr: %s", cv_err);
    ck_assert(!exists(out));
    /* a tokenizer of the wrong size */
    const char *a2[] = {"convert", "llama2c", stories, out, "--tokenizer", tok, NULL};
    ck_assert_int_eq(run(a2), 1);
    ck_assert_msg(strstr(cv_err, "32000") && strstr(cv_err, "512"), "stderr: %s", cv_err);
    ck_assert(!exists(out));
    /* a bad header */
    int32_t h[7] = {64, 172, 5, 7, 4, 512, 512}; /* 7 heads do not divide 64 */
    fp = fopen(in, "wb");
    ck_assert(fp && fwrite(h, 4, 7, fp) == 7 && fclose(fp) == 0);
    ck_assert_int_eq(run(a1), 1);
    ck_assert(!exists(out));
    fp = fopen(in, "wb");
    ck_assert(fp && fwrite(h, 1, 10, fp) == 10 && fclose(fp) == 0);
    ck_assert_int_eq(run(a1), 1);
    ck_assert_msg(strstr(cv_err, "10 bytes"), "stderr: %s", cv_err);
    /* sizes that wrap 64 bits must not be taken for a match */
    int32_t hh[7] = {1 << 30, 1 << 30, 1 << 30, 2, 1, 512, 512};
    fp = fopen(in, "wb");
    ck_assert(fp && fwrite(hh, 4, 7, fp) == 7 && fclose(fp) == 0);
    ck_assert_int_eq(run(a1), 1);
    ck_assert_msg(strstr(cv_err, "overflow"), "stderr: %s", cv_err);
    /* usage errors */
    const char *u1[] = {"convert", "llama2c", in, NULL};
    ck_assert_int_eq(run(u1), 2);
    const char *u2[] = {"convert", "llama2c", in, out, "--bogus", NULL};
    ck_assert_int_eq(run(u2), 2);
    const char *u3[] = {"convert", NULL};
    ck_assert_int_eq(run(u3), 2);
    const char *u4[] = {"convert", "llama2c", "/nonexistent.bin", out, NULL};
    ck_assert_int_eq(run(u4), 1);
    ck_assert(strchr(cv_err, '\n') == cv_err + strlen(cv_err) - 1); /* one line */
    tmpdir_rm(dir);
}
END_TEST

/* Dequantizes a whole tensor with the reference kernels. */
static float *dequant(const st_gguf_tensor *t, int64_t *count)
{
    int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    float *x = malloc((size_t)n * sizeof *x);
    st_kernels_ref()->to_float[t->dtype](t->data, x, n);
    *count = n;
    return x;
}

static void stats(const float *x, int64_t n, double *mean, double *std)
{
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        s += x[i];
        s2 += (double)x[i] * x[i];
    }
    *mean = s / (double)n;
    *std = sqrt(s2 / (double)n - *mean * *mean);
}

static int synth(const char *out, const char *type, const char *seed)
{
    const char *args[] = {"convert", "synth",   out,    "--dim",      "128", "--layers",
                          "2",       "--heads", "4",    "--kv-heads", "2",   "--ffn",
                          "352",     "--vocab", "1000", "--type",     type,  "--seed",
                          seed,      "--ctx",   "256",  NULL};
    return run(args);
}

START_TEST(test_synth_types)
{
    char *dir = tmpdir_make();
    const char *types[] = {"f32", "f16", "bf16", "q8_0", "q4_0"};
    const st_dtype dts[] = {ST_DT_F32, ST_DT_F16, ST_DT_BF16, ST_DT_Q8_0, ST_DT_Q4_0};
    const double tol[] = {1e-7, 1e-3, 1e-2, 2e-2, 0.2}; /* relative to the std */
    float *ref_q = NULL;
    int64_t nq = 0;
    for (int k = 0; k < 5; k++) {
        char out[4200];
        snprintf(out, sizeof out, "%s/s_%s.gguf", dir, types[k]);
        ck_assert_msg(synth(out, types[k], "7") == 0, "%s: %s", types[k], cv_err);
        st_gguf *g;
        ck_assert(st_gguf_open(out, &g) == ST_OK);
        uint32_t u;
        float f;
        ck_assert(st_gguf_get_u32(g, "llama.embedding_length", &u) == ST_OK && u == 128);
        ck_assert(st_gguf_get_u32(g, "llama.block_count", &u) == ST_OK && u == 2);
        ck_assert(st_gguf_get_u32(g, "llama.feed_forward_length", &u) == ST_OK && u == 352);
        ck_assert(st_gguf_get_u32(g, "llama.rope.dimension_count", &u) == ST_OK && u == 32);
        ck_assert(st_gguf_get_u32(g, "llama.attention.head_count", &u) == ST_OK && u == 4);
        ck_assert(st_gguf_get_u32(g, "llama.attention.head_count_kv", &u) == ST_OK && u == 2);
        ck_assert(st_gguf_get_u32(g, "llama.context_length", &u) == ST_OK && u == 256);
        ck_assert(st_gguf_get_u32(g, "llama.vocab_size", &u) == ST_OK && u == 1000);
        ck_assert(st_gguf_get_f32(g, "llama.rope.freq_base", &f) == ST_OK && f == 10000.0f);
        ck_assert(st_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f) == ST_OK &&
                  f == 1e-5f);
        ck_assert(st_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &u) == ST_OK && u == 2);
        const st_gguf_kv *tok;
        ck_assert(st_gguf_get_arr(g, "tokenizer.ggml.tokens", ST_GGUF_STRING, &tok) == ST_OK);
        ck_assert_uint_eq(tok->arr_n, 1000);
        ck_assert(st_gguf_str_eq(tok->arr_strs[0], "<unk>"));
        ck_assert(st_gguf_str_eq(tok->arr_strs[3 + 0x41], "<0x41>"));
        ck_assert(st_gguf_str_eq(tok->arr_strs[259], "\xE2\x96\x81"
                                                     "a"));
        ck_assert(st_gguf_str_eq(tok->arr_strs[260], "a"));
        ck_assert_uint_eq(st_gguf_n_tensors(g), 2 + 9 * 2 + 1);
        ck_assert(st_gguf_find_tensor(g, "output.weight") != NULL);
        for (uint64_t i = 0; i < st_gguf_n_tensors(g); i++) {
            const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
            bool norm = t->n_dims == 1;
            ck_assert_int_eq(t->dtype, norm ? ST_DT_F32 : dts[k]);
            int64_t n;
            float *x = dequant(t, &n);
            double mean, std;
            stats(x, n, &mean, &std);
            double want = norm ? 0.2 : 0.5 / sqrt((double)t->ne[0]);
            ck_assert_msg(fabs(mean - (norm ? 1.0 : 0.0)) < 4 * want / sqrt((double)n) + 1e-3,
                          "%s %.*s: mean %g", types[k], (int)t->name.len, t->name.data, mean);
            ck_assert_msg(fabs(std / want - 1) < 0.15 + tol[k], "%s %.*s: std %g, want %g",
                          types[k], (int)t->name.len, t->name.data, std, want);
            free(x);
        }
        /* the same values at every precision: compare attn_q with the f32 file */
        const st_gguf_tensor *q = st_gguf_find_tensor(g, "blk.1.attn_q.weight");
        int64_t n;
        float *x = dequant(q, &n);
        if (k == 0) {
            ref_q = x;
            nq = n;
        } else {
            ck_assert_int_eq(n, nq);
            double err = 0;
            for (int64_t i = 0; i < n; i++)
                err += fabs((double)x[i] - ref_q[i]);
            double std = 0.5 / sqrt(128.0);
            ck_assert_msg(err / (double)n < tol[k] * std, "%s: mean abs error %g vs f32", types[k],
                          err / (double)n);
            free(x);
        }
        st_gguf_close(g);
    }
    free(ref_q);
    tmpdir_rm(dir);
}
END_TEST

START_TEST(test_synth_deterministic)
{
    char *dir = tmpdir_make();
    char a[4200], b[4200], c[4200];
    snprintf(a, sizeof a, "%s/a.gguf", dir);
    snprintf(b, sizeof b, "%s/b.gguf", dir);
    snprintf(c, sizeof c, "%s/c.gguf", dir);
    ck_assert(synth(a, "q8_0", "1") == 0);
    ck_assert(synth(b, "q8_0", "1") == 0);
    ck_assert(synth(c, "q8_0", "2") == 0);
    size_t la, lb, lc;
    uint8_t *ba = tg_read_path(a, &la), *bb = tg_read_path(b, &lb), *bc = tg_read_path(c, &lc);
    ck_assert(ba && bb && bc);
    ck_assert(la == lb && memcmp(ba, bb, la) == 0);
    ck_assert(la == lc && memcmp(ba, bc, la) != 0);
    st_gguf *ga, *gc;
    ck_assert(st_gguf_open(a, &ga) == ST_OK && st_gguf_open(c, &gc) == ST_OK);
    const st_gguf_tensor *ta = st_gguf_find_tensor(ga, "token_embd.weight");
    const st_gguf_tensor *tc = st_gguf_find_tensor(gc, "token_embd.weight");
    ck_assert(memcmp(ta->data, tc->data, ta->nbytes) != 0);
    /* different tensors of one file get different streams */
    const st_gguf_tensor *q0 = st_gguf_find_tensor(ga, "blk.0.attn_q.weight");
    const st_gguf_tensor *q1 = st_gguf_find_tensor(ga, "blk.1.attn_q.weight");
    ck_assert(memcmp(q0->data, q1->data, q0->nbytes) != 0);
    st_gguf_close(ga);
    st_gguf_close(gc);
    free(ba);
    free(bb);
    free(bc);
    tmpdir_rm(dir);
}
END_TEST

/* --arch qwen2: qwen2.* keys, and f32 q/k/v biases N(0, 0.2) after each
 * layer's v projection; the same matrices as the llama file of that seed. */
START_TEST(test_synth_qwen2)
{
    char *dir = tmpdir_make();
    char out[4200], lout[4200];
    snprintf(out, sizeof out, "%s/q.gguf", dir);
    snprintf(lout, sizeof lout, "%s/l.gguf", dir);
    const char *args[] = {"convert", "synth",   out,     "--dim",      "128",  "--layers",
                          "2",       "--heads", "4",     "--kv-heads", "2",    "--ffn",
                          "352",     "--vocab", "1000",  "--type",     "q8_0", "--seed",
                          "7",       "--arch",  "qwen2", NULL};
    ck_assert_msg(run(args) == 0, "%s", cv_err);
    ck_assert(synth(lout, "q8_0", "7") == 0);
    st_gguf *g, *gl;
    ck_assert(st_gguf_open(out, &g) == ST_OK && st_gguf_open(lout, &gl) == ST_OK);
    st_gguf_str arch;
    uint32_t u;
    ck_assert(st_gguf_get_str(g, "general.architecture", &arch) == ST_OK &&
              st_gguf_str_eq(arch, "qwen2"));
    ck_assert(st_gguf_get_u32(g, "qwen2.block_count", &u) == ST_OK && u == 2);
    ck_assert(st_gguf_get_u32(g, "qwen2.attention.head_count_kv", &u) == ST_OK && u == 2);
    ck_assert(st_gguf_get_u32(g, "llama.block_count", &u) == ST_EMISSING);
    ck_assert_uint_eq(st_gguf_n_tensors(g), 2 + 12 * 2 + 1);
    const char *names[] = {"blk.0.attn_q.bias", "blk.1.attn_k.bias", "blk.1.attn_v.bias"};
    const int64_t lens[] = {128, 64, 64};
    for (int k = 0; k < 3; k++) {
        const st_gguf_tensor *t = st_gguf_find_tensor(g, names[k]);
        ck_assert_msg(t != NULL, "%s missing", names[k]);
        ck_assert_int_eq(t->dtype, ST_DT_F32);
        ck_assert_int_eq(t->ne[0], lens[k]);
        int64_t n;
        float *x = dequant(t, &n);
        double mean, std;
        stats(x, n, &mean, &std);
        ck_assert_msg(fabs(mean) < 4 * 0.2 / sqrt((double)n) && fabs(std / 0.2 - 1) < 0.3,
                      "%s: mean %g std %g", names[k], mean, std);
        free(x);
    }
    const st_gguf_tensor *q = st_gguf_find_tensor(g, "blk.1.ffn_down.weight");
    const st_gguf_tensor *ql = st_gguf_find_tensor(gl, "blk.1.ffn_down.weight");
    ck_assert(q && ql && q->nbytes == ql->nbytes && memcmp(q->data, ql->data, q->nbytes) == 0);
    st_gguf_close(g);
    st_gguf_close(gl);
    const char *bad[] = {"convert",  "synth", out,       "--dim",   "64",
                         "--layers", "1",     "--heads", "4",       "--kv-heads",
                         "2",        "--ffn", "64",      "--vocab", "300",
                         "--type",   "f32",   "--arch",  "gpt2",    NULL};
    ck_assert_int_eq(run(bad), 2);
    ck_assert_msg(strstr(cv_err, "gpt2") != NULL, "%s", cv_err);
    tmpdir_rm(dir);
}
END_TEST

/* shape of tensor name in g: ne0, ne1 (0 for a 1-d tensor), or -1, -1 when absent */
static void shape_of(const st_gguf *g, const char *name, int64_t ne[2])
{
    const st_gguf_tensor *t = st_gguf_find_tensor(g, name);
    ne[0] = t ? t->ne[0] : -1;
    ne[1] = t ? (t->n_dims > 1 ? t->ne[1] : 0) : -1;
}

/* --arch qwen3|gemma2|gemma3|phi3: the tensors and keys llama.cpp's loaders
 * of those architectures read (src/models/<arch>.cpp: qwen3's q/k norms of
 * head_dim and attn_q of heads x head_dim, with attention.key_length;
 * Gemma's post norms, gemma2 without output.weight; the soft-caps, windows
 * and swa base; phi3's fused attn_qkv and ffn_up [n_embd, 2 n_ff] without
 * ffn_gate), spelled here as llama.cpp spells them. */
START_TEST(test_synth_wave3)
{
    char *dir = tmpdir_make();
    struct {
        const char *arch, *head_dim; /* --head-dim, or NULL */
        const char *present[4], *absent[3];
        const char *name[3]; /* [0]: tensor whose shape is checked; keys */
        int64_t ne[2];
    } rows[] = {
        {"qwen3", "64",
         {"blk.1.attn_q_norm.weight", "blk.1.attn_k_norm.weight", "output.weight", NULL},
         {"blk.0.attn_qkv.weight", "blk.0.post_attention_norm.weight", NULL},
         {"blk.0.attn_q.weight"}, {128, 256}},
        {"gemma2", NULL,
         {"blk.1.post_attention_norm.weight", "blk.1.post_ffw_norm.weight",
          "blk.0.ffn_gate.weight", NULL},
         {"output.weight", "blk.0.attn_q_norm.weight", NULL},
         {"blk.0.ffn_up.weight"}, {128, 352}},
        {"gemma3", NULL,
         {"blk.1.post_attention_norm.weight", "blk.1.post_ffw_norm.weight",
          "blk.1.attn_q_norm.weight", "blk.1.attn_k_norm.weight"},
         {"blk.0.attn_qkv.weight", NULL},
         {"blk.0.attn_k_norm.weight"}, {32, 0}},
        {"phi3", NULL,
         {"blk.1.attn_qkv.weight", "output.weight", NULL},
         {"blk.0.attn_q.weight", "blk.0.ffn_gate.weight", "blk.0.attn_k.weight"},
         {"blk.1.ffn_up.weight"}, {128, 704}},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char out[4200];
        snprintf(out, sizeof out, "%s/%s.gguf", dir, rows[i].arch);
        const char *args[32] = {"convert", "synth", out,       "--dim",   "128",        "--layers",
                                "2",       "--heads", "4",     "--kv-heads", "2",       "--ffn",
                                "352",     "--vocab", "300",   "--type",  "q8_0",       "--arch",
                                rows[i].arch};
        int n = 19;
        if (rows[i].head_dim != NULL)
            args[n++] = "--head-dim", args[n++] = rows[i].head_dim;
        args[n] = NULL;
        ck_assert_msg(run(args) == 0, "%s: %s", rows[i].arch, cv_err);
        st_gguf *g;
        ck_assert(st_gguf_open(out, &g) == ST_OK);
        st_gguf_str arch;
        ck_assert(st_gguf_get_str(g, "general.architecture", &arch) == ST_OK &&
                  st_gguf_str_eq(arch, rows[i].arch));
        for (int k = 0; k < 4 && rows[i].present[k]; k++)
            ck_assert_msg(st_gguf_find_tensor(g, rows[i].present[k]) != NULL, "%s: no %s",
                          rows[i].arch, rows[i].present[k]);
        for (int k = 0; k < 3 && rows[i].absent[k]; k++)
            ck_assert_msg(st_gguf_find_tensor(g, rows[i].absent[k]) == NULL, "%s: has %s",
                          rows[i].arch, rows[i].absent[k]);
        int64_t ne[2];
        shape_of(g, rows[i].name[0], ne);
        ck_assert_msg(ne[0] == rows[i].ne[0] && ne[1] == rows[i].ne[1], "%s: %s is [%lld, %lld]",
                      rows[i].arch, rows[i].name[0], (long long)ne[0], (long long)ne[1]);
        char key[128];
        uint32_t u;
        float f;
        snprintf(key, sizeof key, "%s.attention.key_length", rows[i].arch);
        st_err ek = st_gguf_get_u32(g, key, &u);
        ck_assert_msg(rows[i].head_dim ? ek == ST_OK && u == 64 : ek == ST_EMISSING, "%s", key);
        snprintf(key, sizeof key, "%s.attention.sliding_window", rows[i].arch);
        ek = st_gguf_get_u32(g, key, &u);
        const bool gemma = strncmp(rows[i].arch, "gemma", 5) == 0;
        ck_assert_msg(gemma ? ek == ST_OK && u == (rows[i].arch[5] == '2' ? 4096 : 512)
                            : ek == ST_EMISSING,
                      "%s", key);
        snprintf(key, sizeof key, "%s.attn_logit_softcapping", rows[i].arch);
        ek = st_gguf_get_f32(g, key, &f);
        const bool g2 = strcmp(rows[i].arch, "gemma2") == 0;
        ck_assert_msg(g2 ? ek == ST_OK && f == 50.0f : ek == ST_EMISSING, "%s", key);
        snprintf(key, sizeof key, "%s.final_logit_softcapping", rows[i].arch);
        ek = st_gguf_get_f32(g, key, &f);
        ck_assert_msg(g2 ? ek == ST_OK && f == 30.0f : ek == ST_EMISSING, "%s", key);
        snprintf(key, sizeof key, "%s.rope.freq_base_swa", rows[i].arch);
        ek = st_gguf_get_f32(g, key, &f);
        const bool g3 = strcmp(rows[i].arch, "gemma3") == 0;
        ck_assert_msg(g3 ? ek == ST_OK && f == 10000.0f : ek == ST_EMISSING, "%s", key);
        st_gguf_close(g);
    }
    char bad[4200];
    snprintf(bad, sizeof bad, "%s/bad.gguf", dir);
    const char *no_swa[] = {"convert", "synth",   bad, "--dim", "128", "--layers", "1",
                            "--heads", "4",       "--kv-heads", "2", "--ffn", "128", "--vocab",
                            "300",     "--type",  "f32", "--arch", "qwen3", "--sliding-window",
                            "16",      NULL};
    ck_assert_int_eq(run(no_swa), 2);
    ck_assert_msg(strstr(cv_err, "qwen3") != NULL, "%s", cv_err);
    ck_assert(!exists(bad));
    tmpdir_rm(dir);
}
END_TEST

START_TEST(test_synth_bad_args)
{
    char *dir = tmpdir_make();
    char out[4200];
    snprintf(out, sizeof out, "%s/x.gguf", dir);
    /* each row: the value of --dim, --heads, --kv-heads, --ffn, --vocab, --type */
    const char *rows[][6] = {
        {"100", "3", "1", "64", "300", "f32"}, /* heads do not divide dim */
        {"128", "4", "3", "64", "300", "f32"}, /* kv-heads do not divide heads */
        {"48", "4", "2", "64", "300", "q4_0"}, /* dim not a multiple of 32 */
        {"64", "4", "2", "48", "300", "q8_0"}, /* ffn not a multiple of 32 */
        {"64", "4", "2", "64", "100", "f16"},  /* vocab below 259 */
        {"64", "4", "2", "64", "300", "q4_1"}, /* unknown type */
        {"64x", "4", "2", "64", "300", "f32"}, /* not an integer */
        {"0", "4", "2", "64", "300", "f32"},   /* zero */
        {"-64", "4", "2", "64", "300", "f32"}, /* negative */
        {"96", "32", "2", "64", "300", "f32"}, /* head dim 3 is odd */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *args[] = {"convert",  "synth",    out,        "--dim",    rows[i][0],
                              "--layers", "1",        "--heads",  rows[i][1], "--kv-heads",
                              rows[i][2], "--ffn",    rows[i][3], "--vocab",  rows[i][4],
                              "--type",   rows[i][5], NULL};
        ck_assert_msg(run(args) == 2, "row %zu accepted", i);
        ck_assert_msg(strlen(cv_err) > 0 && strchr(cv_err, '\n') == cv_err + strlen(cv_err) - 1,
                      "row %zu: not one line: '%s'", i, cv_err);
        ck_assert(!exists(out));
    }
    const char *missing[] = {"convert", "synth", out, "--dim", "64", "--layers", "1", NULL};
    ck_assert_int_eq(run(missing), 2);
    const char *unknown[] = {"convert", "synth", out, "--dim", "64", "--bogus", "1", NULL};
    ck_assert_int_eq(run(unknown), 2);
    const char *noval[] = {"convert", "synth", out, "--dim", NULL};
    ck_assert_int_eq(run(noval), 2);
    const char *noout[] = {"convert", "synth", "--dim",      "64",  "--layers", "1",
                           "--heads", "4",     "--kv-heads", "2",   "--ffn",    "64",
                           "--vocab", "300",   "--type",     "f32", NULL};
    ck_assert_int_eq(run(noout), 2);
    ck_assert(!exists(out));
    tmpdir_rm(dir);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_convert STRATA_EXE\n");
        return 2;
    }
    strata_exe = argv[1];
    Suite *s = suite_create("gguf_convert");
    TCase *tc = tcase_create("convert");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_llama2c_stories);
    tcase_add_test(tc, test_llama2c_unshared_tokenizer);
    tcase_add_test(tc, test_llama2c_errors);
    tcase_add_test(tc, test_synth_types);
    tcase_add_test(tc, test_synth_deterministic);
    tcase_add_test(tc, test_synth_bad_args);
    tcase_add_test(tc, test_synth_qwen2);
    tcase_add_test(tc, test_synth_wave3);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
