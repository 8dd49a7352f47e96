"""Unit tests of the Python launcher's protobuf code (the NATS side is tested end to end by
tests/tests/python_launcher.rs against a real server and the submission service)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fairshare_submit as f  # noqa: E402


class Varints(unittest.TestCase):
    def test_known_encodings(self):
        self.assertEqual(f.varint(0), b"\x00")
        self.assertEqual(f.varint(1), b"\x01")
        self.assertEqual(f.varint(300), b"\xac\x02")
        # A negative int64 is ten bytes of two's complement.
        self.assertEqual(f.varint(-1), b"\xff" * 9 + b"\x01")

    def test_round_trip(self):
        for n in [0, 1, 127, 128, 300, 2**32, 2**63 - 1]:
            self.assertEqual(f.read_varint(f.varint(n), 0), (n, len(f.varint(n))))

    def test_truncated_is_refused(self):
        with self.assertRaises(ValueError):
            f.read_varint(b"\x80", 0)


class Messages(unittest.TestCase):
    def test_a_request_reads_back_field_by_field(self):
        spec = f.job_spec("c", "a/b", "ada", 8, 0, 900, True, 0, 0, b"run", "")
        req = f.submit_request("k1", spec)
        outer = dict(f.fields(req))
        self.assertEqual(outer[1], b"k1")
        inner = dict(f.fields(outer[2]))
        # Defaults (nodes, priority, time limit, name) are left out, as proto3 writes them.
        self.assertEqual(
            inner, {1: b"c", 2: b"a/b", 3: b"ada", 4: 8, 6: 900, 7: 1, 10: b"run"}
        )

    def test_replies_decode(self):
        accepted = f.field(1, f.LEN, f.field(1, f.LEN, b"job-1") + f.field(2, f.VARINT, 42)
                           + f.field(3, f.VARINT, 1))
        self.assertEqual(
            f.submit_reply(accepted),
            {"accepted": {"job_id": "job-1", "stream_sequence": 42, "duplicate": True}},
        )
        rejected = f.field(2, f.LEN, f.field(1, f.VARINT, 5) + f.field(2, f.LEN, b"no GPUs"))
        self.assertEqual(
            f.submit_reply(rejected), {"rejected": {"code": 5, "message": "no GPUs"}}
        )
        with self.assertRaises(ValueError):
            f.submit_reply(b"")

    def test_rejection_names_come_from_the_proto(self):
        codes = f.rejection_codes()
        self.assertEqual(codes[5], "REJECTION_CODE_INVALID_GPUS")
        self.assertEqual(codes[0], "REJECTION_CODE_UNSPECIFIED")


if __name__ == "__main__":
    unittest.main()
