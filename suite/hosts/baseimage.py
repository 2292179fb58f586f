"""Base images made here, for hosts that cannot pull from a registry (`inv build --base local`).

A Debian bookworm root filesystem from `debootstrap --variant=minbase` (ppc64el: `--foreign` and
the second stage under qemu-user-static), given this machine's apt sources (debootstrap writes
only `bookworm main`), then made an image (FROM scratch + ADD) for the right platform. Cached: an
image whose label holds the same recipe hash is reused, so the second build skips all of this.
"""

import hashlib
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from suite.errors import SuiteError

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# what every suite image needs from Debian: Python (the same 3.11 on both architectures),
# venv, certificates, psutil (so the host description runs in the bare base, under emulation too)
INCLUDE = ("python3", "python3-venv", "python3-pip", "python3-psutil", "ca-certificates")
ARCHES = {  # suite name -> (Debian architecture, docker platform, qemu binary)
    "x86_64": ("amd64", "linux/amd64", None),
    "ppc64le": ("ppc64el", "linux/ppc64le", "qemu-ppc64le"),
}
RECIPE_LABEL = "org.lms-suite.base-recipe"
HOST_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")


def base_tag(arch: str) -> str:
    return f"lms-suite-base:{SUITE}-{ARCHES[arch][0]}"


def recipe_hash(arch: str) -> str:
    sources = HOST_SOURCES.read_text() if HOST_SOURCES.exists() else ""
    recipe = {
        "suite": SUITE,
        "arch": arch,
        "include": INCLUDE,
        "mirror": MIRROR,
        "sources": sources,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def _run(command: list[str], echo, what: str) -> None:
    echo(f"    $ {' '.join(command)}")
    completed = subprocess.run(command, capture_output=True, text=True)
    if completed.returncode != 0:
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-5:]
        raise SuiteError(f"{what} failed (exit {completed.returncode}): " + " | ".join(tail))


def enable_emulation(arch: str, echo=print) -> None:
    """Register qemu-user-static for `arch` with binfmt_misc (needs root, as docker does)."""
    qemu = ARCHES[arch][2]
    if qemu is None:
        return
    if not shutil.which(f"{qemu}-static") and not Path(f"/usr/bin/{qemu}-static").exists():
        raise SuiteError(f"{qemu}-static is missing: apt-get install qemu-user-static")
    binfmt = Path("/proc/sys/fs/binfmt_misc")
    if not (binfmt / "register").exists():
        _run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(binfmt)], echo, "mount binfmt_misc")
    if not (binfmt / qemu).exists():
        _run(["update-binfmts", "--enable", qemu], echo, f"update-binfmts --enable {qemu}")


def make_base_image(client, arch: str, echo=print, force: bool = False) -> str:
    """The local base image for `arch` (made if missing or its recipe changed); its tag."""
    if arch not in ARCHES:
        raise SuiteError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHES)}")
    tag, recipe = base_tag(arch), recipe_hash(arch)
    if not force:
        try:
            image = client.images.get(tag)
            if image.labels.get(RECIPE_LABEL) == recipe:
                echo(f"base {tag}: cached ({image.id[7:19]})")
                return tag
        except Exception:  # docker.errors.ImageNotFound: make it
            pass
    if not shutil.which("debootstrap"):
        raise SuiteError("debootstrap is missing: apt-get install debootstrap")
    debian_arch, platform, qemu = ARCHES[arch]
    enable_emulation(arch, echo)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lms-base-") as tmp:
        root = Path(tmp) / "rootfs"
        command = ["debootstrap", "--variant=minbase", f"--arch={debian_arch}",
                   f"--include={','.join(INCLUDE)}"]  # fmt: skip
        if qemu:
            command.append("--foreign")
        echo(f"base {tag}: debootstrap {SUITE} {debian_arch} (a few minutes under emulation)")
        _run([*command, SUITE, str(root), MIRROR], echo, "debootstrap")
        if qemu:
            shutil.copy(f"/usr/bin/{qemu}-static", root / "usr" / "bin")
            _run(["chroot", str(root), "/debootstrap/debootstrap", "--second-stage"], echo,
                 "debootstrap --second-stage (under qemu)")  # fmt: skip
            (root / "usr" / "bin" / f"{qemu}-static").unlink()
        if HOST_SOURCES.exists():  # the mirrors (and suites) this machine uses
            (root / "etc/apt/sources.list").unlink(missing_ok=True)
            shutil.copy(HOST_SOURCES, root / "etc/apt/sources.list.d/debian.sources")
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (root / cache).glob("*"):
                if item.is_file():
                    item.unlink()
        context = Path(tmp) / "context"
        context.mkdir()
        tarball = context / "rootfs.tar"
        _run(["tar", "-C", str(root), "-cf", str(tarball), "."], echo, "tar rootfs")
        # FROM scratch + ADD, built for the target platform: unlike `docker import` (whose
        # --platform this daemon ignores), the image's metadata then names its architecture
        (context / "Dockerfile").write_text('FROM scratch\nADD rootfs.tar /\nCMD ["/bin/bash"]\n')
        size = tarball.stat().st_size / 2**20
        echo(f"base {tag}: image from the root filesystem ({size:.0f} MiB)")
        client.images.build(
            path=str(context),
            tag=tag,
            platform=platform,
            labels={RECIPE_LABEL: recipe},
            network_mode="none",  # FROM scratch + ADD: nothing to fetch
            pull=False,
            rm=True,
        )
    echo(f"base {tag}: made in {time.monotonic() - started:.0f}s")
    return tag
