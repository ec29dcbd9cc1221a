/* Tests of the C client against a running consortd: test_client SOCKET
 * [TCP_ADDRESS TOKEN_FILE] (a daemon with --tcp, --key and --token).
 * Prints "ok N - what" or "not ok N - what" per check, then a summary. */
#define _POSIX_C_SOURCE 200809L
#include <consort.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int passed, failed;

#define CHECK(cond, what)                                                         \
    do {                                                                          \
        if (cond) {                                                               \
            passed++;                                                             \
            printf("ok %d - %s\n", passed + failed, what);                        \
        } else {                                                                  \
            failed++;                                                             \
            printf("not ok %d - %s (line %d)\n", passed + failed, what, __LINE__); \
        }                                                                         \
    } while (0)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

struct member {
    consort_client *c;
    uint32_t h;
    size_t view_size;
    char vid[128];
    int casts, sends, exited, sent, sent_in_view;
    char last_left_why[64];
    char order_ok;
    int next_from[2];
    int refused;
    uint32_t refused_req;
    int refused_code;
};

/* Takes the events of every member for up to `secs`, until cond holds. */
static int pump(struct member **ms, int n, double secs, int (*cond)(struct member **, int)) {
    double end = now() + secs;
    while (now() < end) {
        if (cond(ms, n)) return 1;
        for (int i = 0; i < n; i++) {
            consort_event *ev;
            while (consort_next_event(ms[i]->c, 10, &ev) == 1) {
                struct member *m = ms[i];
                switch (ev->type) {
                case CONSORT_VIEW:
                    m->view_size = ev->n_members;
                    snprintf(m->vid, sizeof m->vid, "%s", ev->vid);
                    if (ev->n_left > 0) snprintf(m->last_left_why, sizeof m->last_left_why, "%s", ev->why[0]);
                    break;
                case CONSORT_CAST: {
                    m->casts++;
                    /* "A12" / "B7": FIFO per origin. */
                    int who = ((const char *)ev->payload)[0] == 'A' ? 0 : 1;
                    int k = atoi((const char *)ev->payload + 1);
                    if (k != m->next_from[who] + 1) m->order_ok = 0;
                    m->next_from[who] = k;
                    break;
                }
                case CONSORT_SEND:
                    m->sends++;
                    break;
                case CONSORT_EXIT:
                    m->exited = 1;
                    break;
                case CONSORT_REFUSED:
                    m->refused++;
                    m->refused_req = ev->req;
                    m->refused_code = ev->code;
                    break;
                case CONSORT_SENT:
                    m->sent++;
                    if (strcmp(ev->view, m->vid) == 0) m->sent_in_view++;
                    break;
                default:
                    break;
                }
                consort_event_free(ev);
            }
        }
    }
    return cond(ms, n);
}

static int both_two(struct member **ms, int n) {
    (void)n;
    return ms[0]->view_size == 2 && ms[1]->view_size == 2 && strcmp(ms[0]->vid, ms[1]->vid) == 0;
}
static int all_casts(struct member **ms, int n) {
    (void)n;
    return ms[0]->casts == 40 && ms[1]->casts == 40 && ms[0]->sent == 20;
}
static int got_send(struct member **ms, int n) {
    (void)n;
    return ms[1]->sends == 1;
}
static int a_alone(struct member **ms, int n) {
    (void)n;
    return ms[0]->view_size == 1;
}
static int a_exited(struct member **ms, int n) {
    (void)n;
    return ms[0]->exited;
}
static int a_refused(struct member **ms, int n) {
    (void)n;
    return ms[0]->refused > 0;
}
static int many_casts(struct member **ms, int n) {
    (void)n;
    return ms[0]->casts == 1000 && ms[1]->casts == 1000;
}

static int first_got(struct member **ms, int n) {
    (void)n;
    return ms[0]->casts >= 1;
}
static int first_got_two(struct member **ms, int n) {
    (void)n;
    return ms[0]->casts >= 2;
}
static int both_got_33(struct member **ms, int n) {
    (void)n;
    return ms[0]->casts == 33 && ms[1]->casts == 33;
}
static int a_got_b501(struct member **ms, int n) {
    (void)n;
    return ms[0]->next_from[1] == 501;
}

/* A refusal: in version 1 the call's result, in version 2 a REFUSED event
 * naming the request. */
static int refusal(struct member *a, int version, int r, uint32_t req) {
    if (version < 2) return r;
    if (r != 0) return -100;
    struct member *ms[1] = {a};
    a->refused = 0;
    if (!pump(ms, 1, 5, a_refused)) return -101;
    return a->refused == 1 && a->refused_req == req ? a->refused_code : -102;
}

static void scenario(const char *sock, int version) {
    char what[128];
#define CHECKV(cond, text)                                      \
    do {                                                        \
        snprintf(what, sizeof what, "v%d: %s", version, text); \
        CHECK(cond, what);                                      \
    } while (0)
    int r;
    uint32_t req;
    struct member a = {.order_ok = 1}, b = {.order_ok = 1};
    CHECKV(consort_connect_version(sock, "a", version, &a.c) == 0, "connect a");
    CHECKV(consort_connect_version(sock, "b", version, &b.c) == 0, "connect b");
    CHECKV(consort_version(a.c) == version, "the version asked for is agreed");
    CHECKV(consort_max_frame(a.c) > 1000, "the daemon's frame limit is known");

    r = consort_join(a.c, "g", "Nonsense", NULL, NULL, 0, 0, &a.h);
    CHECKV(r == CONSORT_E_BAD_PROPS, "unknown properties: bad-props");
    CHECKV(strstr(consort_error(a.c), "bad-props") != NULL, "the error says so");
    const char *bad_peer[] = {"not-an-address"};
    r = consort_join(a.c, "g", "vsync", NULL, bad_peer, 1, 0, &a.h);
    CHECKV(r == CONSORT_E_BAD_ADDRESS, "a bad peer: bad-address");

    CHECKV(consort_join(a.c, "g", "vsync", NULL, NULL, 0, CONSORT_REPORT, &a.h) == 0, "a joins");
    CHECKV(consort_join(b.c, "g", "", "", NULL, 0, 0, &b.h) == 0, "b joins");
    CHECKV(consort_member_id(a.c, a.h) && strchr(consort_member_id(a.c, a.h), '#'), "a has an id");
    CHECKV(consort_max_message(a.c, a.h) > 0, "and a largest message");
    struct member *ms[2] = {&a, &b};
    CHECKV(pump(ms, 2, 20, both_two), "a view of two");

    char msg[32];
    int refused = 0;
    for (int i = 1; i <= 20; i++) {
        snprintf(msg, sizeof msg, "A%d", i);
        refused += consort_cast(a.c, a.h, msg, strlen(msg), NULL) != 0;
        snprintf(msg, sizeof msg, "B%d", i);
        refused += consort_cast(b.c, b.h, msg, strlen(msg), NULL) != 0;
    }
    CHECKV(refused == 0, "40 casts accepted");
    CHECKV(pump(ms, 2, 20, all_casts), "every cast delivered to both");
    CHECKV(a.order_ok && b.order_ok, "in FIFO order per origin");
    CHECKV(a.sent_in_view == 20, "SENT names the view each cast went out in");
    CHECKV(a.refused == 0 && b.refused == 0, "and none refused");

    CHECKV(consort_send(a.c, a.h, consort_member_id(b.c, b.h), "psst", 4, NULL) == 0, "a send");
    CHECKV(pump(ms, 2, 10, got_send), "delivered to b");
    r = consort_send(a.c, a.h, "127.0.0.1:1#1", "x", 1, &req);
    CHECKV(refusal(&a, version, r, req) == CONSORT_E_NOT_MEMBER, "a send to a stranger: not-member");

    size_t big = consort_max_frame(a.c) + 1;
    char *huge = calloc(1, big);
    r = consort_cast(a.c, a.h, huge, big, NULL);
    free(huge);
    CHECKV(r == CONSORT_E_TOO_BIG, "a message over the frame limit: too-big, at once");
    CHECKV(consort_ping(a.c) == 0, "and the connection goes on");
    r = consort_cast(a.c, 999, "x", 1, &req);
    CHECKV(refusal(&a, version, r, req) == CONSORT_E_NO_SUCH_HANDLE, "a cast on no member: no-such-handle");

    /* Casts written back to back, the events read after: in version 2 no
       reply waits for any of them. */
    a.casts = b.casts = a.refused = b.refused = 0;
    a.next_from[0] = a.next_from[1] = b.next_from[0] = b.next_from[1] = 0;
    refused = 0;
    for (int i = 1; i <= 500; i++) {
        snprintf(msg, sizeof msg, "A%d", i);
        refused += consort_cast(a.c, a.h, msg, strlen(msg), NULL) != 0;
    }
    for (int i = 1; i <= 500; i++) {
        snprintf(msg, sizeof msg, "B%d", i);
        refused += consort_cast(b.c, b.h, msg, strlen(msg), NULL) != 0;
    }
    CHECKV(refused == 0 && consort_ping(a.c) == 0 && consort_ping(b.c) == 0, "500 casts each, then a ping");
    CHECKV(pump(ms, 2, 20, many_casts), "every one delivered to both");
    CHECKV(a.order_ok && b.order_ok && a.refused == 0 && b.refused == 0, "in FIFO order, none refused");

    /* Write batching: in version 2 a cast waits in the client until the
       queue is full, the client waits for the daemon, or consort_flush. */
    struct member *as[1] = {&a}, *bs[1] = {&b};
    a.casts = b.casts = 0;
    a.next_from[0] = b.next_from[0] = 0;
    CHECKV(consort_cast(a.c, a.h, "A1", 2, NULL) == 0, "a cast");
    if (version < 2) {
        CHECKV(consort_queued(a.c) == 0, "is written at once in version 1");
        CHECKV(pump(bs, 1, 5, first_got), "and delivered");
    } else {
        CHECKV(consort_queued(a.c) == 2 + 17, "is queued in the client, not written");
        CHECKV(!pump(bs, 1, 0.3, first_got), "nobody gets it while it is queued");
        CHECKV(consort_flush(a.c) == 0 && consort_queued(a.c) == 0, "consort_flush writes it");
        CHECKV(pump(bs, 1, 5, first_got), "then it is delivered");
    }
    CHECKV(consort_cast(a.c, a.h, "A2", 2, NULL) == 0, "another cast");
    CHECKV(pump(as, 1, 5, first_got_two) && a.casts == 2, "waiting for events writes it: it comes back to a");
    char pad[100];
    size_t most = 0;
    consort_set_batch(a.c, 1000);
    refused = 0;
    for (int i = 3; i <= 32; i++) {
        snprintf(pad, sizeof pad, "A%d", i);
        memset(pad + strlen(pad), 'x', sizeof pad - strlen(pad));
        refused += consort_cast(a.c, a.h, pad, sizeof pad, NULL) != 0;
        if (consort_queued(a.c) > most) most = consort_queued(a.c);
    }
    CHECKV(refused == 0 && (version < 2 ? most == 0 : most >= 900 && most < 1000),
           "the queue is written once it holds the batch size");
    consort_set_batch(a.c, 0);
    CHECKV(consort_cast(a.c, a.h, "A33", 3, NULL) == 0 && consort_queued(a.c) == 0,
           "batch size 0: a cast is written at once");
    consort_set_batch(a.c, 65536);
    CHECKV(pump(ms, 2, 10, both_got_33) && a.order_ok && b.order_ok,
           "every one delivered, in order");

    /* b casts and closes at once: the cast is written first. */
    CHECKV(consort_cast(b.c, b.h, "B501", 4, NULL) == 0, "b casts, then closes");
    /* b's connection closes without leaving: b is failed out. */
    consort_close(b.c);
    b.c = NULL;
    CHECKV(pump(ms, 1, 5, a_got_b501), "its last cast is delivered: consort_close wrote it");
    CHECKV(pump(ms, 1, 5, a_alone), "a client that closes is failed out at once");
    CHECKV(strcmp(a.last_left_why, "left") == 0, "as a leave");

    CHECKV(consort_leave(a.c, a.h) == 0, "a leaves");
    CHECKV(pump(ms, 1, 10, a_exited), "EXIT follows");
    CHECKV(consort_member_id(a.c, a.h) == NULL, "and the handle is free");
    consort_close(a.c);
#undef CHECKV
}

/* Over TCP to a daemon with --key and --token: the token from a file, or
 * from the file CONSORT_TOKEN_FILE names; without it, not-allowed. */
static void token(const char *sock, const char *tcp, const char *file) {
    consort_client *x;
    uint32_t h;
    unsetenv("CONSORT_TOKEN_FILE");
    CHECK(consort_connect_token(tcp, "t", CONSORT_PROTOCOL_VERSION, file, &x) == 0 &&
              consort_join(x, "keyed", "vsync,Privacy", NULL, NULL, 0, 0, &h) == 0,
          "over TCP with the token file: connected, joined a Privacy group");
    consort_close(x);
    int r = consort_connect(tcp, "t", &x);
    CHECK(r == CONSORT_DISCONNECTED && strstr(consort_error(x), "not-allowed") && !strchr(consort_error(x), '\n'),
          "without the token: not-allowed, one line");
    consort_close(x);
    setenv("CONSORT_TOKEN_FILE", file, 1);
    CHECK(consort_connect(tcp, "t", &x) == 0, "with CONSORT_TOKEN_FILE");
    consort_close(x);
    unsetenv("CONSORT_TOKEN_FILE");
    r = consort_connect_token(tcp, "t", CONSORT_PROTOCOL_VERSION, "/nonexistent/token", &x);
    CHECK(r == CONSORT_DISCONNECTED && strstr(consort_error(x), "token: /nonexistent/token"),
          "a token file that cannot be read: one line naming it");
    consort_close(x);
    /* No token is read or sent on a Unix socket. */
    setenv("CONSORT_TOKEN_FILE", "/nonexistent/token", 1);
    CHECK(consort_connect(sock, "t", &x) == 0, "on a Unix socket CONSORT_TOKEN_FILE is not used");
    consort_close(x);
    unsetenv("CONSORT_TOKEN_FILE");
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 4) {
        fprintf(stderr, "usage: test_client SOCKET [TCP_ADDRESS TOKEN_FILE]\n");
        return 2;
    }
    const char *sock = argv[1];
    consort_client *x;

    /* Errors: one line, the connection handle still closable. */
    int r = consort_connect("/nonexistent/consortd.sock", "t", &x);
    CHECK(r == CONSORT_DISCONNECTED, "connecting to no daemon fails");
    CHECK(strstr(consort_error(x), "/nonexistent/consortd.sock") && !strchr(consort_error(x), '\n'),
          "with a one-line reason naming the address");
    consort_close(x);
    r = consort_connect("tcp:nohost", "t", &x);
    CHECK(r == CONSORT_DISCONNECTED, "a malformed tcp: address is refused");
    consort_close(x);

    r = consort_connect_version(sock, "t", 3, &x);
    CHECK(r == CONSORT_DISCONNECTED && strstr(consort_error(x), "version"), "a version the library does not speak");
    consort_close(x);
    CHECK(consort_connect(sock, "t", &x) == 0 && consort_version(x) == CONSORT_PROTOCOL_VERSION,
          "consort_connect agrees on the highest version");
    consort_close(x);

    scenario(sock, 1);
    scenario(sock, 2);
    if (argc == 4) token(sock, argv[2], argv[3]);

    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
