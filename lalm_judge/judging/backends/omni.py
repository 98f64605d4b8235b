"""Qwen2.5-Omni's processor for audio-only judging, where torchvision is absent.

`AutoProcessor` builds Qwen2.5-Omni's video processor, which needs torchvision (transformers 5.24
`video_processing_utils.BaseVideoProcessor`). An audio judge never sends video, so the processor is built from
the checkpoint's own tokenizer, feature extractor and chat template, with transformers' Pillow image processor
and the base video processor, which is never called; audio and text go through the real processor code.
The CPU environment has no torchvision (its wheels need CUDA here); the judge environments have it and load
the processor with `AutoProcessor` as usual.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

OMNI_MODEL_TYPES = ("qwen2_5_omni", "qwen2_5_omni_thinker")
# Where a checkpoint keeps its processor's chat template: a Jinja file (transformers 5) or the JSON of older saves.
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


@contextlib.contextmanager
def video_processor_check_without_torchvision() -> Iterator[None]:
    """Let a processor with a video processor be built where torchvision is absent.

    Without torchvision transformers does not export `VideoProcessorMixin`, so the processor's class check
    falls through to a placeholder mapping and fails.
    """
    from transformers import processing_utils
    from transformers.video_processing_utils import VideoProcessorMixin

    module = processing_utils.transformers_module
    if hasattr(module, "VideoProcessorMixin"):
        yield
        return
    module.VideoProcessorMixin = VideoProcessorMixin
    try:
        yield
    finally:
        del module.VideoProcessorMixin


def audio_omni_processor(tokenizer: Any, feature_extractor: Any, chat_template: str | None) -> Any:
    """A real `Qwen2_5OmniProcessor` for audio and text (Pillow image processor, base video processor)."""
    from transformers import Qwen2_5OmniProcessor, Qwen2VLImageProcessorPil
    from transformers.video_processing_utils import BaseVideoProcessor

    with video_processor_check_without_torchvision():
        return Qwen2_5OmniProcessor(
            image_processor=Qwen2VLImageProcessorPil(),
            video_processor=BaseVideoProcessor(),
            feature_extractor=feature_extractor,
            tokenizer=tokenizer,
            chat_template=chat_template,
        )


def _chat_template(source: str, load_kwargs: Mapping[str, Any]) -> str | None:
    from transformers.utils.hub import cached_file

    for name in TEMPLATE_FILES:
        path = cached_file(source, name, _raise_exceptions_for_missing_entries=False, **load_kwargs)
        if path is None:
            continue
        text = Path(path).read_text(encoding="utf-8")
        return json.loads(text)["chat_template"] if name.endswith(".json") else text
    return None


def load_audio_omni_processor(source: str, load_kwargs: Mapping[str, Any]) -> Any:
    """The audio-only processor of a Qwen2.5-Omni checkpoint (folder or hub id) without torchvision."""
    from transformers import AutoTokenizer, WhisperFeatureExtractor

    kwargs = {key: value for key, value in load_kwargs.items() if key == "revision"}
    return audio_omni_processor(
        AutoTokenizer.from_pretrained(source, **load_kwargs),
        WhisperFeatureExtractor.from_pretrained(source, **kwargs),
        _chat_template(source, kwargs),
    )
