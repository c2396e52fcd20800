"""Which version of dpmed's evaluation methods computed a run's numbers, as its run.json records it.

A resumed study evaluates a finished run again from its released model where it was evaluated otherwise than the study
asks now (`dpmed.resumption`). Its settings are in study.yaml and each record; what they do not show is a change to
dpmed's own methods between versions: a folder finished before such a change and resumed with one more seed would
otherwise hold intervals of both methods in one table, unsaid. The number below says which methods a record's numbers
come from, so that a run of an older dpmed is evaluated again as for changed settings.
"""

from __future__ import annotations

__all__ = ["EVALUATION_VERSION", "RETIRED", "UNRECORDED", "evaluated_by"]

# Bump EVALUATION_VERSION (add the next entry here, numbered past every one of CHANGES and RETIRED) in the same
# commit as any change that alters a number a run's evaluation records: a metric, an interval, a threshold, a fairness
# or explanation figure, how a redraw is drawn. Say in a few words what changed: a resumed study tells it in the line
# that explains why an older dpmed's run is evaluated again. Float rounding or a faster path to the same numbers is no
# change.
CHANGES = {
    1: "",                                   # every method up to the fairness band; records without the field
    2: "fairness intervals changed",         # demographic parity and equalised odds: a simultaneous band, not the
}                                            # percentile interval (METHODS.md sec. 5)
EVALUATION_VERSION = max(CHANGES)

# Versions an older dpmed recorded whose methods this one dropped again. Their records are an older dpmed's, though
# numbered above EVALUATION_VERSION, and no later version takes their number: one that did would take such a record
# for its own and keep its numbers, computed otherwise, unsaid beside the new runs'.
RETIRED = {
    3: "BCa intervals",     # 6 December 2026, for half an hour: AUROC, accuracy, sensitivity, specificity, kappa and a
}                           # group's AUROC and accuracy BCa, recorded without evaluation.interval (read as percentile)

# What a run.json written before the version was recorded read as: every dpmed until the fairness band came.
UNRECORDED = 1


def evaluated_by(version: int) -> str:
    """Why a run evaluated by methods ``version`` must be evaluated again, for the terminal ("evaluated by an older
    dpmed (fairness intervals changed)"); "" for the current version."""
    if version == EVALUATION_VERSION:
        return ""
    if version > EVALUATION_VERSION and version not in RETIRED:
        return f"evaluated by a newer dpmed (its evaluation methods {version}, this version's {EVALUATION_VERSION})"
    # a retired version's methods, dropped since, and every change after it, which its record lacks as well
    changed = [RETIRED[version]] if version in RETIRED else []
    changed += [CHANGES[v] for v in range(version + 1, EVALUATION_VERSION + 1) if CHANGES.get(v)]
    return f"evaluated by an older dpmed ({'; '.join(changed)})"
