"""The benchmark harness runs: a smoke test, never a timing assertion."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).parents[1] / "bench" / "run.py"


def test_bench_quick_runs_and_reports_both_sqlite_subjects(tmp_path: Path) -> None:
    report = tmp_path / "bench.json"
    result = subprocess.run(
        [
            sys.executable,
            str(RUN),
            "--quick",
            "--engine",
            "sqlite",
            "--only",
            "enqueue_1,drain_one_1w",
            "--json",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    header = next(line for line in result.stdout.splitlines() if line.startswith("| operation"))
    columns = [column.strip() for column in header.strip("|").split("|")]
    assert columns[:4] == ["operation", "unit", "alkstore", "raw sqlite3"]
    assert columns[-2:] == ["target", "holds"]

    results = json.loads(report.read_text(encoding="utf-8"))
    assert results["machine"]["cpu_count"]
    sqlite = results["engines"]["sqlite"]
    assert sqlite["available"]
    assert [row["key"] for row in sqlite["operations"]] == ["enqueue_1", "drain_one_1w"]
    for row in sqlite["operations"]:
        for subject in ("alkstore", "raw sqlite3"):
            assert row["figures"][subject]["value"] > 0, (row["key"], subject, row["figures"])
