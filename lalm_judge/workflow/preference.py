"""The preference builder's workflow plan as pure functions of a validated config: its shards, engines and
acoustic style categories, and the paths of every stage's outputs (never job outputs)."""

from __future__ import annotations

from typing import Any

ROOT = "results/pairwise/preference"


def preference_voices(settings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every voice of a validated `preference` section, keyed by where it is configured: the engines and each
    variant of each acoustic style."""
    voices = {f"preference.engines.{name}": voice for name, voice in settings["engines"].items()}
    for style_category, styles in (settings["acoustic"]["styles"] if "acoustic" in settings else {}).items():
        for style, spec in styles.items():
            for index, voice in enumerate(spec if isinstance(spec, list) else [spec]):
                voices[f"preference.acoustic.styles.{style_category}.{style}[{index}]"] = voice
    return voices


def speak_gpus(voices: list[dict[str, Any]]) -> int:
    """GPUs of a job speaking with these voices: one when XTTS is among them (it runs on a GPU)."""
    return int(any(voice["engine"] == "xtts" for voice in voices))


class PreferencePlan:
    """What the preference rules need to know about a config, computed once per parse."""

    def __init__(self, config: dict[str, Any]):
        self.settings = config["preference"]
        self.shards = list(range(self.settings["shards"]))
        self.engines = list(self.settings["engines"])
        self.style_categories = list(self.settings["acoustic"]["styles"]) if "acoustic" in self.settings else []

    def transcripts(self, shard: int | None = None) -> list[str]:
        """Transcript tables of one shard (every engine), or of every shard."""
        shards = self.shards if shard is None else [shard]
        return [f"{ROOT}/asr/{engine}/shard{k}.parquet" for k in shards for engine in self.engines]

    def pairs(self) -> list[str]:
        return [f"{ROOT}/pairs/shard{k}.parquet" for k in self.shards]

    def acoustic(self) -> list[str]:
        return [f"{ROOT}/acoustic/{style_category}.parquet" for style_category in self.style_categories]

    def style_category_voices(self, style_category: str) -> list[dict[str, Any]]:
        styles = self.settings["acoustic"]["styles"][style_category].values()
        return [voice for style in styles for voice in (style if isinstance(style, list) else [style])]

    def outputs(self) -> list[str]:
        return [f"{ROOT}/export/items.parquet", f"{ROOT}/filter_report.json"]
