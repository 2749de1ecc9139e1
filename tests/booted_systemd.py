"""A real systemd, booted as PID 1 of fresh namespaces, with tcl-tuned installed as the unit says.

Needs root, `unshare`/`nsenter`, Debian's /lib/systemd/systemd and a system Python 3.11; without
them `unavailable()` says why and the tests skip. Nothing reaches the host: the booted system's
root is an overlay over the host's `/` whose upper layer lives on a tmpfs mounted only inside
the new mount namespace; it has its own /proc (with /proc/sys read-only, so systemd-sysctl
cannot touch the host kernel), a read-only /sys, cgroup2 inside its cgroup namespace, a small
/dev, and private tmpfs /run and /tmp (the boot's `D /tmp` rule would otherwise empty the
host's). Killing its PID 1 ends everything, mounts included.

The install follows the unit's header comment step for step, with one change: the tests have no
network, so the venv gets its dependencies from this test run's environment (bound read-only
at /opt/tcl-tuned/deps, outside /home and /root, which ProtectHome hides) through a .pth file,
and the project is installed with `pip install --no-deps --no-index`.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SYSTEMD = Path("/lib/systemd/systemd")

# Units with no business in a test machine (timers, gettys, the time sync that needs a network).
MASKED = ("getty@tty1.service", "console-getty.service", "systemd-timesyncd.service", "apt-daily.timer",
          "apt-daily-upgrade.timer", "e2scrub_all.timer", "fstrim.timer", "systemd-tmpfiles-clean.timer",
          "man-db.timer", "dpkg-db-backup.timer", "logrotate.timer")

_BOOT = r"""
set -euo pipefail
T=$1 REPO=$2 DEPS=$3
mount -t tmpfs -o size=4g,mode=700 tmpfs "$T"
mkdir -p "$T/upper" "$T/work" "$T/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$T/upper,workdir=$T/work" "$T/root"
R=$T/root
mount -t proc proc "$R/proc"
mount --bind "$R/proc/sys" "$R/proc/sys" && mount -o remount,bind,ro "$R/proc/sys"
mount -t sysfs -o ro sysfs "$R/sys"
mount -t cgroup2 cgroup2 "$R/sys/fs/cgroup"
mount -t tmpfs -o mode=755,size=16m tmpfs "$R/dev"
for node in null zero full random urandom tty; do touch "$R/dev/$node"; mount --bind "/dev/$node" "$R/dev/$node"; done
mkdir -p "$R/dev/pts" "$R/dev/shm" && mount -t devpts -o newinstance,ptmxmode=0666 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
mount -t tmpfs tmpfs "$R/run" && mount -t tmpfs tmpfs "$R/tmp"
# the checkout and the dependencies, read-only, wherever they live on the host
mkdir -p "$R$REPO" "$R/opt/tcl-tuned/deps"
mount --bind "$REPO" "$R$REPO" && mount -o remount,bind,ro "$R$REPO"
mount --bind "$DEPS" "$R/opt/tcl-tuned/deps" && mount -o remount,bind,ro "$R/opt/tcl-tuned/deps"
for unit in __MASKED__; do ln -sf /dev/null "$R/etc/systemd/system/$unit"; done
hostname tcl-tuned-test
cd "$R" && mkdir -p oldroot && pivot_root . oldroot && umount -l /oldroot && rmdir /oldroot
export container=tcl-tuned-test
# basic.target: the system's own services (journald, sysusers, tmpfiles, dbus) and nothing the
# host happens to have installed (databases, cron); the test starts tcl-tuned itself.
exec /lib/systemd/systemd --unit=basic.target
"""


def system_python() -> Path | None:
    """A Python 3.11 outside /home and /root (ProtectHome would hide it from the service)."""
    for candidate in ("/usr/bin/python3.11", "/usr/local/bin/python3.11", shutil.which("python3.11")):
        if candidate and Path(candidate).is_file() and not str(Path(candidate).resolve()).startswith(("/home", "/root")):
            return Path(candidate)
    return None


def unavailable() -> str | None:
    """Why a systemd cannot be booted here, or None."""
    if os.geteuid() != 0:
        return "not root: cannot create the namespaces"
    missing = [tool for tool in ("unshare", "nsenter") if shutil.which(tool) is None]
    if missing or not SYSTEMD.is_file():
        return f"missing {', '.join(missing) or SYSTEMD} (Debian's util-linux and systemd packages)"
    if system_python() is None:
        return "no system python3.11 outside /home and /root"
    # The namespaces and the mounts the boot makes first (a container may allow one but not the other)
    with tempfile.TemporaryDirectory(prefix="tcl-tuned-probe-") as scratch:
        probe = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount", "--uts", "--ipc", "--net", "--cgroup", "--propagation", "private",
             "bash", "-euc", 'mount -t tmpfs tmpfs "$1" && mkdir "$1/u" "$1/w" "$1/r" && '
             'mount -t overlay overlay -o "lowerdir=/,upperdir=$1/u,workdir=$1/w" "$1/r" && '
             'mount -t proc proc "$1/r/proc" && mount -t sysfs -o ro sysfs "$1/r/sys" && '
             'mount -t cgroup2 cgroup2 "$1/r/sys/fs/cgroup"', "probe", scratch],
            capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return f"cannot create the namespaces and mounts: {probe.stderr.strip()[-300:]}"
    return None


class BootedSystem:
    """`with BootedSystem() as system: system.run("systemctl", ...)`."""

    def __init__(self) -> None:
        self.pid: int | None = None  # the booted systemd, as the host sees it
        self._launcher: subprocess.Popen | None = None
        self._scratch = Path(tempfile.mkdtemp(prefix="tcl-tuned-systemd-"))

    def __enter__(self) -> BootedSystem:
        script = self._scratch / "boot.sh"
        script.write_text(_BOOT.replace("__MASKED__", " ".join(MASKED)))
        deps = Path(site.getsitepackages()[0])
        (self._scratch / "mnt").mkdir()
        self._launcher = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount", "--uts", "--ipc", "--net", "--cgroup", "--propagation", "private",
             "bash", str(script), str(self._scratch / "mnt"), str(REPO), str(deps)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        try:
            self.pid = self._wait_for_pid1()
            self._wait_until_running()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_for_pid1(self, timeout: float = 30) -> int:
        import psutil

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._launcher.poll() is not None:
                raise RuntimeError(f"the boot failed: {self._launcher.stderr.read().decode().strip()[-500:]}")
            for child in psutil.Process(self._launcher.pid).children(recursive=True):
                try:
                    if child.cmdline()[:1] == [str(SYSTEMD)]:
                        return child.pid
                except psutil.Error:
                    continue
            time.sleep(0.1)
        raise RuntimeError("systemd did not start within 30 s")

    def _wait_until_running(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.run("systemctl", "is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded"):
                return
            time.sleep(0.2)
        raise RuntimeError(f"the booted system is {state!r} after {timeout} s")

    def run(self, *command: str, check: bool = True, timeout: float = 120, input: str | bytes | None = None):
        """Run `command` inside the booted system (all its namespaces, its root), as root."""
        done = subprocess.run(["nsenter", "-t", str(self.pid), "-m", "-u", "-i", "-n", "-p", "-C", "-r", "-w", *command],
                              capture_output=True, timeout=timeout, input=input,
                              text=not isinstance(input, bytes))
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr!s:.2000}")
        return done

    def shell(self, script: str, **kwargs):
        return self.run("bash", "-euo", "pipefail", "-c", textwrap.dedent(script), **kwargs)

    def install_tcl_tuned(self) -> None:
        """The unit's header comment, step by step (the venv's dependencies: see the module docstring)."""
        python = system_python()
        self.shell(f"""
            {python} -m venv /opt/tcl-tuned/.venv
            echo /opt/tcl-tuned/deps > "$(/opt/tcl-tuned/.venv/bin/python -c 'import site; print(site.getsitepackages()[0])')/tcl-tuned-deps.pth"
            mkdir /tmp/src && cd {REPO} && cp -r pyproject.toml README.md daemon deploy tcl_core systemd /tmp/src/
            # the build takes setuptools from the dependencies too (the venv's own is too old to build wheels)
            PYTHONPATH=/opt/tcl-tuned/deps /opt/tcl-tuned/.venv/bin/pip install --quiet --no-deps --no-index \
                --no-build-isolation /tmp/src
            install -D -m 0644 /tmp/src/systemd/tcl-tuned.sysusers /etc/sysusers.d/tcl-tuned.conf && systemd-sysusers
            install -d -o root -g tcl-tuned -m 2775 /srv/tcl-tuned/watch
            install -d -o tcl-tuned -g tcl-tuned -m 2750 /srv/tcl-tuned/out
            install -D -m 0644 /tmp/src/systemd/config.toml /etc/tcl-tuned/config.toml
            cp /tmp/src/systemd/tcl-tuned.service /etc/systemd/system/ && systemctl daemon-reload
        """, timeout=600)

    def __exit__(self, *exc) -> None:
        if self.pid is not None:
            self.run("systemctl", "poweroff", "--no-block", check=False, timeout=30)
        if self._launcher is not None:
            try:
                self._launcher.wait(timeout=20)  # unshare returns 130 after a poweroff: normal in a PID namespace
            except subprocess.TimeoutExpired:
                if self.pid is not None:  # SIGKILL to its PID 1 ends the whole namespace, mounts included
                    subprocess.run(["kill", "-9", str(self.pid)], check=False)
                self._launcher.kill()
                self._launcher.wait(timeout=30)
        shutil.rmtree(self._scratch, ignore_errors=True)
