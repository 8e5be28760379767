/*  kvt_detail — see kvt_detail.h. */
#include "kvt_detail.h"

#include "kvtier/kvt_msg.h"
#include "kvtier/kvt_store.h"

uint32_t kvt_detail_of_store(int rc)
{
    switch (rc) {
    case KVT_STORE_OK:
    case KVT_STORE_SKIPPED:
        return KVT_DETAIL_OK;
    case KVT_STORE_DUPLICATE:
        return KVT_DETAIL_DUPLICATE;
    case KVT_STORE_ENOTFOUND:
    case KVT_STORE_ECORRUPT:
        return KVT_DETAIL_MISS;
    case KVT_STORE_ENOSPACE:
    case KVT_STORE_ETOOBIG:
    case KVT_STORE_EFULL:
    case KVT_STORE_EBUSY:
    case KVT_STORE_ENOMEM:
        return KVT_DETAIL_NO_SPACE;
    case KVT_STORE_ESTALE:
        return KVT_DETAIL_TIMEOUT;
    case KVT_STORE_EIO:
        return KVT_DETAIL_IO;
    default:
        return KVT_DETAIL_INVALID;
    }
}
