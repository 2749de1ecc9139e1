"""Job queue: dedup by content, persistence across restarts, input checks before a job runs."""

from __future__ import annotations

import hashlib
import sqlite3

import pytest

from daemon.queue import JobQueue, input_problem, one_line
from deploy.intake import sha256_of
from deploy.artifact import Latency


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "watch" / "resnet.onnx"
    path.parent.mkdir()
    path.write_bytes(b"model one")
    return path


def test_enqueue_records_a_queued_job(tmp_path, model):
    jobs = JobQueue.open(tmp_path / "state")
    sha = sha256_of(model)
    assert sha == hashlib.sha256(b"model one").hexdigest()
    job = jobs.enqueue(model, sha)
    assert job is not None
    assert (job.name, job.path, job.sha256, job.state) == ("resnet", model, sha, "queued")
    assert (job.trials_done, job.trials_total, job.artifact_dir, job.latency_ms, job.error) == (0, 0, None, None, None)
    assert jobs.next_queued() == job


def test_same_content_is_not_queued_twice_whatever_its_name(tmp_path, model):
    jobs = JobQueue.open(tmp_path / "state")
    sha = sha256_of(model)
    first = jobs.enqueue(model, sha)
    copy = model.with_name("resnet-copy.onnx")
    copy.write_bytes(model.read_bytes())
    assert jobs.enqueue(copy, sha256_of(copy)) is None
    assert jobs.enqueue(model, sha) is None
    jobs.mark_started(first.id)
    jobs.mark_failed(first.id, "bad model")
    assert jobs.enqueue(model, sha) is None  # content that ran and failed stays failed
    assert [j.id for j in jobs.all_jobs()] == [first.id]


def test_jobs_survive_reopen_and_running_ones_go_back_to_queued(tmp_path, model):
    state = tmp_path / "state"
    jobs = JobQueue.open(state)
    running = jobs.enqueue(model, "a" * 64)
    waiting = jobs.enqueue(model.with_name("b.onnx"), "b" * 64)
    done = jobs.enqueue(model.with_name("c.onnx"), "c" * 64)
    jobs.mark_started(running.id)
    jobs.set_progress(running.id, "building", 5, 8)
    jobs.mark_started(done.id)
    jobs.mark_done(done.id, "/out/c-cccccccc", Latency(tvm=1.0, untuned=2.0, onnxruntime=3.0))
    jobs.close()  # as if the daemon died here

    reopened = JobQueue.open(state)
    states = {job.id: job for job in reopened.all_jobs()}
    assert states[running.id].state == "queued" and states[running.id].trials_done == 0
    assert states[running.id].trials_total == 8
    assert states[waiting.id].state == "queued"
    assert states[done.id].state == "done"
    assert states[done.id].latency_ms == Latency(tvm=1.0, untuned=2.0, onnxruntime=3.0)
    assert states[done.id].artifact_dir == "/out/c-cccccccc"
    assert reopened.next_queued().id == running.id  # oldest first


def test_failure_reason_is_one_line(tmp_path, model):
    jobs = JobQueue.open(tmp_path / "state")
    job = jobs.enqueue(model, sha256_of(model))
    jobs.mark_failed(job.id, "Traceback:\n  line 1\n\n  boom")
    failed = jobs.get(job.id)
    assert failed.state == "failed" and failed.error == "Traceback: line 1 boom"
    assert failed.finished_at is not None
    assert len(one_line("x " * 1000)) == 500


def test_database_uses_wal_and_a_schema_version(tmp_path):
    JobQueue.open(tmp_path / "state").close()
    db = sqlite3.connect(tmp_path / "state" / "jobs.sqlite3")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == 4


def test_a_warning_is_kept_while_running_and_replaced_by_the_outcomes(tmp_path, model):
    jobs = JobQueue.open(tmp_path / "state")
    job = jobs.enqueue(model, sha256_of(model))
    jobs.mark_started(job.id)
    jobs.set_warning(job.id, "trials 8 cannot give each of the 5 tasks\na round")
    jobs.set_progress(job.id, "tuning", 4, 8)
    assert jobs.get(job.id).warning == "trials 8 cannot give each of the 5 tasks a round"
    jobs.mark_done(job.id, "/out/a", Latency(tvm=1.0, untuned=2.0, onnxruntime=3.0), ["3 of 5 tasks untuned", "x"])
    assert jobs.get(job.id).warning == "3 of 5 tasks untuned; x"
    jobs.mark_started(job.id)  # run again: what it warns is its own
    assert jobs.get(job.id).warning is None
    jobs.mark_done(job.id, "/out/a", Latency(tvm=1.0, untuned=2.0, onnxruntime=3.0))
    assert jobs.get(job.id).warning is None


def test_a_schema_1_queue_keeps_its_jobs_and_gains_the_later_columns(tmp_path, model):
    state = tmp_path / "state"
    state.mkdir()
    old = sqlite3.connect(state / "jobs.sqlite3")
    old.execute(
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, path TEXT NOT NULL, "
        "sha256 TEXT NOT NULL UNIQUE, state TEXT NOT NULL, trials_done INTEGER NOT NULL DEFAULT 0, "
        "trials_total INTEGER NOT NULL DEFAULT 0, artifact_dir TEXT, latency_tvm REAL, latency_untuned REAL, "
        "latency_onnxruntime REAL, error TEXT, queued_at TEXT NOT NULL, started_at TEXT, finished_at TEXT, "
        "updated_at TEXT NOT NULL)")
    old.execute("INSERT INTO jobs (name, path, sha256, state, queued_at, updated_at) VALUES "
                "('resnet', ?, ?, 'queued', '2026-01-01T00:00:00+00:00', '2026-01-01T00:00:00+00:00')",
                (str(model), "a" * 64))
    old.execute("PRAGMA user_version=1")
    old.commit()
    old.close()

    jobs = JobQueue.open(state)
    (job,) = jobs.all_jobs()
    assert (job.name, job.sha256, job.state, job.warning) == ("resnet", "a" * 64, "queued", None)
    jobs.set_warning(job.id, "short")
    assert jobs.get(job.id).warning == "short"
    jobs.set_progress(job.id, "tuning", 8, 64, best_estimate_ms=1.5, trials_per_minute=20.0, eta_seconds=168.0)
    assert jobs.get(job.id).eta_seconds == 168.0  # and the columns of schema 4
    jobs.close()
    assert sqlite3.connect(state / "jobs.sqlite3").execute("PRAGMA user_version").fetchone()[0] == 4


def test_the_running_searchs_estimate_rate_and_eta_are_kept_until_it_starts_again(tmp_path, model):
    state = tmp_path / "state"
    jobs = JobQueue.open(state)
    job = jobs.enqueue(model, sha256_of(model))
    jobs.mark_started(job.id)
    jobs.set_progress(job.id, "tuning", 16, 64, best_estimate_ms=2.5, trials_per_minute=32.0, eta_seconds=90.0)
    tuning = jobs.get(job.id)
    assert (tuning.trials_done, tuning.best_estimate_ms, tuning.trials_per_minute, tuning.eta_seconds) == (16, 2.5, 32.0, 90.0)
    jobs.set_progress(job.id, "building", 64, 64, best_estimate_ms=2.0, trials_per_minute=30.0)
    jobs.mark_done(job.id, "/out/a", Latency(tvm=2.2, untuned=9.0, onnxruntime=3.0))
    done = jobs.get(job.id)
    assert (done.best_estimate_ms, done.trials_per_minute, done.eta_seconds) == (2.0, 30.0, None)
    jobs.mark_started(job.id)
    jobs.set_progress(job.id, "tuning", 8, 64, best_estimate_ms=3.0, trials_per_minute=10.0, eta_seconds=300.0)
    jobs.close()  # the daemon died mid-search
    requeued = JobQueue.open(state).get(job.id)
    assert (requeued.state, requeued.best_estimate_ms, requeued.trials_per_minute, requeued.eta_seconds) == (
        "queued", None, None, None)


def test_input_problem_names_missing_and_changed_files(tmp_path, model):
    jobs = JobQueue.open(tmp_path / "state")
    job = jobs.enqueue(model, sha256_of(model))
    assert input_problem(job) is None
    model.write_bytes(b"model two")
    assert "changed after it was queued" in input_problem(job)
    model.unlink()
    assert "disappeared before the job ran" in input_problem(job)


def test_content_that_failed_before_running_can_be_dropped_again(tmp_path, model):
    jobs = JobQueue.open(tmp_path / "state")
    sha = sha256_of(model)
    vanished = jobs.enqueue(model, sha)
    jobs.mark_failed(vanished.id, input_problem(vanished.model_copy(update={"path": tmp_path / "gone.onnx"})))
    again = model.with_name("resnet-again.onnx")
    again.write_bytes(model.read_bytes())
    requeued = jobs.enqueue(again, sha)
    assert requeued is not None and requeued.id == vanished.id
    assert (requeued.state, requeued.path, requeued.name, requeued.error) == ("queued", again, "resnet-again", None)

    jobs.mark_started(requeued.id)
    jobs.mark_failed(requeued.id, "worker crashed (signal 11, SIGSEGV)")
    assert jobs.enqueue(again, sha) is None  # it ran and failed: the same bytes stay failed


@pytest.mark.parametrize("garbage", [b"", b"not a database at all" * 100, b"SQLite format 3\x00" + b"\xff" * 5000])
def test_an_unreadable_queue_file_is_moved_aside_and_a_fresh_queue_starts(tmp_path, model, garbage):
    (tmp_path / "jobs.sqlite3").write_bytes(garbage)
    jobs = JobQueue.open(tmp_path)
    if garbage:  # an empty file is a valid empty database to SQLite
        assert jobs.recovered_from is not None and jobs.recovered_from.read_bytes() == garbage
    assert jobs.enqueue(model, sha256_of(model)) is not None and len(jobs.all_jobs()) == 1


def test_a_duplicate_name_is_recorded_once_and_survives_a_reopen(tmp_path):
    jobs = JobQueue.open(tmp_path / "state")
    assert jobs.add_duplicate(tmp_path / "watch" / "copy.onnx", "ab" * 32)
    assert not jobs.add_duplicate(tmp_path / "watch" / "copy.onnx", "ab" * 32)  # the same file seen again
    jobs.close()
    reopened = JobQueue.open(tmp_path / "state")
    [(name, sha256, seen_at)] = reopened.duplicates()
    assert (name, sha256) == ("copy", "ab" * 32) and seen_at.tzinfo is not None
