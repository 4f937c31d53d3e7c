/* test_envelope.c - the frame around cluster messages (common/wire/envelope.h):
 * MAC-only and sealed (XChaCha20-Poly1305) frames round trip; a frame with
 * any byte changed, sealed with another key, replayed, or of the other
 * mode (--encrypt or not) is refused with ST_EAUTH and counted, and a
 * refused sealed frame is never handed out (the anti-replay window:
 * test_envelope_window.c). Also protected mode's
 * address rule (common/net/exposure.h): what counts as loopback, and the refusal. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/wire/envelope.h"
#include "common/net/exposure.h"
#include "tests/wire/test_envelope.h"

void te_key(uint8_t key[ST_KEY_BYTES], uint8_t b) { memset(key, b, ST_KEY_BYTES); }

void te_body(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 7 + 3);
}

void te_seal(st_env *tx, te_frame *f, size_t body_len)
{
    f->len = st_env_size(tx, body_len);
    ck_assert_uint_le(f->len, sizeof f->buf);
    te_body(f->buf + ST_ENV_HDR, body_len);
    ck_assert_int_eq(st_env_seal(tx, ST_ENV_CONTROL, f->buf, body_len), ST_OK);
}

START_TEST(test_roundtrip_modes)
{
    uint8_t key[ST_KEY_BYTES], want[TE_BODY];
    te_key(key, 0x42);
    te_body(want, TE_BODY);
    for (int enc = 0; enc < 2; enc++) {
        st_env tx, rx;
        ck_assert_int_eq(st_env_init_mode(&tx, key, enc, TE_SENDER), ST_OK);
        ck_assert_int_eq(st_env_init_mode(&rx, key, enc, TE_RECEIVER), ST_OK);
        te_frame f;
        te_seal(&tx, &f, TE_BODY);
        ck_assert_uint_eq(f.len, ST_ENV_HDR + TE_BODY + (enc ? ST_ENV_AEAD_TAG : ST_ENV_MAC));
        /* sealed: the body on the wire is not the plaintext */
        ck_assert_int_eq(memcmp(f.buf + ST_ENV_HDR, want, TE_BODY) != 0, enc);
        st_env_frame fr;
        ck_assert_int_eq(st_env_open(&rx, f.buf, f.len, &fr), ST_OK);
        ck_assert_uint_eq(fr.body_len, TE_BODY);
        ck_assert_uint_eq(fr.sender, TE_SENDER);
        ck_assert_int_eq(fr.kind, ST_ENV_CONTROL);
        ck_assert_mem_eq(fr.body, want, TE_BODY);
        /* an empty body too */
        te_seal(&tx, &f, 0);
        ck_assert_int_eq(st_env_open(&rx, f.buf, f.len, &fr), ST_OK);
        ck_assert_uint_eq(fr.body_len, 0);
        ck_assert_uint_eq(rx.auth_failed, 0);
        st_env_fini(&tx);
        st_env_fini(&rx);
    }
}
END_TEST

START_TEST(test_same_plaintext_new_ciphertext)
{
    uint8_t key[ST_KEY_BYTES];
    te_key(key, 0x42);
    st_env tx;
    ck_assert_int_eq(st_env_init_mode(&tx, key, true, TE_SENDER), ST_OK);
    te_frame a, b;
    te_seal(&tx, &a, TE_BODY);
    te_seal(&tx, &b, TE_BODY);
    ck_assert(memcmp(a.buf + ST_ENV_HDR, b.buf + ST_ENV_HDR, TE_BODY) != 0);
    st_env_fini(&tx);
}
END_TEST

/* every single byte of a sealed frame, flipped: refused and counted */
START_TEST(test_tamper_each_byte)
{
    uint8_t key[ST_KEY_BYTES];
    te_key(key, 0x42);
    st_env tx, rx;
    ck_assert_int_eq(st_env_init_mode(&tx, key, true, TE_SENDER), ST_OK);
    ck_assert_int_eq(st_env_init_mode(&rx, key, true, TE_RECEIVER), ST_OK);
    te_frame f;
    te_seal(&tx, &f, TE_BODY);
    uint64_t refused = 0;
    for (size_t i = 0; i < f.len; i++) {
        te_frame t = f;
        t.buf[i] ^= 0x01;
        st_env_frame fr;
        st_err e = st_env_open(&rx, t.buf, t.len, &fr);
        ck_assert_msg(e != ST_OK, "byte %zu flipped was accepted", i);
        /* bytes the header checks name (magic, version, flags, kind,
         * reserved, length) fail before the tag; every other is ST_EAUTH */
        if (e == ST_EAUTH)
            refused++;
    }
    ck_assert_uint_eq(rx.auth_failed, refused);
    ck_assert_uint_ge(refused, f.len - ST_ENV_HDR + 16); /* body, tag, sender and seq */
    /* the untouched frame still opens (nothing above was recorded) */
    st_env_frame fr;
    ck_assert_int_eq(st_env_open(&rx, f.buf, f.len, &fr), ST_OK);
    st_env_fini(&tx);
    st_env_fini(&rx);
}
END_TEST

START_TEST(test_replay_refused)
{
    uint8_t key[ST_KEY_BYTES];
    te_key(key, 0x42);
    for (int enc = 0; enc < 2; enc++) {
        st_env tx, rx;
        ck_assert_int_eq(st_env_init_mode(&tx, key, enc, TE_SENDER), ST_OK);
        ck_assert_int_eq(st_env_init_mode(&rx, key, enc, TE_RECEIVER), ST_OK);
        te_frame a, b;
        te_seal(&tx, &a, TE_BODY);
        tx.seq += ST_ENV_REPLAY_WINDOW; /* b's number leaves a's behind the window */
        te_seal(&tx, &b, TE_BODY);
        te_frame a2 = a, b2 = b;
        st_env_frame fr;
        ck_assert_int_eq(st_env_open(&rx, b.buf, b.len, &fr), ST_OK);
        /* the same frame again, and a sequence number older than the window */
        ck_assert_int_eq(st_env_open(&rx, b2.buf, b2.len, &fr), ST_EAUTH);
        ck_assert_int_eq(st_env_open(&rx, a2.buf, a2.len, &fr), ST_EAUTH);
        ck_assert_uint_eq(rx.auth_failed, 2);
        st_env_fini(&tx);
        st_env_fini(&rx);
    }
}
END_TEST

START_TEST(test_other_key_refused)
{
    uint8_t k1[ST_KEY_BYTES], k2[ST_KEY_BYTES];
    te_key(k1, 0x42);
    te_key(k2, 0x43);
    for (int enc = 0; enc < 2; enc++) {
        st_env tx, rx;
        ck_assert_int_eq(st_env_init_mode(&tx, k2, enc, TE_SENDER), ST_OK);
        ck_assert_int_eq(st_env_init_mode(&rx, k1, enc, TE_RECEIVER), ST_OK);
        te_frame f;
        te_seal(&tx, &f, TE_BODY);
        st_env_frame fr;
        ck_assert_int_eq(st_env_open(&rx, f.buf, f.len, &fr), ST_EAUTH);
        ck_assert_uint_eq(rx.auth_failed, 1);
        ck_assert_ptr_nonnull(strstr(st_errdetail(), "fails authentication"));
        st_env_fini(&tx);
        st_env_fini(&rx);
    }
}
END_TEST

/* members of the other mode: refused with a message naming --encrypt */
START_TEST(test_mode_mismatch)
{
    uint8_t key[ST_KEY_BYTES];
    te_key(key, 0x42);
    for (int enc = 0; enc < 2; enc++) {
        st_env tx, rx;
        ck_assert_int_eq(st_env_init_mode(&tx, key, enc, TE_SENDER), ST_OK);
        ck_assert_int_eq(st_env_init_mode(&rx, key, !enc, TE_RECEIVER), ST_OK);
        te_frame f;
        te_seal(&tx, &f, TE_BODY);
        st_env_frame fr;
        ck_assert_int_eq(st_env_open(&rx, f.buf, f.len, &fr), ST_EAUTH);
        ck_assert_ptr_nonnull(strstr(st_errdetail(), "--encrypt"));
        ck_assert_uint_eq(rx.auth_failed, 1);
        st_env_fini(&tx);
        st_env_fini(&rx);
    }
    /* an open cluster refuses a sealed frame; --encrypt needs a key */
    st_env tx, rx;
    ck_assert_int_eq(st_env_init_mode(&tx, key, true, TE_SENDER), ST_OK);
    ck_assert_int_eq(st_env_init(&rx, NULL, TE_RECEIVER), ST_OK);
    te_frame f;
    te_seal(&tx, &f, TE_BODY);
    st_env_frame fr;
    ck_assert_int_eq(st_env_open(&rx, f.buf, f.len, &fr), ST_EAUTH);
    st_env_fini(&tx);
    st_env_fini(&rx);
    ck_assert_int_eq(st_env_init_mode(&tx, NULL, true, TE_SENDER), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "--cluster-key"));
    st_env_fini(&tx);
}
END_TEST

/* a sealed frame claiming both modes, or a truncated tag: malformed */
START_TEST(test_bad_flags_and_length)
{
    uint8_t key[ST_KEY_BYTES];
    te_key(key, 0x42);
    st_env tx, rx;
    ck_assert_int_eq(st_env_init_mode(&tx, key, true, TE_SENDER), ST_OK);
    ck_assert_int_eq(st_env_init_mode(&rx, key, true, TE_RECEIVER), ST_OK);
    te_frame f;
    te_seal(&tx, &f, TE_BODY);
    te_frame t = f;
    t.buf[6] |= ST_ENV_FLAG_MAC;
    st_env_frame fr;
    ck_assert_int_eq(st_env_open(&rx, t.buf, t.len, &fr), ST_EFORMAT);
    t = f;
    ck_assert_int_eq(st_env_open(&rx, t.buf, t.len - 1, &fr), ST_ETRUNC);
    ck_assert_uint_eq(rx.auth_failed, 0);
    ck_assert_int_eq(st_env_open(&rx, f.buf, f.len, &fr), ST_OK);
    st_env_fini(&tx);
    st_env_fini(&rx);
}
END_TEST

START_TEST(test_local_addresses)
{
    static const char *const local[] = {"tcp://127.0.0.1:0",      "tcp://127.5.6.7:9000",
                                        "tcp://localhost:0",      "tcp4://127.0.0.1:1",
                                        "tcp://[::1]:0",          "tcp://[::ffff:127.0.0.1]:0",
                                        "ipc:///tmp/strata.sock", "inproc://x",
                                        "ws://127.0.0.1:80/path", NULL};
    static const char *const exposed[] = {"tcp://0.0.0.0:0",
                                          "tcp://*:0",
                                          "tcp://:0",
                                          "tcp://[::]:0",
                                          "tcp://10.0.0.1:0",
                                          "tcp://128.0.0.1:0",
                                          "tcp://example.com:0",
                                          "tcp://[2001:db8::1]:0",
                                          "tcp://[::ffff:10.0.0.1]:0",
                                          "127.0.0.1:0",
                                          "tcp://[::1",
                                          NULL};
    for (int i = 0; local[i] != NULL; i++)
        ck_assert_msg(st_addr_is_local(local[i]), "%s is local", local[i]);
    for (int i = 0; exposed[i] != NULL; i++)
        ck_assert_msg(!st_addr_is_local(exposed[i]), "%s is not local", exposed[i]);
}
END_TEST

START_TEST(test_listen_check)
{
    const char *const flags[] = {"--listen", "--results"};
    const char *const open_urls[] = {"tcp://127.0.0.1:0", NULL};
    const char *const wide_urls[] = {"tcp://127.0.0.1:0", "tcp://0.0.0.0:0"};
    ck_assert_int_eq(st_listen_check("t", flags, open_urls, 2, false, false), ST_OK);
    ck_assert_int_eq(st_listen_check("t", flags, wide_urls, 2, true, false), ST_OK);
    ck_assert_int_eq(st_listen_check("t", flags, wide_urls, 2, false, true), ST_OK);
    ck_assert_int_eq(st_listen_check("t", flags, wide_urls, 2, false, false), ST_EINVAL);
    const char *d = st_errdetail();
    ck_assert_ptr_nonnull(strstr(d, "--results tcp://0.0.0.0:0"));
    ck_assert_ptr_nonnull(strstr(d, "--cluster-key"));
    ck_assert_ptr_nonnull(strstr(d, "--insecure"));
}
END_TEST

/* which of a process's own listeners holds the port another needs: the
 * coordinator's --http beside its default weights port (issue 34) */
START_TEST(test_listen_clash)
{
    const char *const own[] = {"tcp://127.0.0.1:5555", NULL, "tcp://127.0.0.1:5556"};
    ck_assert_int_eq(st_listen_clash("tcp://127.0.0.1:5556", own, 3), 2);
    ck_assert_int_eq(st_listen_clash("tcp://127.0.0.1:5555", own, 3), 0);
    ck_assert_int_eq(st_listen_clash("tcp://0.0.0.0:5556", own, 3), 2);
    ck_assert_int_eq(st_listen_clash("tcp://:5556", own, 3), 2);
    ck_assert_int_eq(st_listen_clash("tcp://127.0.0.2:5556", own, 3), -1);
    ck_assert_int_eq(st_listen_clash("tcp://127.0.0.1:5557", own, 3), -1);
    ck_assert_int_eq(st_listen_clash("tcp://[::1]:5556", own, 3), -1);
    ck_assert_int_eq(st_listen_clash("tcp://localhost:5556", own, 3), -1);
    const char *const any[] = {"tcp://:7000", "tcp://[::1]:7001", "tcp://h:0"};
    ck_assert_int_eq(st_listen_clash("tcp://10.1.2.3:7000", any, 3), 0);
    ck_assert_int_eq(st_listen_clash("tcp://[::1]:7001", any, 3), 1);
    ck_assert_int_eq(st_listen_clash("tcp://H:0", any, 3), -1); /* port 0: any port */
    ck_assert_int_eq(st_listen_clash("ipc:///x:7000", any, 3), -1);
}
END_TEST

/* ---- credentials and roles (issue 12) ---- */

#define TE_CLIENT_TEXT "client-key-0123456789abcdef"
#define TE_CLIENT2_TEXT "client-key-fedcba9876543210"
#define TE_ADMIN_TEXT "admin-key-0123456789abcdef"

/* The coordinator's control socket (cluster key, one client key, one
 * admin key) and a sender of each credential. */
typedef struct te_fx {
    uint8_t cluster[ST_KEY_BYTES], client[ST_KEY_BYTES], admin[ST_KEY_BYTES];
    st_env rx, member, cl, ad;
} te_fx;

/* te_fx_init - the member, client and admin senders use sender ids
 * TE_SENDER + 0, 1, 2 when distinct, else all TE_SENDER; enc: all seal. */
static void te_fx_init(te_fx *x, bool enc, bool distinct)
{
    te_key(x->cluster, 0x42);
    ck_assert_int_eq(st_key_from_text(TE_CLIENT_TEXT, strlen(TE_CLIENT_TEXT), x->client), ST_OK);
    ck_assert_int_eq(st_key_from_text(TE_ADMIN_TEXT, strlen(TE_ADMIN_TEXT), x->admin), ST_OK);
    ck_assert_int_eq(st_env_init_mode(&x->rx, x->cluster, enc, TE_RECEIVER), ST_OK);
    ck_assert_int_eq(st_env_accept(&x->rx, x->client, ST_ROLE_CLIENT), ST_OK);
    ck_assert_int_eq(st_env_accept(&x->rx, x->admin, ST_ROLE_ADMIN), ST_OK);
    uint64_t d = distinct ? 1 : 0;
    ck_assert_int_eq(st_env_init_mode(&x->member, x->cluster, enc, TE_SENDER), ST_OK);
    ck_assert_int_eq(st_env_init_cred(&x->cl, x->client, ST_ROLE_CLIENT, enc, TE_SENDER + d),
                     ST_OK);
    ck_assert_int_eq(st_env_init_cred(&x->ad, x->admin, ST_ROLE_ADMIN, enc, TE_SENDER + 2 * d),
                     ST_OK);
}

static void te_fx_fini(te_fx *x)
{
    st_env_fini(&x->rx);
    st_env_fini(&x->member);
    st_env_fini(&x->cl);
    st_env_fini(&x->ad);
}

/* each credential's frames open with its role; the answer sealed with the
 * client's credential opens at the client */
START_TEST(test_roles_reported)
{
    for (int enc = 0; enc < 2; enc++) {
        te_fx x;
        te_fx_init(&x, enc, true);
        st_env *tx[] = {&x.member, &x.cl, &x.ad};
        const st_env_role want[] = {ST_ROLE_MEMBER, ST_ROLE_CLIENT, ST_ROLE_ADMIN};
        for (int i = 0; i < 3; i++) {
            te_frame f;
            te_seal(tx[i], &f, TE_BODY);
            st_env_frame fr;
            ck_assert_int_eq(st_env_open(&x.rx, f.buf, f.len, &fr), ST_OK);
            ck_assert_int_eq(fr.role, want[i]);
            /* the answer, sealed with the credential that verified it */
            ck_assert_int_eq(st_env_seal_with(&x.rx, fr.cred), ST_OK);
            te_frame a;
            te_seal(&x.rx, &a, TE_BODY);
            ck_assert_int_eq(st_env_seal_with(&x.rx, 0), ST_OK);
            ck_assert_int_eq(st_env_open(tx[i], a.buf, a.len, &fr), ST_OK);
            ck_assert_int_eq(fr.role, want[i]);
        }
        ck_assert_uint_eq(x.rx.auth_failed, 0);
        te_fx_fini(&x);
    }
}
END_TEST

/* a client's frame claiming the cluster key's id, and any frame at a
 * worker (which holds only the cluster key), is refused and counted */
START_TEST(test_client_never_member)
{
    te_fx x;
    te_fx_init(&x, false, true);
    st_env worker;
    ck_assert_int_eq(st_env_init_mode(&worker, x.cluster, false, TE_RECEIVER + 1), ST_OK);
    te_frame f;
    te_seal(&x.cl, &f, TE_BODY);
    te_frame forged = f;
    forged.buf[10] = forged.buf[11] = 0; /* "made with the cluster key" */
    st_env_frame fr;
    ck_assert_int_eq(st_env_open(&x.rx, forged.buf, forged.len, &fr), ST_EAUTH);
    ck_assert_int_eq(st_env_open(&worker, f.buf, f.len, &fr), ST_EAUTH);
    ck_assert_uint_eq(x.rx.auth_failed, 1);
    ck_assert_uint_eq(worker.auth_failed, 1);
    /* an unknown client key: refused; the known one still opens */
    st_env other;
    uint8_t k2[ST_KEY_BYTES];
    ck_assert_int_eq(st_key_from_text(TE_CLIENT2_TEXT, strlen(TE_CLIENT2_TEXT), k2), ST_OK);
    ck_assert_int_eq(st_env_init_cred(&other, k2, ST_ROLE_CLIENT, false, TE_SENDER), ST_OK);
    te_frame g;
    te_seal(&other, &g, TE_BODY);
    ck_assert_int_eq(st_env_open(&x.rx, g.buf, g.len, &fr), ST_EAUTH);
    ck_assert_int_eq(st_env_open(&x.rx, f.buf, f.len, &fr), ST_OK);
    ck_assert_int_eq(fr.role, ST_ROLE_CLIENT);
    te_fx_fini(&x);
    st_env_fini(&worker);
    st_env_fini(&other);
}
END_TEST

/* one sender id under two credentials: separate replay windows, so a
 * client cannot push a member's sequence numbers forward */
START_TEST(test_replay_per_credential)
{
    te_fx x;
    te_fx_init(&x, false, false);
    x.cl.seq = x.member.seq + 1000000; /* a second ahead */
    te_frame a, b;
    te_seal(&x.cl, &a, TE_BODY);
    te_seal(&x.member, &b, TE_BODY);
    st_env_frame fr;
    ck_assert_int_eq(st_env_open(&x.rx, a.buf, a.len, &fr), ST_OK);
    ck_assert_int_eq(st_env_open(&x.rx, b.buf, b.len, &fr), ST_OK);
    ck_assert_int_eq(fr.role, ST_ROLE_MEMBER);
    te_fx_fini(&x);
}
END_TEST

/* key texts and key files: format, mode, comments, limits */
START_TEST(test_key_files)
{
    uint8_t k[ST_KEY_BYTES];
    ck_assert_int_eq(st_key_from_text("short", 5, k), ST_EFORMAT);
    ck_assert_int_eq(st_key_from_text("has a space 0123456", 19, k), ST_EFORMAT);
    ck_assert_int_ne(st_key_id(k), 0);
    char path[] = "/tmp/te_keysXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char text[] = "# clients\n\n" TE_CLIENT_TEXT " alice extra fields\n  " TE_CLIENT2_TEXT
                        "\tbob\n";
    ck_assert_int_eq(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    uint8_t(*keys)[ST_KEY_BYTES];
    size_t n;
    ck_assert_int_eq(st_keyfile_read(path, 8, &keys, &n), ST_OK);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(st_key_from_text(TE_CLIENT_TEXT, strlen(TE_CLIENT_TEXT), k), ST_OK);
    ck_assert_int_eq(memcmp(keys[0], k, ST_KEY_BYTES), 0);
    free(keys);
    ck_assert_int_eq(st_keyfile_read(path, 1, &keys, &n), ST_ERANGE);
    ck_assert_int_eq(chmod(path, 0640), 0);
    ck_assert_int_eq(st_keyfile_read(path, 8, &keys, &n), ST_EAUTH);
    unlink(path);
    /* the cluster key itself is no client key */
    st_env rx;
    uint8_t cluster[ST_KEY_BYTES];
    te_key(cluster, 0x42);
    ck_assert_int_eq(st_env_init_mode(&rx, cluster, false, TE_RECEIVER), ST_OK);
    ck_assert_int_eq(st_env_accept(&rx, cluster, ST_ROLE_CLIENT), ST_EINVAL);
    ck_assert_int_eq(st_env_accept(&rx, k, ST_ROLE_MEMBER), ST_EINVAL);
    st_env_fini(&rx);
    ck_assert_int_eq(st_env_init(&rx, NULL, TE_RECEIVER), ST_OK);
    ck_assert_int_eq(st_env_accept(&rx, k, ST_ROLE_CLIENT), ST_EINVAL);
    st_env_fini(&rx);
}
END_TEST

/* replay (issue 12, finding 8): a captured frame still fails after more
 * senders than the table holds came by, and a frame far from the clock
 * fails at once */
START_TEST(test_replay_not_flushed)
{
    uint8_t key[ST_KEY_BYTES];
    te_key(key, 0x42);
    st_env rx, tx;
    ck_assert_int_eq(st_env_init_mode(&rx, key, false, TE_RECEIVER), ST_OK);
    ck_assert_int_eq(st_env_init_mode(&tx, key, false, TE_SENDER), ST_OK);
    te_frame f;
    te_seal(&tx, &f, TE_BODY);
    te_frame copy = f;
    st_env_frame fr;
    ck_assert_int_eq(st_env_open(&rx, f.buf, f.len, &fr), ST_OK);
    for (uint64_t i = 0; i < ST_ENV_MAX_PEERS; i++) {
        st_env o;
        ck_assert_int_eq(st_env_init_mode(&o, key, false, TE_SENDER + 1 + i), ST_OK);
        te_frame g;
        te_seal(&o, &g, TE_BODY);
        ck_assert_int_eq(st_env_open(&rx, g.buf, g.len, &fr), ST_OK);
        st_env_fini(&o);
    }
    ck_assert_int_eq(st_env_open(&rx, copy.buf, copy.len, &fr), ST_EAUTH);
    /* the evicted sender goes on with new frames */
    te_seal(&tx, &f, TE_BODY);
    ck_assert_int_eq(st_env_open(&rx, f.buf, f.len, &fr), ST_OK);
    /* a frame two windows ahead of the clock */
    tx.seq += 2 * ST_ENV_WINDOW_US;
    te_seal(&tx, &f, TE_BODY);
    ck_assert_int_eq(st_env_open(&rx, f.buf, f.len, &fr), ST_EAUTH);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "window"));
    ck_assert_uint_eq(rx.auth_failed, 2);
    st_env_fini(&rx);
    st_env_fini(&tx);
}
END_TEST

/* te_envs - three envelopes of key (encrypting or not) with ids ids. */
static void te_envs(st_env v[3], const uint8_t *key, int enc, const uint64_t ids[3])
{
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(st_env_init_mode(&v[i], key, enc, ids[i]), ST_OK);
}

static void te_envs_fini(st_env v[3])
{
    for (int i = 0; i < 3; i++)
        st_env_fini(&v[i]);
}

/* receiver binding (issue 12, finding 8): a request sealed for one
 * receiver fails the MAC at another holding the same key (another worker,
 * or the same address after a restart, which has a new id); an unbound one
 * (the first request of a process) is still taken, and said to be unbound */
START_TEST(test_request_bound_to_receiver)
{
    uint8_t key[ST_KEY_BYTES];
    te_key(key, 0x42);
    for (int enc = 0; enc < 2; enc++) {
        st_env v[3];
        te_envs(v, key, enc, (const uint64_t[3]){TE_SENDER, TE_RECEIVER, TE_RECEIVER + 1});
        st_env *tx = &v[0], *rx = &v[1], *other = &v[2];
        te_frame f;
        tx->to = rx->sender;
        te_seal(tx, &f, TE_BODY);
        ck_assert_uint_eq(tx->to, 0); /* taken by the seal */
        te_frame copy = f;
        st_env_frame fr;
        ck_assert_int_eq(st_env_open(other, copy.buf, copy.len, &fr), ST_EAUTH);
        ck_assert_ptr_nonnull(strstr(st_errdetail(), "another receiver"));
        ck_assert_uint_eq(other->auth_failed, 1);
        ck_assert_int_eq(st_env_open(rx, f.buf, f.len, &fr), ST_OK);
        ck_assert(fr.bound && !fr.reply && rx->last_bound);
        /* unbound: taken anywhere, reported as such */
        te_seal(tx, &f, TE_BODY);
        ck_assert_int_eq(st_env_open(other, f.buf, f.len, &fr), ST_OK);
        ck_assert(!fr.bound && !other->last_bound);
        te_envs_fini(v);
    }
}
END_TEST

/* reply binding: a reply answers one request of one requester; the REQ
 * side learns its peer from a verified reply, binds its next request to
 * it, and forgets it when a request goes unanswered */
START_TEST(test_reply_bound_to_request)
{
    uint8_t key[ST_KEY_BYTES];
    te_key(key, 0x42);
    for (int enc = 0; enc < 2; enc++) {
        st_env v[3];
        te_envs(v, key, enc, (const uint64_t[3]){TE_SENDER, TE_SENDER + 1, TE_RECEIVER});
        st_env *cl = &v[0], *cl2 = &v[1], *sv = &v[2];
        cl->learn_peer = true;
        te_frame a, r, r2;
        st_env_frame fr, fa;
        ck_assert(st_env_unbound(cl)); /* a Hello goes first (msg.h) */
        ck_assert(!st_env_unbound(sv)); /* not a learning requester */
        te_seal(cl, &a, TE_BODY); /* first request: the receiver is not known */
        ck_assert_int_eq(st_env_open(sv, a.buf, a.len, &fa), ST_OK);
        ck_assert(!fa.bound);
        /* a reply bound to another requester's request fails at cl */
        st_env_reply_to(sv, cl2->sender, fa.seq);
        te_seal(sv, &r, TE_BODY);
        ck_assert_int_eq(st_env_open(cl, r.buf, r.len, &fr), ST_EAUTH);
        ck_assert_ptr_nonnull(strstr(st_errdetail(), "not to our request"));
        /* ... and one bound to another request of cl */
        st_env_reply_to(sv, fa.sender, fa.seq - 1);
        te_seal(sv, &r, TE_BODY);
        ck_assert_int_eq(st_env_open(cl, r.buf, r.len, &fr), ST_EAUTH);
        st_env_reply_to(sv, fa.sender, fa.seq);
        te_seal(sv, &r, TE_BODY);
        ck_assert_int_eq(st_env_open(cl, r.buf, r.len, &fr), ST_OK);
        ck_assert(fr.reply && fr.bound);
        ck_assert_uint_eq(cl->peer, sv->sender);
        ck_assert_uint_eq(cl->auth_failed, 2);
        ck_assert(!st_env_unbound(cl));
        /* the next request is bound to sv; a REPLY when no request was
         * sent is refused */
        te_seal(cl, &a, TE_BODY);
        ck_assert_int_eq(st_env_open(sv, a.buf, a.len, &fa), ST_OK);
        ck_assert(fa.bound);
        st_env_reply_to(sv, cl2->sender, 1);
        te_seal(sv, &r2, TE_BODY);
        ck_assert_int_eq(st_env_open(cl2, r2.buf, r2.len, &fr), ST_EAUTH);
        /* an explicit expectation (several requests in flight) */
        st_env_reply_to(sv, fa.sender, fa.seq);
        te_seal(sv, &r2, TE_BODY);
        te_seal(cl, &a, TE_BODY); /* another request, unanswered */
        cl->expect = fa.seq;
        ck_assert_int_eq(st_env_open(cl, r2.buf, r2.len, &fr), ST_OK);
        ck_assert_uint_eq(cl->expect, 0);
        /* the last request went unanswered: the next one is unbound, so a
         * restarted receiver (a new id) takes it and is learnt (a Hello:
         * the coordinator takes nothing else unbound) */
        ck_assert(st_env_unbound(cl));
        te_seal(cl, &a, TE_BODY);
        ck_assert_uint_eq(cl->peer, 0);
        st_env sv2;
        ck_assert_int_eq(st_env_init_mode(&sv2, key, enc, TE_RECEIVER + 7), ST_OK);
        ck_assert_int_eq(st_env_open(&sv2, a.buf, a.len, &fa), ST_OK);
        ck_assert(!fa.bound);
        st_env_fini(&sv2);
        te_envs_fini(v);
    }
}
END_TEST

/* the binding flags need a MAC or a seal, and exclude each other */
START_TEST(test_bind_flags)
{
    st_env tx, rx;
    ck_assert_int_eq(st_env_init(&tx, NULL, TE_SENDER), ST_OK);
    ck_assert_int_eq(st_env_init(&rx, NULL, TE_RECEIVER), ST_OK);
    tx.to = TE_RECEIVER; /* without a key nothing is bound */
    te_frame f;
    te_seal(&tx, &f, TE_BODY);
    st_env_frame fr;
    ck_assert_int_eq(st_env_open(&rx, f.buf, f.len, &fr), ST_OK);
    ck_assert(!fr.bound);
    const uint16_t bad[] = {ST_ENV_FLAG_TO, ST_ENV_FLAG_REPLY,
                            ST_ENV_FLAG_MAC | ST_ENV_FLAG_TO | ST_ENV_FLAG_REPLY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        te_frame t = f;
        t.buf[6] = (uint8_t)bad[i];
        t.buf[7] = 0;
        ck_assert_int_eq(st_env_open(&rx, t.buf, t.len, &fr), ST_EFORMAT);
    }
    st_env_fini(&tx);
    st_env_fini(&rx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("envelope");
    TCase *tc = tcase_create("seal");
    tcase_add_test(tc, test_roundtrip_modes);
    tcase_add_test(tc, test_same_plaintext_new_ciphertext);
    tcase_add_test(tc, test_tamper_each_byte);
    tcase_add_test(tc, test_replay_refused);
    tcase_add_test(tc, test_other_key_refused);
    tcase_add_test(tc, test_mode_mismatch);
    tcase_add_test(tc, test_bad_flags_and_length);
    tcase_add_test(tc, test_roles_reported);
    tcase_add_test(tc, test_client_never_member);
    tcase_add_test(tc, test_replay_per_credential);
    tcase_add_test(tc, test_key_files);
    tcase_add_test(tc, test_replay_not_flushed);
    tcase_add_test(tc, test_request_bound_to_receiver);
    tcase_add_test(tc, test_reply_bound_to_request);
    tcase_add_test(tc, test_bind_flags);
    suite_add_tcase(s, tc);
    suite_add_tcase(s, te_window_tcase());
    TCase *tx = tcase_create("exposure");
    tcase_add_test(tx, test_local_addresses);
    tcase_add_test(tx, test_listen_clash);
    tcase_add_test(tx, test_listen_check);
    suite_add_tcase(s, tx);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
