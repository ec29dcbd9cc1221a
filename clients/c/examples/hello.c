/* hello: the README's C example. Joins group "hello" through consortd with
 * total order, casts one message, prints it when it is delivered, leaves.
 *   hello SOCKET */
#include <consort.h>
#include <stdio.h>

int main(int argc, char **argv) {
    const char *sock = argc > 1 ? argv[1] : "/run/consort/consortd.sock";
    consort_client *c;
    consort_event *ev;
    uint32_t m;
    if (consort_connect(sock, "hello", &c) != 0 || consort_join(c, "hello", "vsync,Total", NULL, NULL, 0, 0, &m) != 0) {
        fprintf(stderr, "hello: %s\n", consort_error(c));
        consort_close(c);
        return 1;
    }
    consort_cast(c, m, "hello", 5, NULL);
    while (consort_next_event(c, 5000, &ev) == 1) {
        int delivered = ev->type == CONSORT_CAST;
        if (delivered) printf("%s: %.*s\n", ev->origin, (int)ev->len, (const char *)ev->payload);
        consort_event_free(ev);
        if (delivered) break;
    }
    consort_leave(c, m);
    consort_close(c);
    return 0;
}
