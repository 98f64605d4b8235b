"""TTS engine implementations; import them through `lalm_judge.tts.ENGINES`."""
