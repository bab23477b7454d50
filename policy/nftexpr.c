/* Expression and set-element builders shared by nftgen.c and nftpod.c
 * (nftexpr.h). */
#include <errno.h>
#include <linux/netfilter/nf_tables.h>
#include "policy/nftexpr.h"

int pol_nftx_expr(struct nftnl_rule *r, struct nftnl_expr *e) {
        if (!e)
                return -ENOMEM;
        nftnl_rule_add_expr(r, e);
        return 0;
}

int pol_nftx_load(struct nftnl_rule *r, const char *name, uint32_t key_attr, uint32_t key, uint32_t dreg_attr) {
        struct nftnl_expr *e = nftnl_expr_alloc(name);
        if (e) {
                nftnl_expr_set_u32(e, key_attr, key);
                nftnl_expr_set_u32(e, dreg_attr, NFT_REG_1);
        }
        return pol_nftx_expr(r, e);
}

int pol_nftx_cmp(struct nftnl_rule *r, const void *data, uint32_t len) {
        struct nftnl_expr *e = nftnl_expr_alloc("cmp");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, NFT_CMP_EQ);
                nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len);
        }
        return pol_nftx_expr(r, e);
}

int pol_nftx_payload_to(struct nftnl_rule *r, uint32_t base, uint32_t offset, uint32_t len, uint32_t dreg) {
        struct nftnl_expr *e = nftnl_expr_alloc("payload");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, base);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, offset);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, dreg);
        }
        return pol_nftx_expr(r, e);
}

int pol_nftx_payload(struct nftnl_rule *r, uint32_t base, uint32_t offset, uint32_t len) {
        return pol_nftx_payload_to(r, base, offset, len, NFT_REG_1);
}

int pol_nftx_ct_bits(struct nftnl_rule *r, uint32_t key, uint32_t mask) {
        uint32_t zero = 0;
        struct nftnl_expr *e;
        int k = pol_nftx_load(r, "ct", NFTNL_EXPR_CT_KEY, key, NFTNL_EXPR_CT_DREG);
        if (k < 0)
                return k;
        if ((e = nftnl_expr_alloc("bitwise"))) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, sizeof(mask));
                nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, &mask, sizeof(mask));
                nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, &zero, sizeof(zero));
        }
        if ((k = pol_nftx_expr(r, e)) < 0)
                return k;
        if ((e = nftnl_expr_alloc("cmp"))) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, NFT_CMP_NEQ);
                nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, &zero, sizeof(zero));
        }
        return pol_nftx_expr(r, e);
}

int pol_nftx_verdict(struct nftnl_rule *r, int code, const char *chain) {
        struct nftnl_expr *e = nftnl_expr_alloc("immediate");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
                nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, (uint32_t) code);
                if (chain)
                        nftnl_expr_set_str(e, NFTNL_EXPR_IMM_CHAIN, chain);
        }
        return pol_nftx_expr(r, e);
}

int pol_nftx_key_elem(struct nftnl_set *s, const void *key, size_t len, uint32_t flags, uint64_t timeout_ms) {
        struct nftnl_set_elem *e = nftnl_set_elem_alloc();
        if (!e)
                return -ENOMEM;
        nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, len);
        if (flags)
                nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_FLAGS, flags);
        if (timeout_ms)
                nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, timeout_ms);
        nftnl_set_elem_add(s, e);
        return 0;
}
