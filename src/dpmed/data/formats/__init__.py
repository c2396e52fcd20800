"""Readers of on-disk dataset formats; each returns a :class:`dpmed.data.sample.Dataset`."""

from dpmed.data.formats.medmnist import MEDMNIST_LABELS, read_medmnist

__all__ = ["read_medmnist", "MEDMNIST_LABELS"]
