"""progress.heartbeat: a line every EVERY seconds while a step runs, none after it."""

import time

from ndvstack import progress


def test_a_line_every_interval_while_the_block_runs_and_none_after(monkeypatch, tmp_path):
    monkeypatch.setattr(progress, "EVERY", 0.05)
    lines = []
    (tmp_path / "part.whl").write_bytes(b"x" * (3 << 20))
    with progress.heartbeat(lines.append, "wheel: still packing", lambda: progress.written(tmp_path, 10 << 20)):
        time.sleep(0.3)
    count = len(lines)
    time.sleep(0.15)
    assert len(lines) == count >= 3
    assert lines[0].startswith("wheel: still packing ... 0 s, 3 of about 10 MB written")
