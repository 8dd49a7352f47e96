"""Unit tests of the Python launcher's protobuf code (the NATS side is tested end to end by
tests/tests/python_launcher.rs against a real server and the submission service)."""

import contextlib
import io
import json
import os
import socket
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fairshare_submit as f  # noqa: E402
import nkey  # noqa: E402


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

    def test_out_of_range_is_refused_not_wrapped(self):
        for n in [-(2**63) - 1, 2**64, -(2**64) - 1]:
            with self.assertRaises(ValueError):
                f.varint(n)


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
        self.assertEqual(codes[f.UNAVAILABLE], "REJECTION_CODE_UNAVAILABLE")
        # Without the .proto (a copy elsewhere), no names: the numbers are printed.
        self.assertEqual(f.rejection_codes("/nonexistent/fairshare.proto"), {})


def reply_message(body):
    """The NATS MSG frame that delivers `body` to the request's inbox."""
    return b"MSG INBOX 1 " + str(len(body)).encode() + b"\r\n" + body + b"\r\n"


def fake_server(info, reply, received=None, on_connect=b"PONG\r\n"):
    """A one-connection server that sends `info`, answers the client's CONNECT and PING with
    `on_connect` (a PONG; anything else, a refusal, closes the connection), then, once the PUB
    is in, sends `reply`; what the client sent goes into the list `received`, if given."""
    return fake_server_thread(info, reply, received, on_connect)[0]


def fake_server_thread(info, reply, received=None, on_connect=b"PONG\r\n"):
    """`fake_server`, and its thread: joined, everything the client sent is in `received`,
    whether or not it came to a PUB."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def read_until(conn, seen, marker):
        """What was read, and whether `marker` came before the connection closed."""
        while marker not in seen:
            chunk = conn.recv(4096)
            if not chunk:
                return seen, False
            seen += chunk
        return seen, True

    def serve():
        conn, _ = listener.accept()
        with conn:
            conn.sendall(info)
            seen, found = read_until(conn, b"", b"PING")
            if found:
                conn.sendall(on_connect)
            if found and on_connect.startswith(b"PONG"):
                seen, found = read_until(conn, seen, b"PUB ")
            if received is not None:
                received.append(seen)
            if found and on_connect.startswith(b"PONG"):
                inbox = seen.split(b"SUB ")[1].split()[0]
                conn.sendall(reply.replace(b"INBOX", inbox))
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"nats://127.0.0.1:{listener.getsockname()[1]}", thread


class Exits(unittest.TestCase):
    def run_main(self, url):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = f.main(["--url", url, "--cluster", "c", "--allocation", "a",
                           "--min-runtime", "60", "--key", "k", "--timeout", "2"])
        return code, err.getvalue()

    def test_a_server_wanting_authentication_is_a_clear_error_not_a_retry(self):
        url = fake_server(b'INFO {"auth_required":true}\r\n', b"")
        code, err = self.run_main(url)
        self.assertEqual(code, 4)
        self.assertIn("requires authentication", err)

    def seed_file(self, seed):
        """A seed file as `fairshare auth init` writes one; removed after the test."""
        with tempfile.NamedTemporaryFile("w", suffix=".nk", delete=False) as fh:
            fh.write(nkey.seed_text(seed) + "\n")
        self.addCleanup(os.unlink, fh.name)
        return fh.name

    def test_with_an_nkey_the_client_signs_the_servers_nonce(self):
        seed = bytes(range(32))
        path = self.seed_file(seed)
        accepted = f.field(1, f.LEN, f.field(1, f.LEN, b"job-1") + f.field(2, f.VARINT, 7))
        received = []
        url = fake_server(b'INFO {"auth_required":true,"nonce":"n0nce"}\r\n', reply_message(accepted),
                          received)
        out = io.StringIO()
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(out):
            code = f.main(["--url", url, "--cluster", "c", "--allocation", "a",
                           "--min-runtime", "60", "--key", "k", "--timeout", "2",
                           "--nkey", path])
        self.assertEqual(code, 0, out.getvalue())
        connect = json.loads(received[0].split(b"CONNECT ")[1].split(b"\r\n")[0])
        self.assertEqual(connect["nkey"], nkey.user_public(seed))
        self.assertEqual(connect["sig"], nkey.connect_fields(seed, "n0nce")["sig"])

    def test_a_refused_identity_is_final_not_a_retry(self):
        url = fake_server(b'INFO {"auth_required":true,"nonce":"x"}\r\n', b"",
                          on_connect=b"-ERR 'Authorization Violation'\r\n")
        path = self.seed_file(bytes(32))
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = f.main(["--url", url, "--cluster", "c", "--allocation", "a",
                           "--min-runtime", "60", "--key", "k", "--timeout", "2",
                           "--nkey", path])
        self.assertEqual(code, 4)
        self.assertIn("refused the connection", err.getvalue())
        self.assertIn("nothing was submitted", err.getvalue())

    def test_a_publish_the_server_refuses_is_final_not_a_retry(self):
        url = fake_server(b"INFO {}\r\n",
                          b"-ERR 'Permissions Violation for Publish to \"fairshare.api.submit\"'\r\n")
        code, err = self.run_main(url)
        self.assertEqual(code, 4, err)
        self.assertIn("nothing was submitted", err)

    def test_a_subscription_the_server_refuses_still_means_retry(self):
        # The submission may have gone through; only its answer is lost.
        url = fake_server(b"INFO {}\r\n",
                          b"-ERR 'Permissions Violation for Subscription to \"_INBOX.x\"'\r\n")
        code, err = self.run_main(url)
        self.assertEqual(code, 3, err)
        self.assertIn("retry with --key k", err)

    def test_a_request_over_the_servers_payload_limit_is_not_sent(self):
        received = []
        url, server = fake_server_thread(b'INFO {"max_payload":8}\r\n', b"", received)
        code, err = self.run_main(url)
        self.assertEqual(code, 1, err)
        self.assertIn("over the server's limit of 8", err)
        self.assertIn("nothing was submitted", err)
        # Everything the client sent, read to the connection's end.
        server.join(timeout=5)
        self.assertFalse(server.is_alive())
        self.assertEqual(len(received), 1)
        self.assertIn(b"CONNECT", received[0])
        self.assertNotIn(b"PUB ", received[0])

    def test_a_later_servers_final_refusal_after_an_unanswered_send_means_retry(self):
        # The first server took the request and never answered: it may have been submitted,
        # so a refusal by the next one (it wants TLS, say) must not read as "nothing was".
        first, _ = fake_server_thread(b"INFO {}\r\n", b"")
        second = fake_server(b'INFO {"tls_required":true}\r\n', b"")
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = f.main(["--url", f"{first},{second}", "--cluster", "c", "--allocation", "a",
                           "--min-runtime", "60", "--key", "k", "--timeout", "1"])
        self.assertEqual(code, 3, err.getvalue())
        self.assertIn("retry with --key k", err.getvalue())

    def test_a_timeout_of_zero_or_less_is_a_usage_error(self):
        for bad in ["0", "-1", "nan", "soon"]:
            with self.assertRaises(SystemExit) as exit_, \
                    contextlib.redirect_stderr(io.StringIO()) as err:
                f.main(["--url", "nats://127.0.0.1:1", "--cluster", "c", "--allocation", "a",
                        "--min-runtime", "60", "--timeout", bad])
            self.assertEqual(exit_.exception.code, 2, bad)
            self.assertIn("--timeout", err.getvalue())

    def test_a_reply_that_does_not_decode_means_retry_with_the_key(self):
        url = fake_server(b"INFO {}\r\n", b"MSG INBOX 1 3\r\n\xff\xff\xff\r\n")
        code, err = self.run_main(url)
        self.assertEqual(code, 3)
        self.assertIn("retry with --key k", err)

    def test_a_reply_with_a_field_of_the_wrong_wire_type_means_retry_not_a_crash(self):
        # `accepted` as a varint, where a message is expected.
        body = f.field(1, f.VARINT, 5)
        msg = reply_message(body)
        url = fake_server(b"INFO {}\r\n", msg)
        code, err = self.run_main(url)
        self.assertEqual(code, 3, err)
        self.assertIn("retry with --key k", err)

    def test_unavailable_is_not_final_it_means_retry_with_the_key(self):
        rejected = f.field(1, f.VARINT, f.UNAVAILABLE) + f.field(2, f.LEN, b"it may have landed")
        body = f.field(2, f.LEN, rejected)
        msg = reply_message(body)
        url = fake_server(b"INFO {}\r\n", msg)
        code, err = self.run_main(url)
        self.assertEqual(code, 3, err)
        self.assertIn("retry with --key k", err)
        self.assertIn("REJECTION_CODE_UNAVAILABLE", err)

    def test_other_rejections_are_final(self):
        rejected = f.field(1, f.VARINT, 4) + f.field(2, f.LEN, b"no such allocation")
        body = f.field(2, f.LEN, rejected)
        msg = reply_message(body)
        url = fake_server(b"INFO {}\r\n", msg)
        code, err = self.run_main(url)
        self.assertEqual(code, 1, err)
        self.assertNotIn("retry", err)

    def test_a_cluster_url_list_tries_the_next_server_when_one_is_down(self):
        body = f.field(1, f.LEN, f.field(1, f.LEN, b"job-1") + f.field(2, f.VARINT, 7))
        msg = reply_message(body)
        up = fake_server(b"INFO {}\r\n", msg)
        # A port nothing listens on: bound, then closed.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            down = f"nats://127.0.0.1:{s.getsockname()[1]}"
        code, err = self.run_main(f"{down}, {up}")
        self.assertEqual(code, 0, err)

    def test_a_url_that_is_not_one_is_a_clear_error_not_a_retry(self):
        code, err = self.run_main("nats://127.0.0.1:notaport")
        self.assertEqual(code, 4, err)
        self.assertIn("not a NATS server URL", err)
        code, err = self.run_main(" , ")
        self.assertEqual(code, 4, err)
        self.assertIn("no NATS server URL given", err)

    def test_no_responders_is_final_nothing_was_submitted(self):
        # The server's 503 status for a request no service subscribes to.
        status = b"NATS/1.0 503\r\n\r\n"
        n = str(len(status)).encode()
        msg = b"HMSG INBOX 1 " + n + b" " + n + b"\r\n" + status + b"\r\n"
        url = fake_server(b'INFO {"headers":true}\r\n', msg)
        code, err = self.run_main(url)
        self.assertEqual(code, 1, err)
        self.assertIn("nothing was submitted", err)
        self.assertNotIn("retry", err)

    def test_a_reply_with_headers_is_read_past_them(self):
        body = f.field(1, f.LEN, f.field(1, f.LEN, b"job-1") + f.field(2, f.VARINT, 7))
        head = b"NATS/1.0\r\ntraceparent: 00-x\r\n\r\n"
        total = str(len(head) + len(body)).encode()
        msg = (b"HMSG INBOX 1 " + str(len(head)).encode() + b" " + total + b"\r\n" + head
               + body + b"\r\n")
        url = fake_server(b'INFO {"headers":true}\r\n', msg)
        code, err = self.run_main(url)
        self.assertEqual(code, 0, err)

    def test_an_accepted_reply_is_exit_zero(self):
        body = f.field(1, f.LEN, f.field(1, f.LEN, b"job-1") + f.field(2, f.VARINT, 7))
        msg = reply_message(body)
        url = fake_server(b"INFO {}\r\n", b"PING\r\n" + msg)
        code, _ = self.run_main(url)
        self.assertEqual(code, 0)


if __name__ == "__main__":
    unittest.main()
