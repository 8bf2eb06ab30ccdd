/* test_server_request.c — the server's socket-free pieces:
 * - sp_srv_request_parse: valid bodies give the right fields; 30000 random mutations (byte flips,
 *   truncations, insertions of JSON fragments, deletions) of valid bodies never crash and always give either a
 *   request or a 4xx error with a message (run under ASan too);
 * - the stop-string filter: random texts fed in random pieces give exactly the text before the
 *   first stop string, and what has been released at any moment is a prefix of that (a partial
 *   match never leaks). */
#include <string.h>

#include "harness.h"
#include "server/request.h"
#include "decode/stopstr.h"
#include "server/text.h"

static unsigned long long rng(unsigned long long *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static void test_parse_valid(void) {
    srv_request r;
    srv_error e;
    const char *chat = "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},{\"role\":\"user\","
                       "\"content\":[{\"type\":\"text\",\"text\":\"hi \"},{\"type\":\"text\",\"text\":\"there\"}]}],"
                       "\"max_completion_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,\"min_p\":0.1,\"seed\":-3,"
                       "\"stop\":\"END\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"logprobs\":true,"
                       "\"top_logprobs\":2,\"n\":1,\"frequency_penalty\":0,\"response_format\":{\"type\":\"text\"}}";
    CHECK(sp_srv_request_parse(SRV_ROUTE_CHAT, chat, strlen(chat), &r, &e) == 0, "chat: %s", e.message);
    CHECK(r.n_msgs == 2 && !strcmp(r.msgs[0].role, "system") && !strcmp(r.msgs[1].content, "hi there"), "messages");
    CHECK(r.max_tokens == 7 && r.sample.temperature == 0.5f && r.sample.top_k == 40 && r.sample.seed == (uint64_t)-3 &&
              r.n_stop == 1 && !strcmp(r.stop[0], "END") && r.stream && r.include_usage && r.top_logprobs == 2 &&
              r.speculative == 1 && !strcmp(r.model, "m"),
          "fields");
    sp_srv_request_free(&r);
    const char *cmpl = "{\"prompt\":[2,5,9],\"max_tokens\":3,\"echo\":true,\"logprobs\":1,\"stop\":[\"a\",\"bc\"],\"speculative\":false}";
    CHECK(sp_srv_request_parse(SRV_ROUTE_COMPLETION, cmpl, strlen(cmpl), &r, &e) == 0, "completion: %s", e.message);
    CHECK(r.n_prompt_ids == 3 && r.prompt_ids[2] == 9 && r.echo && r.top_logprobs == 1 && r.n_stop == 2 &&
              r.speculative == 0 && r.sample.temperature == 1.0f,
          "completion fields");
    sp_srv_request_free(&r);
    const char *bad[] = {"{\"prompt\":\"x\",\"max_tokens\":0}", "{\"prompt\":\"x\",\"n\":3}", "{\"prompt\":\"x\",\"suffix\":\"y\"}",
                         "{\"prompt\":\"x\",\"presence_penalty\":3}", "{\"prompt\":\"x\",\"top_p\":1.5}", "{\"prompt\":\"x\"}x"};
    for (int i = 0; i < 6; i++)
        CHECK(sp_srv_request_parse(SRV_ROUTE_COMPLETION, bad[i], strlen(bad[i]), &r, &e) == -1 && e.status == 400 && e.message[0],
              "bad %d accepted", i);
}

static void test_parse_fuzz(void) {
    const char *seeds[] = {
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}],\"max_tokens\":5,\"stop\":[\"a\"],\"stream\":true}",
        "{\"prompt\":[1,2,3],\"temperature\":0.7,\"seed\":4,\"logprobs\":2,\"echo\":false}",
        "{\"prompt\":\"text\",\"stream_options\":{\"include_usage\":false},\"top_k\":3}",
    };
    const char *junk[] = {"null", "[]", "{}", "\"s\"", "1e999", "-1", "true", "[[[[", "\\u0000", "\xff\xfe", "{\"a\":"};
    unsigned long long s = 42;
    int ok = 0, err = 0, bad = 0;
    char buf[1024];
    for (int it = 0; it < 30000; it++) {
        int k = (int)(rng(&s) % 3);
        size_t n = strlen(seeds[k]);
        memcpy(buf, seeds[k], n);
        for (int m = 0, nm = (int)(rng(&s) % 4); m < nm && n > 0; m++) {
            size_t at = rng(&s) % n;
            switch (rng(&s) % 4) {
            case 0: buf[at] = (char)(rng(&s) & 0xff); break;               /* flip a byte */
            case 1: n = at; break;                                         /* truncate */
            case 2: {                                                      /* insert junk */
                const char *j = junk[rng(&s) % 11];
                size_t l = strlen(j);
                if (n + l < sizeof buf) memmove(buf + at + l, buf + at, n - at), memcpy(buf + at, j, l), n += l;
                break;
            }
            default: memmove(buf + at, buf + at + 1, n - at - 1), n--; /* delete */
            }
        }
        srv_request r;
        srv_error e = {0};
        srv_route route = rng(&s) % 5 ? (k == 0 ? SRV_ROUTE_CHAT : SRV_ROUTE_COMPLETION) : (srv_route)(rng(&s) % 4);
        if (sp_srv_request_parse(route, buf, n, &r, &e) == 0) {
            ok++;
            sp_srv_request_free(&r);
        } else {
            err++;
            bad += !(e.status >= 400 && e.status < 500 && e.message[0] && e.type[0]);
        }
    }
    fprintf(stderr, "  fuzz: %d parsed, %d rejected\n", ok, err);
    CHECK(bad == 0 && ok > 1000 && err > 10000, "%d parsed, %d errors, %d errors without a 4xx status or message", ok, err, bad);
}

static void test_stop_strings(void) {
    unsigned long long s = 7;
    int wrong = 0, leaks = 0, matched = 0;
    for (int it = 0; it < 3000; it++) {
        char text[256], stops[3][8], *sp[3];
        int n = 20 + (int)(rng(&s) % 200), ns = 1 + (int)(rng(&s) % 3);
        for (int i = 0; i < n; i++) text[i] = "abc "[rng(&s) % 4]; /* small alphabet: many partial matches */
        text[n] = 0;
        for (int k = 0; k < ns; k++) {
            int l = 2 + (int)(rng(&s) % 5);
            for (int i = 0; i < l; i++) stops[k][i] = "abc "[rng(&s) % 4];
            stops[k][l] = 0;
            sp[k] = stops[k];
        }
        /* reference: the text before the earliest occurrence of any stop string */
        size_t cut = (size_t)n;
        for (int k = 0; k < ns; k++) {
            char *f = strstr(text, stops[k]);
            if (f && (size_t)(f - text) < cut) cut = (size_t)(f - text);
        }
        sp_err err = {{0}};
        sp_stopstr *st = sp_stopstr_create((const char *const *)sp, ns, &err);
        srv_buf out = {0};
        int stopped = 0;
        const char *rel;
        size_t k;
        for (int at = 0; st && at < n && !stopped;) {
            int piece = 1 + (int)(rng(&s) % 6);
            if (at + piece > n) piece = n - at;
            stopped = sp_stopstr_feed(st, text + at, (size_t)piece, &rel, &k, &err) == 1;
            sp_srv_buf_add(&out, rel, k);
            at += piece;
            leaks += out.n > cut || (out.n && memcmp(out.p, text, out.n)); /* released beyond the cut */
        }
        if (st && !stopped) sp_stopstr_flush(st, &rel, &k), sp_srv_buf_add(&out, rel, k);
        matched += stopped;
        wrong += !st || out.n != cut || (cut && memcmp(out.p, text, cut)) || stopped != (cut < (size_t)n);
        sp_srv_buf_free(&out);
        sp_stopstr_free(st);
    }
    CHECK(wrong == 0 && leaks == 0 && matched > 500, "%d wrong outputs, %d leaks, %d matched", wrong, leaks, matched);
}

int main(void) {
    RUN(test_parse_valid);
    RUN(test_parse_fuzz);
    RUN(test_stop_strings);
    return harness_done("test_server_request");
}
