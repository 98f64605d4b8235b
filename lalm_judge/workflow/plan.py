"""The workflow plan as pure functions of a validated config: dialogues, turns, shards and judge cells.

The Snakefile calls these at parse time; they read only the corpus index (never job outputs), so
cluster nodes that re-parse the workflow see the same plan. The config has passed the schema, so every
key with a default is present.

Each judge has its own shard count (`workflow.sizing`: `evaluation.shards`, or with `auto` the smallest count
whose jobs fit the judge's runtime); a shard is named by its index and the count it belongs to, and its index
file (`results/manifests/shards/of<count>/shard<index>.json`) lists the dialogues of that shard under that count.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from lalm_judge.audio.emotion_reference import EmotionReferenceError, EmotionReferences, EmotionReferenceSettings
from lalm_judge.core.dialogue import SourceDialogue
from lalm_judge.core.files import shard_of
from lalm_judge.core.vocabulary import (
    AUDIO,
    BABBLE,
    CLEAN,
    TTS_CONTROL,
    Condition,
    TranscriptSource,
    condition_cell_error,
)
from lalm_judge.data.benchmark import IMPORTED
from lalm_judge.data.corpus import list_source_dialogues
from lalm_judge.workflow import context_length
from lalm_judge.workflow.preference import preference_voices, speak_gpus
from lalm_judge.workflow.sizing import DialogueWork, JudgeSizing, SizingError, size_judges, sizing_table

# Problems a parse-time check lists before it says how many more there are.
MAX_LISTED = 5


class ConfigError(ValueError):
    """A configuration that is invalid; the message names the key. Defined here because the plan checks the
    config against the corpus (babble needs two dialogues per shard); `lalm_judge.workflow.config`, which plans
    the judge cells to check them, exports it."""


@dataclass(frozen=True)
class JudgeCell:
    judge: str
    modality: str
    transcript_source: TranscriptSource
    prompt: str
    condition: str

    @property
    def label(self) -> str:
        """The cell as its score path spells it below the judge: '<modality>-<source>/<prompt>/<condition>'."""
        return f"{self.modality}-{self.transcript_source}/{self.prompt}/{self.condition}"

    def score_path(self, shard: int | str) -> str:
        """The cell's score table of one shard, in the folder of the judge's job of that shard (`score_dir`)."""
        return f"{score_dir(self.judge, shard)}/{self.label}.parquet"

    def job_fields(self) -> dict[str, str]:
        """What the judge job needs to know of the cell besides its judge (`judging.job.score_judge_shard`)."""
        return {
            "modality": self.modality,
            "transcript_source": str(self.transcript_source),
            "prompt": self.prompt,
            "condition": self.condition,
        }


def score_dir(judge: str, shard: int | str) -> str:
    """The folder of one judge job's score tables (`shard` may be the wildcard '{shard}'): the job's one output
    besides its index, so that a plan of many cells holds one output per judge job (docs/benchmarks.md)."""
    return f"results/scores/{judge}/shard{shard}"


def transcript_model(config: dict[str, Any], cell: JudgeCell) -> str | None:
    """The ASR model whose transcript a cell reads: its ASR transcript source, or the cascade of an audio cell."""
    cascade = config["judges"][cell.judge]["options"].get("cascade_asr")
    model = cell.transcript_source.asr_model or (cascade if cell.modality == AUDIO else None)
    return None if model is None else str(model)


def judge_cells(config: dict[str, Any], judge: str | None = None) -> list[JudgeCell]:
    """Every judge cell of a validated config, or of one judge: each judge's modalities x transcript sources x
    prompts x conditions."""
    evaluation = config["evaluation"]
    cells = []
    for name in [judge] if judge is not None else evaluation["judges"]:
        entry = config["judges"][name]
        schedule = entry["schedule"]
        modalities = [m for m in evaluation["modalities"] if m in entry["modalities"]]
        prompts = schedule.get("prompts") or evaluation["prompts"]
        sources = schedule.get("transcript_sources") or evaluation["transcript_sources"]
        conditions = schedule.get("conditions") or evaluation["conditions"]
        for modality in modalities:
            for source in [TranscriptSource.NONE] if modality == AUDIO else sources:
                source = TranscriptSource(source)
                for prompt in prompts:
                    for condition in conditions:
                        # A condition gets only the cells whose input it changes (core.vocabulary).
                        if condition_cell_error(condition, modality, source) is None:
                            cells.append(JudgeCell(name, modality, source, prompt, condition))
    return cells


def gpu_requests(config: dict[str, Any]) -> dict[str, int]:
    """GPUs one job of each GPU stage requests ('tts', 'asr:<model>', 'judge:<name>'); stages without GPUs are
    left out. The judges are those of both tracks; TTS and ASR those of the safety track and of the preference
    builder ('preference:tts', 'preference:asr')."""
    requests = {}
    if "evaluation" in config:
        requests["tts"] = config["tts"]["gpu"]
        requests.update({f"asr:{name}": model["gpu"] for name, model in config["asr"]["models"].items()})
    judges = [*config.get("evaluation", {}).get("judges", []), *config.get("pairwise", {}).get("judges", [])]
    requests.update({f"judge:{name}": config["judges"][name]["schedule"]["resources"]["gpu"] for name in judges})
    if "preference" in config:
        preference = config["preference"]
        requests["preference:tts"] = speak_gpus(list(preference_voices(preference).values()))
        requests["preference:asr"] = config["asr"]["models"][preference["asr"]]["gpu"]
    return {stage: gpus for stage, gpus in requests.items() if gpus > 0}


class Plan:
    """Everything the rules need to know about a config, computed once per parse."""

    def __init__(self, config: dict[str, Any], *, check_audio: bool = False):
        """`check_audio` reads the header of every corpus audio file (`data.records`): the main Snakemake process
        does, the jobs' own parses of the workflow do not."""
        self.config = config
        self.dialogues: list[SourceDialogue] = list_source_dialogues(config["corpus"], check_audio=check_audio)
        self._by_id = {d.dialogue_id: d for d in self.dialogues}
        self._cells: dict[str | None, list[JudgeCell]] = {}
        self._condition_transcripts: list[tuple[str, str]] | None = None
        # Input functions run once per job: everything they look up is indexed here, once per parse.
        self._turns = {d.dialogue_id: self._variant_turns(d) for d in self.dialogues}
        chosen = config["controls"]["dialogues"]
        unknown = sorted(set(chosen or []) - set(self._turns))
        if unknown:
            raise ConfigError(f"controls.dialogues: {unknown} are not dialogues of the corpus")
        self._control_dialogues = [d for d in self.dialogue_ids if chosen is None or d in chosen]
        self._control_set = set(self._control_dialogues)
        self._longest_turns: list[str] | None = None
        try:
            self.sizing: dict[str, JudgeSizing] = size_judges(
                config, {judge: self.judge_cells(judge) for judge in self.judges()}, self._dialogue_works()
            )
        except SizingError as err:
            raise ConfigError(str(err)) from err
        self._shards = {n: {d: shard_of(d, n) for d in self.dialogue_ids} for n in self.shard_counts()}
        # The dialogues of each shard, grouped once: every shard index and judge job asks for its shard's.
        self._shard_members: dict[int, dict[int, list[str]]] = {}
        for n, shard_by_dialogue in self._shards.items():
            members = self._shard_members[n] = {}
            for dialogue_id, shard in shard_by_dialogue.items():
                members.setdefault(shard, []).append(dialogue_id)
        if self.needs_babble():
            self._check_babble()
        self._check_emotion_references()

    def _dialogue_works(self) -> list[DialogueWork]:
        per_turn = len(self.config["variants"]["categories"]) * len(self.config["variants"]["severities"])
        controls = self._control_set
        return [
            DialogueWork(d.dialogue_id, d.n_turns, len(turns), len(turns) * per_turn, d.dialogue_id in controls)
            for d, turns in zip(self.dialogues, self._turns.values())
        ]

    @property
    def dialogue_ids(self) -> list[str]:
        return [d.dialogue_id for d in self.dialogues]

    def source(self, dialogue_id: str) -> SourceDialogue:
        """What the listing knows of a dialogue: its record's place, digest and files."""
        return self._by_id[dialogue_id]

    def warnings(self) -> list[str]:
        """What the listing noticed in the records and kept (e.g. turns a voice cannot speak as written)."""
        return [warning for d in self.dialogues for warning in d.warnings]

    def _variant_turns(self, dialogue: SourceDialogue) -> list[int]:
        if dialogue.n_turns < self.config["corpus"]["min_turns"]:
            return []
        chosen = self.config["variants"]["turns"]
        # Judged as released, an imported benchmark has variants of the turns it holds them for: the others get no job.
        released = self.config["variants"]["source"] == IMPORTED and dialogue.variant_turns is not None
        indices = dialogue.variant_turns if released else range(dialogue.n_turns)
        return list(indices) if chosen == "all" else [t for t in chosen if t in indices]

    def turns(self, dialogue_id: str) -> list[int]:
        """Turns of a dialogue that get variants (none for dialogues skipped for being too short)."""
        return self._turns[dialogue_id]

    def dialogue_turn_pairs(self) -> list[tuple[str, int]]:
        return [(d, t) for d, turns in self._turns.items() for t in turns]

    def judge_shard_count(self, judge: str) -> int:
        """The number of shards a judge's dialogues are split into (`workflow.sizing`)."""
        return self.sizing[judge].shards

    def shard_counts(self) -> list[int]:
        """The shard counts of the judges, each once, sorted."""
        return sorted({sized.shards for sized in self.sizing.values()})

    def sizing_table(self) -> str:
        lengths = {j: self.max_model_len(j) for j in self.judges() if self.config["judges"][j]["backend"] == "vllm"}
        table = sizing_table(self.sizing)
        if lengths:
            table += "\nvLLM context length (options.max_model_len): " + ", ".join(
                f"{j} {n}" for j, n in lengths.items()
            )
        return table

    def max_model_len(self, judge: str) -> int | None:
        """The judge's `options.max_model_len`, with `auto` computed from the run's longest request
        (`workflow.context_length`); None when unset."""
        value = self.config["judges"][judge]["options"].get("max_model_len")
        if value != context_length.AUTO:
            return value
        if self._longest_turns is None:
            texts = context_length.dialogue_turn_texts(self.config["corpus"], self.dialogues)
            self._longest_turns = context_length.longest_dialogue(texts)
        changed = context_length.rewritten_turn_bytes(self.config["variants"])
        changed += context_length.injection_bytes(self.config["controls"])
        try:
            return context_length.auto_max_model_len(
                judge, self.config["judges"][judge], self.judge_cells(judge), self._longest_turns, changed
            )
        except context_length.ContextLengthError as err:
            raise ConfigError(str(err)) from err

    @property
    def n_shards(self) -> int:
        """The shard count of every judge, where they share one (`evaluation.shards` a number)."""
        counts = self.shard_counts()
        if len(counts) != 1:
            raise ValueError(f"the judges have different shard counts ({self.sizing_table()}); name the judge")
        return counts[0]

    def shard_dialogues(self, shard: int, n_shards: int | None = None) -> list[str]:
        """The dialogues of shard `shard` of `n_shards` (default: the judges' shared count)."""
        return list(self._shard_members[n_shards or self.n_shards].get(shard, []))

    def shards_of(self, n_shards: int) -> list[int]:
        """The shards of `n_shards` that hold at least one dialogue."""
        return sorted(self._shard_members[n_shards])

    def shards(self, judge: str | None = None) -> list[int]:
        """The judge's shards that hold at least one dialogue (an empty shard would be an empty job); without a
        judge, those of the judges' shared count."""
        return self.shards_of(self.n_shards if judge is None else self.judge_shard_count(judge))

    def judge_prompts(self, judge: str) -> list[str]:
        """The prompts of a judge's cells, in first-use order."""
        return list(dict.fromkeys(cell.prompt for cell in self.judge_cells(judge)))

    def asr_models(self) -> list[str]:
        return list(self.config["asr"]["models"])

    def judges(self) -> list[str]:
        return list(self.config["evaluation"]["judges"])

    def judge_cells(self, judge: str | None = None) -> list[JudgeCell]:
        """The judge cells of every judge of the evaluation, or of one judge (computed once: the input functions
        of every job ask for them)."""
        if judge not in self._cells:
            self._cells[judge] = judge_cells(self.config, judge)
        return list(self._cells[judge])

    def control_conditions(self) -> list[str]:
        """The conditions other than 'clean' of any judge cell, in first-use order."""
        return list(dict.fromkeys(c.condition for c in self.judge_cells() if c.condition != CLEAN))

    def synthesized_controls(self) -> list[str]:
        """The TTS controls ('tts_control', 'injection') the cells' conditions need, sorted."""
        return sorted({c for c in self.control_conditions() if Condition(c).needs_synthesis})

    def condition_transcripts(self) -> list[tuple[str, str]]:
        """(ASR model, condition) of every control cell that reads an ASR transcript of the audio it is given:
        an ASR transcript source, or the cascade of an audio cell."""
        if self._condition_transcripts is None:
            pairs = []
            for cell in self.judge_cells():
                model = transcript_model(self.config, cell)
                if cell.condition != CLEAN and model is not None:
                    pairs.append((model, cell.condition))
            self._condition_transcripts = list(dict.fromkeys(pairs))
        return list(self._condition_transcripts)

    def control_dialogues(self, shard: int | None = None, n_shards: int | None = None) -> list[str]:
        """The dialogues the control conditions are scored on (`controls.dialogues`), of shard `shard` of
        `n_shards`, or all."""
        if shard is None:
            return self._control_dialogues
        controlled = self._control_set
        return [d for d in self._shard_members[n_shards or self.n_shards].get(shard, []) if d in controlled]

    def is_control_dialogue(self, dialogue_id: str) -> bool:
        return dialogue_id in self._control_set

    def needs_babble(self) -> bool:
        return any(Condition(c).kind == BABBLE for c in self.control_conditions())

    def babble_shard_count(self) -> int:
        """The shard count babble is drawn within (babble mixes the turns of a shard's other dialogues, and the ASR
        of a babble turn is one job per dialogue, so every judge with babble cells shares one count)."""
        counts = {
            self.judge_shard_count(j)
            for j in self.judges()
            if any(Condition(c.condition).kind == BABBLE for c in self.judge_cells(j))
        }
        if len(counts) > 1:
            raise ConfigError(
                "evaluation.shards: babble conditions are mixed from the other dialogues of a judge's shard, so every "
                f"judge with babble cells needs the same shard count, but they get {sorted(counts)}; set "
                "evaluation.shards to one number"
            )
        return counts.pop()

    def shard_of_dialogue(self, dialogue_id: str) -> int:
        """The babble shard of a dialogue (`babble_shard_count`)."""
        return self._shards[self.babble_shard_count()][dialogue_id]

    def spoken_turns(self) -> list[tuple[str, str, str | None]]:
        """(dialogue, speaker, emotion label) of every turn the TTS jobs speak anew, where the corpus listing names
        its speaker: each variant turn (label None: the rewrite's, which is one of the DeepDialogue set), and under
        `tts_control` each target turn of the control dialogues with its corpus label."""
        imported = self.config["variants"]["source"] == IMPORTED
        controlled = self._control_set if TTS_CONTROL in self.synthesized_controls() else set()
        spoken = []
        for dialogue in self.dialogues:
            for turn in self._turns[dialogue.dialogue_id] if dialogue.speakers else []:
                speaker = dialogue.speakers[turn]
                if not imported:
                    spoken.append((dialogue.dialogue_id, speaker, None))
                if dialogue.dialogue_id in controlled:
                    spoken.append((dialogue.dialogue_id, speaker, dialogue.emotions[turn]))
        return spoken

    def _check_emotion_references(self) -> None:
        """With `tts.emotion_reference`, every new turn needs its RAVDESS clips: the folder, the speaker's gender,
        an actor of that gender, a RAVDESS emotion for the label."""
        settings = EmotionReferenceSettings.from_config(self.config["tts"].get("emotion_reference"))
        if settings is None:
            return
        try:
            problems = EmotionReferences(settings).problems(self.spoken_turns())
        except EmotionReferenceError as error:
            raise ConfigError(str(error)) from None
        if problems:
            shown = problems[:MAX_LISTED]
            more = [f"... and {len(problems) - MAX_LISTED} more"] if len(problems) > MAX_LISTED else []
            raise ConfigError("tts.emotion_reference cannot serve every new turn:\n  " + "\n  ".join(shown + more))

    def _check_babble(self) -> None:
        """Babble is made of the turns of the other dialogues of a shard: every shard with variants needs two
        dialogues that are long enough to be used."""
        n_shards = self.babble_shard_count()
        for shard in self.shards_of(n_shards):
            usable = [d for d in self.shard_dialogues(shard, n_shards) if self._turns[d]]
            if len(usable) == 1:
                raise ConfigError(
                    f"evaluation.conditions: babble needs the turns of other dialogues of the judge shard, but "
                    f"dialogue {usable[0]!r} is the only usable dialogue of shard {shard} of {n_shards}; lower "
                    "evaluation.shards or use white noise (noise_<snr>)"
                )


def export_checkout_to_jobs(checkout: str) -> None:
    """Put the checkout first on PYTHONPATH so jobs (also in per-rule conda envs and on cluster nodes,
    which inherit the environment) import this copy of `lalm_judge`."""
    paths = [checkout, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != checkout]]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
