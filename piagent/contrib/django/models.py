"""The app's models: ``Session`` (one per session id, its row the session's write lock),
``Record`` (a message or a start mark, numbered per session), ``Approval`` (the session's
batch waiting for approval), ``Budget`` (what has been spent under a key); the runs backend's
``Run``, ``RunEvent`` and ``RunControl`` (a run's state and lease, its events, the control
inbox); the views' ``Conversation`` (which user a session belongs to, and its agent).

A session id, tool-call id or budget key is kept readable in a text column with NUL as
``\\0`` and a backslash doubled (PostgreSQL's text refuses NUL); lookups go by ``key``, the
SHA-256 of its UTF-8 (lower-case hex), so no database collation (MariaDB's fold case and
ignore trailing spaces) can make two ids one.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

__all__ = ["Approval", "Budget", "Conversation", "Record", "Run", "RunControl", "RunEvent",
           "Session"]


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


class Run(models.Model):
    """A run addressed by id (docs/sessions.md): its session, state and the lease of the
    process executing it. ``session_key`` is its session's ``Session.key``; a session has at
    most one live (``queued``/``running``) run, which the runs backend keeps by locking the
    session's row."""

    run_id = models.CharField(max_length=64, unique=True)
    session_key = models.CharField(max_length=64, db_index=True)
    session_id = models.TextField()
    state = models.CharField(max_length=16, db_index=True)  # queued running done error ...
    error_message = models.TextField(null=True, blank=True)
    owner = models.CharField(max_length=255)  # host:pid:runner of the executing process
    lease_expires_at = models.FloatField()  # epoch seconds; a live run past it is lost
    created_at = models.FloatField()
    started_at = models.FloatField(null=True, blank=True)
    ended_at = models.FloatField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.run_id} ({self.state})"


class RunEvent(models.Model):
    """One event of a run: ``seq`` from 0, ``data`` its pi-JSON."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events",
                            to_field="run_id", db_column="run_id")
    seq = models.BigIntegerField()
    data = models.TextField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "seq"],
                                               name="piagent_runevent_run_seq")]
        ordering = ["run", "seq"]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq}"


class RunControl(models.Model):
    """An inbox entry: ``steer``/``follow_up`` for a session (``payload`` a message's
    pi-JSON), ``abort`` for one run (``payload`` the reason); ``claimed_by`` the run that took
    it, null while it waits."""

    session_key = models.CharField(max_length=64)
    session_id = models.TextField()
    run_id = models.CharField(max_length=64, null=True, blank=True)
    kind = models.CharField(max_length=16)
    payload = models.TextField(null=True, blank=True)
    claimed_by = models.CharField(max_length=64, null=True, blank=True)
    created_at = models.FloatField()

    class Meta:
        indexes = [models.Index(fields=["session_key", "claimed_by", "id"],
                                name="piagent_runcontrol_open")]
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.kind} for {self.session_id}"


class Conversation(models.Model):
    """A session as the views show it: the user it belongs to (nobody else sees it), the
    agent it talks to (a name in ``PIAGENT_AGENTS``), a title, its latest run and how many
    stored messages came before that run (a reloaded page shows those from the transcript and
    replays the run's events)."""

    key = models.CharField(max_length=64, unique=True, editable=False)  # Session.key's hash
    session_id = models.TextField()
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="piagent_conversations")
    agent = models.CharField(max_length=100, default="default")
    title = models.CharField(max_length=200, blank=True)
    last_run_id = models.CharField(max_length=64, null=True, blank=True)
    messages_before = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return self.title or str(self.session_id)
