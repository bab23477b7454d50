/* The nftables expression and set-element builders that policy/nftgen.c
 * (a session's rules in the daemon's namespace) and policy/nftpod.c (a
 * pod's table inside its namespace) both use: thin wrappers over libnftnl
 * that load into register 1 and compare against it, so every rule built
 * from them reads as nft(8) would print it. Expression semantics: the
 * kernel's include/uapi/linux/netfilter/nf_tables.h. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>

/* Appends expression e to rule r, which takes ownership. e may be NULL
 * (its allocation failed): returns -ENOMEM then, else 0. */
int pol_nftx_expr(struct nftnl_rule *r, struct nftnl_expr *e);

/* Appends a `name` expression ("meta", "ct", ...) that loads key `key`
 * (set as attribute key_attr) into register 1 (attribute dreg_attr).
 * Returns 0 or -ENOMEM. */
int pol_nftx_load(struct nftnl_rule *r, const char *name, uint32_t key_attr, uint32_t key, uint32_t dreg_attr);

/* Appends `cmp eq`: register 1 equals the len bytes at data (copied).
 * Returns 0 or -ENOMEM. */
int pol_nftx_cmp(struct nftnl_rule *r, const void *data, uint32_t len);

/* Appends a payload load of len bytes at offset from header base
 * (NFT_PAYLOAD_NETWORK_HEADER, ...) into register 1. Returns 0 or
 * -ENOMEM. */
int pol_nftx_payload(struct nftnl_rule *r, uint32_t base, uint32_t offset, uint32_t len);

/* pol_nftx_payload() into register dreg (an NFT_REG_* or NFT_REG32_*; the
 * kernel zeroes the rest of a partly written 32-bit register), for keys
 * built from several loads. 0, or -ENOMEM. */
int pol_nftx_payload_to(struct nftnl_rule *r, uint32_t base, uint32_t offset, uint32_t len, uint32_t dreg);

/* Appends `ct <key> & mask != 0` (key NFT_CT_STATE with
 * NF_CT_STATE_BIT()s: `ct state related`; NFT_CT_STATUS with IPS_*
 * bits: `ct status dnat`), as nft emits a bit test (bitwise into
 * register 1, then cmp neq 0). Returns 0 or -ENOMEM. */
int pol_nftx_ct_bits(struct nftnl_rule *r, uint32_t key, uint32_t mask);

/* Appends a verdict: code NF_ACCEPT, NF_DROP, or NFT_GOTO / NFT_JUMP to
 * `chain` (copied; NULL for the others). Returns 0 or -ENOMEM. */
int pol_nftx_verdict(struct nftnl_rule *r, int code, const char *chain);

/* Adds to set s an element with the len-byte key (copied), element flags
 * (NFT_SET_ELEM_INTERVAL_END, ...; 0 for none) and a timeout in
 * milliseconds (0: the set's own). s takes ownership. Returns 0 or
 * -ENOMEM. */
int pol_nftx_key_elem(struct nftnl_set *s, const void *key, size_t len, uint32_t flags, uint64_t timeout_ms);
