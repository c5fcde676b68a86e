"""Finding a job's TCP connections from its processes (no ports declared).

``sockdiag`` dumps the kernel's TCP sockets over netlink socket diagnostics,
``procs`` maps processes to the socket inodes they hold, and ``tracker`` keeps, per
registered job, the connections it has to each cluster host and the bytes they carry.
"""
