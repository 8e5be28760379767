/*  kvt_disk_index.c — the disk backend's index: the entry table, the
    (namespace, key, kind) map, the LRU of readable files, and the entry
    transitions (free → writing → ready, → blocked) with the deletes and
    evictions that go with them. Every function here runs under the disk
    lock unless it says otherwise. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "kvt_disk_int.h"

#define S_LRU_LINKS(self) KVT_ILINKS((self)->ents, link)

static void s_lru_unlink(kvt_disk_t *self, uint32_t i)
{
    kvt_ilist_unlink(&self->lru, S_LRU_LINKS(self), i);
}

static void s_lru_push_young(kvt_disk_t *self, uint32_t i)
{
    kvt_ilist_append(&self->lru, S_LRU_LINKS(self), i);
}

void kvt_disk_refresh(kvt_disk_t *self, uint32_t i)
{
    kvt_ilist_to_tail(&self->lru, S_LRU_LINKS(self), i);
}

//  The entry in `state` matching a query, or KVT_NIL.
uint32_t kvt_disk_find(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                       kvt_dent_state_t state)
{
    kvt_obj_kind_t cand[2];
    int nc = kvt_store_candidates(kind, cand);
    kvt_keymap_entry_t *m = kvt_keymap_find(&self->map, ns, key);
    if (!m)
        return KVT_NIL;
    for (int c = 0; c < nc; c++) {
        uint32_t v = m->slot[cand[c] - 1];
        if (v && self->ents[v - 1].state == state)
            return v - 1;
    }
    return KVT_NIL;
}

uint32_t kvt_disk_ent_alloc(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                            uint64_t size, kvt_dent_state_t state)
{
    uint32_t i = self->ent_free;
    if (i == KVT_NIL)
        return KVT_NIL;
    kvt_dent_t *e = &self->ents[i];
    self->ent_free = e->link.next;
    e->ns = ns;
    e->key = key;
    e->kind = (uint8_t)kind;
    e->size = size;
    e->state = (uint8_t)state;
    e->pins = 0;
    e->link.prev = e->link.next = KVT_NIL;
    int set = kvt_keymap_set(&self->map, ns, key, kind, i + 1);
    assert(set == 0); //  the map holds as many keys as there are entries
    (void)set;
    if (state != KVT_DENT_BLOCKED) //  a blocked name holds no room: the file is not ours
        self->used += KVT_DISK_HDR + size;
    if (state == KVT_DENT_WRITING)
        self->writing += KVT_DISK_HDR + size;
    return i;
}

//  Takes a ready or writing entry out of the LRU and the byte accounts
//  (its file's room is given back; a pin lapses: the entry is going away or
//  being blocked, e.g. after failed validation).
static void s_detach(kvt_disk_t *self, uint32_t i)
{
    kvt_dent_t *e = &self->ents[i];
    if (e->state == KVT_DENT_READY) {
        s_lru_unlink(self, i);
        self->st.objects--;
        if (e->pins > 0) {
            self->pinned -= KVT_DISK_HDR + e->size;
            self->npinned--;
            e->pins = 0;
        }
    } else {
        self->st.objects_writing--;
        self->writing -= KVT_DISK_HDR + e->size;
    }
    self->used -= KVT_DISK_HDR + e->size;
}

void kvt_disk_ent_free(kvt_disk_t *self, uint32_t i)
{
    kvt_dent_t *e = &self->ents[i];
    if (e->state == KVT_DENT_BLOCKED) {
        kvt_keymap_clear(&self->map, e->ns, e->key, (kvt_obj_kind_t)e->kind);
        e->state = KVT_DENT_FREE;
        e->gen++;
        e->link.next = self->ent_free;
        self->ent_free = i;
        return;
    }
    s_detach(self, i);
    kvt_keymap_clear(&self->map, e->ns, e->key, (kvt_obj_kind_t)e->kind);
    e->state = KVT_DENT_FREE;
    e->gen++;
    e->link.next = self->ent_free;
    self->ent_free = i;
}

void kvt_disk_ent_block(kvt_disk_t *self, uint32_t i)
{
    kvt_dent_t *e = &self->ents[i];
    assert(e->state == KVT_DENT_READY || e->state == KVT_DENT_WRITING);
    s_detach(self, i);
    e->size = 0;
    e->state = KVT_DENT_BLOCKED;
    e->gen++;
    e->link.prev = e->link.next = KVT_NIL;
}

//  Deletes a ready entry's file and forgets it. Under the lock, so a name is
//  never unlinked after a new file of the same name was renamed into place.
//  0 (deleted, or already gone) or the errno of a failed unlink: the file is
//  still there, so the entry leaves the index but keeps its name blocked
//  (delete_failed); the caller logs it once the lock is dropped.
int kvt_disk_delete(kvt_disk_t *self, uint32_t i, char name[KVT_DISK_NAME_LEN])
{
    kvt_dent_t *e = &self->ents[i];
    kvt_disk_file_name(name, e->ns, e->key, (kvt_obj_kind_t)e->kind, &self->id);
    if (unlinkat(self->dirfd, name, 0) != 0 && errno != ENOENT) {
        int err = errno;
        self->st.delete_failed++;
        kvt_disk_ent_block(self, i);
        return err;
    }
    kvt_disk_ent_free(self, i);
    return 0;
}

//  Takes the oldest unpinned ready file out of the index (deleting it);
//  false if there is none. A pinned file met at the old end is being read:
//  it goes to the young end, so no later eviction walks past it again. A
//  file that could not be deleted still leaves the index: *err and name say
//  which (the first one, if *err was 0).
bool kvt_disk_evict_one(kvt_disk_t *self, int *err, char name[KVT_DISK_NAME_LEN])
{
    if (self->st.objects == self->npinned)
        return false;
    for (uint64_t n = self->st.objects; n > 0; n--) {
        uint32_t i = self->lru.head;
        if (self->ents[i].pins > 0) {
            kvt_disk_refresh(self, i);
            continue;
        }
        uint64_t bytes = KVT_DISK_HDR + self->ents[i].size;
        char one[KVT_DISK_NAME_LEN];
        int e = kvt_disk_delete(self, i, one);
        if (e == 0) {
            self->st.evictions++;
            self->st.evicted_bytes += bytes;
        } else if (*err == 0) {
            *err = e;
            memcpy(name, one, KVT_DISK_NAME_LEN);
        }
        return true;
    }
    return false;
}

//  Logs a delete that failed (call without the lock).
void kvt_disk_log_undeleted(kvt_disk_t *self, const char *what, const char *name, int err)
{
    kvt_disk_logf(self, 1, KVT_DLOG_RUNTIME,
                  "could not delete %s %s: %s; it stays on disk, out of the index, its name "
                  "blocked",
                  what, name, strerror(err));
}

//  True if the exact name of (ns, key, kind) is held by a file not ours.
bool kvt_disk_is_blocked(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind)
{
    kvt_keymap_entry_t *m = kvt_keymap_find(&self->map, ns, key);
    uint32_t v = m ? m->slot[kind - 1] : 0;
    return v && self->ents[v - 1].state == KVT_DENT_BLOCKED;
}

void kvt_disk_ent_publish(kvt_disk_t *self, uint32_t i)
{
    kvt_dent_t *e = &self->ents[i];
    assert(e->state == KVT_DENT_WRITING);
    e->state = KVT_DENT_READY;
    self->writing -= KVT_DISK_HDR + e->size;
    self->st.objects_writing--;
    self->st.objects++;
    s_lru_push_young(self, i);
}

int kvt_disk_insert_blocked(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind)
{
    uint32_t i = kvt_disk_ent_alloc(self, ns, key, kind, 0, KVT_DENT_BLOCKED);
    return i == KVT_NIL ? -1 : 0;
}

int kvt_disk_insert_ready(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                          uint64_t size)
{
    uint32_t i = kvt_disk_ent_alloc(self, ns, key, kind, size, KVT_DENT_READY);
    if (i == KVT_NIL)
        return -1;
    s_lru_push_young(self, i);
    self->st.objects++;
    return 0;
}
