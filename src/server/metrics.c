/* metrics.c — the server's counters and histograms in the Prometheus text exposition format
 * (version 0.0.4): `# HELP` / `# TYPE` lines, then `name value` samples; histograms as cumulative
 * `_bucket{le="..."}` counts plus `_sum` and `_count`. */
#include <string.h>

#include "server/server_internal.h"

void sp_srv_hist_init(srv_hist *h, const double *le, int n) {
    memset(h, 0, sizeof *h);
    h->n = n < SRV_HIST_MAX ? n : SRV_HIST_MAX;
    memcpy(h->le, le, sizeof(double) * (size_t)h->n);
}

void sp_srv_hist_add(srv_hist *h, double v) {
    int b = 0;
    while (b < h->n && v > h->le[b]) b++;
    h->count[b]++;
    h->sum += v;
    h->total++;
}

static int metric(srv_buf *o, const char *name, const char *type, const char *help, double v) {
    return sp_srv_buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

static int hist(srv_buf *o, const char *name, const char *help, const srv_hist *h) {
    int rc = sp_srv_buf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    unsigned long cum = 0;
    for (int b = 0; b < h->n; b++) {
        cum += h->count[b];
        rc |= sp_srv_buf_printf(o, "%s_bucket{le=\"%g\"} %lu\n", name, h->le[b], cum);
    }
    rc |= sp_srv_buf_printf(o, "%s_bucket{le=\"+Inf\"} %lu\n%s_sum %.17g\n%s_count %lu\n", name, h->total, name, h->sum,
                         name, h->total);
    return rc;
}

int sp_srv_metrics_text(srv *s, srv_buf *o) {
    double rate = s->m_drafted ? (double)s->m_accepted / (double)s->m_drafted : 0;
    double kv = s->m_kv_cap ? (double)s->m_kv_used / (double)s->m_kv_cap : 0;
    int rc = 0;
    rc |= metric(o, "specula_requests_total", "counter", "Generation requests accepted into the queue.", (double)s->m_requests);
    rc |= metric(o, "specula_requests_success_total", "counter", "Generation requests finished (stop, length or cancelled).", (double)s->m_ok);
    rc |= metric(o, "specula_requests_error_total", "counter", "Generation requests that failed after being queued.", (double)s->m_errors);
    rc |= metric(o, "specula_requests_rejected_total", "counter", "Generation requests refused with 503 (queue full).", (double)s->m_rejected);
    rc |= metric(o, "specula_requests_active", "gauge", "Requests decoding in a slot.", s->n_active);
    rc |= metric(o, "specula_requests_queued", "gauge", "Requests waiting for a slot.", s->n_queued);
    rc |= metric(o, "specula_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", (double)s->m_prompt_tokens);
    rc |= metric(o, "specula_prompt_tokens_cached_total", "counter", "Prompt tokens reused from a slot's KV cache (not forwarded again).", (double)s->m_cached_tokens);
    rc |= metric(o, "specula_generated_tokens_total", "counter", "Tokens generated.", (double)s->m_gen_tokens);
    rc |= metric(o, "specula_draft_tokens_total", "counter", "Draft tokens verified by the target (finished requests).", (double)s->m_drafted);
    rc |= metric(o, "specula_draft_tokens_accepted_total", "counter", "Draft tokens accepted (finished requests).", (double)s->m_accepted);
    rc |= metric(o, "specula_draft_acceptance_rate", "gauge", "Accepted / drafted tokens over finished requests.", rate);
    rc |= metric(o, "specula_kv_cache_tokens", "gauge", "KV cache positions in use over all slots.", (double)s->m_kv_used);
    rc |= metric(o, "specula_kv_cache_usage_ratio", "gauge", "KV cache positions in use / capacity over all slots.", kv);
    static const char *const why[SLOT_NODRAFT_N] = {"not_paying", "no_room", "drafter_proposed_none"};
    rc |= sp_srv_buf_printf(o, "# HELP specula_rounds_without_drafts_total Decoding rounds of speculative requests that "
                            "verified no drafts, by reason (not_paying: the verify-length policy; no_room: the "
                            "request's or the context's last token; drafter_proposed_none).\n"
                            "# TYPE specula_rounds_without_drafts_total counter\n");
    for (int w = 0; w < SLOT_NODRAFT_N; w++)
        rc |= sp_srv_buf_printf(o, "specula_rounds_without_drafts_total{reason=\"%s\"} %lu\n", why[w], s->m_nodraft[w]);
    rc |= metric(o, "specula_drafters_built_total", "counter",
                 "Speculative requests whose drafter was built (a request's drafter is built when it is first "
                 "given drafts; finished requests).", (double)s->m_drafters_built);
    rc |= metric(o, "specula_idle_drafter_rounds_total", "counter",
                 "Rounds that asked for no drafts in which a request's drafter still ran (finished requests).",
                 (double)s->m_idle_drafter_rounds);
    rc |= hist(o, "specula_tau", "Tokens emitted per target verify forward, per request.", &s->h_tau);
    rc |= hist(o, "specula_time_to_first_token_seconds", "Time from request to its first token.", &s->h_ttft);
    rc |= hist(o, "specula_inter_token_latency_seconds", "Time between tokens of a request.", &s->h_itl);
    return rc ? -1 : 0;
}
