/* server_harness.h — what the server tests share: start `specula serve --port 0` from the build
 * the test belongs to (build/ or build-asan/), learn its port from its log, talk to it with
 * curl or with a raw socket, and stop it with SIGTERM (returning its exit status). */
#ifndef SPECULA_SERVER_HARNESS_H
#define SPECULA_SERVER_HARNESS_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

typedef struct {
    pid_t pid;
    int port;
    char log[128]; /* the server's stderr */
} test_server;

/* the `specula` binary beside the test's build directory: BUILD/tests/test_x -> BUILD/specula */
static inline void server_bin(char *out, size_t cap, const char *argv0) { harness_cli_path(out, cap, argv0); }

/* Start `BIN serve --port 0 ARGS`; wait (up to 60 s) for its "ready" line. Returns 0 or -1. */
static inline int server_start(test_server *s, const char *bin, const char *args) {
    static int n;
    snprintf(s->log, sizeof s->log, "/tmp/specula-serve-%d-%d.log", (int)getpid(), n++);
    s->port = 0;
    s->pid = fork();
    if (s->pid < 0) return -1;
    if (s->pid == 0) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "exec %s serve --port 0 %s >/dev/null 2>%s", bin, args, s->log);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 600; i++) {
        FILE *f = fopen(s->log, "r");
        char line[512];
        while (f && fgets(line, sizeof line, f)) {
            const char *p = strstr(line, "ready:");
            const char *q = p ? strstr(p, "port ") : NULL;
            if (q) s->port = atoi(q + 5);
        }
        if (f) fclose(f);
        if (s->port > 0) return 0;
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            s->pid = 0;
            return -1;
        }
        usleep(100000);
    }
    return -1;
}

/* SIGTERM, wait up to 30 s; returns the exit status (or -1: killed / did not stop) */
static inline int server_stop(test_server *s) {
    if (s->pid <= 0) return -1;
    kill(s->pid, SIGTERM);
    int st = 0;
    for (int i = 0; i < 300; i++) {
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            s->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        usleep(100000);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, &st, 0);
    s->pid = 0;
    return -1;
}

/* 1 when the server's log holds the text what */
static inline int server_log_has(const test_server *s, const char *what) {
    char cmd[512], out[64];
    snprintf(cmd, sizeof cmd, "grep -c '%s' %s", what, s->log);
    harness_run(cmd, out, sizeof out);
    return atoi(out) > 0;
}

/* resident memory of the server in KiB (VmRSS), or -1 */
static inline long server_rss_kb(const test_server *s) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)s->pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = atol(line + 6);
    if (f) fclose(f);
    return kb;
}

/* A raw HTTP exchange on 127.0.0.1:port: send req[0, n), read the reply (up to cap - 1 bytes)
 * until the server closes or timeout_ms passes. Returns the bytes read, -1 when no connection. */
static inline int raw_http(int port, const char *req, size_t n, char *out, size_t cap, int timeout_ms) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    size_t sent = 0;
    while (sent < n) {
        ssize_t k = send(fd, req + sent, n - sent, MSG_NOSIGNAL);
        if (k <= 0) break;
        sent += (size_t)k;
    }
    size_t got = 0;
    while (got + 1 < cap) {
        ssize_t k = recv(fd, out + got, cap - 1 - got, 0);
        if (k <= 0) break;
        got += (size_t)k;
    }
    out[got] = 0;
    close(fd);
    return (int)got;
}

/* the HTTP status of a raw reply ("HTTP/1.1 404 ..."), or 0 */
static inline int raw_status(const char *reply) {
    return !strncmp(reply, "HTTP/1.", 7) && strlen(reply) > 12 ? atoi(reply + 9) : 0;
}

#endif
