"""Judge backends behind one small interface (see `base`), registered by name with lazy imports."""

from lalm_judge.registry import LazyRegistry

BACKENDS = LazyRegistry(
    "judge backend",
    {
        "transformers": "lalm_judge.judges.hf:TransformersBackend",
        "vllm": "lalm_judge.judges.vllm_backend:VLLMBackend",
        "openai": "lalm_judge.judges.openai_backend:OpenAIBackend",
        "embedding": "lalm_judge.judges.embedding:EmbeddingBackend",
    },
    extras={"vllm": "the vLLM GPU environment (envs/judge-vllm.yaml)"},
)
