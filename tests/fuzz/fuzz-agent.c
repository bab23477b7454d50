/* The daemon's decoder of the agent protocol (libcore/agent.h): packets from
 * sandbox-init, which root inside a sandbox can forge, through
 * agent_handle_packet (sandboxd/agent.c) into a session of a stand-in
 * manager. The input is a sequence of packets separated by newlines (a
 * packet of the SOCK_SEQPACKET channel is one JSON object). Two file
 * requests are pending at the start. Invariants: a command exists only if
 * a "list" named it with a well-formed meta; its id is "cmd-" and 16
 * characters; its logs never hold more than their cap; each pending file
 * request is answered at most once. */
#include <sys/socket.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "fuzz.h"
#include "sandboxd/config.h"
#include "sandboxd/internal.h"

static daemon_config cfg;
static manager m;
static sandbox sb;
static session sess;
static int peer = -1;
static unsigned answered[3];

static void on_fs(session *s, cJSON *result, int err, const char *message, void *userdata) {
        unsigned i = (unsigned)(uintptr_t)userdata;
        FUZZ_ASSERT(i < 3);
        answered[i]++;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        cfg.command_log_bytes = 4096;
        m.cfg = &cfg;
        sb.m = &m;
        sb.name = "fuzz";
        sess.sb = &sb;
        int sv[2];
        FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0);
        sess.agent_fd = sv[0];
        peer = sv[1];
        sess.outq_tail = &sess.outq;
        return 0;
}

static void reset(void) {
        while (m.commands) {
                command *c = m.commands;
                m.commands = c->next;
                command_free(c);
        }
        m.n_commands = 0;
        while (sess.fs_ops) {
                agent_fs_op *o = sess.fs_ops;
                sess.fs_ops = o->next;
                free(o);
        }
        sess.next_cmd_id = 0;
        sess.next_fs_req = 0;
        char buf[4096];
        while (recv(peer, buf, sizeof(buf), MSG_DONTWAIT) > 0)
                ;
        memset(answered, 0, sizeof(answered));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        reset();
        for (unsigned i = 1; i <= 2; i++) {
                cJSON *op = cJSON_CreateObject();
                cJSON_AddStringToObject(op, "action", "stat");
                cJSON_AddStringToObject(op, "path", "/workspace");
                FUZZ_ASSERT(agent_fs(&sess, op, on_fs, (void *)(uintptr_t)i) == 0);
        }
        for (size_t off = 0; off < size;) {
                const uint8_t *nl = memchr(data + off, '\n', size - off);
                size_t len = nl ? (size_t)(nl - (data + off)) : size - off;
                agent_handle_packet(&sess, (const char *)data + off, len);
                off += len + 1;
        }
        for (command *c = m.commands; c; c = c->next) {
                FUZZ_ASSERT(c->sess == &sess && c->sb == &sb);
                FUZZ_ASSERT(strlen(c->cmd_id) == 20 && strncmp(c->cmd_id, "cmd-", 4) == 0);
                FUZZ_ASSERT(c->agent_id >= 1);
                FUZZ_ASSERT(c->out.len <= c->out.cap && c->err.len <= c->err.cap);
        }
        FUZZ_ASSERT(answered[1] <= 1 && answered[2] <= 1 && answered[0] == 0);
        return 0;
}
