"""How far a study has come: the line `dpmed run` logs after each run, with runs done (finished) of all, runs
failed, time elapsed, and the time left, estimated from the runs finished in this session (`dpmed.timing.Rates`)."""

from __future__ import annotations

import time
from typing import Iterable, Mapping

from dpmed.config import RunPlan
from dpmed.executors import RunFailure
from dpmed.records import RunRecord, Timing
from dpmed.timing import Rates, clock

__all__ = ["StudyProgress"]


class StudyProgress:
    """The study's progress line after each run: runs done of all, time elapsed, and time left, from the rate of
    the runs finished in this session (`dpmed.timing.Rates`), shared among ``workers``. ``n_patients``: the training
    patients, of which an audited run without DP-SGD trains on what its canary draws leave (`dpmed.timing.run_steps`):
    its steps are counted in expectation, as the plan counts them. ``steps_left``: the steps each run that continues
    from its checkpoint trains after it (`dpmed.study.Checkpoints.steps_left`), as the plan counts them too: before,
    a run stopped at step 9 of 12 was counted for all 12 steps, not the 3 it had left."""

    def __init__(self, *, total: int, earlier: int, todo: Iterable[RunPlan], n_train: int, workers: int,
                 n_patients: int, steps_left: Mapping[str, int] | None = None) -> None:
        self.total, self.earlier = total, earlier
        self.left = {p.run_id: p for p in todo}
        self.steps_left = dict(steps_left or {})
        self.finished: list[tuple[RunPlan, Timing]] = []
        self.failed, self.workers = 0, workers
        self.n_train, self.n_patients = n_train, n_patients
        self.start = time.perf_counter()

    def line(self, run_id: str, outcome: RunRecord | RunFailure, timing: Timing | None = None) -> str:
        """Count ``run_id``'s outcome and say where the study stands. ``timing``: the run's full timing from its
        private folder (a DP-SGD run's record holds no seconds); without it, the record's."""
        self.left.pop(run_id, None)
        if isinstance(outcome, RunFailure):
            self.failed += 1
        else:
            self.finished.append((outcome.plan, timing or outcome.timing))
        done = self.earlier + len(self.finished)      # a failed run is not done: it is counted as failed
        parts = [f"study: {done} of {self.total} runs done"
                 + (f" ({self.earlier} earlier)" if self.earlier else "")
                 + (f", {self.failed} failed" if self.failed else ""),
                 f"{clock(time.perf_counter() - self.start)} elapsed"]
        if self.left:
            rates = Rates.from_runs(self.finished, self.n_train, self.n_patients)
            seconds = ([rates.run_seconds(p, self.n_train, n_patients=self.n_patients,
                                          left=self.steps_left.get(p.run_id)) for p in self.left.values()]
                       if rates else [None])
            known = [s for s in seconds if s is not None]
            if len(known) < len(seconds):
                parts.append("time left: known after the first run")
            else:
                parts.append(f"about {clock(sum(known) / min(self.workers, len(known)))} left")
        return ", ".join(parts)
