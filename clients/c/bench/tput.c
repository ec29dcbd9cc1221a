/* 1 KB casts from C through consortd, as fast as flow control lets them:
 *   tput SOCKET send N BATCH MEMBERS   casts N messages of 1 KB (batch size BATCH); prints
 *                                      "sent US", its CPU time per message in microseconds
 *   tput SOCKET recv N BATCH MEMBERS   prints "tput MSGS_PER_S", first to last message
 * Each waits first for a view of MEMBERS members of group "cbench". */
#define _POSIX_C_SOURCE 200809L
#include <consort.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static consort_client *c;
static const char *me;
static size_t view;
static int blocked, refused, own, got;
static double first, last;

/* Takes one event; 1 if there was one. */
static int take(int timeout_ms) {
    consort_event *ev;
    int r = consort_next_event(c, timeout_ms, &ev);
    if (r < 0) {
        fprintf(stderr, "tput: %s\n", consort_error(c));
        exit(1);
    }
    if (r == 0) return 0;
    switch (ev->type) {
    case CONSORT_VIEW:
        view = ev->n_members;
        break;
    case CONSORT_FLOW:
        blocked = ev->blocked;
        break;
    case CONSORT_REFUSED:
        if (ev->code != CONSORT_E_FLOW_CONTROL) {
            fprintf(stderr, "tput: refused: %s\n", ev->reason);
            exit(1);
        }
        refused++;
        break;
    case CONSORT_CAST:
        if (ev->len == 1024) {
            if (strcmp(ev->origin, me) == 0) own++;
            else {
                if (got == 0) first = now();
                got++;
                last = now();
            }
        }
        break;
    default:
        break;
    }
    consort_event_free(ev);
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: tput SOCKET send|recv N BATCH MEMBERS\n");
        return 2;
    }
    int send = strcmp(argv[2], "send") == 0, n = atoi(argv[3]), members = atoi(argv[5]);
    uint32_t m;
    if (consort_connect(argv[1], "tput", &c) != 0 || consort_join(c, "cbench", "vsync", "", NULL, 0, 0, &m) != 0) {
        fprintf(stderr, "tput: %s\n", consort_error(c));
        return 1;
    }
    consort_set_batch(c, (size_t)atol(argv[4]));
    me = consort_member_id(c, m);
    double end = now() + 20;
    while (view != (size_t)members && now() < end) take(10);
    if (view != (size_t)members) {
        fprintf(stderr, "tput: no view of %d\n", members);
        return 1;
    }
    if (!send) {
        end = now() + 120;
        while (got < n && now() < end) take(10);
        if (got < n) {
            fprintf(stderr, "tput: received %d of %d\n", got, n);
            return 1;
        }
        printf("tput %.0f\n", n / (last - first));
        consort_close(c);
        return 0;
    }
    end = now() + 0.5;
    while (now() < end) take(10);
    char msg[1024];
    memset(msg, 'x', sizeof msg);
    int sent = 0;
    double cpu0 = cpu();
    end = now() + 120;
    while ((sent - refused < n || own < n) && now() < end) {
        while (!blocked && sent - refused < n) {
            snprintf(msg, sizeof msg, "d%010d", sent);
            msg[11] = 'x';
            if (consort_cast(c, m, msg, sizeof msg, NULL) != 0) {
                fprintf(stderr, "tput: %s\n", consort_error(c));
                return 1;
            }
            sent++;
            if (sent % 64 == 0) break;
        }
        /* What came meanwhile (this writes the casts queued), then on. */
        while (take(0)) {
        }
        if (blocked || sent - refused >= n) take(10);
    }
    double spent = cpu() - cpu0;
    /* The receivers have it all once this member has its own. */
    end = now() + 1;
    while (now() < end) take(10);
    consort_close(c);
    if (own < n) {
        fprintf(stderr, "tput: %d of %d casts came back\n", own, n);
        return 1;
    }
    printf("sent %.2f\n", spent * 1e6 / n);
    return 0;
}
