"""Make the CPU twin's torchvision Python code only (run by `make vllm-cpu` with the twin's interpreter).

Qwen2.5-Omni's Hugging Face processor holds a `Qwen2VLVideoProcessor`, which imports torchvision's transforms even
when only audio is processed, and vLLM builds that processor for every Qwen2.5-Omni request. The package registry
serves torchvision only as CUDA builds: their C extensions (`_C.so`, `image.so`) link `libc10_cuda.so` and
`libtorch_cuda.so`, which the CPU torch wheel lacks, so they cannot load. Without them torchvision's transforms
still work (they are torch code), but `import torchvision` fails: `_meta_registrations.py` registers fake kernels of
`torchvision::nms` and `torchvision::qnms` unconditionally, and those operators come from `_C.so` ("operator
torchvision::nms does not exist"). This script removes the CUDA-linked libraries and registers those two fake
kernels only where the operators exist, as it does for every other operator of that file (`register_meta`). The
detection operators (nms, roi_align, ...) are then absent, as in torchvision's own build without extensions; no
judge calls them. The GPU environments install torchvision unchanged.

It stops with an error when the installed torchvision does not look as expected, so a version change is noticed.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

UNCONDITIONAL_FAKE = re.compile(r'^@torch\.library\.register_fake\("torchvision::(q?nms)"\)$', re.MULTILINE)
EXTENSIONS = ("_C.so", "image.so")


def python_only(package: Path) -> list[str]:
    """Strip `package` (torchvision's folder) of its CUDA-linked libraries and guard its two unconditional fake
    kernels; what was changed."""
    changed = []
    for name in EXTENSIONS:
        if (package / name).exists():
            (package / name).unlink()
            changed.append(f"removed {name}")
    bundled = package.parent / "torchvision.libs"
    if bundled.is_dir():
        shutil.rmtree(bundled)
        changed.append("removed torchvision.libs")
    registrations = package / "_meta_registrations.py"
    text = registrations.read_text(encoding="utf-8")
    guarded, count = UNCONDITIONAL_FAKE.subn(r'@register_meta("\1")', text)
    if count:
        registrations.write_text(guarded, encoding="utf-8")
        changed.append(f"guarded {count} fake kernels")
    elif "def register_meta" not in text or '@register_meta("nms")' not in text:
        raise SystemExit(f"{registrations}: neither the expected nms registration nor its guarded form; check it")
    return changed


def main() -> None:
    found = importlib.util.find_spec("torchvision")
    if found is None or found.origin is None:
        raise SystemExit("torchvision is not installed in this environment (requirements-vllm-cpu.lock lists it)")
    changed = python_only(Path(found.origin).parent)
    print(f"torchvision made Python code only: {', '.join(changed) or 'already done'}")
    # The check that matters: the import that failed before.
    import torchvision  # noqa: F401
    from torchvision.transforms.v2 import functional  # noqa: F401


if __name__ == "__main__":
    sys.exit(main())
