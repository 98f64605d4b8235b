"""1,000 requests through each OpenAI-compatible client at its configured concurrency (bench/api_load.py): the
`openai` judge backend with text and with audio requests, and the `llm` rewrite generator. The server is the
fault proxy with canned answers, each delayed as a remote endpoint's would be, so that the concurrency cap is
what bounds the requests in flight. Each client runs in its own process and reports its peak RSS."""

from __future__ import annotations

import pytest

from bench.api_load import measure

pytestmark = [pytest.mark.slow, pytest.mark.server]

CONCURRENCY = 16


@pytest.mark.parametrize("client", ["judge_text", "rewrite"])
def test_a_thousand_requests_lose_nothing_at_the_concurrency_cap(client):
    outcome = measure(client, 1000, CONCURRENCY, latency_s=0.05)
    assert outcome["lost"] == 0 and outcome["answered"] == 1000
    assert outcome["server_requests"] == 1000, "no request sent twice"
    assert outcome["max_in_flight"] == CONCURRENCY


def test_audio_requests_keep_memory_bounded():
    """The judge stage sends audio in batches and the backend encodes it only inside the concurrency cap: five
    times the requests take about the same peak memory."""
    small = measure("judge_audio", 200, CONCURRENCY, latency_s=0.02, audio_s=2.0, batch_size=50)
    large = measure("judge_audio", 1000, CONCURRENCY, latency_s=0.02, audio_s=2.0, batch_size=50)
    assert small["lost"] == large["lost"] == 0 and large["max_in_flight"] == CONCURRENCY
    assert large["peak_rss_mb"] - small["peak_rss_mb"] < 20, (small, large)
