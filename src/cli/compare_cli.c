/* compare_cli.c — plain vs speculative runs of one prompt and their sums (compare_cli.h). */
#include "compare_cli.h"

#include <string.h>

int cli_compare_prompt(sp_session *s, const sp_session_req *r, const int32_t *ids, int n, int plain_only,
                       sp_session_out *o0, sp_session_out *o1, sp_err *err) {
    memset(o1, 0, sizeof *o1);
    sp_session_req plain = *r, spec = *r;
    plain.plain = 1;
    plain.profile = 1;
    spec.profile = 1;
    if (!plain_only) plain.on_text = NULL, plain.gen.on_token = NULL; /* the speculative run streams */
    if (sp_session_generate(s, ids, n, &plain, o0, err)) return -1;
    if (plain_only) {
        *o1 = *o0;
        o1->tokens = NULL, o1->text = NULL;
        return 0;
    }
    return sp_session_generate(s, ids, n, &spec, o1, err);
}

int cli_compare_add(cli_compare_sums *c, const sp_session_out *o0, const sp_session_out *o1, int G) {
    const sp_spec_stats *s0 = &o0->spec, *s1 = &o1->spec;
    int same = !o1->tokens || (s0->emitted == s1->emitted &&
                               !memcmp(o0->tokens, o1->tokens, sizeof(int32_t) * (size_t)s0->emitted));
    c->mismatches += !same;
    double sp = s1->decode_ms > 0 ? s0->decode_ms / s1->decode_ms : 0;
    if (c->n_prompts == 0 || sp < c->speedup_min) c->speedup_min = sp;
    if (c->n_prompts == 0 || sp > c->speedup_max) c->speedup_max = sp;
    c->n_prompts++;
    c->plain_ms += s0->decode_ms;
    c->spec_ms += s1->decode_ms;
    c->draft_ms += s1->draft_ms;
    c->verify_ms += s1->verify_ms;
    c->tok_plain += s0->emitted;
    c->tok_spec += s1->emitted;
    c->calls += s1->target_calls;
    c->drafted += s1->drafted;
    c->accepted += s1->accepted;
    cli_round_sums_add(&c->spec, s1);
    cli_round_sums_add(&c->plain, s0);
    for (int k = 0; k < G && k < SP_SPEC_MAX_G; k++)
        c->pos_drafted[k] += s1->pos_drafted[k], c->pos_accepted[k] += s1->pos_accepted[k];
    return same;
}

double cli_compare_speedup(const cli_compare_sums *c) { return c->spec_ms > 0 ? c->plain_ms / c->spec_ms : 0; }
double cli_compare_tau(const cli_compare_sums *c) { return c->calls ? (double)c->tok_spec / c->calls : 0; }
double cli_compare_accept(const cli_compare_sums *c, int k) {
    return c->pos_drafted[k] ? (double)c->pos_accepted[k] / c->pos_drafted[k] : 0;
}
