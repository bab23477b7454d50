/* The event stream (DESIGN §5.2, §6 events.subscribe): denials and
 * lifecycle events fanned out to subscribed connections as `event`
 * notifications. */
#pragma once

#include <stdint.h>
#include <cjson/cJSON.h>
#include "sandboxd/manager.h"
#include "sandboxd/rpc.h"

/* Kinds of events. Denials carry {layer, destination?, host?, port?, rule,
 * message}; lifecycle events {status}. */
#define EVENT_DENIED "denied"
#define EVENT_SANDBOX "sandbox"
/* sandbox-netd of a session died and was started again: {restarts, pid,
 * reason}. */
#define EVENT_NETD_RESTARTED "netd_restarted"
/* A command was killed by the kernel's OOM killer at the session's memory
 * limit: {cmdId, memoryLimitBytes, message}. */
#define EVENT_OOM "oom"

/* Sends `event` {time, kind, sandbox, ...fields} to every subscriber whose
 * filter matches (sandbox name and kinds). Takes ownership of fields (an
 * object, may be NULL). Loop thread only. */
void events_emit(manager *m, const char *kind, const char *sandbox, cJSON *fields);

/* events_emit() for an event of sandbox `sandbox` whose owner (tenant.h;
 * NULL: admin) is given rather than looked up: for an event sent once the
 * sandbox has left the registry ("deleted"), when its name may already be
 * another's. */
void events_emit_owned(manager *m, const char *kind, const char *sandbox, const char *owner, cJSON *fields);

/* Registers events.subscribe and policy.check. */
void register_event_methods(manager *m, rpc_server *s);

/* A connection went away: drop its subscriptions. */
void events_conn_closed(manager *m, rpc_conn *c);

/* policy.check's destination from a URL: the host as written in the
 * authority (userinfo dropped, "[v6]" brackets kept so pol_host_parse()
 * reads it as an address) in a new string *ret_host (caller frees), and the
 * port: the URL's own, else the scheme's default (http/ws 80, https/wss
 * 443). Returns 0, or -EINVAL with *ret_err (field "url") for a URL with no
 * scheme or host, a bad port, or a scheme without a default port and no
 * port given; -ENOMEM. */
int events_parse_url(const char *url, char **ret_host, uint16_t *ret_port, sb_error **ret_err);
