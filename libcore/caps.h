/* Capabilities of sandbox commands (DESIGN §4): none at all for the sandbox
 * user, a Docker-like default set for root (`sudo`). Applied in the
 * command's child in two steps around the identity change, because the
 * bounding set can only be shrunk while CAP_SETPCAP is still held. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* The capabilities (bit n = capability n) a command running as uid keeps:
 * the default set of core_caps_root_set() for uid 0, nothing otherwise. */
uint64_t core_caps_for_uid(uid_t uid);

/* The set a root command keeps. Source: Docker's default capabilities (moby
 * oci/caps/defaults.go) without CAP_MKNOD (see caps.c). */
uint64_t core_caps_root_set(void);

/* The calling thread's bounding set (bit n = capability n). */
uint64_t core_caps_bounding(void);

/* The capabilities the running kernel knows, as a mask (bit n = capability
 * n; CAP_LAST_CAP + 1 bits, at most 64). Asked of the kernel once (libcap's
 * cap_max_bits), so call it before a child that must not allocate runs. */
uint64_t core_caps_known_mask(void);

/* Step 1, in the child while still root with init's full set, before
 * setresuid: drops every capability not in keep from the bounding set,
 * clears the ambient set and limits the inheritable set to keep. Needs
 * CAP_SETPCAP. Allocates nothing (safe in a CLONE_VM child). Returns 0 or
 * a negative errno. */
int core_caps_bound(uint64_t keep);

/* core_caps_bound() for a caller that knows its bounding set: have (bit n =
 * capability n) must hold every capability still in it (a superset is
 * fine: dropping an absent one is a no-op), which spares the reads. */
int core_caps_bound_known(uint64_t keep, uint64_t have);

/* Step 2, after setresuid and before exec: sets permitted, effective and
 * inheritable to exactly keep (a uid change from root already emptied
 * permitted and effective; this makes the result independent of that rule
 * and covers root, whose sets a uid change keeps). Allocates nothing.
 * Returns 0 or a negative errno (-EPERM when keep holds a capability the
 * process lacks). */
int core_caps_set(uint64_t keep);

/* Checks that the calling process holds exactly keep in its permitted,
 * effective, inheritable and bounding sets and nothing in ambient.
 * Returns 0, -EPERM on a mismatch, or another negative errno. */
int core_caps_verify(uint64_t keep);

/* Sets (on) or clears (off) capability `cap` (a CAP_* number) in the
 * effective set of the calling thread only (capset(2) acts per thread;
 * libcap cap_set_proc), leaving the permitted set as it is, so a cleared
 * one can be set again. Returns 1 when the capability was in the
 * effective set before the call, 0 when it was not (then nothing is
 * changed), or a negative errno (-EPERM: setting a capability that is not
 * permitted). */
int core_caps_effective(int cap, bool on);
