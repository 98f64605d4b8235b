"""One rank of a two-process training preparation (tests/training/test_lengths.py): the prompt lengths through the
shared cache, then the verdict accuracy over a gloo process group, printed as one JSON line.

    RANK=r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=p python -m tests.support.ranks MODEL RECORDS AUDIO CACHE
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
import transformers

from lalm_judge.training.collator import PairwiseSFTCollator
from lalm_judge.training.lengths import prompt_lengths
from lalm_judge.training.records import read_dataset
from lalm_judge.training.settings import DatasetSource
from lalm_judge.training.validation import verdict_accuracy


def main(model_dir: str, records_file: str, audio_root: str, cache_dir: str) -> None:
    torch.set_num_threads(1)
    processor = transformers.AutoProcessor.from_pretrained(model_dir)
    model = transformers.Qwen2AudioForConditionalGeneration.from_pretrained(model_dir)
    collator = PairwiseSFTCollator(processor, "You are a helpful assistant.", 60.0)
    records = read_dataset(DatasetSource("records", (records_file,), audio_root))
    lengths, measured = prompt_lengths(records, collator, cache_dir, workers=1)
    dist.init_process_group("gloo")
    try:
        rank, accuracy = dist.get_rank(), verdict_accuracy(model, collator, records, batch_size=2)
    finally:
        dist.destroy_process_group()
    print(json.dumps({"rank": rank, "lengths": lengths, "measured": measured, "accuracy": accuracy}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
