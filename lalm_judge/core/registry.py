"""Lazy registries: backends are named in config and imported only when used."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


class UnknownBackend(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


class MissingDependency(ImportError):
    """An optional dependency of a backend is not installed; the message names the env to use."""


class LazyRegistry:
    """Maps a name to 'module:attribute'; imports the module on first lookup."""

    def __init__(self, kind: str, entries: Mapping[str, str], extras: Mapping[str, str] | None = None):
        self.kind = kind
        self._entries = dict(entries)
        self._extras = dict(extras or {})

    def names(self) -> list[str]:
        return sorted(self._entries)

    def get(self, name: str) -> Any:
        if name not in self._entries:
            raise UnknownBackend(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        module_name, attribute = self._entries[name].split(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            hint = self._extras.get(name, "the environment that provides it")
            raise MissingDependency(
                f"{self.kind} {name!r} needs a package that is not installed ({err.name or err}); install {hint}"
            ) from err
        return getattr(module, attribute)
