/* test_server_slow.c — slow clients cannot deny service (`specula serve`): hundreds of
 * connections that send a request line and a header and then trickle a byte now and then, from
 * several client addresses (127.0.0.2..; Linux routes all of 127/8 to the loopback), while
 * /health is asked from 127.0.0.1:
 * - /health answers in under a second (3 s for 150 connections under ASan) although the slow
 *   connections outnumber the connection pool (--max-connections): the oldest unfinished
 *   requests make room for new ones;
 * - every slow connection is closed at the read deadline (--read-timeout) although it keeps
 *   sending, i.e. the deadline does not restart on activity;
 * - one client address gets at most --max-conn-per-ip connections; the rest are closed at once.
 * SPECULA_SLOW_N (default 300) sets the number of slow connections; with SPECULA_SLOW_BIN and
 * SPECULA_SLOW_ARGS it measures only the time to /health against another binary and options. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/time.h>

#include "server_harness.h"

static char BIN[1024];
static test_server SRV;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* a connection to 127.0.0.1:port from the address 127.0.0.<host>; -1 when it fails */
static int connect_from(int port, int host) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in src = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000000u | (unsigned)host)};
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(fd, (struct sockaddr *)&src, sizeof src) || connect(fd, (struct sockaddr *)&dst, sizeof dst)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* n slow connections spread over n_hosts addresses from 127.0.0.2, each with an unfinished request */
static int open_slow(int *fds, int n, int n_hosts) {
    static const char head[] = "GET /health HTTP/1.1\r\nHost: x\r\n";
    int opened = 0;
    for (int i = 0; i < n; i++) {
        fds[i] = connect_from(SRV.port, 2 + i % n_hosts);
        if (fds[i] >= 0 && send(fds[i], head, sizeof head - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof head - 1)) opened++;
        if (fds[i] >= 0) fcntl(fds[i], F_SETFL, O_NONBLOCK);
    }
    return opened;
}

/* 1 when the server has closed fd (end of file or a reset), 0 while it is open */
static int server_closed(int fd) {
    char b[256];
    ssize_t r = recv(fd, b, sizeof b, MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* milliseconds until GET /health from 127.0.0.1 answers 200; -1 when it does not in timeout_ms */
static double health_ms(int timeout_ms) {
    static const char req[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    char reply[1024];
    double t0 = now_ms();
    int n = raw_http(SRV.port, req, sizeof req - 1, reply, sizeof reply, timeout_ms);
    double t = now_ms() - t0;
    return n > 0 && raw_status(reply) == 200 ? t : -1;
}

static void close_all(int *fds, int n) {
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0) close(fds[i]);
}

static int N_SLOW = 300;
static double LIMIT_MS = 1000; /* under ASan each connection thread starts slowly: 150 and 3 s there */

/* /health while N_SLOW slow connections are held, then the read deadline closes them all */
static void test_slow_clients(void) {
    int *fds = calloc((size_t)N_SLOW, sizeof *fds);
    int opened = open_slow(fds, N_SLOW, 10);
    CHECK(opened >= N_SLOW * 9 / 10, "only %d of %d slow connections opened", opened, N_SLOW);
    usleep(200 * 1000);
    double t = health_ms(5000);
    printf("  /health under %d slow connections: %.1f ms\n", N_SLOW, t);
    CHECK(t >= 0 && t < LIMIT_MS, "/health took %.1f ms (-1: no answer) under %d slow connections", t, N_SLOW);
    /* they keep trickling a header byte every 250 ms; the 2 s deadline still closes them */
    double t0 = now_ms();
    int open_left = N_SLOW;
    while (now_ms() - t0 < 4000 && open_left > 0) {
        open_left = 0;
        for (int i = 0; i < N_SLOW; i++) {
            if (fds[i] < 0) continue;
            if (server_closed(fds[i])) {
                close(fds[i]);
                fds[i] = -1;
                continue;
            }
            open_left++;
            send(fds[i], "X", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        usleep(250 * 1000);
    }
    printf("  all slow connections closed after %.1f s (%d left)\n", (now_ms() - t0) / 1e3, open_left);
    CHECK(open_left == 0, "%d slow connections still open after the read deadline", open_left);
    close_all(fds, N_SLOW);
    free(fds);
    CHECK(health_ms(2000) >= 0, "/health after the slow clients");
}

/* one address gets at most --max-conn-per-ip (32) connections */
static void test_per_address_cap(void) {
    enum { N = 48 };
    int fds[N], opened = 0, closed = 0;
    for (int i = 0; i < N; i++) {
        fds[i] = connect_from(SRV.port, 250);
        opened += fds[i] >= 0;
    }
    usleep(300 * 1000);
    for (int i = 0; i < N; i++) closed += fds[i] >= 0 && server_closed(fds[i]);
    printf("  %d connections from one address: %d closed at once\n", opened, closed);
    CHECK(closed >= N - 32 && closed <= N - 32 + 2, "%d of %d connections from one address closed (cap 32)", closed,
          opened);
    close_all(fds, N);
    CHECK(health_ms(2000) >= 0, "/health beside a capped address");
}

int main(int argc, char **argv) {
    (void)argc;
    server_bin(BIN, sizeof BIN, argv[0]);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max; /* the slow connections, here and in the server */
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (strstr(BIN, "asan")) N_SLOW = 150, LIMIT_MS = 3000;
    if (getenv("SPECULA_SLOW_N")) N_SLOW = atoi(getenv("SPECULA_SLOW_N"));
    if (N_SLOW < 1 || N_SLOW > 4000) N_SLOW = 300;
    const char *measure_bin = getenv("SPECULA_SLOW_BIN");
    if (measure_bin) { /* measure only: the time to /health under N_SLOW slow connections */
        if (server_start(&SRV, measure_bin, getenv("SPECULA_SLOW_ARGS") ? getenv("SPECULA_SLOW_ARGS") : "")) return 1;
        int *fds = calloc((size_t)N_SLOW, sizeof *fds);
        int opened = open_slow(fds, N_SLOW, 10);
        usleep(200 * 1000);
        printf("%d slow connections opened; /health: %.1f ms (-1: no answer in 10 s)\n", opened, health_ms(10000));
        close_all(fds, N_SLOW);
        free(fds);
        server_stop(&SRV);
        return 0;
    }
    if (server_start(&SRV, BIN, "-c 256 -t 1 --read-timeout 2 --max-connections 256 --max-conn-per-ip 32")) {
        printf("FAIL server_start (log %s)\n", SRV.log);
        return 1;
    }
    RUN(test_slow_clients);
    RUN(test_per_address_cap);
    int st = server_stop(&SRV);
    CHECK(st == 0, "server exit status %d (log %s)", st, SRV.log);
    if (st == 0) unlink(SRV.log);
    return harness_done("test_server_slow");
}
