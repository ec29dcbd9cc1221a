#define _GNU_SOURCE
/* logmember: a group member through consortd that casts each line of
 * standard input and writes a member log in Consort's format (README,
 * src/spec/log.mli), so that `consort check-logs` checks it beside
 * in-process members. At the end of its input it leaves the group.
 *
 *   logmember SOCKET GROUP PROPS LOG [PEERS]
 *
 * Payloads follow `consort member --log`: "#SEQ text"; the log names a
 * message by its origin and SEQ, and records the text's length and digest
 * (the first 16 hex digits of its SHA-256). */
#include <consort.h>
#include <openssl/evp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static FILE *logf_;
static const char *me_;
static char *view_; /* current view id */

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void digest(const void *p, size_t n, char out[17]) {
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_Digest(p, n, d, &len, EVP_sha256(), NULL);
    for (int i = 0; i < 8; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

/* JSON string: ids and view ids are printable ASCII without quotes. */
static void unframe(const char *p, size_t n, long *seq, const char **text, size_t *tlen) {
    *seq = 0;
    *text = p;
    *tlen = n;
    if (n > 2 && p[0] == '#') {
        size_t i = 1;
        long s = 0;
        while (i < n && p[i] >= '0' && p[i] <= '9' && i < 12) s = s * 10 + (p[i++] - '0');
        if (i > 1 && i < n && p[i] == ' ' && s > 0) {
            *seq = s;
            *text = p + i + 1;
            *tlen = n - i - 1;
        }
    }
}

static void on_event(consort_event *ev) {
    char d[17];
    switch (ev->type) {
    case CONSORT_VIEW:
        free(view_);
        view_ = strdup(ev->vid);
        fprintf(logf_, "{\"ev\":\"view\",\"t\":%lld,\"me\":\"%s\",\"view\":\"%s\",\"members\":[", now_ns(), me_, ev->vid);
        for (size_t i = 0; i < ev->n_members; i++) fprintf(logf_, "%s\"%s\"", i ? "," : "", ev->members[i]);
        fprintf(logf_, "]}\n");
        break;
    case CONSORT_BLOCK:
        fprintf(logf_, "{\"ev\":\"block\",\"t\":%lld,\"me\":\"%s\",\"view\":\"%s\"}\n", now_ns(), me_, view_);
        break;
    case CONSORT_CAST:
    case CONSORT_SEND: {
        long seq;
        const char *text;
        size_t tlen;
        unframe(ev->payload, ev->len, &seq, &text, &tlen);
        digest(text, tlen, d);
        fprintf(logf_,
                "{\"ev\":\"deliver\",\"t\":%lld,\"me\":\"%s\",\"view\":\"%s\",\"from\":\"%s\",\"kind\":\"%s\","
                "\"seq\":%ld,\"len\":%zu,\"digest\":\"%s\"}\n",
                now_ns(), me_, view_, ev->origin, ev->type == CONSORT_CAST ? "cast" : "send", seq, tlen, d);
        break;
    }
    default:
        break;
    }
    fflush(logf_);
}

/* What was cast, by request number: the SENT event logs it. */
struct pending {
    uint32_t req;
    long seq;
    size_t len;
    char digest[17];
};
static struct pending pend[65536];

/* Casts one line as "#SEQ line"; logs a refusal. <0: disconnected. */
static int cast_line(consort_client *c, uint32_t m, const char *line, long *seq) {
    static uint32_t next = 0;
    static char payload[65536 + 32];
    if (!line[0]) return 0;
    ++*seq;
    int n = snprintf(payload, sizeof payload, "#%ld %s", *seq, line);
    /* consort_cast numbers requests from 1, one per cast: what is cast is
       recorded before the call, as SENT may come first. */
    struct pending *q = &pend[(++next) & 0xffff];
    uint32_t req;
    q->seq = *seq;
    q->len = strlen(line);
    digest(line, q->len, q->digest);
    int e = consort_cast(c, m, payload, (size_t)n, &req);
    if (e < 0) return e;
    if (req != next) {
        fprintf(stderr, "logmember: request numbers out of step\n");
        return -1;
    }
    if (e > 0) {
        fprintf(logf_,
                "{\"ev\":\"refused\",\"t\":%lld,\"me\":\"%s\",\"view\":\"%s\",\"kind\":\"cast\",\"seq\":%ld,"
                "\"len\":%zu,\"digest\":\"%s\",\"reason\":\"%s\"}\n",
                now_ns(), me_, view_, *seq, q->len, q->digest, consort_strerror(e));
        fflush(logf_);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 5 || argc > 6) {
        fprintf(stderr, "usage: logmember SOCKET GROUP PROPS LOG [PEERS]\n");
        return 2;
    }
    const char *peers[1] = {argc == 6 ? argv[5] : NULL};
    logf_ = fopen(argv[4], "w");
    if (!logf_) {
        perror(argv[4]);
        return 2;
    }
    consort_client *c;
    uint32_t m;
    if (consort_connect(argv[1], "logmember", &c) != 0 ||
        consort_join(c, argv[2], argv[3], NULL, peers, argc == 6 ? 1 : 0, CONSORT_REPORT, &m) != 0) {
        fprintf(stderr, "logmember: %s\n", consort_error(c));
        consort_close(c);
        fclose(logf_);
        return 1;
    }
    me_ = strdup(consort_member_id(c, m));
    view_ = strdup("");
    printf("member %s\n", me_);
    fflush(stdout);
    int input = 1, rc = 1;
    long seq = 0;
    static char inbuf[65536];
    size_t inlen = 0;
    for (;;) {
        consort_event *ev;
        int r;
        while ((r = consort_next_event(c, 0, &ev)) == 1) {
            if (ev->type == CONSORT_SENT) {
                struct pending *p = &pend[ev->req & 0xffff];
                fprintf(logf_,
                        "{\"ev\":\"cast\",\"t\":%lld,\"me\":\"%s\",\"view\":\"%s\",\"seq\":%ld,\"len\":%zu,"
                        "\"digest\":\"%s\"}\n",
                        now_ns(), me_, ev->view, p->seq, p->len, p->digest);
                fflush(logf_);
            } else if (ev->type == CONSORT_REFUSED) {
                /* Version 2: a refusal comes after the cast, as an event. */
                struct pending *p = &pend[ev->req & 0xffff];
                fprintf(logf_,
                        "{\"ev\":\"refused\",\"t\":%lld,\"me\":\"%s\",\"view\":\"%s\",\"kind\":\"cast\","
                        "\"seq\":%ld,\"len\":%zu,\"digest\":\"%s\",\"reason\":\"%s\"}\n",
                        now_ns(), me_, view_, p->seq, p->len, p->digest, consort_strerror(ev->code));
                fflush(logf_);
            } else if (ev->type == CONSORT_LOST) {
                fprintf(logf_, "{\"ev\":\"lost\",\"t\":%lld,\"me\":\"%s\",\"kind\":\"cast\",\"seq\":%ld,\"reason\":\"lost\"}\n",
                        now_ns(), me_, pend[ev->req & 0xffff].seq);
                fflush(logf_);
            } else if (ev->type == CONSORT_EXIT) {
                fprintf(logf_, "{\"ev\":\"exit\",\"t\":%lld,\"me\":\"%s\"}\n", now_ns(), me_);
                consort_event_free(ev);
                rc = 0;
                goto done;
            } else
                on_event(ev);
            consort_event_free(ev);
        }
        if (r < 0) break;
        struct pollfd p[2] = {{.fd = consort_fd(c), .events = POLLIN}, {.fd = 0, .events = POLLIN}};
        if (poll(p, input ? 2 : 1, -1) < 0) break;
        if (input && p[1].revents) {
            /* Standard input is read with read(2), never stdio: a line left in
               stdio's buffer would not wake poll. */
            ssize_t got = read(0, inbuf + inlen, sizeof inbuf - inlen);
            if (got <= 0) {
                input = 0;
                if (consort_leave(c, m) < 0) break;
                continue;
            }
            inlen += (size_t)got;
            char *start = inbuf, *nl;
            int broken = 0;
            while ((nl = memchr(start, '\n', inlen - (size_t)(start - inbuf)))) {
                *nl = 0;
                if (cast_line(c, m, start, &seq) < 0) {
                    broken = 1;
                    break;
                }
                start = nl + 1;
            }
            if (broken) break;
            inlen -= (size_t)(start - inbuf);
            memmove(inbuf, start, inlen);
            if (inlen == sizeof inbuf) inlen = 0; /* a line too long: dropped */
        }
    }
    fprintf(stderr, "logmember: %s\n", consort_error(c));
done:
    consort_close(c);
    fclose(logf_);
    free(view_);
    free((char *)me_);
    return rc;
}
