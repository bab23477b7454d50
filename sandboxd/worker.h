/* Slow work off the event loop: each job runs `work` on a fresh thread, then
 * `done` on the event loop thread. A thread per job (not a pool) so jobs may
 * unshare(CLONE_FS) / chroot / setfsuid their own thread freely. */
#pragma once

#include <systemd/sd-event.h>

typedef void (*worker_fn)(void *userdata);

/* Prepares the completion channel (an eventfd source on `event`). */
int worker_init(sd_event *event);
void worker_shutdown(void);

/* Runs work(userdata) on a new detached thread, then done(userdata) on the
 * event loop thread. Returns 0 or a negative errno (then neither runs). */
int worker_submit(worker_fn work, worker_fn done, void *userdata);

/* From inside a job's work() only: queues fn(userdata) to run on the event
 * loop thread, in order with that job's other posts and before its `done`
 * (one queue, first in first out), so fn may use what the job owns. For
 * news a job has before it ends (progress). Returns 0 or -ENOMEM (then fn
 * does not run). */
int worker_post(worker_fn fn, void *userdata);

/* worker_submit(), its thread started only once the loop has dispatched
 * the normal-priority sources its next poll finds (an sd-event timer due
 * at once, at SD_EVENT_PRIORITY_NORMAL + 1): e.g. after a pending answer is written, for
 * background work whose start would delay it. Loop thread only. The same
 * returns; at worker_shutdown() a job still waiting runs there (work, then
 * done), as does one whose thread cannot be started. */
int worker_submit_soon(worker_fn work, worker_fn done, void *userdata);

/* Number of jobs started and not yet done. */
unsigned worker_in_flight(void);
