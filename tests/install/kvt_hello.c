/*  A tiny program built against an installed libkvtier (tests/test_install.c):
    it uses only the public headers and pkg-config's flags. Encodes and
    decodes a Ping, stores and reads back one object in a CPU pool. Prints
    "ok" and exits 0 when everything matched. */
#include <kvtier/kvt_msg.h>
#include <kvtier/kvt_pool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_PING;
    m.u.ping.seq = 42;
    uint8_t *buf = NULL;
    size_t len = 0;
    if (kvt_msg_encode(&m, &buf, &len) != 0)
        return 1;
    kvt_msg_t back;
    kvt_msg_err_t err;
    memset(&back, 0, sizeof back);
    int rc = kvt_msg_decode(buf, len, &back, &err);
    free(buf);
    if (rc != 0 || back.kind != KVT_MSG_PING || back.u.ping.seq != 42)
        return 2;
    kvt_msg_clear(&back);

    kvt_pool_config_t cfg;
    kvt_pool_config_defaults(&cfg);
    cfg.capacity_bytes = 1u << 20;
    char e[256];
    kvt_pool_t *pool = kvt_pool_new(&cfg, e, sizeof e);
    if (!pool) {
        fprintf(stderr, "pool: %s\n", e);
        return 3;
    }
    kvt_holder_t h;
    if (kvt_pool_holder_add(pool, "hello", &h) != 0)
        return 4;
    kvt_hash_t key = {1, 2};
    const char payload[] = "kvtier";
    if (kvt_pool_put(pool, 7, key, KVT_OBJ_KV, payload, sizeof payload) != 0)
        return 5;
    kvt_lease_t lease;
    kvt_obj_view_t view;
    if (kvt_pool_acquire(pool, 7, key, KVT_OBJ_KV, h, &lease, &view) != 0)
        return 6;
    int same = view.size >= sizeof payload && memcmp(view.ptr, payload, sizeof payload) == 0;
    kvt_pool_release(pool, &lease);
    kvt_pool_holder_remove(pool, h);
    kvt_pool_destroy(&pool);
    if (!same)
        return 7;
    printf("ok\n");
    return 0;
}
