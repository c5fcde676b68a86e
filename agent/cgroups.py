"""Jobs known by their cgroup: where cgroup v2 is mounted, and what a job's cgroup is.

A job's cgroup is named by its cgroup v2 path ("/a/b", from the cgroup2 root, as
``/proc/<pid>/cgroup`` shows it). nftables matches it with ``socket cgroupv2 level N
"<path>"``, where the path is taken relative to ``/sys/fs/cgroup`` (on a hybrid host,
where cgroup2 is mounted at ``/sys/fs/cgroup/unified``, the cgroup ``/x`` is
``"unified/x"``), N is the cgroup's depth in the cgroup2 tree, and the path is
resolved to the cgroup's id (its inode) when the rule loads. Socket diagnostics report
each socket's cgroup id, so a job's connections are found without reading fd tables.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from grouper.common.errors import ConfigError

NFT_ROOT = "/sys/fs/cgroup"  # nftables resolves cgroupv2 paths under this directory


@dataclass(frozen=True)
class CgroupRef:
    path: str  # "/a/b" from the cgroup2 root
    level: int  # depth in the cgroup2 tree: "/a" is 1
    nft_path: str  # as nftables takes it: relative to /sys/fs/cgroup
    ident: int  # the cgroup's id (the inode of its directory) when resolved


def cgroup2_mount(mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """Where cgroup v2 is mounted (the first cgroup2 mount), or None."""
    try:
        lines = Path(mountinfo).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, sep, right = line.partition(" - ")
        if sep and right.split(" ", 1)[0] == "cgroup2":
            return left.split(" ")[4].replace("\\040", " ")
    return None


class Cgroups:
    """The cgroup2 tree of this host (``mount``: where it is mounted)."""

    def __init__(self, mount: str, nft_root: str = NFT_ROOT) -> None:
        self.mount = mount.rstrip("/") or "/"
        self.nft_root = nft_root
        rel = os.path.relpath(self.mount, nft_root)
        # nftables can name a cgroup only below /sys/fs/cgroup
        self.nft_prefix = None if rel.startswith("..") else ("" if rel == "." else rel + "/")

    @classmethod
    def probe(cls) -> Cgroups | None:
        mount = cgroup2_mount()
        return cls(mount) if mount else None

    def directory(self, path: str) -> str:
        return self.mount + path

    def resolve(self, path: str, what: str = "cgroup") -> CgroupRef:
        """The cgroup at ``path`` (already checked by ``common.registration.cgroup_path``),
        or a ConfigError naming ``what``."""
        if self.nft_prefix is None:
            raise ConfigError(what, f"cgroup2 is mounted at {self.mount}, outside {self.nft_root}")
        try:
            st = os.stat(self.directory(path))
        except OSError:
            raise ConfigError(what, f"no cgroup {path[:80]!r} under {self.mount}") from None
        parts = path.strip("/").split("/")
        return CgroupRef(path, len(parts), self.nft_prefix + "/".join(parts), st.st_ino)

    def exists(self, ref: CgroupRef) -> bool:
        """The cgroup is there and is the one resolved (not removed and made again)."""
        try:
            return os.stat(self.directory(ref.path)).st_ino == ref.ident
        except OSError:
            return False

    def remove_tree(self, path: str) -> None:
        """Remove the cgroup at ``path`` and every cgroup below it, deepest first; a
        process still in one is moved to the cgroup2 root first."""
        top = self.directory(path)
        for d, _, _ in sorted(os.walk(top), key=lambda w: -len(w[0])):
            try:
                for pid in Path(d, "cgroup.procs").read_text().split():
                    Path(self.mount, "cgroup.procs").write_text(pid)
                os.rmdir(d)
            except OSError:
                continue

    def subtree_ids(self, ref: CgroupRef) -> set[int]:
        """Ids of the cgroup and every cgroup below it (their traffic is the job's)."""
        out: set[int] = set()
        stack = [self.directory(ref.path)]
        while stack:
            top = stack.pop()
            try:
                out.add(os.stat(top).st_ino)
                with os.scandir(top) as entries:
                    stack += [e.path for e in entries if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue  # removed while we walked
        return out


JOBS_ROOT = "/grouper.jobs"  # where the agent makes cgroups for jobs that ask


def job_cgroup_name(cojob: str, job: str) -> str:
    """``JOBS_ROOT/<cojob>/<job>``, each id made a cgroup name (other characters become
    ``_``; a short hash keeps distinct ids distinct)."""

    def name(text: str) -> str:
        safe = "".join(c if c.isascii() and (c.isalnum() or c in "_.-") else "_" for c in text)
        if safe != text or safe.startswith("."):
            safe = f"{safe[:40]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
        return safe[:100]

    return f"{JOBS_ROOT}/{name(cojob)}/{name(job)}"


class JobCgroups:
    """Cgroups the agent made for jobs: made on request, processes moved in (and where
    they came from remembered), removed when the job ends or the agent stops."""

    def __init__(self, cgroups: Cgroups) -> None:
        self.cgroups = cgroups
        self.origin: dict[int, str] = {}  # pid moved in -> the cgroup it came from

    def enter(self, path: str, pids: list[int]) -> None:
        """Make ``path`` (and its parents) and move ``pids`` into it."""
        target = self.cgroups.directory(path)
        os.makedirs(target, exist_ok=True)
        for pid in pids:
            before = own_cgroup(pid)
            Path(target, "cgroup.procs").write_text(str(pid))
            if before is not None and pid not in self.origin:
                self.origin[pid] = before

    def remove(self, path: str) -> bool:
        """Move whatever still runs in ``path`` back where it came from (else to the
        cgroup2 root), then remove it and the empty parents we made. True if gone."""
        target = self.cgroups.directory(path)
        try:
            pids = [int(x) for x in Path(target, "cgroup.procs").read_text().split()]
        except OSError:
            pids = []
        for pid in pids:
            back = self.cgroups.directory(self.origin.pop(pid, "/"))
            for where in (back, self.cgroups.mount):  # its own, else the root
                try:
                    Path(where, "cgroup.procs").write_text(str(pid))
                    break
                except OSError:
                    continue
        top = self.cgroups.directory(JOBS_ROOT)
        d = target
        while d.startswith(top):
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError:  # another job's cgroup is still below it
                break
            d = os.path.dirname(d)
        return not os.path.exists(target)


def own_cgroup(pid: int | str = "self") -> str | None:
    """The cgroup v2 path of a process (the ``0::`` line of /proc/<pid>/cgroup)."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:] or None
    return None
