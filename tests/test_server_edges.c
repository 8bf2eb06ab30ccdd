/* test_server_edges.c — HTTP edges of `specula serve` (this build's binary): conflicting
 * Content-Length headers, a NUL inside Authorization, HEAD /health, unknown paths behind the
 * key, max_tokens beside a null max_completion_tokens, and what queued, running and streaming
 * requests get when the server stops (503 and an SSE error event, never a 200 "cancelled").
 * The server runs plain (--spec none) on the embedded default target. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server_harness.h"

#define KEY "edge-key"
#define MAXOUT (1 << 20)
static char BIN[512];
static test_server SRV;

/* a raw request to port; the HTTP status, reply in out */
static int raw(int port, const char *req, size_t n, char *out, size_t cap) {
    int k = raw_http(port, req, n, out, cap, 10000);
    return k > 0 ? raw_status(out) : -1;
}

static int raw_str(int port, const char *req, char *out, size_t cap) { return raw(port, req, strlen(req), out, cap); }

/* Two Content-Length headers that disagree: 400 (RFC 9112), not the first one's body */
static void test_conflicting_length(void) {
    char out[4096];
    const char *body = "{\"prompt\":\"a\",\"max_tokens\":1}";
    char req[1024];
    snprintf(req, sizeof req,
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY "\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\nContent-Length: 5\r\nConnection: close\r\n\r\n%s",
             strlen(body), body);
    int st = raw_str(SRV.port, req, out, sizeof out);
    CHECK(st == 400 && strstr(out, "Content-Length"), "conflicting Content-Length: %d %.300s", st, out);
    snprintf(req, sizeof req,
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY "\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
             strlen(body), strlen(body), body);
    st = raw_str(SRV.port, req, out, sizeof out);
    CHECK(st == 200, "equal repeated Content-Length: %d %.300s", st, out);
}

/* the key followed by a NUL and more bytes is not the key */
static void test_auth_nul(void) {
    char out[4096];
    static const char req[] = "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY "\0junk\r\n"
                              "Connection: close\r\n\r\n";
    int st = raw(SRV.port, req, sizeof req - 1, out, sizeof out);
    CHECK(st == 401 || st == 400, "NUL inside Authorization: %d %.300s", st, out);
    st = raw_str(SRV.port, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY "\r\nConnection: close\r\n\r\n",
                 out, sizeof out);
    CHECK(st == 200, "the plain key: %d %.300s", st, out);
    st = raw_str(SRV.port, "GET /v1/models HTTP/1.1\nAuthorization: Bearer " KEY "\nHost: x\nConnection: close\n\n", out,
                 sizeof out);
    CHECK(st == 200, "the key on a bare-LF line before another header: %d %.300s", st, out);
}

/* HEAD /health answers as GET does (without a body); other methods get 405 with Allow */
static void test_head_health(void) {
    char out[4096];
    int st = raw_str(SRV.port, "HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", out, sizeof out);
    CHECK(st == 200, "HEAD /health: %d %.300s", st, out);
    st = raw_str(SRV.port, "DELETE /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", out, sizeof out);
    CHECK(st == 405 && strstr(out, "GET, HEAD"), "DELETE /health: %d %.300s", st, out);
}

/* which paths exist is not told without the key */
static void test_unknown_path_auth(void) {
    char out[4096];
    int st = raw_str(SRV.port, "GET /v1/nosuch HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", out, sizeof out);
    CHECK(st == 401, "unknown path without the key: %d %.300s", st, out);
    st = raw_str(SRV.port, "GET /v1/nosuch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY "\r\nConnection: close\r\n\r\n",
                 out, sizeof out);
    CHECK(st == 404, "unknown path with the key: %d %.300s", st, out);
    st = raw_str(SRV.port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", out, sizeof out);
    CHECK(st == 200, "/health needs no key: %d", st);
}

static int post(int port, const char *path, const char *body, char *out, size_t cap) {
    char req[4096];
    snprintf(req, sizeof req,
             "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY "\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", path, strlen(body), body);
    return raw_str(port, req, out, cap);
}

/* a null max_completion_tokens hides no error in max_tokens, and the other way round */
static void test_max_tokens_null(void) {
    char out[4096];
    int st = post(SRV.port, "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":-5,\"max_completion_tokens\":null}",
                  out, sizeof out);
    CHECK(st == 400 && strstr(out, "max_tokens"), "max_tokens -5 beside a null max_completion_tokens: %d %.300s", st, out);
    st = post(SRV.port, "/v1/chat/completions",
              "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":null,\"max_completion_tokens\":0}",
              out, sizeof out);
    CHECK(st == 400 && strstr(out, "max_completion_tokens"), "max_completion_tokens 0: %d %.300s", st, out);
    st = post(SRV.port, "/v1/chat/completions",
              "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3,\"max_completion_tokens\":null}",
              out, sizeof out);
    CHECK(st == 200, "max_tokens 3 beside a null max_completion_tokens: %d %.300s", st, out);
}

/* curl in the background for a POST; the reply (headers with -i) comes back from finish */
typedef struct {
    FILE *f;
    char body[96];
} pending;

static int start(pending *p, int port, int stream) {
    static int n;
    snprintf(p->body, sizeof p->body, "/tmp/specula-edges-body-%d-%d.json", (int)getpid(), n++);
    FILE *f = fopen(p->body, "w");
    if (!f) return -1;
    fprintf(f, "{\"prompt\":\"import os\",\"max_tokens\":2000,\"ignore_eos\":true,\"temperature\":0%s}",
            stream ? ",\"stream\":true" : "");
    fclose(f);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "curl -s -N -i -H 'Authorization: Bearer " KEY "' -H 'Content-Type: application/json' --data-binary @%s "
             "http://127.0.0.1:%d/v1/completions",
             p->body, port);
    p->f = popen(cmd, "r");
    return p->f ? 0 : -1;
}

static void finish(pending *p, char *out, size_t cap) {
    size_t n = p->f ? fread(out, 1, cap - 1, p->f) : 0;
    out[n] = 0;
    if (p->f) pclose(p->f);
    unlink(p->body);
}

static double metric(int port, const char *name) {
    char out[1 << 16], key[128];
    int st = raw_str(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY "\r\nConnection: close\r\n\r\n",
                     out, sizeof out);
    if (st != 200) return -1;
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(out, key);
    return p ? atof(p + strlen(key)) : -1;
}

/* SIGTERM with two requests running (one streaming) and one queued: 503 for the queued and the
 * running one, an error event ending the stream, and no "cancelled" finish anywhere */
static void test_shutdown(void) {
    test_server s2;
    char args[256];
    snprintf(args, sizeof args, "-np 2 --max-queue 4 -c 2048 -t 2 --spec none --api-key %s", KEY);
    CHECK(server_start(&s2, BIN, args) == 0, "second server did not start (log %s)", s2.log);
    if (!s2.port) return;
    pending run, str, queued;
    start(&run, s2.port, 0);
    start(&str, s2.port, 1);
    double active = 0, waiting = 0;
    for (int i = 0; i < 400 && active < 2; i++) {
        usleep(50000);
        active = metric(s2.port, "specula_requests_active");
    }
    start(&queued, s2.port, 0);
    for (int i = 0; i < 400 && waiting < 1; i++) {
        usleep(50000);
        waiting = metric(s2.port, "specula_requests_queued");
    }
    CHECK(active >= 2 && waiting >= 1, "%g active, %g queued before the stop", active, waiting);
    int rc = server_stop(&s2);
    CHECK(rc == 0, "SIGTERM: exit status %d (log %s)", rc, s2.log);
    char *out = malloc(MAXOUT);
    finish(&run, out, MAXOUT);
    CHECK(raw_status(out) == 503 && strstr(out, "\"error\"") && !strstr(out, "cancelled"),
          "running request at shutdown: %.300s", out);
    finish(&queued, out, MAXOUT);
    CHECK(raw_status(out) == 503 && strstr(out, "\"error\"") && !strstr(out, "cancelled"),
          "queued request at shutdown: %.300s", out);
    finish(&str, out, MAXOUT);
    char *ev = strstr(out, "data: {\"error\"");
    CHECK(raw_status(out) == 200 && ev && !strstr(out, "cancelled") && !strstr(out, "[DONE]"),
          "stream cut at shutdown: %.300s ... %.300s", out, ev ? ev : out + (strlen(out) > 300 ? strlen(out) - 300 : 0));
    free(out);
    unlink(s2.log);
}

int main(int argc, char **argv) {
    (void)argc;
    server_bin(BIN, sizeof BIN, argv[0]);
    char args[256];
    snprintf(args, sizeof args, "-np 2 -c 512 -t 2 --spec none --api-key %s", KEY);
    if (server_start(&SRV, BIN, args)) {
        printf("FAIL server_start (log %s)\n", SRV.log);
        return 1;
    }
    RUN(test_conflicting_length);
    RUN(test_auth_nul);
    RUN(test_head_health);
    RUN(test_unknown_path_auth);
    RUN(test_max_tokens_null);
    if (server_stop(&SRV) != 0) printf("  the server's exit status was not 0 (log %s)\n", SRV.log);
    else unlink(SRV.log);
    RUN(test_shutdown);
    return harness_done("test_server_edges");
}
