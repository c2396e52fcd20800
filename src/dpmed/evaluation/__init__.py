"""Evaluation: predictions once, then metrics as pure functions of them.

Import the module you need (`predictions`, `utility`, `bootstrap`, `paired`, `fairness`, `explanations`, ...): this
package imports none of them, so that reading a run record (`dpmed.records` types its results with `summaries`)
loads neither torch nor scikit-learn, and `dpmed status` answers in a few seconds.
"""
