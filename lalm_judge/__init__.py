"""lalm-judge: benchmark large audio-language models as safety judges of spoken dialogue."""

__version__ = "0.1.0"
