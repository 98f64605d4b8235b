"""The pairwise track's workflow plan as pure functions of a validated config: its judge cells, the ASR
models its cascade needs and the files its item stage reads (never job outputs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lalm_judge.core.vocabulary import AUDIO, IDENTICAL, AuditCondition, TranscriptSource, audit_cell_error


@dataclass(frozen=True)
class PairwiseJudgeCell:
    judge: str
    modality: str
    transcript_source: TranscriptSource
    prompt: str

    @property
    def path(self) -> str:
        """The cell's part of its output paths: '<judge>/<modality>-<source>/<prompt>'."""
        return f"{self.judge}/{self.modality}-{self.transcript_source}/{self.prompt}"


class PairwisePlan:
    """What the pairwise rules need to know about a config, computed once per parse."""

    def __init__(self, config: dict[str, Any]):
        self.config = config
        self.settings = config["pairwise"]

    def cells(self) -> list[PairwiseJudgeCell]:
        """Judge x modality (those it supports) x transcript source (`none` for audio) x prompt."""
        cells = []
        for judge in self.settings["judges"]:
            supported = self.config["judges"][judge]["modalities"]
            for modality in [m for m in self.settings["modalities"] if m in supported]:
                sources = [TranscriptSource.NONE] if modality == AUDIO else self.settings["transcript_sources"]
                for source in sources:
                    for prompt in self.settings["prompts"]:
                        cells.append(PairwiseJudgeCell(judge, modality, TranscriptSource(source), prompt))
        return cells

    def conditions(self) -> list[AuditCondition]:
        return [AuditCondition(c) for c in self.settings.get("conditions", [])]

    def audit_cells(self) -> list[tuple[AuditCondition, PairwiseJudgeCell]]:
        """(audit condition, cell) of every condition and every cell whose input it changes."""
        return [
            (condition, cell)
            for condition in self.conditions()
            for cell in self.cells()
            if audit_cell_error(condition, cell.modality, cell.transcript_source) is None
        ]

    def audit_predictions(self) -> list[str]:
        return [audit_predictions_path(condition, cell.path) for condition, cell in self.audit_cells()]

    def audit_transcripts(self, condition: str, asr_model: str | None) -> list[str]:
        """The transcript tables an audit cell of `condition` reads: the clean responses' and, unless the
        condition only reuses clean clips (`identical`), its changed responses'."""
        if asr_model is None:
            return []
        clean = f"results/pairwise/asr/{asr_model}.parquet"
        if AuditCondition(condition).kind == IDENTICAL:
            return [clean]
        return [clean, f"results/pairwise/audit/{condition}/asr/{asr_model}.parquet"]

    def asr_models(self) -> list[str]:
        """ASR models of the cells' 'asr:<model>' transcript sources, in first-use order."""
        models = [cell.transcript_source.asr_model for cell in self.cells() if cell.transcript_source.is_asr]
        return list(dict.fromkeys(m for m in models if m is not None))

    def speaks_items(self) -> bool:
        """Whether the item stage speaks the items (the project's JSONL items) and so writes their audio."""
        return self.settings["items"]["format"] != "sagelm"

    def item_sources(self) -> list[str]:
        """The files the item stage reads: SageLM record files, or the project items file."""
        items = self.settings["items"]
        return list(items["files"]) if items["format"] == "sagelm" else [items["path"]]


def audit_predictions_path(condition: str, cell_path: str) -> str:
    """Where an audit cell's predictions go: results/pairwise/audit/<condition>/predictions/<cell path>.parquet."""
    return f"results/pairwise/audit/{condition}/predictions/{cell_path}.parquet"
