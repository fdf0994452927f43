"""Transcript files: written and read back as they were; a line that is not a transcript is named by file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envkit.transcripts import Transcript, TranscriptError, read_transcripts, write_transcripts


def a_transcript(reward: float) -> Transcript:
    return Transcript(model="tiny", env="echo", task={"seed": 1}, messages=[{"role": "user", "content": "hi"}],
                      turns=[], reward=reward, done=True, lost=False, split="test", task_index=0)


def test_transcripts_are_read_back_as_written(tmp_path: Path) -> None:
    path = write_transcripts(tmp_path / "runs" / "t.jsonl", [a_transcript(1.0)])
    write_transcripts(path, [a_transcript(0.5)], append=True)
    assert [t.to_json() for t in read_transcripts(path)] == [a_transcript(1.0).to_json(), a_transcript(0.5).to_json()]


@pytest.mark.parametrize(("line", "problem"), [
    ("{oops", "line 3: not JSON ("),
    ("[1, 2]", "line 3: expected a JSON object per line"),
    ('{"format": "something/else"}', "line 3: "),
])
def test_a_bad_line_is_named_by_file_and_line(tmp_path: Path, line: str, problem: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(a_transcript(1.0).to_json()) + "\n\n" + line + "\n")
    with pytest.raises(TranscriptError) as caught:
        read_transcripts(path)
    assert str(caught.value).startswith(f"{path}, {problem}")


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(TranscriptError, match="cannot read it"):
        read_transcripts(tmp_path / "missing.jsonl")
