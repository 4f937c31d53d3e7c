/* test_envelope.c - the frame around cluster messages (common/envelope.h):
 * MAC-only and sealed (XChaCha20-Poly1305) frames round trip; a frame with
 * any byte changed, sealed with another key, replayed, or of the other
 * mode (--encrypt or not) is refused with ST_EAUTH and counted, and a
 * refused sealed frame is never handed out. Also protected mode's address
 * rule (common/exposure.h): what counts as loopback, and the refusal. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common/envelope.h"
#include "common/exposure.h"

#define TE_BODY 300
#define TE_SENDER 0x1234
#define TE_RECEIVER 0x9999

typedef struct te_frame {
    uint8_t buf[ST_ENV_HDR + TE_BODY + ST_ENV_MAC];
    size_t len;
} te_frame;

static void te_key(uint8_t key[ST_KEY_BYTES], uint8_t b)
{
    memset(key, b, ST_KEY_BYTES);
}

static void te_body(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 7 + 3);
}

/* te_seal - a frame of body_len patterned bytes sealed by tx. */
static void te_seal(st_env *tx, te_frame *f, size_t body_len)
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
        te_seal(&tx, &b, TE_BODY);
        te_frame a2 = a, b2 = b;
        st_env_frame fr;
        ck_assert_int_eq(st_env_open(&rx, b.buf, b.len, &fr), ST_OK);
        /* the same frame again, and an older sequence number */
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
    static const char *const local[] = {
        "tcp://127.0.0.1:0", "tcp://127.5.6.7:9000", "tcp://localhost:0", "tcp4://127.0.0.1:1",
        "tcp://[::1]:0", "tcp://[::ffff:127.0.0.1]:0", "ipc:///tmp/strata.sock", "inproc://x",
        "ws://127.0.0.1:80/path", NULL};
    static const char *const exposed[] = {
        "tcp://0.0.0.0:0", "tcp://*:0", "tcp://:0", "tcp://[::]:0", "tcp://10.0.0.1:0",
        "tcp://128.0.0.1:0", "tcp://example.com:0", "tcp://[2001:db8::1]:0",
        "tcp://[::ffff:10.0.0.1]:0", "127.0.0.1:0", "tcp://[::1", NULL};
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
    suite_add_tcase(s, tc);
    TCase *tx = tcase_create("exposure");
    tcase_add_test(tx, test_local_addresses);
    tcase_add_test(tx, test_listen_check);
    suite_add_tcase(s, tx);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
