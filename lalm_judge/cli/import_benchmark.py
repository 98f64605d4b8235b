"""`lalm-judge import --format hf DIR --out CORPUS_DIR`: a released benchmark (a folder written by `lalm-judge
export --format hf`, or a download of its Hub repository) as a corpus the workflow judges as it is."""

from __future__ import annotations

import argparse
import sys

from lalm_judge.core.dialogue import CorpusError
from lalm_judge.export.hf import import_hf
from lalm_judge.export.rows import ExportError

CONFIG_HINT = """\
Judge it with these sections in the workflow config (categories and severities select what is judged):
corpus:
  format: hf_benchmark
  path: {out}
variants:
  source: imported
  categories: {categories}
  severities: {severities}
tts:
  voices: {{}}
asr:
  models:  # 'imported' takes the released transcripts of asr:<name>; another model recognizes the audio again
{asr}"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lalm-judge import", description=__doc__)
    parser.add_argument("--format", required=True, choices=["hf"], help="hf = a Hugging Face dataset folder")
    parser.add_argument("dataset", help="the dataset folder (README.md and data/*.parquet)")
    parser.add_argument("--out", required=True, help="corpus folder to write (replaced only if an import wrote it)")
    args = parser.parse_args(argv)
    try:
        index = import_hf(args.dataset, args.out)
    except (ExportError, CorpusError, FileExistsError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    asr = "".join(f"    {s.removeprefix('asr:')}: {{model: imported}}\n" for s in index["transcript_sources"])
    print(f"{args.out}: {len(index['dialogues'])} dialogues, {index['n_variants']} variants")
    print(
        CONFIG_HINT.format(
            out=args.out,
            categories=index["categories"],
            severities=index["severities"],
            asr=asr or "    {}\n",
        ),
        end="",
    )
    return 0
