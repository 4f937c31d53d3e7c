/* cmd_plan.c - the CLI's placement commands: `strata plan` (the serving
 * plan), `strata plan --dry-run` (what the planner would do now, from the
 * live cluster or from a workers file), `strata replan` and `strata drain
 * WORKER` (docs/placement.md).
 *
 * A dry run on a live cluster asks the coordinator (PlanDryRun), which
 * plans with its current estimates and answers a PlanProposal. A dry run
 * on a workers file (--workers FILE) runs the same planner library here,
 * with no cluster: the file gives the machines, the model comes from
 * --model, the file's "model" or its "model_facts". Both print the same
 * PlanProposal, as a table or as JSON (--json), so a capacity plan and a
 * live dry run read alike.
 *
 * `strata drain` asks for a plan without the worker and, unless --no-wait,
 * repeats the (idempotent) request until the worker is drained: a
 * committed plan does not use it, and no step in flight does (the worker
 * then leaves by itself unless it runs with --stay-after-drain); --undo
 * makes a drained worker that stayed placeable again. Like the
 * other cluster commands these talk to --coordinator ADDR (default
 * $STRATA_COORDINATOR) with --cluster-key FILE when the cluster has one. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/conn.h"
#include "cli/admin/plan_print.h"
#include "common/wire/envelope.h"
#include "common/model/gguf.h"
#include "common/model/llama.h"
#include "common/wire/msg.h"
#include "coordinator/planner/placement.h"
#include "coordinator/planner/planner_pb.h"
#include "coordinator/planner/workers_file.h"

#define PC_MAX_FILE ((long)16 << 20)

#define PC_TIMEOUT_MS 10000 /* a plan, replan or drain request's default bound */

/* ---- printing ---- */

/* pc_plan_print - `strata plan [--json]`'s output. */
static int pc_plan_print(const Strata__Plan *p, bool json)
{
    if (json)
        return cli_print_json(cli_plan_json(p));
    cli_plan_print(p);
    return 0;
}

static const char *pc_name(const Strata__PlanProposal *p, uint64_t id)
{
    for (size_t i = 0; i < p->n_workers; i++)
        if (p->workers[i]->id == id)
            return p->workers[i]->name ? p->workers[i]->name : "";
    return "";
}

static cJSON *pc_proposal_json(const Strata__PlanProposal *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "objective", p->objective ? p->objective : "");
    cJSON_AddBoolToObject(o, "exact", p->exact);
    cJSON_AddNumberToObject(o, "step_ms", p->step_ms);
    cJSON_AddNumberToObject(o, "latency_ms", p->latency_ms);
    cJSON_AddNumberToObject(o, "bottleneck_ms", p->bottleneck_ms);
    cJSON_AddNumberToObject(o, "bottleneck", p->bottleneck);
    cJSON_AddBoolToObject(o, "with_spares", p->with_spares);
    cJSON_AddBoolToObject(o, "replicated", p->replicated);
    cJSON_AddBoolToObject(o, "replicas_served", p->replicas_served);
    cJSON_AddNumberToObject(o, "margin", p->margin);
    cli_json_u64(o, "epoch", p->epoch);
    cJSON_AddNumberToObject(o, "n_layer", p->n_layer);
    cJSON_AddNumberToObject(o, "calibration", p->calibration);
    if (p->has_current) {
        cJSON *cur = cJSON_AddObjectToObject(o, "current");
        cJSON_AddNumberToObject(cur, "step_ms", p->current_ms);
        cJSON_AddBoolToObject(cur, "keep", p->keep_current);
    } else {
        cJSON_AddNullToObject(o, "current");
    }
    cJSON *st = cJSON_AddArrayToObject(o, "stages");
    for (size_t i = 0; i < p->n_stages; i++) {
        const Strata__ProposedStage *s = p->stages[i];
        cJSON *so = cJSON_CreateObject();
        cJSON_AddNumberToObject(so, "index", (double)i);
        cJSON_AddNumberToObject(so, "first", s->first);
        cJSON_AddNumberToObject(so, "last", s->last);
        cJSON *ids = cJSON_AddArrayToObject(so, "worker_ids");
        cJSON *names = cJSON_AddArrayToObject(so, "workers");
        for (size_t k = 0; k < s->n_worker_ids; k++) {
            char b[24];
            snprintf(b, sizeof b, "%" PRIu64, s->worker_ids[k]);
            cJSON_AddItemToArray(ids, cJSON_CreateRaw(b));
            cJSON_AddItemToArray(names, cJSON_CreateString(pc_name(p, s->worker_ids[k])));
        }
        cli_json_u64(so, "bytes", s->bytes);
        cJSON_AddNumberToObject(so, "compute_ms", s->compute_ms);
        cJSON_AddNumberToObject(so, "link_ms", s->link_ms);
        cJSON_AddNumberToObject(so, "time_ms", s->time_ms);
        if (p->n_expert > 0) {
            cJSON_AddNumberToObject(so, "n_expert", p->n_expert);
            cJSON_AddNumberToObject(so, "n_expert_used", p->n_expert_used);
        }
        cJSON_AddItemToArray(st, so);
    }
    cJSON *ws = cJSON_AddArrayToObject(o, "workers");
    for (size_t i = 0; i < p->n_workers; i++) {
        const Strata__PlannerWorker *w = p->workers[i];
        cJSON *wo = cJSON_CreateObject();
        cli_json_u64(wo, "id", w->id);
        cJSON_AddStringToObject(wo, "name", w->name ? w->name : "");
        cJSON_AddNumberToObject(wo, "sec_per_byte", w->sec_per_byte);
        cJSON_AddStringToObject(wo, "source", w->source ? w->source : "");
        cli_json_u64(wo, "memory_budget", w->mem_budget);
        cJSON_AddBoolToObject(wo, "spare", w->spare);
        if (w->has_stage) {
            cJSON *cs = cJSON_AddArrayToObject(wo, "current_stage");
            cJSON_AddItemToArray(cs, cJSON_CreateNumber(w->cur_first));
            cJSON_AddItemToArray(cs, cJSON_CreateNumber(w->cur_last));
        } else {
            cJSON_AddNullToObject(wo, "current_stage");
        }
        if (w->left_out && w->left_out[0])
            cJSON_AddStringToObject(wo, "left_out", w->left_out);
        else
            cJSON_AddNullToObject(wo, "left_out");
        cJSON_AddItemToArray(ws, wo);
    }
    cJSON_AddStringToObject(o, "note", p->note ? p->note : "");
    if (p->n_links > 0) { /* a live cluster's: measured or assumed per ordered pair */
        cJSON *ls = cJSON_AddArrayToObject(o, "links");
        for (size_t i = 0; i < p->n_links; i++)
            cJSON_AddItemToArray(ls, cli_link_json(p->links[i]));
    }
    return o;
}

static void pc_proposal_print(const Strata__PlanProposal *p)
{
    printf("dry run: %s objective, %s search: step %.3f ms (latency %.3f ms, bottleneck stage %u "
           "at %.3f ms)%s\n",
           p->objective ? p->objective : "", p->exact ? "exact" : "heuristic", p->step_ms,
           p->latency_ms, p->bottleneck, p->bottleneck_ms, p->with_spares ? ", with spares" : "");
    if (p->has_current)
        printf("serving epoch %" PRIu64 " takes %.3f ms under the same estimates: %s (margin "
               "%.0f%%)\n",
               p->epoch, p->current_ms, p->keep_current ? "a replan keeps it" : "a replan switches",
               100 * p->margin);
    for (size_t i = 0; i < p->n_stages; i++) {
        const Strata__ProposedStage *s = p->stages[i];
        printf("stage %zu: layers [%u, %u)  %6.2f MiB  compute %.3f ms  link %.3f ms  time %.3f "
               "ms  %s",
               i, s->first, s->last, (double)s->bytes / (1 << 20), s->compute_ms, s->link_ms,
               s->time_ms, s->n_worker_ids > 1 ? "replicas" : "worker");
        for (size_t k = 0; k < s->n_worker_ids; k++)
            printf("%s %" PRIu64 " (%s)", k ? "," : "", s->worker_ids[k],
                   pc_name(p, s->worker_ids[k]));
        if (p->n_expert > 0) /* a mixture of experts: the stage holds every expert */
            printf("  experts %u (%u used per token)", p->n_expert, p->n_expert_used);
        printf("\n");
    }
    for (size_t i = 0; i < p->n_workers; i++) {
        const Strata__PlannerWorker *w = p->workers[i];
        printf("worker %" PRIu64 " (%s): ", w->id, w->name ? w->name : "");
        if (w->sec_per_byte > 0)
            printf("%.3f GB/s %s, ", 1e-9 / w->sec_per_byte, w->source ? w->source : "");
        printf("budget %.1f MiB%s", (double)w->mem_budget / (1 << 20), w->spare ? ", spare" : "");
        if (w->left_out && w->left_out[0])
            printf(": left out: %s", w->left_out);
        printf("\n");
    }
    if (p->calibration > 0 && p->calibration != 1)
        printf("announced speeds scaled by %.3f (median measured / announced)\n", p->calibration);
    size_t measured = 0;
    for (size_t i = 0; i < p->n_links; i++)
        measured += p->links[i]->measured;
    if (p->n_links > 0)
        printf("links: %zu of %zu worker pairs measured, the rest assumed (rtt / 4, 1 GB/s)\n",
               measured, p->n_links);
    for (size_t i = 0; i < p->n_links; i++) {
        const Strata__LinkStatus *l = p->links[i];
        printf("  %s -> %s: %.3f ms, %.1f MB/s %s\n", pc_name(p, l->from_id), pc_name(p, l->to_id),
               l->latency_ms, l->bandwidth_bytes_per_s / 1e6, l->measured ? "measured" : "assumed");
    }
    if (p->note && p->note[0])
        printf("note: %s\n", p->note);
}

/* ---- strata plan ---- */

static const char plan_synopsis[] =
    "strata plan [--json]                       (the serving plan)\n"
    "       strata plan --dry-run [--objective latency|throughput] [--replicas]\n"
    "                   [--workers FILE.json [--model PATH]] [--json]\n"
    "       [--coordinator ADDR] [--cluster-key FILE] [--timeout-ms N]";

/* pc_objective - --objective latency|throughput: the name into the
 * `const char *` dest. */
static st_err pc_objective(const char *v, void *dest)
{
    st_place_objective ob;
    if (st_place_objective_from_name(v, &ob) != ST_OK)
        return st_errorf(ST_EINVAL, "'%s' is not latency or throughput", v);
    *(const char **)dest = v;
    return ST_OK;
}

#define PC_PLAN_ROWS 5

/* plan_read - the whole file into a malloc'ed, NUL-terminated buffer. */
static int plan_read(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    char *buf = malloc((size_t)PC_MAX_FILE + 1);
    size_t n = buf ? fread(buf, 1, (size_t)PC_MAX_FILE + 1, f) : 0;
    bool err = buf == NULL || ferror(f);
    fclose(f);
    if (err || n > (size_t)PC_MAX_FILE) {
        fprintf(stderr, "strata: plan: %s: %s\n", path,
                err ? "cannot read it" : "larger than 16 MiB");
        free(buf);
        return 1;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

/* plan_file - a dry run on a workers file, with the planner here. */
static int plan_file(const char *path, const char *model, const char *objective, bool replicas,
                     bool json)
{
    char *text = NULL;
    size_t len = 0;
    if (plan_read(path, &text, &len))
        return 1;
    st_wfile f;
    st_gguf *g = NULL;
    st_minfo mi;
    memset(&mi, 0, sizeof mi);
    st_place_worker *w = NULL;
    uint64_t *active = NULL; /* [n_layer]: bytes one token reads (--model) */
    double *lat = NULL, *bw = NULL;
    st_place_result *r = NULL;
    st_pp_worker *pw = NULL;
    Strata__PlanProposal *pp = NULL;
    int rc = 1;
    st_err e = st_wfile_parse(text, len, &f);
    if (e != ST_OK)
        goto fail;
    const char *mpath = model ? model : f.model_path;
    if (mpath && f.has_facts && !model) {
        e = st_errorf(ST_EINVAL, "the workers file gives both model and model_facts");
        goto fail;
    }
    st_place_model m;
    uint32_t hidden, ctx = f.ctx;
    const char *dtype;
    if (mpath) {
        if ((e = st_gguf_open(mpath, &g)) || (e = st_minfo_from_gguf(g, &mi)))
            goto fail;
        if ((active = malloc((size_t)mi.n_layer * sizeof *active)) == NULL) {
            e = st_errorf(ST_ENOMEM, "active bytes of %u layers", mi.n_layer);
            goto fail;
        }
        for (uint32_t l = 0; l < mi.n_layer; l++)
            active[l] = st_minfo_layer_active_bytes(&mi, l);
        m = (st_place_model){.n_layer = mi.n_layer,
                             .layer_bytes = mi.layer_bytes,
                             .active_bytes = active,
                             .embd_bytes = mi.embd_bytes,
                             .head_bytes = mi.head_bytes,
                             .stage_bytes = mi.rope_bytes,
                             .kv_bytes_per_token_layer = mi.kv_bytes_per_token_layer};
        hidden = mi.n_embd;
        dtype = mi.dtype;
        if (ctx == 0)
            ctx = mi.n_ctx_train;
    } else if (f.has_facts) {
        m = (st_place_model){.n_layer = f.n_layer,
                             .layer_bytes = f.layer_bytes,
                             .embd_bytes = f.embd_bytes,
                             .head_bytes = f.head_bytes,
                             .kv_bytes_per_token_layer = f.kv_bytes_per_token_layer};
        hidden = f.hidden;
        dtype = f.dtype[0] ? f.dtype : "f16";
        if (ctx == 0) {
            e = st_errorf(ST_EMISSING, "ctx is required with model_facts");
            goto fail;
        }
    } else {
        e = st_errorf(ST_EMISSING, "no model: give --model PATH, or model or model_facts in %s",
                      path);
        goto fail;
    }
    size_t n = f.n;
    w = calloc(n, sizeof *w);
    lat = calloc(n * n, sizeof *lat);
    bw = calloc(n * n, sizeof *bw);
    r = malloc(sizeof *r);
    pw = calloc(n, sizeof *pw);
    if (!w || !lat || !bw || !r || !pw) {
        e = st_errorf(ST_ENOMEM, "dry run");
        goto fail;
    }
    st_place_opts o = st_place_opts_default();
    if ((e = st_wfile_inputs(&f, m.n_layer, dtype, hidden, w, lat, bw, &o.act_bytes)))
        goto fail;
    o.objective = f.objective_set ? f.objective : ST_PLACE_THROUGHPUT;
    if (objective && (e = st_place_objective_from_name(objective, &o.objective)))
        goto fail;
    o.kv_tokens = (uint64_t)ctx * (f.sessions ? f.sessions : 8);
    o.lat_s = lat;
    o.bw = bw;
    o.replicas = replicas || f.replicas;
    o.margin = f.margin;
    if ((e = st_place(&m, w, n, &o, r)))
        goto fail;
    for (size_t i = 0; i < n; i++)
        pw[i] = (st_pp_worker){.id = f.w[i].id,
                               .name = f.w[i].name,
                               .input = (int)i,
                               .source = "file",
                               .mem_budget = f.w[i].memory,
                               .spare = f.w[i].spare};
    if ((e = st_place_proposal(r, w, n, pw, n, 0, m.n_layer, 1, "", &pp)))
        goto fail;
    pp->n_expert = mi.n_expert; /* 0: dense, or model_facts (which has no experts) */
    pp->n_expert_used = mi.n_expert_used;
    if (json) {
        rc = cli_print_json(pc_proposal_json(pp));
    } else {
        pc_proposal_print(pp);
        rc = 0;
    }
    goto out;
fail:
    fprintf(stderr, "strata: plan: %s\n", st_errmsg(e));
out:
    st_place_proposal_free(pp);
    free(pw);
    free(r);
    free(w);
    free(lat);
    free(bw);
    st_minfo_free(&mi);
    free(active);
    st_gguf_close(g);
    st_wfile_free(&f);
    free(text);
    return rc;
}

int st_cmd_plan(int argc, char **argv)
{
    cli_conn_opts o = {0};
    bool dry = false, replicas = false;
    const char *workers = NULL, *model = NULL, *objective = NULL;
    st_opt rows[PC_PLAN_ROWS + CLI_CONN_ROWS] = {
        {.name = "--dry-run", .type = ST_OPT_FLAG, .dest = &dry,
         .help = "the plan the coordinator would make now"},
        {.name = "--objective", .type = ST_OPT_FN, .dest = &objective, .fn = pc_objective,
         .value = "latency|throughput", .help = "what the dry run optimizes"},
        {.name = "--replicas", .type = ST_OPT_FLAG, .dest = &replicas,
         .help = "the dry run may place replicas"},
        {.name = "--workers", .type = ST_OPT_STR, .dest = &workers, .value = "FILE.json",
         .help = "plan for the workers of FILE, without a coordinator"},
        {.name = "--model", .type = ST_OPT_STR, .dest = &model, .value = "PATH",
         .help = "with --workers: the model"},
    };
    const size_t n = PC_PLAN_ROWS + cli_conn_rows(&o, true, rows + PC_PLAN_ROWS);
    int st = cli_opts("plan", plan_synopsis, rows, n, NULL, 0, NULL, argc, argv);
    if (st != CLI_OPTS_GO)
        return st;
    if (!dry && (workers || model || objective || replicas)) {
        fprintf(stderr, "strata: plan: --workers, --model, --objective and --replicas need "
                        "--dry-run\n");
        return 2;
    }
    if (model && !workers) {
        fprintf(stderr, "strata: plan: --model goes with --workers FILE\n");
        return 2;
    }
    if (workers)
        return plan_file(workers, model, objective, replicas, o.json);
    Strata__Msg m = STRATA__MSG__INIT, *r = NULL;
    Strata__PlanRequest pq = STRATA__PLAN_REQUEST__INIT;
    Strata__PlanDryRun dq = STRATA__PLAN_DRY_RUN__INIT;
    if (dry) {
        dq.objective = (char *)(objective ? objective : "");
        dq.replicas = replicas;
        m.body_case = STRATA__MSG__BODY_PLAN_DRY_RUN;
        m.plan_dry_run = &dq;
    } else {
        m.body_case = STRATA__MSG__BODY_PLAN_REQ;
        m.plan_req = &pq;
    }
    int rc = cli_conn_once(&o, &m, PC_TIMEOUT_MS,
                           dry ? STRATA__MSG__BODY_PLAN_PROPOSAL : STRATA__MSG__BODY_PLAN, &r,
                           "plan");
    if (rc != 0)
        return rc;
    if (!dry)
        rc = pc_plan_print(r->plan, o.json);
    else if (o.json)
        rc = cli_print_json(pc_proposal_json(r->plan_proposal));
    else
        pc_proposal_print(r->plan_proposal);
    st_msg_free(r);
    return rc;
}

/* ---- strata replan ---- */

int st_cmd_replan(int argc, char **argv)
{
    cli_conn_opts o = {0};
    Strata__ReplanRequest q = STRATA__REPLAN_REQUEST__INIT;
    const char *objective = "";
    bool force = false; /* q.force is a protobuf_c_boolean, not a bool */
    st_opt rows[2 + CLI_CONN_ROWS] = {
        {.name = "--force", .type = ST_OPT_FLAG, .dest = &force,
         .help = "replan even when the plan would not change"},
        {.name = "--objective", .type = ST_OPT_FN, .dest = &objective, .fn = pc_objective,
         .value = "latency|throughput", .help = "what the new plan optimizes"},
    };
    const size_t n = 2 + cli_conn_rows(&o, true, rows + 2);
    int st = cli_opts("replan", "strata replan [--force] [--objective latency|throughput] [--json]",
                      rows, n, NULL, 0, NULL, argc, argv);
    if (st != CLI_OPTS_GO)
        return st;
    q.objective = (char *)objective;
    q.force = force;
    Strata__Msg m = STRATA__MSG__INIT, *r = NULL;
    m.body_case = STRATA__MSG__BODY_REPLAN;
    m.replan = &q;
    int rc = cli_conn_once(&o, &m, PC_TIMEOUT_MS, STRATA__MSG__BODY_REPLAN_REPLY, &r, "replan");
    if (rc != 0)
        return rc;
    const Strata__ReplanReply *rr = r->replan_reply;
    if (o.json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddBoolToObject(j, "started", rr->started);
        cli_json_u64(j, "epoch", rr->epoch);
        cJSON_AddStringToObject(j, "message", rr->message ? rr->message : "");
        rc = cli_print_json(j);
    } else {
        printf("%s\n", rr->message ? rr->message : "");
    }
    st_msg_free(r);
    return rc;
}

/* ---- strata drain ---- */

int st_cmd_drain(int argc, char **argv)
{
    cli_conn_opts o = {0};
    bool no_wait = false, undo = false;
    const char *who = NULL;
    size_t n_who = 0;
    static const char synopsis[] =
        "strata drain WORKER (an id or a name) [--no-wait] [--undo] "
        "[--timeout-ms N] [--coordinator ADDR] [--cluster-key FILE]";
    st_opt rows[2 + CLI_CONN_ROWS] = {
        {.name = "--no-wait", .type = ST_OPT_FLAG, .dest = &no_wait,
         .help = "return once the drain has started"},
        {.name = "--undo", .type = ST_OPT_FLAG, .dest = &undo,
         .help = "make a drained worker that stayed (--stay-after-drain), or one\n"
                 "still draining, placeable again"},
    };
    const size_t n = 2 + cli_conn_rows(&o, true, rows + 2);
    int st = cli_opts("drain", synopsis, rows, n, &who, 1, &n_who, argc, argv);
    if (st != CLI_OPTS_GO)
        return st;
    if (who == NULL) {
        fprintf(stderr, "usage: %s\n"
                        "  --undo  make a drained worker that stayed (--stay-after-drain), or one\n"
                        "          still draining, placeable again\n",
                synopsis);
        return 2;
    }
    bool wait = !no_wait;
    Strata__DrainRequest q = STRATA__DRAIN_REQUEST__INIT;
    char *end;
    unsigned long long id = strtoull(who, &end, 10);
    if (*end == '\0' && who[0] != '\0')
        q.worker_id = id;
    else
        q.name = (char *)who;
    q.undo = undo;
    wait = wait && !undo;
    cli_conn c;
    int rc = cli_conn_open(&c, &o, "drain");
    if (rc != 0)
        return rc;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int64_t limit_ms = o.timeout_ms > 0 ? o.timeout_ms : 60000;
    rc = 1;
    for (bool first = true;; first = false) {
        Strata__Msg m = STRATA__MSG__INIT, *r = NULL;
        m.body_case = STRATA__MSG__BODY_DRAIN;
        m.drain = &q;
        if (cli_conn_expect(&c, &m, PC_TIMEOUT_MS, STRATA__MSG__BODY_DRAIN_REPLY, &r, "drain"))
            break;
        const Strata__DrainReply *d = r->drain_reply;
        if (first && !o.json)
            fprintf(stderr, "drain of worker %" PRIu64 ": %s\n", d->worker_id,
                    d->message ? d->message : "");
        q.worker_id = d->worker_id; /* by id from now on */
        q.name = (char *)"";
        if (d->drained || !wait) {
            if (o.json) {
                cJSON *j = cJSON_CreateObject();
                cli_json_u64(j, "worker_id", d->worker_id);
                cJSON_AddBoolToObject(j, "drained", d->drained);
                cli_json_u64(j, "epoch", d->epoch);
                cJSON_AddStringToObject(j, "message", d->message ? d->message : "");
                rc = cli_print_json(j);
            } else {
                printf("worker %" PRIu64 " %s\n", d->worker_id,
                       undo         ? d->message ? d->message : ""
                       : d->drained ? "drained: no plan and no step in flight uses it; it leaves "
                                      "(or stays as a spare with --stay-after-drain)"
                                    : "is draining");
                rc = 0;
            }
            st_msg_free(r);
            break;
        }
        st_msg_free(r);
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        int64_t ms = (int64_t)(t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (ms > limit_ms) {
            fprintf(stderr, "strata: drain: worker %" PRIu64 " not drained after %lld ms\n",
                    q.worker_id, (long long)limit_ms);
            break;
        }
        struct timespec nap = {0, 200 * 1000000};
        nanosleep(&nap, NULL);
    }
    cli_conn_close(&c);
    return rc;
}
