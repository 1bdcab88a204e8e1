"""alkstore beside what users would pick instead: one run, one machine, ratios.

    python bench/run.py [--quick] [--engine sqlite|postgres|all] [--only OP[,OP...]]
                        [--repeat N] [--json PATH]

For each engine, every subject (alkstore and its anchors, from
``bench/sqlite_subjects.py`` and ``bench/postgres_subjects.py``) measures every
operation in fresh storage; a table per engine puts them side by side with
the ratios and the targets of ``bench/targets.py``, and the same goes to a
JSON file (default ``bench/results/latest.json``). Progress goes to stderr.
``--repeat N`` measures each figure N times (subjects interleaved) and reports
the median.

Exit status: 0 when every figure was measured (a target may still be missed:
the table says so), 1 when a measurement failed (it shows as "error: ..."),
2 for bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fnmatch
import importlib
import importlib.metadata
import json
import os
import platform
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
import traceback
import urllib.parse
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psycopg
from _harness import OPERATIONS, Operation, Sizes, Subject, server_dsn
from targets import TARGETS, TIMES, judge

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "latest.json"
ENGINES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}
MEASURED = "alkstore"
LEGEND = (
    f"{TIMES} = alkstore ÷ anchor for rates, anchor ÷ alkstore for times and CPU: "
    "above 1 means alkstore is better."
)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    try:
        operations = _operations(arguments.only)
    except ValueError as exc:
        print(f"run.py: {exc}", file=sys.stderr)
        return 2
    engines = list(ENGINES) if arguments.engine == "all" else [arguments.engine]
    started = time.monotonic()
    results: dict[str, Any] = {
        "machine": machine_facts(),
        "run": {
            "quick": arguments.quick,
            "repeat": arguments.repeat,
            "operations": operations,
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        },
        "engines": {},
    }
    failed = False
    for engine in engines:
        sizes = Sizes.for_run(engine, quick=arguments.quick)
        report = run_engine(engine, operations, sizes, repeat=arguments.repeat)
        results["engines"][engine] = report
        failed = failed or report["failed"]
        print(render(report, results["machine"], quick=arguments.quick), flush=True)
    results["run"]["seconds"] = round(time.monotonic() - started, 1)
    path = Path(arguments.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    _progress(f"done in {results['run']['seconds']:g} s; JSON in {path}")
    return 1 if failed else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a run under 3 minutes")
    parser.add_argument("--engine", choices=[*ENGINES, "all"], default="all")
    parser.add_argument(
        "--only",
        metavar="OP[,OP...]",
        help=f"only these operations (or patterns, such as async_*): {', '.join(OPERATIONS)}",
    )
    parser.add_argument(
        "--repeat",
        type=_positive,
        default=1,
        metavar="N",
        help="measure N times, report the median",
    )
    parser.add_argument("--json", default=str(DEFAULT_JSON), metavar="PATH")
    return parser


def _positive(text: str) -> int:
    number = int(text)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {number}")
    return number


def _operations(only: str | None) -> list[str]:
    """The operations ``--only`` names (each a key, or a pattern such as ``async_*``)."""
    if not only:
        return list(OPERATIONS)
    chosen = [key.strip() for key in only.split(",") if key.strip()]
    unknown = [c for c in chosen if not any(fnmatch.fnmatchcase(key, c) for key in OPERATIONS)]
    if unknown:
        raise ValueError(f"unknown operation {', '.join(unknown)} (known: {', '.join(OPERATIONS)})")
    return [key for key in OPERATIONS if any(fnmatch.fnmatchcase(key, c) for c in chosen)]


# Running


def run_engine(
    engine: str, operations: list[str], sizes: Sizes, *, repeat: int = 1
) -> dict[str, Any]:
    """Measure every operation with every available subject of ``engine``."""
    report: dict[str, Any] = {
        "engine": engine,
        "available": False,
        "reason": None,
        "version": None,
        "sizes": asdict(sizes),
        "subjects": [],
        "operations": [],
        "targets": [],
        "failed": False,
    }
    subjects, reason, version = load_subjects(engine)
    report["version"] = version
    if reason is not None:
        report["reason"] = reason
        _progress(f"[{engine}] unavailable: {reason}")
        return report
    report["available"] = True
    available: list[Subject] = []
    for subject in subjects:
        try:
            why = subject.unavailable()
        except Exception as exc:
            why = f"error: {_error(exc)}"
        report["subjects"].append(
            {
                "name": subject.name,
                "role": "measured" if subject.name == MEASURED else "anchor",
                "available": why is None,
                "reason": why,
                "notes": getattr(subject, "notes", None),
            }
        )
        if why is None:
            available.append(subject)
        else:
            _progress(f"[{engine}] {subject.name}: unavailable: {why}")
    available.sort(key=lambda subject: subject.name != MEASURED)  # alkstore first
    for index, key in enumerate(operations, 1):
        operation = OPERATIONS[key]
        runs: dict[str, list[dict[str, Any]]] = {subject.name: [] for subject in available}
        for round_ in range(1, repeat + 1):
            for subject in available:
                done = runs[subject.name]
                if done and ("error" in done[-1] or done[-1]["value"] is None):
                    continue  # failed, or does not apply: once is enough
                done.append(cell := measure(subject, key, sizes))
                _progress(
                    f"[{engine} {index}/{len(operations)}] {key} · {subject.name}: "
                    f"{_shown(cell, operation, wide=True)} ({cell['seconds']:.1f} s)"
                    + (f" [{round_}/{repeat}]" if repeat > 1 else "")
                )
        figures = {name: _combined(cells) for name, cells in runs.items()}
        report["failed"] = report["failed"] or any("error" in cell for cell in figures.values())
        report["operations"].append(
            {
                "key": key,
                "label": operation.label,
                "unit": operation.unit,
                "higher_is_better": operation.higher_is_better,
                "figures": figures,
                "ratios": _ratios(operation, figures),
            }
        )
    alkstore = {
        row["key"]: row["figures"].get(MEASURED, {}).get("value") for row in report["operations"]
    }
    ratios = {row["key"]: row["ratios"] for row in report["operations"]}
    for target in TARGETS:
        if target.engine == engine and target.operation in operations:
            verdict = judge(target, alkstore, ratios)
            report["targets"].append(
                {
                    "operation": target.operation,
                    "target": target.describe(),
                    "kind": target.kind,
                    "bound": target.bound,
                    "value": verdict.value,
                    "holds": verdict.holds,
                    "shown": verdict.shown(),
                }
            )
    return report


def load_subjects(engine: str) -> tuple[list[Subject], str | None, str | None]:
    """The engine's subjects, or why there are none; and the engine's version."""
    module = f"{engine}_subjects"
    version: str | None = None
    if engine == "sqlite":
        version = sqlite3.sqlite_version
    else:
        try:
            version = postgres_version()
        except Exception as exc:
            why = _first_line(exc)
            return [], f"the PostgreSQL server {_safe(server_dsn())} is unreachable: {why}", None
    if not (HERE / f"{module}.py").exists():
        return [], f"bench/{module}.py is not there", version
    try:
        return list(importlib.import_module(module).subjects()), None, version
    except Exception as exc:
        return [], f"bench/{module}.py failed to load: {_error(exc)}", version


def measure(subject: Subject, operation: str, sizes: Sizes) -> dict[str, Any]:
    """One figure: ``{"value": float | None, "seconds": ...}`` or ``{"error": ...}``."""
    started = time.monotonic()
    cell: dict[str, Any]
    try:
        value = subject.measure(operation, sizes)
        cell = {"value": None if value is None else float(value)}
    except Exception as exc:
        cell = {"error": _error(exc), "traceback": traceback.format_exc()}
    cell["seconds"] = round(time.monotonic() - started, 3)
    return cell


def _combined(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """One figure from repeated measurements: the median, or the first error."""
    seconds = round(sum(cell["seconds"] for cell in cells), 3)
    for cell in cells:
        if "error" in cell:
            return {**cell, "seconds": seconds}
    values = [cell["value"] for cell in cells]
    if len(values) == 1 or None in values:
        return {"value": values[0], "seconds": seconds}
    return {"value": statistics.median(values), "values": values, "seconds": seconds}


def _ratios(operation: Operation, figures: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """alkstore's figure over each anchor's, turned so that above 1 means alkstore is better."""
    mine = figures.get(MEASURED, {}).get("value")
    ratios: dict[str, float | None] = {}
    for name, cell in figures.items():
        if name == MEASURED:
            continue
        theirs = cell.get("value")
        if not mine or not theirs:
            ratios[name] = None
        else:
            ratios[name] = mine / theirs if operation.higher_is_better else theirs / mine
    return ratios


def _first_line(exc: BaseException) -> str:
    """libpq's messages go on with hints on further lines: the first says what happened."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# Reporting


def render(report: dict[str, Any], machine: dict[str, Any], *, quick: bool) -> str:
    engine = report["engine"]
    title = f"{ENGINES[engine]} {report['version'] or ''}".strip()
    load = machine["load_average"]
    facts = (
        f"{machine['hostname']}, {machine['cpu_count']} CPUs"
        + (f" (load {load[0]:g} at start)" if load else "")
        + f", Python {machine['python']}, {'--quick' if quick else 'full'} run, {machine['date']}"
    )
    lines = [f"## {title} ({facts})", ""]
    if not report["available"]:
        lines += [f"unavailable: {report['reason']}", ""]
        return "\n".join(lines)
    measured = [s["name"] for s in report["subjects"] if s["available"]]
    anchors = [name for name in measured if name != MEASURED and _has_figures(report, name)]
    columns = ["operation", "unit"]
    if MEASURED in measured:
        columns.append(MEASURED)
    for name in anchors:
        columns += [name, TIMES]
    columns += ["target", "holds"]
    verdicts: dict[str, list[dict[str, Any]]] = {}
    for verdict in report["targets"]:
        verdicts.setdefault(verdict["operation"], []).append(verdict)
    rows: list[list[str]] = []
    for row in report["operations"]:
        operation = OPERATIONS[row["key"]]
        cells = [operation.label, operation.unit]
        if MEASURED in measured:
            cells.append(_shown(row["figures"][MEASURED], operation))
        for name in anchors:
            ratio = row["ratios"].get(name)
            cells += [
                _shown(row["figures"][name], operation),
                "" if ratio is None else f"{ratio:.2f}{TIMES}",
            ]
        found = verdicts.get(row["key"], [])
        cells += ["; ".join(v["target"] for v in found), "; ".join(v["shown"] for v in found)]
        rows.append(cells)
    lines += _table(columns, rows, numeric=set(range(2, len(columns) - 2)))
    return "\n".join([*lines, "", LEGEND, *_footer(report), ""])


def _has_figures(report: dict[str, Any], name: str) -> bool:
    """Whether the subject ``name`` measured any of the run's operations (a figure or an
    error): an anchor of other operations only (such as ``alkstore sync``) gets no column."""
    return any(
        row["figures"].get(name, {}).get("value") is not None or "error" in row["figures"][name]
        for row in report["operations"]
        if name in row["figures"]
    )


def _footer(report: dict[str, Any]) -> list[str]:
    """Subjects' notes and unavailability, errors in full, and the targets' tally."""
    lines: list[str] = []
    for subject in report["subjects"]:
        if not subject["available"]:
            lines.append(f"- {subject['name']}: unavailable: {subject['reason']}")
        elif subject["notes"] and (
            subject["name"] == MEASURED or _has_figures(report, subject["name"])
        ):
            lines.append(f"- {subject['name']}: {subject['notes']}")
    for row in report["operations"]:
        for name, cell in row["figures"].items():
            if "error" in cell:
                lines.append(f"- error in {row['key']} · {name}: {cell['error']}")
    misses = [v["operation"] for v in report["targets"] if v["holds"] is False]
    held = sum(1 for v in report["targets"] if v["holds"])
    lines.append(
        f"targets: {held} of {len(report['targets'])} hold"
        + (f"; missed: {', '.join(misses)}" if misses else "")
    )
    return lines


def _shown(cell: dict[str, Any], operation: Operation, *, wide: bool = False) -> str:
    if "error" in cell:
        text = f"error: {cell['error']}"
        return text if wide or len(text) <= 40 else text[:39] + "…"
    value = cell.get("value")
    if value is None:
        return "n/a"
    if value >= 100 or float(value).is_integer():  # counts (threads) show as counts
        number = f"{value:,.0f}"
    else:
        number = f"{value:.3g}" if value < 1 else f"{value:.2f}"
    return f"{number} {operation.unit}" if wide else number


def _table(columns: list[str], rows: list[list[str]], numeric: set[int]) -> list[str]:
    widths = [max(len(row[i]) for row in [columns, *rows]) for i in range(len(columns))]

    def line(cells: list[str]) -> str:
        padded = [
            cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "| " + " | ".join(padded) + " |"

    rule = [
        "-" * (widths[i] - 1) + ":" if i in numeric else "-" * widths[i]
        for i in range(len(columns))
    ]
    return [line(columns), line(rule), *(line(row) for row in rows)]


# Machine facts


def machine_facts() -> dict[str, Any]:
    libc, libc_version = platform.libc_ver()
    facts: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "load_average": _load_average(),
        "platform": platform.platform(),
        "libc": f"{libc} {libc_version}".strip(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "postgresql": None,
        "alkstore": _distribution_versions(),
        "commit": _git_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    try:
        facts["postgresql"] = postgres_version()
    except Exception as exc:
        facts["postgresql"] = f"unreachable: {_first_line(exc)}"
    return facts


def postgres_version() -> str:
    with psycopg.connect(server_dsn(), connect_timeout=5) as connection:
        row = connection.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "unknown"


def _load_average() -> list[float] | None:
    """1, 5 and 15-minute load averages at the start: other work on the machine skews figures."""
    try:
        return [round(load, 2) for load in os.getloadavg()]
    except OSError:
        return None


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or "unknown"


def _distribution_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in ("alkstore-core", "alkstore-sqlite", "alkstore-postgres"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _git_commit() -> str | None:
    try:
        commit = subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(HERE.parent), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{commit}{' (with uncommitted changes)' if dirty else ''}"


def _safe(dsn: str) -> str:
    """``dsn`` without its password."""
    parts = urllib.parse.urlsplit(dsn)
    if parts.password is None:
        return dsn
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


if __name__ == "__main__":
    sys.exit(main())
