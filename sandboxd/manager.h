/* The sandbox registry: sandboxes, sessions and commands, and the JSON-RPC
 * methods that act on them (sandbox.*, command.*, fs.*, daemon.info). */
#pragma once

#include <systemd/sd-event.h>
#include "sandboxd/config.h"
#include "sandboxd/rpc.h"

typedef struct manager manager;

/* Prepares state and run directories, cgroups, the host nftables table, and
 * reconciles leftovers from an earlier run. Caller owns *ret. */
int manager_new(sd_event *event, const daemon_config *cfg, manager **ret, sb_error **ret_err);

/* Registers every method on the server and the connection close hook. */
void manager_register_methods(manager *m, rpc_server *server);

/* How many sandboxes the daemon knows (*ret_all) and how many of them have
 * a running session (*ret_running): daemon.info's figures, and the
 * service's STATUS= line (sd_notify(3)). */
void manager_count(const manager *m, unsigned *ret_all, unsigned *ret_running);

/* Stops every session and removes host-wide objects (daemon exit). */
void manager_free(manager *m);
/* The event loop ended (SIGTERM): from now on a closing connection does not
 * hang up the commands it waited for, which live on for the next daemon
 * (live restore); call before the server closes its connections. */
void manager_stopping(manager *m);
/* SIGTERM: manager_stopping(), and every caller waiting on a command is
 * answered `unavailable` (commands_drain), before rpc_server_stop() lets
 * the other requests in flight finish. */
void manager_drain(manager *m);
