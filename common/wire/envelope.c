/* envelope.c - cluster message frames, MACs, sealing and key files (see
 * envelope.h); the replay table is replay.c's. */
#include "common/wire/envelope.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/base/le.h"

static_assert(ST_ENV_MAC == crypto_auth_BYTES, "MAC size");
static_assert(ST_ENV_AEAD_TAG == crypto_aead_xchacha20poly1305_ietf_ABYTES, "AEAD tag size");
static_assert(ST_KEY_BYTES == crypto_auth_KEYBYTES &&
                  ST_KEY_BYTES == crypto_aead_xchacha20poly1305_ietf_KEYBYTES,
              "key size");
static_assert(ST_ENV_AEAD_TAG <= ST_ENV_MAC, "ST_ENV_MAC bounds every tag");

#define ENV_NONCE_BYTES crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
#define ENV_KEYFILE_MAX_BYTES ((size_t)1 << 20) /* a key file larger than this is refused */
#define ENV_HASH_MIN crypto_generichash_BYTES_MIN

/* Domains of the keyed hashes that turn a key's text into a MAC key and a
 * MAC key into its id (crypto_generichash keys of 16..64 bytes). */
static const char env_text_domain[] = "strata credential text to MAC key v1";
static const char env_id_domain[] = "strata credential key id v1";

typedef struct st_env_cred {
    uint8_t key[ST_KEY_BYTES];
    uint16_t id;
    st_env_role role;
} st_env_cred;

/* env_now_us - the wall clock in microseconds (sequence numbers). */
static uint64_t env_now_us(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec;
}

st_err st_env_init(st_env *env, const uint8_t *key, uint64_t sender)
{
    return st_env_init_mode(env, key, false, sender);
}

st_err st_env_init_mode(st_env *env, const uint8_t *key, bool encrypt, uint64_t sender)
{
    st_err e = st_env_init_cred(env, key, ST_ROLE_MEMBER, encrypt, sender);
    if (e == ST_OK && key == NULL)
        env->role = ST_ROLE_OPEN;
    return e;
}

st_err st_env_init_cred(st_env *env, const uint8_t *key, st_env_role role, bool encrypt,
                        uint64_t sender)
{
    memset(env, 0, sizeof *env);
    if (encrypt && key == NULL)
        return st_errorf(ST_EINVAL, "--encrypt needs a cluster key (--cluster-key FILE; "
                                    "`strata keygen FILE` makes one)");
    if (sodium_init() < 0)
        return st_err_sodium("sodium_init");
    env->sender = sender;
    env->seq = env_now_us();
    if (role != ST_ROLE_MEMBER && role != ST_ROLE_CLIENT && role != ST_ROLE_ADMIN)
        return st_errorf(ST_EINVAL, "an envelope's own key is a cluster, client or admin key");
    env->role = role;
    if (key != NULL) {
        env->keyed = true;
        env->encrypt = encrypt;
        memcpy(env->key, key, ST_KEY_BYTES);
        env->key_id = role == ST_ROLE_MEMBER ? 0 : st_key_id(key);
        st_err e = st_replay_open(&env->replay);
        if (e != ST_OK)
            return e;
    }
    return ST_OK;
}

void st_env_fini(st_env *env)
{
    st_replay_close(env->replay);
    sodium_memzero(env->key, sizeof env->key);
    if (env->creds != NULL)
        sodium_memzero(env->creds, env->n_creds * sizeof *env->creds);
    free(env->creds);
    env->replay = NULL;
    env->creds = NULL;
    env->n_creds = 0;
}

st_err st_env_accept(st_env *env, const uint8_t *key, st_env_role role)
{
    if (!env->keyed || env->role != ST_ROLE_MEMBER)
        return st_errorf(ST_EINVAL, "client and admin keys need a cluster key (--cluster-key)");
    if (role != ST_ROLE_CLIENT && role != ST_ROLE_ADMIN)
        return st_errorf(ST_EINVAL, "only client and admin keys are accepted besides the "
                                    "cluster key");
    if (sodium_memcmp(key, env->key, ST_KEY_BYTES) == 0)
        return st_errorf(ST_EINVAL, "a %s key equals the cluster key", st_env_role_name(role));
    if (env->n_creds == ST_ENV_MAX_CREDS)
        return st_errorf(ST_ERANGE, "more than %d client and admin keys", ST_ENV_MAX_CREDS);
    st_env_cred *v = realloc(env->creds, (env->n_creds + 1) * sizeof *v);
    if (v == NULL)
        return st_errorf(ST_ENOMEM, "credential table");
    env->creds = v;
    st_env_cred *c = &v[env->n_creds++];
    memcpy(c->key, key, ST_KEY_BYTES);
    c->id = st_key_id(key);
    c->role = role;
    return ST_OK;
}

st_err st_env_seal_with(st_env *env, uint32_t cred)
{
    if (cred > env->n_creds)
        return st_errorf(ST_EINVAL, "credential %u of %zu", cred, env->n_creds);
    env->seal_cred = cred;
    return ST_OK;
}

const char *st_env_role_name(st_env_role role)
{
    switch (role) {
    case ST_ROLE_OPEN:
        return "open";
    case ST_ROLE_MEMBER:
        return "member";
    case ST_ROLE_ADMIN:
        return "admin";
    case ST_ROLE_CLIENT:
        return "client";
    }
    return "unknown";
}

uint16_t st_key_id(const uint8_t key[ST_KEY_BYTES])
{
    uint8_t h[ENV_HASH_MIN];
    crypto_generichash(h, sizeof h, key, ST_KEY_BYTES, (const uint8_t *)env_id_domain,
                       sizeof env_id_domain - 1);
    uint16_t id = st_le_ld16(h);
    return id != 0 ? id : 1; /* 0 names the cluster key */
}

st_err st_key_from_text(const char *text, size_t len, uint8_t key[ST_KEY_BYTES])
{
    if (len < ST_KEY_TEXT_MIN || len > ST_KEY_TEXT_MAX)
        return st_errorf(ST_EFORMAT, "a key has %d to %d characters, not %zu", ST_KEY_TEXT_MIN,
                         ST_KEY_TEXT_MAX, len);
    for (size_t i = 0; i < len; i++)
        if (text[i] <= ' ' || text[i] > '~')
            return st_errorf(ST_EFORMAT,
                             "a key is printable ASCII without spaces (character "
                             "%zu is 0x%02x)",
                             i + 1, (unsigned)(uint8_t)text[i]);
    if (sodium_init() < 0)
        return st_err_sodium("sodium_init");
    crypto_generichash(key, ST_KEY_BYTES, (const uint8_t *)text, len,
                       (const uint8_t *)env_text_domain, sizeof env_text_domain - 1);
    return ST_OK;
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

/* env_bind - the 24 authenticated bytes binding a frame to its receiver
 * and, for a reply, its request (envelope.h). */
static void env_bind(uint8_t b[ST_ENV_BIND], uint64_t receiver, uint64_t req_sender,
                     uint64_t req_seq)
{
    st_le_st64(b, receiver);
    st_le_st64(b + 8, req_sender);
    st_le_st64(b + 16, req_seq);
}

/* env_mac - crypto_auth (HMAC-SHA-512-256) of buf[0, n) || bind. */
static void env_mac(uint8_t out[ST_ENV_MAC], const uint8_t *buf, size_t n,
                    const uint8_t bind[ST_ENV_BIND], const uint8_t *key)
{
    crypto_auth_hmacsha512256_state st;
    crypto_auth_hmacsha512256_init(&st, key, ST_KEY_BYTES);
    crypto_auth_hmacsha512256_update(&st, buf, n);
    crypto_auth_hmacsha512256_update(&st, bind, ST_ENV_BIND);
    crypto_auth_hmacsha512256_final(&st, out);
    sodium_memzero(&st, sizeof st);
}

void st_env_reply_to(st_env *env, uint64_t sender, uint64_t seq)
{
    env->reply_sender = env->keyed ? sender : 0;
    env->reply_seq = env->keyed ? seq : 0;
}

/* env_nonce - sender || seq || zeros: unique per frame under one key. */
static void env_nonce(uint8_t n[ENV_NONCE_BYTES], uint64_t sender, uint64_t seq)
{
    memset(n, 0, ENV_NONCE_BYTES);
    st_le_st64(n, sender);
    st_le_st64(n + 8, seq);
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
    uint64_t now = env_now_us();
    uint64_t seq = env->seq = now > env->seq ? now : env->seq + 1;
    uint8_t bind[ST_ENV_BIND], ad[ST_ENV_HDR + ST_ENV_BIND];
    if (env->keyed && env->reply_sender != 0) {
        flags |= ST_ENV_FLAG_REPLY;
        env_bind(bind, env->reply_sender, env->reply_sender, env->reply_seq);
    } else {
        if (env->learn_peer && !env->answered)
            env->peer = 0; /* unanswered: perhaps a restarted receiver, with a new id */
        uint64_t to = env->to ? env->to : env->learn_peer ? env->peer : 0;
        if (env->keyed && to != 0)
            flags |= ST_ENV_FLAG_TO;
        env_bind(bind, env->keyed ? to : 0, 0, 0);
        env->asked = seq;
        env->answered = false;
    }
    env->to = env->reply_sender = env->reply_seq = 0;
    const st_env_cred *cr = env->seal_cred ? &env->creds[env->seal_cred - 1] : NULL;
    const uint8_t *key = cr ? cr->key : env->key;
    memcpy(buf, "STEN", 4);
    st_le_st16(buf + 4, ST_ENV_VERSION);
    st_le_st16(buf + 6, flags);
    st_le_st16(buf + 8, (uint16_t)kind);
    st_le_st16(buf + 10, cr ? cr->id : env->key_id);
    st_le_st64(buf + 12, env->sender);
    st_le_st64(buf + 20, seq);
    st_le_st32(buf + 28, (uint32_t)body_len);
    uint8_t *body = buf + ST_ENV_HDR;
    if (flags & ST_ENV_FLAG_SEALED) {
        uint8_t nonce[ENV_NONCE_BYTES];
        env_nonce(nonce, env->sender, seq);
        memcpy(ad, buf, ST_ENV_HDR);
        memcpy(ad + ST_ENV_HDR, bind, ST_ENV_BIND);
        if (crypto_aead_xchacha20poly1305_ietf_encrypt_detached(body, body + body_len, NULL, body,
                                                                body_len, ad, sizeof ad, NULL,
                                                                nonce, key) != 0)
            return st_err_sodium("crypto_aead_xchacha20poly1305_ietf_encrypt_detached");
    } else if (flags & ST_ENV_FLAG_MAC) {
        env_mac(body + body_len, buf, ST_ENV_HDR + body_len, bind, key);
    }
    return ST_OK;
}

bool st_env_unbound(const st_env *env)
{
    return env->keyed && env->learn_peer && !env->answered;
}

/* env_tag_ok - whether the frame's own tag (MAC or AEAD) verifies. A
 * SEALED frame is decrypted in place when this process encrypts (one pass:
 * libsodium checks the tag before it writes anything), else only checked. */
static bool env_tag_ok(const st_env *env, const uint8_t *key, uint8_t *buf, uint16_t flags,
                       size_t body_len, uint64_t sender, uint64_t seq,
                       const uint8_t bind[ST_ENV_BIND])
{
    uint8_t *body = buf + ST_ENV_HDR, *tag = body + body_len;
    if (flags & ST_ENV_FLAG_SEALED) {
        uint8_t nonce[ENV_NONCE_BYTES], ad[ST_ENV_HDR + ST_ENV_BIND];
        env_nonce(nonce, sender, seq);
        memcpy(ad, buf, ST_ENV_HDR);
        memcpy(ad + ST_ENV_HDR, bind, ST_ENV_BIND);
        /* m = NULL: libsodium checks the tag only */
        return crypto_aead_xchacha20poly1305_ietf_decrypt_detached(env->encrypt ? body : NULL, NULL,
                                                                   body, body_len, tag, ad,
                                                                   sizeof ad, nonce, key) == 0;
    }
    if (!(flags & ST_ENV_FLAG_MAC))
        return false;
    uint8_t mac[ST_ENV_MAC];
    env_mac(mac, buf, ST_ENV_HDR + body_len, bind, key);
    return crypto_verify_32(mac, tag) == 0;
}

/* env_verify - the credential whose key verifies the frame's tag: among
 * the keys of the frame's key id only; false if none does. */
static bool env_verify(const st_env *env, uint8_t *buf, uint16_t flags, size_t body_len,
                       uint64_t sender, uint64_t seq, const uint8_t bind[ST_ENV_BIND],
                       uint32_t *cred, st_env_role *role)
{
    uint16_t id = st_le_ld16(buf + 10);
    if (id == env->key_id && env_tag_ok(env, env->key, buf, flags, body_len, sender, seq, bind)) {
        *cred = 0;
        *role = env->role;
        return true;
    }
    for (size_t i = 0; i < env->n_creds; i++) {
        const st_env_cred *c = &env->creds[i];
        if (c->id == id && env_tag_ok(env, c->key, buf, flags, body_len, sender, seq, bind)) {
            *cred = (uint32_t)i + 1;
            *role = c->role;
            return true;
        }
    }
    return false;
}

/* env_check_keyed - tag, mode and replay; a frame failing any is counted. */
static st_err env_check_keyed(st_env *env, uint8_t *buf, uint16_t flags, size_t body_len,
                              uint64_t sender, uint64_t seq, st_env_frame *f)
{
    uint64_t req = env->expect ? env->expect : env->asked;
    env->expect = 0;
    uint8_t bind[ST_ENV_BIND];
    if (flags & ST_ENV_FLAG_REPLY)
        env_bind(bind, env->sender, env->sender, req);
    else
        env_bind(bind, (flags & ST_ENV_FLAG_TO) ? env->sender : 0, 0, 0);
    if (((flags & ST_ENV_FLAG_REPLY) && req == 0) ||
        !env_verify(env, buf, flags, body_len, sender, seq, bind, &f->cred, &f->role)) {
        env->auth_failed++;
        return st_errorf(ST_EAUTH, "frame from sender %llu fails authentication%s",
                         (unsigned long long)sender,
                         (flags & ST_ENV_FLAG_REPLY) ? " (a reply, not to our request)"
                         : (flags & ST_ENV_FLAG_TO)  ? " (bound to another receiver)"
                                                     : "");
    }
    if ((flags & ST_ENV_FLAG_SEALED) && !env->encrypt) {
        env->auth_failed++;
        return st_errorf(ST_EAUTH,
                         "frame from sender %llu is encrypted (its sender runs with "
                         "--encrypt) but this process does not: every member of a cluster, "
                         "and the CLI, must agree on --encrypt",
                         (unsigned long long)sender);
    }
    if (!(flags & ST_ENV_FLAG_SEALED) && env->encrypt) {
        env->auth_failed++;
        return st_errorf(ST_EAUTH,
                         "frame from sender %llu is not encrypted (its sender runs "
                         "without --encrypt) but this process encrypts: every member of a "
                         "cluster, and the CLI, must agree on --encrypt",
                         (unsigned long long)sender);
    }
    uint64_t now = env_now_us();
    if (seq + ST_ENV_WINDOW_US < now || seq > now + ST_ENV_WINDOW_US) {
        env->auth_failed++;
        return st_errorf(ST_EAUTH,
                         "frame from sender %llu is %.1f s %s this clock: outside the "
                         "%llu s window (replayed, or the cluster's clocks disagree)",
                         (unsigned long long)sender,
                         (double)(seq < now ? now - seq : seq - now) * 1e-6,
                         seq < now ? "behind" : "ahead of",
                         (unsigned long long)(ST_ENV_WINDOW_US / 1000000u));
    }
    st_err e = st_replay_check(env->replay, sender, f->cred, seq);
    if (e == ST_EAUTH)
        env->auth_failed++;
    if (e != ST_OK)
        return e;
    f->bound = (flags & (ST_ENV_FLAG_TO | ST_ENV_FLAG_REPLY)) != 0;
    f->reply = (flags & ST_ENV_FLAG_REPLY) != 0;
    if (f->reply && req == env->asked) {
        env->answered = true;
        env->peer = sender;
    }
    return ST_OK;
}

st_err st_env_open(st_env *env, uint8_t *buf, size_t len, st_env_frame *f)
{
    if (len < ST_ENV_HDR)
        return st_errorf(ST_ETRUNC, "frame of %zu bytes is shorter than its 32-byte header", len);
    if (memcmp(buf, "STEN", 4) != 0)
        return st_errorf(ST_EFORMAT, "frame magic is not STEN");
    uint16_t ver = st_le_ld16(buf + 4), flags = st_le_ld16(buf + 6), kind = st_le_ld16(buf + 8);
    const uint16_t tags = ST_ENV_FLAG_MAC | ST_ENV_FLAG_SEALED,
                   binds = ST_ENV_FLAG_TO | ST_ENV_FLAG_REPLY, known = tags | binds;
    if (ver != ST_ENV_VERSION)
        return st_errorf(ST_EVERSION, "frame version %u; this build speaks %u", ver,
                         ST_ENV_VERSION);
    if (flags & ~known)
        return st_errorf(ST_EFORMAT, "unknown frame flags 0x%x", flags & ~known);
    if ((flags & tags) == tags)
        return st_errorf(ST_EFORMAT, "frame flags both MAC and SEALED");
    if ((flags & binds) == binds)
        return st_errorf(ST_EFORMAT, "frame flags both TO and REPLY");
    if ((flags & binds) && !(flags & tags))
        return st_errorf(ST_EFORMAT, "frame binds its receiver but carries no MAC");
    if (kind < ST_ENV_CONTROL || kind > ST_ENV_RESULT)
        return st_errorf(ST_EFORMAT, "unknown frame kind %u", kind);
    if (flags == 0 && st_le_ld16(buf + 10) != 0)
        return st_errorf(ST_EFORMAT, "frame names key %u but carries no MAC", st_le_ld16(buf + 10));
    uint32_t body_len = st_le_ld32(buf + 28);
    size_t want = ST_ENV_HDR + (size_t)body_len + env_tag_len(flags);
    if (body_len > ST_ENV_MAX_BODY || len != want)
        return st_errorf(ST_ETRUNC, "frame of %zu bytes; its header says %zu", len, want);
    uint64_t sender = st_le_ld64(buf + 12), seq = st_le_ld64(buf + 20);
    f->role = ST_ROLE_OPEN;
    f->cred = 0;
    f->bound = f->reply = false;
    if (env->keyed) {
        st_err e = env_check_keyed(env, buf, flags, body_len, sender, seq, f);
        if (e != ST_OK)
            return e;
    } else if (flags != 0) {
        return st_errorf(ST_EAUTH, "frame carries a %s but this process has no cluster key",
                         (flags & ST_ENV_FLAG_SEALED) ? "seal (--encrypt)" : "MAC");
    }
    env->last_role = f->role;
    env->last_cred = f->cred;
    env->last_bound = f->bound;
    env->last_seq = seq;
    f->kind = (st_env_kind)kind;
    f->sender = sender;
    f->seq = seq;
    f->body = buf + ST_ENV_HDR;
    f->body_len = body_len;
    return ST_OK;
}

/* env_key_create - writes key to a new file path (mode 0600). */
static st_err env_key_create(const char *path, const uint8_t key[ST_KEY_BYTES])
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return st_err_errno(errno, path);
    ssize_t w = write(fd, key, ST_KEY_BYTES);
    int en = errno;
    if (w != (ssize_t)ST_KEY_BYTES) {
        close(fd);
        unlink(path);
        return st_err_errno(w < 0 ? en : EIO, path);
    }
    if (fsync(fd) != 0 || close(fd) != 0)
        return st_err_errno(errno, path);
    return ST_OK;
}

st_err st_key_generate(const char *path)
{
    if (sodium_init() < 0)
        return st_err_sodium("sodium_init");
    uint8_t key[ST_KEY_BYTES];
    randombytes_buf(key, sizeof key);
    st_err e = env_key_create(path, key);
    sodium_memzero(key, sizeof key);
    return e;
}

st_err st_key_write(const char *path, const uint8_t key[ST_KEY_BYTES])
{
    if (unlink(path) != 0 && errno != ENOENT)
        return st_err_errno(errno, path);
    return env_key_create(path, key);
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
        return st_errorf(ST_EAUTH,
                         "key file %s is accessible by group or others (mode %o); "
                         "chmod 600 it",
                         path, (unsigned)(st.st_mode & 0777));
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

/* env_keyfile_text - the whole of key file path (mode checked) in *text
 * (free it), NUL-terminated. */
static st_err env_keyfile_text(const char *path, char **text)
{
    *text = NULL;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return st_err_errno(errno, path);
    struct stat st;
    st_err e = ST_OK;
    if (fstat(fd, &st) != 0)
        e = st_err_errno(errno, path);
    else if (st.st_mode & (S_IRWXG | S_IRWXO))
        e = st_errorf(ST_EAUTH,
                      "key file %s is accessible by group or others (mode %o); "
                      "chmod 600 it",
                      path, (unsigned)(st.st_mode & 0777));
    else if ((size_t)st.st_size > ENV_KEYFILE_MAX_BYTES)
        e = st_errorf(ST_ERANGE, "key file %s has %lld bytes; at most %zu", path,
                      (long long)st.st_size, ENV_KEYFILE_MAX_BYTES);
    char *t = e == ST_OK ? malloc((size_t)st.st_size + 1) : NULL;
    if (e == ST_OK && t == NULL)
        e = st_errorf(ST_ENOMEM, "key file %s", path);
    if (e == ST_OK) {
        ssize_t r = read(fd, t, (size_t)st.st_size);
        if (r != (ssize_t)st.st_size)
            e = st_err_errno(r < 0 ? errno : EIO, path);
        else
            t[r] = '\0';
    }
    close(fd);
    if (e != ST_OK) {
        free(t);
        return e;
    }
    *text = t;
    return ST_OK;
}

st_err st_keyfile_read(const char *path, size_t max, uint8_t (**keys)[ST_KEY_BYTES], size_t *n)
{
    *keys = NULL;
    *n = 0;
    char *text;
    st_err e = env_keyfile_text(path, &text);
    if (e != ST_OK)
        return e;
    size_t cap = 0, line = 0;
    uint8_t(*v)[ST_KEY_BYTES] = NULL;
    for (char *p = text; *p != '\0' && e == ST_OK;) {
        char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        line++;
        size_t k = 0;
        while (k < len && (p[k] == ' ' || p[k] == '\t' || p[k] == '\r'))
            k++;
        size_t f = k;
        while (f < len && p[f] != ' ' && p[f] != '\t' && p[f] != '\r')
            f++;
        if (f > k && p[k] != '#') {
            if (*n == max) {
                e = st_errorf(ST_ERANGE, "key file %s: more than %zu keys (line %zu)", path, max,
                              line);
                break;
            }
            if (*n == cap) {
                cap = cap ? cap * 2 : 4;
                void *nv = realloc(v, cap * sizeof *v);
                if (nv == NULL) {
                    e = st_errorf(ST_ENOMEM, "key file %s", path);
                    break;
                }
                v = nv;
            }
            if ((e = st_key_from_text(p + k, f - k, v[*n])) != ST_OK)
                e = st_errwrap(e, "key file %s, line %zu", path, line);
            else
                ++*n;
        }
        p += end ? len + 1 : len;
    }
    sodium_memzero(text, strlen(text));
    free(text);
    if (e == ST_OK && *n == 0)
        e = st_errorf(ST_EFORMAT, "key file %s holds no key (one per line; '#' comments)", path);
    if (e != ST_OK) {
        if (v != NULL)
            sodium_memzero(v, cap * sizeof *v);
        free(v);
        *n = 0;
        return e;
    }
    *keys = v;
    return ST_OK;
}
