"""Settings of a real vLLM engine on CPU in the test process (the engine tests, tests/engine).

The engine runs in the test process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`: no engine process to start, about 10 s to
a started engine instead of 40), with 1 GiB of KV cache (`VLLM_CPU_KVCACHE_SPACE`), and without torch.compile
(`TORCHDYNAMO_DISABLE`): vLLM compiles the count of its logprob ranks even in eager mode (0.16 and 0.32
`v1/sample/ops/logprobs.py`), which on CPU builds C++ code at the first request with logprobs, 15 to 45 s here; the
function is read when the engine starts. The judges get `ENGINE_KWARGS` through their `options.engine_kwargs`: no
graph capture, and the model runs in the engine's process (no executor process). Tiny models run fastest with one
thread per operator: export `OMP_NUM_THREADS=1` before pytest (torch reads it when it is imported).
"""

ENGINE_ENVIRONMENT = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "TORCHDYNAMO_DISABLE": "1"}
ENGINE_KWARGS = {"enforce_eager": True, "distributed_executor_backend": "uni"}


def waveform(seconds: float, sample_rate: int = 16000):
    """A quiet tone of `seconds` at `sample_rate`, float32."""
    import numpy as np

    return (np.sin(np.arange(int(sample_rate * seconds)) / 9) * 0.1).astype(np.float32)
