"""Tooling around :mod:`veil.documents`: ``veil documents server|bench``."""
