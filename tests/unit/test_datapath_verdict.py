"""``grouper bench datapath``'s arithmetic: spread per state and a verdict only where
the difference is larger than the spread (the VM once showed the agent with 10,000
rules 42% faster than no agent, a difference the run-to-run spread swallowed)."""

from __future__ import annotations

import pytest

from grouper.agent.datapath_bench import summarise


def runs(*gbps: float, cpu: float = 0.05) -> list[dict[str, float]]:
    return [{"gbps": g, "cpu_s_per_gbit": cpu * (1 + i / 100), "steal": 0.0}
            for i, g in enumerate(gbps)]  # fmt: skip


def verdict(result: dict, state: str, against: str, what: str = "gbps") -> dict:
    return next(
        v for v in result["verdicts"]
        if (v["state"], v["against"], v["what"]) == (state, against, what)
    )  # fmt: skip


def test_a_difference_larger_than_the_spread_gets_a_verdict():
    result = summarise({"none": runs(30, 31, 29), "nft": runs(24, 25, 23),
                        "agent": runs(20, 21, 19), "agent_10k": runs(20.5, 19.5, 20)})  # fmt: skip
    v = verdict(result, "agent", "none")
    assert v["verdict"] == "33.3% slower" and v["spread"] == pytest.approx(2.0)
    assert result["gbps_stats"]["none"] == {"median": 30, "min": 29, "max": 31, "spread": 2}
    # 10,000 rules against the idle agent: 0 difference, within the spread
    v = verdict(result, "agent_10k", "agent")
    assert v["verdict"] is None and "within the spread" in v["why"]


def test_the_vms_42_percent_gain_within_the_spread_gets_no_verdict():
    """Medians 38.98 vs 27.39 Gbit/s, but one state's runs span 22-41: no verdict."""
    same = runs(27, 28, 29)
    result = summarise({"none": runs(27.39, 22.0, 41.0), "nft": same, "agent": same,
                        "agent_10k": runs(38.98, 24.0, 40.0)})  # fmt: skip
    v = verdict(result, "agent_10k", "none")
    assert v["difference"] == pytest.approx(11.59) and v["spread"] == pytest.approx(19.0)
    assert v["verdict"] is None


def test_cpu_per_gigabit_is_judged_the_same_way_and_one_run_gives_no_verdict():
    result = summarise({"none": runs(30, 30, 30, cpu=0.04), "nft": runs(30, 30, 30),
                        "agent": runs(30, 30, 30, cpu=0.06),
                        "agent_10k": runs(30, 30, 30, cpu=0.06)})  # fmt: skip
    assert verdict(result, "agent", "none", "cpu_s_per_gbit")["verdict"] == (
        "50.0% more CPU per Gbit"
    )
    assert result["cpu_s_per_gbit"]["agent"] == pytest.approx(0.0606)
    single = summarise({s: runs(30 - i) for i, s in enumerate(("none", "nft", "agent"))}
                       | {"agent_10k": runs(10)})  # fmt: skip
    v = verdict(single, "agent_10k", "none")
    assert v["verdict"] is None and v["why"] == "one run per state has no spread"
