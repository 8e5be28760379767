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
