"""What every key of the cluster YAML means: the text of the configuration reference
(docs/reference/config.md, generated).

Types, defaults and simple bounds are not written here: the generator reads them from
:func:`grouper.common.cluster_config.parse_cluster_config` itself while it parses the
documents below (:mod:`grouper.cli.reference.trace`). A :class:`Doc` adds only what a
single reader call cannot show: a rule between fields, or a default computed from
another field. ``tests/unit/test_reference_complete.py`` fails when a key the parser
accepts has no entry here, or an entry names a key it does not accept.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Doc:
    meaning: str
    bounds: str = ""  # rules beyond the reader's own bounds
    default: str = ""  # shown instead of the value read, when that depends on other keys
    kind: str = ""  # the type, for a key the parser accepts but no reader checks


_HOST = {"name": "gpu01", "address": "10.0.1.11", "nic": "eth0"}
# read in this order: the first documents leave every optional key out (their
# defaults), the last gives every optional key (list items, sections read only if given)
SAMPLES = (
    {"cluster": "rack-a", "hosts": [_HOST]},
    {"cluster": "rack-a", "hosts": [_HOST], "tls": {"ca": "ca", "cert": "c", "key": "k"}},
    {
        "cluster": "rack-a",
        "hosts": [{**_HOST, "address6": "fd00:1::11"}],
        "queues": {"dscp": [56, 48, 40, 32, 24, 16, 0, 8]},
        "agent": {"registry": {"group": "grouper", "admin_group": "wheel"}},
    },
)

KEYS: dict[str, Doc] = {
    "cluster": Doc("The cluster's name, shown by `grouper status` and in logs."),
    "hosts": Doc("Every host that runs an agent, one mapping each."),
    "hosts[].name": Doc("The host's name: how flows, plans and `--host` name it.", bounds="unique"),
    "hosts[].address": Doc(
        "The host's data-plane IPv4 address; flows are matched by it.",
        bounds="a host's address (not all-zero, broadcast, multicast or reserved); unique",
    ),
    "hosts[].address6": Doc(
        "The host's data-plane IPv6 address, if it has one; connections to it are classified too.",
        bounds="a host's address; unique",
        default="none",
    ),
    "hosts[].agent": Doc(
        "Where the coordinator reaches this host's agent: `HOST:PORT`, `[V6]:PORT` or `unix:PATH`.",
        bounds="unique across hosts",
        default="ADDRESS:7070",
    ),
    "hosts[].nic": Doc("The network interface that carries training traffic."),
    "hosts[].link_mbps": Doc(
        "The host link's rate in Mbit/s; the `htb` backend shapes at this rate."
    ),
    "queues": Doc("The priority queues of every port, hosts and switches alike."),
    "queues.count": Doc(
        "Priority queues (bands) per port; band 0 is the highest.",
        bounds="at most 16; at most 8 with the default DSCP table",
    ),
    "queues.reserved": Doc(
        "Bands kept for control traffic (agent and coordinator gRPC), above every data band.",
        bounds="the top bands 0 to n-1, each once",
    ),
    "queues.scavenger": Doc(
        "The band of stages waiting for admission, below every data band: -1 for the "
        "lowest band, `null` for none.",
        bounds="-1, `null` or the lowest band (count - 1)",
    ),
    "queues.dscp": Doc(
        "Band -> DSCP code point, the key of the switches' egress queues. Empty: band b "
        "gets CS(7-b), except the lowest data band (DSCP 0) and the scavenger (CS1, 8).",
        bounds="one per band, 0 to 63, distinct",
        default="[] (the default table)",
    ),
    "queues.min_share": Doc(
        "Share of the link each band is guaranteed where strict priority is emulated with "
        "HTB; keeps starved TCP flows' ACK clock alive.",
        bounds="at most 1 / count",
    ),
    "scheduling": Doc("How and when the coordinator orders stages."),
    "scheduling.policy": Doc(
        "The ordering policy: `grouper` (PDA with AdaDUAL admission), `grouper-offline`, "
        "or a baseline (`fs` fair sharing, `baraat`, `sincronia`, `sptf`)."
    ),
    "scheduling.period": Doc("Seconds between two scheduling runs."),
    "scheduling.event_driven": Doc("Also run early when a stage starts or finishes."),
    "scheduling.min_gap": Doc(
        "Seconds at least between two runs, event-driven ones included.",
        bounds="at most scheduling.period",
    ),
    "scheduling.keep_order_within": Doc(
        "Keep the last order's relative order of known stages while PDA's new order is "
        "better by less than this share of its weighted completion bound (0: a fresh "
        "order every period)."
    ),
    "scheduling.progress_step": Doc(
        "Agents report a job's progress in steps of this share of its stage (0: every "
        "change); 0.02 to 0.05 past about 1,000 hosts."
    ),
    "scheduling.progress_interval": Doc(
        "Agents send progress at most this often, in seconds (0: a quarter of the "
        "period); stage events go at once whatever it is.",
        bounds="0 or at least 0.05; at most the period and failure.agent_timeout / 3",
    ),
    "admission": Doc(
        "AdaDUAL's contention model (Wang et al., Eq. 5): k concurrent tasks of M bytes "
        "each take a + k b M + (k-1) eta M seconds. `grouper calibrate` measures a, b, eta."
    ),
    "admission.enabled": Doc("Admit contended stages with AdaDUAL; false: admit every stage."),
    "admission.a": Doc("Per-task latency, seconds."),
    "admission.b": Doc("Transfer time of one task alone, seconds per byte."),
    "admission.eta": Doc(
        "Contention penalty, seconds per byte each extra concurrent task adds; 0: "
        "sharing costs nothing beyond the bandwidth."
    ),
    "failure": Doc("How agents and the coordinator treat silence."),
    "failure.agent_timeout": Doc(
        "Seconds after which a silent agent is marked down; agents send a heartbeat every "
        "third of it."
    ),
    "failure.plan_ttl": Doc(
        "Seconds an agent keeps a plan without a new one; then it drops all priorities.",
        bounds="longer than scheduling.period",
    ),
    "tls": Doc("Mutual TLS between the coordinator and the agents; absent: plain gRPC."),
    "tls.ca": Doc("Path of the CA certificate both sides verify the other's against."),
    "tls.cert": Doc("Path of this machine's certificate."),
    "tls.key": Doc(
        "Path of this machine's private key.", bounds="readable, not readable by every user"
    ),
    "tls.coordinator_name": Doc("The only certificate identity agents take plans from."),
    "metrics": Doc("Where the coordinator exports Prometheus metrics."),
    "metrics.coordinator": Doc(
        "The coordinator's metrics address, `HOST:PORT`; port 0 turns them off.",
        bounds="a port no other key uses",
    ),
    "coordinator": Doc("The coordinator's gRPC endpoint."),
    "coordinator.listen": Doc(
        "The address the coordinator listens on, `HOST:PORT`; its port is control "
        "traffic (band 0).",
        bounds="a port no other key uses",
    ),
    "agent": Doc("Settings every agent shares."),
    "agent.port": Doc(
        "The agent's gRPC port (control traffic, band 0).",
        bounds="at most 65535; a port no other key uses",
    ),
    "agent.socket": Doc("The Unix socket of the local registry training jobs call."),
    "agent.jobs_dir": Doc("Folder of JSON-lines job event files, one per job, the agent tails."),
    "agent.state_file": Doc(
        "Where the agent keeps its registered jobs, so a restarted agent still knows them."
    ),
    "agent.backend": Doc(
        "The qdisc: `prio` (strict priority), `htb` (strict priority emulated, shaped at "
        "link_mbps), `auto` (`prio` where the kernel has it)."
    ),
    "agent.metrics_port": Doc(
        "The agent's Prometheus port; 0 turns metrics off.",
        bounds="at most 65535; a port no other key uses",
    ),
    "agent.discovery_interval": Doc(
        "Seconds between scans for jobs' new TCP connections.", bounds="0.01 to 10"
    ),
    "agent.multiqueue": Doc(
        "On a multi-queue NIC: `per-queue` keeps the kernel's mq root and puts a band "
        "qdisc on every TX queue; `single` replaces it with one root qdisc."
    ),
    "agent.registry": Doc("Who may register jobs with the agent, and how much one user may ask."),
    "agent.registry.group": Doc(
        "Empty: every local user may connect (socket mode 0666); a group name: only its "
        "members and root (0660).",
        default='"" (every user)',
    ),
    "agent.registry.max_weight": Doc("The largest weight an ordinary user's job may have."),
    "agent.registry.admin_group": Doc(
        "Members may give weights up to the protocol's limit.", default='"" (none)'
    ),
    "agent.registry.max_jobs_per_user": Doc("Jobs one user may have registered at once."),
    "agent.registry.max_pids_per_job": Doc("Processes one job may name."),
    "agent.registry.calls_per_second": Doc(
        "Registry calls one user may make per second; a burst of as many is allowed."
    ),
}
