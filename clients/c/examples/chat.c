#define _POSIX_C_SOURCE 200809L
/* chat: joins a group through consortd, casts each line of standard input,
 * prints views and deliveries.   chat SOCKET GROUP */
#include <consort.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: chat SOCKET GROUP\n");
        return 2;
    }
    consort_client *c;
    uint32_t m;
    /* Unbuffered: a line left in stdio's buffer would not wake poll. */
    setvbuf(stdin, NULL, _IONBF, 0);
    if (consort_connect(argv[1], "chat", &c) != 0 || consort_join(c, argv[2], "vsync", NULL, NULL, 0, 0, &m) != 0) {
        fprintf(stderr, "chat: %s\n", consort_error(c));
        consort_close(c);
        return 1;
    }
    printf("member %s\n", consort_member_id(c, m));
    int input = 1;
    for (;;) {
        consort_event *ev;
        int r;
        while ((r = consort_next_event(c, 0, &ev)) == 1) {
            if (ev->type == CONSORT_VIEW) printf("view %s: %zu members\n", ev->vid, ev->n_members);
            else if (ev->type == CONSORT_CAST)
                printf("%s: %.*s\n", ev->origin, (int)ev->len, (const char *)ev->payload);
            else if (ev->type == CONSORT_EXIT) {
                consort_event_free(ev);
                consort_close(c);
                return 0;
            }
            consort_event_free(ev);
        }
        fflush(stdout);
        if (r < 0) break;
        struct pollfd p[2] = {{.fd = consort_fd(c), .events = POLLIN}, {.fd = 0, .events = POLLIN}};
        if (poll(p, input ? 2 : 1, -1) < 0) break;
        if (input && p[1].revents) {
            char line[4096];
            if (!fgets(line, sizeof line, stdin)) {
                input = 0;
                consort_leave(c, m);
                continue;
            }
            line[strcspn(line, "\n")] = 0;
            int e = consort_cast(c, m, line, strlen(line), NULL);
            if (e != 0) fprintf(stderr, "chat: cast refused: %s\n", consort_error(c));
        }
    }
    fprintf(stderr, "chat: %s\n", consort_error(c));
    consort_close(c);
    return 1;
}
