"""The suite run for real, from an empty folder, against the example engine.

The example engine (``example-engine/``, the template for engine authors) is
pip-installed into a folder of its own; pytest then runs in a separate
process with only ``--alkstore-engine`` (and ``--alkstore-api``). The correct
engine passes; each deliberately broken variant fails exactly the tests that
name its defect. Each runs through both APIs: sync, and async (the suite's
facade over the engine's ``open_async``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import pytest

EXAMPLE_ENGINE = Path(__file__).parent / "example-engine"

SIDE_EFFECT_KINDS = (
    "enqueue_tx", "notify_tx", "outbox_enqueue_tx", "publish_tx", "publish_with_key_tx",
    "save_offset_tx",
)  # fmt: skip

LEAKED_ADOPTED_SIDE_EFFECTS = {
    *(
        f"test_side_effects_{promise}[{kind}-{through}]"
        for promise in (
            "appear_when_the_callers_transaction_commits",
            "never_appear_when_the_callers_transaction_rolls_back",
        )
        for kind in SIDE_EFFECT_KINDS
        for through in ("connection", "handle")
    ),
    *(
        f"{test}[{through}]"
        for test in (
            "test_the_callers_business_write_and_the_side_effects_commit_or_roll_back_together",
            "test_wakes_fire_once_the_callers_transaction_commits_and_not_before",
            "test_wakes_never_fire_when_the_callers_transaction_rolls_back",
        )
        for through in ("connection", "handle")
    ),
    *(
        "test_ending_through_the_handle_ends_the_callers_transaction_and_the_handle_"
        f"not_the_connection[{ending}]"
        for ending in ("commit", "rollback")
    ),
    *(
        "test_once_the_caller_ends_its_transaction_the_handle_refuses_every_call_and_"
        f"writes_nothing[rollback-{call}]"
        for call in (*SIDE_EFFECT_KINDS, "commit", "rollback")
    ),
    "test_adopting_a_connection_inside_a_transaction_joins_that_transaction[rollback]",
    "test_closing_the_store_leaves_an_adopted_transaction_to_its_caller[rollback]",
}
"""What an engine that lets adopted side effects out before the commit fails."""


@dataclass
class Outcome:
    returncode: int
    passed: set[str]
    failed: set[str]
    skipped: dict[str, str]
    output: str


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest) -> str:
    """The API the suite runs through: ``--alkstore-api``."""
    return str(request.param)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("example-engine-site")
    subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
            "--no-build-isolation", "--no-index", "--disable-pip-version-check",
            "--target", str(folder), str(EXAMPLE_ENGINE),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return folder


def run_suite(site: Path, workdir: Path, engine: str, api: str, *arguments: str) -> Outcome:
    report = workdir / "report.xml"
    environment = {**os.environ, "PYTHONPATH": str(site)}
    result = subprocess.run(
        [
            sys.executable, "-m", "pytest", f"--alkstore-engine={engine}", f"--alkstore-api={api}",
            "-q", "-ra", "-p", "no:cacheprovider", f"--junitxml={report}", *arguments,
        ],
        cwd=workdir,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    outcome = Outcome(result.returncode, set(), set(), {}, result.stdout + result.stderr)
    for case in ElementTree.parse(report).iter("testcase"):
        name = case.get("name", "")
        if case.find("failure") is not None or case.find("error") is not None:
            outcome.failed.add(name)
        elif (skipped := case.find("skipped")) is not None:
            outcome.skipped[name] = skipped.get("message", "")
        else:
            outcome.passed.add(name)
    return outcome


def test_the_example_engine_passes_the_whole_suite_from_an_empty_folder(
    site: Path, tmp_path: Path, api: str
) -> None:
    outcome = run_suite(site, tmp_path, "memory", api)
    assert outcome.returncode == 0, outcome.output
    assert outcome.failed == set()
    assert len(outcome.passed) > 150
    # Its declared asymmetries: stores are not shared between processes, and
    # tx.execute runs its own small dialect, not SQL.
    assert set(outcome.skipped.values()) == {
        "the engine declares stores are not shared between processes",
        "the provider's engine does not run SQL (TestProvider.speaks_sql)",
    }


def test_both_apis_run_the_same_tests(site: Path, tmp_path: Path) -> None:
    collected = {
        api: subprocess.run(
            [
                sys.executable, "-m", "pytest", "--alkstore-engine=memory", f"--alkstore-api={api}",
                "--collect-only", "-q", "-p", "no:cacheprovider",
            ],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(site)},
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.splitlines()
        for api in ("sync", "async")
    }  # fmt: skip
    tests = [line for line in collected["sync"] if "::" in line]
    assert len(tests) > 150
    assert [line for line in collected["async"] if "::" in line] == tests


@pytest.mark.parametrize(
    ("engine", "selection", "expected"),
    [
        (
            "memory-double-claim",
            "test_queues or test_queue_model",
            {"test_each_job_goes_to_exactly_one_of_many_threads"},
        ),
        (
            "memory-no-rollback",
            "test_transactions",
            {
                *(
                    f"{test}[{kind}]"
                    for test in (
                        "test_a_rollback_by_exception_leaves_no_ghost",
                        "test_an_explicit_rollback_leaves_no_ghost",
                    )
                    for kind in SIDE_EFFECT_KINDS
                ),
                "test_side_effects_and_the_business_write_commit_together",
                "test_a_rolled_back_batch_of_enqueues_leaves_nothing",
            },
        ),
        (
            "memory-offsets-back",
            "test_streams or test_transactions",
            {
                "test_a_consumer_offset_starts_at_zero_and_only_moves_forward",
                "test_offsets_are_monotonic_under_any_sequence_of_saves",
                "test_save_offset_tx_advances_once_and_never_back",
            },
        ),
        (
            "memory-immortal-locks",
            "test_locks",
            {
                "test_after_ttl_expiry_anyone_may_acquire_and_the_old_handle_has_lost_it",
                "test_the_same_owner_reacquiring_gets_a_handle_without_a_fresh_ttl",
                "test_a_lock_expired_behind_its_holders_back_is_lost",
                "test_a_free_lock_is_acquired_whatever_its_ttl",
            },
        ),
        (
            "memory-leaky-adoption",
            "test_adopted_transactions or test_transactions",
            LEAKED_ADOPTED_SIDE_EFFECTS,
        ),
        (
            "memory-early-own-wakes",
            "test_notify or test_transactions",
            {"test_notify_tx_wakes_no_listener_of_its_own_store_before_commit"},
        ),
        (
            "memory-one-channel-per-commit",
            "test_notify or test_transactions",
            {"test_one_commit_wakes_every_channel_it_notified"},
        ),
        (
            "memory-silent-wake-death",
            "test_notify",
            {"test_a_broken_wake_path_is_an_event_never_silence"},
        ),
        (
            "memory-drifting-schedules",
            "test_scheduler",
            {
                "test_fired_boundaries_stay_on_the_grid_and_never_drift",
                "test_catch_up_fires_at_most_64_missed_boundaries_then_skips_forward",
                # core's loop fires the next missed boundary only where the schedule still is
                "test_a_few_missed_boundaries_are_all_caught_up",
                # cron boundaries drift just as much
                "test_cron_catch_up_fires_at_most_64_missed_boundaries_then_skips_forward",
                "test_a_few_missed_cron_boundaries_are_all_caught_up",
                *(
                    "test_a_runner_catching_up_across_the_last_dst_change_fires_each_local_"
                    f"time_once[{case}]"
                    for case in (
                        "spring forward: 02:30 fires at 03:00",
                        "fall back: 02:30 fires once",
                    )
                ),
            },
        ),
        (
            "memory-forgets-zones",
            "test_scheduler",
            {
                "test_a_cron_schedule_keeps_its_spec_and_zone_and_fires_at_local_time",
                "test_the_same_cron_spec_again_keeps_its_timing_and_another_zone_moves_it",
                "test_a_local_time_skipped_by_the_next_spring_forward_fires_at_the_end_of_the_gap",
                "test_a_local_time_repeated_by_the_next_fall_back_fires_at_its_first_occurrence",
                *(
                    "test_a_runner_catching_up_across_the_last_dst_change_fires_each_local_"
                    f"time_once[{case}]"
                    for case in (
                        "spring forward: 02:30 fires at 03:00",
                        "fall back: 02:30 fires once",
                    )
                ),
                "test_a_few_missed_cron_boundaries_are_all_caught_up",
            },
        ),
        (
            "memory-short-sighted-keys",
            "test_unique_jobs",
            {
                "test_a_duplicate_enqueue_writes_nothing_and_returns_the_live_jobs_id",
                *(
                    f"test_every_live_state_holds_the_key[{state}]"
                    for state in ("scheduled", "processing", "retrying", "released")
                ),
                *(
                    f"test_any_key_text_is_kept_exactly_and_deduplicates[{key}]"
                    for key in (
                        "ascii", "unicode", "quotes", "backslash", "nul", "huge", "space",
                        "escape-like",
                    )
                ),
                "test_a_transaction_sees_a_committed_live_job_with_its_key",
                "test_the_outbox_deduplicates_by_key_too",
                # it keeps the expired job beside the new one instead of dead-lettering it
                "test_a_job_past_its_expiry_holds_no_key",
                "test_threads_racing_with_one_key_leave_exactly_one_job",
                "test_a_keyed_schedule_does_not_pile_up_while_its_run_is_live",
            },
        ),
        (
            "memory-silent-trim",
            "test_stream_retention",
            {
                "test_a_read_reaching_into_trimmed_events_raises_instead_of_skipping",
                "test_retain_spares_the_slowest_consumer_unless_forced",
                "test_a_receiver_behind_a_trim_raises_on_its_next_read",
                "test_a_consumer_behind_a_trim_stops_with_the_error",
            },
        ),
        (
            "memory-upsert-moves-schedule",
            "test_scheduler or test_inspect",
            {
                "test_schedule_upserts_by_name_and_unschedule_deletes",
                "test_a_changed_spec_resumes_on_the_grid_anchored_at_creation",
                "test_the_same_cron_spec_again_keeps_its_timing_and_another_zone_moves_it",
            },
        ),
    ],
)  # fmt: skip
def test_a_broken_engine_fails_exactly_the_tests_that_name_its_defect(
    site: Path, tmp_path: Path, api: str, engine: str, selection: str, expected: set[str]
) -> None:
    outcome = run_suite(site, tmp_path, engine, api, "-k", selection)
    assert outcome.returncode == 1, outcome.output
    assert outcome.failed == expected, outcome.output
    assert outcome.passed, "the rest of the selection should pass"


@pytest.mark.parametrize("limit", ["--alkstore-test-timeout=2", "--timeout=2"])
def test_a_test_that_would_hang_fails_at_its_time_limit_and_the_run_goes_on(
    site: Path, tmp_path: Path, api: str, limit: str
) -> None:
    # The echoing engine's receivers hand out the same wake forever: a test that
    # drains its receiver loops until the time limit fails it.
    outcome = run_suite(site, tmp_path, "memory-echoing-wakes", api, "-k", "test_notify", limit)
    assert outcome.returncode == 1, outcome.output
    assert outcome.failed == {
        "test_wakes_per_notify_or_coalesced_as_declared",
        "test_notifies_in_one_transaction_wake_per_notify_or_coalesced_as_declared",
    }, outcome.output
    # once per failure, and again in the summary when it is not cut to the terminal's width
    assert outcome.output.count("Failed: Timeout (>2.0s) from pytest-timeout") >= 2
    assert len(outcome.passed) > 5, "the run goes on past each timed-out test"


@pytest.mark.parametrize("limit", ["--alkstore-test-timeout=1", "--timeout=1"])
def test_a_test_the_limit_cannot_interrupt_ends_the_process_soon_after(
    site: Path, tmp_path: Path, api: str, limit: str
) -> None:
    # The deaf engine's receivers swallow the time limit's exception: past the
    # limit and a grace period the plugin ends the process, with every stack.
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable, "-m", "pytest", "--alkstore-engine=memory-deaf-wakes",
            f"--alkstore-api={api}", "-q", "-p", "no:cacheprovider",
            "-k", "test_wakes_per_notify_or_coalesced_as_declared", limit,
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "is still running 11 s after it began" in result.stderr, result.stderr
    assert "Current thread" in result.stderr or "Thread 0x" in result.stderr  # the stacks
    assert time.monotonic() - started < 60
