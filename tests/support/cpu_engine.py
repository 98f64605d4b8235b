"""Settings of a real vLLM engine on CPU in the test process (the engine tests, tests/engine).

The engine runs in the test process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`: no engine process to start, about 10 s to
a started engine instead of 40), with 1 GiB of KV cache (`VLLM_CPU_KVCACHE_SPACE`) and one thread per operator
(`OMP_NUM_THREADS`, which tiny models run fastest with). The judges get `ENGINE_KWARGS` through their
`options.engine_kwargs`: no graph capture, and the model runs in the engine's process (no executor process).
"""

ENGINE_ENVIRONMENT = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}
ENGINE_KWARGS = {"enforce_eager": True, "distributed_executor_backend": "uni"}


def waveform(seconds: float, sample_rate: int = 16000):
    """A quiet tone of `seconds` at `sample_rate`, float32."""
    import numpy as np

    return (np.sin(np.arange(int(sample_rate * seconds)) / 9) * 0.1).astype(np.float32)
