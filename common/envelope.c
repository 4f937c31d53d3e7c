/* envelope.c - cluster message frames, MACs, sealing, replay window and
 * key files (see envelope.h). */
#include "common/envelope.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

static_assert(ST_ENV_MAC == crypto_auth_BYTES, "MAC size");
static_assert(ST_ENV_AEAD_TAG == crypto_aead_xchacha20poly1305_ietf_ABYTES, "AEAD tag size");
static_assert(ST_KEY_BYTES == crypto_auth_KEYBYTES &&
              ST_KEY_BYTES == crypto_aead_xchacha20poly1305_ietf_KEYBYTES, "key size");
static_assert(ST_ENV_AEAD_TAG <= ST_ENV_MAC, "ST_ENV_MAC bounds every tag");

#define ENV_NONCE_BYTES crypto_aead_xchacha20poly1305_ietf_NPUBBYTES

typedef struct st_env_peer {
    uint64_t sender;
    uint64_t last_seq;
    uint64_t used; /* tick of last use, 0 = free */
} st_env_peer;

static void env_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void env_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void env_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t env_get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint32_t env_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t env_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

st_err st_env_init(st_env *env, const uint8_t *key, uint64_t sender)
{
    return st_env_init_mode(env, key, false, sender);
}

st_err st_env_init_mode(st_env *env, const uint8_t *key, bool encrypt, uint64_t sender)
{
    memset(env, 0, sizeof *env);
    if (encrypt && key == NULL)
        return st_errorf(ST_EINVAL, "--encrypt needs a cluster key (--cluster-key FILE; "
                                    "`strata keygen FILE` makes one)");
    if (sodium_init() < 0)
        return st_err_sodium("sodium_init");
    env->sender = sender;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    env->seq = (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec;
    if (key != NULL) {
        env->keyed = true;
        env->encrypt = encrypt;
        memcpy(env->key, key, ST_KEY_BYTES);
        env->peers = calloc(ST_ENV_MAX_PEERS, sizeof *env->peers);
        if (env->peers == NULL)
            return st_errorf(ST_ENOMEM, "replay table");
    }
    return ST_OK;
}

void st_env_fini(st_env *env)
{
    free(env->peers);
    sodium_memzero(env->key, sizeof env->key);
    env->peers = NULL;
}

/* env_tag_len - the bytes after the body for frame flags. */
static size_t env_tag_len(uint16_t flags)
{
    return (flags & ST_ENV_FLAG_SEALED) ? ST_ENV_AEAD_TAG
           : (flags & ST_ENV_FLAG_MAC)  ? ST_ENV_MAC
                                        : 0;
}

static uint16_t env_flags(const st_env *env)
{
    return env->encrypt ? ST_ENV_FLAG_SEALED : env->keyed ? ST_ENV_FLAG_MAC : 0;
}

/* env_nonce - sender || seq || zeros: unique per frame under one key. */
static void env_nonce(uint8_t n[ENV_NONCE_BYTES], uint64_t sender, uint64_t seq)
{
    memset(n, 0, ENV_NONCE_BYTES);
    env_put64(n, sender);
    env_put64(n + 8, seq);
}

size_t st_env_size(const st_env *env, size_t body_len)
{
    return ST_ENV_HDR + body_len + env_tag_len(env_flags(env));
}

st_err st_env_seal(st_env *env, st_env_kind kind, uint8_t *buf, size_t body_len)
{
    if (body_len > ST_ENV_MAX_BODY)
        return st_errorf(ST_ERANGE, "message body of %zu bytes exceeds %u", body_len,
                         ST_ENV_MAX_BODY);
    uint16_t flags = env_flags(env);
    uint64_t seq = ++env->seq;
    memcpy(buf, "STEN", 4);
    env_put16(buf + 4, ST_ENV_VERSION);
    env_put16(buf + 6, flags);
    env_put16(buf + 8, (uint16_t)kind);
    env_put16(buf + 10, 0);
    env_put64(buf + 12, env->sender);
    env_put64(buf + 20, seq);
    env_put32(buf + 28, (uint32_t)body_len);
    uint8_t *body = buf + ST_ENV_HDR;
    if (flags & ST_ENV_FLAG_SEALED) {
        uint8_t nonce[ENV_NONCE_BYTES];
        env_nonce(nonce, env->sender, seq);
        if (crypto_aead_xchacha20poly1305_ietf_encrypt_detached(
                body, body + body_len, NULL, body, body_len, buf, ST_ENV_HDR, NULL, nonce,
                env->key) != 0)
            return st_err_sodium("crypto_aead_xchacha20poly1305_ietf_encrypt_detached");
    } else if (flags & ST_ENV_FLAG_MAC) {
        crypto_auth(body + body_len, buf, ST_ENV_HDR + body_len, env->key);
    }
    return ST_OK;
}

/* env_replay_ok - whether seq is new for sender; records it if so. */
static bool env_replay_ok(st_env *env, uint64_t sender, uint64_t seq)
{
    st_env_peer *slot = NULL, *oldest = &env->peers[0];
    for (size_t i = 0; i < ST_ENV_MAX_PEERS; i++) {
        st_env_peer *p = &env->peers[i];
        if (p->used && p->sender == sender) {
            slot = p;
            break;
        }
        if (p->used < oldest->used)
            oldest = p;
    }
    if (slot != NULL && seq <= slot->last_seq)
        return false;
    if (slot == NULL) {
        slot = oldest; /* a free slot (used 0) or the least recently seen */
        slot->sender = sender;
    }
    slot->last_seq = seq;
    slot->used = ++env->tick;
    return true;
}

/* env_tag_ok - whether the frame's own tag (MAC or AEAD) verifies. A
 * SEALED frame is decrypted in place when this process encrypts (one pass:
 * libsodium checks the tag before it writes anything), else only checked. */
static bool env_tag_ok(const st_env *env, uint8_t *buf, uint16_t flags, size_t body_len,
                       uint64_t sender, uint64_t seq)
{
    uint8_t *body = buf + ST_ENV_HDR, *tag = body + body_len;
    if (flags & ST_ENV_FLAG_SEALED) {
        uint8_t nonce[ENV_NONCE_BYTES];
        env_nonce(nonce, sender, seq);
        /* m = NULL: libsodium checks the tag only */
        return crypto_aead_xchacha20poly1305_ietf_decrypt_detached(
                   env->encrypt ? body : NULL, NULL, body, body_len, tag, buf, ST_ENV_HDR,
                   nonce, env->key) == 0;
    }
    return (flags & ST_ENV_FLAG_MAC) &&
           crypto_auth_verify(tag, buf, ST_ENV_HDR + body_len, env->key) == 0;
}

/* env_check_keyed - tag, mode and replay; a frame failing any is counted. */
static st_err env_check_keyed(st_env *env, uint8_t *buf, uint16_t flags, size_t body_len,
                              uint64_t sender, uint64_t seq)
{
    if (!env_tag_ok(env, buf, flags, body_len, sender, seq)) {
        env->auth_failed++;
        return st_errorf(ST_EAUTH, "frame from sender %llu fails authentication",
                         (unsigned long long)sender);
    }
    if ((flags & ST_ENV_FLAG_SEALED) && !env->encrypt) {
        env->auth_failed++;
        return st_errorf(ST_EAUTH, "frame from sender %llu is encrypted (its sender runs with "
                         "--encrypt) but this process does not: every member of a cluster, "
                         "and the CLI, must agree on --encrypt", (unsigned long long)sender);
    }
    if (!(flags & ST_ENV_FLAG_SEALED) && env->encrypt) {
        env->auth_failed++;
        return st_errorf(ST_EAUTH, "frame from sender %llu is not encrypted (its sender runs "
                         "without --encrypt) but this process encrypts: every member of a "
                         "cluster, and the CLI, must agree on --encrypt",
                         (unsigned long long)sender);
    }
    if (!env_replay_ok(env, sender, seq)) {
        env->auth_failed++;
        return st_errorf(ST_EAUTH, "replayed frame from sender %llu (seq %llu)",
                         (unsigned long long)sender, (unsigned long long)seq);
    }
    return ST_OK;
}

st_err st_env_open(st_env *env, uint8_t *buf, size_t len, st_env_frame *f)
{
    if (len < ST_ENV_HDR)
        return st_errorf(ST_ETRUNC, "frame of %zu bytes is shorter than its 32-byte header", len);
    if (memcmp(buf, "STEN", 4) != 0)
        return st_errorf(ST_EFORMAT, "frame magic is not STEN");
    uint16_t ver = env_get16(buf + 4), flags = env_get16(buf + 6), kind = env_get16(buf + 8);
    const uint16_t known = ST_ENV_FLAG_MAC | ST_ENV_FLAG_SEALED;
    if (ver != ST_ENV_VERSION)
        return st_errorf(ST_EVERSION, "frame version %u; this build speaks %u", ver,
                         ST_ENV_VERSION);
    if (flags & ~known)
        return st_errorf(ST_EFORMAT, "unknown frame flags 0x%x", flags & ~known);
    if (flags == known)
        return st_errorf(ST_EFORMAT, "frame flags both MAC and SEALED");
    if (kind < ST_ENV_CONTROL || kind > ST_ENV_RESULT)
        return st_errorf(ST_EFORMAT, "unknown frame kind %u", kind);
    if (env_get16(buf + 10) != 0)
        return st_errorf(ST_EFORMAT, "reserved frame field is not zero");
    uint32_t body_len = env_get32(buf + 28);
    size_t want = ST_ENV_HDR + (size_t)body_len + env_tag_len(flags);
    if (body_len > ST_ENV_MAX_BODY || len != want)
        return st_errorf(ST_ETRUNC, "frame of %zu bytes; its header says %zu", len, want);
    uint64_t sender = env_get64(buf + 12), seq = env_get64(buf + 20);
    if (env->keyed) {
        st_err e = env_check_keyed(env, buf, flags, body_len, sender, seq);
        if (e != ST_OK)
            return e;
    } else if (flags != 0) {
        return st_errorf(ST_EAUTH, "frame carries a %s but this process has no cluster key",
                         (flags & ST_ENV_FLAG_SEALED) ? "seal (--encrypt)" : "MAC");
    }
    f->kind = (st_env_kind)kind;
    f->sender = sender;
    f->seq = seq;
    f->body = buf + ST_ENV_HDR;
    f->body_len = body_len;
    return ST_OK;
}

st_err st_key_generate(const char *path)
{
    if (sodium_init() < 0)
        return st_err_sodium("sodium_init");
    uint8_t key[ST_KEY_BYTES];
    randombytes_buf(key, sizeof key);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return st_err_errno(errno, path);
    ssize_t w = write(fd, key, sizeof key);
    int en = errno;
    sodium_memzero(key, sizeof key);
    if (w != (ssize_t)sizeof key) {
        close(fd);
        unlink(path);
        return st_err_errno(w < 0 ? en : EIO, path);
    }
    if (fsync(fd) != 0 || close(fd) != 0)
        return st_err_errno(errno, path);
    return ST_OK;
}

st_err st_key_load(const char *path, uint8_t key[ST_KEY_BYTES])
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return st_err_errno(errno, path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int en = errno;
        close(fd);
        return st_err_errno(en, path);
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        close(fd);
        return st_errorf(ST_EAUTH, "key file %s is accessible by group or others (mode %o); "
                         "chmod 600 it", path, (unsigned)(st.st_mode & 0777));
    }
    if (st.st_size != ST_KEY_BYTES) {
        close(fd);
        return st_errorf(ST_EFORMAT, "key file %s has %lld bytes; a key has %d", path,
                         (long long)st.st_size, ST_KEY_BYTES);
    }
    ssize_t r = read(fd, key, ST_KEY_BYTES);
    int en = errno;
    close(fd);
    if (r != ST_KEY_BYTES)
        return st_err_errno(r < 0 ? en : EIO, path);
    return ST_OK;
}
