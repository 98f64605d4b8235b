import pytest

from lalm_judge.audio.asr import load_asr, normalize_text, word_error_rate
from lalm_judge.audio.tts import SynthesisRequest, Voice, synthesize


def test_normalization_and_wer():
    assert normalize_text("Hello, World! It’s fine.") == "hello world it's fine"
    assert word_error_rate("the cat sat", "The cat, sat.") == 0.0
    assert word_error_rate("the cat sat", "the dog sat") == pytest.approx(1 / 3)
    assert word_error_rate("", "") == 0.0


@pytest.mark.slow
def test_whisper_tiny_transcribes_piper_speech_deterministically():
    text = "Have you ever tried making fresh pasta at home?"
    audio, sr = synthesize(Voice("piper", {"voice": "joe"}), SynthesisRequest(text))
    asr = load_asr("bundled:tiny.en", cpu_threads=1)
    first = asr.transcribe(audio, sr, word_timestamps=True)
    assert word_error_rate(text, first.text) <= 0.1
    assert first.words and first.words[0].start < first.words[-1].end <= len(audio) / sr + 0.5
    assert asr.transcribe(audio, sr).text == first.text


def test_unknown_bundled_model_is_an_error():
    from lalm_judge.audio.asr import resolve_model_path

    with pytest.raises(ValueError, match="only 'bundled:tiny.en'"):
        resolve_model_path("bundled:large-v3")


def test_cuda_whisper_loads_cublas_from_the_pip_package_when_the_system_has_none(monkeypatch, tmp_path):
    """This machine has no CUDA: the loader (ctypes) and the nvidia-cublas-cu12 package are stand-ins here; on a GPU
    node the same calls load the real libraries (envs/asr.yaml pins nvidia-cublas-cu12)."""
    import ctypes
    import sys
    import types

    from lalm_judge.audio import asr

    loaded = []

    def cdll(name, mode=0):
        if "/" not in name:
            raise OSError(f"{name}: cannot open shared object file")
        loaded.append((name, mode))

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    for name in ("nvidia", "nvidia.cublas"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    package = types.ModuleType("nvidia.cublas.lib")
    package.__path__ = [str(tmp_path)]
    sys.modules["nvidia.cublas"].lib = package
    monkeypatch.setitem(sys.modules, "nvidia.cublas.lib", package)
    assert asr.preload_cublas() == str(tmp_path)
    assert loaded == [
        (str(tmp_path / "libcublasLt.so.12"), ctypes.RTLD_GLOBAL),
        (str(tmp_path / "libcublas.so.12"), ctypes.RTLD_GLOBAL),
    ]

    monkeypatch.setitem(sys.modules, "nvidia.cublas.lib", None)
    with pytest.raises(RuntimeError, match=r"cuBLAS 12.*nvidia-cublas-cu12"):
        asr.WhisperASR("base", device="cuda", compute_type="float16")
