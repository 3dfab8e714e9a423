"""Error classes shared by the framework: each says what went wrong and what to do."""

from __future__ import annotations


class DRAError(Exception):
    """Base of every error the framework raises on purpose."""


class UserError(DRAError):
    """Bad input or environment the user can fix; the CLI prints it as one paragraph, exit 2."""
