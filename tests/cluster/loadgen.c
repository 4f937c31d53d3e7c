/* loadgen.c - many concurrent clients of a coordinator, for the batching
 * tests (tests/cluster/batching.py) and bench/concurrency.sh.
 *
 *   loadgen ADDR [--key FILE] [--concurrency N] [--timeout-ms N] [--progress]
 *           [--sender N] < REQUESTS > RESULTS
 *
 * --sender N: every request's envelope sender id is N (default: random per
 * request), so they are one client's (an open cluster's session namespace
 * and caps are per sender); with a key, only with --concurrency 1.
 *
 * REQUESTS holds one JSON object per line:
 *   {"prompt_ids": [1, 2, 3], "n": 16,          required
 *    "temp": 0, "seed": 1, "session": 0,         sampling and client session
 *    "max_queue_ms": 0,                          GenerateRequest.max_queue_ms
 *    "delay_ms": 0,                              submit this long after the start
 *    "start_after": [J, K],                      ... and once request J has K ids
 *    "cancel_after": K,                          send Cancel once K ids came
 *    "abandon_after": K}                         stop polling once K ids came
 *                                                (a client that went away)
 * Each request runs on its own thread with its own REQ socket (at most
 * --concurrency at once, default: all), exactly as `strata generate` does:
 * Generate, then long polls until done. RESULTS gets one JSON object per
 * request, in the order they end: {"i", "ok", "stage" ("submit", "poll" or
 * "done"), "code", "error", "finish", "n_prompt", "ids", "times_ns" (the
 * coordinator's append time of each id), "steps", "missed", "reused",
 * "submit_ns", "start_ns" (coordinator clock), "t_submit", "t_first",
 * "t_done" (seconds on this process's clock since it started)}. A request
 * that does not end within --timeout-ms is reported with stage "poll" and
 * code ST_ETIMEOUT: nothing hangs. With --progress, stderr gets a line
 * "progress I N" when request I was accepted (N = 0) and whenever its ids
 * reach N, flushed at once (the chaos tests inject faults at known points
 * of a stream, tests/cluster/chaos.py). Exit status 0 when every line was
 * handled, whatever the requests' outcome. */
#include <cjson/cJSON.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/wire/envelope.h"
#include "common/net/exposure.h"
#include "common/wire/msg.h"
#include "common/text/sampling.h"

#define LG_MAX_REQ 100000

typedef struct lg_req {
    int32_t *prompt;
    size_t n_prompt;
    uint32_t n;
    float temp;
    uint64_t seed, session;
    uint32_t max_queue_ms;
    uint32_t delay_ms;
    long after_req, after_k; /* start_after; after_req < 0: none */
    long cancel_after, abandon_after;
    /* progress, under lg.mu */
    uint32_t got;
    bool ended;
} lg_req;

typedef struct lg {
    const char *addr;
    bool keyed;
    uint8_t key[ST_KEY_BYTES];
    int timeout_ms;
    bool progress; /* --progress: report ids as they come on stderr */
    uint64_t sender; /* --sender: every request's envelope sender; 0: random each */
    lg_req *req;
    size_t n_req;
    size_t next; /* next request to take, under mu */
    uint64_t t0;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* progress of any request */
} lg;

static lg G;

static double lg_t(void) { return (double)(st_now_ns() - G.t0) * 1e-9; }

static int lg_int(const cJSON *o, const char *k, double lo, double hi, double def, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (v == NULL) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi) {
        fprintf(stderr, "loadgen: \"%s\" must be a number in [%g, %g]\n", k, lo, hi);
        return 1;
    }
    *out = v->valuedouble;
    return 0;
}

/* lg_parse - one request line into r; 0 on success. */
static int lg_parse(const char *line, lg_req *r)
{
    memset(r, 0, sizeof *r);
    cJSON *o = cJSON_Parse(line);
    if (o == NULL || !cJSON_IsObject(o)) {
        fprintf(stderr, "loadgen: not a JSON object: %.80s\n", line);
        cJSON_Delete(o);
        return 1;
    }
    int bad = 0;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prompt_ids");
    int np = cJSON_IsArray(p) ? cJSON_GetArraySize(p) : 0;
    if (np <= 0 || (r->prompt = calloc((size_t)np, sizeof *r->prompt)) == NULL) {
        fprintf(stderr, "loadgen: \"prompt_ids\" must be a non-empty array\n");
        cJSON_Delete(o);
        return 1;
    }
    for (int i = 0; i < np; i++) {
        const cJSON *x = cJSON_GetArrayItem(p, i);
        if (!cJSON_IsNumber(x)) {
            bad = 1;
            break;
        }
        r->prompt[i] = (int32_t)x->valuedouble;
    }
    r->n_prompt = (size_t)np;
    double n = 0, t = 0, seed = 0, ses = 0, mq = 0, d = 0, ca = -1, ab = -1;
    bad |= lg_int(o, "n", 1, 1 << 24, 0, &n) || n < 1;
    bad |= lg_int(o, "temp", 0, 100, 0, &t);
    bad |= lg_int(o, "seed", 0, 9e15, 0, &seed);
    bad |= lg_int(o, "session", 0, 9e15, 0, &ses);
    bad |= lg_int(o, "max_queue_ms", 0, 3600000, 0, &mq);
    bad |= lg_int(o, "delay_ms", 0, 3600000, 0, &d);
    bad |= lg_int(o, "cancel_after", 0, 1 << 24, -1, &ca);
    bad |= lg_int(o, "abandon_after", 0, 1 << 24, -1, &ab);
    r->n = (uint32_t)n;
    r->temp = (float)t;
    r->seed = (uint64_t)seed;
    r->session = (uint64_t)ses;
    r->max_queue_ms = (uint32_t)mq;
    r->delay_ms = (uint32_t)d;
    r->cancel_after = (long)ca;
    r->abandon_after = (long)ab;
    r->after_req = -1;
    const cJSON *sa = cJSON_GetObjectItemCaseSensitive(o, "start_after");
    if (sa != NULL) {
        const cJSON *a = cJSON_GetArrayItem(sa, 0), *b = cJSON_GetArrayItem(sa, 1);
        if (!cJSON_IsArray(sa) || !cJSON_IsNumber(a) || !cJSON_IsNumber(b) || a->valuedouble < 0)
            bad = 1;
        else {
            r->after_req = (long)a->valuedouble;
            r->after_k = (long)b->valuedouble;
        }
    }
    cJSON_Delete(o);
    if (bad)
        fprintf(stderr, "loadgen: bad request line: %.120s\n", line);
    return bad;
}

/* lg_progress - records that request i has got ids (or ended). */
static void lg_progress(size_t i, uint32_t got, bool ended)
{
    pthread_mutex_lock(&G.mu);
    if (G.progress && !ended)
        fprintf(stderr, "progress %zu %u\n", i, got);
    G.req[i].got = got;
    G.req[i].ended = G.req[i].ended || ended;
    pthread_cond_broadcast(&G.cv);
    pthread_mutex_unlock(&G.mu);
}

/* The outcome of one request, printed as one JSON line. */
typedef struct lg_out {
    bool ok;
    const char *stage;
    unsigned code;
    char error[512];
    char finish[32];
    uint32_t n_prompt;
    int32_t *ids;
    uint64_t *times;
    uint32_t n_ids;
    uint32_t steps, missed, reused;
    uint64_t submit_ns, start_ns;
    double t_submit, t_first, t_done;
} lg_out;

static void lg_print(size_t i, const lg_out *o)
{
    pthread_mutex_lock(&G.mu);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "i", (double)i);
    cJSON_AddBoolToObject(j, "ok", o->ok);
    cJSON_AddStringToObject(j, "stage", o->stage);
    cJSON_AddNumberToObject(j, "code", o->code);
    cJSON_AddStringToObject(j, "error", o->error);
    cJSON_AddStringToObject(j, "finish", o->finish);
    cJSON_AddNumberToObject(j, "n_prompt", o->n_prompt);
    cJSON *ids = cJSON_AddArrayToObject(j, "ids");
    cJSON *ts = cJSON_AddArrayToObject(j, "times_ns");
    for (uint32_t k = 0; k < o->n_ids; k++) {
        cJSON_AddItemToArray(ids, cJSON_CreateNumber(o->ids[k]));
        cJSON_AddItemToArray(ts, cJSON_CreateNumber((double)o->times[k]));
    }
    cJSON_AddNumberToObject(j, "steps", o->steps);
    cJSON_AddNumberToObject(j, "missed", o->missed);
    cJSON_AddNumberToObject(j, "reused", o->reused);
    cJSON_AddNumberToObject(j, "submit_ns", (double)o->submit_ns);
    cJSON_AddNumberToObject(j, "start_ns", (double)o->start_ns);
    cJSON_AddNumberToObject(j, "t_submit", o->t_submit);
    cJSON_AddNumberToObject(j, "t_first", o->t_first);
    cJSON_AddNumberToObject(j, "t_done", o->t_done);
    char *txt = cJSON_PrintUnformatted(j);
    if (txt != NULL) {
        printf("%s\n", txt);
        fflush(stdout);
        free(txt);
    }
    cJSON_Delete(j);
    pthread_mutex_unlock(&G.mu);
}

static void lg_fail(lg_out *o, const char *stage, st_err e)
{
    o->ok = false;
    o->stage = stage;
    o->code = (unsigned)e;
    snprintf(o->error, sizeof o->error, "%s", st_errdetail());
}

/* lg_wait_start - waits for request i's delay and start_after condition. */
static void lg_wait_start(size_t i)
{
    const lg_req *r = &G.req[i];
    uint64_t at = G.t0 + (uint64_t)r->delay_ms * 1000000u;
    while (st_now_ns() < at) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    if (r->after_req < 0 || (size_t)r->after_req >= G.n_req)
        return;
    const lg_req *d = &G.req[r->after_req];
    pthread_mutex_lock(&G.mu);
    while (d->got < (uint32_t)r->after_k && !d->ended)
        pthread_cond_wait(&G.cv, &G.mu);
    pthread_mutex_unlock(&G.mu);
}

/* lg_run - one request, start to end, on its own socket. */
static void lg_run(size_t i)
{
    lg_req *r = &G.req[i];
    lg_out o = {.stage = "submit"};
    o.ids = calloc((size_t)r->n + 1, sizeof *o.ids);
    o.times = calloc((size_t)r->n + 1, sizeof *o.times);
    nng_socket s;
    st_env env;
    uint64_t sender = G.sender;
    if (sender == 0)
        randombytes_buf(&sender, sizeof sender);
    bool open = false, env_ok = false;
    st_err e;
    lg_wait_start(i);
    if (o.ids == NULL || o.times == NULL) {
        st_errorf(ST_ENOMEM, "ids");
        lg_fail(&o, "submit", ST_ENOMEM);
        goto out;
    }
    if ((e = st_env_init(&env, G.keyed ? G.key : NULL, sender))) {
        lg_fail(&o, "submit", e);
        goto out;
    }
    env_ok = true;
    env.learn_peer = true; /* requests bound to the coordinator, after a Hello (msg.h) */
    int rv = nng_req0_open(&s);
    if (rv == 0) {
        open = true;
        nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
        nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, (size_t)64 << 20);
        rv = nng_dial(s, G.addr, NULL, 0);
    }
    if (rv != 0) {
        st_errorf(ST_ENNG, "dial %s: %s", G.addr, nng_strerror(rv));
        lg_fail(&o, "submit", ST_ENNG);
        goto out;
    }
    Strata__Sampling sp = STRATA__SAMPLING__INIT;
    st_sampler_params d = st_sampler_params_default();
    sp.temp = r->temp;
    sp.top_k = d.top_k;
    sp.top_p = d.top_p;
    sp.min_p = d.min_p;
    sp.repeat_penalty = d.repeat_penalty;
    sp.repeat_last_n = d.repeat_last_n;
    sp.seed = r->seed;
    Strata__GenerateRequest g = STRATA__GENERATE_REQUEST__INIT;
    g.prompt = (char *)"";
    g.n_prompt_ids = r->n_prompt;
    g.prompt_ids = r->prompt;
    g.max_tokens = r->n;
    g.sampling = &sp;
    g.has_sampling = true;
    g.session_id = r->session;
    g.max_queue_ms = r->max_queue_ms;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_GENERATE;
    m.generate = &g;
    Strata__Msg *rep = NULL;
    o.t_submit = lg_t();
    uint64_t deadline = st_now_ns() + (uint64_t)G.timeout_ms * 1000000u;
    if ((e = st_msg_call(s, &env, &m, G.timeout_ms, &rep))) {
        lg_fail(&o, "submit", e);
        goto out;
    }
    if (rep->body_case != STRATA__MSG__BODY_GENERATE_REPLY) {
        st_errorf(ST_EPROTO, "unexpected %s", st_msg_case_name(rep));
        st_msg_free(rep);
        lg_fail(&o, "submit", ST_EPROTO);
        goto out;
    }
    uint64_t id = rep->generate_reply->request_id;
    o.n_prompt = rep->generate_reply->n_prompt;
    st_msg_free(rep);
    o.stage = "poll";
    lg_progress(i, 0, false);
    bool cancelled = false;
    for (;;) {
        if (r->abandon_after >= 0 && o.n_ids >= (uint32_t)r->abandon_after) {
            o.ok = true;
            o.stage = "done";
            snprintf(o.finish, sizeof o.finish, "abandoned");
            break;
        }
        if (r->cancel_after >= 0 && !cancelled && o.n_ids >= (uint32_t)r->cancel_after) {
            Strata__CancelRequest cr = STRATA__CANCEL_REQUEST__INIT;
            cr.request_id = id;
            Strata__Msg cm = STRATA__MSG__INIT;
            cm.body_case = STRATA__MSG__BODY_CANCEL;
            cm.cancel = &cr;
            if ((e = st_msg_call(s, &env, &cm, G.timeout_ms, &rep))) {
                lg_fail(&o, "poll", e);
                break;
            }
            st_msg_free(rep);
            cancelled = true;
        }
        uint64_t now = st_now_ns();
        if (now >= deadline) {
            st_errorf(ST_ETIMEOUT, "request %llu not done within %d ms (%u ids)",
                      (unsigned long long)id, G.timeout_ms, o.n_ids);
            lg_fail(&o, "poll", ST_ETIMEOUT);
            break;
        }
        Strata__PollRequest pq = STRATA__POLL_REQUEST__INIT;
        pq.request_id = id;
        pq.after = o.n_ids;
        pq.wait_ms = 10000;
        m.body_case = STRATA__MSG__BODY_POLL;
        m.poll = &pq;
        if ((e = st_msg_call(s, &env, &m, 30000, &rep))) {
            lg_fail(&o, "poll", e);
            break;
        }
        if (rep->body_case != STRATA__MSG__BODY_POLL_REPLY) {
            st_errorf(ST_EPROTO, "unexpected %s", st_msg_case_name(rep));
            st_msg_free(rep);
            lg_fail(&o, "poll", ST_EPROTO);
            break;
        }
        const Strata__PollReply *p = rep->poll_reply;
        if (o.n_ids + p->n_ids > r->n || p->n_times_ns != p->n_ids) {
            st_errorf(ST_EPROTO, "%zu ids (%zu times) after %u; %u asked for", p->n_ids,
                      p->n_times_ns, o.n_ids, r->n);
            st_msg_free(rep);
            lg_fail(&o, "poll", ST_EPROTO);
            break;
        }
        if (p->n_ids > 0 && o.n_ids == 0)
            o.t_first = lg_t();
        if (p->n_ids > 0) {
            memcpy(o.ids + o.n_ids, p->ids, p->n_ids * sizeof *o.ids);
            memcpy(o.times + o.n_ids, p->times_ns, p->n_ids * sizeof *o.times);
        }
        o.n_ids += (uint32_t)p->n_ids;
        o.steps = p->steps;
        o.missed = p->missed_steps;
        o.reused = p->reused;
        o.submit_ns = p->submit_ns;
        o.start_ns = p->start_ns;
        if (p->n_ids > 0)
            lg_progress(i, o.n_ids, false);
        if (p->done) {
            snprintf(o.finish, sizeof o.finish, "%s", p->finish_reason ? p->finish_reason : "");
            o.stage = "done";
            o.ok = p->error == NULL;
            if (p->error != NULL) {
                o.code = p->error->code;
                snprintf(o.error, sizeof o.error, "%s", p->error->message ? p->error->message : "");
            }
            st_msg_free(rep);
            break;
        }
        st_msg_free(rep);
    }
out:
    o.t_done = lg_t();
    lg_progress(i, o.n_ids, true);
    lg_print(i, &o);
    if (open)
        nng_close(s);
    if (env_ok)
        st_env_fini(&env);
    free(o.ids);
    free(o.times);
}

static void *lg_thread(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&G.mu);
        size_t i = G.next < G.n_req ? G.next++ : G.n_req;
        pthread_mutex_unlock(&G.mu);
        if (i == G.n_req)
            return NULL;
        lg_run(i);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: loadgen ADDR [--key FILE] [--concurrency N] [--timeout-ms N] "
                        "< requests.jsonl\n");
        return 2;
    }
    G.addr = argv[1];
    G.timeout_ms = 120000;
    long conc = 0;
    char local[ST_LOCAL_KEY_PATH_MAX]; /* keyless: a local coordinator's key (exposure.h) */
    if (st_local_key_find(argv[1], local, sizeof local)) {
        st_err e = st_key_load(local, G.key);
        if (e != ST_OK) {
            fprintf(stderr, "loadgen: %s\n", st_errmsg(e));
            return 1;
        }
        G.keyed = true;
    }
    for (int i = 2; i < argc; i++) {
        if (i + 1 >= argc && strcmp(argv[i], "--progress") != 0) {
            fprintf(stderr, "loadgen: %s needs a value\n", argv[i]);
            return 2;
        }
        if (strcmp(argv[i], "--key") == 0) {
            if (st_key_load(argv[++i], G.key) != ST_OK) {
                fprintf(stderr, "loadgen: %s\n", st_errmsg(ST_EINVAL));
                return 1;
            }
            G.keyed = true;
        } else if (strcmp(argv[i], "--progress") == 0) {
            G.progress = true; /* takes no value */
        } else if (strcmp(argv[i], "--concurrency") == 0) {
            conc = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--timeout-ms") == 0) {
            G.timeout_ms = (int)strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--sender") == 0) {
            G.sender = strtoull(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "loadgen: unknown flag '%s'\n", argv[i]);
            return 2;
        }
    }
    if (G.timeout_ms < 1 || conc < 0 || sodium_init() < 0) {
        fprintf(stderr, "loadgen: bad --timeout-ms or --concurrency, or no libsodium\n");
        return 2;
    }
    size_t cap = 16;
    G.req = calloc(cap, sizeof *G.req);
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while (G.req != NULL && (len = getline(&line, &lcap, stdin)) > 0) {
        if (len <= 1)
            continue;
        if (G.n_req == LG_MAX_REQ) {
            fprintf(stderr, "loadgen: at most %d requests\n", LG_MAX_REQ);
            return 2;
        }
        if (G.n_req == cap) {
            lg_req *v = realloc(G.req, 2 * cap * sizeof *v);
            if (v == NULL)
                break;
            G.req = v;
            cap *= 2;
        }
        if (lg_parse(line, &G.req[G.n_req]))
            return 2;
        G.n_req++;
    }
    free(line);
    if (G.req == NULL) {
        fprintf(stderr, "loadgen: out of memory\n");
        return 1;
    }
    size_t nt = conc > 0 && (size_t)conc < G.n_req ? (size_t)conc : G.n_req;
    pthread_t *th = calloc(nt ? nt : 1, sizeof *th);
    pthread_mutex_init(&G.mu, NULL);
    pthread_cond_init(&G.cv, NULL);
    G.t0 = st_now_ns();
    size_t started = 0;
    for (; th != NULL && started < nt; started++) {
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setstacksize(&at, 256 << 10);
        int rv = pthread_create(&th[started], &at, lg_thread, NULL);
        pthread_attr_destroy(&at);
        if (rv != 0)
            break;
    }
    for (size_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    for (size_t i = 0; i < G.n_req; i++)
        free(G.req[i].prompt);
    free(G.req);
    free(th);
    if (started == 0 && G.n_req > 0) {
        fprintf(stderr, "loadgen: no thread could start\n");
        return 1;
    }
    nng_fini();
    return 0;
}
