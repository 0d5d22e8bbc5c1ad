"""Certificates, keys and bcrypt hashes for the web config tests, generated per test session.

trustme makes a CA and certificates signed by it; nothing is checked in. ``Pki(dir)`` writes:

- ca.crt: the CA the server certificate and the good client certificate come from;
- server.crt / server.key: for localhost and 127.0.0.1;
- client.crt / client.key: a client certificate of the CA (SANs client.example and 10.0.0.7);
- rogue.crt / rogue.key: a client certificate with the same names from another CA;
- other-ca.crt, other-server.crt / other-server.key: a second CA and server (rotation);
- mismatch.key: a key that belongs to no certificate here; garbage.pem: no PEM at all.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import bcrypt
import trustme

PASSWORD = "correct horse battery staple"
# Cost 4 (the minimum) keeps tests fast; promtool and exporter-toolkit accept it.
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()


class Pki:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.ca = trustme.CA()
        self.other_ca = trustme.CA()
        self._write(self.ca.cert_pem, "ca.crt")
        self._write(self.other_ca.cert_pem, "other-ca.crt")
        self._pair(self.ca.issue_cert("localhost", "127.0.0.1"), "server")
        self._pair(self.other_ca.issue_cert("localhost", "127.0.0.1"), "other-server")
        self._pair(self.ca.issue_cert("client.example", "10.0.0.7"), "client")
        self._pair(self.other_ca.issue_cert("client.example", "10.0.0.7"), "rogue")
        self._pair(self.ca.issue_cert("intruder.example"), "stranger")
        mismatch = trustme.CA().issue_cert("localhost")
        mismatch.private_key_pem.write_to_path(str(directory / "mismatch.key"))
        (directory / "garbage.pem").write_text("not a certificate\n")

    def _write(self, blob, name: str) -> None:
        blob.write_to_path(str(self.dir / name))

    def _pair(self, cert, name: str) -> None:
        cert.cert_chain_pems[0].write_to_path(str(self.dir / f"{name}.crt"))
        cert.private_key_pem.write_to_path(str(self.dir / f"{name}.key"))

    def path(self, name: str) -> str:
        return str(self.dir / name)

    def client_context(self, cert: str | None = None, ca: str = "ca.crt", **versions) -> ssl.SSLContext:
        """A client SSLContext trusting ``ca``, presenting ``cert`` (e.g. "client") when given."""
        ctx = ssl.create_default_context(cafile=self.path(ca))
        if cert is not None:
            ctx.load_cert_chain(self.path(f"{cert}.crt"), self.path(f"{cert}.key"))
        for key, value in versions.items():
            setattr(ctx, key, value)
        return ctx
