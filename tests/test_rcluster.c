/*  test_rcluster.c — the Redis Cluster client against a real cluster that
    each test starts itself (3 masters on free loopback ports in a temporary
    directory, killed at the end): key slots as the specification defines
    them, pipelined batches routed to every master, ASK during a slot
    migration, MOVED after it, and a node that died. Skipped, saying so,
    where redis-server is not installed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/kvt_test_redis.h"
#include "store/kvt_rcluster.h"

static kvt_tredis_t s_r;

static void s_start(void)
{
    if (!kvt_tredis_available())
        cr_skip_test("redis-server is not installed (tools/setup.sh installs it)");
    kvt_tredis_start(&s_r, 3, 0);
}

static void s_stop(void)
{
    kvt_tredis_stop(&s_r);
}

static kvt_rcluster_t *s_client(void)
{
    char err[256] = "";
    kvt_rcluster_t *c = kvt_rcluster_new(s_r.seeds, NULL, err, sizeof err);
    cr_assert_not_null(c, "%s", err);
    return c;
}

static kvt_rc_cmd_t s_cmd(kvt_rc_op_t op, const char *key, const char *value)
{
    return (kvt_rc_cmd_t){.op = op,
                          .key = key,
                          .keylen = strlen(key),
                          .value = value,
                          .valuelen = value ? strlen(value) : 0};
}

//  A key whose slot is `slot` (by brute force over a counter).
static void s_key_in_slot(int slot, const char *tag, char *buf, size_t cap)
{
    for (unsigned i = 0;; i++) {
        snprintf(buf, cap, "%s-%u", tag, i);
        if (kvt_rcluster_slot(buf, strlen(buf)) == slot)
            return;
    }
}

Test(rcluster, slots_are_crc16_of_the_key_or_its_hash_tag)
{
    //  The specification's reference values: CRC16/XMODEM("123456789") is
    //  0x31C3; "foo" is slot 12182.
    cr_assert_eq(kvt_rcluster_slot("123456789", 9), 0x31C3);
    cr_assert_eq(kvt_rcluster_slot("foo", 3), 12182);
    //  A hash tag: only the bytes between the first { and the next }.
    cr_assert_eq(kvt_rcluster_slot("{user1000}.following", 20), kvt_rcluster_slot("user1000", 8));
    cr_assert_eq(kvt_rcluster_slot("foo{{bar}}zap", 13), kvt_rcluster_slot("{bar", 4));
    //  An empty tag does not count: the whole key is hashed.
    cr_assert_neq(kvt_rcluster_slot("foo{}{bar}", 10), kvt_rcluster_slot("bar", 3));
    cr_assert_neq(kvt_rcluster_slot("a{}b", 4), kvt_rcluster_slot("", 0));
}

Test(rcluster, slots_agree_with_the_server, .init = s_start, .fini = s_stop, .timeout = 30)
{
    char key[64];
    for (int i = 0; i < 64; i++) {
        snprintf(key, sizeof key, i % 2 ? "k%d" : "{t%d}x", i * 7919);
        redisReply *rep = kvt_tredis_cmd(&s_r, 0, "CLUSTER KEYSLOT %s", key);
        cr_assert_eq(rep->type, REDIS_REPLY_INTEGER);
        cr_assert_eq(rep->integer, kvt_rcluster_slot(key, strlen(key)), "%s", key);
        freeReplyObject(rep);
    }
}

Test(rcluster, a_pipelined_batch_reaches_every_master, .init = s_start, .fini = s_stop,
     .timeout = 30)
{
    kvt_rcluster_t *c = s_client();
    enum { N = 300 };
    static char keys[N][32], vals[N][32];
    kvt_rc_cmd_t cmds[N];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "key:%d", i);
        snprintf(vals[i], sizeof vals[i], "value %d", i * 31);
        cmds[i] = s_cmd(KVT_RC_SET, keys[i], vals[i]);
    }
    cr_assert_eq(kvt_rcluster_exec(c, cmds, N), 0);
    for (int i = 0; i < N; i++)
        cmds[i] = s_cmd(i % 2 ? KVT_RC_GET : KVT_RC_EXISTS, keys[i], NULL);
    cr_assert_eq(kvt_rcluster_exec(c, cmds, N), 0);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(cmds[i].status, KVT_RC_OK, "%s", keys[i]);
        if (i % 2) {
            cr_assert_eq(cmds[i].replylen, strlen(vals[i]));
            cr_assert_eq(memcmp(cmds[i].reply, vals[i], cmds[i].replylen), 0);
        }
        free(cmds[i].reply);
    }
    kvt_rc_cmd_t miss = s_cmd(KVT_RC_GET, "never-written", NULL);
    kvt_rcluster_exec(c, &miss, 1);
    cr_assert_eq(miss.status, KVT_RC_NIL);
    //  Each master holds its share: the batch was routed by slot, not sent
    //  to one node and redirected.
    for (int m = 0; m < 3; m++) {
        redisReply *rep = kvt_tredis_cmd(&s_r, m, "DBSIZE");
        cr_assert_gt(rep->integer, N / 6, "master %d holds %lld", m, rep->integer);
        freeReplyObject(rep);
    }
    kvt_rcluster_stats_t st;
    kvt_rcluster_stats(c, &st);
    cr_assert_eq(st.moved + st.asked, 0);
    cr_assert_eq(st.connects, 3, "one connection per node");
    kvt_rcluster_destroy(&c);
    cr_assert_null(c);
}

//  Moves `slot` from node `from` to node `to` by hand: IMPORTING /
//  MIGRATING, MIGRATE of the given keys (the rest stays behind until
//  finish), and with finish the slot's new owner announced to every node.
static void s_setslot(int slot, int from, int to, const char *state)
{
    int node = strcmp(state, "IMPORTING") == 0 ? to : from;
    redisReply *rep = kvt_tredis_cmd(&s_r, node, "CLUSTER SETSLOT %d %s %s", slot, state,
                                     s_r.id[strcmp(state, "IMPORTING") == 0 ? from : to]);
    cr_assert_eq(rep->type, REDIS_REPLY_STATUS, "SETSLOT %s: %s", state, rep->str);
    freeReplyObject(rep);
}

static void s_migrate(int from, int to, const char *key)
{
    redisReply *rep =
        kvt_tredis_cmd(&s_r, from, "MIGRATE 127.0.0.1 %d %s 0 5000", s_r.port[to], key);
    cr_assert_eq(rep->type, REDIS_REPLY_STATUS, "MIGRATE %s: %s", key, rep->str);
    freeReplyObject(rep);
}

Test(rcluster, ask_during_a_migration_and_moved_after_it, .init = s_start, .fini = s_stop,
     .timeout = 30)
{
    kvt_rcluster_t *c = s_client();
    int slot = 777;
    int from = kvt_tredis_owner(&s_r, 0, slot);
    cr_assert_geq(from, 0);
    int to = (from + 1) % 3;
    char stay[32], moves[32];
    s_key_in_slot(slot, "stay", stay, sizeof stay);
    s_key_in_slot(slot, "moves", moves, sizeof moves);
    kvt_rc_cmd_t put[2] = {s_cmd(KVT_RC_SET, stay, "A"), s_cmd(KVT_RC_SET, moves, "B")};
    cr_assert_eq(kvt_rcluster_exec(c, put, 2), 0);

    //  Mid-migration: one key already on the target, one still on the source.
    s_setslot(slot, from, to, "IMPORTING");
    s_setslot(slot, from, to, "MIGRATING");
    s_migrate(from, to, moves);
    kvt_rc_cmd_t get[2] = {s_cmd(KVT_RC_GET, stay, NULL), s_cmd(KVT_RC_GET, moves, NULL)};
    cr_assert_eq(kvt_rcluster_exec(c, get, 2), 0);
    cr_assert_eq(get[0].status, KVT_RC_OK);
    cr_assert_eq(get[1].status, KVT_RC_OK, "the migrated key is found through ASK");
    cr_assert_eq(get[1].hops, 1);
    cr_assert_eq(memcmp(get[1].reply, "B", 1), 0);
    free(get[0].reply);
    free(get[1].reply);
    kvt_rcluster_stats_t st;
    kvt_rcluster_stats(c, &st);
    cr_assert_eq(st.asked, 1);
    cr_assert_eq(st.moved, 0);
    //  ASK does not change the map: the slot still routes to the source.
    char want[32];
    snprintf(want, sizeof want, "127.0.0.1:%d", s_r.port[from]);
    cr_assert_str_eq(kvt_rcluster_node_of(c, (uint16_t)slot), want);

    //  Finished: every node learns the new owner; the client's map is stale.
    s_migrate(from, to, stay);
    for (int i = 0; i < 3; i++) {
        redisReply *rep = kvt_tredis_cmd(&s_r, i, "CLUSTER SETSLOT %d NODE %s", slot, s_r.id[to]);
        cr_assert_eq(rep->type, REDIS_REPLY_STATUS, "SETSLOT NODE: %s", rep->str);
        freeReplyObject(rep);
    }
    kvt_rc_cmd_t again = s_cmd(KVT_RC_GET, stay, NULL);
    cr_assert_eq(kvt_rcluster_exec(c, &again, 1), 0);
    cr_assert_eq(again.status, KVT_RC_OK, "found through MOVED");
    cr_assert_eq(again.hops, 1);
    free(again.reply);
    kvt_rcluster_stats(c, &st);
    cr_assert_eq(st.moved, 1);
    snprintf(want, sizeof want, "127.0.0.1:%d", s_r.port[to]);
    cr_assert_str_eq(kvt_rcluster_node_of(c, (uint16_t)slot), want, "MOVED updates the map");
    //  The next batch refreshes the map and goes straight to the new owner.
    uint64_t refreshes = st.refreshes;
    kvt_rc_cmd_t third = s_cmd(KVT_RC_GET, moves, NULL);
    cr_assert_eq(kvt_rcluster_exec(c, &third, 1), 0);
    cr_assert_eq(third.hops, 0);
    free(third.reply);
    kvt_rcluster_stats(c, &st);
    cr_assert_eq(st.moved, 1);
    cr_assert_eq(st.refreshes, refreshes + 1, "a MOVED schedules a refresh of the slot map");
    kvt_rcluster_destroy(&c);
}

Test(rcluster, a_dead_node_fails_its_commands_and_spares_the_others, .init = s_start,
     .fini = s_stop, .timeout = 30)
{
    kvt_rcluster_t *c = s_client();
    enum { N = 60 };
    static char keys[N][32];
    kvt_rc_cmd_t cmds[N];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "dead:%d", i);
        cmds[i] = s_cmd(KVT_RC_SET, keys[i], "v");
    }
    cr_assert_eq(kvt_rcluster_exec(c, cmds, N), 0);
    kvt_tredis_kill(&s_r, 1);
    for (int i = 0; i < N; i++)
        cmds[i] = s_cmd(KVT_RC_GET, keys[i], NULL);
    size_t failed = kvt_rcluster_exec(c, cmds, N);
    size_t on_dead = 0;
    for (int i = 0; i < N; i++) {
        const char *node = kvt_rcluster_node_of(c, kvt_rcluster_slot(keys[i], strlen(keys[i])));
        char dead[32];
        snprintf(dead, sizeof dead, "127.0.0.1:%d", s_r.port[1]);
        bool is_dead = node && strcmp(node, dead) == 0;
        on_dead += is_dead;
        if (is_dead)
            cr_assert_eq(cmds[i].status, KVT_RC_EDOWN, "%s", keys[i]);
        else
            cr_assert_eq(cmds[i].status, KVT_RC_OK, "%s", keys[i]);
        free(cmds[i].reply);
    }
    cr_assert_gt(on_dead, 0);
    cr_assert_eq(failed, on_dead);
    kvt_rcluster_stats_t st;
    kvt_rcluster_stats(c, &st);
    cr_assert_gt(st.conn_errors, 0);
    kvt_rcluster_destroy(&c);
}

Test(rcluster, bad_seeds_are_refused_naming_them)
{
    char err[256] = "";
    cr_assert_null(kvt_rcluster_new("redis://localhost", NULL, err, sizeof err));
    cr_assert(strstr(err, "localhost"), "%s", err);
    cr_assert_null(kvt_rcluster_new("", NULL, err, sizeof err));
    cr_assert(strstr(err, "no seed"), "%s", err);
}
