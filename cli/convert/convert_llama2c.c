/* convert_llama2c.c - `strata convert llama2c`: a llama2.c checkpoint
 * (legacy format: a 7-int32 header, then f32 sections) as a llama GGUF.
 * The checkpoint is mapped read-only and the writer gets pointers into it
 * (cmd_convert.c's file comment says why nothing is permuted). */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/convert/convert_impl.h"

#define CV_L2C_HEADER 28

/* Adds n f32 values of the checkpoint at *at as tensor name and advances. */
static st_err cv_l2c_tensor(st_gguf_writer *w, const char *name, const uint8_t *base, uint64_t *at,
                            int64_t ne0, int64_t ne1)
{
    int64_t ne[2] = {ne0, ne1};
    size_t nbytes = (size_t)ne0 * (size_t)(ne1 ? ne1 : 1) * 4;
    st_err e = st_gguf_writer_add_tensor(w, name, ST_DT_F32, ne1 ? 2 : 1, ne, base + *at, nbytes);
    *at += nbytes;
    return e;
}

/* Checks the header and that the file holds exactly the weights it implies. */
static st_err cv_l2c_check(const char *path, const int32_t h[7], uint64_t size, st_hparams *hp,
                           bool *shared)
{
    if (h[0] == 0x616b3432)
        return st_errorf(ST_EVERSION,
                         "convert: '%s' is llama2.c's versioned export format (magic ak42); only "
                         "the legacy format is read",
                         path);
    const char *names[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                            "n_kv_heads", "vocab_size", "seq_len"};
    for (int i = 0; i < 7; i++)
        if (h[i] <= 0 && i != 5)
            return st_errorf(ST_EFORMAT, "convert: '%s': header field %s is %d", path, names[i],
                             h[i]);
    if (h[5] == 0 || h[5] == INT32_MIN)
        return st_errorf(ST_EFORMAT, "convert: '%s': header field vocab_size is %d", path, h[5]);
    *hp = (st_hparams){.arch = hp->arch,
                       .n_embd = h[0],
                       .n_ff = h[1],
                       .n_layer = h[2],
                       .n_head = h[3],
                       .n_head_kv = h[4],
                       .n_vocab = h[5] < 0 ? -(int64_t)h[5] : h[5],
                       .n_ctx_train = h[6]};
    *shared = h[5] > 0;
    if (hp->n_embd % hp->n_head != 0 || hp->n_head % hp->n_head_kv != 0 ||
        (hp->n_embd / hp->n_head) % 2)
        return st_errorf(
            ST_ESHAPE,
            "convert: '%s': dim %lld, n_heads %lld, n_kv_heads %lld do not form whole, even heads",
            path, (long long)hp->n_embd, (long long)hp->n_head, (long long)hp->n_head_kv);
    cv_hparams_derive(hp);
    uint64_t d = (uint64_t)hp->n_embd, L = (uint64_t)hp->n_layer, f = (uint64_t)hp->n_ff;
    uint64_t kv = d / (uint64_t)hp->n_head * (uint64_t)hp->n_head_kv;
    uint64_t V = (uint64_t)hp->n_vocab, hs = d / (uint64_t)hp->n_head,
             T = (uint64_t)hp->n_ctx_train;
    /* a hostile header can make these products wrap: sum with overflow checks */
    struct {
        uint64_t a, b, c;
    } parts[] = {
        {V, d, 1},
        {L, d, 1},
        {L, d, d},
        {L, kv, d},
        {L, kv, d},
        {L, d, d},
        {L, d, 1},
        {L, f, d},
        {L, d, f},
        {L, f, d},
        {d, 1, 1},
        {T, hs / 2, 2},
        {*shared ? 0 : V, d, 1},
    };
    uint64_t n = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        uint64_t p;
        if (__builtin_mul_overflow(parts[i].a, parts[i].b, &p) ||
            __builtin_mul_overflow(p, parts[i].c, &p) || __builtin_add_overflow(n, p, &n))
            return st_errorf(ST_EOVERFLOW, "convert: '%s': the header's sizes overflow 64 bits",
                             path);
    }
    uint64_t want; /* bytes: the header and n floats */
    if (__builtin_mul_overflow(n, (uint64_t)4, &n) ||
        __builtin_add_overflow(n, (uint64_t)CV_L2C_HEADER, &want))
        return st_errorf(ST_EOVERFLOW, "convert: '%s': the header's sizes overflow 64 bits", path);
    if (size < want)
        return st_errorf(ST_ETRUNC, "convert: '%s' has %llu bytes, its header implies %llu", path,
                         (unsigned long long)size, (unsigned long long)want);
    if (size > want)
        return st_errorf(ST_EFORMAT,
                         "convert: '%s' has %llu bytes, %llu more than its header implies", path,
                         (unsigned long long)size, (unsigned long long)(size - want));
    return ST_OK;
}

int cv_llama2c(int argc, char **argv)
{
    static const char synopsis[] =
        "strata convert llama2c IN.bin OUT.gguf [--tokenizer tokenizer.bin]";
    const char *in = NULL, *out = NULL, *tok = NULL;
    const char *ops[2] = {NULL, NULL};
    size_t n_ops = 0;
    const st_opt rows[] = {
        {.name = "--tokenizer", .type = ST_OPT_STR, .dest = &tok, .value = "tokenizer.bin",
         .help = "llama2.c's tokenizer file (default: none)"},
    };
    /* argv[0] is "convert", argv[1] "llama2c" */
    int st = cli_opts("convert llama2c", synopsis, rows, sizeof rows / sizeof rows[0], ops, 2,
                      &n_ops, argc - 1, argv + 1);
    if (st != CLI_OPTS_GO)
        return st;
    in = ops[0];
    out = ops[1];
    if (in == NULL || out == NULL) {
        fprintf(stderr, "strata: convert llama2c: usage: %s\n", synopsis);
        return 2;
    }
    int fd = open(in, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cv_fail(st_errorf(errno == ENOENT ? ST_ENOENT : ST_EIO, "convert: open '%s': %s", in,
                                 strerror(errno)));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return cv_fail(st_errorf(ST_EINVAL, "convert: '%s' is not a readable regular file", in));
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < CV_L2C_HEADER) {
        close(fd);
        return cv_fail(st_errorf(ST_ETRUNC,
                                 "convert: '%s' has %llu bytes, less than the 28-byte header", in,
                                 (unsigned long long)size));
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int en = errno;
    close(fd);
    if (map == MAP_FAILED)
        return cv_fail(st_errorf(ST_EIO, "convert: mmap '%s': %s", in, strerror(en)));
    const uint8_t *base = map;
    int32_t h[7];
    memcpy(h, base, sizeof h);
    st_hparams hp = {.arch = st_arch_by_name("llama")};
    bool shared = true;
    cv_vocab v = {0};
    st_gguf_writer *w = NULL;
    st_err e = cv_l2c_check(in, h, size, &hp, &shared);
    if (!e && !tok && hp.n_vocab < CV_MIN_VOCAB)
        e = st_errorf(ST_ESHAPE, "convert: vocab_size %lld is below %d: give --tokenizer",
                      (long long)hp.n_vocab, CV_MIN_VOCAB);
    if (!e)
        e = tok ? cv_vocab_llama2c(&v, tok, hp.n_vocab) : cv_vocab_placeholder(&v, hp.n_vocab);
    char name[512];
    const char *slash = strrchr(in, '/');
    snprintf(name, sizeof name, "llama2c:%s", slash ? slash + 1 : in);
    if (!e)
        e = st_gguf_writer_open(out, &w);
    if (!e)
        e = cv_add_meta(w, name, ST_DT_F32, &hp, &v);

    /* section offsets of the checkpoint */
    uint64_t d = (uint64_t)hp.n_embd, L = (uint64_t)hp.n_layer, f = (uint64_t)hp.n_ff;
    uint64_t kv = e ? 0 : d / (uint64_t)hp.n_head * (uint64_t)hp.n_head_kv;
    uint64_t V = (uint64_t)hp.n_vocab, hs = e ? 0 : d / (uint64_t)hp.n_head;
    uint64_t o_emb = CV_L2C_HEADER, o_att = o_emb + 4 * V * d, o_wq = o_att + 4 * L * d;
    uint64_t o_wk = o_wq + 4 * L * d * d, o_wv = o_wk + 4 * L * kv * d;
    uint64_t o_wo = o_wv + 4 * L * kv * d, o_ffn = o_wo + 4 * L * d * d;
    uint64_t o_w1 = o_ffn + 4 * L * d, o_w2 = o_w1 + 4 * L * f * d, o_w3 = o_w2 + 4 * L * d * f;
    uint64_t o_fin = o_w3 + 4 * L * f * d;
    uint64_t o_cls = o_fin + 4 * d + 4 * (uint64_t)hp.n_ctx_train * (hs / 2) * 2;
    if (!e) {
        uint64_t at = o_emb;
        char nm[ST_ARCH_NAME_MAX];
        e = cv_l2c_tensor(w, st_arch_tensor_name(ST_AT_TOKEN_EMBD, 0, nm), base, &at, hp.n_embd,
                          hp.n_vocab);
    }
    for (uint64_t l = 0; l < L && !e; l++) {
        struct {
            st_arch_tensor id;
            uint64_t off;
            int64_t ne0, ne1;
        } parts[9] = {
            {ST_AT_ATTN_NORM, o_att + 4 * l * d, hp.n_embd, 0},
            {ST_AT_ATTN_Q, o_wq + 4 * l * d * d, hp.n_embd, hp.n_embd},
            {ST_AT_ATTN_K, o_wk + 4 * l * kv * d, hp.n_embd, (int64_t)kv},
            {ST_AT_ATTN_V, o_wv + 4 * l * kv * d, hp.n_embd, (int64_t)kv},
            {ST_AT_ATTN_OUT, o_wo + 4 * l * d * d, hp.n_embd, hp.n_embd},
            {ST_AT_FFN_NORM, o_ffn + 4 * l * d, hp.n_embd, 0},
            {ST_AT_FFN_GATE, o_w1 + 4 * l * f * d, hp.n_embd, hp.n_ff},
            {ST_AT_FFN_DOWN, o_w2 + 4 * l * d * f, hp.n_ff, hp.n_embd},
            {ST_AT_FFN_UP, o_w3 + 4 * l * f * d, hp.n_embd, hp.n_ff},
        };
        for (int k = 0; k < 9 && !e; k++) {
            char nm[ST_ARCH_NAME_MAX];
            uint64_t at = parts[k].off;
            e = cv_l2c_tensor(w, st_arch_tensor_name(parts[k].id, (int64_t)l, nm), base, &at,
                              parts[k].ne0, parts[k].ne1);
        }
    }
    if (!e) {
        uint64_t at = o_fin;
        char nm[ST_ARCH_NAME_MAX];
        e = cv_l2c_tensor(w, st_arch_tensor_name(ST_AT_OUTPUT_NORM, 0, nm), base, &at, hp.n_embd,
                          0);
    }
    if (!e && !shared) {
        uint64_t at = o_cls;
        char nm[ST_ARCH_NAME_MAX];
        e = cv_l2c_tensor(w, st_arch_tensor_name(ST_AT_OUTPUT, 0, nm), base, &at, hp.n_embd,
                          hp.n_vocab);
    }
    if (!e)
        e = st_gguf_writer_finish(w);
    st_gguf_writer_free(w);
    cv_vocab_free(&v);
    munmap(map, (size_t)size);
    return e ? cv_fail(e) : 0;
}
