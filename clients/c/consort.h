/*
 * consort.h - a C client of consortd, the Consort daemon
 *
 * SYNOPSIS
 *     #include <consort.h>
 *     cc app.c $(pkg-config --cflags --libs consort-client)
 *
 * DESCRIPTION
 *     consortd holds Consort process groups (virtual synchrony, total order,
 *     ...) for the programs of one machine, which connect to its Unix socket
 *     and speak the protocol of doc/protocol.md. This library is that
 *     protocol: connect, join groups, cast and send, and read upcalls (views,
 *     deliveries, blocks, flow control, exits) as events.
 *
 *     A connection is blocking and single-threaded: every request waits for
 *     its reply (but casts and sends in protocol version 2, the default: see
 *     consort_cast); upcalls that arrive meanwhile are queued, in order, for
 *     consort_next_event(). Use one connection per thread, or lock around it.
 *
 *     Write batching (version 2): casts and sends are queued in the client
 *     and written together, in one write(2), when the first of these comes:
 *     the queue holds the batch size (64 KiB by default, consort_set_batch);
 *     the client is about to wait for the daemon (consort_next_event, even
 *     with timeout 0, and every call that waits for a reply, whose request
 *     goes out in the same write behind them); consort_flush(); and
 *     consort_close(). A program that waits on consort_fd() with poll(2)
 *     itself calls consort_flush() first, or its casts may wait.
 *
 * RETURN VALUES
 *     Functions returning int return 0 on success; a positive CONSORT_E_*
 *     code when the daemon refused the request (the connection goes on); or
 *     CONSORT_DISCONNECTED (-1) when the connection is gone (a system error,
 *     the daemon closed it, or it sent what this library cannot read). In the
 *     last two cases consort_error() says why, in one line.
 *
 * EXAMPLE
 *     consort_client *c;
 *     uint32_t m;
 *     consort_event *ev;
 *     if (consort_connect("/run/consort/consortd.sock", "chat", &c) != 0) {
 *         fprintf(stderr, "%s\n", consort_error(c));
 *         consort_close(c);
 *         return 1;
 *     }
 *     consort_join(c, "chat", "vsync,Total", "", NULL, 0, 0, &m);
 *     consort_cast(c, m, "hello", 5, NULL);
 *     while (consort_next_event(c, 5000, &ev) == 1) {
 *         if (ev->type == CONSORT_CAST)
 *             printf("%s: %.*s\n", ev->origin, (int)ev->len, (const char *)ev->payload);
 *         consort_event_free(ev);
 *     }
 *     consort_close(c);
 *
 * SEE ALSO
 *     consortd --help, doc/protocol.md, examples/chat.c, examples/logmember.c
 */
#ifndef CONSORT_H
#define CONSORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The highest protocol version this library speaks; it speaks 1 too. */
#define CONSORT_PROTOCOL_VERSION 2

/* The connection is gone: consort_error() says why. */
#define CONSORT_DISCONNECTED (-1)

/* The daemon's refusals (doc/protocol.md, "Error codes"). */
#define CONSORT_E_MALFORMED 1
#define CONSORT_E_VERSION 2
#define CONSORT_E_TOO_BIG 3      /* a message over the stack's limit, or a frame over the daemon's */
#define CONSORT_E_FLOW_CONTROL 4 /* wait for a FLOW event with blocked = 0 */
#define CONSORT_E_NOT_MEMBER 5   /* a send to a member not in the view */
#define CONSORT_E_LEAVING 6
#define CONSORT_E_EXITED 7
#define CONSORT_E_NO_SUCH_HANDLE 8
#define CONSORT_E_HANDLE_IN_USE 9
#define CONSORT_E_BAD_PROPS 10
#define CONSORT_E_BAD_PARAMS 11
#define CONSORT_E_BAD_ADDRESS 12
#define CONSORT_E_JOIN_FAILED 13
#define CONSORT_E_NOT_HELLO 14
#define CONSORT_E_OVERLOADED 15
#define CONSORT_E_BAD_SWITCH 16
#define CONSORT_E_NOT_PRIMARY 17
#define CONSORT_E_NOT_ALLOWED 18 /* not on the socket's allow-list, or no daemon token over TCP */

/* consort_join() flag: report SENT and LOST events for each message (for
 * member logs: the view each message was sent in). */
#define CONSORT_REPORT 1u

typedef struct consort_client consort_client;

enum consort_event_type {
    CONSORT_VIEW = 1, /* a view was installed: vid, ltime, rank, coordinator, members, joined, left, why */
    CONSORT_CAST,     /* a cast was delivered: origin, payload, len */
    CONSORT_SEND,     /* a point-to-point message was delivered: origin, payload, len */
    CONSORT_BLOCK,    /* a view change started: what is sent now goes out in the next view */
    CONSORT_FLOW,     /* blocked = 1: flow control asks to pause; 0: go on */
    CONSORT_EXIT,     /* the member has left the group; its handle is free */
    CONSORT_SENT,     /* (CONSORT_REPORT) message req entered the stack in view, as kind */
    CONSORT_LOST,     /* (CONSORT_REPORT) message req, accepted, will not be delivered: reason */
    CONSORT_REFUSED   /* (version 2) cast or send req was refused: code (CONSORT_E_*), reason */
};

typedef struct consort_event {
    enum consort_event_type type;
    uint32_t member; /* the handle consort_join() gave */

    /* CONSORT_VIEW */
    const char *vid;
    uint64_t ltime;
    uint32_t rank;
    const char *coordinator;
    size_t n_members;
    const char *const *members; /* rank order */
    size_t n_joined;
    const char *const *joined;
    size_t n_left;
    const char *const *left;
    const char *const *why; /* n_left reasons: "left", "excluded: ..." */

    /* CONSORT_CAST, CONSORT_SEND */
    const char *origin;
    const void *payload;
    size_t len;

    /* CONSORT_FLOW */
    int blocked;

    /* CONSORT_SENT, CONSORT_LOST, CONSORT_REFUSED */
    uint32_t req;
    int kind; /* 0: cast, 1: send */
    const char *view;
    const char *reason;
    int code; /* CONSORT_REFUSED: a CONSORT_E_* code (or one this library does not know) */
} consort_event;

/* consort_connect: connects to the daemon at address (a Unix socket path, or
 * "tcp:127.0.0.1:PORT") and says HELLO, offering protocol versions 1 to
 * CONSORT_PROTOCOL_VERSION; name appears in the daemon's logs. *out is set
 * even on failure (for consort_error), and must be closed. */
int consort_connect(const char *address, const char *name, consort_client **out);

/* consort_connect_version: consort_connect offering versions 1 to
 * max_version only (1: every cast and send waits for its reply). */
int consort_connect_version(const char *address, const char *name, int max_version, consort_client **out);

/* consort_connect_token: consort_connect_version presenting, over TCP, the
 * text of token_file (without surrounding blanks) in HELLO: a daemon run
 * with --token requires it. consort_connect and consort_connect_version
 * present the file the environment variable CONSORT_TOKEN_FILE names, if
 * set; so does this one with token_file NULL. A token is never sent on a
 * Unix socket (the daemon checks the peer's credentials there). */
int consort_connect_token(const char *address, const char *name, int max_version, const char *token_file,
                          consort_client **out);

/* consort_version: the protocol version agreed at HELLO (1 or 2). */
int consort_version(const consort_client *c);

/* consort_close: writes the casts and sends queued (consort_flush), closes
 * the connection and frees everything; the daemon fails this client's
 * members out of their groups (they leave). NULL is allowed. */
void consort_close(consort_client *c);

/* consort_error: why the last call failed, one line (never NULL). */
const char *consort_error(const consort_client *c);

/* consort_fd: the socket, to wait on with poll(2) before
 * consort_next_event(c, 0, ...). Upcalls may already be queued: call
 * consort_pending() first; and casts may be queued: call consort_flush()
 * first (or consort_next_event(c, 0, ...), which flushes). */
int consort_fd(const consort_client *c);

/* consort_pending: the number of upcalls queued, not yet taken. */
size_t consort_pending(const consort_client *c);

/* consort_max_frame: the largest frame the daemon accepts (from HELLO). */
uint32_t consort_max_frame(const consort_client *c);

/* consort_join: joins group (props: "vsync" if NULL or empty, such as
 * "vsync,Total"; params: "NAME=VALUE,..." or NULL; peers: where to look for
 * the other members, n_peers addresses "IP:PORT" or "IP:PORT-PORT", none for
 * the daemon's). On success *member is the member's handle. A VIEW event of
 * the member alone follows at once, then views as the group forms. */
int consort_join(consort_client *c, const char *group, const char *props, const char *params,
                 const char *const *peers, size_t n_peers, unsigned flags, uint32_t *member);

/* consort_member_id: the member's id ("IP:PORT#INCARNATION"), or NULL for a
 * handle that is not a member. Valid until the member exits. */
const char *consort_member_id(const consort_client *c, uint32_t member);

/* consort_max_message: the largest message the member's stack accepts. */
uint64_t consort_max_message(const consort_client *c, uint32_t member);

/* consort_cast: sends len bytes to every member of the view, this one
 * included. *req (if not NULL) is the message's number, named by SENT,
 * LOST and REFUSED events. Refusals: CONSORT_E_FLOW_CONTROL,
 * CONSORT_E_TOO_BIG, CONSORT_E_LEAVING, CONSORT_E_EXITED,
 * CONSORT_E_NO_SUCH_HANDLE.
 *
 * In version 1 the call waits for the daemon's answer and returns the
 * refusal. In version 2 (the default) it queues the request and returns 0
 * without waiting (see "Write batching" above for when the queue is
 * written): a refused message comes back as a CONSORT_REFUSED event naming
 * req, and every message cast before a call that waits for a reply
 * (consort_ping, say) and not refused by then was taken. Only a message
 * over consort_max_frame() is refused at once (CONSORT_E_TOO_BIG), and
 * CONSORT_DISCONNECTED comes when a write the call made failed. A client
 * that casts a lot must read its events: see consort_next_event. */
int consort_cast(consort_client *c, uint32_t member, const void *data, size_t len, uint32_t *req);

/* consort_send: sends to one member of the view (its id); also
 * CONSORT_E_NOT_MEMBER. */
int consort_send(consort_client *c, uint32_t member, const char *dst, const void *data, size_t len,
                 uint32_t *req);

/* consort_flush: writes the casts and sends queued (version 2), in one
 * write; 0, or CONSORT_DISCONNECTED if the connection is gone (what was
 * queued is dropped). Blocks until the socket has taken them all. */
int consort_flush(consort_client *c);

/* consort_queued: the bytes of casts and sends queued, not written yet. */
size_t consort_queued(const consort_client *c);

/* consort_set_batch: the queue of casts and sends is written once it holds
 * bytes (64 KiB by default); 0 writes each one at once, as it is made. */
void consort_set_batch(consort_client *c, size_t bytes);

/* consort_leave: leaves the group cleanly; an EXIT event follows. */
int consort_leave(consort_client *c, uint32_t member);

/* consort_suspect: asks the group to treat these members as failed. */
int consort_suspect(consort_client *c, uint32_t member, const char *const *ids, size_t n_ids);

/* consort_block_ok: acknowledges a BLOCK event (the daemon does not wait
 * for it: messages given during a view change wait in the group's queue). */
int consort_block_ok(consort_client *c, uint32_t member);

/* consort_switch: asks the group to change its stack at the next view. */
int consort_switch(consort_client *c, uint32_t member, const char *props, const char *params);

/* consort_ping: a round trip to the daemon. */
int consort_ping(consort_client *c);

/* consort_next_event: the next upcall, waiting up to timeout_ms
 * milliseconds (-1: for ever; 0: not at all). Returns 1 and sets *ev (free
 * it with consort_event_free), 0 on timeout, CONSORT_DISCONNECTED once the
 * connection is gone.
 *
 * Upcalls left unread wait in the daemon, up to a cap (max_queue, 8 MiB by
 * default): over it the client is failed out. Past half of it the daemon
 * sends each of the client's members a CONSORT_FLOW event with blocked = 1
 * and refuses their casts and sends (CONSORT_E_FLOW_CONTROL) until the
 * unread upcalls are under a quarter of it, when blocked = 0 follows
 * (doc/protocol.md, "Backpressure"). */
int consort_next_event(consort_client *c, int timeout_ms, consort_event **ev);

/* consort_event_free: frees an event and everything it points to. */
void consort_event_free(consort_event *ev);

/* consort_strerror: the name of a CONSORT_E_* code ("flow-control"). */
const char *consort_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif
