"""Training a pairwise judge: rationale-augmented supervised fine-tuning of an audio-LLM backbone in stages.

The recipe of the SageLM study (Ge et al., 2025): full fine-tuning of the language model of Qwen2.5-Omni's
thinker (or Qwen2-Audio) on pairwise records whose answer is the verdict (1, 2 or Tie) and a comparative
rationale, the semantic aspects first and the acoustic data mixed in in stage two. Modules:
- `settings`: the typed `training` section of a config;
- `records`: SageLM/LLaMA-Factory training records read and checked, each stage's seeded mix of datasets;
- `collator`: model inputs in the judge's own prompt layout, the loss on the answer only;
- `backbone`: loading the backbone, keeping its encoders fixed, LoRA adapters on the language model only;
- `sft`: the stages through TRL's SFTTrainer, the checkpoints (each a `transformers` judge) and the report.
docs/training.md has the recipe and the GPU settings.
"""
