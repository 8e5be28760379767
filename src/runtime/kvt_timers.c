/*  kvt_timers.c — the timer min-heap shared by both drivers (SIM: one heap
    for the whole system on the virtual clock; LIVE: one heap per actor
    thread on the monotonic clock).

    Timers are ordered by (deadline, arm sequence), so equal deadlines fire
    in the order they were armed and the order never depends on memory
    layout. A timer id is (slot generation << 32 | slot index + 1): the slot
    table maps it to the heap index in O(1), so cancel is O(log n), and a
    stale id (fired, cancelled, reused slot) is recognised by its generation.
*/
#include <assert.h>
#include <stdlib.h>

#include "base/kvt_heap.h"
#include "base/kvt_vec.h"
#include "kvt_runtime_int.h"

#define S_NO_SLOT UINT32_MAX

static bool s_less(const void *a, const void *b, void *ctx)
{
    const kvt_timer_t *x = a, *y = b;
    if (x->deadline != y->deadline)
        return x->deadline < y->deadline;
    return x->seq < y->seq;
}

//  The slot table follows every move, so cancel finds a timer in O(1).
static void s_moved(void *elem, uint32_t pos, void *ctx)
{
    kvt_timers_t *t = ctx;
    t->slots[((kvt_timer_t *)elem)->slot].pos = pos;
}

static const kvt_heap_ops_t s_heap_ops = {sizeof(kvt_timer_t), s_less, s_moved};

static void s_free_slot(kvt_timers_t *t, uint32_t slot)
{
    kvt_timer_slot_t *s = &t->slots[slot];
    s->armed = false;
    s->gen = s->gen == UINT32_MAX ? 1 : s->gen + 1;
    s->pos = t->free_head;
    t->free_head = slot;
}

//  Removes the timer at heap index pos (into *out, if non-NULL) and frees
//  its slot.
static void s_remove_at(kvt_timers_t *t, uint32_t pos, kvt_timer_t *out)
{
    uint32_t slot = t->heap[pos].slot;
    kvt_heap_remove(t->heap, &t->n, &s_heap_ops, t, pos, out);
    s_free_slot(t, slot);
}

void kvt_timers_init(kvt_timers_t *t)
{
    assert(t);
    *t = (kvt_timers_t){.free_head = S_NO_SLOT, .next_seq = 1};
}

void kvt_timers_fini(kvt_timers_t *t)
{
    assert(t);
    free(t->heap);
    free(t->slots);
    kvt_timers_init(t);
}

uint64_t kvt_timers_arm(kvt_timers_t *t, uint64_t deadline, uint64_t tag, kvt_aid_t owner)
{
    assert(t);
    if (kvt_vec_reserve((void **)&t->heap, &t->cap, t->n + 1, sizeof *t->heap) != 0)
        return 0;
    uint32_t slot = t->free_head;
    if (slot == S_NO_SLOT) {
        if (kvt_vec_reserve((void **)&t->slots, &t->slots_cap, t->nslots + 1, sizeof *t->slots))
            return 0;
        slot = t->nslots++;
        t->slots[slot] = (kvt_timer_slot_t){.gen = 1};
    } else
        t->free_head = t->slots[slot].pos;
    t->slots[slot].armed = true;
    kvt_timer_t tm = {
        .deadline = deadline, .seq = t->next_seq++, .tag = tag, .slot = slot, .owner = owner};
    kvt_heap_push(t->heap, &t->n, &s_heap_ops, t, &tm);
    return ((uint64_t)t->slots[slot].gen << 32) | ((uint64_t)slot + 1);
}

int kvt_timers_cancel(kvt_timers_t *t, uint64_t id, kvt_aid_t owner)
{
    assert(t);
    uint64_t low = id & 0xFFFFFFFFu;
    if (low == 0 || low > t->nslots)
        return -1;
    uint32_t slot = (uint32_t)(low - 1);
    kvt_timer_slot_t *s = &t->slots[slot];
    if (!s->armed || s->gen != (uint32_t)(id >> 32))
        return -1;
    if (t->heap[s->pos].owner != owner)
        return -1;
    s_remove_at(t, s->pos, NULL);
    return 0;
}

bool kvt_timers_peek(const kvt_timers_t *t, uint64_t *deadline)
{
    assert(t);
    if (t->n == 0)
        return false;
    if (deadline)
        *deadline = t->heap[0].deadline;
    return true;
}

bool kvt_timers_pop_due(kvt_timers_t *t, uint64_t now, kvt_timer_t *out)
{
    assert(t && out);
    if (t->n == 0 || t->heap[0].deadline > now)
        return false;
    s_remove_at(t, 0, out);
    return true;
}

uint32_t kvt_timers_remove_owner(kvt_timers_t *t, kvt_aid_t owner)
{
    assert(t);
    uint32_t removed = 0;
    uint32_t keep = 0;
    for (uint32_t i = 0; i < t->n; i++) {
        if (t->heap[i].owner == owner) {
            s_free_slot(t, t->heap[i].slot);
            removed++;
        } else
            t->heap[keep++] = t->heap[i];
    }
    t->n = keep;
    if (removed) {
        //  Rebuild: re-place every entry, then heapify bottom-up.
        for (uint32_t i = 0; i < t->n; i++)
            t->slots[t->heap[i].slot].pos = i;
        kvt_heap_build(t->heap, t->n, &s_heap_ops, t);
    }
    return removed;
}
