/* test_manifest.c - common/model/manifest.h on copies of models in
 * $STRATA_SHARED/models: the chunk grid (offsets, lengths, hashes of the
 * file's bytes, the check of a received chunk), the protobuf round trip
 * and its checks, the chunks a stage needs (exactly those holding a byte
 * of its tensors, plus the header's), and the manifest's cache file
 * (reused only while size, mtime and chunk size match; a damaged or
 * truncated cache file is ignored and recomputed). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/model/arch.h"
#include "common/model/gguf.h"
#include "common/model/llama.h"
#include "common/model/manifest.h"

#define TM_MODEL "l3-synth-q8_0.gguf"
#define TM_TIED "synth-tied-q8_0.gguf"
#define TM_MOE "w3-qwen3moe-q8_0.gguf" /* 2 layers of 8 experts */
#define TM_CHUNK ST_MANIFEST_CHUNK_MIN /* small: a model is hundreds of chunks */
#define TM_COPY_BUF ((size_t)1 << 20)

static char tm_tmp[PATH_MAX];

/* tm_copy - copies $STRATA_SHARED/models/name into the test's directory
 * (the cache tests change the copy's mtime and size); its path in out. */
static void tm_copy(const char *name, char *out, size_t cap)
{
    const char *sh = getenv("STRATA_SHARED");
    char src[PATH_MAX];
    snprintf(src, sizeof src, "%s/models/%s", sh ? sh : "../shared", name);
    ck_assert_int_lt(snprintf(out, cap, "%s/%s", tm_tmp, name), (int)cap);
    FILE *in = fopen(src, "rb"), *o = fopen(out, "wb");
    ck_assert_msg(in != NULL && o != NULL, "cannot copy %s to %s", src, out);
    char *buf = malloc(TM_COPY_BUF);
    ck_assert_ptr_nonnull(buf);
    size_t n;
    while ((n = fread(buf, 1, TM_COPY_BUF, in)) > 0)
        ck_assert_uint_eq(fwrite(buf, 1, n, o), n);
    free(buf);
    fclose(in);
    ck_assert_int_eq(fclose(o), 0);
}

static uint8_t *tm_read_all(const char *path, size_t *len)
{
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    *len = (size_t)sb.st_size;
    uint8_t *b = malloc(*len);
    ck_assert_ptr_nonnull(b);
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    size_t got = 0;
    while (got < *len) {
        ssize_t r = pread(fd, b + got, *len - got, (off_t)got);
        ck_assert_int_gt(r, 0);
        got += (size_t)r;
    }
    close(fd);
    return b;
}

static void tm_same(const st_manifest *a, const st_manifest *b)
{
    ck_assert_uint_eq(a->file_size, b->file_size);
    ck_assert_uint_eq(a->chunk_size, b->chunk_size);
    ck_assert_uint_eq(a->data_offset, b->data_offset);
    ck_assert_uint_eq(a->n_chunks, b->n_chunks);
    ck_assert_mem_eq(a->model_id, b->model_id, ST_MANIFEST_HASH);
    ck_assert_mem_eq(a->hash, b->hash, a->n_chunks * ST_MANIFEST_HASH);
}

START_TEST(chunking)
{
    char path[PATH_MAX];
    tm_copy(TM_MODEL, path, sizeof path);
    size_t size;
    uint8_t *file = tm_read_all(path, &size);
    st_manifest m;
    ck_assert_int_eq(st_manifest_compute(path, TM_CHUNK, &m), ST_OK);
    st_gguf *g;
    ck_assert_int_eq(st_gguf_open(path, &g), ST_OK);
    uint8_t id[ST_MANIFEST_HASH];
    ck_assert_int_eq(st_gguf_model_id(g, id), ST_OK);
    ck_assert_mem_eq(m.model_id, id, sizeof id);
    ck_assert_uint_eq(m.data_offset, st_gguf_data_offset(g));
    st_gguf_close(g);
    ck_assert_uint_eq(m.file_size, size);
    ck_assert_uint_eq(m.chunk_size, TM_CHUNK);
    ck_assert_uint_eq(m.n_chunks, (size + TM_CHUNK - 1) / TM_CHUNK);
    ck_assert_msg(size % TM_CHUNK != 0, "the model's size should leave a short last chunk");
    uint64_t next = 0;
    for (uint64_t i = 0; i < m.n_chunks; i++) {
        uint64_t off;
        size_t len;
        st_manifest_chunk(&m, i, &off, &len);
        ck_assert_uint_eq(off, next);
        ck_assert_uint_eq(len, i + 1 < m.n_chunks ? TM_CHUNK : size % TM_CHUNK);
        next = off + len;
        uint8_t h[ST_MANIFEST_HASH];
        crypto_generichash(h, sizeof h, file + off, len, NULL, 0);
        ck_assert_mem_eq(h, m.hash[i], sizeof h);
        ck_assert_int_eq(st_manifest_check(&m, i, file + off, len), ST_OK);
    }
    ck_assert_uint_eq(next, size);
    /* a received chunk: one flipped bit, a wrong length, a wrong index */
    uint64_t k = m.n_chunks / 2, off;
    size_t len;
    st_manifest_chunk(&m, k, &off, &len);
    file[off + len / 2] ^= 1;
    ck_assert_int_eq(st_manifest_check(&m, k, file + off, len), ST_ECHECKSUM);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "is not the manifest's"));
    file[off + len / 2] ^= 1;
    ck_assert_int_eq(st_manifest_check(&m, k, file + off, len - 1), ST_ERANGE);
    ck_assert_int_eq(st_manifest_check(&m, k + 1, file + off, len), ST_ECHECKSUM);
    ck_assert_int_eq(st_manifest_check(&m, m.n_chunks, file, len), ST_ERANGE);
    /* chunk sizes outside the range are refused */
    st_manifest bad;
    ck_assert_int_eq(st_manifest_compute(path, TM_CHUNK - 1, &bad), ST_ERANGE);
    ck_assert_int_eq(st_manifest_compute(path, ST_MANIFEST_CHUNK_MAX + 1, &bad), ST_ERANGE);
    st_manifest_free(&m);
    free(file);
}
END_TEST

START_TEST(protobuf)
{
    char path[PATH_MAX];
    tm_copy(TM_MODEL, path, sizeof path);
    st_manifest m, back;
    ck_assert_int_eq(st_manifest_compute(path, TM_CHUNK, &m), ST_OK);
    Strata__Manifest pb;
    st_manifest_to_pb(&m, &pb);
    size_t n = strata__manifest__get_packed_size(&pb);
    uint8_t *buf = malloc(n);
    ck_assert_ptr_nonnull(buf);
    strata__manifest__pack(&pb, buf);
    Strata__Manifest *u = strata__manifest__unpack(NULL, n, buf);
    ck_assert_ptr_nonnull(u);
    ck_assert_int_eq(st_manifest_from_pb(u, &back), ST_OK);
    tm_same(&m, &back);
    st_manifest_free(&back);
    /* each field a remote peer could get wrong */
    u->hashes.len -= ST_MANIFEST_HASH;
    ck_assert_int_eq(st_manifest_from_pb(u, &back), ST_EFORMAT);
    u->hashes.len += ST_MANIFEST_HASH;
    u->model_id.len--;
    ck_assert_int_eq(st_manifest_from_pb(u, &back), ST_EFORMAT);
    u->model_id.len++;
    u->file_size += TM_CHUNK; /* one chunk more than the hashes */
    ck_assert_int_eq(st_manifest_from_pb(u, &back), ST_EFORMAT);
    u->file_size -= TM_CHUNK;
    u->chunk_size = ST_MANIFEST_CHUNK_MAX * 2;
    ck_assert_int_eq(st_manifest_from_pb(u, &back), ST_ERANGE);
    u->chunk_size = TM_CHUNK;
    u->data_offset = 0;
    ck_assert_int_eq(st_manifest_from_pb(u, &back), ST_ERANGE);
    u->data_offset = u->file_size + 1;
    ck_assert_int_eq(st_manifest_from_pb(u, &back), ST_ERANGE);
    u->file_size = 0;
    ck_assert_int_eq(st_manifest_from_pb(u, &back), ST_ERANGE);
    ck_assert_ptr_null(back.hash);
    strata__manifest__free_unpacked(u, NULL);
    free(buf);
    st_manifest_free(&m);
}
END_TEST

/* tm_wanted - whether stage [first, last) of n_layer binds tensor t. */
static bool tm_wanted(const st_gguf *g, const st_gguf_tensor *t, int64_t first, int64_t last,
                      int64_t n_layer)
{
    int64_t layer;
    switch (st_arch_part_of(t->name, &layer)) {
    case ST_AP_LAYER:
        return layer >= first && layer < last;
    case ST_AP_EMBD:
        return first == 0 || (last == n_layer && st_arch_head_tied(g));
    case ST_AP_HEAD:
        return last == n_layer;
    case ST_AP_ROPE:
        return first < last;
    case ST_AP_OTHER:
        return false;
    }
    return false;
}

/* tm_stages - for every split of name's layers into [0, a) and [a, n):
 * a chunk is needed exactly when it holds header bytes or a byte of a
 * tensor the stage binds, and the two stages together need every chunk
 * that holds a tensor byte. */
static void tm_stages(const char *name)
{
    char path[PATH_MAX];
    tm_copy(name, path, sizeof path);
    st_manifest m;
    ck_assert_int_eq(st_manifest_compute(path, TM_CHUNK, &m), ST_OK);
    st_gguf *g;
    ck_assert_int_eq(st_gguf_open(path, &g), ST_OK);
    st_hparams hp;
    ck_assert_int_eq(st_hparams_from_gguf(g, &hp), ST_OK);
    const int64_t n = hp.n_layer, base = (int64_t)st_gguf_data_offset(g);
    bool *need = calloc(m.n_chunks, sizeof *need), *want = calloc(m.n_chunks, sizeof *want);
    bool *any = calloc(m.n_chunks, sizeof *any), *both = calloc(m.n_chunks, sizeof *both);
    ck_assert(need && want && any && both);
    for (uint64_t i = 0; i < st_gguf_n_tensors(g); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        for (uint64_t c = (base + t->offset) / TM_CHUNK;
             t->nbytes > 0 && c <= (base + t->offset + t->nbytes - 1) / TM_CHUNK; c++)
            any[c] = true;
    }
    for (int64_t a = 1; a < n; a++) {
        memset(both, 0, m.n_chunks);
        int64_t range[2][2] = {{0, a}, {a, n}};
        for (int s = 0; s < 2; s++) {
            memset(need, 0, m.n_chunks);
            ck_assert_int_eq(st_manifest_stage_chunks(&m, g, range[s][0], range[s][1], n, need),
                             ST_OK);
            memset(want, 0, m.n_chunks);
            for (uint64_t c = 0; c * TM_CHUNK < m.data_offset; c++)
                want[c] = true;
            for (uint64_t i = 0; i < st_gguf_n_tensors(g); i++) {
                const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
                if (!tm_wanted(g, t, range[s][0], range[s][1], n) || t->nbytes == 0)
                    continue;
                for (uint64_t c = (base + t->offset) / TM_CHUNK;
                     c <= (base + t->offset + t->nbytes - 1) / TM_CHUNK; c++)
                    want[c] = true;
            }
            for (uint64_t c = 0; c < m.n_chunks; c++) {
                ck_assert_msg(need[c] == want[c], "%s stage [%lld, %lld): chunk %llu %s", name,
                              (long long)range[s][0], (long long)range[s][1], (unsigned long long)c,
                              need[c] ? "needed" : "not needed");
                both[c] |= need[c];
            }
        }
        for (uint64_t c = 0; c < m.n_chunks; c++)
            ck_assert(!any[c] || both[c]);
    }
    /* a tensor table beyond the manifest's file */
    memset(need, 0, m.n_chunks);
    m.file_size = m.data_offset + 1;
    ck_assert_int_eq(st_manifest_stage_chunks(&m, g, 0, n, n, need), ST_ERANGE);
    st_gguf_close(g);
    free(need);
    free(want);
    free(any);
    free(both);
    st_manifest_free(&m);
}

START_TEST(stage_chunks) { tm_stages(TM_MODEL); }
END_TEST

START_TEST(stage_chunks_tied) { tm_stages(TM_TIED); }
END_TEST

/* A mixture of experts: its stacked expert tensors are layer tensors, so
 * weight streaming sends each stage its layers' experts (all of them). */
START_TEST(stage_chunks_moe)
{
    tm_stages(TM_MOE);
    char path[PATH_MAX];
    tm_copy(TM_MOE, path, sizeof path);
    st_manifest m;
    ck_assert_int_eq(st_manifest_compute(path, TM_CHUNK, &m), ST_OK);
    st_gguf *g;
    ck_assert_int_eq(st_gguf_open(path, &g), ST_OK);
    st_hparams hp;
    ck_assert_int_eq(st_hparams_from_gguf(g, &hp), ST_OK);
    ck_assert_int_gt(hp.n_expert, 0);
    const uint64_t base = st_gguf_data_offset(g);
    bool *need = calloc(m.n_chunks, sizeof *need);
    ck_assert_ptr_nonnull(need);
    const st_arch_tensor exps[] = {ST_AT_FFN_GATE_INP, ST_AT_FFN_GATE_EXPS, ST_AT_FFN_UP_EXPS,
                                   ST_AT_FFN_DOWN_EXPS};
    for (int64_t l = 0; l < hp.n_layer; l++) {
        memset(need, 0, m.n_chunks);
        ck_assert_int_eq(st_manifest_stage_chunks(&m, g, l, l + 1, hp.n_layer, need), ST_OK);
        for (size_t k = 0; k < sizeof exps / sizeof exps[0]; k++) {
            const st_gguf_tensor *t = st_arch_find(g, exps[k], l);
            ck_assert_ptr_nonnull(t);
            for (uint64_t c = (base + t->offset) / TM_CHUNK;
                 c <= (base + t->offset + t->nbytes - 1) / TM_CHUNK; c++)
                ck_assert_msg(need[c], "layer %lld: chunk %llu of %.*s not sent", (long long)l,
                              (unsigned long long)c, (int)t->name.len, t->name.data);
        }
    }
    free(need);
    st_gguf_close(g);
    st_manifest_free(&m);
}
END_TEST

/* tm_cached - st_manifest_cached, which must succeed; whether it computed. */
static bool tm_cached(const char *path, const char *dir, uint32_t chunk, st_manifest *m)
{
    bool computed = false;
    ck_assert_int_eq(st_manifest_cached(path, dir, chunk, m, &computed), ST_OK);
    return computed;
}

/* tm_cache_file - the one file in dir/manifests. */
static void tm_cache_file(const char *dir, char *out, size_t cap)
{
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "ls %s/manifests", dir);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char name[NAME_MAX + 2];
    ck_assert_ptr_nonnull(fgets(name, sizeof name, p));
    ck_assert_ptr_null(fgets(cmd, sizeof cmd, p)); /* one file only */
    pclose(p);
    name[strcspn(name, "\n")] = '\0';
    snprintf(out, cap, "%s/manifests/%s", dir, name);
}

static void tm_set_mtime(const char *path, const struct timespec *t)
{
    struct timespec ts[2] = {*t, *t};
    ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
}

START_TEST(cache_validation)
{
    char path[PATH_MAX], dir[PATH_MAX], cf[PATH_MAX];
    tm_copy(TM_MODEL, path, sizeof path);
    ck_assert_int_lt(snprintf(dir, sizeof dir, "%s/cache", tm_tmp), (int)sizeof dir);
    st_manifest ref, m;
    ck_assert_int_eq(st_manifest_compute(path, TM_CHUNK, &ref), ST_OK);
    ck_assert(tm_cached(path, dir, TM_CHUNK, &m)); /* first: computed and written */
    tm_same(&ref, &m);
    st_manifest_free(&m);
    tm_cache_file(dir, cf, sizeof cf);
    ck_assert(!tm_cached(path, dir, TM_CHUNK, &m)); /* then read back */
    tm_same(&ref, &m);
    st_manifest_free(&m);
    /* another chunk size: recomputed (and cached for that size) */
    ck_assert(tm_cached(path, dir, TM_CHUNK * 2, &m));
    ck_assert_uint_eq(m.chunk_size, TM_CHUNK * 2);
    st_manifest_free(&m);
    ck_assert(!tm_cached(path, dir, TM_CHUNK * 2, &m));
    st_manifest_free(&m);
    ck_assert(tm_cached(path, dir, TM_CHUNK, &m));
    st_manifest_free(&m);
    /* another mtime, by one nanosecond: recomputed */
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    struct timespec t = sb.st_mtim;
    t.tv_nsec = (t.tv_nsec + 1) % 1000000000L;
    tm_set_mtime(path, &t);
    ck_assert(tm_cached(path, dir, TM_CHUNK, &m));
    tm_same(&ref, &m);
    st_manifest_free(&m);
    ck_assert(!tm_cached(path, dir, TM_CHUNK, &m));
    st_manifest_free(&m);
    /* another size with the same mtime: not the cached manifest */
    ck_assert_int_eq(truncate(path, (off_t)ref.file_size + 1), 0);
    tm_set_mtime(path, &t);
    bool computed = false;
    st_err e = st_manifest_cached(path, dir, TM_CHUNK, &m, &computed);
    ck_assert_msg(e != ST_OK || (computed && m.file_size == ref.file_size + 1),
                  "a file of another size got its old manifest");
    st_manifest_free(&m);
    ck_assert_int_eq(truncate(path, (off_t)ref.file_size), 0);
    tm_set_mtime(path, &t);
    ck_assert(tm_cached(path, dir, TM_CHUNK, &m));
    tm_same(&ref, &m);
    st_manifest_free(&m);
    st_manifest_free(&ref);
}
END_TEST

/* tm_poke - flips one bit of file path at offset off. */
static void tm_poke(const char *path, off_t off)
{
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint8_t b;
    ck_assert_int_eq(pread(fd, &b, 1, off), 1);
    b ^= 0x10;
    ck_assert_int_eq(pwrite(fd, &b, 1, off), 1);
    close(fd);
}

START_TEST(cache_damaged)
{
    char path[PATH_MAX], dir[PATH_MAX], cf[PATH_MAX], beside[PATH_MAX];
    tm_copy(TM_MODEL, path, sizeof path);
    ck_assert_int_lt(snprintf(dir, sizeof dir, "%s/cache", tm_tmp), (int)sizeof dir);
    st_manifest ref, m;
    ck_assert(tm_cached(path, dir, TM_CHUNK, &ref));
    tm_cache_file(dir, cf, sizeof cf);
    struct stat sb;
    ck_assert_int_eq(stat(cf, &sb), 0);
    /* a bit of a hash, of the header, of the trailing check: recomputed */
    const off_t spots[] = {sb.st_size / 2, 12, sb.st_size - 1};
    for (size_t i = 0; i < sizeof spots / sizeof spots[0]; i++) {
        tm_poke(cf, spots[i]);
        ck_assert_msg(tm_cached(path, dir, TM_CHUNK, &m), "damage at %lld was not noticed",
                      (long long)spots[i]);
        tm_same(&ref, &m);
        st_manifest_free(&m);
        ck_assert(!tm_cached(path, dir, TM_CHUNK, &m)); /* rewritten whole */
        st_manifest_free(&m);
    }
    /* truncated, and with a byte more: recomputed */
    ck_assert_int_eq(truncate(cf, sb.st_size - 1), 0);
    ck_assert(tm_cached(path, dir, TM_CHUNK, &m));
    st_manifest_free(&m);
    FILE *f = fopen(cf, "ab");
    ck_assert_ptr_nonnull(f);
    fputc(0, f);
    fclose(f);
    ck_assert(tm_cached(path, dir, TM_CHUNK, &m));
    tm_same(&ref, &m);
    st_manifest_free(&m);
    /* no cache directory: beside the model, read back from there */
    ck_assert_int_lt(snprintf(beside, sizeof beside, "%s.strata-manifest", path),
                     (int)sizeof beside);
    ck_assert_int_ne(access(beside, F_OK), 0);
    ck_assert(tm_cached(path, NULL, TM_CHUNK, &m));
    st_manifest_free(&m);
    ck_assert_int_eq(access(beside, F_OK), 0);
    ck_assert(!tm_cached(path, NULL, TM_CHUNK, &m));
    tm_same(&ref, &m);
    st_manifest_free(&m);
    tm_poke(beside, 40);
    ck_assert(tm_cached(path, NULL, TM_CHUNK, &m));
    tm_same(&ref, &m);
    st_manifest_free(&m);
    st_manifest_free(&ref);
}
END_TEST

START_TEST(default_addr)
{
    char out[64];
    ck_assert_int_eq(st_weights_default_addr("tcp://10.0.0.1:7000", out, sizeof out), ST_OK);
    ck_assert_str_eq(out, "tcp://10.0.0.1:7001");
    ck_assert_int_eq(st_weights_default_addr("tcp://127.0.0.1:0", out, sizeof out), ST_OK);
    ck_assert_str_eq(out, "tcp://127.0.0.1:0");
    ck_assert_int_eq(st_weights_default_addr("tcp://h:65535", out, sizeof out), ST_EINVAL);
    ck_assert_int_eq(st_weights_default_addr("ipc:///x", out, sizeof out), ST_EINVAL);
    ck_assert_int_eq(st_weights_default_addr("tcp://h:", out, sizeof out), ST_EINVAL);
    ck_assert_int_eq(st_weights_default_addr("tcp://h:7000", out, 8), ST_ERANGE);
}
END_TEST

/* tm_setup - a fresh directory per test (check forks one process each). */
static void tm_setup(void)
{
    snprintf(tm_tmp, sizeof tm_tmp, "%s/strata-manifest-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(tm_tmp));
    ck_assert_int_ge(sodium_init(), 0);
}

static void tm_teardown(void)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tm_tmp);
    ck_assert_int_eq(system(cmd), 0);
}

int main(void)
{
    Suite *s = suite_create("manifest");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, tm_setup, tm_teardown);
    tcase_add_test(tc, chunking);
    tcase_add_test(tc, protobuf);
    tcase_add_test(tc, stage_chunks);
    tcase_add_test(tc, stage_chunks_tied);
    tcase_add_test(tc, stage_chunks_moe);
    tcase_add_test(tc, cache_validation);
    tcase_add_test(tc, cache_damaged);
    tcase_add_test(tc, default_addr);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
