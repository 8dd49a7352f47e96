"""Hand-computed cases for owed_ceiling.py (run by ./tools/test.sh: python3 -m unittest).

The estimate is quoted in the README against the simulator's figures, so its pieces (the
budget fractions, the trace mapping, the hourly metric) are checked on inputs small enough
to work out by hand.
"""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import owed_ceiling as oc  # noqa: E402

HOUR = 3600


def job(submit, seconds, gpus, alloc):
    return {"submit": submit, "left": seconds, "gpus": gpus, "alloc": alloc}


class Fractions(unittest.TestCase):
    def test_fraction_is_the_product_of_sibling_shares_down_the_tree(self):
        tree = {
            "a": {"share": 3},
            "b": {"share": 1, "x": {"share": 1}, "y": {"share": 3}},
            "idle": {"share": 0},
        }
        self.assertEqual(
            oc.fractions(tree),
            {"a": 0.75, "b/x": 0.0625, "b/y": 0.1875, "idle": 0.0},
        )


class Mapping(unittest.TestCase):
    def setUp(self):
        oc.FRACTIONS.clear()
        oc.FRACTIONS.update({"p": 0.5, "q": 0.5})

    def test_fnv1a_matches_the_published_test_vectors(self):
        self.assertEqual(oc.fnv1a(b""), 0xCBF29CE484222325)
        self.assertEqual(oc.fnv1a(b"a"), 0xAF63DC4C8601EC8C)

    def test_tenants_are_dealt_by_gpu_time_asked_and_rows_without_gpus_dropped(self):
        rows = [
            "job_id,submit_time,duration,num_gpus,user,group,status,num_nodes",
            # u1 asks 100 GPU-s, u2 800, the group-only tenant g 300: u2, g, u1 in that order.
            "j1,0,100,1,u1,,Pass,1",
            "j2,5,100,8,u2,,Pass,1",
            "j3,7,150,2,,g,Pass,1",
            "j4,9,50,0,u1,,Pass,1",
            "j5,99999,10,1,u1,,Pass,1",
        ]
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write("\n".join(rows) + "\n")
        try:
            jobs = oc.load(f.name, 1000)
        finally:
            os.unlink(f.name)
        # j4 has no GPUs, j5 is past the span.
        self.assertEqual([j["submit"] for j in jobs], [0, 5, 7])
        expected = {"u2": "p", "g": "q", "u1": "p"}
        for j, tenant in zip(jobs, ["u1", "u2", "g"]):
            jid = {"u1": "j1", "u2": "j2", "g": "j3"}[tenant]
            unallocated = oc.fnv1a(jid.encode()) % 100 < 15
            self.assertEqual(j["alloc"], None if unallocated else expected[tenant], tenant)


class Metric(unittest.TestCase):
    def setUp(self):
        oc.FRACTIONS.clear()
        oc.FRACTIONS.update({"a": 0.5, "b": 0.5})

    def test_jobs_within_their_share_get_all_they_are_owed(self):
        jobs = [job(0, 2 * HOUR, 4, "a"), job(0, HOUR, 4, "b")]
        overall, per, owed = oc.run(jobs, 8, 600, 1 << 62)
        self.assertAlmostEqual(overall, 1.0)
        self.assertEqual(per, {"a": 1.0, "b": 1.0})
        # The run lasts to the last submission rounded up to an hour: 4 GPU-h each.
        self.assertEqual(owed, {"a": 4.0, "b": 4.0})

    def test_a_job_bigger_than_its_share_waits_when_running_it_costs_as_much_as_it_gains(self):
        # a (4 GPUs owed) asks for all 8 GPUs; running it would push b's 4 owed GPUs out for
        # 4 gained: no gain, so a gets nothing that hour and b all it is owed.
        jobs = [job(0, HOUR, 8, "a"), job(0, HOUR, 4, "b")]
        overall, per, owed = oc.run(jobs, 8, 600, 1 << 62)
        self.assertAlmostEqual(overall, 0.5)
        self.assertEqual(per, {"a": 0.0, "b": 1.0})
        self.assertEqual(owed, {"a": 4.0, "b": 4.0})

    def test_a_bigger_job_runs_when_it_gains_more_than_it_pushes_out(self):
        # a (4 owed) asks for 6 GPUs; b runs two 2-GPU jobs. Running a's job pushes out one of
        # b's (2 GPUs of owed time) for 4 gained: a gets its 4, b 2 of its 4, 6 of 8 in all
        # (4 of 8 if a's job had waited).
        jobs = [job(0, HOUR, 6, "a"), job(0, HOUR, 2, "b"), job(0, HOUR, 2, "b")]
        overall, per, owed = oc.run(jobs, 8, 600, 1 << 62)
        self.assertAlmostEqual(overall, 0.75)
        self.assertEqual(per, {"a": 1.0, "b": 0.5})
        self.assertEqual(owed, {"a": 4.0, "b": 4.0})

    def test_a_bigger_job_runs_on_idle_gpus_and_unallocated_work_fills_last(self):
        # b asks nothing, so a's 8-GPU job runs (owed 4 GPU-h, delivered 8); the unallocated
        # job finds no GPU left.
        jobs = [job(0, HOUR, 8, "a"), job(0, HOUR, 2, None)]
        overall, per, owed = oc.run(jobs, 8, 600, 1 << 62)
        self.assertAlmostEqual(overall, 1.0)
        self.assertEqual(per, {"a": 1.0})
        self.assertEqual(owed["a"], 4.0)

    def test_nodes_strand_gpus_that_one_pool_would_use(self):
        # 16 GPUs, 8 owed to each. a runs 6; b runs 6, then its 4-GPU job, short of owed, fits
        # the 4 GPUs left in one pool. On two 8-GPU nodes each 6-GPU job takes a node and
        # the 4-GPU job finds 2 + 2: b gets 6 of its 8 owed GPU-h.
        jobs = [job(0, HOUR, 6, "a"), job(0, HOUR, 6, "b"), job(0, HOUR, 4, "b")]
        pooled, per, owed = oc.run([dict(j) for j in jobs], 16, 600, 1 << 62)
        self.assertAlmostEqual(pooled, 1.0)
        self.assertEqual(owed, {"a": 6.0, "b": 8.0})
        noded, per, owed = oc.run([dict(j) for j in jobs], 16, 600, 1 << 62, gpn=8)
        self.assertAlmostEqual(per["a"], 1.0)
        self.assertAlmostEqual(per["b"], 6 / 8)
        self.assertAlmostEqual(noded, 12 / 14)


if __name__ == "__main__":
    unittest.main()
