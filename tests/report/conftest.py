"""Fixtures of the report tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def drawn(monkeypatch) -> list:
    """Every matplotlib figure saved while the test runs (figures close after saving: keep them to read them)."""
    from matplotlib.figure import Figure

    saved, original = [], Figure.savefig

    def record(figure, *args, **kwargs):
        if figure not in saved:
            saved.append(figure)
        return original(figure, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    return saved
