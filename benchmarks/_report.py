"""The targets and the Markdown table written from the results JSON."""

from __future__ import annotations

from typing import Any

__all__ = ["evaluate_targets", "render_markdown"]

GROWTH_TOLERANCE_MS = 0.25  # "no growth": last rounds' added cost within this of the first's


def _get(results: dict[str, Any], *path: str) -> Any:
    node: Any = results
    for key in path:
        if not isinstance(node, dict) or key not in node or node[key] is None:
            return None
        node = node[key]
    return node


def _target(items: list[dict[str, Any]], name: str, goal: str, value: Any, unit: str,
            met: bool | None) -> None:
    items.append({"name": name, "target": goal, "value": value, "unit": unit,
                  "met": met if value is not None else None})


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target: what it asks, the measured value, and whether it is met."""
    items: list[dict[str, Any]] = []
    s1 = _get(results, "per_turn", "20x4_instant")
    s2 = _get(results, "per_turn", "5x8_sleep100")
    s3 = _get(results, "per_turn", "100x1_instant")
    if s1:
        v = s1["added_ms_per_turn"]
        _target(items, "added per turn, 20 rounds x 4 instant tools", "<= 0.5 ms/turn", v,
                "ms/turn", v <= 0.5)
    if s3:
        v = s3["added_ms_per_turn"]
        _target(items, f"added per turn, {s3['rounds']} rounds x 1 instant tool",
                "<= 1 ms/turn", v, "ms/turn", v <= 1.0)
        growth = s3["added_last_rounds_ms"] - s3["added_first_rounds_ms"]
        _target(items, f"growth of added cost, last {s3['growth_window']} vs first "
                f"{s3['growth_window']} rounds", f"<= {GROWTH_TOLERANCE_MS} ms (no growth)",
                growth, "ms/turn", growth <= GROWTH_TOLERANCE_MS)
    if s2:
        v = s2["wall_ratio"]
        _target(items, "8 tools x 100 ms concurrently, wall vs floor", "<= 1.1x", v, "x",
                v <= 1.1)
    stalled = _get(results, "abort", "stalled_stream", "to_agent_end")
    if stalled:
        v = stalled["p90_ms"]
        _target(items, f"abort while the server stalls -> agent_end (p90 of {stalled['n']})",
                "<= 50 ms", v, "ms", v <= 50)
    tool = _get(results, "abort", "waiting_tool", "to_agent_end")
    if tool:
        v = tool["p90_ms"]
        _target(items, f"abort while a tool waits on its signal -> agent_end (p90 of "
                f"{tool['n']})", "<= 50 ms", v, "ms", v <= 50)
    ratio = _get(results, "imports", "ratio_piagent_vs_requests")
    if ratio is not None:
        _target(items, "import piagent vs import requests (median)", "<= 1.2x", ratio, "x",
                ratio <= 1.2)
    rss = _get(results, "memory", "piagent_peak_rss_mb")
    if rss is not None:
        _target(items, "peak RSS, piagent, 20 x 4 scenario", "<= 40 MB", rss, "MB", rss <= 40)
    many = _get(results, "many_agents")
    if many:
        ok = (many["finished"] == many["agents"]
              and many["threads_after"] <= many["threads_before"])
        _target(items, f"{many['agents']} agents in threads: all finish, no thread left",
                "all, none left", f"{many['finished']}/{many['agents']}, threads "
                f"{many['threads_before']} -> {many['threads_after']}", "", ok)
    return items


def _fmt(value: Any, digits: int = 2) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return lines + [""]


def render_markdown(results: dict[str, Any]) -> str:
    """The results as Markdown tables (targets first)."""
    meta = results.get("meta", {})
    lines = ["# piagent benchmarks", "",
             f"{'Quick run' if meta.get('quick') else 'Full run'} — {meta.get('date', '')}, "
             f"commit {meta.get('commit', '?')}"
             f"{' (piagent/ has local changes)' if meta.get('piagent_tree_dirty') else ''}, "
             f"Python {meta.get('python', '?')}, {meta.get('cpus', '?')} CPUs, "
             f"{_fmt(meta.get('seconds', 0.0), 1)} s. Figures are medians unless noted; "
             "see benchmarks/README.md.", ""]
    lines += ["## Targets", ""]
    marks = {True: "met", False: "**missed**", None: "n/a"}
    lines += _table(["target", "goal", "measured", "result"],
                    [[t["name"], t["target"], f"{_fmt(t['value'], 3)} {t['unit']}".strip(),
                      marks[t["met"]]] for t in results.get("targets", [])])
    per_turn = results.get("per_turn")
    if per_turn:
        lines += ["## 1. Per-turn overhead over the floor (local OpenAI-compatible server)", ""]
        rows = []
        for name, s in per_turn.items():
            rows.append([name, s["turns"], s["reps"], s["floor_wall_ms"], s["piagent_wall_ms"],
                         s["wall_ratio"], s["floor_cpu_ms"], s["piagent_cpu_ms"],
                         s["added_ms_per_turn"], s["added_cpu_ms_per_turn"],
                         s["floor_peak_rss_mb"], s["piagent_peak_rss_mb"]])
        lines += _table(["scenario", "turns", "reps", "floor wall ms", "piagent wall ms",
                         "ratio", "floor CPU ms", "piagent CPU ms", "added ms/turn",
                         "added CPU ms/turn", "floor RSS MB", "piagent RSS MB"], rows)
        rows = [[name, s["growth_window"], s["floor_first_rounds_ms"],
                 s["floor_last_rounds_ms"], s["added_first_rounds_ms"],
                 s["added_last_rounds_ms"], s["floor_connections_per_request"],
                 s["piagent_connections_per_request"]] for name, s in per_turn.items()]
        lines += _table(["scenario", "window", "floor first rounds ms", "floor last rounds ms",
                         "added first rounds ms", "added last rounds ms",
                         "floor TCP conns/request", "piagent TCP conns/request"], rows)
    loop = results.get("loop_alone")
    if loop:
        lines += ["## 2. The loop alone (ScriptedStreamFn, zero latency)", "",
                  f"Events per second through one listener: **{loop['events_per_s']:,.0f}** "
                  f"({loop['events_per_run']} events per run of {loop['rounds']} rounds x "
                  f"{loop['tools_per_round_wide']} tools).", ""]
        rows = [[r["messages"], r["turn_ms"], r["turn_cpu_ms"], r["tool_call_cpu_ms"],
                 r["convert_to_llm_ms"], r["scripted_stream_fn_ms"], r["growth_ms"],
                 r["growth_beyond_allowed_ms"], r["turn_gc_frozen_ms"]]
                for r in loop["by_size"]]
        lines += _table(["transcript msgs", "turn wall ms", "turn CPU ms",
                         "per extra tool call CPU ms", "convert_to_llm ms/turn (in situ)",
                         "ScriptedStreamFn ms/turn", "growth CPU ms/turn vs 10",
                         "growth beyond convert+stream fn", "turn CPU ms, gc frozen"], rows)
    abort = results.get("abort")
    if abort:
        lines += ["## 3. Abort latency", ""]
        rows = []
        for label, key in (("server stalls mid-stream", "stalled_stream"),
                           ("tool waits on its signal", "waiting_tool")):
            case = abort.get(key)
            if case:
                rows.append([label, case["to_agent_end"]["median_ms"],
                             case["to_agent_end"]["p90_ms"], case["to_agent_end"]["max_ms"],
                             case["to_settled"]["median_ms"], case["to_settled"]["max_ms"],
                             case["to_agent_end"]["n"]])
        lines += _table(["abort while", "-> agent_end median ms", "p90 ms", "max ms",
                         "-> settled median ms", "settled max ms", "n"], rows)
    steer = results.get("steer")
    if steer:
        lines += ["## 4. Steer latency", ""]
        lines += _table(["from", "median ms", "p90 ms", "max ms", "n"], [
            [f"steer() during a {steer['tool_ms']} ms tool batch -> message_end",
             steer["steer_to_message_end"]["median_ms"], steer["steer_to_message_end"]["p90_ms"],
             steer["steer_to_message_end"]["max_ms"], steer["steer_to_message_end"]["n"]],
            ["batch's last tool_execution_end -> message_end",
             steer["batch_done_to_message_end"]["median_ms"],
             steer["batch_done_to_message_end"]["p90_ms"],
             steer["batch_done_to_message_end"]["max_ms"],
             steer["batch_done_to_message_end"]["n"]]])
    imports = results.get("imports")
    if imports:
        lines += ["## 5. Import time and memory", ""]
        rows = [[m, imports[m]["import_ms"], imports[m]["process_ms"], imports[m]["modules"],
                 ", ".join(imports[m]["loaded"]) or "-"]
                for m in ("piagent", "requests", "piagent.providers") if m in imports]
        lines += _table(["import", "import ms", "whole process ms", "modules loaded",
                         "heavy modules pulled in"], rows)
    memory = results.get("memory")
    if memory:
        lines += _table(["peak RSS (20 x 4 scenario, fresh process)", "MB"], [
            ["floor (requests + sseclient)", memory["floor_peak_rss_mb"]],
            ["piagent", memory["piagent_peak_rss_mb"]],
            ["piagent, after imports, before the run", memory["piagent_rss_before_runs_mb"]]])
    many = results.get("many_agents")
    if many:
        lines += ["## 6. Many agents", ""]
        lines += _table(["agents x rounds", "finished", "total s", "per agent median s",
                         "requests/s", "threads before", "at start", "after",
                         "peak RSS MB"],
                        [[f"{many['agents']} x {many['rounds']}",
                          f"{many['finished']}/{many['agents']}", many["total_s"],
                          many["per_agent_median_s"], many["requests_per_s"],
                          many["threads_before"], many["threads_at_start"],
                          many["threads_after"], many["peak_rss_mb"]]])
        if many.get("errors"):
            lines += ["Errors: " + "; ".join(many["errors"]), ""]
    return "\n".join(lines)
