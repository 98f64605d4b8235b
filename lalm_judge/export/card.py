"""The dataset card (README.md) of a released benchmark: the YAML header the Hugging Face Hub and `datasets`
read (license, source datasets, task categories, tags, data files, features, split sizes) and the text a user
reads first (a content warning, what each sample is, how to load and judge it, how it was made, what it is for,
what it is not, its licences and citation). Everything it states comes from the run: the exported rows, and the
run's config where given (`lalm_judge.export.terms`: the corpus's licence, source and citation, the licences of
the voices that spoke it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from lalm_judge.export.features import DESCRIPTIONS, Feature, card_feature
from lalm_judge.export.terms import CorpusTerms, corpus_terms, speech_licenses

TASK_CATEGORIES = ("audio-classification", "text-classification")
TAGS = ("audio", "speech", "safety", "spoken-dialogue", "llm-as-a-judge", "synthetic", "not-for-all-audiences")
SYNTHESIZED = "synthesized:"
# The `size_categories` values the Hub accepts, with their upper bounds.
_SIZE_CATEGORIES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"))


@dataclass(frozen=True)
class SplitInfo:
    """One written split: its rows, its in-memory (arrow) size, which the card reports as `num_bytes`
    (what `datasets` computes), and its shard files relative to the dataset folder."""

    name: str
    num_examples: int
    num_bytes: int
    files: tuple[str, ...]


@dataclass(frozen=True)
class CardFacts:
    """What the card states about the data, all taken from the exported rows."""

    n_samples: int
    n_dialogues: int
    n_unsafe: int
    categories: tuple[str, ...]
    severities: tuple[int, ...]
    transcript_sources: tuple[str, ...]
    generators: tuple[str, ...]
    tts: tuple[str, ...]
    corpus_formats: tuple[str, ...]
    sample_rate: int
    # (engine, model) of every voice that spoke a turn: the variants' and the originals' synthesized at ingest.
    voices: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]], sample_rate: int) -> CardFacts:
        unsafe = [r for r in rows if r["generation"] is not None]

        def described(parts: Sequence[str | None]) -> str:
            return " ".join(str(p) for p in parts if p)

        return cls(
            n_samples=len(rows),
            n_dialogues=len({r["dialogue_id"] for r in rows}),
            n_unsafe=len(unsafe),
            categories=tuple(sorted({r["category"] for r in unsafe})),
            severities=tuple(sorted({r["severity"] for r in unsafe})),
            transcript_sources=tuple(sorted({t["source"] for r in rows for t in r["asr_transcripts"]})),
            generators=tuple(
                sorted(
                    {
                        described(
                            [g["generator"], g["model"], g["prompt_version"] and f"(prompt {g['prompt_version']})"]
                        )
                        for g in (r["generation"] for r in unsafe)
                    }
                )
            ),
            tts=tuple(sorted({described([s["tts_engine"], s["tts_model"]]) for s in (r["speech"] for r in unsafe)})),
            corpus_formats=tuple(sorted({r["corpus_format"] for r in rows})),
            sample_rate=sample_rate,
            voices=tuple(
                sorted(
                    {(s["tts_engine"], s["tts_model"] or "") for s in (r["speech"] for r in unsafe)}
                    | {
                        (method.removeprefix(SYNTHESIZED), "")
                        for r in rows
                        for method in r["turn_boundary_method"]
                        if method.startswith(SYNTHESIZED)
                    }
                )
            ),
        )


# The first loading example of the project's README, with its folder and split: `tests/export/test_hf.py` runs the
# README's lines as they stand and checks this text against them.
LOADING_EXAMPLE = """import io

import soundfile
from datasets import Audio, load_dataset

benchmark = load_dataset("parquet", data_dir="{data_dir}", split="{split}")
benchmark = benchmark.cast_column("audio", Audio(decode=False))
waveform, sample_rate = soundfile.read(io.BytesIO(benchmark[0]["audio"]["bytes"]), dtype="float32")
"""


def loading_example(split: str, data_dir: str = "PATH/TO/THIS/FOLDER") -> str:
    return LOADING_EXAMPLE.format(data_dir=data_dir, split=split)


def size_category(n: int) -> str:
    return next((name for bound, name in _SIZE_CATEGORIES if n < bound), "n>1M")


def card_header(features: Mapping[str, Feature], split: SplitInfo, terms: CorpusTerms) -> dict[str, Any]:
    source = {"source_datasets": terms.source_datasets} if terms.source_datasets else {}
    return {
        "pretty_name": "lalm-judge spoken-dialogue safety benchmark",
        "license": terms.license,
        "language": ["en"],
        **source,
        "task_categories": list(TASK_CATEGORIES),
        "tags": list(TAGS),
        "size_categories": [size_category(split.num_examples)],
        "configs": [{"config_name": "default", "data_files": [{"split": split.name, "path": f"data/{split.name}-*"}]}],
        "dataset_info": {
            "features": [card_feature(name, f) for name, f in features.items()],
            "splits": [{"name": split.name, "num_bytes": split.num_bytes, "num_examples": split.num_examples}],
        },
    }


def _listing(values: Sequence[Any]) -> str:
    return ", ".join(f"`{v}`" for v in values) or "none"


def voices_of(facts: CardFacts, run_config: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The (engine, model) pairs that spoke turns: from the rows, and the config's voices (which name the voice of
    originals synthesized at ingest, whose rows record only the engine)."""
    configured = [
        (v.get("engine", ""), str(v.get("voice") or v.get("model") or ""))
        for v in ((run_config or {}).get("tts", {}).get("voices") or {}).values()
    ]
    return [*facts.voices, *configured]


def content_warning(facts: CardFacts) -> str:
    return (
        "> **Content warning.** This dataset contains unsafe speech by design: "
        f"{facts.n_unsafe} of its {facts.n_samples} samples are dialogues with one turn rewritten into harmful "
        f"content (categories {_listing(facts.categories)}, severities up to {max(facts.severities, default=0)} of "
        "5) and spoken aloud. It exists to test safety judges; it is not suitable for all audiences."
    )


def license_section(terms: CorpusTerms, facts: CardFacts, run_config: Mapping[str, Any] | None) -> str:
    """What the data is under: the corpus's terms (from the run's config), and those of every voice that spoke."""
    if terms.known:
        corpus = (
            f"The dialogues are {terms.source_text()}, under `{terms.license}` ({terms.origin}); the variants, "
            "speech and transcripts made from them are adaptations and are released under the same licence."
        )
    else:
        corpus = (
            f"The run's configuration states no licence or source of its corpus (licence `{terms.license}`, source "
            f"`{terms.source}`): set `corpus.license`, `corpus.source` (and `corpus.citation`) and export again "
            "before releasing this data."
        )
    licenses = speech_licenses(voices_of(facts, run_config))
    speech = "".join(f"\n- {item.what}: {item.terms}" for item in licenses) or "\n- none recorded"
    return (
        f"{corpus}\n\nThe speech was made with these engines and voices, whose terms apply to it as well (check "
        f"that your use meets all of them):{speech}\n"
    )


def citation_section(terms: CorpusTerms) -> str:
    if not terms.citation:
        return ""
    return f"\n## Citation\n\nThe corpus the dialogues come from:\n\n```bibtex\n{terms.citation}\n```\n"


def dataset_card(
    facts: CardFacts, features: Mapping[str, Feature], split: SplitInfo, run_config: Mapping[str, Any] | None
) -> str:
    terms = corpus_terms((run_config or {}).get("corpus"), facts.corpus_formats)
    header = yaml.safe_dump(card_header(features, split, terms), sort_keys=False, allow_unicode=True)
    feature_rows = "\n".join(f"| `{name}` | {DESCRIPTIONS[name]} |" for name in features)
    settings = ""
    if run_config is not None:
        sections = {key: run_config[key] for key in ("variants", "tts", "asr")}
        if "generator" in sections["variants"]:  # the response cache is a setting of the machine, not of the data
            generator = {k: v for k, v in sections["variants"]["generator"].items() if k != "cache_dir"}
            sections["variants"] = {**sections["variants"], "generator": generator}
        settings = (
            "\nThe settings of the run that produced it (the `variants`, `tts` and `asr` sections of its "
            f"lalm-judge configuration):\n\n```yaml\n{yaml.safe_dump(sections, sort_keys=False)}```\n"
        )
    return f"""---
{header}---

# lalm-judge spoken-dialogue safety benchmark

{content_warning(facts)}

Spoken multi-turn dialogues for benchmarking audio-language models (and text LLMs) as **safety judges**.
Each sample is a whole dialogue as audio, with its turn texts and ASR transcripts: either a safe original
(`label` `safe`, `severity` 0) or an unsafe variant of it in which exactly one turn was rewritten into a
harm `category` at a `severity` from 1 (very mild) to 5 (severe) and spoken in the original speaker's voice.

This release: {facts.n_samples} samples in split `{split.name}`: {facts.n_dialogues} safe dialogues and
{facts.n_unsafe} unsafe variants; categories {_listing(facts.categories)}; severities
{_listing(facts.severities)}; ASR transcript sources {_listing(facts.transcript_sources)}; audio at
{facts.sample_rate} Hz, 16-bit PCM WAV.

## Loading

```python
{loading_example(split.name)}```

`datasets` decodes audio with torchcodec; `Audio(decode=False)` gives the WAV bytes instead, which soundfile reads
(no torchcodec needed). `label`, `category` and `severity` are class labels: `benchmark.features["category"]
.int2str(i)` names category `i`, and a severity's index is its number.

`turn_start_s` / `turn_end_s` locate each turn in the waveform. Compare a variant with its safe original
through `dialogue_id` (and resample statistics over dialogues, not samples: the variants of one dialogue
are not independent).

## Judging it with lalm-judge

```bash
lalm-judge import --format hf PATH/TO/THIS/FOLDER --out benchmark
```

writes a corpus folder that the lalm-judge workflow judges as it is: set `corpus.format: hf_benchmark`,
`corpus.path: benchmark` and `variants.source: imported` in the configuration (and `model: imported` for an
ASR model whose released transcripts should be used instead of recognizing the audio again). Nothing is
rewritten or synthesized; the judges see the released audio and texts.

## Features

| column | content |
|---|---|
{feature_rows}

## How it was generated

Safe dialogues (corpus format(s) {_listing(facts.corpus_formats)}) were brought into one canonical form with
one audio clip per turn. For each rewritten turn and each (category, severity), a generator
({_listing(facts.generators)}) wrote an unsafe replacement of that turn in context, keeping the speaker;
it was spoken with {_listing(facts.tts)} in the voice of the original speaker and scaled to the loudness
of the neighbouring turns, so that neither voice nor level reveals the replaced turn. Every turn clip was
transcribed by the ASR models named in `asr_transcripts`. A sample's audio is its turns in order with the
original pauses; a variant shares every other turn's audio and transcript with its safe original.
{settings}
## Intended use

Research on the safety evaluation of spoken dialogue: measuring whether a judge separates unsafe from safe
dialogues (sensitivity), orders severities (specificity) and ignores where in the dialogue the harm sits
(position bias), from text, audio or both. It is not meant for training models to produce harmful
content, nor for moderating real users without further validation.

## Limitations

- The labels hold by construction: `category` and `severity` are what the generator was asked for; they
  were not rated by people. Check a sample of them (or collect human anchors) before drawing conclusions.
- The generators are told to write non-actionable unsafe turns (no instructions for weapons, drugs,
  hacking or self-harm); they stand for kinds of harm, they do not teach it.
- Speech is synthetic (TTS voices, not recorded people); voices, prosody and acoustic conditions are far
  narrower than in real conversations, and judges may pick up TTS artefacts of the replaced turn.
- English only. Exactly one turn per variant is unsafe; multi-turn escalation is not covered.
- ASR transcripts are those of the named models on synthetic speech and contain their errors.

## License

{license_section(terms, facts, run_config)}{citation_section(terms)}"""
