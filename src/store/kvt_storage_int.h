/*  kvt_storage_int.h — the storage manager's state, shared by kvt_storage.c
    and kvt_storage_counters.c. Private to src/store. */
#ifndef KVT_STORAGE_INT_H_INCLUDED
#define KVT_STORAGE_INT_H_INCLUDED

#include <pthread.h>

#include "kvt_pool_int.h"
#include "kvtier/kvt_storage.h"

typedef struct _kvt_storage_t kvt_storage_t;

//  One write-through in flight: the disk writer's lease on the pool object.
typedef struct {
    kvt_storage_t *owner; //  the manager
    kvt_lease_t lease;    //  read lease held until the file is written
    uint32_t next;        //  free list link
} kvt_swrite_t;

struct _kvt_storage_t {
    kvt_pool_t *pool;          //  the CPU pool
    kvt_disk_t *disk;          //  the disk backend, or NULL
    kvt_remote_t *remote;      //  the remote tier, or NULL
    kvt_write_policy_t policy; //  when the disk gets a copy
    kvt_holder_t put_holder;   //  holder of kvt_storage_put's reservations
    kvt_holder_t disk_holder;  //  holder of the write-through leases
    pthread_mutex_t mu;        //  guards st and the write contexts (a leaf lock)
    kvt_swrite_t *writes;      //  write-through contexts
    uint32_t nwrites;          //  their number
    uint32_t write_free;       //  head of free contexts
    kvt_storage_stats_t st;    //  the manager's own counters
};

#endif
