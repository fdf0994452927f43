"""`GET /metrics`: Prometheus text with sessions, refusals, bad input, frames and their latency."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from websockets.sync.client import connect

from envkit import CapacityError, EnvClient, create_app
from envkit.client import websocket_url
from envkit.core.metrics import LATENCY_BUCKETS_S
from envkit.app.targets import resolve_target
from envkit.testing import running_server


SAMPLE = re.compile(r'^(\w+)(\{[^}]*\})? (\S+)$')


def scrape(url: str) -> tuple[dict[str, float], str]:
    response = httpx.get(url + "/metrics", timeout=10, trust_env=False)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for line in response.text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) \w+ ", line), line
            continue
        match = SAMPLE.match(line)
        assert match, f"not a Prometheus sample: {line!r}"
        samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return samples, response.text


def test_metrics_count_sessions_refusals_bad_input_and_frames() -> None:
    target = resolve_target("echo")
    app = create_app(target.env_class, target.action_cls, target.observation_cls, max_concurrent_envs=2,
                     capacity_wait_s=0)
    with running_server(app) as url:
        with EnvClient(url).sync() as first, EnvClient(url).sync() as second:
            first.reset()
            for index in range(5):
                first.step({"message": f"m{index}"})
            second.reset()
            second.call("echo", message="tool")
            with pytest.raises(CapacityError):
                EnvClient(url).sync().connect()
            samples, text = scrape(url)
            assert samples["envkit_sessions_active"] == 2 and samples["envkit_sessions_max"] == 2
        with connect(websocket_url(url), proxy=None) as sock:
            for frame in ("{not json", '{"type": "dance"}', '{"type": "step", "data": {}}'):
                sock.send(frame)
                assert json.loads(sock.recv(timeout=10))["type"] == "error"
        samples, text = scrape(url)
    assert samples["envkit_sessions_active"] == 0
    assert samples["envkit_sessions_opened_total"] == 3
    assert samples['envkit_sessions_closed_total{code="1000"}'] == 3
    assert samples['envkit_refusals_total{reason="capacity"}'] == 1
    assert samples['envkit_bad_input_total{kind="invalid_json"}'] == 1
    assert samples['envkit_bad_input_total{kind="unknown_type"}'] == 1
    # echo takes a step before reset (ALLOWS_STEP_BEFORE_RESET), so the empty step is a validation error
    assert samples['envkit_bad_input_total{kind="validation_error"}'] == 1
    assert samples['envkit_error_replies_total{code="VALIDATION_ERROR"}'] == 1
    assert samples['envkit_frames_total{type="step"}'] == 6
    assert samples['envkit_frames_total{type="reset"}'] == 2
    assert samples['envkit_frames_total{type="call"}'] == 1
    assert samples['envkit_frames_total{type="invalid"}'] == 1
    assert samples['envkit_frames_total{type="unknown"}'] == 1
    # the latency histogram: cumulative buckets, +Inf equal to the count, a plausible sum
    buckets = [samples[f'envkit_frame_seconds_bucket{{type="step",le="{bound!r}"}}'] for bound in LATENCY_BUCKETS_S]
    assert buckets == sorted(buckets)
    assert samples['envkit_frame_seconds_bucket{type="step",le="+Inf"}'] == 6
    assert samples['envkit_frame_seconds_count{type="step"}'] == 6
    assert 0 < samples['envkit_frame_seconds_sum{type="step"}'] < 6
    assert "# TYPE envkit_frame_seconds histogram" in text
