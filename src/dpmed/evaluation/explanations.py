"""Grad-CAM explanations of a trained model and how faithful they are (METHODS.md sec. 6; 001_d0483fd35863b74c.txt).

001_d0483fd35863b74c.txt asks whether DP-SGD makes a model's explanations worse, and measures it with Grad-CAM
(Selvaraju et al. 2017) and three scores of how much of the model's confidence the explanation keeps:

* CAM: alpha_k = spatial mean of d y_c / d A_k at the target layer, L = ReLU(sum_k alpha_k A_k), upsampled
  (bilinear) to the input and divided by its max (an all-zero map stays zero). c is the predicted class (argmax).
  pytorch-grad-cam computes alpha and the weighted sum (so Grad-CAM++, XGrad-CAM, HiRes-CAM, Layer-CAM, Eigen-CAM and
  Score-CAM are one name away: :data:`CAM_METHODS`); its own rescaling (min-max per image) is replaced by METHODS'
  divide-by-max, because subtracting the minimum would change the masked input below wherever the map has a floor.
* Y = softmax score of c on the image I, O = the same on the masked input E = L * I (in [0, 1] pixel space, before
  any normalisation), per image; then over the explained images
  ``average_drop`` = 100 mean(max(0, Y - O) / Y) (lower is better, Chattopadhay et al. 2018),
  ``increase_in_confidence`` = 100 mean(1[Y < O]) (higher is better), and
  ``masked_input_score`` = 100 mean(O / Y): our operational definition of 001's "average normalised input score",
  which that paper does not define; labelled so wherever it is shown.
* A second view, less sensitive to the multiplicative masking: deletion and insertion AUC (Petsiuk et al. 2018,
  RISE). Pixels are removed from (deletion) or restored into (insertion) a black image in order of decreasing CAM,
  in ``steps`` equal fractions, and the area under the class-c score curve over the fraction is taken (trapezoid).
  Low deletion AUC and high insertion AUC mean the CAM ranks the pixels that matter first.
* Where ground-truth lesion masks exist (the phantom): the share of CAM energy inside the mask, sum(L M) / sum(L)
  (an all-zero CAM scores 0; a uniform one the mask's share of the image, recorded as ``mask_area_share``, the
  chance level), and the pointing game (Zhang et al. 2018): a hit when the peak of L lies in the mask (optionally
  within ``tolerance`` pixels of it; an all-zero CAM points nowhere and misses). These use the CAM of the finding
  the mask annotates (binary: class 1), on the explained images that carry a non-empty mask, so a model that misses
  a lesion is asked "where would opacity be?", not "why normal?".

Every mean has a 95% percentile bootstrap interval over seeded redraws of the explained images.

CAMs are computed on a plain copy of the model (:func:`plain_copy`): an Opacus GradSampleModule wrapper, or hooks
left by a clipping engine, would fire inside the CAM library's own hooks, and the library puts its model in eval
mode. The caller's model keeps its mode, parameters, gradients and hooks (a test checks this).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dpmed.evaluation.bootstrap import bootstrap_indices
from dpmed.evaluation.weighted import estimate, number, redraw_counts, weighted_mean

__all__ = ["CamMethod", "CAM_METHODS", "plain_copy", "compute_cams", "class_probabilities", "average_drop",
           "increase_in_confidence", "masked_input_score", "mask_energy", "mask_area_share", "pointing_game",
           "deletion_insertion", "mean_with_interval", "select_images", "explain", "explain_test_set",
           "explanation_columns", "METRIC_LABELS"]


@dataclass(frozen=True)
class CamMethod:
    """A CAM method: the pytorch-grad-cam class that computes its channel weights, and where it comes from."""

    name: str
    class_name: str
    reference: str


CAM_METHODS: dict[str, CamMethod] = {
    m.name: m for m in (
        CamMethod("gradcam", "GradCAM", "Selvaraju et al. 2017"),
        CamMethod("gradcam++", "GradCAMPlusPlus", "Chattopadhay et al. 2018"),
        CamMethod("xgradcam", "XGradCAM", "Fu et al. 2020"),
        CamMethod("hirescam", "HiResCAM", "Draelos & Carin 2020"),
        CamMethod("layercam", "LayerCAM", "Jiang et al. 2021"),
        CamMethod("eigencam", "EigenCAM", "Muhammad & Yeasin 2020"),
        CamMethod("scorecam", "ScoreCAM", "Wang et al. 2020"),
    )
}

METRIC_LABELS = {
    "average_drop": "Average Drop % (lower is better)",
    "increase_in_confidence": "Increase in Confidence % (higher is better)",
    "masked_input_score": "masked-input score % (mean O/Y; our operational definition of 001's 'average "
                          "normalised input score')",
    "deletion_auc": "deletion AUC (lower is better)",
    "insertion_auc": "insertion AUC (higher is better)",
    "mask_energy": "share of CAM energy inside the lesion mask",
    "pointing_game": "pointing-game hit rate",
}


# --------------------------------------------------------------------------------------------------- the CAM itself


_HOOK_DICTS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
               "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks")


def plain_copy(model: nn.Module) -> nn.Module:
    """A hook-free deep copy of ``model`` (unwrapped from an Opacus GradSampleModule), in eval mode, every parameter
    requiring grad (so gradients reach the target layer) and no ``grad`` or ``grad_sample`` carried over.

    The copy never shares a tensor with ``model``, and ``model`` is not touched: hooks are left out of the copy by
    pre-seeding deepcopy's memo with empty hook dicts, not by removing them from the original.
    """
    from opacus import GradSampleModule        # a dependency of training anyway; its subclasses are wrappers too

    if isinstance(model, GradSampleModule):
        model = model._module
    memo: dict[int, Any] = {}
    for module in model.modules():
        for name in _HOOK_DICTS:
            hooks = module.__dict__.get(name)
            if hooks is not None:
                memo[id(hooks)] = type(hooks)()
    clone = copy.deepcopy(model, memo)
    for p in clone.parameters():
        p.requires_grad_(True)
        p.grad = None
        if hasattr(p, "grad_sample"):
            del p.grad_sample
    return clone.eval()


def _max_normalised(cam_class: type) -> type:
    """``cam_class`` with METHODS.md's normalisation: ReLU, bilinear upsampling, divide by the max (not min-max)."""

    class MaxNormalised(cam_class):  # type: ignore[misc, valid-type]
        def compute_cam_per_layer(self, input_tensor, targets, eigen_smooth):
            acts = [a.cpu().numpy() for a in self.activations_and_grads.activations]
            grads = [g.cpu().numpy() for g in self.activations_and_grads.gradients]
            size = tuple(input_tensor.shape[-2:])
            per_layer = []
            for i, layer in enumerate(self.target_layers):
                raw = self.get_cam_image(input_tensor, layer, targets, acts[i] if i < len(acts) else None,
                                         grads[i] if i < len(grads) else None, eigen_smooth)       # [B, h, w]
                raw = torch.from_numpy(np.maximum(raw, 0).astype(np.float32))[:, None]            # [B, 1, h, w]
                up = F.interpolate(raw, size=size, mode="bilinear", align_corners=False)          # [B, 1, H, W]
                per_layer.append(up.clamp_min(0).numpy())
            return per_layer

        def aggregate_multi_layers(self, per_layer):
            cam = np.concatenate(per_layer, axis=1).mean(axis=1)                                   # [B, H, W]
            peak = cam.reshape(len(cam), -1).max(axis=1)
            return np.where(peak[:, None, None] > 0, cam / np.where(peak > 0, peak, 1.0)[:, None, None],
                            0.0).astype(np.float32)

    MaxNormalised.__name__ = f"MaxNormalised{cam_class.__name__}"
    return MaxNormalised


def _to_input(images: np.ndarray, normalization, device) -> torch.Tensor:
    """[0, 1] images [B, C, H, W] -> the model's input tensor (fixed (x - mean) / std where the study asks)."""
    x = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32)).to(device)
    if normalization is not None:
        mean, std = (torch.tensor(v, dtype=torch.float32, device=device).reshape(1, -1, 1, 1) for v in normalization)
        x = (x - mean) / std
    return x


def compute_cams(model: nn.Module, images: np.ndarray, *, target_layer: str, targets: Sequence[int],
                 method: str = "gradcam", normalization=None, batch_size: int = 32) -> np.ndarray:
    """CAMs float32 [N, H, W] in [0, 1] of ``images`` ([0, 1] pixels [N, C, H, W]) for class ``targets[i]``.

    ``target_layer`` is a dotted submodule name (the registry's ``cam_layer``). Computed on :func:`plain_copy`
    (``model`` keeps its mode, parameters and hooks).
    """
    return _cams_of_plain(plain_copy(model), images, target_layer=target_layer, targets=targets, method=method,
                          normalization=normalization, batch_size=batch_size)


def _cams_of_plain(clone: nn.Module, images: np.ndarray, *, target_layer: str, targets: Sequence[int],
                   method: str, normalization, batch_size: int = 32) -> np.ndarray:
    """:func:`compute_cams` on a module that is already a :func:`plain_copy` (no second copy)."""
    if method not in CAM_METHODS:
        raise ValueError(f"unknown CAM method {method!r}; known: {', '.join(CAM_METHODS)}")
    import pytorch_grad_cam                                     # heavy (OpenCV): only when CAMs are asked for
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    device = next(clone.parameters()).device
    cam_class = _max_normalised(getattr(pytorch_grad_cam, CAM_METHODS[method].class_name))
    # Not ``with cam_class(...)``: BaseCAM.__exit__ swallows IndexError (it prints and returns True), which would
    # hand back CAMs for only some images. Release the hooks ourselves, and let every error through.
    cam = cam_class(model=clone, target_layers=[clone.get_submodule(target_layer)])
    out = []
    try:
        for start in range(0, len(images), batch_size):
            x = _to_input(images[start : start + batch_size], normalization, device)          # [b, C, H, W]
            chunk_targets = [ClassifierOutputTarget(int(c)) for c in targets[start : start + batch_size]]
            out.append(cam(input_tensor=x, targets=chunk_targets))                             # [b, H, W]
    finally:
        cam.activations_and_grads.release()
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, *images.shape[2:]), np.float32)


def class_probabilities(model: nn.Module, images: np.ndarray, *, kind: str, normalization=None,
                        batch_size: int = 128) -> np.ndarray:
    """Class scores [N, K] of ``model`` on [0, 1] ``images``: softmax (binary, multiclass) or sigmoid (multilabel).

    Runs on whatever module it is given without changing its mode: pass :func:`plain_copy` for eval-mode scores.
    """
    device = next(model.parameters()).device
    probs = []
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            logits = model(_to_input(images[start : start + batch_size], normalization, device))
            probs.append((torch.sigmoid(logits) if kind == "multilabel" else logits.softmax(dim=1)).cpu().numpy())
    return np.concatenate(probs).astype(np.float64)


# ------------------------------------------------------------------------------------------ pure metrics on arrays


def _ratio(y, o) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y, dtype=np.float64)
    o = np.asarray(o, dtype=np.float64)
    if y.shape != o.shape or y.ndim != 1:
        raise ValueError(f"Y and O must both be [N], got {y.shape} and {o.shape}")
    if np.any(y <= 0):
        raise ValueError("Y (the class score on the unmasked image) must be > 0: softmax scores always are")
    return y, o


def average_drop(y, o) -> np.ndarray:
    """Per image 100 max(0, Y - O) / Y; its mean is Average Drop % (Chattopadhay et al. 2018)."""
    y, o = _ratio(y, o)
    return 100.0 * np.maximum(0.0, y - o) / y


def increase_in_confidence(y, o) -> np.ndarray:
    """Per image 100 1[Y < O]; its mean is Increase in Confidence %."""
    y, o = _ratio(y, o)
    return 100.0 * (y < o).astype(np.float64)


def masked_input_score(y, o) -> np.ndarray:
    """Per image 100 O / Y; its mean is our masked-input score % (001's undefined 'average normalised input score')."""
    y, o = _ratio(y, o)
    return 100.0 * o / y


def mask_energy(cams, masks) -> np.ndarray:
    """Per image sum(L M) / sum(L): the share of CAM energy inside the mask (cams [N, H, W] >= 0, masks bool
    [N, H, W]); nan for an empty mask (nothing to find).

    An all-zero CAM (Grad-CAM's ReLU removed everything: no evidence for the class anywhere) scores 0, not nan: it
    found none of the lesion, and dropping it would flatter exactly the noisy DP models whose maps die. A uniform
    CAM scores the mask's share of the image (:func:`mask_area_share`), the chance level to read this against.
    """
    cams = np.asarray(cams, dtype=np.float64)
    masks = np.asarray(masks, dtype=bool)
    if cams.shape != masks.shape or cams.ndim != 3:
        raise ValueError(f"cams and masks must both be [N, H, W], got {cams.shape} and {masks.shape}")
    total = cams.sum(axis=(1, 2))                                                # [N]
    inside = (cams * masks).sum(axis=(1, 2))                                     # [N]
    share = np.where(total > 0, inside / np.where(total > 0, total, 1.0), 0.0)
    return np.where(masks.any(axis=(1, 2)), share, np.nan)


def mask_area_share(masks) -> np.ndarray:
    """Per image |M| / (H W): the mask energy of a uniform CAM (chance level); nan for an empty mask."""
    masks = np.asarray(masks, dtype=bool)
    area = masks.mean(axis=(1, 2))
    return np.where(area > 0, area, np.nan)


def pointing_game(cams, masks, *, tolerance: float = 0.0) -> np.ndarray:
    """Per image 1.0 when the CAM's peak lies within ``tolerance`` pixels of the mask, else 0.0 (Zhang et al. 2018,
    who allow 15 px at 224 px); an all-zero CAM points nowhere and misses; nan for an empty mask.

    The peak is the centroid (rounded) of the maximal pixels: one pixel for a peaked map, the centre of a plateau
    where bilinear upsampling of a coarse map leaves one at the border, and the image centre for a flat map, so a
    map without a preference cannot hit by having its maximum everywhere."""
    from scipy.ndimage import distance_transform_edt

    cams = np.asarray(cams, dtype=np.float64)
    masks = np.asarray(masks, dtype=bool)
    if cams.shape != masks.shape or cams.ndim != 3:
        raise ValueError(f"cams and masks must both be [N, H, W], got {cams.shape} and {masks.shape}")
    out = np.full(len(cams), np.nan)
    for i, (cam, mask) in enumerate(zip(cams, masks)):
        if not mask.any():
            continue
        near = mask if tolerance <= 0 else distance_transform_edt(~mask) <= tolerance
        peak = cam.max()
        if peak <= 0:
            out[i] = 0.0
            continue
        rows, cols = np.nonzero(cam == peak)
        out[i] = float(near[int(np.rint(rows.mean())), int(np.rint(cols.mean()))])
    return out


def deletion_insertion(score_fn: Callable[[np.ndarray], np.ndarray], images: np.ndarray, cams: np.ndarray,
                       targets: Sequence[int], *, steps: int = 16, baseline: float = 0.0, batch_size: int = 128):
    """(deletion AUC [N], insertion AUC [N], deletion curve [N, steps+1], insertion curve [N, steps+1]).

    Pixels (all channels of a location) are ranked by decreasing CAM (ties by position: a stable sort). At step
    k = 0..steps the top round(k P / steps) of the P locations are set to ``baseline`` (deletion), or are the only
    ones taken from the image on a ``baseline`` canvas (insertion). ``score_fn`` maps images [B, C, H, W] in [0, 1]
    to class scores [B, K]; image i is read at class ``targets[i]``. AUC: trapezoid over the fraction k / steps.
    """
    images = np.asarray(images, dtype=np.float32)
    n, _c, h, w = images.shape
    p = h * w
    order = np.argsort(-np.asarray(cams, dtype=np.float64).reshape(n, p), axis=1, kind="stable")   # [N, P]
    rank = np.empty_like(order)
    rank[np.arange(n)[:, None], order] = np.arange(p)[None, :]                  # rank of each location
    counts = np.rint(np.arange(steps + 1) * p / steps).astype(np.int64)           # locations changed at step k
    targets = np.asarray(targets, dtype=np.int64)
    curves = np.empty((n, steps + 1, 2))
    per_chunk = max(1, batch_size // (2 * (steps + 1)))                          # images whose variants fit a batch
    for start in range(0, n, per_chunk):
        sl = slice(start, start + per_chunk)
        img, chosen_rank = images[sl], rank[sl]
        variants = []
        for k in counts:
            chosen = (chosen_rank < k).reshape(len(img), 1, h, w)                # [b, 1, H, W] top-k locations
            variants.append(np.where(chosen, np.float32(baseline), img))         # deletion
            variants.append(np.where(chosen, img, np.float32(baseline)))         # insertion
        stacked = np.stack(variants, axis=1).reshape(-1, *img.shape[1:])        # [b * (steps+1) * 2, C, H, W]
        scores = np.asarray(score_fn(stacked), dtype=np.float64)                 # [M, K]
        per_variant = np.repeat(targets[sl], 2 * (steps + 1))                    # image-major, like stacked
        curves[sl] = scores[np.arange(len(stacked)), per_variant].reshape(len(img), steps + 1, 2)
    deletion, insertion = curves[:, :, 0], curves[:, :, 1]
    return _trapezoid(deletion), _trapezoid(insertion), deletion, insertion


def _trapezoid(curve: np.ndarray) -> np.ndarray:
    """Area under curves [N, steps+1] sampled at equal steps of the fraction in [0, 1] (trapezoid rule): [N]."""
    steps = curve.shape[1] - 1
    return ((curve[:, 1:] + curve[:, :-1]) / 2.0).sum(axis=1) / steps


def mean_with_interval(per_image, *, n_resamples: int = 1000, seed: int = 0,
                       confidence: float = 0.95) -> dict[str, Any]:
    """Mean of per-image values (nan = undefined, left out) with a seeded percentile bootstrap interval over images,
    and ``n`` (the defined values)."""
    v = np.asarray(per_image, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {"value": None, "low": None, "high": None, "n": 0}
    indices = bootstrap_indices(v.size, n_resamples=n_resamples, seed=seed)
    redraws = np.concatenate([weighted_mean(v, w) for _rows, w in redraw_counts(indices, v.size)])
    return {**estimate(v.mean(), redraws, confidence=confidence), "n": int(v.size)}


# ------------------------------------------------------------------------------------------------- one run, whole


def select_images(n_test: int, *, n_images: int, seed: int) -> np.ndarray:
    """The test positions to explain: min(n_images, n_test) drawn without replacement by ``seed``, sorted. The same
    for every arm of a study (same test set, same seed), so their explanations are of the same images."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n_test, size=min(n_images, n_test), replace=False))


def explain(model: nn.Module, images: np.ndarray, *, kind: str, target_layer: str, method: str = "gradcam",
            normalization=None, masks: np.ndarray | None = None, lesion_class: int | None = 1,
            deletion_steps: int = 16, pointing_tolerance: float = 0.0, n_resamples: int = 1000, seed: int = 0,
            confidence: float = 0.95) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Explain ``images`` ([0, 1] pixels [N, C, H, W], e.g. the :func:`select_images` of the test set).

    Returns (record, arrays): the run.json ``"explanations"`` block (method, target layer, every metric with its
    interval) and the arrays for ``cams.npz`` (cams, targets, Y, O, deletion and insertion curves, and, where masks
    are given, lesion_cams and lesion_positions). ``model`` is never modified (see :func:`plain_copy`).
    Intervals: percentile bootstrap over the explained images (``bootstrap_indices(n, n_resamples, seed)``), so
    every arm explaining the same images gets the same redraws.
    """
    clone = plain_copy(model)

    def scores_of(batch: np.ndarray) -> np.ndarray:
        return class_probabilities(clone, batch, kind=kind, normalization=normalization)

    probs = scores_of(images)                                                   # [N, K]
    targets = probs.argmax(axis=1)                                              # the predicted class c
    cams = _cams_of_plain(clone, images, target_layer=target_layer, targets=targets, method=method,
                          normalization=normalization)                         # [N, H, W]
    rows = np.arange(len(images))
    y = probs[rows, targets]
    o = scores_of(cams[:, None] * images)[rows, targets]                        # E = L * I, before normalisation
    deletion, insertion, del_curve, ins_curve = deletion_insertion(scores_of, images, cams, targets,
                                                                   steps=deletion_steps)
    stats = dict(n_resamples=n_resamples, seed=seed, confidence=confidence)
    metrics = {
        "average_drop": mean_with_interval(average_drop(y, o), **stats),
        "increase_in_confidence": mean_with_interval(increase_in_confidence(y, o), **stats),
        "masked_input_score": mean_with_interval(masked_input_score(y, o), **stats),
        "deletion_auc": mean_with_interval(deletion, **stats),
        "insertion_auc": mean_with_interval(insertion, **stats),
    }
    arrays = {"cams": cams.astype(np.float16), "targets": targets, "score_image": y, "score_masked": o,
              "deletion_curve": del_curve, "insertion_curve": ins_curve}
    record: dict[str, Any] = {"method": method, "method_reference": CAM_METHODS[method].reference,
                              "target_layer": target_layer, "explained_class": "predicted (argmax)",
                              "n_images": int(len(images)), "n_zero_cams": int((cams.max(axis=(1, 2)) <= 0).sum()),
                              # Y's spread: the confidence metrics divide by Y, and a model whose class scores
                              # barely leave 1/K can drop little whatever its CAM shows (read them with it)
                              "score_image_min": number(y.min()), "score_image_max": number(y.max()),
                              "deletion_steps": int(deletion_steps), "baseline": "black (0 in [0, 1] pixels)",
                              "labels": METRIC_LABELS}
    if masks is not None and lesion_class is not None:
        masks = np.asarray(masks, dtype=bool)
        positions = np.flatnonzero(masks.reshape(len(masks), -1).any(axis=1))
        if positions.size:
            # The CAM of the finding the mask annotates, whatever the model predicted (module docstring).
            lesion_cams = _cams_of_plain(clone, images[positions], target_layer=target_layer,
                                         targets=[lesion_class] * positions.size, method=method,
                                         normalization=normalization)          # [M, H, W]
            metrics["mask_energy"] = mean_with_interval(mask_energy(lesion_cams, masks[positions]), **stats)
            metrics["pointing_game"] = mean_with_interval(
                pointing_game(lesion_cams, masks[positions], tolerance=pointing_tolerance), **stats)
            arrays.update(lesion_cams=lesion_cams.astype(np.float16), lesion_positions=positions)
            record.update(lesion_class=int(lesion_class), pointing_tolerance_px=float(pointing_tolerance),
                          n_masked_images=int(positions.size),
                          mask_area_share=number(np.nanmean(mask_area_share(masks[positions]))))
        else:
            record["mask_note"] = "none of the explained images carries a lesion mask"
    record["metrics"] = metrics
    return record, arrays


def explain_test_set(model: nn.Module, images: np.ndarray, masks: np.ndarray | None, *, kind: str, target_layer: str,
                     method: str, n_images: int, seed: int, deletion_steps: int, pointing_tolerance: float,
                     normalization=None, n_resamples: int = 1000, bootstrap_seed: int = 0,
                     confidence: float = 0.95) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """:func:`explain` on the :func:`select_images` (``n_images``, ``seed``) of a test set: the run's explanations.

    The keyword names match the study file's ``evaluation.explanations`` block. The arrays add ``positions`` (test
    indices), the explained ``images`` (float16) and their ``masks``, so the report can draw its CAM grid from
    cams.npz alone.
    """
    positions = select_images(len(images), n_images=n_images, seed=seed)
    chosen_masks = None if masks is None else np.asarray(masks)[positions]
    record, arrays = explain(model, np.asarray(images)[positions], kind=kind, target_layer=target_layer, method=method,
                             normalization=normalization, masks=chosen_masks, deletion_steps=deletion_steps,
                             pointing_tolerance=pointing_tolerance, n_resamples=n_resamples, seed=bootstrap_seed,
                             confidence=confidence)
    record["image_seed"] = int(seed)
    arrays.update(positions=positions, images=np.asarray(images)[positions].astype(np.float16))
    if chosen_masks is not None:
        arrays["masks"] = chosen_masks.astype(bool)
    return record, arrays


def explanation_columns(explanations: Mapping | None) -> dict[str, Any]:
    """The flat results.csv columns of a run's explanations block, e.g. ``explanations_mask_energy_low``."""
    if not explanations:
        return {}
    row: dict[str, Any] = {"explanations_method": explanations.get("method"),
                           "explanations_target_layer": explanations.get("target_layer"),
                           "explanations_mask_area_share": explanations.get("mask_area_share")}
    for metric, v in explanations.get("metrics", {}).items():
        row[f"explanations_{metric}"] = v["value"]
        row[f"explanations_{metric}_low"] = v["low"]
        row[f"explanations_{metric}_high"] = v["high"]
    return row
