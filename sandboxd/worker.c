/* Worker threads (worker.h): one detached thread per job, completions handed
 * back to the event loop through a mutex-protected queue and an eventfd that
 * the loop watches.
 *
 * Threads: worker_init, worker_submit, worker_in_flight and worker_shutdown
 * run on the event loop thread only; the job threads touch nothing but the
 * completion queue (under the lock) and the eventfd. Signals: jobs inherit
 * the loop thread's signal mask, in which sandboxd blocks the signals that
 * sd-event handles, so a SIGTERM is never delivered to a worker. */
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include "libcore/log.h"
#include "sandboxd/worker.h"

/* How long worker_shutdown() waits for jobs still running their work. A job
 * stuck longer (a hung download) is abandoned: the process is exiting. */
#define WORKER_SHUTDOWN_WAIT_SEC 30

typedef struct job {
        worker_fn work, done;
        void *userdata;
        bool post;                /* worker_post(): no thread, not counted in flight */
        struct job *next;
} job;

static struct {
        pthread_mutex_t lock;
        pthread_cond_t idle;      /* signalled when `running` drops */
        int efd;
        sd_event_source *src;
        job *head, *tail;         /* finished, waiting for `done` (under lock) */
        unsigned running;         /* threads inside work() (under lock) */
        unsigned in_flight;       /* submitted, done() not yet run (loop thread) */
        bool shutting_down;
        /* worker_submit_soon: jobs whose thread starts after the I/O of
         * the loop's next poll (loop thread only; linked by ->next). */
        job *soon_head, *soon_tail;
        sd_event_source *soon_src;
} w = {
        .lock = PTHREAD_MUTEX_INITIALIZER,
        .idle = PTHREAD_COND_INITIALIZER,
        .efd = -EBADF,
};

/* Appends j to the completion queue; called with the lock held. */
static void queue_locked(job *j) {
        if (w.tail)
                w.tail->next = j;
        else
                w.head = j;
        w.tail = j;
}

static void *job_thread(void *arg) {
        job *j = arg;
        j->work(j->userdata);
        pthread_mutex_lock(&w.lock);
        queue_locked(j);
        /* Under the lock: worker_shutdown() closes the eventfd only once
         * `running` is zero, so the fd cannot be closed (or its number
         * reused) between our check and this write. The counter cannot
         * overflow: one increment per job. */
        uint64_t one = 1;
        (void) !write(w.efd, &one, sizeof(one));
        w.running--;
        pthread_cond_broadcast(&w.idle);
        pthread_mutex_unlock(&w.lock);
        return NULL;
}

/* Runs every queued completion, in completion order. */
static void run_done(void) {
        pthread_mutex_lock(&w.lock);
        job *j = w.head;
        w.head = w.tail = NULL;
        pthread_mutex_unlock(&w.lock);
        while (j) {
                job *next = j->next;
                if (!j->post)
                        w.in_flight--;
                if (j->done)
                        j->done(j->userdata);
                free(j);
                j = next;
        }
}

static int efd_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        uint64_t n;
        (void) !read(fd, &n, sizeof(n));
        run_done();
        return 0;
}

int worker_init(sd_event *event) {
        if (w.src)
                return -EBUSY;
        int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fd < 0)
                return -errno;
        int r = sd_event_add_io(event, &w.src, fd, EPOLLIN, efd_cb, NULL);
        if (r < 0) {
                close(fd);
                return r;
        }
        w.efd = fd;
        w.shutting_down = false;
        return 0;
}

/* Starts j's thread. Returns 0, or a negative errno (j not taken). */
static int start_thread(job *j) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_mutex_lock(&w.lock);
        w.running++;
        pthread_t t;
        int r = pthread_create(&t, &attr, job_thread, j);
        if (r != 0)
                w.running--;
        pthread_mutex_unlock(&w.lock);
        pthread_attr_destroy(&attr);
        return -r;
}

int worker_submit(worker_fn work, worker_fn done, void *userdata) {
        if (!w.src || w.shutting_down)
                return -ECANCELED;
        job *j = calloc(1, sizeof(*j));
        if (!j)
                return -ENOMEM;
        *j = (job) { .work = work, .done = done, .userdata = userdata };
        int r = start_thread(j);
        if (r < 0) {
                free(j);
                return r;
        }
        w.in_flight++;
        return 0;
}

/* Runs the jobs waiting to start: each on a thread of its own, or here (work, then
 * done) when no thread can be had or the daemon is stopping. */
static void run_soon_jobs(void) {
        job *j = w.soon_head;
        w.soon_head = w.soon_tail = NULL;
        while (j) {
                job *next = j->next;
                j->next = NULL;
                if (w.shutting_down || start_thread(j) < 0) {
                        w.in_flight--;
                        j->work(j->userdata);
                        if (j->done)
                                j->done(j->userdata);
                        free(j);
                }
                j = next;
        }
}

static int soon_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        run_soon_jobs();
        return 0;
}

int worker_submit_soon(worker_fn work, worker_fn done, void *userdata) {
        if (!w.src || w.shutting_down)
                return -ECANCELED;
        /* A timer due at once, not a defer source: one of those is pending
         * before the loop even polls, and would run ahead of the I/O the
         * poll would find (a reply to write). */
        if (!w.soon_src) {
                int r = sd_event_add_time_relative(sd_event_source_get_event(w.src), &w.soon_src, CLOCK_MONOTONIC,
                                                   0, 0, soon_cb, NULL);
                if (r < 0)
                        return r;
                /* Just behind the normal sources (not IDLE: a loop never
                 * idle under load would never start the job). */
                (void)sd_event_source_set_priority(w.soon_src, SD_EVENT_PRIORITY_NORMAL + 1);
        } else if (!w.soon_head && (sd_event_source_set_time_relative(w.soon_src, 0) < 0 ||
                                    sd_event_source_set_enabled(w.soon_src, SD_EVENT_ONESHOT) < 0))
                return -EIO;
        job *j = calloc(1, sizeof(*j));
        if (!j)
                return -ENOMEM;
        *j = (job) { .work = work, .done = done, .userdata = userdata };
        if (w.soon_tail)
                w.soon_tail->next = j;
        else
                w.soon_head = j;
        w.soon_tail = j;
        w.in_flight++;
        return 0;
}

int worker_post(worker_fn fn, void *userdata) {
        job *j = calloc(1, sizeof(*j));
        if (!j)
                return -ENOMEM;
        *j = (job) { .done = fn, .userdata = userdata, .post = true };
        pthread_mutex_lock(&w.lock);
        /* Only from a job's work(), so `running` is above zero and the
         * eventfd open (see job_thread). */
        queue_locked(j);
        uint64_t one = 1;
        (void) !write(w.efd, &one, sizeof(one));
        pthread_mutex_unlock(&w.lock);
        return 0;
}

unsigned worker_in_flight(void) {
        return w.in_flight;
}

/* Waits (bounded) for running jobs to finish their work, runs their `done`
 * callbacks here on the loop thread so their owners can release what the
 * jobs held, then closes the channel. Call it while the owners of pending
 * jobs still exist (sandboxd: before manager_free). New submissions fail
 * with -ECANCELED from the first call on. */
void worker_shutdown(void) {
        if (!w.src)
                return;
        w.shutting_down = true;
        /* Jobs still waiting to start run now, here. */
        run_soon_jobs();
        w.soon_src = sd_event_source_disable_unref(w.soon_src);
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += WORKER_SHUTDOWN_WAIT_SEC;
        pthread_mutex_lock(&w.lock);
        while (w.running > 0)
                if (pthread_cond_timedwait(&w.idle, &w.lock, &deadline) == ETIMEDOUT)
                        break;
        unsigned stuck = w.running;
        pthread_mutex_unlock(&w.lock);
        run_done();
        if (stuck > 0) {
                /* Leave the eventfd open: the stuck threads still write to it. */
                log_warning("worker: %u job(s) still running at exit; abandoning them", stuck);
                w.src = sd_event_source_disable_unref(w.src);
                return;
        }
        w.src = sd_event_source_disable_unref(w.src);
        close(w.efd);
        w.efd = -EBADF;
}
