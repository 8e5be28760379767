/*  kvt_ckpt_split — how one HBM budget splits for a hybrid model
    (kvt_sched_hbm_split, include/kvtier/kvt_sched.h): the running
    requests' state slots first, then KV blocks and HBM checkpoint units
    share the rest. A pure function of the geometry: the scheduler core and
    every rank's device pools compute the same split from it. */
#include <stdio.h>
#include <string.h>

#include "kvt_ckpt.h"
#include "kvtier/kvt_sched.h"

int kvt_sched_hbm_split(uint32_t hbm_blocks, uint64_t block_bytes, uint64_t state_bytes,
                        uint32_t slots, uint32_t min_kv_blocks, kvt_sched_hbm_split_t *out,
                        char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    uint64_t per = block_bytes ? (state_bytes + block_bytes - 1) / block_bytes : 0;
    uint64_t slot_blocks = per * slots;
    if (per == 0 || per > UINT32_MAX || slot_blocks + min_kv_blocks > hbm_blocks) {
        snprintf(err, errlen,
                 "hbm_pool: %llu bytes (%u blocks of %llu bytes) cannot hold the %u state slots "
                 "(%llu bytes, %u × %llu) and %u blocks of KV",
                 (unsigned long long)hbm_blocks * block_bytes, hbm_blocks,
                 (unsigned long long)block_bytes, slots,
                 (unsigned long long)(slot_blocks * block_bytes), slots,
                 (unsigned long long)state_bytes, min_kv_blocks);
        return -1;
    }
    out->ckpt_blocks = (uint32_t)per;
    out->slot_blocks = (uint32_t)slot_blocks;
    out->kv_blocks = hbm_blocks - (uint32_t)slot_blocks;
    out->ckpt_units = out->kv_blocks / out->ckpt_blocks;
    if (out->ckpt_units == 0)
        out->ckpt_units = 1; //  a pool of one unit the budget never lets fill
    return 0;
}

kvt_ckpt_order_t kvt_ckpt_order_of(kvt_sched_state_policy_t policy, bool value)
{
    return policy == KVT_STATE_POLICY_KVTIER ? (value ? KVT_CKPT_ORDER_VALUE : KVT_CKPT_ORDER_LRU)
           : policy == KVT_STATE_POLICY_MARCONI ? KVT_CKPT_ORDER_MARCONI
                                                : KVT_CKPT_ORDER_LRU;
}
