#!/usr/bin/env python3
"""Run one command as root on Debian 12's stock kernel, in a QEMU VM.

    python3 scripts/vm/run.py [--timeout S] [--out DIR] [--env K=V] -- CMD...

The kernel is the package ``scripts/vm/fetch-kernel.sh`` unpacked into ``.cache/vm/``.
The guest's root is the host's ``/``, shared read-only over 9p under a tmpfs overlay, so
the host's tools and this checkout's venv run unchanged; writes stay in the VM, except
in ``--out`` (shared read-write, at the same path, ``$GROUPER_VM_OUT`` in the guest).
A busybox initramfs loads the virtio, 9p and overlay modules, mounts the root and
proc/sys/dev/cgroup2, points module autoload at the package's modules and runs ``CMD``
in the checkout's directory. Its output streams back over a virtio-serial port (not
``hvc0``: slow for bulk output), its exit status through ``--out``.

Exit status: CMD's; 124 when the time bound passes; 125 when the VM died before CMD
ended (panic, crash, no status), with the last lines of the kernel console.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CACHE = Path(os.environ.get("GROUPER_VM_CACHE", ROOT / ".cache" / "vm"))
BUSYBOX = Path("/bin/busybox")  # busybox-static: runs in an initramfs with no libc
MODULES = ("virtio_pci", "virtio_console", "9pnet_virtio", "9p", "overlay")
STATUS = "vm-exit-status"
EXIT_TIMEOUT, EXIT_VM_DIED = 124, 125
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class VmError(RuntimeError):
    pass


def kernel_dir() -> tuple[Path, str]:
    """The unpacked kernel package named in fetch-kernel.sh, and its release."""
    text = (HERE / "fetch-kernel.sh").read_text()
    package = re.search(r"^PACKAGE=(\S+)", text, re.M)
    version = re.search(r"^VERSION=(\S+)", text, re.M)
    assert package and version, "fetch-kernel.sh names no PACKAGE/VERSION"
    path = CACHE / f"{package[1]}-{version[1]}"
    if not (path / ".unpacked").exists():
        raise VmError(f"no kernel in {path}: run scripts/vm/fetch-kernel.sh (make setup)")
    return path, package[1].removeprefix("linux-image-")


def module_order(moddir: Path, wanted: tuple[str, ...]) -> list[str]:
    """Paths (relative to ``moddir``) of ``wanted`` and their dependencies, deps first."""
    deps: dict[str, list[str]] = {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        mod, _, rest = line.partition(":")
        deps[mod] = rest.split()
    by_name = {Path(m).name.split(".ko")[0].replace("-", "_"): m for m in deps}
    order: list[str] = []

    def visit(mod: str) -> None:
        for dep in reversed(deps[mod]):  # modules.dep lists the deepest dependency last
            visit(dep)
        if mod not in order:
            order.append(mod)

    for name in wanted:
        visit(by_name[name.replace("-", "_")])
    return order


def cpio(entries: list[tuple[str, int, bytes]]) -> bytes:
    """A ``newc`` cpio archive of (path, mode, data); the kernel unpacks it as rootfs."""
    out = bytearray()
    for ino, (name, mode, data) in enumerate([*entries, ("TRAILER!!!", 0, b"")], start=1):
        fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name) + 1, 0]
        out += b"070701" + b"".join(b"%08X" % f for f in fields) + name.encode() + b"\0"
        out += b"\0" * (-len(out) % 4) + data
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


INIT = """#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc && mount -t sysfs sys /sys && mount -t devtmpfs dev /dev
ip link set lo up  # the guest has no NIC, but 127.0.0.1 must answer (metrics, gRPC)
for m in $(cat /modules/order); do insmod "/modules/$m" || echo "vm: insmod $m failed"; done
mkdir -p /lower /rw /newroot
mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=512000,cache=loose hostroot /lower
mount -t tmpfs -o mode=755 rw /rw && mkdir /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work root /newroot
R=/newroot OUT=@OUT@
# a host name of its own that resolves (Slurm's daemons look theirs up)
hostname grouper-vm && echo "127.0.1.1 grouper-vm" >> $R/etc/hosts
mount -t proc proc $R/proc && mount -t sysfs sys $R/sys && mount -t devtmpfs dev $R/dev
mkdir -p $R/dev/pts $R/dev/shm && mount -t devpts devpts $R/dev/pts
mount -t tmpfs tmpfs $R/dev/shm && mount -t tmpfs tmpfs $R/run && mount -t tmpfs tmpfs $R/tmp
mount -t cgroup2 cgroup2 $R/sys/fs/cgroup
# a working directory under /tmp or /run (a CI clone, say) is hidden by the fresh mounts
# above: it gets a writable overlay of its own over the host's copy
CWD=@CWD@
case "$CWD" in /tmp/*|/run/*)
    mkdir -p /rw/cwd-upper /rw/cwd-work "$R$CWD"
    mount -t overlay -o "lowerdir=/lower$CWD,upperdir=/rw/cwd-upper,workdir=/rw/cwd-work" \
        cwd "$R$CWD" ;;
esac
mkdir -p "$R$OUT" && mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 out "$R$OUT"
cp /vm-command $R/run/vm-command
cp /modprobe $R/run/modprobe && echo /run/modprobe > /proc/sys/kernel/modprobe
port=/dev/console
for p in /sys/class/virtio-ports/*; do
    [ "$(cat "$p/name")" = out ] && port="/dev/${p##*/}"
done
echo "vm: booted in $(cut -d' ' -f1 /proc/uptime) s" > "$port"
# the overlay becomes the root of the mount namespace (as switch_root does), not just a
# chroot: a process that enters the namespace with setns (Mininet's mnexec -a, nsenter
# -m) lands in the overlay's / instead of the initramfs's
cd $R && mount --move . / && exec chroot . /bin/busybox sh -c '
/bin/sh /run/vm-command < /dev/null > "$0" 2>&1
echo $? > "$1/vm-exit-status"
/bin/busybox umount "$1"
/bin/busybox sync
/bin/busybox reboot -f' "$port" "$OUT"
"""

# Module autoload runs this (from the guest's root: the host's modprobe, the package's
# modules).
MODPROBE = """#!/bin/sh
exec /sbin/modprobe -d "$KDIR" "$@"
"""


def initramfs(kdir: Path, release: str, command: str, env: dict[str, str], cwd: Path) -> bytes:
    moddir = kdir / "lib" / "modules" / release
    mods = module_order(moddir, MODULES)
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    init = INIT.replace("@OUT@", shlex.quote(env["GROUPER_VM_OUT"]))
    init = init.replace("@CWD@", shlex.quote(str(cwd)))
    entries: list[tuple[str, int, bytes]] = [
        (d, 0o40755, b"") for d in ("bin", "dev", "proc", "sys", "modules")
    ]
    entries += [
        ("bin/busybox", 0o100755, BUSYBOX.read_bytes()),
        ("init", 0o100755, init.encode()),
        ("modprobe", 0o100755, MODPROBE.replace('"$KDIR"', shlex.quote(str(kdir))).encode()),
        ("vm-command", 0o100644, (exports + command + "\n").encode()),
        ("modules/order", 0o100644, "\n".join(Path(m).name for m in mods).encode()),
    ]
    entries += [(f"modules/{Path(m).name}", 0o100644, (moddir / m).read_bytes()) for m in mods]
    return cpio(entries)


def qemu_argv(kdir: Path, release: str, work: Path, out: Path, cpus: int, mem: str) -> list[str]:
    fs = "local,security_model=passthrough,multidevs=remap"
    return [
        "qemu-system-x86_64",
        *("-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"),
        *("-accel", "tcg,thread=multi", "-cpu", "max"),
        *("-smp", str(cpus), "-m", mem, "-nic", "none"),
        *("-kernel", str(kdir / "boot" / f"vmlinuz-{release}")),
        *("-initrd", str(work / "initramfs.cpio")),
        *("-append", "console=ttyS0 panic=-1 oops=panic loglevel=4 mitigations=off"),
        *("-chardev", f"file,id=console,path={work / 'console.log'}", "-serial", "chardev:console"),
        *("-device", "virtio-serial-pci", "-chardev", f"file,id=out,path={work / 'output'}"),
        *("-device", "virtserialport,chardev=out,name=out"),
        *("-fsdev", f"{fs},id=root,path=/,readonly=on"),
        *("-device", "virtio-9p-pci,fsdev=root,mount_tag=hostroot"),
        *("-fsdev", f"{fs},id=out,path={out}"),
        *("-device", "virtio-9p-pci,fsdev=out,mount_tag=out"),
    ]


def tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no console output)"


class Vm:
    """One VM run; ``start`` launches QEMU, ``wait`` streams output and returns the status.

    ``kill`` ends the QEMU process by the pid this object started (never by name).
    """

    def __init__(
        self, argv: list[str], out: Path, *, env: dict[str, str] | None = None, cpus: int = 2,
        mem: str = "3G", cwd: Path | None = None,
    ) -> None:  # fmt: skip
        self.kdir, self.release = kernel_dir()
        self.work = Path(tempfile.mkdtemp(prefix="grouper-vm-"))
        self.out = out.resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / STATUS).unlink(missing_ok=True)
        guest_env = {"PATH": GUEST_PATH, "HOME": "/root", "LANG": "C.UTF-8", "TERM": "dumb"}
        guest_env |= (env or {}) | {"GROUPER_VM_OUT": str(self.out)}
        where = (cwd or Path.cwd()).resolve()
        command = f"cd {shlex.quote(str(where))} && exec {shlex.join(argv)}"
        image = initramfs(self.kdir, self.release, command, guest_env, where)
        (self.work / "initramfs.cpio").write_bytes(image)
        self.qemu = qemu_argv(self.kdir, self.release, self.work, self.out, cpus, mem)
        self.proc: subprocess.Popen | None = None
        self.failure = ""  # why the VM ended before CMD did, with the console's last lines

    def start(self) -> Vm:
        (self.work / "output").touch()
        self.proc = subprocess.Popen(
            self.qemu, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        return self

    def wait(
        self, timeout: float, sink: object = sys.stdout, cut: Callable[[], bool] | None = None
    ) -> int:
        """Stream the command's output to ``sink`` until QEMU exits; CMD's exit status.

        ``cut``, polled with the output, ends the VM as the time bound does once it
        returns True (a caller that knows the run can no longer pass)."""
        assert self.proc is not None, "start() first"
        deadline = time.monotonic() + timeout
        with open(self.work / "output", "rb") as output:
            while self.proc.poll() is None and time.monotonic() < deadline:
                self._copy(output, sink)
                if cut is not None and cut():
                    deadline = 0.0  # ended as at the time bound
                    break
                time.sleep(0.2)
            timed_out = self.proc.poll() is None
            self.kill()
            self._copy(output, sink)
        qemu_said = self.proc.stdout.read().decode(errors="replace") if self.proc.stdout else ""
        status = self.out / STATUS
        if timed_out:
            why = "ended by its caller" if deadline == 0.0 else f"timed out after {timeout:.0f} s"
            self._report(why, qemu_said)
            return EXIT_TIMEOUT
        if not status.exists():
            self._report(f"VM ended (qemu status {self.proc.returncode}) before CMD", qemu_said)
            return EXIT_VM_DIED
        return int(status.read_text().strip())

    def _copy(self, output: object, sink: object) -> None:
        data = output.read()  # type: ignore[attr-defined]
        if data:
            sink.write(data.decode(errors="replace"))  # type: ignore[attr-defined]
            sink.flush()  # type: ignore[attr-defined]

    def _report(self, what: str, qemu_said: str) -> None:
        self.failure = (
            f"vm: {what}; qemu: {qemu_said.strip() or '-'}\n"
            f"vm: last console lines:\n{tail(self.work / 'console.log')}"
        )
        print(self.failure, file=sys.stderr)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # our QEMU, by the pid we started
            self.proc.wait(timeout=30)

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--timeout", type=float, default=600, help="seconds (default 600)")
    ap.add_argument("--out", type=Path, help="directory shared read-write (default: a temp one)")
    ap.add_argument("--env", action="append", default=[], help="K=V for CMD's environment")
    ap.add_argument("--cpus", type=int, default=min(os.cpu_count() or 1, 2))
    ap.add_argument("--mem", default="3G")
    ap.add_argument("command", nargs="+")
    args = ap.parse_args()
    env = dict(kv.split("=", 1) for kv in args.env)
    out = args.out or Path(tempfile.mkdtemp(prefix="grouper-vm-out-"))
    try:
        vm = Vm(args.command, out, env=env, cpus=args.cpus, mem=args.mem)
    except VmError as exc:
        print(f"vm: {exc}", file=sys.stderr)
        return 2
    try:
        return vm.start().wait(args.timeout)
    finally:
        vm.close()
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
