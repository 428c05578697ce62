"""The app's admin (docs/django.md, "The admin"): conversations with their transcript, runs
with their state and events, the tool calls waiting for approval with Approve and Deny, and
the budgets. Everything is read-only but the decisions; every value is escaped.

The models are read in ``settings.PIAGENT_DATABASE`` (``"default"``). A decision needs the
approval's change permission and goes through the site's runner (``approve``/``deny`` with
the digest of the arguments shown), so the decision that completes a batch starts the
session's next run.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Max, OuterRef, Q, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from ._admin_approvals import decide, shown
from ._admin_transcript import event_summary, run_state, transcript_items, when
from ._site import database
from ._store import from_column
from .models import Approval, Budget, Conversation, Record, Run, RunEvent, Session

__all__ = ["ApprovalAdmin", "BudgetAdmin", "ReadOnlyAdmin", "RunAdmin", "SessionAdmin"]


_RUNS_SHOWN = 20  # runs listed on a conversation's page, latest first
_RECORDS_SHOWN = 1000  # a conversation's latest messages shown on its page
_EVENTS_SHOWN = 2000  # a run's first events shown on its page


class ReadOnlyAdmin(admin.ModelAdmin):
    """An admin that shows rows and changes none (no add, change or delete), reading them
    in the app's database."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).using(database())

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _session_link(session_pk: int | None, session_id: str) -> SafeString:
    if session_pk is None:
        return escape(session_id)
    url = reverse("admin:piagent_session_change", args=[session_pk])
    return format_html('<a href="{}">{}</a>', url, session_id)


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    """Conversations: one per session id, its transcript rendered on its page."""

    list_display = ("shown_id", "owner", "title", "messages", "last_activity")
    search_fields = ("session_id",)
    fields = ("shown_id", "owner", "title", "agent", "messages", "last_activity", "runs",
              "waiting", "transcript")
    readonly_fields = fields
    list_per_page = 50

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        conversation = Conversation.objects.using(database()).filter(key=OuterRef("key"))
        return super().get_queryset(request).annotate(
            message_count=Count("records", filter=~Q(records__kind="started")),
            last_record=Max("records__created_at"),
            owner_id=Subquery(conversation.values("user_id")[:1]),
            owner_name=Subquery(conversation.values(
                f"user__{get_user_model().USERNAME_FIELD}")[:1]),
            conversation_title=Subquery(conversation.values("title")[:1]),
            conversation_agent=Subquery(conversation.values("agent")[:1]),
        ).order_by("-last_record", "-pk")

    @admin.display(description="session id", ordering="session_id")
    def shown_id(self, obj: Session) -> str:
        return from_column(obj.session_id)

    @admin.display(description="user")
    def owner(self, obj: Session) -> str:
        owner_id = getattr(obj, "owner_id", None)
        if owner_id is None:
            return "-"
        if getattr(obj, "owner_name", None) is not None:  # the users are in that database
            return str(obj.owner_name)
        user = get_user_model()._default_manager.filter(pk=owner_id).first()
        return str(user.get_username()) if user is not None else f"user {owner_id}"

    @admin.display(description="title")
    def title(self, obj: Session) -> str:
        return getattr(obj, "conversation_title", None) or "-"

    @admin.display(description="agent")
    def agent(self, obj: Session) -> str:
        return getattr(obj, "conversation_agent", None) or "-"

    @admin.display(description="messages", ordering="message_count")
    def messages(self, obj: Session) -> int:
        return int(getattr(obj, "message_count", 0))

    @admin.display(description="last activity", ordering="last_record")
    def last_activity(self, obj: Session) -> str:
        return when(getattr(obj, "last_record", None))

    @admin.display(description="runs")
    def runs(self, obj: Session) -> SafeString:
        runs = Run.objects.using(database()).filter(session_key=obj.key)
        rows = runs.order_by("-created_at").values_list(
            "pk", "run_id", "state", "lease_expires_at")[:_RUNS_SHOWN]
        links = [format_html('<a href="{}">{}</a> ({})',
                             reverse("admin:piagent_run_change", args=[pk]), run_id,
                             run_state(state, lease))
                 for pk, run_id, state, lease in rows]
        if len(links) == _RUNS_SHOWN:
            links.append(format_html('<a href="{}?session_key={}">all {} runs</a>',
                                     reverse("admin:piagent_run_changelist"), obj.key,
                                     runs.count()))
        return mark_safe("<br>".join(links) or "-")  # each part escaped above

    @admin.display(description="waiting for approval")
    def waiting(self, obj: Session) -> SafeString:
        rows = Approval.objects.using(database()).filter(
            session_id=obj.pk, kind="pending", decision__isnull=True).order_by("position")
        links = [format_html('<a href="{}">{}</a>',
                             reverse("admin:piagent_approval_change", args=[row.pk]),
                             shown(row).tool_name) for row in rows.select_related("session")]
        return mark_safe(", ".join(links) or "-")  # each part escaped above

    @admin.display(description="transcript")
    def transcript(self, obj: Session) -> SafeString:
        records = Record.objects.using(database()).filter(session_id=obj.pk).exclude(
            kind="started")
        total = records.count()
        rows = records.order_by("-seq").values_list(
            "seq", "kind", "data", "created_at")[:_RECORDS_SHOWN]
        items = transcript_items(from_column(obj.session_id), list(rows)[::-1])
        # the template escapes every value it shows
        return mark_safe(render_to_string("piagent/admin/transcript.html", {
            "items": items, "earlier": max(0, total - _RECORDS_SHOWN)}))


class _LiveFilter(admin.SimpleListFilter):
    """Runs by their state as the backends read it (a live run past its lease is lost)."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(s, s) for s in ("queued", "running", "lost", "waiting", "done", "error",
                                 "aborted")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        import time

        value, now = self.value(), time.time()
        live = Q(state__in=("queued", "running"))
        if value is None:
            return queryset
        if value == "lost":
            return queryset.filter(Q(state="lost") | (live & Q(lease_expires_at__lt=now)))
        if value in ("queued", "running"):
            return queryset.filter(state=value, lease_expires_at__gte=now)
        return queryset.filter(state=value)


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    """Runs: their state (``lost`` for a live run past its lease), times, error and events."""

    list_display = ("run_id", "session_link", "shown_state", "created", "started", "ended",
                    "error_message")
    list_filter = (_LiveFilter,)
    search_fields = ("run_id", "session_id")
    fields = ("run_id", "session_link", "shown_state", "owner", "lease", "created", "started",
              "ended", "error_message", "event_list")
    readonly_fields = fields
    list_per_page = 50

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        sessions = Session.objects.using(database()).filter(key=OuterRef("session_key"))
        return super().get_queryset(request).annotate(
            session_pk=Subquery(sessions.values("pk")[:1]))

    @admin.display(description="session")
    def session_link(self, obj: Run) -> SafeString:
        return _session_link(getattr(obj, "session_pk", None), from_column(obj.session_id))

    @admin.display(description="state", ordering="state")
    def shown_state(self, obj: Run) -> str:
        return run_state(obj.state, obj.lease_expires_at)

    @admin.display(description="lease expires")
    def lease(self, obj: Run) -> str:
        return when(obj.lease_expires_at)

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: Run) -> str:
        return when(obj.created_at)

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: Run) -> str:
        return when(obj.started_at)

    @admin.display(description="ended", ordering="ended_at")
    def ended(self, obj: Run) -> str:
        return when(obj.ended_at)

    @admin.display(description="events")
    def event_list(self, obj: Run) -> SafeString:
        found = RunEvent.objects.using(database()).filter(run_id=obj.run_id)
        rows = found.order_by("seq").values_list("seq", "data")[:_EVENTS_SHOWN]
        events = [(seq, *event_summary(data)) for seq, data in rows]
        later = found.count() - len(events) if len(events) == _EVENTS_SHOWN else 0
        return mark_safe(render_to_string(  # the template escapes
            "piagent/admin/run_events.html", {"events": events, "later": later}))


@admin.register(Budget)
class BudgetAdmin(ReadOnlyAdmin):
    """Budgets: what has been spent under each key."""

    list_display = ("shown_key", "cost", "tokens", "requests", "updated")
    search_fields = ("budget_key",)
    fields = list_display
    readonly_fields = fields
    ordering = ("-updated_at",)

    @admin.display(description="key", ordering="budget_key")
    def shown_key(self, obj: Budget) -> str:
        return from_column(obj.budget_key)

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, obj: Budget) -> str:
        return when(obj.updated_at)


@admin.register(Approval)
class ApprovalAdmin(admin.ModelAdmin):
    """Tool calls waiting for approval (undecided), each decided on its page or with the
    changelist's actions, on the arguments shown: the form carries their digest."""

    list_display = ("tool_name", "session_link", "arguments", "digest", "decide_link")
    search_fields = ("session__session_id", "tool_call_id")
    actions = ("approve_selected", "deny_selected")
    list_per_page = 50

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).using(database()).filter(
            kind="pending", decision__isnull=True).select_related("session")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions: dict[str, Any] = super().get_actions(request)
        if not self.has_change_permission(request):
            actions.pop("approve_selected", None)
            actions.pop("deny_selected", None)
        return actions

    @admin.display(description="tool")
    def tool_name(self, obj: Approval) -> str:
        return shown(obj).tool_name

    @admin.display(description="session")
    def session_link(self, obj: Approval) -> SafeString:
        return _session_link(obj.session_id, from_column(obj.session.session_id))

    @admin.display(description="arguments")
    def arguments(self, obj: Approval) -> SafeString:
        return format_html('<pre style="margin:0;white-space:pre-wrap">{}</pre>',
                           shown(obj).arguments)

    @admin.display(description="digest")
    def digest(self, obj: Approval) -> SafeString:
        # the digest of the arguments in this row, posted with the changelist's actions
        seen = shown(obj)
        return format_html(
            '<code title="{}">{}…</code>'
            '<input type="hidden" name="piagent-call-{}" value="{}">'
            '<input type="hidden" name="piagent-digest-{}" value="{}">',
            seen.digest, seen.digest[:12], obj.pk, seen.call, obj.pk, seen.digest)

    @admin.display(description="decide")
    def decide_link(self, obj: Approval) -> SafeString:
        return format_html('<a href="{}">Approve or deny…</a>',
                           reverse("admin:piagent_approval_change", args=[obj.pk]))

    def _decide_selected(self, request: HttpRequest, queryset: QuerySet[Any],
                         approved: bool) -> None:
        if not self.has_change_permission(request):
            raise PermissionDenied
        for row in queryset:
            digest = request.POST.get(f"piagent-digest-{row.pk}")
            call = self._call(request, row, request.POST.get(f"piagent-call-{row.pk}"))
            if call and decide(request, shown(row).session_id, call, digest, approved):
                self._log(request, row, approved, digest)

    def _call(self, request: HttpRequest, row: Approval, posted: object) -> str | None:
        """The call a form names if it is the row's (what its page showed); else ``None``
        and an error message."""
        seen = shown(row)
        if posted == seen.call:
            return seen.call
        messages.error(request, f"The form names the call {posted!r}, not {seen.call!r} "
                                f"({seen.tool_name}) it was shown for; nothing was decided.")
        return None

    def _log(self, request: HttpRequest, row: Approval, approved: bool, digest: Any) -> None:
        """The decision in the admin's history (who decided what, on which digest)."""
        seen = shown(row)
        self.log_change(request, row, f"{'Approved' if approved else 'Denied'} "
                                      f"{seen.tool_name} ({seen.tool_call_id}) of session "
                                      f"{seen.session_id}, arguments digest {digest}")

    @admin.action(description="Approve the selected calls (with the arguments shown)")
    def approve_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._decide_selected(request, queryset, True)

    @admin.action(description="Deny the selected calls")
    def deny_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._decide_selected(request, queryset, False)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The call with its arguments and their digest, and the form that decides it
        (POST: ``tool_call_id``, ``digest``, ``reason``, and ``approve`` or ``deny``)."""
        row = self.get_object(request, object_id)
        changelist = reverse("admin:piagent_approval_changelist")
        if row is None:
            messages.warning(request, "That tool call no longer waits for approval.")
            return HttpResponseRedirect(changelist)
        if not self.has_view_or_change_permission(request, row):
            raise PermissionDenied
        if request.method == "POST":
            if not self.has_change_permission(request, row):
                raise PermissionDenied
            approved = "approve" in request.POST
            if approved == ("deny" in request.POST):
                messages.error(request, "Press Approve or Deny; nothing was decided.")
                return HttpResponseRedirect(request.path)
            digest = request.POST.get("digest")
            call = self._call(request, row, request.POST.get("tool_call_id"))
            done = bool(call) and decide(request, shown(row).session_id, call, digest,
                                         approved, request.POST.get("reason"))
            if done:
                self._log(request, row, approved, digest)
            return HttpResponseRedirect(changelist if done else request.path)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts, "title": "Tool call waiting for approval",
            "subtitle": None, "original": row, "shown": shown(row),
            "can_decide": self.has_change_permission(request, row),
            "session_link": _session_link(row.session_id, shown(row).session_id),
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/piagent/approval/decide.html", context)
