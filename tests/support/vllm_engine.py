"""vllm-plugin-meralion2's n-gram processor built as vLLM 0.16 builds it in its engine process: the engine core runs
in a process of its own, started through multiprocessing (vLLM 0.16 `utils/system_utils.py` `get_mp_context`:
'spawn' once CUDA is initialized, so the child has only the environment, nothing of the parent's memory), and builds
the `vllm.logits_processors` entry points there, the plugin's `NoRepeatNGramV1LogitsProcessor(vllm_config, device,
is_pin_memory)` among them, which reads MERALION_NGRAM_SIZE in its constructor (vllm-plugin-meralion2 0.3.0
`transformers_utils/no_repeat_logits_processor.py`). The processor is the released plugin's code, on torch alone (the
plugin supports vLLM 0.12-0.16, not the CPU twin's 0.32); its batch is given as vLLM's `BatchUpdate.added` carries a
sequence, (slot, params, prompt token ids, output token ids), and `apply` gets the next position's logits.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from types import SimpleNamespace


def build_plugin_processor(prompt: Sequence[int], output: Sequence[int], vocab_size: int, results) -> None:
    """In the engine process: the plugin's processor, its n-gram size and the tokens it bans at the next step."""
    import os

    import torch
    from vllm_plugin_meralion2.transformers_utils.no_repeat_logits_processor import NoRepeatNGramV1LogitsProcessor

    processor = NoRepeatNGramV1LogitsProcessor(None, torch.device("cpu"), False)
    processor.update_state(SimpleNamespace(removed=[], added=[(0, None, list(prompt), list(output))], moved=[]))
    logits = processor.apply(torch.zeros(1, vocab_size))
    banned = torch.nonzero(torch.isinf(logits[0])).flatten().tolist()
    results.put((os.environ.get("MERALION_NGRAM_SIZE"), processor.ngram_size, banned))


def start_engine_process(prompt: Sequence[int], output: Sequence[int], vocab_size: int) -> tuple[str | None, int, list]:
    """Run `build_plugin_processor` in a spawned process, as vLLM starts its engine core; its findings."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    engine = context.Process(target=build_plugin_processor, args=(list(prompt), list(output), vocab_size, results))
    engine.start()
    found = results.get(timeout=300)
    engine.join(timeout=300)
    return found
