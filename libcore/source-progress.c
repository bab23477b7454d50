/* The progress callback of a source fetch (source.h): a per-thread
 * callback the git and tarball code report to, so that sandboxd can tell a
 * waiting client what a slow create is doing. */
#include "libcore/source-internal.h"
#include "libcore/source.h"

static __thread core_source_progress_fn thread_fn;
static __thread void *thread_userdata;

void core_source_set_progress(core_source_progress_fn fn, void *userdata) {
        thread_fn = fn;
        thread_userdata = fn ? userdata : NULL;
}

core_source_progress_fn core_source_get_progress(void **ret_userdata) {
        *ret_userdata = thread_userdata;
        return thread_fn;
}

void source_progress(const char *stage, uint64_t bytes, uint64_t total_bytes, uint64_t objects,
                     uint64_t total_objects) {
        if (!thread_fn)
                return;
        core_source_progress p = {.stage = stage, .bytes = bytes, .total_bytes = total_bytes,
                                  .objects = objects, .total_objects = total_objects};
        thread_fn(&p, thread_userdata);
}
