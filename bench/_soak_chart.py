"""The soak's chart: throughput, latency and storage over time, an engine per column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["draw"]

MB = 1024 * 1024


def draw(results: dict[str, Any], path: Path) -> None:
    """Write a PNG of every engine's samples in ``results`` to ``path``."""
    import matplotlib  # noqa: PLC0415 - only the soak draws, and only at its end

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    engines = results["engines"]
    figure, axes = plt.subplots(3, len(engines), figsize=(6 * len(engines), 9), squeeze=False)
    for column, (engine, run) in enumerate(engines.items()):
        samples = run["samples"]
        minutes = [s["t_s"] / 60 for s in samples]
        top, middle, bottom = (axes[row][column] for row in range(3))
        top.plot(minutes, [s["throughput"] for s in samples], marker="o")
        top.axhline(run["rate"], color="grey", linestyle="--", label="offered")
        top.set_title(f"{engine}: jobs acked per second")
        top.legend(loc="lower right")
        for key, label in (("p50_ms", "p50"), ("p99_ms", "p99")):
            middle.plot(minutes, [s[key] for s in samples], marker="o", label=label)
        middle.set_title("enqueue → claim (ms)")
        middle.legend(loc="upper right")
        bottom.plot(minutes, [s["storage_bytes"] / MB for s in samples], marker="o",
                    label="tables + indexes")  # fmt: skip
        if engine == "sqlite":
            bottom.plot(minutes, [s["wal_peak_bytes"] / MB for s in samples], marker="o",
                        label="WAL peak")  # fmt: skip
        bottom.set_title("storage (MB)")
        bottom.set_xlabel("minutes")
        bottom.legend(loc="upper left")
        for axis in (top, middle, bottom):
            axis.set_ylim(bottom=0)
            axis.grid(alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
