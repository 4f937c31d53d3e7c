/* inject_replay.c - `inject replay`: a captured frame's exact bytes sent
 * again, as an attacker on the path would (issue 33, H2;
 * docs/security.md, "Replay").
 *
 *   inject replay record LISTEN TARGET DIR
 *       a proxy: a REP socket on LISTEN (prints "recording on ADDR") that
 *       forwards every request to the REP at TARGET and the reply back,
 *       writing each request's bytes to DIR/frame-N.bin (N from 1) and
 *       printing "frame N: KIND BYTES bound|unbound" (KIND read from the
 *       body without checking its MAC: frames sealed with --encrypt show
 *       "sealed"). Runs until killed.
 *   inject replay make FILE CASE [--admin-key F | --client-key F]
 *       writes one unbound frame (what a requester that never said Hello
 *       sends) made with the key (--key's cluster key otherwise): CASE
 *       replan-force or generate (prompt ids 1,2, 4 tokens, greedy).
 *   inject replay send ADDR FILE...
 *       sends each file's bytes unchanged on a new REQ connection to ADDR
 *       and prints "FILE: reply error CODE: MESSAGE", "FILE: reply KIND" or
 *       "FILE: reply none" (the reply is read without checking its MAC: it
 *       is bound to the original sender). */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/envelope.h"
#include "common/base/le.h"
#include "common/wire/msg.h"
#include "common/text/sampling.h"
#include "tests/cluster/inject.h"

#define INJ_RP_FORWARD_MS 30000 /* a forwarded request's reply (a long poll's included) */
#define INJ_RP_SEND_MS 5000     /* a replayed frame's reply */
#define INJ_RP_PATH_MAX 4096
#define INJ_RP_MAX_FRAME ((size_t)64 << 20)
#define INJ_RP_FLAGS_AT 6 /* envelope.h's header: flags u16 */
#define INJ_RP_BODY_AT 28 /* envelope.h's header: body length u32 */
#define INJ_RP_GEN_TOKENS 4

/* inj_rp_describe - "KIND bound|unbound" of a control frame, from its
 * header and unverified body. */
static void inj_rp_describe(const uint8_t *buf, size_t len, char *out, size_t cap)
{
    if (len < ST_ENV_HDR || memcmp(buf, "STEN", 4) != 0) {
        snprintf(out, cap, "not-an-envelope");
        return;
    }
    unsigned flags = st_le_ld16(buf + INJ_RP_FLAGS_AT);
    uint32_t body = st_le_ld32(buf + INJ_RP_BODY_AT);
    const char *kind = "sealed";
    Strata__Msg *m = NULL;
    if (!(flags & ST_ENV_FLAG_SEALED) && body <= len - ST_ENV_HDR &&
        (m = strata__msg__unpack(NULL, body, buf + ST_ENV_HDR)) != NULL)
        kind = st_msg_case_name(m);
    snprintf(out, cap, "%s %s", kind,
             (flags & (ST_ENV_FLAG_TO | ST_ENV_FLAG_REPLY)) ? "bound" : "unbound");
    if (m != NULL)
        strata__msg__free_unpacked(m, NULL);
}

static int inj_rp_write(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(buf, 1, len, f) != len) {
        fprintf(stderr, "inject: cannot write %s\n", path);
        if (f)
            fclose(f);
        return 1;
    }
    return fclose(f) != 0;
}

static int inj_rp_record(const char *listen, const char *target, const char *dir)
{
    nng_socket rep, req;
    nng_listener l;
    int rv = nng_rep0_open(&rep);
    if (rv == 0)
        rv = nng_socket_set_size(rep, NNG_OPT_RECVMAXSZ, INJ_RP_MAX_FRAME);
    if (rv == 0)
        rv = nng_listen(rep, listen, &l, 0);
    if (rv != 0) {
        fprintf(stderr, "inject: listen %s: %s\n", listen, nng_strerror(rv));
        return 1;
    }
    if (inj_dial(target, true, &req) != 0)
        return 1;
    nng_socket_set_size(req, NNG_OPT_RECVMAXSZ, INJ_RP_MAX_FRAME);
    nng_socket_set_ms(req, NNG_OPT_RECVTIMEO, INJ_RP_FORWARD_MS);
    nng_sockaddr sa;
    if ((rv = nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa)) != 0 || sa.s_family != NNG_AF_INET) {
        fprintf(stderr, "inject: the proxy's address: %s\n", nng_strerror(rv));
        return 1;
    }
    const uint8_t *ip = (const uint8_t *)&sa.s_in.sa_addr;
    printf("recording on tcp://%u.%u.%u.%u:%u\n", ip[0], ip[1], ip[2], ip[3],
           (unsigned)((sa.s_in.sa_port & 0xff) << 8 | sa.s_in.sa_port >> 8));
    fflush(stdout);
    for (unsigned n = 1;; n++) {
        nng_msg *m, *r;
        if ((rv = nng_recvmsg(rep, &m, 0)) != 0) {
            fprintf(stderr, "inject: proxy receive: %s\n", nng_strerror(rv));
            return 1;
        }
        char path[INJ_RP_PATH_MAX], what[128];
        snprintf(path, sizeof path, "%s/frame-%u.bin", dir, n);
        inj_rp_describe(nng_msg_body(m), nng_msg_len(m), what, sizeof what);
        if (inj_rp_write(path, nng_msg_body(m), nng_msg_len(m)) != 0)
            return 1;
        printf("frame %u: %s %zu\n", n, what, nng_msg_len(m));
        fflush(stdout);
        if ((rv = nng_sendmsg(req, m, 0)) != 0) {
            nng_msg_free(m);
            fprintf(stderr, "inject: forward: %s\n", nng_strerror(rv));
            return 1;
        }
        if ((rv = nng_recvmsg(req, &r, 0)) != 0) {
            fprintf(stderr, "inject: forwarded reply: %s\n", nng_strerror(rv));
            return 1;
        }
        if ((rv = nng_sendmsg(rep, r, 0)) != 0) {
            nng_msg_free(r);
            fprintf(stderr, "inject: proxy reply: %s\n", nng_strerror(rv));
            return 1;
        }
    }
}

static int inj_rp_send(const char *addr, int n, char **files)
{
    int rc = 0;
    for (int i = 0; i < n; i++) {
        FILE *f = fopen(files[i], "rb");
        uint8_t *buf = malloc(INJ_RP_MAX_FRAME);
        size_t len = f && buf ? fread(buf, 1, INJ_RP_MAX_FRAME, f) : 0;
        if (f)
            fclose(f);
        nng_socket s;
        if (len == 0 || inj_dial(addr, true, &s) != 0) {
            fprintf(stderr, "inject: cannot send %s\n", files[i]);
            free(buf);
            return 1;
        }
        nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, INJ_RP_SEND_MS);
        nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, INJ_RP_MAX_FRAME);
        int rv = nng_send(s, buf, len, 0);
        free(buf);
        nng_msg *r = NULL;
        if (rv == 0)
            rv = nng_recvmsg(s, &r, 0);
        if (rv != 0) {
            printf("%s: reply none (%s)\n", files[i], nng_strerror(rv));
            rc = 1;
        } else {
            const uint8_t *b = nng_msg_body(r);
            size_t bl = nng_msg_len(r);
            /* a MACed reply's body, unverified (a sealed one shows as unreadable) */
            Strata__Msg *m = bl > ST_ENV_HDR + ST_ENV_MAC
                                 ? strata__msg__unpack(NULL, bl - ST_ENV_HDR - ST_ENV_MAC,
                                                       b + ST_ENV_HDR)
                                 : NULL;
            if (m != NULL && m->body_case == STRATA__MSG__BODY_ERROR)
                printf("%s: reply error %u: %s\n", files[i], m->error->code,
                       m->error->message ? m->error->message : "");
            else
                printf("%s: reply %s\n", files[i], m ? st_msg_case_name(m) : "unreadable");
            if (m != NULL)
                strata__msg__free_unpacked(m, NULL);
            nng_msg_free(r);
        }
        fflush(stdout);
        nng_close(s);
    }
    return rc;
}

static int inj_rp_make(int argc, char **argv, const uint8_t *cluster_key)
{
    const char *file = argv[1], *what = argv[2], *path = NULL;
    st_env_role role = ST_ROLE_MEMBER;
    for (int i = 3; i + 1 < argc; i += 2) {
        path = argv[i + 1];
        if (strcmp(argv[i], "--admin-key") == 0)
            role = ST_ROLE_ADMIN;
        else if (strcmp(argv[i], "--client-key") == 0)
            role = ST_ROLE_CLIENT;
        else
            return inj_usage();
    }
    uint8_t key[ST_KEY_BYTES];
    if (path != NULL) {
        uint8_t(*keys)[ST_KEY_BYTES] = NULL;
        size_t nk;
        st_err e = st_keyfile_read(path, 1, &keys, &nk);
        if (e != ST_OK) {
            fprintf(stderr, "inject: %s\n", st_errmsg(e));
            return 1;
        }
        memcpy(key, keys[0], sizeof key);
        sodium_memzero(keys, sizeof *keys);
        free(keys);
    } else if (cluster_key != NULL) {
        memcpy(key, cluster_key, sizeof key);
    } else {
        fprintf(stderr, "inject: replay make needs a key\n");
        return 2;
    }
    uint64_t sender;
    randombytes_buf(&sender, sizeof sender);
    st_env env;
    st_err e = st_env_init_cred(&env, key, role, false, sender);
    sodium_memzero(key, sizeof key);
    if (e != ST_OK) {
        fprintf(stderr, "inject: %s\n", st_errmsg(e));
        return 1;
    }
    Strata__Msg m = STRATA__MSG__INIT;
    Strata__ReplanRequest rr = STRATA__REPLAN_REQUEST__INIT;
    Strata__GenerateRequest gen = STRATA__GENERATE_REQUEST__INIT;
    Strata__Sampling smp;
    int32_t ids[] = {1, 2};
    rr.force = true;
    gen.n_prompt_ids = sizeof ids / sizeof ids[0];
    gen.prompt_ids = ids;
    gen.max_tokens = INJ_RP_GEN_TOKENS;
    st_sampler_params sp = st_sampler_params_default();
    sp.temp = 0; /* greedy */
    st_sampling_to_pb(&sp, &smp);
    gen.sampling = &smp;
    gen.has_sampling = true;
    if (strcmp(what, "replan-force") == 0) {
        m.body_case = STRATA__MSG__BODY_REPLAN;
        m.replan = &rr;
    } else if (strcmp(what, "generate") == 0) {
        m.body_case = STRATA__MSG__BODY_GENERATE;
        m.generate = &gen;
    } else {
        st_env_fini(&env);
        return inj_usage();
    }
    nng_msg *msg;
    if ((e = st_msg_pack(&env, ST_ENV_CONTROL, &m, &msg)) != ST_OK) {
        fprintf(stderr, "inject: %s\n", st_errmsg(e));
        st_env_fini(&env);
        return 1;
    }
    int rc = inj_rp_write(file, nng_msg_body(msg), nng_msg_len(msg));
    if (rc == 0)
        printf("made: %s unbound %zu\n", what, nng_msg_len(msg));
    nng_msg_free(msg);
    st_env_fini(&env);
    return rc;
}

int inj_replay_main(int argc, char **argv, const uint8_t *key)
{
    if (argc == 4 && strcmp(argv[0], "record") == 0)
        return inj_rp_record(argv[1], argv[2], argv[3]);
    if (argc >= 3 && strcmp(argv[0], "send") == 0)
        return inj_rp_send(argv[1], argc - 2, argv + 2);
    if (argc >= 3 && strcmp(argv[0], "make") == 0)
        return inj_rp_make(argc, argv, key);
    return inj_usage();
}
