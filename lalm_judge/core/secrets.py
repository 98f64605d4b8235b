"""Secrets by value: the values of the environment variables a config names as keys (`api_key_env`, `header_env`)
are read here, and kept out of everything the run writes.

A config never holds a key (the config check refuses one), only the NAME of the environment variable that holds
it. `read_secret` reads that variable and remembers its value for the rest of the process; `redact` replaces
every remembered value in a text by `REDACTED`. The endpoint client redacts what an endpoint answers (an answer
or error body that quotes the key back lands in no table, cache entry or message), and `core.logs.log_to`
redacts the job's log records and everything it prints, so a key that reaches a message by another way is cut
there too.
"""

from __future__ import annotations

import os
import threading

REDACTED = "***"
# Shorter values are not treated as secrets: replacing them would garble ordinary text ("no-key" placeholders
# of local servers are not read from the environment at all).
MIN_SECRET_LENGTH = 8

_lock = threading.Lock()
_secrets: set[str] = set()


class MissingSecret(ValueError):
    """The environment variable a config names for a key is not set."""


def remember_secret(value: str) -> None:
    """Redact `value` from every later `redact` of this process."""
    if len(value) >= MIN_SECRET_LENGTH:
        with _lock:
            _secrets.add(value)


def read_secret(variable: str, what: str, key: str = "api_key_env") -> str:
    """The value of environment variable `variable` (named by `key` of `what`'s config), remembered as a secret;
    `MissingSecret` naming both when it is not set."""
    value = os.environ.get(variable)
    if not value:
        raise MissingSecret(
            f"{what} reads its key from the environment variable {variable!r} ({key}), which is not set; "
            f"export {variable}=... (or set {key} to the variable that holds the key)"
        )
    remember_secret(value)
    return value


def redact(text: str) -> str:
    """`text` with every remembered secret replaced by `REDACTED`."""
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact_value(value: object) -> object:
    """`value` with secrets redacted from every string inside it (nested lists and mappings included)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: redact_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_value(item) for item in value)
    return value
