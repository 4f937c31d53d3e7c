/* cmd_cluster.c - `strata status` and `strata generate`, which talk to a
 * coordinator, and `strata keygen`, which writes a cluster key. The other
 * cluster commands live in cmd_plan.c (plan, replan, drain) and cmd_hold.c
 * (hold); how `strata status` prints the reply, in status_print.c.
 *
 * The connection is cli/conn.h's: a REQ socket to the coordinator given by
 * --coordinator ADDR or the STRATA_COORDINATOR environment variable, with
 * the cluster key of --cluster-key FILE when the cluster has one (the
 * coordinator refuses unauthenticated frames) and --encrypt when it
 * encrypts (the coordinator refuses frames of the other mode), exchanging
 * control messages (docs/cluster.md).
 *
 * `strata generate` submits a request, then long-polls for tokens and
 * prints their text as it arrives (the coordinator's detokenizer never
 * splits a UTF-8 character); with --ids it prints one line "ids: a,b,c"
 * at the end instead. The prompt text is echoed first, as `strata run`
 * does, and the same EOS rule applies (EOS ends generation and is part of
 * the ids). --logits-out writes each step's logits row as little-endian
 * f32, the format of `strata run --logits-out`. */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/conn.h"
#include "cli/admin/plan_print.h"
#include "cli/admin/status_print.h"
#include "common/net/client.h"
#include "common/base/clock.h"
#include "common/wire/envelope.h"
#include "common/wire/msg.h"

#define CL_MAX_STOP 16

/* st_cmd_status - `strata status [--json]`: one request, one printed reply
 * (`strata plan` lives in cmd_plan.c). */
int st_cmd_status(int argc, char **argv)
{
    const char *cmd = "status";
    cli_conn_opts o = {0};
    st_opt rows[CLI_CONN_ROWS];
    const size_t n = cli_conn_rows(&o, true, rows);
    int st = cli_opts(cmd, "strata status [--json] [FLAGS]", rows, n, NULL, 0, NULL, argc, argv);
    if (st != CLI_OPTS_GO)
        return st;
    cli_conn c;
    int rc = cli_conn_open(&c, &o, cmd);
    if (rc != 0)
        return rc;
    Strata__Msg m = STRATA__MSG__INIT;
    Strata__StatusRequest sq = STRATA__STATUS_REQUEST__INIT;
    m.body_case = STRATA__MSG__BODY_STATUS_REQ;
    m.status_req = &sq;
    Strata__Msg *r = NULL;
    if (cli_conn_call(&c, &m, c.timeout_ms, &r, cmd)) {
        cli_conn_close(&c);
        return 1;
    }
    rc = 0;
    if (r->body_case == STRATA__MSG__BODY_STATUS) {
        const Strata__StatusReply *s = r->status;
        if (o.json) {
            rc = cli_print_json(cli_status_json(s));
        } else {
            cli_status_print(s);
        }
    } else {
        fprintf(stderr, "strata: %s: unexpected %s reply\n", cmd, st_msg_case_name(r));
        rc = 1;
    }
    st_msg_free(r);
    cli_conn_close(&c);
    return rc;
}

/* ---- generate ---- */

typedef struct gen_opts {
    cli_conn_opts c;
    const char *prompt;
    int32_t *ids;
    size_t n_ids;
    int64_t n;
    st_sampler_params sp;
    bool ids_only;
    const char *stop[CL_MAX_STOP];
    size_t n_stop;
    const char *logits_out;
    uint64_t session;
    int64_t max_queue_ms;
    int64_t poll_ms; /* the longest one poll waits for new ids (--poll-ms) */
} gen_opts;

/* A poll's wait by default, which is also the most the coordinator grants
 * (COORD_MAX_WAIT_MS): a poll answered without new ids is asked again. */
#define GEN_POLL_WAIT_MS 10000

/* What the last poll said about scheduling (the summary line). */
typedef struct gen_sched {
    uint32_t steps, missed, reused;
    uint64_t submit_ns, start_ns;
} gen_sched;

static const char gen_synopsis[] =
    "strata generate (--prompt TEXT | --prompt-ids 1,2,3) [-n N] [--temp T]\n"
    "       [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] [--ids]\n"
    "       [--stop STR]... [--logits-out FILE] [--session ID] [--timeout-ms N]\n"
    "       [--max-queue-ms N] [--poll-ms N]\n"
    "       [--coordinator ADDR] [--cluster-key FILE | --admin-key FILE |\n"
    "        --client-key FILE] [--encrypt]";

#define GEN_N_MAX (1 << 24)
#define GEN_MAX_QUEUE_MS 3600000
#define GEN_ROWS 8 /* gen_parse's own rows */

/* gen_stop - one more --stop string (dest: the gen_opts). */
static st_err gen_stop(const char *v, void *dest)
{
    gen_opts *o = dest;
    if (o->n_stop == CL_MAX_STOP)
        return st_errorf(ST_EINVAL, "at most %d --stop strings", CL_MAX_STOP);
    o->stop[o->n_stop++] = v;
    return ST_OK;
}

/* gen_parse - CLI_OPTS_GO to run, else the exit status (cli_opts). */
static int gen_parse(int argc, char **argv, gen_opts *o)
{
    o->sp = st_sampler_params_default();
    o->n = 64;
    o->poll_ms = GEN_POLL_WAIT_MS;
    cli_ids ids = {0};
    st_opt rows[GEN_ROWS + CLI_SAMPLING_ROWS + CLI_CONN_ROWS] = {
        {.name = "--prompt", .type = ST_OPT_STR, .dest = &o->prompt, .value = "TEXT",
         .help = "the prompt"},
        {.name = "--prompt-ids", .type = ST_OPT_FN, .dest = &ids, .fn = cli_ids_opt,
         .value = "1,2,3", .help = "the prompt as token ids"},
        {.name = "--n-predict", .alias = "-n", .type = ST_OPT_I64, .dest = &o->n, .min = 0,
         .max = GEN_N_MAX, .value = "N", .help = "tokens to generate (default 64)"},
        {.name = "--ids", .type = ST_OPT_FLAG, .dest = &o->ids_only,
         .help = "print the ids, not the text"},
        {.name = "--stop", .type = ST_OPT_FN, .dest = o, .fn = gen_stop, .value = "STR",
         .help = "stop at STR (repeatable)"},
        {.name = "--logits-out", .type = ST_OPT_STR, .dest = &o->logits_out, .value = "FILE",
         .help = "write each step's logits to FILE"},
        {.name = "--session", .type = ST_OPT_U64, .dest = &o->session, .umin = 0,
         .umax = UINT64_MAX, .value = "ID", .help = "the KV session to reuse"},
        {.name = "--max-queue-ms", .type = ST_OPT_I64, .dest = &o->max_queue_ms, .min = 1,
         .max = GEN_MAX_QUEUE_MS, .value = "N", .help = "the longest wait in the queue"},
    };
    size_t n = GEN_ROWS;
    n += cli_sampling_rows(&o->sp, rows + n);
    n += cli_conn_rows(&o->c, false, rows + n);
    rows[n++] = (st_opt){.name = "--poll-ms", .type = ST_OPT_I64, .dest = &o->poll_ms, .min = 1,
                         .max = GEN_POLL_WAIT_MS, .value = "N",
                         .help = "the longest one poll waits for new ids"};
    int st = cli_opts("generate", gen_synopsis, rows, n, NULL, 0, NULL, argc, argv);
    o->ids = ids.ids;
    o->n_ids = ids.n;
    if (st != CLI_OPTS_GO)
        return st;
    if ((o->prompt == NULL) == (o->ids == NULL)) {
        fprintf(stderr, "strata: generate: exactly one of --prompt, --prompt-ids is required\n"
                        "usage: %s\n",
                gen_synopsis);
        return 2;
    }
    return CLI_OPTS_GO;
}

static void gen_write(const void *b, size_t n)
{
    if (n) {
        fwrite(b, 1, n, stdout);
        fflush(stdout);
    }
}

/* gen_cancel - best effort: tells the coordinator to stop the request. */
static void gen_cancel(cli_conn *c, uint64_t id)
{
    Strata__CancelRequest cr = STRATA__CANCEL_REQUEST__INIT;
    cr.request_id = id;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_CANCEL;
    m.cancel = &cr;
    Strata__Msg *r = NULL;
    if (st_msg_call(c->s, &c->env, &m, 2000, &r) == ST_OK)
        st_msg_free(r);
}

/* gen_stream - polls request id until it is done, printing as it goes;
 * appends the ids to *all (capacity cap). */
static int gen_stream(cli_conn *c, const gen_opts *o, uint64_t id, FILE *lf, int32_t *all,
                      size_t cap, size_t *n_all, uint64_t deadline_ns, char *fin, size_t fin_cap,
                      gen_sched *gs)
{
    for (;;) {
        uint64_t now = st_now_ns();
        if (deadline_ns && now >= deadline_ns) {
            gen_cancel(c, id);
            fprintf(stderr, "strata: generate: timed out after %lld ms (request cancelled)\n",
                    (long long)o->c.timeout_ms);
            return 1;
        }
        uint32_t wait = (uint32_t)o->poll_ms;
        if (deadline_ns && (deadline_ns - now) / 1000000 < wait)
            wait = (uint32_t)((deadline_ns - now) / 1000000) + 1;
        Strata__PollRequest pq = STRATA__POLL_REQUEST__INIT;
        pq.request_id = id;
        pq.after = (uint32_t)*n_all;
        pq.wait_ms = wait;
        Strata__Msg m = STRATA__MSG__INIT;
        m.body_case = STRATA__MSG__BODY_POLL;
        m.poll = &pq;
        Strata__Msg *r = NULL;
        if (cli_conn_call(c, &m, (int)wait + 15000, &r, "generate"))
            return 1;
        if (r->body_case != STRATA__MSG__BODY_POLL_REPLY) {
            fprintf(stderr, "strata: generate: unexpected %s reply\n", st_msg_case_name(r));
            st_msg_free(r);
            return 1;
        }
        const Strata__PollReply *p = r->poll_reply;
        *gs = (gen_sched){.steps = p->steps,
                          .missed = p->missed_steps,
                          .reused = p->reused,
                          .submit_ns = p->submit_ns,
                          .start_ns = p->start_ns};
        if (*n_all + p->n_ids > cap) {
            fprintf(stderr, "strata: generate: the coordinator sent %zu ids; %zu were asked for\n",
                    *n_all + p->n_ids, cap);
            st_msg_free(r);
            return 1;
        }
        if (p->n_ids > 0) /* (a poll that waited out its time has none: ids is NULL) */
            memcpy(all + *n_all, p->ids, p->n_ids * sizeof *all);
        *n_all += p->n_ids;
        if (!o->ids_only)
            gen_write(p->text.data, p->text.len);
        if (lf && p->n_logits && fwrite(p->logits, sizeof(float), p->n_logits, lf) != p->n_logits) {
            perror(o->logits_out);
            st_msg_free(r);
            return 1;
        }
        if (lf && p->n_ids && p->n_logits != (size_t)p->n_ids * p->n_vocab) {
            fprintf(stderr, "strata: generate: %zu logits for %zu ids of %u\n", p->n_logits,
                    p->n_ids, p->n_vocab);
            st_msg_free(r);
            return 1;
        }
        if (p->done) {
            int rc = 0;
            snprintf(fin, fin_cap, "%s", p->finish_reason ? p->finish_reason : "");
            if (strcmp(fin, "error") == 0 || strcmp(fin, "cancelled") == 0) {
                if (!o->ids_only)
                    printf("\n");
                fflush(stdout);
                fprintf(stderr, "strata: generate: %s: %s\n", fin,
                        p->error && p->error->message ? p->error->message : "");
                rc = 1;
            }
            st_msg_free(r);
            return rc;
        }
        st_msg_free(r);
    }
}

int st_cmd_generate(int argc, char **argv)
{
    gen_opts o;
    memset(&o, 0, sizeof o);
    int rc = gen_parse(argc, argv, &o);
    if (rc != CLI_OPTS_GO) {
        free(o.ids);
        return rc;
    }
    cli_conn c;
    if ((rc = cli_conn_open(&c, &o.c, "generate")) != 0) {
        free(o.ids);
        return rc;
    }
    FILE *lf = NULL;
    int32_t *all = NULL;
    rc = 1;
    if (o.logits_out && (lf = fopen(o.logits_out, "wb")) == NULL) {
        perror(o.logits_out);
        goto out;
    }
    Strata__Sampling sp;
    st_sampling_to_pb(&o.sp, &sp);
    Strata__GenerateRequest g = STRATA__GENERATE_REQUEST__INIT;
    g.prompt = (char *)(o.prompt ? o.prompt : "");
    g.n_prompt_ids = o.n_ids;
    g.prompt_ids = o.ids;
    g.max_tokens = (uint32_t)o.n;
    g.sampling = &sp;
    g.has_sampling = true;
    g.n_stop = o.n_stop;
    g.stop = (char **)o.stop;
    g.session_id = o.session;
    g.want_logits = o.logits_out != NULL;
    g.max_queue_ms = (uint32_t)o.max_queue_ms;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_GENERATE;
    m.generate = &g;
    uint64_t t0 = st_now_ns();
    uint64_t deadline = o.c.timeout_ms > 0 ? t0 + (uint64_t)o.c.timeout_ms * 1000000u : 0;
    Strata__Msg *r = NULL;
    if (cli_conn_call(&c, &m, c.timeout_ms, &r, "generate"))
        goto out;
    if (r->body_case != STRATA__MSG__BODY_GENERATE_REPLY) {
        fprintf(stderr, "strata: generate: unexpected %s reply\n", st_msg_case_name(r));
        st_msg_free(r);
        goto out;
    }
    uint64_t id = r->generate_reply->request_id;
    uint32_t n_prompt = r->generate_reply->n_prompt;
    st_msg_free(r);
    if ((all = malloc(((size_t)o.n + 1) * sizeof *all)) == NULL) {
        fprintf(stderr, "strata: generate: out of memory\n");
        gen_cancel(&c, id);
        goto out;
    }
    if (!o.ids_only && o.prompt)
        gen_write(o.prompt, strlen(o.prompt));
    size_t n_all = 0;
    char fin[32] = "";
    gen_sched gs = {0};
    rc = gen_stream(&c, &o, id, lf, all, (size_t)o.n, &n_all, deadline, fin, sizeof fin, &gs);
    double dt = (double)(st_now_ns() - t0) * 1e-9;
    if (o.ids_only) {
        printf("ids: ");
        for (size_t i = 0; i < n_all; i++)
            printf("%s%d", i ? "," : "", all[i]);
        printf("\n");
    } else if (rc == 0) {
        printf("\n");
    }
    fflush(stdout);
    fprintf(stderr,
            "prompt: %u tokens (%u reused from the session); generation: %zu tokens in "
            "%.3f s (%.2f tok/s); finish: %s; queued %.3f s, %u steps, %u missed\n",
            n_prompt, gs.reused, n_all, dt, dt > 0 ? (double)n_all / dt : 0.0,
            fin[0] ? fin : "none",
            gs.start_ns > gs.submit_ns ? (double)(gs.start_ns - gs.submit_ns) * 1e-9 : 0.0,
            gs.steps, gs.missed);
out:
    if (lf && fclose(lf) != 0 && rc == 0) {
        perror(o.logits_out);
        rc = 1;
    }
    free(all);
    free(o.ids);
    cli_conn_close(&c);
    return rc;
}

/* ---- keygen ---- */

int st_cmd_keygen(int argc, char **argv)
{
    const char *file = NULL;
    size_t n_ops = 0;
    int st = cli_opts("keygen", "strata keygen FILE", NULL, 0, &file, 1, &n_ops, argc, argv);
    if (st != CLI_OPTS_GO)
        return st;
    if (n_ops != 1 || file[0] == '-') {
        fprintf(stderr, "usage: strata keygen FILE\n");
        return 2;
    }
    st_err e = st_key_generate(file);
    if (e != ST_OK) {
        fprintf(stderr, "strata: keygen: %s\n", st_errmsg(e));
        return 1;
    }
    fprintf(stderr, "wrote a %d-byte cluster key to %s (mode 0600)\n", ST_KEY_BYTES, file);
    return 0;
}
