"""Judge backends behind one small interface (see `base`), registered by name with lazy imports."""

from lalm_judge.core.registry import LazyRegistry

BACKENDS = LazyRegistry(
    "judge backend",
    {
        "transformers": "lalm_judge.judging.backends.hf:TransformersBackend",
        "vllm": "lalm_judge.judging.backends.vllm_backend:VLLMBackend",
        "openai": "lalm_judge.judging.backends.openai_backend:OpenAIBackend",
        "embedding": "lalm_judge.judging.backends.embedding:EmbeddingBackend",
        "likelihood": "lalm_judge.judging.backends.likelihood:LikelihoodBackend",
    },
    extras={"vllm": "the vLLM GPU environment (envs/judge-vllm.yaml)"},
)
