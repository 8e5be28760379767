/*  The building blocks of src/base, each against a plain model: the
    intrusive list (kvt_ilist), the binary heap (kvt_heap), the hash map
    (kvt_hmap), the growable array (kvt_vec) and the printf-to-log helper
    (kvt_logf). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvt_heap.h"
#include "base/kvt_hmap.h"
#include "base/kvt_ilist.h"
#include "base/kvt_logf.h"
#include "base/kvt_vec.h"

//  splitmix64: a seeded generator, so every run walks the same sequence.
static uint64_t s_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// --------------------------------------------------------------- ilist ----

#define S_N 64

typedef struct {
    uint64_t payload; //  makes the stride larger than the links
    kvt_ilink_t link; //  list links
    uint32_t tag;     //  more payload after the links
} s_item_t;

//  Checks list l against model[0..n) walking forward from the head and
//  backward from the tail.
static void s_check_list(const kvt_ilist_t *l, kvt_ilinks_t k, const uint32_t *model, uint32_t n)
{
    cr_assert_eq(l->count, n);
    uint32_t i = l->head, seen = 0;
    while (i != KVT_ILIST_NONE) {
        cr_assert_lt(seen, n, "forward walk longer than the model");
        cr_assert_eq(i, model[seen], "forward order differs at %u", seen);
        seen++;
        i = kvt_ilist_next(k, i);
    }
    cr_assert_eq(seen, n);
    i = l->tail;
    while (i != KVT_ILIST_NONE) {
        cr_assert_gt(seen, 0, "backward walk longer than the model");
        seen--;
        cr_assert_eq(i, model[seen], "backward order differs at %u", seen);
        i = k.prev[(size_t)i * k.stride];
    }
    cr_assert_eq(seen, 0);
}

static void s_model_remove(uint32_t *model, uint32_t *n, uint32_t v)
{
    for (uint32_t j = 0; j < *n; j++)
        if (model[j] == v) {
            memmove(model + j, model + j + 1, (*n - j - 1) * sizeof *model);
            (*n)--;
            return;
        }
    cr_assert_fail("%u not in the model", v);
}

Test(ilist, random_appends_prepends_unlinks_and_refreshes_match_a_model)
{
    s_item_t items[S_N];
    memset(items, 0xAB, sizeof items);
    kvt_ilinks_t k = KVT_ILINKS(items, link);
    kvt_ilist_t l;
    kvt_ilist_init(&l);
    bool in[S_N] = {false};
    uint32_t model[S_N], n = 0;
    uint64_t rng = 1;
    for (int step = 0; step < 20000; step++) {
        uint32_t i = (uint32_t)(s_rand(&rng) % S_N);
        uint64_t op = s_rand(&rng) % 4;
        if (!in[i] && op < 2) {
            kvt_ilist_append(&l, k, i);
            model[n++] = i;
            in[i] = true;
        } else if (!in[i]) {
            kvt_ilist_prepend(&l, k, i);
            memmove(model + 1, model, n * sizeof *model);
            model[0] = i;
            n++;
            in[i] = true;
        } else if (op == 0) {
            kvt_ilist_unlink(&l, k, i);
            s_model_remove(model, &n, i);
            in[i] = false;
            cr_assert_eq(items[i].link.prev, KVT_ILIST_NONE);
            cr_assert_eq(items[i].link.next, KVT_ILIST_NONE);
        } else if (op == 1) {
            kvt_ilist_to_tail(&l, k, i);
            s_model_remove(model, &n, i);
            model[n++] = i;
        } else if (op == 2 && n > 0) {
            uint32_t h = kvt_ilist_take_head(&l, k);
            cr_assert_eq(h, model[0]);
            s_model_remove(model, &n, h);
            in[h] = false;
        }
        s_check_list(&l, k, model, n);
    }
    for (uint32_t j = 0; j < S_N; j++)
        cr_assert_eq(items[j].tag, 0xABABABABu, "a list operation wrote outside the links");
}

Test(ilist, unlinking_the_tail_makes_its_neighbour_the_tail)
{
    s_item_t items[4];
    kvt_ilinks_t k = KVT_ILINKS(items, link);
    kvt_ilist_t l;
    kvt_ilist_init(&l);
    for (uint32_t i = 0; i < 3; i++)
        kvt_ilist_append(&l, k, i);
    kvt_ilist_unlink(&l, k, 2);
    cr_assert_eq(l.tail, 1);
    cr_assert_eq(items[1].link.next, KVT_ILIST_NONE);
    kvt_ilist_append(&l, k, 3);
    uint32_t model[] = {0, 1, 3};
    s_check_list(&l, k, model, 3);
}

Test(ilist, unlinking_the_head_makes_its_neighbour_the_head)
{
    s_item_t items[4];
    kvt_ilinks_t k = KVT_ILINKS(items, link);
    kvt_ilist_t l;
    kvt_ilist_init(&l);
    for (uint32_t i = 0; i < 3; i++)
        kvt_ilist_append(&l, k, i);
    kvt_ilist_unlink(&l, k, 0);
    cr_assert_eq(l.head, 1);
    cr_assert_eq(items[1].link.prev, KVT_ILIST_NONE);
    cr_assert_eq(kvt_ilist_take_head(&l, k), 1);
    cr_assert_eq(kvt_ilist_take_head(&l, k), 2);
    cr_assert_eq(kvt_ilist_take_head(&l, k), KVT_ILIST_NONE);
    cr_assert_eq(l.head, KVT_ILIST_NONE);
    cr_assert_eq(l.tail, KVT_ILIST_NONE);
    cr_assert_eq(l.count, 0);
}

Test(ilist, split_arrays_give_the_order_of_embedded_links)
{
    s_item_t items[S_N];
    uint32_t prev[S_N], next[S_N];
    kvt_ilinks_t k = KVT_ILINKS(items, link);
    kvt_ilist_t a, b;
    kvt_ilist_init(&a);
    kvt_ilist_init(&b);
    bool in[S_N] = {false};
    uint64_t rng = 7;
    for (int step = 0; step < 5000; step++) {
        uint32_t i = (uint32_t)(s_rand(&rng) % S_N);
        if (!in[i]) {
            kvt_ilist_append(&a, k, i);
            kvt_ilist_push_tail(&b, prev, next, i);
        } else if (s_rand(&rng) % 2) {
            kvt_ilist_unlink(&a, k, i);
            kvt_ilist_remove(&b, prev, next, i);
        } else {
            uint32_t x = kvt_ilist_take_head(&a, k);
            uint32_t y = kvt_ilist_pop_head(&b, prev, next);
            cr_assert_eq(x, y);
            in[x] = false;
            continue;
        }
        in[i] = !in[i];
        cr_assert_eq(a.head, b.head);
        cr_assert_eq(a.tail, b.tail);
        cr_assert_eq(a.count, b.count);
    }
    for (uint32_t i = a.head, j = b.head; i != KVT_ILIST_NONE || j != KVT_ILIST_NONE;
         i = kvt_ilist_next(k, i), j = next[j])
        cr_assert_eq(i, j);
}

Test(ilist, an_index_moves_between_two_lists_over_the_same_links)
{
    s_item_t items[8];
    kvt_ilinks_t k = KVT_ILINKS(items, link);
    kvt_ilist_t waiting, active;
    kvt_ilist_init(&waiting);
    kvt_ilist_init(&active);
    for (uint32_t i = 0; i < 8; i++)
        kvt_ilist_append(&waiting, k, i);
    for (uint32_t i = 0; i < 8; i += 2) {
        kvt_ilist_unlink(&waiting, k, i);
        kvt_ilist_append(&active, k, i);
    }
    uint32_t w[] = {1, 3, 5, 7}, act[] = {0, 2, 4, 6};
    s_check_list(&waiting, k, w, 4);
    s_check_list(&active, k, act, 4);
}

// ---------------------------------------------------------------- heap ----

typedef struct {
    uint64_t key; //  order
    uint32_t id;  //  tie-break and identity
} s_hel_t;

typedef struct {
    uint32_t pos[4096]; //  heap index per id, from `moved`
    uint64_t moves;     //  moved calls
} s_hctx_t;

static bool s_hless(const void *a, const void *b, void *ctx)
{
    const s_hel_t *x = a, *y = b;
    return x->key != y->key ? x->key < y->key : x->id < y->id;
}

static void s_hmoved(void *elem, uint32_t pos, void *ctx)
{
    s_hctx_t *c = ctx;
    c->pos[((s_hel_t *)elem)->id] = pos;
    c->moves++;
}

static const kvt_heap_ops_t s_hops = {sizeof(s_hel_t), s_hless, s_hmoved};

//  Every parent is not greater than its children, and `moved` told the
//  truth about every element's index.
static void s_check_heap(const s_hel_t *h, uint32_t n, const s_hctx_t *c)
{
    for (uint32_t i = 0; i < n; i++) {
        cr_assert_eq(c->pos[h[i].id], i, "position of id %u is stale", h[i].id);
        if (i > 0)
            cr_assert(!s_hless(&h[i], &h[(i - 1) / 2], NULL), "heap order broken at %u", i);
    }
}

static int s_cmp_hel(const void *a, const void *b)
{
    return s_hless(a, b, NULL) ? -1 : s_hless(b, a, NULL) ? 1 : 0;
}

Test(heap, random_pushes_removes_and_key_changes_pop_in_sorted_order)
{
    static s_hctx_t c;
    s_hel_t heap[4096], model[4096];
    uint32_t n = 0, nm = 0, next_id = 0;
    uint64_t rng = 42;
    for (int step = 0; step < 20000; step++) {
        uint64_t op = s_rand(&rng) % 8;
        if ((op < 4 || n == 0) && next_id < 4096) {
            //  Few distinct keys: ties are the rule, so the id must break them.
            s_hel_t e = {s_rand(&rng) % 32, next_id++};
            kvt_heap_push(heap, &n, &s_hops, &c, &e);
            model[nm++] = e;
        } else if (op < 6 && n > 0) {
            uint32_t at = (uint32_t)(s_rand(&rng) % n);
            s_hel_t out;
            kvt_heap_remove(heap, &n, &s_hops, &c, at, &out);
            uint32_t j = 0;
            while (model[j].id != out.id)
                j++;
            model[j] = model[--nm];
        } else if (op == 6 && n > 0) {
            uint32_t at = (uint32_t)(s_rand(&rng) % n);
            heap[at].key = s_rand(&rng) % 32;
            for (uint32_t j = 0; j < nm; j++)
                if (model[j].id == heap[at].id)
                    model[j].key = heap[at].key;
            kvt_heap_fix(heap, n, &s_hops, &c, at);
        } else if (n > 0) {
            qsort(model, nm, sizeof *model, s_cmp_hel);
            cr_assert_eq(heap[0].id, model[0].id, "top is not the model's minimum");
            s_hel_t out;
            kvt_heap_remove(heap, &n, &s_hops, &c, 0, &out);
            cr_assert_eq(out.id, model[0].id);
            model[0] = model[--nm];
        }
        cr_assert_eq(n, nm);
        s_check_heap(heap, n, &c);
    }
    qsort(model, nm, sizeof *model, s_cmp_hel);
    for (uint32_t j = 0; j < nm; j++) {
        s_hel_t out;
        kvt_heap_remove(heap, &n, &s_hops, &c, 0, &out);
        cr_assert_eq(out.id, model[j].id, "pop %u out of order", j);
        s_check_heap(heap, n, &c);
    }
    cr_assert_eq(n, 0);
}

Test(heap, build_orders_an_arbitrary_array)
{
    static s_hctx_t c;
    s_hel_t heap[1000], model[1000];
    uint64_t rng = 3;
    for (uint32_t i = 0; i < 1000; i++) {
        heap[i] = (s_hel_t){s_rand(&rng) % 100, i};
        model[i] = heap[i];
        c.pos[i] = i; //  the caller records every index before a build
    }
    kvt_heap_build(heap, 1000, &s_hops, &c);
    s_check_heap(heap, 1000, &c);
    qsort(model, 1000, sizeof *model, s_cmp_hel);
    uint32_t n = 1000;
    for (uint32_t j = 0; j < 1000; j++) {
        s_hel_t out;
        kvt_heap_remove(heap, &n, &s_hops, &c, 0, &out);
        cr_assert_eq(out.id, model[j].id);
    }
}

Test(heap, a_key_change_moves_the_element_up_or_down)
{
    static s_hctx_t c;
    s_hel_t heap[16];
    uint32_t n = 0;
    for (uint32_t i = 0; i < 15; i++) {
        s_hel_t e = {10 * (i + 1), i};
        kvt_heap_push(heap, &n, &s_hops, &c, &e);
    }
    //  The largest key becomes the smallest: it rises to the top.
    uint32_t at = c.pos[14];
    heap[at].key = 0;
    kvt_heap_fix(heap, n, &s_hops, &c, at);
    cr_assert_eq(heap[0].id, 14);
    //  The top becomes the largest: it sinks, and id 0 (key 10) is next.
    heap[0].key = 1000;
    kvt_heap_fix(heap, n, &s_hops, &c, 0);
    cr_assert_eq(heap[0].id, 0);
    cr_assert_geq(c.pos[14], n / 2, "the sunk element is a leaf");
    s_check_heap(heap, n, &c);
}

static bool s_pless(const void *a, const void *b, void *ctx)
{
    return **(const uint64_t *const *)a < **(const uint64_t *const *)b;
}

Test(heap, pointer_elements_without_position_tracking)
{
    static const kvt_heap_ops_t ops = {sizeof(uint64_t *), s_pless, NULL};
    uint64_t keys[50];
    uint64_t *heap[50];
    uint32_t n = 0;
    uint64_t rng = 9;
    for (int i = 0; i < 50; i++) {
        keys[i] = s_rand(&rng) % 1000;
        uint64_t *p = &keys[i];
        kvt_heap_push(heap, &n, &ops, NULL, &p);
    }
    uint64_t last = 0;
    while (n > 0) {
        uint64_t *p;
        kvt_heap_remove(heap, &n, &ops, NULL, 0, &p);
        cr_assert_geq(*p, last);
        last = *p;
    }
}

// ---------------------------------------------------------------- hmap ----

static kvt_hash_t s_key(uint64_t *rng)
{
    kvt_hash_t k = {s_rand(rng), s_rand(rng)};
    return k;
}

Test(hmap, random_inserts_and_removes_keep_every_lookup_right)
{
    //  A fixed map run at up to its 1/2 load bound: long probe runs, so a
    //  delete that leaves a hole a later member probes across shows up.
    enum { NKEYS = 600, CAP = 256 };
    kvt_hmap_t *m = kvt_hmap_new_values(CAP / 2 - 1, true, sizeof(uint64_t));
    cr_assert_not_null(m);
    static kvt_hash_t keys[NKEYS];
    static uint64_t ns[NKEYS], val[NKEYS];
    static bool in[NKEYS];
    uint64_t rng = 11;
    //  Pairs share a key in two namespaces: the namespace is part of the key.
    for (int i = 0; i < NKEYS; i++) {
        keys[i] = i % 2 ? keys[i - 1] : s_key(&rng);
        ns[i] = i % 2 ? ns[i - 1] + 1 + s_rand(&rng) % 2 : s_rand(&rng) % 3;
    }
    uint32_t size = 0;
    for (int step = 0; step < 30000; step++) {
        int i = (int)(s_rand(&rng) % NKEYS);
        if (!in[i]) {
            bool created = false;
            uint64_t *v = kvt_hmap_insert(m, ns[i], keys[i], &created);
            if (size + 1 > CAP / 2) {
                cr_assert_null(v, "a fixed map grew past half its capacity");
                continue;
            }
            cr_assert_not_null(v);
            cr_assert(created);
            cr_assert_eq(*v, 0, "a new value starts zeroed");
            *v = val[i] = s_rand(&rng);
            in[i] = true;
            size++;
        } else {
            cr_assert(kvt_hmap_remove(m, ns[i], keys[i]));
            in[i] = false;
            size--;
        }
        cr_assert_eq(kvt_hmap_size(m), size);
        if (step % 16 == 0 || step > 29000)
            for (int j = 0; j < NKEYS; j++) {
                uint64_t *v = kvt_hmap_find(m, ns[j], keys[j]);
                if (in[j]) {
                    cr_assert_not_null(v, "step %d: key %d lost", step, j);
                    cr_assert_eq(*v, val[j], "step %d: key %d has another's value", step, j);
                } else {
                    cr_assert_null(v, "step %d: removed key %d still found", step, j);
                }
            }
    }
    kvt_hmap_destroy(&m);
    cr_assert_null(m);
}

Test(hmap, one_key_in_many_namespaces_is_many_entries)
{
    //  12 namespaces in 32 slots: probe runs cross, so a lookup that
    //  ignored the namespace would meet another namespace's entry.
    kvt_hmap_t *m = kvt_hmap_new(12, true);
    kvt_hash_t k = {0x1234, 0x5678};
    uint32_t v;
    for (uint64_t ns = 0; ns < 12; ns++) {
        uint32_t *p = kvt_hmap_insert(m, ns * 0x1000193, k, NULL);
        cr_assert_not_null(p);
        *p = (uint32_t)ns + 100;
    }
    cr_assert_eq(kvt_hmap_size(m), 12);
    for (uint64_t ns = 0; ns < 12; ns++) {
        uint32_t *p = kvt_hmap_find(m, ns * 0x1000193, k);
        cr_assert_not_null(p);
        cr_assert_eq(*p, ns + 100, "namespace %u answered with another's value", (unsigned)ns);
    }
    cr_assert(kvt_hmap_get(m, k, &v), "namespace 0 is the 32-bit spelling's");
    cr_assert_eq(v, 100);
    kvt_hmap_destroy(&m);
}

Test(hmap, one_key_in_two_namespaces_is_two_entries)
{
    kvt_hmap_t *m = kvt_hmap_new_values(8, true, 3 * sizeof(uint32_t));
    kvt_hash_t k = {1, 2};
    uint32_t *a = kvt_hmap_insert(m, 1, k, NULL);
    a[2] = 7;
    uint32_t *b = kvt_hmap_insert(m, 2, k, NULL);
    b[2] = 9;
    cr_assert_eq(kvt_hmap_size(m), 2);
    cr_assert_eq(((uint32_t *)kvt_hmap_find(m, 1, k))[2], 7);
    cr_assert_eq(((uint32_t *)kvt_hmap_find(m, 2, k))[2], 9);
    cr_assert_null(kvt_hmap_find(m, 0, k));
    cr_assert(kvt_hmap_remove(m, 1, k));
    cr_assert_null(kvt_hmap_find(m, 1, k));
    cr_assert_eq(((uint32_t *)kvt_hmap_find(m, 2, k))[2], 9);
    cr_assert_not(kvt_hmap_remove(m, 1, k));
    kvt_hmap_destroy(&m);
}

Test(hmap, a_growing_map_keeps_every_entry_and_a_fixed_one_refuses)
{
    kvt_hmap_t *m = kvt_hmap_new(4, false);
    uint64_t rng = 5;
    static kvt_hash_t keys[20000];
    for (uint32_t i = 0; i < 20000; i++) {
        keys[i] = s_key(&rng);
        cr_assert_eq(kvt_hmap_put(m, keys[i], i), 0);
    }
    cr_assert_eq(kvt_hmap_size(m), 20000);
    for (uint32_t i = 0; i < 20000; i++) {
        uint32_t v = UINT32_MAX;
        cr_assert(kvt_hmap_get(m, keys[i], &v));
        cr_assert_eq(v, i);
    }
    kvt_hmap_destroy(&m);

    //  Made for 8: takes at least 8, never more than half its capacity.
    kvt_hmap_t *f = kvt_hmap_new(8, true);
    uint32_t took = 0;
    while (kvt_hmap_put(f, keys[took], took) == 0)
        took++;
    cr_assert_geq(took, 8);
    cr_assert_leq(took, 16, "fixed map of 32 slots took %u", took);
    cr_assert_eq(kvt_hmap_size(f), took);
    uint32_t v;
    cr_assert_eq(kvt_hmap_put(f, keys[0], 77), 0, "overwriting needs no room");
    cr_assert(kvt_hmap_get(f, keys[0], &v));
    cr_assert_eq(v, 77);
    kvt_hmap_destroy(&f);
}

Test(hmap, wide_values_stay_aligned_and_survive_growth)
{
    typedef struct {
        uint64_t a, b, c;
    } s_val_t;
    kvt_hmap_t *m = kvt_hmap_new_values(2, false, sizeof(s_val_t));
    uint64_t rng = 13;
    static kvt_hash_t keys[3000];
    for (uint32_t i = 0; i < 3000; i++) {
        keys[i] = s_key(&rng);
        s_val_t *v = kvt_hmap_insert(m, i % 5, keys[i], NULL);
        cr_assert_not_null(v);
        cr_assert_eq((uintptr_t)v % 8, 0, "8-byte values are 8-byte aligned");
        *v = (s_val_t){i, i * 2, i * 3};
    }
    for (uint32_t i = 0; i < 3000; i++) {
        s_val_t *v = kvt_hmap_find(m, i % 5, keys[i]);
        cr_assert_not_null(v);
        cr_assert(v->a == i && v->b == i * 2 && v->c == i * 3);
    }
    cr_assert_null(kvt_hmap_new_values(8, true, 0));
    cr_assert_null(kvt_hmap_new_values(8, true, KVT_HMAP_VALUE_MAX + 1));
    kvt_hmap_destroy(&m);
}

Test(hmap, the_zero_key_is_a_key_and_del_returns_the_value)
{
    kvt_hmap_t *m = kvt_hmap_new(4, true);
    kvt_hash_t zero = {0, 0};
    uint32_t v = 0;
    cr_assert_not(kvt_hmap_get(m, zero, &v));
    cr_assert_eq(kvt_hmap_put(m, zero, 5), 0);
    cr_assert(kvt_hmap_get(m, zero, &v));
    cr_assert_eq(v, 5);
    cr_assert(kvt_hmap_del(m, zero, &v));
    cr_assert_eq(v, 5);
    cr_assert_not(kvt_hmap_del(m, zero, &v));
    cr_assert_eq(kvt_hmap_size(m), 0);
    kvt_hmap_destroy(&m);
}

Test(hmap, iteration_visits_every_entry_once_and_clear_empties)
{
    kvt_hmap_t *m = kvt_hmap_new(100, true);
    for (uint32_t i = 0; i < 100; i++)
        kvt_hmap_put(m, kvt_hmap_key64(i), i + 1000);
    bool seen[100] = {false};
    uint32_t cursor = 0, count = 0, v;
    kvt_hash_t k;
    while (kvt_hmap_next(m, &cursor, &k, &v)) {
        cr_assert_eq(k.hi, 0);
        cr_assert_lt(k.lo, 100);
        cr_assert_not(seen[k.lo], "visited twice");
        cr_assert_eq(v, k.lo + 1000);
        seen[k.lo] = true;
        count++;
    }
    cr_assert_eq(count, 100);
    kvt_hmap_clear(m);
    cr_assert_eq(kvt_hmap_size(m), 0);
    cursor = 0;
    cr_assert_not(kvt_hmap_next(m, &cursor, &k, &v));
    cr_assert_not(kvt_hmap_get(m, kvt_hmap_key64(3), NULL));
    cr_assert_eq(kvt_hmap_put(m, kvt_hmap_key64(3), 1), 0);
    kvt_hmap_destroy(&m);
}

// ----------------------------------------------------------------- vec ----

Test(vec, reserve_grows_to_the_need_and_keeps_the_contents)
{
    uint64_t *a = NULL;
    uint32_t cap = 0;
    cr_assert_eq(kvt_vec_reserve((void **)&a, &cap, 1, sizeof *a), 0);
    cr_assert_eq(cap, KVT_VEC_MIN);
    for (uint32_t i = 0; i < cap; i++)
        a[i] = i * 3;
    cr_assert_eq(kvt_vec_reserve((void **)&a, &cap, 1000, sizeof *a), 0);
    cr_assert_geq(cap, 1000);
    cr_assert_lt(cap, 2000, "doubling overshoots by less than twice the need");
    for (uint32_t i = 0; i < KVT_VEC_MIN; i++)
        cr_assert_eq(a[i], i * 3);
    uint64_t *before = a;
    uint32_t cap_before = cap;
    cr_assert_eq(kvt_vec_reserve((void **)&a, &cap, cap, sizeof *a), 0);
    cr_assert_eq(a, before, "a need within the capacity moves nothing");
    cr_assert_eq(cap, cap_before);
    free(a);
}

Test(vec, appends_grow_geometrically)
{
    uint32_t *a = NULL;
    uint32_t cap = 0, grows = 0;
    for (uint32_t n = 0; n < 1000000; n++) {
        uint32_t old = cap;
        cr_assert_eq(kvt_vec_reserve((void **)&a, &cap, n + 1, sizeof *a), 0);
        if (cap != old) {
            grows++;
            cr_assert(old == 0 || cap == 2 * old, "capacity %u after %u", cap, old);
        }
        a[n] = n;
    }
    //  16 · 2^16 > 10^6: 17 allocations in all.
    cr_assert_eq(grows, 17);
    for (uint32_t n = 0; n < 1000000; n += 997)
        cr_assert_eq(a[n], n);
    free(a);
}

Test(vec, an_overflowing_size_is_refused_and_changes_nothing)
{
    char *a = NULL;
    uint32_t cap = 0;
    cr_assert_eq(kvt_vec_reserve((void **)&a, &cap, 4, 1), 0);
    char *before = a;
    cr_assert_eq(kvt_vec_reserve((void **)&a, &cap, 3u << 30, SIZE_MAX / (2u << 30)), -1);
    cr_assert_eq(a, before);
    cr_assert_eq(cap, KVT_VEC_MIN);
    cr_assert_eq(kvt_vec_reserve((void **)&a, &cap, UINT32_MAX, SIZE_MAX), -1);
    cr_assert_eq(cap, KVT_VEC_MIN);
    free(a);
}

// ---------------------------------------------------------------- logf ----

typedef struct {
    int calls;       //  lines handed over
    int level;       //  the last line's level
    char line[1024]; //  the last line
} s_sink_t;

static void s_sink(void *arg, int level, const char *line)
{
    s_sink_t *k = arg;
    k->calls++;
    k->level = level;
    snprintf(k->line, sizeof k->line, "%s", line);
}

Test(logf, formats_one_line_into_the_sink_and_a_null_sink_is_nothing)
{
    s_sink_t k = {0};
    kvt_logf(s_sink, &k, 2, "lane %s: job %u failed (%d)", "load", 7u, -5);
    cr_assert_eq(k.calls, 1);
    cr_assert_eq(k.level, 2);
    cr_assert_str_eq(k.line, "lane load: job 7 failed (-5)");
    kvt_logf(NULL, &k, 0, "dropped %d", 1); //  no sink: nothing, no crash
    cr_assert_eq(k.calls, 1);
    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    kvt_logf(s_sink, &k, 1, "%s", big);
    cr_assert_eq(k.calls, 2);
    cr_assert_eq(strlen(k.line), KVT_LOGF_LINE - 1, "a long line is cut, not overrun");
}
