/*  kvt_seen — see kvt_seen.h. */
#include "kvt_seen.h"

#include <assert.h>
#include <stdlib.h>

#include "kvt_hmap.h"

struct _kvt_seen_t {
    kvt_hmap_t *map;   //  remembered ids (value unused)
    kvt_hash_t *ring;  //  the same ids in arrival order
    uint32_t capacity; //  ring slots
    uint32_t pos;      //  next slot to write (the oldest id once full)
    uint32_t used;     //  slots holding an id
};

kvt_seen_t *kvt_seen_new(uint32_t capacity)
{
    assert(capacity >= 1);
    kvt_seen_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->capacity = capacity;
    //  Sized for `capacity` entries and fixed: an insert never fails, since
    //  the ring forgets an id before the map could pass its bound.
    self->map = kvt_hmap_new(capacity, true);
    self->ring = malloc((size_t)capacity * sizeof(kvt_hash_t));
    if (!self->map || !self->ring)
        kvt_seen_destroy(&self);
    return self;
}

void kvt_seen_destroy(kvt_seen_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_seen_t *self = *self_p;
    kvt_hmap_destroy(&self->map);
    free(self->ring);
    free(self);
    *self_p = NULL;
}

bool kvt_seen_contains(const kvt_seen_t *self, kvt_hash_t id)
{
    return kvt_hmap_get(self->map, id, NULL);
}

bool kvt_seen_add(kvt_seen_t *self, kvt_hash_t id)
{
    if (kvt_hmap_get(self->map, id, NULL))
        return false;
    if (self->used == self->capacity) {
        kvt_hmap_del(self->map, self->ring[self->pos], NULL);
        self->used--;
    }
    int rc = kvt_hmap_put(self->map, id, self->pos);
    assert(rc == 0); //  fixed map sized for capacity entries
    (void)rc;
    self->ring[self->pos] = id;
    self->pos = (self->pos + 1) % self->capacity;
    self->used++;
    return true;
}

uint32_t kvt_seen_size(const kvt_seen_t *self)
{
    return self->used;
}

uint32_t kvt_seen_capacity(const kvt_seen_t *self)
{
    return self->capacity;
}
