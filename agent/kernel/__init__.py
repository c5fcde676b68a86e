"""Kernel backends: tc qdiscs through netlink (pyroute2), nftables through libnftables."""
