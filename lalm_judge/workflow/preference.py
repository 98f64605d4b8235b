"""The preference builder's workflow plan as pure functions of a validated config: its shards, engines and
acoustic categories, and the paths of every stage's outputs (never job outputs)."""

from __future__ import annotations

from typing import Any

ROOT = "results/pairwise/preference"


class PreferencePlan:
    """What the preference rules need to know about a config, computed once per parse."""

    def __init__(self, config: dict[str, Any]):
        self.settings = config["preference"]
        self.shards = list(range(self.settings["shards"]))
        self.engines = list(self.settings["engines"])
        self.categories = list(self.settings["acoustic"]["styles"]) if "acoustic" in self.settings else []

    def transcripts(self, shard: int | None = None) -> list[str]:
        """Transcript tables of one shard (every engine), or of every shard."""
        shards = self.shards if shard is None else [shard]
        return [f"{ROOT}/asr/{engine}/shard{k}.parquet" for k in shards for engine in self.engines]

    def pairs(self) -> list[str]:
        return [f"{ROOT}/pairs/shard{k}.parquet" for k in self.shards]

    def acoustic(self) -> list[str]:
        return [f"{ROOT}/acoustic/{category}.parquet" for category in self.categories]

    def outputs(self) -> list[str]:
        return [f"{ROOT}/export/items.parquet", f"{ROOT}/filter_report.json"]
