"""What a run holds does not grow with its steps: runs of thousands of steps (benchmarks/RESULTS.md, "Long runs:
what grows with the steps") would carry anything kept once per step (a ledger entry, a hook left on a layer, a
tensor of each batch) into memory and into every checkpoint, while the short runs of the other tests never show it.
Counted here, between two checkpoints of one DP-SGD run: the Python objects the garbage collector tracks and the
checkpoint's bytes, its tensors' and its pickled rest's apart."""

from __future__ import annotations

import gc
import zipfile
from pathlib import Path

from dpmed.config import TrainingConfig
from dpmed.randomness import PrivacyRandomness
from dpmed.training import DpSgdPlan, loop, torch_threads, train

CFG = TrainingConfig(steps=1, batch_size=12, physical_batch_size=64, optimizer="adam", learning_rate=1e-3, threads=1)
PLAN = DpSgdPlan(noise_multiplier=1.2, max_grad_norm=1.0, sample_rate=0.1, steps=45)    # a checkpoint every 10 steps


def _checkpoint_bytes(path: Path) -> tuple[int, int]:
    """(the bytes of the checkpoint's tensors, of its pickled rest), read from torch's zip archive: the file's own size
    moves in steps of the 64 bytes torch aligns each tensor's record to, with the rest's length, which the step
    changes by a digit where a counter (the step, the privacy streams' positions) gains one."""
    with zipfile.ZipFile(path) as archive:
        records = archive.infolist()
    tensors = sum(r.file_size for r in records if r.filename.rpartition("/")[0].endswith("/data"))
    return tensors, next(r.file_size for r in records if r.filename.endswith("/data.pkl"))


def test_a_dp_sgd_run_holds_as_much_after_40_steps_as_after_10(data, new_model, tmp_path, monkeypatch):
    images, task = data
    checkpoint = tmp_path / "checkpoint.pt"
    held, calls = {}, iter(range(1, PLAN.steps + 1))

    def before_each_step():            # the loop calls it before step s, after s - 1 steps and their checkpoint
        done = next(calls) - 1
        if done in (10, 40):
            gc.collect()
            held[done] = len(gc.get_objects()), _checkpoint_bytes(checkpoint)
    monkeypatch.setattr(loop, "check_interrupt", before_each_step)
    with torch_threads(CFG.threads):      # as a run trains: the machine's load then never slows it by the threads
        result = train(new_model(task), images, task, CFG, seed=0, dp=PLAN, randomness=PrivacyRandomness.secure(),
                       progress=False, checkpoint=checkpoint)

    (objects_10, (tensors_10, rest_10)), (objects_40, (tensors_40, rest_40)) = held[10], held[40]
    # one object kept per step would add 30; nothing kept adds none (at most a few, should torch cache something)
    assert objects_40 - objects_10 < 30, (objects_10, objects_40)
    assert tensors_40 == tensors_10
    # a byte kept per step would add 30; the five counters that gain a digit (or a pickled int's byte) add a few
    assert 0 <= rest_40 - rest_10 < 30, (rest_10, rest_40)
    assert len(result.ledger.events) == 1 and result.ledger.dp_sgd_steps == PLAN.steps
    assert [p.name for p in checkpoint.parent.iterdir()] == ["checkpoint.pt"]     # overwritten, no old ones beside
