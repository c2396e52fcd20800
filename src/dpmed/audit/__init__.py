"""The one-run privacy audit (Steinke, Nasr and Jagielski 2023) in one place: its canaries, its statistics, and the
procedure a run follows."""

from dpmed.audit.bound import (AUDIT_FRACTIONS, AuditResult, audit_epsilon_lower_bound,
                               audit_epsilon_lower_bound_over_grid, audit_p_value, canary_scores,
                               canary_scores_from_logits, choose_canaries, default_audit_grid,
                               epsilon_lower_bound_from_counts)
from dpmed.audit.canaries import CANARY_KINDS, hold_out_canary_sources, insert_canaries, make_canaries, max_canaries
from dpmed.audit.procedure import (AUDIT_CITATION, AUDIT_DELTA_NON_PRIVATE, AuditRecord, AuditTrial, conclude,
                                   insert_canaries_for, read_audit)

__all__ = [
    "AUDIT_FRACTIONS", "AuditResult", "audit_epsilon_lower_bound", "audit_epsilon_lower_bound_over_grid",
    "audit_p_value", "canary_scores", "canary_scores_from_logits", "choose_canaries", "default_audit_grid",
    "epsilon_lower_bound_from_counts", "CANARY_KINDS", "hold_out_canary_sources", "insert_canaries",
    "make_canaries", "max_canaries", "AUDIT_CITATION", "AUDIT_DELTA_NON_PRIVATE", "AuditRecord", "AuditTrial",
    "conclude", "insert_canaries_for", "read_audit",
]
