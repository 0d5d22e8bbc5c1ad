"""The flags of a secured endpoint and what they ask for: ``ClientOptions``.

``add_client_flags(parser, "from")`` defines ``--from-ca-file``, ``--from-cert-file``,
``--from-key-file``, ``--from-username``, ``--from-password-file``,
``--from-bearer-token-file`` and ``--from-insecure-skip-verify``; ``client_options(args, "from")``
reads them back. Apart from exporter.http_client (which does the GET) so that a command defining
these flags does not load ssl and urllib.request before it fetches anything (issue 22: a simulated
`exporter snapshot` never fetches).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from exporter.errors import UserError

DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True)
class ClientOptions:
    """How to reach one kind of endpoint; ``flag`` names it in errors (e.g. ``--from``)."""

    flag: str = "--url"
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    username: str | None = None
    password_file: str | None = None
    bearer_token_file: str | None = None
    insecure_skip_verify: bool = False
    timeout: float = DEFAULT_TIMEOUT

    def __repr__(self) -> str:  # file names only; never a secret
        return (f"ClientOptions({self.flag}, ca_file={self.ca_file!r}, cert_file={self.cert_file!r}, "
                f"username={self.username!r})")


def add_client_flags(parser: argparse.ArgumentParser, name: str, what: str) -> None:
    """--NAME-ca-file ... for the endpoint kind ``name`` ("from", "prometheus"); ``what`` is its
    description in the help ("the exporters of --from")."""
    group = parser.add_argument_group(f"secured endpoints ({what})")
    dest = name.replace("-", "_")
    group.add_argument(f"--{name}-ca-file", dest=f"{dest}_ca_file", metavar="FILE",
                       help=f"PEM CA certificate(s) to trust for {what} (default: the system's)")
    group.add_argument(f"--{name}-cert-file", dest=f"{dest}_cert_file", metavar="FILE",
                       help=f"client certificate (PEM) to present to {what} (mTLS)")
    group.add_argument(f"--{name}-key-file", dest=f"{dest}_key_file", metavar="FILE",
                       help="private key (PEM) of that certificate")
    group.add_argument(f"--{name}-username", dest=f"{dest}_username", metavar="USER",
                       help=f"basic auth user for {what}")
    group.add_argument(f"--{name}-password-file", dest=f"{dest}_password_file", metavar="FILE",
                       help="file holding the basic auth password (a flag value would show in `ps`)")
    group.add_argument(f"--{name}-bearer-token-file", dest=f"{dest}_bearer_token_file", metavar="FILE",
                       help=f"file holding a bearer token for {what}")
    group.add_argument(f"--{name}-insecure-skip-verify", dest=f"{dest}_insecure_skip_verify", action="store_true",
                       help="do not verify the server's certificate (testing only)")


def client_options(args: argparse.Namespace, name: str, timeout: float = DEFAULT_TIMEOUT) -> ClientOptions:
    """The ClientOptions of the flags add_client_flags defined for ``name``."""
    dest = name.replace("-", "_")
    options = ClientOptions(
        flag=f"--{name}",
        ca_file=getattr(args, f"{dest}_ca_file", None),
        cert_file=getattr(args, f"{dest}_cert_file", None),
        key_file=getattr(args, f"{dest}_key_file", None),
        username=getattr(args, f"{dest}_username", None),
        password_file=getattr(args, f"{dest}_password_file", None),
        bearer_token_file=getattr(args, f"{dest}_bearer_token_file", None),
        insecure_skip_verify=bool(getattr(args, f"{dest}_insecure_skip_verify", False)),
        timeout=timeout,
    )
    check_options(options)
    return options


def check_options(options: ClientOptions) -> None:
    """UserError for flags that do not go together (checked before any request)."""
    name = options.flag
    if bool(options.cert_file) != bool(options.key_file):
        raise UserError(f"{name}-cert-file and {name}-key-file: give both or neither")
    if options.password_file and not options.username:
        raise UserError(f"{name}-password-file: needs {name}-username")
    if options.bearer_token_file and (options.username or options.password_file):
        raise UserError(f"{name}-bearer-token-file: use either a bearer token or basic auth, not both")
