"""The report's section on where the models started: public pretraining (its data, its result, and that nothing it
learnt is protected by any eps) or saved weights (file, sha256, what they were trained on), and what of the model
trained. Rendered from the run records alone (`dpmed.records.StartRecord`); empty where every run started from
random weights and trained whole.

Why a section: a DP arm that starts from a prior is only as private as the prior is public (METHODS.md s.9). The
reader must see what the prior was trained on, in the user's own declaration, and that the overlap checks with the
private data ran (`dpmed.data.overlap`), to judge whether the eps of the cards still means what it says.
"""

from __future__ import annotations

from dpmed.data.sample import names_text
from dpmed.mechanisms import length_text
from dpmed.numbers import count_text, shape_text
from dpmed.records import RunRecord, StartRecord
from dpmed.reporting.inputs import ReportInputs, escape, facts_table

__all__ = ["pretraining_section"]


def _runs_by_start(records: list[RunRecord]) -> dict[str, tuple[StartRecord, list[str]]]:
    """The distinct starts (by file hash and what trains), with the runs that used each."""
    starts: dict[str, tuple[StartRecord, list[str]]] = {}
    for r in records:
        if r.start is None:
            continue
        key = f"{r.start.sha256}|{r.start.trainable}"
        starts.setdefault(key, (r.start, []))[1].append(r.run_id)
    return starts


def _pretraining(start: StartRecord) -> str:
    p = start.pretraining
    if p is None:
        return ""
    t = p.training
    length = length_text(epochs=t.epochs, steps=t.steps)
    steps = count_text(p.steps, "step")
    auroc = "undefined" if p.validation_auroc is None else f"{p.validation_auroc:.3f}"
    checks = "".join(f"<li>{escape(name)}: {escape(how)}</li>" for name, how in p.overlap_checks.items())
    cohort = p.data.get("cohort")
    cohort_text = f"; {escape(cohort['description'])}" if isinstance(cohort, dict) and "description" in cohort else ""
    return (
        "<h3>Public pretraining</h3>"
        '<p class="note"><strong>Not protected by any ε.</strong> The model first trained without privacy on data '
        "the study declares public; what it learnt there is in every model of this report, and every ε below "
        "covers only the private training that followed. It is sound only if the public data hold none of the "
        "private patients.</p>"
        + facts_table([
            ("public data", f"{escape(p.dataset)} ({escape(p.data.get('format', p.data.get('generator', '')))}"
                            f"{cohort_text}): {p.n_train} training, {p.n_val} validation images, shape "
                            f"{shape_text(p.image_shape)}, task {escape(p.task)} "
                            f"({escape(names_text(p.label_names))})"),
            ("declared public because", escape(p.public)),
            ("training", f"{escape(p.model)}, {length} ({steps}) at batch {t.batch_size}, {escape(t.optimizer)} lr "
                         f"{t.learning_rate:g}, seed {p.seed}, no privacy; {p.seconds:.0f} s"),
            ("result", f"AUROC {auroc} on the public validation images"),
            ("overlap with the private data", "refused if any check finds one; none found one (the near-duplicate "
                                              "check is a heuristic that misses some copies: the public data's "
                                              f"provenance is the guarantee):<ul>{checks}</ul>"),
            ("weights", f"<code>{escape(p.weights)}</code><br>sha256 <code>{escape(p.sha256)}</code>")],
            "The public pretraining"))


def pretraining_section(inputs: ReportInputs) -> str:
    """Where the models started and what trained; "" where every run started from random weights, trained whole."""
    starts = _runs_by_start(inputs.records)
    if not starts:
        return ""
    parts = ['<h2 id="start">Where the models started</h2>']
    for start, runs in starts.values():
        source = ("random initialisation" if start.weights is None else
                  f"<code>{escape(start.weights)}</code> (sha256 <code>{escape(start.sha256)}</code>), trained on: "
                  f"{escape(start.trained_on)}")
        pretrained = start.pretraining      # head_rows come only from its classes (dpmed.pretraining.match_head)
        why = (f"pretrained for {names_text(pretrained.label_names)}, not this study's "
               f"{names_text(inputs.resolved.dataset.label_names)}"
               if pretrained is not None and tuple(pretrained.label_names) != tuple(inputs.resolved.dataset.label_names)
               else "another shape in the file")
        kept = (f"; head left at its initialisation ({escape(', '.join(start.kept))}: {escape(why)})"
                if start.kept else "; the pretrained head's outputs taken in this study's label order (pretrained "
                f"as {escape(names_text(pretrained.label_names))})" if start.head_rows and pretrained is not None
                else "")
        parts.append(
            f"<p>Runs {escape(', '.join(runs))}: started from {source}. Trained: {escape(start.trainable_text)}, "
            f"{start.n_trainable:,} parameters; {start.n_frozen:,} frozen (DP-SGD neither clips nor noises them)"
            f"{kept}.</p>")
        if start.weights is not None and start.pretraining is None:
            parts.append('<p class="note">What these weights learnt before this study is not covered by any ε '
                         "of this report; it is sound only if they were trained on none of the private patients.</p>")
        parts.append(_pretraining(start))
    return "\n".join(parts)
