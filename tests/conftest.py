"""Shared fixtures: where the real data lives, and a tiny study writer."""

from __future__ import annotations

import errno
import math
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import settings
from scipy import optimize, special, stats

# The property tests draw the same examples on every run, so that an unchanged commit cannot turn red by chance (a
# rate of 1 - 2^-53 once broke dp_accounting's PLD in one run of many). HYPOTHESIS_PROFILE=explore draws fresh
# examples, to hunt for new counterexamples; each one found becomes an @example of its test.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

# pytester runs a small test session inside a test: tests/test_test_isolation.py checks this file's own fixtures so.
pytest_plugins = ("pytester",)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = (REPO / ".." / "shared" / "data").resolve()
PNEUMONIAMNIST = SHARED_DATA / "pneumoniamnist" / "pneumoniamnist.npz"


# Bernoulli trials one test may make in dpmed.randomness's exact sampler: a released count takes about a dozen and
# tests/test_randomness.py's law tests some hundreds of thousands, so a sampler loop that never ends fails the test
# that reached it (any test that releases a count) instead of hanging the suite before that file runs.
_TRIALS_PER_TEST = 5_000_000


class _SamplerTrials:
    """The Bernoulli trials left before the exact sampler fails the test: ``allow(n)`` sets how many the next
    stretch may make (tests/test_randomness.py allows each single draw its own few)."""

    def __init__(self, allowed: int) -> None:
        self.allowed = self.left = allowed

    def allow(self, n: int) -> None:
        self.allowed = self.left = n

    def counted(self, trial):
        def counted_trial(*args):
            self.left -= 1
            if self.left < 0:
                raise AssertionError(f"over {self.allowed:,} Bernoulli trials of the exact sampler: a sampler loop "
                                     "that does not end")
            return trial(*args)
        return counted_trial


@pytest.fixture(autouse=True)
def sampler_trials(monkeypatch) -> _SamplerTrials:
    """Count every Bernoulli trial of the exact discrete-Laplace sampler and fail past _TRIALS_PER_TEST. The trials
    are counted, not altered: each draw has the same law. Every loop of discrete_laplace and _bernoulli_exp calls
    _bernoulli or _bernoulli_exp each time round, so a loop that never ends is caught whether or not it still draws
    from the source."""
    from dpmed import randomness

    trials = _SamplerTrials(_TRIALS_PER_TEST)
    monkeypatch.setattr(randomness, "_bernoulli", trials.counted(randomness._bernoulli))
    monkeypatch.setattr(randomness, "_bernoulli_exp", trials.counted(randomness._bernoulli_exp))
    return trials


@pytest.fixture(autouse=True)
def global_random_state_kept():
    """Many tests seed torch's, numpy's or Python's global generator to build a model or to check that dpmed ignores
    them: each test's seeding stays its own, so that no test's draws depend on which tests ran before it. CUDA's
    generators are left to the few tests that use them (reading them would start CUDA in every test)."""
    saved = torch.get_rng_state(), np.random.get_state(), random.getstate()
    yield
    torch.set_rng_state(saved[0])
    np.random.set_state(saved[1])
    random.setstate(saved[2])


@pytest.fixture
def pneumoniamnist() -> Path:
    if not PNEUMONIAMNIST.is_file():
        pytest.skip(f"real data absent: {PNEUMONIAMNIST} (the project's shared/data folder sits beside the repo)")
    return PNEUMONIAMNIST


@pytest.fixture
def umask_022():
    """The usual umask, whatever the test runner's: a file or folder made without an explicit mode is then readable
    by others, which is what the owner-only modes must prevent."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture
def write_study(tmp_path: Path):
    """Write YAML text to a study file in tmp_path and return its path."""

    def write(text: str, name: str = "study.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def write_png_table(tmp_path: Path):
    """Write ``n`` random grey PNGs of ``shape`` (height, width) under tmp_path/images and tmp_path/labels.csv
    naming them (columns file, finding; labels alternate 0, 1): a CSV dataset without patient ids. Returns the
    table's path."""

    def write(n: int = 40, shape: tuple[int, int] = (20, 20)) -> Path:
        from PIL import Image

        rng = np.random.default_rng(0)
        (tmp_path / "images").mkdir(exist_ok=True)
        rows = ["file,finding"]
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(tmp_path / "images" / f"{i}.png")
            rows.append(f"images/{i}.png,{i % 2}")
        (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n")
        return tmp_path / "labels.csv"

    return write


class _DiskWithRoom:
    """A file open for writing on a disk with ``room`` bytes left: the write that passes it fails as a full disk's
    does (ENOSPC, naming no file), after writing what fitted."""

    def __init__(self, file, room: int) -> None:
        self.file, self.room = file, room

    def write(self, data) -> int:
        fits = max(0, min(len(data), self.room))
        self.file.write(data[:fits])
        self.room -= len(data)
        if self.room < 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return len(data)

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


def _dicom_file(path: Path, stored: np.ndarray, *, photometric: str = "MONOCHROME2", rescale=None, window=None,
                 function=None, voi_lut=None, patient=None, sex=None, age=None, frames: int | None = None,
                 bits: tuple[int, int] = (16, 12), signed: bool = False, padding: int | None = None) -> Path:
    """A minimal single-frame Secondary Capture file, 16 bits allocated and 12 stored unless ``bits`` says otherwise,
    unsigned unless ``signed``, grey ([H, W]) or colour ([H, W, 3], samples interleaved), with the optional
    transforms, PixelPaddingValue and patient fields asked for."""
    pydicom = pytest.importorskip("pydicom")
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.sequence import Sequence
    from pydicom.uid import ExplicitVRLittleEndian, SecondaryCaptureImageStorage, generate_uid

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = SecondaryCaptureImageStorage
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID, ds.SOPInstanceUID = meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID
    ds.Modality = "DX"
    ds.Rows, ds.Columns = stored.shape[:2]
    ds.SamplesPerPixel, ds.PhotometricInterpretation = (1 if stored.ndim == 2 else stored.shape[2]), photometric
    if stored.ndim == 3:
        ds.PlanarConfiguration = 0
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = bits[0], bits[1], bits[1] - 1, int(signed)
    if padding is not None:
        ds.PixelPaddingValue = padding
    if rescale is not None:
        ds.RescaleSlope, ds.RescaleIntercept = rescale
    if window is not None:
        ds.WindowCenter, ds.WindowWidth = window
    if function is not None:
        ds.VOILUTFunction = function
    if voi_lut is not None:
        item = Dataset()
        item.LUTDescriptor = [len(voi_lut), 0, 8]
        item.LUTData = np.asarray(voi_lut, dtype=np.uint16).tobytes()  # OW in explicit VR
        ds.VOILUTSequence = Sequence([item])
    for key, value in (("PatientID", patient), ("PatientSex", sex), ("PatientAge", age)):
        if value is not None:
            setattr(ds, key, value)
    if frames is not None:
        ds.NumberOfFrames = frames
    ds.PixelData = stored.astype(f"{'i' if signed else 'u'}{bits[0] // 8}").tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if int(pydicom.__version__.split(".")[0]) >= 3:
        ds.save_as(path, enforce_file_format=True)
    else:
        ds.is_little_endian, ds.is_implicit_VR = True, False
        ds.save_as(path, write_like_original=False)
    return path


@pytest.fixture
def write_dicom():
    """The DICOM file writer of the data tests (`_dicom_file`): skips the test where pydicom is not installed."""
    return _dicom_file


@pytest.fixture
def disk_with_room():
    """``disk_with_room(open, room)``: an ``open`` whose files fill a disk with ``room`` bytes left (per file), to
    patch in for a writer's; not a real full disk, which a test cannot make without privileges."""

    def make(opener, room: int):
        return lambda *args, **kwargs: _DiskWithRoom(opener(*args, **kwargs), room)

    return make


@pytest.fixture
def make_record():
    """A factory of minimal typed run records (no training), for tests of what reads records: comparisons, tables,
    the report. DP-SGD records get sigma = 1 / eps, so runs at one eps share their noise setting across arms."""
    from dpmed.accounting import Ledger
    from dpmed.config import RunPlan, SweptValue, TrainingConfig
    from dpmed.mechanisms import DpSgdPlan, NoPrivacyPlan, PrivacyCard
    from dpmed.records import DataSummary, RunRecord, Timing

    def make(run_id: str, arm: str, mechanism: str = "none", *, eps: float | None = None, C: float = 1.0,
             seed: int = 0, lr: float = 0.002, metrics: dict | None = None, fairness=None,
             explanations=None) -> RunRecord:
        training = TrainingConfig(epochs=2, learning_rate=lr)
        if mechanism == "dp_sgd":
            privacy = DpSgdPlan(noise_multiplier=1.0 / eps, max_grad_norm=C, sample_rate=0.1, steps=10,
                                target_epsilon=eps, noise_given=False)
            swept = (SweptValue(key="target_epsilon", tag="eps", value=eps),
                     SweptValue(key="max_grad_norm", tag="C", value=C))
            card = PrivacyCard(mechanism="dp_sgd", is_dp=True, statement=f"eps = {eps * 0.99:g}", epsilon=eps * 0.99,
                               delta=1e-5, accountant="pld", unit="image")
        else:
            privacy, swept = NoPrivacyPlan(), ()
            card = PrivacyCard(mechanism="none", is_dp=False, statement="no privacy protection (eps = infinity)")
        plan = RunPlan(run_id=run_id, arm=arm, seed=seed, model="small_cnn", swept=swept, training=training,
                       privacy=privacy)
        return RunRecord(run_id=run_id, arm=arm, mechanism=mechanism, seed=seed, plan=plan,
                         data=DataSummary(name="test", task="binary"), privacy=card, ledger=Ledger(),
                         metrics=metrics or {}, fairness=fairness, explanations=explanations,
                         timing=Timing(train_seconds=1.0, total_seconds=2.0, device="cpu", threads=1))

    return make


@pytest.fixture
def make_fairness():
    """A typed fairness block of one attribute from a compact spec, for tests of what reads it: ``groups`` maps a
    group to the fields it needs (e.g. {"n": 8, "auroc": {"value": 1.0, "low": 1.0, "high": 1.0}}); the fields not
    given are undefined (value None), a group's size 10 unless given."""
    from dpmed.evaluation.summaries import AttributeFairness, Fairness, GroupFairness, WorstGroup

    def make(attribute: str, groups: dict[str, dict]) -> Fairness:
        blank = {"n": 10, "auroc": {"value": None}, "accuracy": {"value": None},
                 "accuracy_parity_difference": {"value": None}}
        entry = AttributeFairness(status="ok", worst_group_auroc=WorstGroup(value=None),
                                  groups={g: GroupFairness(**(blank | fields)) for g, fields in groups.items()})
        return Fairness(definitions={}, thresholds=[0.5], n_test=sum(g.n for g in entry.groups.values()),
                        n_resamples=200, bootstrap_seed=0, confidence=0.95, age_bins=[0.0, 30.0, 60.0, 70.0, 80.0,
                                                                                     100.0],
                        attributes={attribute: entry})

    return make


@pytest.fixture
def make_explanations():
    """A typed explanations block with the given metrics ({"mask_energy": {"value": 0.4, ...}}), the other fields
    those of a Grad-CAM run on 8 images (``fields`` replaces any of them)."""
    from dpmed.evaluation.summaries import Explanations

    def make(metrics: dict[str, dict], **fields) -> Explanations:
        base = dict(method="gradcam", method_reference="Selvaraju et al. 2017", target_layer="features",
                    explained_class="predicted (argmax)", n_images=8, n_zero_cams=0, score_image_min=0.6,
                    score_image_max=0.9, deletion_steps=8, baseline="black (0 in [0, 1] pixels)", labels={},
                    image_seed=0, metrics={m: {"n": 8} | v for m, v in metrics.items()})
        return Explanations(**(base | fields))

    return make


@pytest.fixture
def make_resolved():
    """A factory of resolved studies (study.yaml's type) around given records, for report tests."""
    from dpmed.config import Study
    from dpmed.records import DatasetSummary, ResolvedStudy, StudyPrivacy

    def make(records, *, confidence: float = 0.95, resamples: int = 200, n_test: int = 5, task: str = "binary",
             label_names: tuple[str, ...] = ("normal", "opacity"), ordinal: bool = False,
             interval: str = "percentile") -> ResolvedStudy:
        arms = list({r.arm: r.mechanism for r in records}.items())
        study = Study.model_validate({
            "name": "t", "seeds": sorted({r.seed for r in records}),
            "evaluation": {"bootstrap_resamples": resamples, "confidence": confidence, "interval": interval},
            "arms": [{"name": a, "mechanism": m, **({"target_epsilon": 1.0} if m == "dp_sgd" else
                                                    {"scale": 0.5} if m in ("pixel_laplace", "scalar_shift") else {})}
                     for a, m in arms]})
        dataset = DatasetSummary(name="phantom", task=task, label_names=label_names, ordinal=ordinal,
                                 synthetic=True, description="", n_train=10,
                                 n_val=5, n_test=n_test, n_train_patients=8, patients_known=True,
                                 image_shape=(1, 8, 8))
        privacy = StudyPrivacy(dp_sgd_runs=(), not_private=(), local_dp=(), unit=None, delta=None, accountant=None,
                               dp_sgd_epsilon=None, epsilon=None, reproducible=False, statement="test statement")
        return ResolvedStudy(study=study, dataset=dataset, study_privacy=privacy, runs=[r.plan for r in records])

    return make


def _exact_gaussian_epsilon(mu: float, delta: float) -> float:
    def delta_of(eps: float) -> float:
        return special.ndtr(mu / 2 - eps / mu) - math.exp(eps + special.log_ndtr(-mu / 2 - eps / mu))

    if delta_of(0.0) <= delta:
        return 0.0
    upper = 1.0
    while delta_of(upper) > delta:
        upper *= 2
    return optimize.brentq(lambda eps: delta_of(eps) - delta, 0.0, upper, xtol=1e-12, rtol=1e-12)


@pytest.fixture(scope="session")
def exact_gaussian_epsilon():
    """eps(delta) of the Gaussian mechanism with sensitivity / std = mu, exactly (Balle and Wang 2018, Thm. 8):
    delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu), the second term in log space (eps in the thousands
    does not overflow), inverted by bracketing. Independent of dp_accounting and of dpmed's own analytic Gaussian:
    the truth the accounting tests compare against. Called as exact_gaussian_epsilon(mu, delta)."""
    return _exact_gaussian_epsilon


def _pld_by_hand(patient_events, groups, delta: float, interval: float = 3e-4) -> float:
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.privacy_accountant import NeighboringRelation

    events = [dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(
        e.sample_rate, dp_event.GaussianDpEvent(e.noise_multiplier)), e.steps) for e in patient_events]
    for k, e in groups:
        weights = [stats.binom.pmf(j, k, e.sample_rate) for j in range(k + 1)]
        events.append(dp_event.SelfComposedDpEvent(
            dp_event.MixtureOfGaussiansDpEvent(e.noise_multiplier, list(range(k + 1)), weights), e.steps))
    accountant = pld_privacy_accountant.PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE,
                                                      value_discretization_interval=interval)
    accountant.compose(dp_event.ComposedDpEvent(events))
    return accountant.get_epsilon(delta)


@pytest.fixture(scope="session")
def pld_by_hand():
    """eps(delta) for add/remove one patient by dp_accounting's own PLD accountant, on a finer grid than dpmed's:
    each Gaussian event of ``patient_events`` (a patient-unit run's steps) Poisson-sampled, and each (k, event) of
    ``groups`` (an image-unit run's steps, a patient being at most k of its images) as the mixture of Gaussians with
    sensitivities 0..k and Binomial(k, q) weights (Ganesh 2024). Called as pld_by_hand(patient_events, groups,
    delta)."""
    return _pld_by_hand
