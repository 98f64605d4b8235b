"""The study's configs name no model a provider shuts down within the next quarter, and the published models stay
reachable as explicit "as published" overlays that state their shutdown dates (docs/cluster.md, "Models retire").

The announced shutdowns are those of the providers' deprecation pages on 2026-12-04
(https://developers.openai.com/api/docs/deprecations, https://ai.google.dev/gemini-api/docs/deprecations)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHECKED_ON = date(2026, 12, 4)
ANNOUNCED_SHUTDOWNS = {
    "gpt-4o-2024-08-06": date(2027, 1, 14),
    "gpt-4o-2024-11-20": date(2027, 1, 14),
    "gpt-4o-mini-2024-07-18": date(2027, 1, 14),
    "gpt-4.1-2025-04-14": date(2027, 1, 14),
    "gpt-4.1-mini-2025-04-14": date(2027, 1, 14),
    "gpt-5": date(2026, 12, 11),
    "gpt-5-mini": date(2026, 12, 11),
    "gpt-4o-audio-preview": date(2026, 5, 7),
    "gemini-2.5-flash": date(2026, 12, 1),
    "gemini-2.5-pro": date(2026, 12, 1),
}
STUDY_CONFIGS = ("paper.yaml", "pairwise.yaml")
AS_PUBLISHED = {"paper_as_published.yaml": "gpt-4o-2024-08-06", "pairwise_as_published.yaml": "gpt-4o-2024-08-06"}


def models(value) -> Iterator[str]:
    """Every `model:` value of a config, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "model" and isinstance(item, str):
                yield item
            yield from models(item)
    elif isinstance(value, list):
        for item in value:
            yield from models(item)


def test_the_study_configs_name_no_model_shut_down_within_90_days():
    horizon = CHECKED_ON + timedelta(days=90)
    for name in STUDY_CONFIGS:
        named = set(models(yaml.safe_load((ROOT / "configs" / name).read_text())))
        retiring = {m: ANNOUNCED_SHUTDOWNS[m] for m in named if m in ANNOUNCED_SHUTDOWNS}
        assert all(day > horizon for day in retiring.values()), f"configs/{name} names {retiring}"
    assert "gpt-6-luna" in set(models(yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())))


def test_the_published_models_stay_reachable_with_their_shutdown_date():
    for name, model in AS_PUBLISHED.items():
        text = (ROOT / "configs" / name).read_text()
        assert model in set(models(yaml.safe_load(text)))
        assert f"served until {ANNOUNCED_SHUTDOWNS[model].isoformat()}" in text
