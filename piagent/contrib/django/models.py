"""The app's models: ``Session`` (one per session id, its row the session's write lock),
``Record`` (a message or a start mark, numbered per session), ``Approval`` (the session's
batch waiting for approval), ``Budget`` (what has been spent under a key).

A session id, tool-call id or budget key is kept readable in a text column with NUL as
``\\0`` and a backslash doubled (PostgreSQL's text refuses NUL); lookups go by ``key``, the
SHA-256 of its UTF-8 (lower-case hex), so no database collation (MariaDB's fold case and
ignore trailing spaces) can make two ids one.
"""

from __future__ import annotations

from django.db import models

__all__ = ["Approval", "Budget", "Record", "Session"]


class Session(models.Model):
    """One conversation: its id, and the next record's sequence number. Every write to the
    session first updates this row, which holds its lock until the transaction ends."""

    key = models.CharField(max_length=64, unique=True, editable=False)
    session_id = models.TextField()
    next_seq = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "conversation"

    def __str__(self) -> str:
        return str(self.session_id)


class Record(models.Model):
    """A message (``kind`` ``message``, or ``assistant`` for an assistant message: it asks
    for a new batch of calls; ``data`` its pi-JSON) or a start mark (``started``:
    ``tool_call_id`` the mark). A tool result's ``tool_call_id`` is the call it answers."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="records")
    seq = models.BigIntegerField()
    kind = models.CharField(max_length=16)
    tool_call_id = models.TextField(null=True, blank=True)
    data = models.TextField(null=True, blank=True)
    created_at = models.FloatField()  # epoch seconds

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "seq"],
                                               name="piagent_record_session_seq")]
        ordering = ["session", "seq"]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.kind}"


class Approval(models.Model):
    """A row of the session's batch waiting for approval: ``pending`` (``data`` the call's
    JSON, ``decision`` once made), ``held`` (a result held back) or ``since`` (position -1,
    ``data`` the sequence number from which stored tool results answer the batch)."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="approvals")
    position = models.IntegerField()
    kind = models.CharField(max_length=16)
    tool_call_id = models.TextField()
    data = models.TextField()
    decision = models.TextField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "position"],
                                               name="piagent_approval_session_position")]
        ordering = ["session", "position"]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.position} {self.kind}"


class Budget(models.Model):
    """What every process has spent under one key: USD, tokens, requests."""

    key = models.CharField(max_length=64, unique=True, editable=False)
    budget_key = models.TextField()
    cost = models.FloatField(default=0.0)
    tokens = models.BigIntegerField(default=0)
    requests = models.BigIntegerField(default=0)
    updated_at = models.FloatField()  # epoch seconds of the last charge

    def __str__(self) -> str:
        return str(self.budget_key)
