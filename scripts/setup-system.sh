#!/usr/bin/env bash
# Install the system packages the project needs, only those missing. Idempotent.
#   python3-venv      the .venv
#   iproute2          ip netns, tc (kernel tests, agent)
#   nftables          nft and libnftables.so.1 (the agent's classifier and DSCP marking)
#   iperf3, tcpdump   real TCP traffic and captures in kernel tests
#   mininet           mnexec and friends for the emulated leaf-spine (make demo, tests)
#   qemu-system-x86, busybox-static   the stock-kernel VM of tests/vm (scripts/vm/run.py)
#   systemd           systemd-analyze verify on deploy/*.service (tests/kernel/test_units.py)
#   prometheus        a real Prometheus for the Grafana dashboard's test (tests/kernel/test_prometheus.py;
#                     the test starts its own server, the package's service is not used)
#   slurmd, slurmctld, slurm-client, munge   a real Slurm for tests/slurm (the tests start
#                     their own daemons; the packages' services are not used)
set -euo pipefail
need=()
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
command -v ip >/dev/null || need+=(iproute2)
command -v nft >/dev/null || need+=(nftables)
command -v iperf3 >/dev/null || need+=(iperf3)
command -v tcpdump >/dev/null || need+=(tcpdump)
command -v mnexec >/dev/null || need+=(mininet)
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v prometheus >/dev/null || need+=(prometheus)
command -v slurmd >/dev/null || need+=(slurmd)
command -v slurmctld >/dev/null || need+=(slurmctld)
command -v sbatch >/dev/null || need+=(slurm-client)
command -v munged >/dev/null || need+=(munge)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing system packages: ${need[*]} (run as root or install them)" >&2
  exit 1
fi
echo "setup: installing ${need[*]}"
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
