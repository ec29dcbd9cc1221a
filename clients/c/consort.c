/* consort.c - the consortd protocol, versions 1 and 2 (doc/protocol.md). */
#define _GNU_SOURCE
#include "consort.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define NO_HANDLE 0xffffffffu
#define MAX_INBOUND (1u << 30)

struct frame {
    struct frame *next;
    size_t len;
    unsigned char data[];
};

/* Bytes under construction: a frame (begin, put..., finish), or the queue
 * of frames waiting to be written, each begun at [start]. */
struct buf {
    unsigned char *p;
    size_t len, cap, start;
    int oom;
};

struct member_rec {
    struct member_rec *next;
    uint32_t handle;
    uint64_t max_message;
    char *id;
};

struct consort_client {
    int fd;
    int closed;
    char err[256];
    unsigned char *rbuf;
    size_t rlen, rcap;
    struct frame *qhead, *qtail; /* upcalls, in order */
    size_t npending;
    struct frame *rhead, *rtail; /* replies, in order */
    int fatal;                   /* an ERROR about the connection waits among the upcalls */
    struct member_rec *members;
    uint32_t next_handle;
    uint32_t next_req;
    uint32_t max_frame;
    int version; /* agreed at HELLO */
    struct buf out; /* casts and sends queued, not written yet (version 2) */
    size_t batch;   /* out is written once it holds this many bytes */
};

/* The queue of casts and sends is written once it holds this much. */
#define DEFAULT_BATCH 65536
/* A queue grown past this by a large message is freed once written. */
#define KEEP_OUT 262144

static const char *names[] = {"ok", "malformed", "version", "too-big", "flow-control", "not-member",
                              "leaving", "exited", "no-such-handle", "handle-in-use", "bad-props",
                              "bad-params", "bad-address", "join-failed", "not-hello", "overloaded",
                              "bad-switch", "not-primary", "not-allowed"};

const char *consort_strerror(int code) {
    if (code == CONSORT_DISCONNECTED) return "disconnected";
    if (code >= 0 && code < (int)(sizeof names / sizeof names[0])) return names[code];
    return "unknown";
}

static void vset_err(consort_client *c, const char *fmt, va_list ap) {
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    for (char *p = c->err; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
}

static void set_err(consort_client *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vset_err(c, fmt, ap);
    va_end(ap);
}

static int disconnect(consort_client *c, const char *fmt, ...) {
    if (!c->closed) {
        va_list ap;
        va_start(ap, fmt);
        vset_err(c, fmt, ap);
        va_end(ap);
        c->closed = 1;
        if (c->fd >= 0) close(c->fd);
        c->fd = -1;
    }
    return CONSORT_DISCONNECTED;
}

const char *consort_error(const consort_client *c) { return c ? c->err : "out of memory"; }
int consort_fd(const consort_client *c) { return c->fd; }
size_t consort_pending(const consort_client *c) { return c->npending; }
uint32_t consort_max_frame(const consort_client *c) { return c->max_frame; }
int consort_version(const consort_client *c) { return c->version; }

/* {1 Encoding} */

static void put(struct buf *b, const void *d, size_t n) {
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n) cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
}

static void put8(struct buf *b, unsigned v) {
    unsigned char x = (unsigned char)v;
    put(b, &x, 1);
}
static void put16(struct buf *b, unsigned v) {
    unsigned char x[2] = {(unsigned char)(v >> 8), (unsigned char)v};
    put(b, x, 2);
}
static void put32(struct buf *b, uint32_t v) {
    unsigned char x[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8),
                          (unsigned char)v};
    put(b, x, 4);
}
static void putbytes(struct buf *b, const void *d, size_t n) {
    put32(b, (uint32_t)n);
    put(b, d, n);
}
static void putstr(struct buf *b, const char *s) { putbytes(b, s ? s : "", s ? strlen(s) : 0); }

/* A frame at the end of b (the queue of casts, or a fresh buffer). */
static void begin_at(struct buf *b, unsigned type) {
    b->start = b->len;
    put32(b, 0);
    put8(b, type);
}

static void begin(struct buf *b, unsigned type) {
    memset(b, 0, sizeof *b);
    begin_at(b, type);
}

static void finish(struct buf *b) {
    if (b->oom) return;
    uint32_t n = (uint32_t)(b->len - b->start - 4);
    unsigned char *h = b->p + b->start;
    h[0] = (unsigned char)(n >> 24);
    h[1] = (unsigned char)(n >> 16);
    h[2] = (unsigned char)(n >> 8);
    h[3] = (unsigned char)n;
}

/* {1 Decoding} */

struct cur {
    const unsigned char *p;
    size_t len, pos;
    int bad;
};

static int need(struct cur *c, size_t n) {
    if (c->bad || n > c->len - c->pos) {
        c->bad = 1;
        return 0;
    }
    return 1;
}
static unsigned get8(struct cur *c) { return need(c, 1) ? c->p[c->pos++] : 0; }
static unsigned get16(struct cur *c) {
    unsigned a = get8(c);
    return (a << 8) | get8(c);
}
static uint32_t get32(struct cur *c) {
    uint32_t a = get16(c);
    return (a << 16) | get16(c);
}
static uint64_t get64(struct cur *c) {
    uint64_t a = get32(c);
    return (a << 32) | get32(c);
}

/* Reads bytes and returns a view into the frame; the caller copies. */
static const unsigned char *getbytes(struct cur *c, size_t *n) {
    *n = get32(c);
    if (!need(c, *n)) return NULL;
    const unsigned char *p = c->p + c->pos;
    c->pos += *n;
    return p;
}

/* {1 I/O} */

static int is_reply(unsigned t) { return t >= 0x81 && t <= 0x84; }

/* An ERROR about the connection itself (handle 0xffffffff). */
static int is_fatal(const struct frame *f) {
    return f->len >= 5 && f->data[0] == 0x83 && f->data[1] == 0xff && f->data[2] == 0xff && f->data[3] == 0xff &&
           f->data[4] == 0xff;
}

/* Moves whole frames from the input buffer to the queues. */
static int cut_frames(consort_client *c) {
    size_t off = 0;
    while (c->rlen - off >= 4) {
        const unsigned char *h = c->rbuf + off;
        uint32_t n = ((uint32_t)h[0] << 24) | ((uint32_t)h[1] << 16) | ((uint32_t)h[2] << 8) | h[3];
        if (n == 0 || n > MAX_INBOUND) return disconnect(c, "the daemon sent a frame of %u bytes", n);
        if (c->rlen - off - 4 < n) break;
        struct frame *f = malloc(sizeof *f + n);
        if (!f) return disconnect(c, "out of memory");
        f->next = NULL;
        f->len = n;
        memcpy(f->data, h + 4, n);
        if (is_reply(f->data[0]) && !is_fatal(f)) {
            if (c->rtail) c->rtail->next = f;
            else c->rhead = f;
            c->rtail = f;
        } else {
            /* Upcalls, and an ERROR about the connection: next_event and
               call find it there. */
            if (is_fatal(f)) c->fatal = 1;
            if (c->qtail) c->qtail->next = f;
            else c->qhead = f;
            c->qtail = f;
            c->npending++;
        }
        off += 4 + n;
    }
    if (off > 0) {
        memmove(c->rbuf, c->rbuf + off, c->rlen - off);
        c->rlen -= off;
    }
    return 0;
}

/* Reads what is there, waiting up to timeout_ms; 1 if something came.
 * The casts queued go out first: what is read may answer them. */
static int read_some(consort_client *c, int timeout_ms) {
    if (c->closed) return CONSORT_DISCONNECTED;
    if (c->out.len > 0 && consort_flush(c) < 0) return CONSORT_DISCONNECTED;
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    int r = poll(&p, 1, timeout_ms);
    if (r < 0) return errno == EINTR ? 0 : disconnect(c, "poll: %s", strerror(errno));
    if (r == 0) return 0;
    if (c->rcap - c->rlen < 65536) {
        size_t cap = c->rcap ? c->rcap * 2 : 131072;
        unsigned char *nb = realloc(c->rbuf, cap);
        if (!nb) return disconnect(c, "out of memory");
        c->rbuf = nb;
        c->rcap = cap;
    }
    ssize_t n = read(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen);
    if (n == 0) return disconnect(c, "the daemon closed the connection");
    if (n < 0) return (errno == EINTR || errno == EAGAIN) ? 0 : disconnect(c, "read: %s", strerror(errno));
    c->rlen += (size_t)n;
    if (cut_frames(c) < 0) return CONSORT_DISCONNECTED;
    return 1;
}

static int write_all(consort_client *c, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            return disconnect(c, "write: %s", strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int consort_flush(consort_client *c) {
    struct buf *b = &c->out;
    size_t n = b->len;
    b->len = b->start = 0;
    b->oom = 0;
    if (c->closed) return CONSORT_DISCONNECTED;
    int r = n > 0 ? write_all(c, b->p, n) : 0;
    if (b->cap > KEEP_OUT) {
        free(b->p);
        memset(b, 0, sizeof *b);
    }
    return r;
}

size_t consort_queued(const consort_client *c) { return c->out.len; }
void consort_set_batch(consort_client *c, size_t bytes) { c->batch = bytes; }

/* Checks a frame just built in b (ending it); 0 if it may go out. Else the
 * frame is taken back from b and the result says why. */
static int check_frame(consort_client *c, struct buf *b) {
    int r = 0;
    if (b->oom) {
        set_err(c, "out of memory");
        r = CONSORT_E_OVERLOADED;
    } else if (c->closed)
        r = CONSORT_DISCONNECTED;
    else {
        finish(b);
        size_t n = b->len - b->start - 4;
        if (c->max_frame && n > c->max_frame) {
            set_err(c, "a frame of %zu bytes, over the daemon's limit of %u", n, c->max_frame);
            r = CONSORT_E_TOO_BIG;
        }
    }
    if (r != 0) {
        b->oom = 0;
        b->len = b->start;
    }
    return r;
}

/* Takes the next reply, or a fatal ERROR waiting among the upcalls. */
static struct frame *take_reply(consort_client *c) {
    struct frame *f = c->rhead;
    if (f) {
        c->rhead = f->next;
        if (!c->rhead) c->rtail = NULL;
        f->next = NULL;
        return f;
    }
    struct frame *prev = NULL;
    if (!c->fatal) return NULL;
    for (f = c->qhead; f; prev = f, f = f->next) {
        if (is_fatal(f)) {
            if (prev) prev->next = f->next;
            else c->qhead = f->next;
            if (c->qtail == f) c->qtail = prev;
            c->npending--;
            f->next = NULL;
            return f;
        }
    }
    return NULL;
}

/* Writes a request and waits for its reply; returns 0 (OK, *reply set if
 * asked), a refusal code, or CONSORT_DISCONNECTED. */
static int call(consort_client *c, struct buf *b, struct frame **reply) {
    int r = check_frame(c, b);
    if (r != 0) {
        free(b->p);
        return r;
    }
    /* Behind the casts queued, in the same write. */
    if (c->out.len > 0) {
        put(&c->out, b->p, b->len);
        r = c->out.oom ? disconnect(c, "out of memory") : consort_flush(c);
    } else
        r = write_all(c, b->p, b->len);
    free(b->p);
    if (r < 0) return r;
    for (;;) {
        struct frame *f = take_reply(c);
        if (f) {
            struct cur k = {f->data, f->len, 1, 0};
            int code = 0;
            if (f->data[0] == 0x83) {
                uint32_t h = get32(&k);
                code = (int)get16(&k);
                size_t n;
                const unsigned char *s = getbytes(&k, &n);
                if (k.bad) code = disconnect(c, "the daemon sent an ERROR that does not decode");
                else if (h == NO_HANDLE) {
                    code = disconnect(c, "%s: %.*s", consort_strerror(code), (int)n, (const char *)s);
                } else {
                    set_err(c, "%s: %.*s", consort_strerror(code), (int)n, (const char *)s);
                    if (code <= 0) code = CONSORT_E_MALFORMED;
                }
            }
            if (reply && code == 0) *reply = f;
            else free(f);
            return code;
        }
        /* A fatal ERROR may be queued behind nothing: check for it. */
        r = read_some(c, -1);
        if (r < 0) return r;
    }
}

/* A CAST or SEND is built where message_begin says. In version 1 it
 * waits for its reply; in version 2 the daemon replies to none it takes (a
 * refusal comes as a REFUSED event), and it is queued in c->out, written
 * once the queue holds c->batch bytes or the client waits. */
static struct buf *message_begin(consort_client *c, struct buf *local, unsigned type) {
    if (c->version < 2) {
        begin(local, type);
        return local;
    }
    begin_at(&c->out, type);
    return &c->out;
}

static int message(consort_client *c, struct buf *b) {
    if (b != &c->out) return call(c, b, NULL);
    int r = check_frame(c, b);
    if (r != 0) return r;
    return b->len >= c->batch ? consort_flush(c) : 0;
}

/* {1 The API} */

int consort_connect(const char *address, const char *name, consort_client **out) {
    return consort_connect_version(address, name, CONSORT_PROTOCOL_VERSION, out);
}

int consort_connect_version(const char *address, const char *name, int max_version, consort_client **out) {
    return consort_connect_token(address, name, max_version, NULL, out);
}

/* The token of HELLO: the text of the file, without surrounding blanks
 * (at most 4096 bytes). NULL, or why not. */
static const char *read_token(const char *file, char *tok, size_t cap) {
    FILE *f = fopen(file, "rbe");
    if (!f) return strerror(errno);
    size_t n = fread(tok, 1, cap, f);
    int err = ferror(f);
    fclose(f);
    if (err) return "read error";
    if (n >= cap) return "over 4096 bytes";
    size_t i = 0;
    while (i < n && (tok[i] == ' ' || tok[i] == '\t' || tok[i] == '\n' || tok[i] == '\r')) i++;
    while (n > i && (tok[n - 1] == ' ' || tok[n - 1] == '\t' || tok[n - 1] == '\n' || tok[n - 1] == '\r')) n--;
    if (n == i || memchr(tok + i, 0, n - i)) return "empty, or not text";
    memmove(tok, tok + i, n - i);
    tok[n - i] = 0;
    return NULL;
}

int consort_connect_token(const char *address, const char *name, int max_version, const char *token_file,
                          consort_client **out) {
    consort_client *c = calloc(1, sizeof *c);
    *out = c;
    if (!c) return CONSORT_DISCONNECTED;
    c->fd = -1;
    c->batch = DEFAULT_BATCH;
    if (max_version < 1 || max_version > CONSORT_PROTOCOL_VERSION)
        return disconnect(c, "protocol version %d: this library speaks 1 to %d", max_version,
                          CONSORT_PROTOCOL_VERSION);
    if (!address) return disconnect(c, "no address");
    char token[4097] = "";
    /* Over TCP only: the Unix socket checks credentials instead, and a path
     * in a shared directory could be another user's socket. */
    if (strncmp(address, "tcp:", 4) != 0) token_file = NULL;
    else if (!token_file) {
        const char *env = getenv("CONSORT_TOKEN_FILE");
        if (env && *env) token_file = env;
    }
    if (token_file) {
        const char *why = read_token(token_file, token, sizeof token);
        if (why) return disconnect(c, "token: %s: %s", token_file, why);
    }
    if (strncmp(address, "tcp:", 4) == 0) {
        const char *a = address + 4, *colon = strrchr(a, ':');
        struct sockaddr_in sa = {.sin_family = AF_INET};
        char host[64];
        char *end;
        long port = colon ? strtol(colon + 1, &end, 10) : -1;
        if (!colon || (size_t)(colon - a) >= sizeof host || port <= 0 || port > 65535 || *end)
            return disconnect(c, "%s: not tcp:IP:PORT", address);
        memcpy(host, a, (size_t)(colon - a));
        host[colon - a] = 0;
        if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) return disconnect(c, "%s: not tcp:IP:PORT", address);
        sa.sin_port = htons((uint16_t)port);
        c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0) return disconnect(c, "socket: %s", strerror(errno));
        if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) < 0)
            return disconnect(c, "%s: %s", address, strerror(errno));
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    } else {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(address) >= sizeof sa.sun_path) return disconnect(c, "%s: path too long", address);
        strcpy(sa.sun_path, address);
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0) return disconnect(c, "socket: %s", strerror(errno));
        if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) < 0)
            return disconnect(c, "%s: %s", address, strerror(errno));
    }
    struct buf b;
    begin(&b, 0x01);
    put16(&b, 1);
    put16(&b, (unsigned)max_version);
    putstr(&b, name ? name : "c");
    if (token[0]) putstr(&b, token); /* absent without a token */
    struct frame *f = NULL;
    int r = call(c, &b, &f);
    if (r != 0) {
        if (r > 0) disconnect(c, "%s", c->err);
        return CONSORT_DISCONNECTED;
    }
    if (f->data[0] != 0x81) {
        free(f);
        return disconnect(c, "the daemon answered HELLO with something else");
    }
    struct cur k = {f->data, f->len, 1, 0};
    c->version = (int)get16(&k);
    c->max_frame = get32(&k);
    free(f);
    if (k.bad || c->version < 1 || c->version > max_version)
        return disconnect(c, "the daemon answered HELLO with version %d, not one of 1 to %d", c->version,
                          max_version);
    return 0;
}

void consort_close(consort_client *c) {
    if (!c) return;
    if (!c->closed && c->out.len > 0) consort_flush(c);
    free(c->out.p);
    if (c->fd >= 0) close(c->fd);
    while (c->qhead) {
        struct frame *f = c->qhead;
        c->qhead = f->next;
        free(f);
    }
    while (c->rhead) {
        struct frame *f = c->rhead;
        c->rhead = f->next;
        free(f);
    }
    while (c->members) {
        struct member_rec *m = c->members;
        c->members = m->next;
        free(m->id);
        free(m);
    }
    free(c->rbuf);
    free(c);
}

static struct member_rec *find(const consort_client *c, uint32_t h) {
    for (struct member_rec *m = c->members; m; m = m->next)
        if (m->handle == h) return m;
    return NULL;
}

static void forget(consort_client *c, uint32_t h) {
    for (struct member_rec **p = &c->members; *p; p = &(*p)->next)
        if ((*p)->handle == h) {
            struct member_rec *m = *p;
            *p = m->next;
            free(m->id);
            free(m);
            return;
        }
}

int consort_join(consort_client *c, const char *group, const char *props, const char *params,
                 const char *const *peers, size_t n_peers, unsigned flags, uint32_t *member) {
    uint32_t h = ++c->next_handle;
    if (h == NO_HANDLE) h = c->next_handle = 1;
    struct buf b;
    begin(&b, 0x02);
    put32(&b, h);
    putstr(&b, group);
    putstr(&b, props);
    putstr(&b, params);
    put32(&b, flags);
    put32(&b, (uint32_t)n_peers);
    for (size_t i = 0; i < n_peers; i++) putstr(&b, peers[i]);
    struct frame *f = NULL;
    int r = call(c, &b, &f);
    if (r != 0) return r;
    struct cur k = {f->data, f->len, 1, 0};
    get32(&k);
    uint64_t max = get64(&k);
    size_t n;
    const unsigned char *id = getbytes(&k, &n);
    struct member_rec *m = calloc(1, sizeof *m);
    char *ids = malloc(n + 1);
    if (k.bad || !m || !ids) {
        free(m);
        free(ids);
        free(f);
        return disconnect(c, "a JOIN reply that does not decode");
    }
    memcpy(ids, id, n);
    ids[n] = 0;
    free(f);
    m->handle = h;
    m->max_message = max;
    m->id = ids;
    m->next = c->members;
    c->members = m;
    if (member) *member = h;
    return 0;
}

const char *consort_member_id(const consort_client *c, uint32_t member) {
    struct member_rec *m = find(c, member);
    return m ? m->id : NULL;
}

uint64_t consort_max_message(const consort_client *c, uint32_t member) {
    struct member_rec *m = find(c, member);
    return m ? m->max_message : 0;
}

int consort_cast(consort_client *c, uint32_t member, const void *data, size_t len, uint32_t *req) {
    uint32_t q = ++c->next_req;
    if (req) *req = q;
    struct buf local, *b = message_begin(c, &local, 0x04);
    put32(b, member);
    put32(b, q);
    putbytes(b, data, len);
    return message(c, b);
}

int consort_send(consort_client *c, uint32_t member, const char *dst, const void *data, size_t len,
                 uint32_t *req) {
    uint32_t q = ++c->next_req;
    if (req) *req = q;
    struct buf local, *b = message_begin(c, &local, 0x05);
    put32(b, member);
    put32(b, q);
    putstr(b, dst);
    putbytes(b, data, len);
    return message(c, b);
}

static int simple(consort_client *c, unsigned type, uint32_t member) {
    struct buf b;
    begin(&b, type);
    put32(&b, member);
    return call(c, &b, NULL);
}

int consort_leave(consort_client *c, uint32_t member) { return simple(c, 0x03, member); }
int consort_block_ok(consort_client *c, uint32_t member) { return simple(c, 0x07, member); }
int consort_ping(consort_client *c) { return simple(c, 0x09, 1); }

int consort_suspect(consort_client *c, uint32_t member, const char *const *ids, size_t n_ids) {
    struct buf b;
    begin(&b, 0x06);
    put32(&b, member);
    put32(&b, (uint32_t)n_ids);
    for (size_t i = 0; i < n_ids; i++) putstr(&b, ids[i]);
    return call(c, &b, NULL);
}

int consort_switch(consort_client *c, uint32_t member, const char *props, const char *params) {
    struct buf b;
    begin(&b, 0x08);
    put32(&b, member);
    putstr(&b, props);
    putstr(&b, params);
    return call(c, &b, NULL);
}

/* {1 Events} */

struct event_impl {
    consort_event ev; /* first: consort_event_free casts back */
    char *arena;
    size_t used, cap;
    const char **lists[4];
};

static const char *copy_str(struct event_impl *e, struct cur *k, size_t *len) {
    size_t n;
    const unsigned char *p = getbytes(k, &n);
    if (!p || e->used + n + 1 > e->cap) {
        k->bad = 1;
        return "";
    }
    char *s = e->arena + e->used;
    memcpy(s, p, n);
    s[n] = 0;
    e->used += n + 1;
    if (len) *len = n;
    return s;
}

static const char *const *copy_list(struct event_impl *e, int slot, struct cur *k, size_t *count) {
    uint32_t n = get32(k);
    *count = 0;
    if (k->bad || n > (k->len - k->pos) / 4) {
        k->bad = 1;
        return NULL;
    }
    const char **l = calloc(n ? n : 1, sizeof *l);
    if (!l) {
        k->bad = 1;
        return NULL;
    }
    e->lists[slot] = l;
    for (uint32_t i = 0; i < n; i++) l[i] = copy_str(e, k, NULL);
    *count = n;
    return l;
}

void consort_event_free(consort_event *ev) {
    if (!ev) return;
    struct event_impl *e = (struct event_impl *)ev;
    for (int i = 0; i < 4; i++) free(e->lists[i]);
    free(e->arena);
    free(e);
}

static consort_event *decode_event(consort_client *c, const struct frame *f) {
    struct event_impl *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->cap = 2 * f->len + 16;
    e->arena = malloc(e->cap);
    if (!e->arena) {
        free(e);
        return NULL;
    }
    struct cur k = {f->data, f->len, 0, 0};
    consort_event *ev = &e->ev;
    unsigned t = get8(&k);
    ev->member = get32(&k);
    size_t n;
    switch (t) {
    case 0xa1:
        ev->type = CONSORT_VIEW;
        ev->vid = copy_str(e, &k, NULL);
        ev->ltime = get64(&k);
        ev->rank = get32(&k);
        ev->coordinator = copy_str(e, &k, NULL);
        ev->members = copy_list(e, 0, &k, &ev->n_members);
        ev->joined = copy_list(e, 1, &k, &ev->n_joined);
        ev->left = copy_list(e, 2, &k, &ev->n_left);
        ev->why = copy_list(e, 3, &k, &n);
        if (n != ev->n_left) k.bad = 1;
        break;
    case 0xa2:
    case 0xa3:
        ev->type = t == 0xa2 ? CONSORT_CAST : CONSORT_SEND;
        ev->origin = copy_str(e, &k, NULL);
        ev->payload = copy_str(e, &k, &ev->len);
        break;
    case 0xa4:
        ev->type = CONSORT_BLOCK;
        break;
    case 0xa5:
        ev->type = CONSORT_FLOW;
        ev->blocked = get8(&k) != 0;
        break;
    case 0xa6:
        ev->type = CONSORT_EXIT;
        break;
    case 0xa7:
        ev->type = CONSORT_SENT;
        ev->req = get32(&k);
        ev->kind = (int)get8(&k);
        ev->view = copy_str(e, &k, NULL);
        break;
    case 0xa8:
    case 0xa9:
        ev->type = t == 0xa8 ? CONSORT_LOST : CONSORT_REFUSED;
        ev->req = get32(&k);
        if (t == 0xa9) ev->code = (int)get16(&k);
        ev->reason = copy_str(e, &k, NULL);
        break;
    default:
        k.bad = 1;
    }
    if (k.bad || k.pos != k.len) {
        consort_event_free(ev);
        set_err(c, "the daemon sent an event (type 0x%02x) that does not decode", t);
        return NULL;
    }
    return ev;
}

int consort_next_event(consort_client *c, int timeout_ms, consort_event **out) {
    *out = NULL;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        struct frame *f = c->qhead;
        if (f) {
            c->qhead = f->next;
            if (!c->qhead) c->qtail = NULL;
            c->npending--;
            if (is_reply(f->data[0])) {
                /* A fatal ERROR, or a reply to no request. */
                struct cur k = {f->data, f->len, 1, 0};
                uint32_t h = get32(&k);
                unsigned code = f->data[0] == 0x83 ? get16(&k) : 0;
                size_t n = 0;
                const unsigned char *s = f->data[0] == 0x83 ? getbytes(&k, &n) : NULL;
                if (f->data[0] == 0x83 && h == NO_HANDLE && s)
                    disconnect(c, "%s: %.*s", consort_strerror((int)code), (int)n, (const char *)s);
                else
                    disconnect(c, "the daemon sent a reply to no request");
                free(f);
                return CONSORT_DISCONNECTED;
            }
            consort_event *ev = decode_event(c, f);
            free(f);
            if (!ev) return disconnect(c, "%s", c->err[0] ? c->err : "out of memory");
            if (ev->type == CONSORT_EXIT) forget(c, ev->member);
            *out = ev;
            return 1;
        }
        if (c->closed) return CONSORT_DISCONNECTED;
        int wait = timeout_ms;
        if (timeout_ms > 0) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            long spent = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
            if (spent >= timeout_ms) return 0;
            wait = (int)(timeout_ms - spent);
        }
        int r = read_some(c, wait);
        if (r < 0) return r;
        if (r == 0 && timeout_ms >= 0) {
            if (timeout_ms == 0) return 0;
        }
    }
}
