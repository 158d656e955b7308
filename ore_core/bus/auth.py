"""NATS credentials and TLS, turned into nats-py connect options in one place.

The core (`CoreService`) and every conduit (`ConduitClient`) accept the same
keyword arguments (`user`, `password`, `token`, `nkey_seed`, `creds_file`, `tls`);
`connect_options` maps them onto nats-py, and `credentials_from_settings` maps the
`[nats]` table of the configuration onto them.
"""

from __future__ import annotations

import os
import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ore_core.config import NatsSettings

__all__ = ["TlsFiles", "connect_options", "credentials_from_settings"]

_StrPath = str | os.PathLike[str]
_SEED = re.compile(r"S[A-Z2-7]{57}")  # an nkey seed, as opposed to a file holding one


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM files for TLS: `ca_file` to trust the server, `cert_file`+`key_file` for mTLS."""

    ca_file: _StrPath | None = None
    cert_file: _StrPath | None = None
    key_file: _StrPath | None = None

    def context(self) -> ssl.SSLContext:
        """An SSL context that verifies the server (with `ca_file` if given)."""
        context = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH, cafile=None if self.ca_file is None else str(self.ca_file)
        )
        if self.cert_file is not None:
            key = None if self.key_file is None else str(self.key_file)
            context.load_cert_chain(str(self.cert_file), key)
        return context


def connect_options(
    *,
    user: str | None = None,
    password: str | None = None,
    token: str | None = None,
    nkey_seed: str | _StrPath | None = None,
    creds_file: _StrPath | None = None,
    tls: ssl.SSLContext | TlsFiles | None = None,
) -> dict[str, Any]:
    """nats-py `connect` keyword arguments for these credentials.

    `nkey_seed` is a seed (`SU...`) or the path of a file holding one (nkeys and
    creds files need the `nkeys` package); `tls` is a ready SSLContext or `TlsFiles`.
    """
    options: dict[str, Any] = {
        "user": user,
        "password": password,
        "token": token,
        "user_credentials": None if creds_file is None else str(creds_file),
        "tls": tls.context() if isinstance(tls, TlsFiles) else tls,
    }
    if nkey_seed is not None:
        seed = str(nkey_seed).strip()
        if _SEED.fullmatch(seed):
            options["nkeys_seed_str"] = seed
        else:
            options["nkeys_seed"] = str(Path(seed))
    return options


def credentials_from_settings(nats: NatsSettings) -> dict[str, Any]:
    """The credential keyword arguments of `CoreService`/`ConduitClient` from `[nats]`."""
    tls_files = (nats.tls_ca_file, nats.tls_cert_file, nats.tls_key_file)
    return {
        "user": nats.user,
        "password": nats.password.get_secret_value() if nats.password else None,
        "token": nats.token.get_secret_value() if nats.token else None,
        "nkey_seed": nats.nkey_seed_file,
        "creds_file": nats.creds_file,
        # No TLS files configured: nats-py's defaults (TLS only for tls:// URLs).
        "tls": TlsFiles(*tls_files) if any(tls_files) else None,
    }
