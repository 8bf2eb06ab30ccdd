/* conn.c — the server's connection guard: what keeps slow clients from holding every connection.
 * libmicrohttpd gives each connection a thread and restarts its idle timeout on every byte, so a
 * client that trickles a header byte now and then would hold its thread forever. The guard
 * tracks every connection (notified by the daemon when it starts and closes) with the time its
 * current request began to arrive, and shuts a connection down (the daemon then sees the end of
 * the stream and closes it):
 * - when its request (request line, headers, body) is not complete within --read-timeout of its
 *   start, however steadily bytes arrive; an idle keep-alive connection counts as a request
 *   that has begun;
 * - when the pool is nearly full (--max-connections less an eighth kept free): the oldest
 *   connection still reading a request, so that a new request, /health among them, always finds
 *   room.
 * Connections whose request is complete (being answered, e.g. a generation) are never cut here.
 * The per-address cap is the daemon's (MHD_OPTION_PER_IP_CONNECTION_LIMIT). */
#include <microhttpd.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "server/server_internal.h"

typedef struct srv_conn {
    struct srv_conn *prev, *next;
    int fd;
    double t_read; /* when the current request began to arrive (monotonic seconds) */
    int reading;   /* 1 until the current request has fully arrived */
    int cut;       /* shut down by the guard */
    int linked;    /* in the guard's list */
} srv_conn;

struct srv_conns {
    pthread_mutex_t mu;
    pthread_cond_t wake;
    srv_conn *head, *tail; /* oldest first */
    int n, n_cut;
    int keep;              /* connections not cut while the pool is nearly full */
    double deadline;       /* seconds */
    int stop;
    pthread_t th;
};

static double mono_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void conn_cut(srv_conns *g, srv_conn *k) {
    shutdown(k->fd, SHUT_RDWR);
    k->cut = 1;
    g->n_cut++;
}

/* the pool nearly full: cut the oldest connections still reading (never the one just started) */
static void make_room(srv_conns *g, const srv_conn *newest) {
    for (srv_conn *k = g->head; k && k != newest && g->n - g->n_cut > g->keep; k = k->next)
        if (k->reading && !k->cut) conn_cut(g, k);
}

void sp_srv_conn_started(srv *s, struct MHD_Connection *c, void **socket_context) {
    srv_conns *g = s->conns;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    srv_conn *k = calloc(1, sizeof *k);
    *socket_context = k;
    if (!k || !ci) return; /* untracked: the daemon's own timeout still applies */
    k->fd = ci->connect_fd;
    k->t_read = mono_s();
    k->reading = 1;
    k->linked = 1;
    pthread_mutex_lock(&g->mu);
    k->prev = g->tail;
    if (g->tail) g->tail->next = k;
    else g->head = k;
    g->tail = k;
    g->n++;
    make_room(g, k);
    pthread_mutex_unlock(&g->mu);
}

void sp_srv_conn_closed(srv *s, void **socket_context) {
    srv_conns *g = s->conns;
    srv_conn *k = *socket_context;
    *socket_context = NULL;
    if (!k) return;
    if (k->linked) { /* tracked: unlink before the daemon closes (and may reuse) the descriptor */
        pthread_mutex_lock(&g->mu);
        if (k->prev) k->prev->next = k->next;
        else if (g->head == k) g->head = k->next;
        if (k->next) k->next->prev = k->prev;
        else if (g->tail == k) g->tail = k->prev;
        g->n--;
        g->n_cut -= k->cut;
        pthread_mutex_unlock(&g->mu);
    }
    free(k);
}

void sp_srv_conn_reading(srv *s, struct MHD_Connection *c, int reading) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    srv_conn *k = ci ? ci->socket_context : NULL;
    if (!k || !s->conns) return;
    pthread_mutex_lock(&s->conns->mu);
    if (reading && !k->reading) k->t_read = mono_s();
    k->reading = reading;
    pthread_mutex_unlock(&s->conns->mu);
}

/* the guard's thread: every 100 ms, cut the connections past their read deadline */
static void *guard_main(void *arg) {
    srv_conns *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        double now = mono_s();
        for (srv_conn *k = g->head; k; k = k->next)
            if (k->reading && !k->cut && now - k->t_read > g->deadline) conn_cut(g, k);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&g->wake, &g->mu, &until);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int sp_srv_conns_start(srv *s, sp_err *err) {
    srv_conns *g = calloc(1, sizeof *g);
    if (!g) return sp_err_set(err, "server: out of memory");
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->wake, NULL);
    g->deadline = s->o.read_timeout_s;
    g->keep = s->o.max_connections - (s->o.max_connections + 7) / 8;
    if (g->keep < 1) g->keep = 1;
    if (pthread_create(&g->th, NULL, guard_main, g)) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->wake);
        free(g);
        return sp_err_set(err, "server: cannot start the connection guard thread");
    }
    s->conns = g;
    return 0;
}

void sp_srv_conns_stop(srv *s) {
    srv_conns *g = s->conns;
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_signal(&g->wake);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->th, NULL);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->wake);
    free(g);
    s->conns = NULL;
}
