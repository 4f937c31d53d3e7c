/* inject_experts.c - `inject experts ADDR MODEL N_LAYER N_EXPERT`: a
 * member's per-expert load as the coordinator takes it (issue 36,
 * coordinator/cluster/experts.h). Joins as a fake member of MODEL
 * (addresses nobody listens on), then sends heartbeats and after each asks
 * for the status, printing one line per step:
 *   "STEP: reply KIND; bad_experts N; load L:c,c,...|none"
 * STEP: good (layer 0, counts 1..N_EXPERT), layer-out (layers 0 and
 * N_LAYER), counts (layer 0 with N_EXPERT + 1 counts), twice (layer 0
 * twice), good-again (as good, doubled). The load printed is the status's
 * layer-0 expert load (summed over the live members: this one only when
 * no worker serves). */
#include <nng/nng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/version.h"
#include "common/model/gguf.h"
#include "common/wire/envelope.h"
#include "common/wire/msg.h"
#include "tests/cluster/inject.h"

#define IE_MAX_EXPERT 256 /* the counts one heartbeat of this tool carries at most */

/* ie_call - sends m, receives the reply into *r; 1 (reported) on failure. */
static int ie_call(const char *addr, nng_socket s, st_env *env, Strata__Msg *m, Strata__Msg **r)
{
    st_err e = inj_bind_coord(addr, env) != 0 ? ST_EAUTH : st_msg_send(s, env, ST_ENV_CONTROL, m);
    if (e == ST_OK)
        e = st_msg_recv(s, env, ST_ENV_CONTROL, r, NULL);
    if (e != ST_OK) {
        fprintf(stderr, "inject: %s\n", st_errmsg(e));
        return 1;
    }
    return 0;
}

/* ie_status - prints "bad_experts N; load ..." of the coordinator's status. */
static int ie_status(const char *addr, nng_socket s, st_env *env)
{
    Strata__Msg m = STRATA__MSG__INIT;
    Strata__StatusRequest sq = STRATA__STATUS_REQUEST__INIT;
    m.body_case = STRATA__MSG__BODY_STATUS_REQ;
    m.status_req = &sq;
    Strata__Msg *r = NULL;
    if (ie_call(addr, s, env, &m, &r) != 0)
        return 1;
    if (r->body_case != STRATA__MSG__BODY_STATUS) {
        printf("status: %s\n", st_msg_case_name(r));
        st_msg_free(r);
        return 1;
    }
    const Strata__StatusReply *sr = r->status;
    printf("bad_experts %llu; load",
           (unsigned long long)(sr->counters ? sr->counters->bad_experts : 0));
    bool any = false;
    for (size_t i = 0; i < sr->n_expert_load; i++) {
        const Strata__ExpertLoad *x = sr->expert_load[i];
        printf(" %u:", x->layer);
        for (size_t k = 0; k < x->n_tokens; k++)
            printf("%s%llu", k ? "," : "", (unsigned long long)x->tokens[k]);
        any = true;
    }
    printf("%s\n", any ? "" : " none");
    st_msg_free(r);
    return 0;
}

/* ie_heartbeat - one heartbeat of worker id with the lists x[0..n). */
static int ie_heartbeat(const char *addr, nng_socket s, st_env *env, uint64_t id,
                        Strata__ExpertLoad **x, size_t n, const char *step)
{
    Strata__Msg m = STRATA__MSG__INIT;
    Strata__Heartbeat hb = STRATA__HEARTBEAT__INIT;
    hb.worker_id = id;
    hb.experts = x;
    hb.n_experts = n;
    m.body_case = STRATA__MSG__BODY_HEARTBEAT;
    m.heartbeat = &hb;
    Strata__Msg *r = NULL;
    if (ie_call(addr, s, env, &m, &r) != 0)
        return 1;
    printf("%s: reply %s; ", step, st_msg_case_name(r));
    st_msg_free(r);
    return ie_status(addr, s, env);
}

int inj_experts_main(int argc, char **argv, const uint8_t *key)
{
    if (argc != 6)
        return inj_usage();
    const char *addr = argv[2];
    uint32_t n_layer = (uint32_t)strtoul(argv[4], NULL, 10);
    uint32_t ne = (uint32_t)strtoul(argv[5], NULL, 10);
    if (ne == 0 || ne >= IE_MAX_EXPERT || n_layer == 0)
        return inj_usage();
    uint8_t model_id[32];
    if (inj_model_id(argv[3], model_id) != 0)
        return 1;
    st_env env;
    if (st_env_init_mode(&env, key, false, 0xdead0000u + (uint64_t)rand()) != ST_OK)
        return 1;
    nng_socket s;
    if (inj_dial(addr, true, &s) != 0) {
        st_env_fini(&env);
        return 1;
    }
    Strata__Capability cap = STRATA__CAPABILITY__INIT;
    cap.name = "inject-experts";
    cap.cores = 1;
    cap.threads = 1;
    cap.memory_budget = (uint64_t)1 << 30;
    cap.data_addr = "tcp://127.0.0.1:1";
    cap.ctl_addr = "tcp://127.0.0.1:2";
    cap.model_id.data = model_id;
    cap.model_id.len = sizeof model_id;
    Strata__Join join = STRATA__JOIN__INIT;
    join.protocol = ST_PROTO_VERSION;
    join.cap = &cap;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_JOIN;
    m.join = &join;
    Strata__Msg *r = NULL;
    int rc = ie_call(addr, s, &env, &m, &r);
    if (rc == 0 && r->body_case != STRATA__MSG__BODY_JOIN_REPLY) {
        printf("join: %s\n", st_msg_case_name(r));
        rc = 1;
    }
    uint64_t id = rc == 0 ? r->join_reply->worker_id : 0;
    st_msg_free(r);
    uint64_t good[IE_MAX_EXPERT], twice[IE_MAX_EXPERT];
    for (uint32_t k = 0; k <= ne; k++) {
        good[k] = k + 1;
        twice[k] = 2 * (k + 1);
    }
    Strata__ExpertLoad a = STRATA__EXPERT_LOAD__INIT, b = STRATA__EXPERT_LOAD__INIT;
    Strata__ExpertLoad *x[2] = {&a, &b};
    a.tokens = good;
    a.n_tokens = ne;
    b.tokens = good;
    b.n_tokens = ne;
    if (rc == 0) {
        printf("join: worker %llu\n", (unsigned long long)id);
        rc = ie_heartbeat(addr, s, &env, id, x, 1, "good");
    }
    b.layer = n_layer; /* beyond the model */
    if (rc == 0)
        rc = ie_heartbeat(addr, s, &env, id, x, 2, "layer-out");
    a.n_tokens = ne + 1; /* one count too many */
    if (rc == 0)
        rc = ie_heartbeat(addr, s, &env, id, x, 1, "counts");
    a.n_tokens = ne;
    b.layer = 0; /* layer 0 twice */
    if (rc == 0)
        rc = ie_heartbeat(addr, s, &env, id, x, 2, "twice");
    a.tokens = twice;
    if (rc == 0)
        rc = ie_heartbeat(addr, s, &env, id, x, 1, "good-again");
    nng_close(s);
    st_env_fini(&env);
    return rc;
}
