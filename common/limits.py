"""Limits that keep every run finite, checked where input is read (one place, so the
workload schema, the cluster config and the command line agree).

Each is far beyond any real cluster or experiment and far below where arithmetic in
float64, a C integer or the simulator's event loop breaks down.
"""

from __future__ import annotations

MAX_BYTES = 1e15  # bytes one flow (or one model) moves per iteration: 1 PB
MIN_BYTES = 1e-3  # below it a flow is rounding error (textbook units are >= 1)
MAX_ITERATIONS = 10**8  # iterations of one stage
MAX_STAGES = 1000  # stages of one cojob
MAX_COMPUTE = 1e6  # time units of compute per iteration
MAX_ARRIVAL = 1e9  # time units; an arrival past it would never come in any experiment
# bytes per time unit of a port: a workload in seconds needs 1 kB/s to 100 TB/s
CAPACITY_SECONDS = (1e3, 1e14)
CAPACITY_UNITS = (1e-6, 1e15)  # textbook time units
MIN_FLOW_TIME = 1e-9  # time units one iteration's largest flow needs alone, at least
MAX_LINK_MBPS = 1e7  # 10 Tbit/s; link_mbps counts megabits per second
MIN_LINK_MBPS = 1.0
MIN_PERIOD = 1e-3  # seconds: a shorter scheduling period is a busy loop
MAX_PERIOD = 3600.0
MAX_SIM_TIME = 1e15  # the largest --max-sim-time, in the workload's time units
MAX_SIM_PERIODS = 10**7  # simulated time / period: scheduling rounds one run may need
IFNAMSIZ = 16  # the kernel's interface names: at most 15 bytes and a NUL
MIN_LIVE_PERIOD = 0.01  # seconds: the coordinator's period and min_gap on a real network
MIN_PROGRESS_INTERVAL = 0.05  # seconds: agents' progress updates at most 20 a second
MIN_ITERATION_TIME = 1e-6  # time units one iteration takes alone, at least
MAX_SIM_EVENTS = 20_000_000  # iterations and scheduling rounds of one simulated run
MAX_STAGE_SUM = MAX_STAGES * MAX_ITERATIONS  # iterations of one job, at most
MAX_FLOWS = 1_000_000  # flows of one workload (a PS job has 2 x workers x servers)
