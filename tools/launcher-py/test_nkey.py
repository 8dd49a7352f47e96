"""Unit tests of `nkey.py`: Ed25519 by the RFC 8032 test vectors, the nkeys text forms, and the
CONNECT fields (the end-to-end test against a real server with `fairshare auth init`'s identities
is `a_python_launcher_submits_with_the_launcher_nkey` in tests/tests/auth.rs)."""

import base64
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nkey  # noqa: E402

# RFC 8032, section 7.1, TEST 1 and TEST 2: (secret key, public key, message, signature).
VECTORS = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e"
        "39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f"
        "3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
]


class Ed25519(unittest.TestCase):
    def test_rfc_8032_vectors(self):
        for secret, public, message, signature in VECTORS:
            seed = bytes.fromhex(secret)
            self.assertEqual(nkey.public_key(seed).hex(), public)
            self.assertEqual(nkey.sign(seed, bytes.fromhex(message)).hex(), signature)

    def test_a_different_message_signs_differently(self):
        seed = bytes.fromhex(VECTORS[0][0])
        self.assertNotEqual(nkey.sign(seed, b"a"), nkey.sign(seed, b"b"))


class TextForms(unittest.TestCase):
    def test_a_seed_reads_back_and_names_its_public_key(self):
        seed = bytes(range(32))
        text = nkey.seed_text(seed)
        self.assertTrue(text.startswith("SU"), text)
        self.assertEqual(nkey.user_seed(text + "\n"), seed)
        public = nkey.user_public(seed)
        self.assertTrue(public.startswith("U") and len(public) == 56, public)

    def test_a_damaged_seed_is_refused(self):
        text = nkey.seed_text(bytes(range(32)))
        flipped = text[:10] + ("A" if text[10] != "A" else "B") + text[11:]
        with self.assertRaisesRegex(ValueError, "checksum"):
            nkey.user_seed(flipped)
        with self.assertRaisesRegex(ValueError, "base32"):
            nkey.user_seed("not a seed!")

    def test_a_public_key_is_not_a_seed(self):
        public = nkey.user_public(bytes(range(32)))
        with self.assertRaises(ValueError):
            nkey.user_seed(public)

    def test_the_checksum_is_crc16_xmodem(self):
        # The check value of CRC-16/XMODEM over "123456789".
        self.assertEqual(nkey.crc16(b"123456789"), 0x31C3)


class Connect(unittest.TestCase):
    def test_the_signature_is_of_the_nonce_in_url_safe_base64_without_padding(self):
        seed = bytes.fromhex(VECTORS[1][0])
        fields = nkey.connect_fields(seed, "nonce-1")
        self.assertEqual(fields["nkey"], nkey.user_public(seed))
        self.assertNotIn("=", fields["sig"])
        signature = base64.urlsafe_b64decode(fields["sig"] + "==")
        self.assertEqual(signature, nkey.sign(seed, b"nonce-1"))


if __name__ == "__main__":
    unittest.main()
