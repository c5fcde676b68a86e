"""Jobs known by their cgroup, without root: path checks, the cgroup tree (a temporary
directory stands in for the cgroup2 mount), rules composed for cgroup jobs, and the
nftables text that carries them. The kernel tests (tests/kernel/test_cgroups.py) load
that text and send real traffic through it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grouper.agent.cgroups import CgroupRef, Cgroups, job_cgroup_name
from grouper.agent.kernel import nft_cgroup
from grouper.agent.kernel.layout import BandLayout
from grouper.agent.kernel.nft_rules import render_table
from grouper.agent.plan import Rule, compose
from grouper.agent.registry import Registry
from grouper.common.errors import ConfigError
from grouper.common.queues import QueueConfig
from grouper.common.registration import CGROUP_PATH_MAX, cgroup_path


@pytest.mark.parametrize(
    "text, problem",
    [
        ("relative", "must start with '/'"),
        ("/", "needs a cgroup below the root"),
        ("/a//b", "needs a cgroup below the root"),
        ("/a/../b", "bad component '..'"),
        ("/a/./b", "bad component '.'"),
        ("/a b", "bad component"),
        ('/a"b', "bad component"),
        ("/x\\x2d.scope", "bad component"),
        ("/" + "a" * CGROUP_PATH_MAX, "longer than the kernel allows"),
        (7, "expected a string"),
    ],
)
def test_bad_cgroup_paths_are_refused_naming_the_field(text, problem):
    with pytest.raises(ConfigError, match=f"^cgroup: {problem}"):
        cgroup_path(text, "cgroup")


def test_managers_cgroup_paths_are_accepted():
    for path in (
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b_2c3d.slice",
        "/system.slice/slurmstepd.scope/job_4242/step_0",
        "/system.slice/train@3.service",
    ):
        assert cgroup_path(path, "cgroup") == path


@given(st.text(max_size=60))
def test_any_text_is_a_clean_path_or_one_config_error(text):
    try:
        out = cgroup_path(text, "cgroup")
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("cgroup: ")
    else:
        assert out == "" or (out.startswith("/") and ".." not in out.split("/") and '"' not in out)


@pytest.fixture
def tree(tmp_path):
    """A directory standing in for cgroup2 mounted at <nft root>/unified (hybrid)."""
    mount = tmp_path / "unified"
    (mount / "slurm" / "job_1" / "step_0" / "task_0").mkdir(parents=True)
    (mount / "other").mkdir()
    return Cgroups(str(mount), nft_root=str(tmp_path))


def test_a_cgroup_resolves_to_its_level_nft_path_and_id(tree):
    ref = tree.resolve("/slurm/job_1/step_0")
    assert (ref.level, ref.nft_path) == (3, "unified/slurm/job_1/step_0")
    assert tree.exists(ref)
    assert len(tree.subtree_ids(ref)) == 2, "the cgroup and the one below it"
    with pytest.raises(ConfigError, match="^cgroup: no cgroup '/slurm/job_9'"):
        tree.resolve("/slurm/job_9")


def test_a_mount_outside_the_nft_root_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="outside"):
        Cgroups(str(tmp_path), nft_root="/sys/fs/cgroup").resolve("/a")


def test_registry_refuses_a_cgroup_that_overlaps_another_jobs(tree):
    reg = Registry(known_hosts={"a", "b"}, host="a", own_pid=-1, cgroups=tree)

    def job(name, cgroup):
        return {"cojob_id": "c", "job_id": name, "arch": "flows", "stage_iterations": [5],
                "cgroup": cgroup}  # fmt: skip

    reg.register(job("j1", "/slurm/job_1/step_0"))
    for path in ("/slurm/job_1/step_0", "/slurm/job_1", "/slurm/job_1/step_0/task_0"):
        with pytest.raises(ConfigError, match="^cgroup: .* overlaps job c/j1's"):
            reg.register(job("j2", path))
    reg.register(job("j2", "/other"))
    assert set(reg.jobs) == {("c", "j1"), ("c", "j2")}
    assert reg.by_cgroup("/other").job_id == "j2"


def test_without_cgroup_matching_a_cgroup_registration_is_refused_saying_why():
    why = "Linux 6.1: nftables socket cgroupv2: No such file or directory"
    reg = Registry(known_hosts={"a"}, host="a", own_pid=-1, cgroups=None, no_cgroups=why)
    with pytest.raises(ConfigError, match=f"^cgroup: jobs known by pids only here: {why}"):
        reg.register({"cojob_id": "c", "job_id": "j", "arch": "flows",
                      "stage_iterations": [5], "cgroup": "/x"})  # fmt: skip


def test_job_cgroup_names_are_valid_cgroup_paths_and_distinct():
    a, b = job_cgroup_name("search 1", "trial/3"), job_cgroup_name("search_1", "trial_3")
    assert cgroup_path(a, "x") == a and cgroup_path(b, "x") == b and a != b


REF = CgroupRef("/slurm/job_1", 2, "unified/slurm/job_1", 99)


def test_host_flows_of_a_cgroup_job_become_one_key_per_destination_address():
    entries = {"c/j/b:*": Rule(2, 40), "c/k/b:*": Rule(3, 32)}
    rules = compose(
        entries, {}, {"b": "10.0.0.2"},
        connections={(("c", "k"), "b"): [("conn", "10.0.0.1", "10.0.0.2", 4000, 5000)]},
        cgroups={("c", "j"): REF}, addresses6={"b": "fd00::2"},
    )  # fmt: skip
    assert rules == {
        ("cg4_2", "unified/slurm/job_1", "10.0.0.2"): Rule(2, 40),
        ("cg6_2", "unified/slurm/job_1", "fd00::2"): Rule(2, 40),
        ("conn", "10.0.0.1", "10.0.0.2", 4000, 5000): Rule(3, 32),
    }


def test_the_table_steers_cgroup_jobs_in_the_output_hook_deepest_level_first():
    layout = BandLayout("htb", 8)
    rules = {
        ("cg4_2", "unified/slurm/job_1", "10.0.0.2"): Rule(2, 40),
        ("cg4_4", "unified/k/p/q/r", "10.0.0.3"): Rule(3, 32),
    }
    text = render_table("eth0", QueueConfig(), layout, (7070,), rules)
    assert "type filter hook output priority 0" in text
    assert text.index("@band_cg4_4") < text.index("@band_cg4_2"), "deepest level first"
    assert "set ours_cg4_2 { typeof socket cgroupv2 level 2 . ip daddr; }" in text
    assert '"unified/slurm/job_1" . 10.0.0.2 : goto dscp_40' in text
    assert "@band_cg4_2 " not in text.replace("map @band_cg4_2", ""), "never a map as a set"
    assert nft_cgroup.chains({}, "eth0", {}, {}) == [], "no cgroup job: no output hook"
