"""The differential suite: every scenario through pi-agent-core 1.6.0 (the reference) and 1.4.0,
and through piagent.

Per scenario and entry point (Agent, run_agent_loop, agent_loop): both normalised outputs
must be identical, or differ exactly as the scenario declares (``differences``: deliberate,
docs/reference.md; ``defects``: undeclared differences, xfail(strict=True) with the defect's text).
A row changed upstream in 1.5/1.6 is declared against 1.4.0 only.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import PI16, Pi, PiOutputs, load_scenario, scenario_files
from .piagent_driver import entries_of, run_scenario
from .ref_differences import DEFECTS, DELIBERATE, apply, declared
from .ref_normalise import first_difference, normalise


class UndeclaredDifference(AssertionError):
    """piagent differs from pi in a way no deliberate difference explains (a known defect)."""


def _cases() -> list[Any]:
    cases = []
    for path in scenario_files():
        scenario = load_scenario(path)
        for entry in entries_of(scenario):
            defects = declared(scenario, "defects", entry)
            marks = []
            if defects:
                reason = "; ".join(f"[{d}] {DEFECTS[d].text}" for d in defects)
                marks.append(pytest.mark.xfail(strict=True, raises=UndeclaredDifference,
                                               reason=reason))
            cases.append(pytest.param(scenario, entry, marks=marks,
                                      id=f"{scenario['name']}[{entry}]"))
    return cases


def test_every_difference_is_known() -> None:
    for path in scenario_files():
        scenario = load_scenario(path)
        for entry in entries_of(scenario):
            for ident in declared(scenario, "differences", entry):
                assert ident in DELIBERATE, f"{path.name}: unknown deliberate difference {ident}"
            for ident in declared(scenario, "defects", entry):
                assert ident in DEFECTS, f"{path.name}: unknown defect {ident}"


def test_at_least_fifty_scenarios() -> None:
    assert len(scenario_files()) >= 50


@pytest.mark.parametrize(("scenario", "entry"), _cases())
def test_scenario(scenario: dict[str, Any], entry: str, pi_outputs: dict[str, Any],
                  pi: Pi, piagent_outputs: dict[tuple[str, str], Any],
                  pi_outputs_by_version: PiOutputs, request: pytest.FixtureRequest) -> None:
    theirs = normalise(pi_outputs[scenario["name"]][entry], entry)
    assert "driverError" not in theirs, theirs.get("driverError")
    replaced = [d for d in declared(scenario, "differences", entry, pi.version)
                if DELIBERATE[d].as_reference]
    if replaced:  # changed upstream in a way no transform writes: 1.6.0's output instead
        request.getfixturevalue("pi16_installed")
        reference = normalise(pi_outputs_by_version.of(Pi("1.6.0", PI16))[scenario["name"]][entry],
                              entry)
        assert first_difference(theirs, reference) is not None, (
            f"declared {replaced}, but pi {pi.version}'s output is 1.6.0's: drop the declaration")
        theirs = reference
    key = (scenario["name"], entry)
    if key not in piagent_outputs:  # piagent's side is the same for both versions
        piagent_outputs[key] = normalise(run_scenario(scenario, entry), entry)
    ours = piagent_outputs[key]
    _compare(scenario, entry, theirs, ours, pi.version)


def _compare(scenario: dict[str, Any], entry: str, pi: Any, ours: Any, version: str) -> None:
    differences = [d for d in declared(scenario, "differences", entry, version)
                   if not DELIBERATE[d].as_reference]
    expected = apply(differences, DELIBERATE, pi, scenario)
    for ident in differences:  # each declared difference must show in pi's output
        assert apply([ident], DELIBERATE, pi, scenario) != pi, (
            f"declared {ident!r}, but pi's output does not show it: drop the declaration or "
            f"make the scenario exercise it")
    defects = declared(scenario, "defects", entry, version)
    if defects and all(DEFECTS[d].transform is not None for d in defects):
        # the named defects must explain every difference left
        explained = apply(defects, DEFECTS, expected, scenario)
        other = first_difference(explained, ours)
        assert other is None, f"besides {defects}, another difference:\n{other}"
    difference = first_difference(expected, ours)
    if difference is not None:
        if defects:
            raise UndeclaredDifference(difference)
        pytest.fail(f"piagent differs from pi-agent-core {version}:\n{difference}", pytrace=False)
