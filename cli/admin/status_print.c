/* status_print.c - the CLI's printers of a coordinator's status (see
 * status_print.h). */
#include "cli/admin/status_print.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/conn.h"
#include "cli/admin/expert_print.h"
#include "cli/admin/plan_print.h"
#include "common/net/client.h"
#include "common/base/units.h"

static cJSON *sp_counters_json(const Strata__Counters *c)
{
    cJSON *o = cJSON_CreateObject();
    Strata__Counters z = STRATA__COUNTERS__INIT;
    if (c == NULL)
        c = &z;
    cli_json_u64(o, "refused_epoch", c->refused_epoch);
    cli_json_u64(o, "auth_failed", c->auth_failed);
    cli_json_u64(o, "f16_clamps", c->f16_clamps);
    cli_json_u64(o, "bad_packets", c->bad_packets);
    cli_json_u64(o, "steps", c->steps);
    cli_json_u64(o, "refused_control", c->refused_control);
    cli_json_u64(o, "refused_step", c->refused_step);
    cli_json_u64(o, "forged_results", c->forged_results);
    cli_json_u64(o, "reply_failures", c->reply_failures);
    cli_json_u64(o, "probe_refused", c->probe_refused);
    cli_json_u64(o, "zstd_packets_sent", c->zstd_packets_sent);
    cli_json_u64(o, "zstd_raw_bytes_sent", c->zstd_raw_bytes_sent);
    cli_json_u64(o, "zstd_wire_bytes_sent", c->zstd_wire_bytes_sent);
    cli_json_u64(o, "zstd_packets_received", c->zstd_packets_received);
    cli_json_u64(o, "conn_refused", c->conn_refused);
    cli_json_u64(o, "conn_evicted", c->conn_evicted);
    cli_json_u64(o, "conn_expired", c->conn_expired);
    cli_json_u64(o, "bad_experts", c->bad_experts);
    return o;
}

/* sp_security_json - requests the coordinator refused for who sent them
 * (issue 12), and the role it saw this status request under. */
static cJSON *sp_security_json(const Strata__SecurityCounters *c)
{
    cJSON *o = cJSON_CreateObject();
    Strata__SecurityCounters z = STRATA__SECURITY_COUNTERS__INIT;
    if (c == NULL)
        c = &z;
    cli_json_u64(o, "role_refused", c->role_refused);
    cli_json_u64(o, "member_spoofed", c->member_spoofed);
    cli_json_u64(o, "joins_refused", c->joins_refused);
    cli_json_u64(o, "stale_refused", c->stale_refused);
    cli_json_u64(o, "foreign_refused", c->foreign_refused);
    cli_json_u64(o, "quota_refused", c->quota_refused);
    cli_json_u64(o, "pipes_closed", c->pipes_closed);
    cli_json_u64(o, "slots_refused", c->slots_refused);
    cli_json_u64(o, "unbound_refused", c->unbound_refused);
    cJSON_AddStringToObject(o, "role", c->role ? c->role : "");
    cJSON_AddStringToObject(o, "scope", c->scope ? c->scope : "");
    return o;
}

static cJSON *sp_sched_json(const Strata__SchedStatus *q)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "running", q->running);
    cJSON_AddNumberToObject(o, "queued", q->queued);
    cJSON_AddNumberToObject(o, "sessions", q->sessions);
    cJSON_AddNumberToObject(o, "idle_sessions", q->idle_sessions);
    cJSON_AddNumberToObject(o, "max_sessions", q->max_sessions);
    cJSON_AddNumberToObject(o, "in_flight", q->in_flight);
    cJSON_AddNumberToObject(o, "depth", q->depth);
    cJSON_AddStringToObject(o, "depth_why", q->depth_why ? q->depth_why : "");
    cJSON_AddNumberToObject(o, "peak_in_flight", q->peak_in_flight);
    cli_json_u64(o, "batches", q->batches);
    cli_json_u64(o, "rows", q->rows);
    cli_json_u64(o, "tokens", q->tokens);
    cli_json_u64(o, "busy_refused", q->busy_refused);
    cli_json_u64(o, "queue_expired", q->queue_expired);
    cli_json_u64(o, "client_gone", q->client_gone);
    cli_json_u64(o, "reused_tokens", q->reused_tokens);
    cli_json_u64(o, "sessions_evicted", q->sessions_evicted);
    cli_json_u64(o, "sessions_expired", q->sessions_expired);
    cli_json_u64(o, "kv_kept", q->kv_kept);
    cli_json_u64(o, "kv_reprefilled", q->kv_reprefilled);
    cli_json_u64(o, "kv_session_bytes", q->kv_session_bytes);
    cJSON_AddStringToObject(o, "kv_cache_type",
                            q->kv_cache_type && q->kv_cache_type[0] ? q->kv_cache_type : "f32");
    cli_json_u64(o, "kv_bytes", q->kv_bytes);
    cJSON_AddNumberToObject(o, "chunk", q->chunk);
    cJSON_AddNumberToObject(o, "max_batch_tokens", q->max_batch_tokens);
    if (q->hold) /* the coordinator has --test-hooks */
        cJSON_AddItemToObject(o, "hold", cli_hold_json(q->hold));
    cJSON_AddNumberToObject(o, "routes", q->routes);
    cJSON *rs = cJSON_AddArrayToObject(o, "route_sessions");
    for (size_t i = 0; i < q->n_route_sessions; i++)
        cJSON_AddItemToArray(rs, cJSON_CreateNumber(q->route_sessions[i]));
    cJSON *rb = cJSON_AddArrayToObject(o, "route_batches");
    for (size_t i = 0; i < q->n_route_batches; i++) {
        char b[24];
        snprintf(b, sizeof b, "%" PRIu64, q->route_batches[i]);
        cJSON_AddItemToArray(rb, cJSON_CreateRaw(b));
    }
    return o;
}

/* sp_fetch_json - a streaming worker's fetch (docs/streaming.md). */
static void sp_fetch_json(cJSON *o, const Strata__FetchProgress *f)
{
    cJSON *j = cJSON_AddObjectToObject(o, "fetch");
    cJSON_AddBoolToObject(j, "active", f->active);
    cli_json_u64(j, "need_bytes", f->need_bytes);
    cli_json_u64(j, "have_bytes", f->have_bytes);
    cli_json_u64(j, "fetched_bytes", f->fetched_bytes);
    cli_json_u64(j, "cached_bytes", f->cached_bytes);
    cJSON_AddNumberToObject(j, "percent",
                            f->need_bytes ? 100.0 * (double)f->have_bytes / (double)f->need_bytes
                                          : 100.0);
    cJSON_AddNumberToObject(j, "rate_bytes_per_s", f->rate_bytes_per_s);
    cJSON_AddNumberToObject(j, "eta_s", f->eta_s);
    cli_json_u64(j, "bad_chunks", f->bad_chunks);
    cJSON_AddNumberToObject(j, "sources", f->sources);
    cli_json_u64(j, "refetched_bytes", f->refetched_bytes);
    cli_json_u64(j, "timeouts", f->timeouts);
    cJSON *a = cJSON_AddArrayToObject(j, "source_stats");
    for (size_t i = 0; a != NULL && i < f->n_source_stats; i++) {
        const Strata__FetchSource *s = f->source_stats[i];
        cJSON *o2 = cJSON_CreateObject();
        cJSON_AddStringToObject(o2, "addr", s->addr ? s->addr : "");
        cli_json_u64(o2, "requests", s->requests);
        cli_json_u64(o2, "timeouts", s->timeouts);
        cJSON_AddBoolToObject(o2, "aside", s->aside);
        cJSON_AddBoolToObject(o2, "dropped", s->dropped);
        cJSON_AddItemToArray(a, o2);
    }
}

/* sp_fetch_print - the same as one line of `strata status`. */
static void sp_fetch_print(const Strata__FetchProgress *f)
{
    char have[24], need[24];
    st_fmt_bytes(f->have_bytes, have, sizeof have);
    st_fmt_bytes(f->need_bytes, need, sizeof need);
    printf("    fetch%s: %s of %s (%.1f%%), %.2f MB/s, ETA %.1f s, bad chunks %" PRIu64
           ", sources %u, timeouts %" PRIu64 "\n",
           f->active ? "ing" : " done", have, need,
           f->need_bytes ? 100.0 * (double)f->have_bytes / (double)f->need_bytes : 100.0,
           f->rate_bytes_per_s / 1e6, f->eta_s, f->bad_chunks, f->sources, f->timeouts);
    for (size_t i = 0; i < f->n_source_stats; i++) { /* the ones that timed out */
        const Strata__FetchSource *s = f->source_stats[i];
        if (s->timeouts > 0)
            printf("      source %s: %" PRIu64 " requests, %" PRIu64 " timeouts%s%s\n",
                   s->addr ? s->addr : "", s->requests, s->timeouts, s->aside ? ", set aside" : "",
                   s->dropped ? ", dropped" : "");
    }
}

static cJSON *sp_worker_json(const Strata__WorkerStatus *w)
{
    cJSON *o = cJSON_CreateObject();
    cli_json_u64(o, "id", w->id);
    cJSON_AddStringToObject(o, "name", w->name ? w->name : "");
    cJSON_AddStringToObject(o, "state", w->state ? w->state : "");
    cJSON_AddNumberToObject(o, "stage", w->stage);
    cJSON_AddNumberToObject(o, "replica", w->stage >= 0 ? w->replica : -1);
    cJSON_AddNumberToObject(o, "first", w->first);
    cJSON_AddNumberToObject(o, "last", w->last_layer);
    cJSON_AddNumberToObject(o, "since_heartbeat_s", w->since_heartbeat_s);
    if (w->cap) {
        cJSON_AddNumberToObject(o, "cores", w->cap->cores);
        cJSON_AddNumberToObject(o, "threads", w->cap->threads);
        cli_json_u64(o, "memory_budget", w->cap->memory_budget);
        cJSON_AddStringToObject(o, "data_addr", w->cap->data_addr ? w->cap->data_addr : "");
        cJSON_AddStringToObject(o, "ctl_addr", w->cap->ctl_addr ? w->cap->ctl_addr : "");
        cJSON_AddBoolToObject(o, "spare", w->cap->spare);
        cJSON_AddStringToObject(o, "version", w->cap->version ? w->cap->version : "");
        cJSON_AddBoolToObject(o, "wire_zstd", w->cap->wire_zstd); /* takes zstd boundaries */
        cJSON *wd = cJSON_AddArrayToObject(o, "wire_dtypes"); /* the boundary dtypes it accepts */
        for (size_t k = 0; k < w->cap->n_wire_dtypes; k++)
            cJSON_AddItemToArray(wd, cJSON_CreateString(
                                         w->cap->wire_dtypes[k] ? w->cap->wire_dtypes[k] : ""));
    }
    cJSON_AddNumberToObject(o, "protocol", w->protocol);
    const Strata__Heartbeat *h = w->last;
    if (h) {
        cli_json_u64(o, "epoch", h->epoch);
        cJSON_AddNumberToObject(o, "load", h->load);
        cli_json_u64(o, "rss_bytes", h->rss_bytes);
        cli_json_u64(o, "kv_bytes", h->kv_bytes);
        cli_json_u64(o, "weight_bytes", h->weight_bytes);
        cJSON_AddNumberToObject(o, "in_flight", h->in_flight);
        cJSON_AddNumberToObject(o, "sessions", h->sessions);
        cJSON *ls = cJSON_AddArrayToObject(o, "layers");
        for (size_t i = 0; i < h->n_layers; i++) {
            cJSON *l = cJSON_CreateObject();
            cJSON_AddNumberToObject(l, "layer", h->layers[i]->layer);
            cJSON_AddNumberToObject(l, "ema_ms", h->layers[i]->ema_ms);
            cJSON_AddNumberToObject(l, "p99_ms", h->layers[i]->p99_ms);
            cJSON_AddNumberToObject(l, "samples", h->layers[i]->samples);
            cJSON_AddNumberToObject(l, "one_token_ema_ms", h->layers[i]->one_token_ema_ms);
            cJSON_AddNumberToObject(l, "one_token_samples", h->layers[i]->one_token_samples);
            cJSON_AddItemToArray(ls, l);
        }
        cJSON_AddItemToObject(o, "counters", sp_counters_json(h->counters));
        cJSON *zs = cJSON_AddArrayToObject(o, "zstd"); /* zstd on its sampled outbound packets */
        for (size_t i = 0; i < h->n_zstd; i++) {
            cJSON *z = cJSON_CreateObject();
            cJSON_AddStringToObject(z, "dtype", h->zstd[i]->dtype ? h->zstd[i]->dtype : "");
            cJSON_AddNumberToObject(z, "ratio", h->zstd[i]->ratio);
            cJSON_AddNumberToObject(z, "compress_ns_per_byte", h->zstd[i]->compress_ns_per_byte);
            cJSON_AddNumberToObject(z, "decompress_ns_per_byte",
                                    h->zstd[i]->decompress_ns_per_byte);
            cJSON_AddNumberToObject(z, "samples", h->zstd[i]->samples);
            cJSON_AddItemToArray(zs, z);
        }
        if (h->fetch)
            sp_fetch_json(o, h->fetch);
        if (h->n_experts > 0) /* a mixture of experts: its tokens per expert, cumulative */
            cJSON_AddItemToObject(o, "experts", cli_expert_list_json(h->experts, h->n_experts));
    }
    return o;
}

/* sp_name_of - the name of worker id in the status, or "?". */
static const char *sp_name_of(const Strata__StatusReply *s, uint64_t id)
{
    for (size_t k = 0; k < s->n_workers; k++)
        if (s->workers[k]->id == id)
            return s->workers[k]->name ? s->workers[k]->name : "?";
    return "?";
}

/* sp_links_json - the link matrix of a status as a list of ordered pairs. */
static cJSON *sp_links_json(const Strata__StatusReply *s)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < s->n_links; i++) {
        const Strata__LinkStatus *l = s->links[i];
        cJSON *o = cli_link_json(l);
        cJSON_AddStringToObject(o, "from_name", sp_name_of(s, l->from_id));
        cJSON_AddStringToObject(o, "to_name", sp_name_of(s, l->to_id));
        cJSON_AddNumberToObject(o, "bandwidth_mb_s", l->bandwidth_bytes_per_s / 1e6);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

/* sp_links_print - the link matrix: a row per sender, a column per
 * receiver, "latency ms/bandwidth MB/s", assumed pairs marked '*'. */
static void sp_links_print(const Strata__StatusReply *s)
{
    if (s->n_links == 0)
        return;
    uint64_t ids[64];
    size_t n = 0, measured = 0;
    for (size_t i = 0; i < s->n_links; i++) {
        measured += s->links[i]->measured;
        for (int e = 0; e < 2; e++) {
            uint64_t id = e ? s->links[i]->to_id : s->links[i]->from_id;
            bool seen = false;
            for (size_t k = 0; k < n && !seen; k++)
                seen = ids[k] == id;
            if (!seen && n < 64)
                ids[n++] = id;
        }
    }
    printf("links (from row to column: latency ms/bandwidth MB/s; * assumed, not measured): "
           "%zu of %zu measured%s\n",
           measured, s->n_links, n == 64 ? " (first 64 workers)" : "");
    printf("  %-14s", "");
    for (size_t b = 0; b < n; b++)
        printf(" %16.14s", sp_name_of(s, ids[b]));
    printf("\n");
    for (size_t a = 0; a < n; a++) {
        printf("  %-14.14s", sp_name_of(s, ids[a]));
        for (size_t b = 0; b < n; b++) {
            char cell[48] = "-";
            for (size_t i = 0; i < s->n_links; i++) {
                const Strata__LinkStatus *l = s->links[i];
                if (l->from_id == ids[a] && l->to_id == ids[b])
                    snprintf(cell, sizeof cell, "%.3f/%.0f%s", l->latency_ms,
                             l->bandwidth_bytes_per_s / 1e6, l->measured ? "" : "*");
            }
            printf(" %16s", cell);
        }
        printf("\n");
    }
}

/* sp_versions_print - the coordinator's build and protocol, then each
 * member's build when they differ from it (during a rolling upgrade, say). */
static void sp_versions_print(const Strata__StatusReply *s)
{
    const char *mine = s->version && s->version[0] ? s->version : "(not sent)";
    size_t other = 0;
    for (size_t i = 0; i < s->n_workers; i++) {
        const char *v = s->workers[i]->cap ? s->workers[i]->cap->version : NULL;
        other += v == NULL || strcmp(v, mine) != 0;
    }
    printf("versions: coordinator strata %s, protocol %u (interoperates with %u..%u); %s\n", mine,
           s->protocol, s->protocol_oldest, s->protocol,
           other == 0 ? "every worker the same" : "workers:");
    for (size_t i = 0; i < s->n_workers && other > 0; i++) {
        const Strata__WorkerStatus *w = s->workers[i];
        const char *v = w->cap && w->cap->version && w->cap->version[0] ? w->cap->version
                                                                        : "(not sent)";
        printf("  %-14.14s strata %s, protocol %u\n", w->name ? w->name : "", v, w->protocol);
    }
}

void cli_status_print(const Strata__StatusReply *s)
{
    const Strata__Counters *c = s->counters;
    printf("model %s  epoch %" PRIu64 " (%s)  incarnation %" PRIu64 "  sessions %u  requests %u\n",
           s->model ? s->model : "", s->epoch, st_client_serving(s) ? "serving" : "not serving",
           s->incarnation, s->sessions, s->requests);
    printf("security: %s\n",
           !s->keyed      ? "open (no cluster key: loopback only unless --insecure)"
           : s->encrypted ? "keyed and encrypted (every frame sealed with XChaCha20-Poly1305)"
                          : "keyed (every frame MACed; not encrypted)");
    sp_versions_print(s);
    if (s->i8_gate && s->i8_gate[0]) /* coordinators older than the field send none */
        printf("i8 gate: %s\n", s->i8_gate);
    if (s->plan)
        for (size_t i = 0; i < s->plan->n_stages; i++) {
            const Strata__Stage *st = s->plan->stages[i];
            printf("stage %u [%u,%u): %s", st->index, st->first, st->last,
                   st->n_worker_ids > 1 ? "replicas" : "worker");
            for (size_t k = 0; k < st->n_worker_ids; k++)
                printf("%s %s", k ? "," : "", sp_name_of(s, st->worker_ids[k]));
            if (i > 0) { /* the boundary into it: its dtype, zstd, and why under --wire auto */
                printf(";");
                cli_boundary_print(st);
            }
            cli_stage_experts_print(s);
            printf("\n");
            cli_experts_print(s, st);
        }
    printf("%-20s %-14s %-9s %5s %3s %-10s %10s %10s %8s %8s\n", "worker", "name", "state", "stage",
           "rep", "layers", "rss", "kv", "steps", "hb age");
    for (size_t i = 0; i < s->n_workers; i++) {
        const Strata__WorkerStatus *w = s->workers[i];
        const Strata__Heartbeat *h = w->last;
        char layers[32] = "-", rss[24] = "-", kv[24] = "-", rep[12] = "-", steps[24] = "-";
        if (w->stage >= 0) {
            snprintf(layers, sizeof layers, "[%u,%u)", w->first, w->last_layer);
            snprintf(rep, sizeof rep, "%d", w->replica);
        }
        if (h) {
            st_fmt_bytes(h->rss_bytes, rss, sizeof rss);
            st_fmt_bytes(h->kv_bytes, kv, sizeof kv);
            if (h->counters)
                snprintf(steps, sizeof steps, "%" PRIu64, h->counters->steps);
        }
        printf("%-20" PRIu64 " %-14.14s %-9s %5d %3s %-10s %10s %10s %8s %7.1fs\n", w->id,
               w->name ? w->name : "", w->state ? w->state : "", w->stage, rep, layers, rss, kv,
               steps, w->since_heartbeat_s);
        if (h && h->n_layers > 0) {
            printf("    latency ms (ema/p99):");
            for (size_t k = 0; k < h->n_layers; k++)
                printf(" L%u %.3f/%.3f", h->layers[k]->layer, h->layers[k]->ema_ms,
                       h->layers[k]->p99_ms);
            printf("\n");
        }
        if (h && h->fetch)
            sp_fetch_print(h->fetch);
    }
    sp_links_print(s);
    const Strata__SchedStatus *q = s->sched;
    if (q) {
        char kvs[24], kvw[24];
        st_fmt_bytes(q->kv_session_bytes, kvs, sizeof kvs);
        st_fmt_bytes(q->kv_bytes, kvw, sizeof kvw);
        printf("sessions: %u of %u (%u idle), %s KV each (%s cache), %s KV on workers; "
               "requests: %u running, %u queued\n",
               q->sessions, q->max_sessions, q->idle_sessions, kvs,
               q->kv_cache_type && q->kv_cache_type[0] ? q->kv_cache_type : "f32", kvw, q->running,
               q->queued);
        printf("batches: %" PRIu64 " (%" PRIu64 " rows, %" PRIu64 " tokens), %u in flight of %u "
               "(peak %u); refused busy %" PRIu64 ", queue expired %" PRIu64
               ", clients gone %" PRIu64 ", prompt ids reused %" PRIu64
               ", sessions evicted %" PRIu64 ", expired %" PRIu64
               "; KV kept at plan switches %" PRIu64 ", sessions re-prefilled %" PRIu64 "\n",
               q->batches, q->rows, q->tokens, q->in_flight, q->depth, q->peak_in_flight,
               q->busy_refused, q->queue_expired, q->client_gone, q->reused_tokens,
               q->sessions_evicted, q->sessions_expired, q->kv_kept, q->kv_reprefilled);
        if (q->depth_why != NULL && q->depth_why[0] != '\0')
            printf("pipeline depth %u: %s\n", q->depth, q->depth_why);
        if (q->hold) /* test hooks: the step gate */
            cli_hold_print(q->hold);
        if (q->routes > 1) {
            printf("routes: %u; sessions per route", q->routes);
            for (size_t i = 0; i < q->n_route_sessions; i++)
                printf(" %u", q->route_sessions[i]);
            printf("; batches per route (this epoch)");
            for (size_t i = 0; i < q->n_route_batches; i++)
                printf(" %" PRIu64, q->route_batches[i]);
            printf("\n");
        }
    }
    if (c)
        printf("counters: refused epochs %" PRIu64 ", failed authentications %" PRIu64
               ", f16 clamps %" PRIu64 ", bad packets %" PRIu64 ", steps %" PRIu64 "\n",
               c->refused_epoch, c->auth_failed, c->f16_clamps, c->bad_packets, c->steps);
    if (c)
        printf("refused: control requests %" PRIu64 ", STEP frames %" PRIu64
               ", forged results %" PRIu64 "\n",
               c->refused_control, c->refused_step, c->forged_results);
    if (c)
        printf("unauthenticated connections closed: over a cap %" PRIu64 ", for a newer one %" PRIu64
               ", at the deadline %" PRIu64 "\n",
               c->conn_refused, c->conn_evicted, c->conn_expired);
    const Strata__SecurityCounters *z = s->security;
    if (z)
        printf("refused (you are %s; %s): by role %" PRIu64 ", member spoofs %" PRIu64
               ", joins %" PRIu64 ", stale reports %" PRIu64 ", foreign requests %" PRIu64
               ", over quota %" PRIu64 ", connections closed %" PRIu64 ", slots kept for "
               "members %" PRIu64 ", unbound %" PRIu64 "\n",
               z->role ? z->role : "?",
               z->scope && strcmp(z->scope, "credential") == 0 ? "your key's own counts"
                                                               : "every sender's",
               z->role_refused, z->member_spoofed, z->joins_refused, z->stale_refused,
               z->foreign_refused, z->quota_refused, z->pipes_closed, z->slots_refused,
               z->unbound_refused);
}

cJSON *cli_status_json(const Strata__StatusReply *s)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", s->model ? s->model : "");
    cli_json_u64(j, "incarnation", s->incarnation);
    cli_json_u64(j, "epoch", s->epoch);
    cJSON_AddNumberToObject(j, "sessions", s->sessions);
    cJSON_AddNumberToObject(j, "requests", s->requests);
    cJSON_AddBoolToObject(j, "keyed", s->keyed);
    cJSON_AddBoolToObject(j, "encrypted", s->encrypted);
    cJSON_AddStringToObject(j, "version", s->version ? s->version : "");
    cJSON_AddNumberToObject(j, "protocol", s->protocol);
    cJSON_AddNumberToObject(j, "protocol_oldest", s->protocol_oldest);
    cJSON_AddStringToObject(j, "i8_gate", s->i8_gate ? s->i8_gate : "");
    cJSON_AddItemToObject(j, "counters", sp_counters_json(s->counters));
    cJSON_AddItemToObject(j, "security", sp_security_json(s->security));
    if (s->sched)
        cJSON_AddItemToObject(j, "sched", sp_sched_json(s->sched));
    cJSON *ws = cJSON_AddArrayToObject(j, "workers");
    for (size_t i = 0; i < s->n_workers; i++)
        cJSON_AddItemToArray(ws, sp_worker_json(s->workers[i]));
    cJSON_AddBoolToObject(j, "serving", st_client_serving(s));
    cJSON_AddItemToObject(j, "links", sp_links_json(s));
    cJSON *ex = cli_experts_json(s);
    if (ex != NULL)
        cJSON_AddItemToObject(j, "experts", ex);
    if (s->plan)
        cJSON_AddItemToObject(j, "plan", cli_plan_json(s->plan));
    else
        cJSON_AddNullToObject(j, "plan");
    return j;
}
