"""Drives the kvtier package (the scheduler core through cffi) as an engine
loop would. Run: PYTHONPATH=BUILD/python /usr/bin/python3 python/tests/test_kvtier.py"""
import unittest

import kvtier


def run_until_idle(s, first_step=1, limit=10000):
    """Plans and applies steps until the scheduler is idle; returns the plans."""
    plans = []
    for step in range(first_step, first_step + limit):
        p = s.plan(step)
        if p.idle:
            return plans
        plans.append(p)
        s.apply(step, ok=True)
    raise AssertionError("never idle")


class SchedulerTest(unittest.TestCase):
    def test_a_shared_prefix_is_an_hbm_hit_and_every_request_finishes(self):
        prefix = list(range(1000, 1512))
        with kvtier.Scheduler(hbm_blocks=1024, max_running=8) as s:
            s.arrive(1, prefix + [7] * 40, max_new_tokens=3)
            plans = run_until_idle(s)
            computed = sum(e.end - e.start for p in plans for e in p.entries)
            self.assertEqual(computed, 552 + 3 - 1)  # the prompt, then a token per step
            s.arrive(2, prefix + [9] * 40, max_new_tokens=3)
            run_until_idle(s, first_step=len(plans) + 2)
            c = s.counters()
            self.assertEqual(c["sched.finished"], 2)
            self.assertEqual(c["sched.hbm_hit_tokens"], 512)  # the shared 32 blocks
            self.assertTrue(s.quiescent)
            s.audit()

    def test_entries_name_their_blocks(self):
        with kvtier.Scheduler(hbm_blocks=64, max_running=2) as s:
            s.arrive(5, list(range(64)), max_new_tokens=1)
            p = s.plan(1)
            self.assertEqual(len(p.entries), 1)
            e = p.entries[0]
            self.assertEqual((e.req, e.start, e.end), (5, 0, 64))
            self.assertEqual(len(e.blocks), 4)
            self.assertEqual(len(set(e.blocks)), 4)
            self.assertIsNone(e.state_slot)

    def test_a_bad_configuration_raises_with_the_c_text(self):
        with self.assertRaises(kvtier.ConfigError) as cm:
            kvtier.Scheduler(hbm_blocks=64, chunk_size=100)
        self.assertIn("chunk_size", str(cm.exception))
        with self.assertRaises(kvtier.ConfigError) as cm:
            kvtier.Scheduler(hbm_blocks=64, colour=3)
        self.assertIn("colour", str(cm.exception))

    def checkpoint_scenario(self, **settings):
        """A hybrid core with room for three HBM checkpoints: a 216-token
        prompt takes 192 and 208 (its prompt ends), two 128-token prompts
        take 128 each, the second evicting one; returns the counters."""
        with kvtier.Scheduler(block_size=16, chunk_size=64, hbm_blocks=64, max_running=4,
                              step_tokens=256, state_bytes=1 << 20, checkpoint_interval=1024,
                              hbm_checkpoints=3, **settings) as s:
            step = 1
            for req, base, n in ((1, 100, 216), (2, 20000, 128), (3, 30000, 128)):
                s.arrive(req, range(base, base + n), max_new_tokens=1)
                step += len(run_until_idle(s, first_step=step)) + 1
            self.assertTrue(s.quiescent)
            s.audit()
            return s.counters()

    def test_the_state_policy_and_the_value_order_reach_the_core(self):
        self.assertEqual(list(kvtier.STATE_POLICIES),
                         ["kvtier", "interval", "every-chunk", "marconi"])
        lru = self.checkpoint_scenario()
        self.assertEqual(lru["ckpt.evicted"], 1)
        self.assertEqual(lru["ckpt.evicted_by_value"], 0, "kvtier, LRU: the oldest goes")
        self.assertEqual(lru["ckpt.taken.grid"], 0)
        # The value rule takes the shallowest (128), Marconi the least
        # FLOP-efficient (the 16 tokens at 208): neither the oldest.
        for kw in (dict(value_order=True), dict(state_policy="marconi"),
                   dict(state_policy=kvtier.STATE_POLICIES["marconi"])):
            c = self.checkpoint_scenario(**kw)
            self.assertEqual(c["ckpt.evicted_by_value"], 1, kw)
        c = self.checkpoint_scenario(state_policy="interval", value_order=True)
        self.assertEqual(c["ckpt.evicted_by_value"], 0, "interval evicts in LRU order")
        c = self.checkpoint_scenario(state_policy="every-chunk")
        self.assertEqual(c["ckpt.taken.prompt_end"], 0)
        self.assertGreater(c["ckpt.taken.grid"], 0, "every chunk boundary")
        with self.assertRaises(kvtier.ConfigError) as cm:
            kvtier.Scheduler(hbm_blocks=64, state_policy="lru")
        self.assertIn("state_policy 'lru'", str(cm.exception))
        with self.assertRaises(kvtier.ConfigError) as cm:
            kvtier.Scheduler(hbm_blocks=64, state_bytes=1 << 20, checkpoint_interval=256,
                             state_policy=4)
        self.assertIn("state_policy", str(cm.exception))

    def test_refused_calls_raise_and_a_closed_scheduler_refuses_everything(self):
        s = kvtier.Scheduler(hbm_blocks=64, max_running=2)
        s.arrive(1, [1, 2, 3], max_new_tokens=1)
        with self.assertRaises(kvtier.RefusedError):
            s.arrive(1, [1, 2, 3], max_new_tokens=1)  # a duplicate id
        with self.assertRaises(kvtier.RefusedError):
            s.plan(7)  # not the next step
        s.close()
        s.close()
        with self.assertRaises(kvtier.Error):
            s.counters()


if __name__ == "__main__":
    unittest.main(verbosity=1)
