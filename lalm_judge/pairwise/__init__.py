"""The pairwise track: given a text query and two spoken responses, which is better on an aspect, and why.

The task of the SageLM study (Ge et al., 2025). Modules:
- `items`: the item table (one row per item and aspect, `core.tables.PAIRWISE_ITEMS`), the project's own
  items (a JSONL of queries and response texts, spoken with the TTS engines) and the missing-audio policy;
- `sagelm`: import and export of SageLM's LLaMA-Factory records (alpaca layout with two audios);
- `prompts`: the versioned prompts of `prompts/pairwise/` and the rendering of one presentation order;
- `parsing`: reading a verdict (1, 2 or Tie), its rationale and a status from an answer; the swap and the
  rule that combines both orders;
- `transcripts`: ASR transcripts of the responses (the cascade's input);
- `judge`: the judge stage, every item in both orders through the judging backends;
- `metrics`: accuracy, agreement, swap consistency and parse failures with item-level bootstrap CIs, per
  aspect, overall and by response duration (tables in, tables out: it reads only core, like analysis).
"""
