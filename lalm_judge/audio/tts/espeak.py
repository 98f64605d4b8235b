"""espeak-ng formant synthesis (Debian package `espeak-ng`): robotic but intelligible and deterministic."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf


class EspeakEngine:
    def __init__(self, voice: str = "en-us+f3", speed: int = 165, pitch: int = 50):
        self.binary = shutil.which("espeak-ng")
        if self.binary is None:
            raise RuntimeError(
                "espeak-ng is not installed; run `apt-get install espeak-ng` (make demo does it as root)"
            )
        if not 0 <= pitch <= 99:
            raise ValueError(f"espeak pitch must be 0-99 (espeak-ng -p), got {pitch}")
        self.voice, self.speed, self.pitch = voice, speed, pitch

    def synthesize(self, request) -> tuple[np.ndarray, int]:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "tts.wav"
            subprocess.run(
                [
                    self.binary,
                    "-v",
                    self.voice,
                    "-s",
                    str(self.speed),
                    "-p",
                    str(self.pitch),
                    "-w",
                    str(out),
                    "--stdin",
                ],
                # On stdin, not as an argument: an argument is limited to 128 KiB (E2BIG); the speech is the same.
                input=request.text.encode("utf-8"),
                check=True,
                capture_output=True,
            )
            audio, sr = sf.read(out, dtype="float32")
        return audio, sr

    def describe(self) -> dict[str, str]:
        version = subprocess.run([self.binary, "--version"], capture_output=True, text=True).stdout.split()
        return {"tts_model": f"espeak-ng:{self.voice}", "tts_revision": version[3] if len(version) > 3 else "unknown"}
