"""Builds the images the container tests use, in the background of `inv test` (suite/selftest.py
starts it, holding PREBUILD_LOCK until it ends): the x86_64 suite image from the local base, the
ppc64le base and the aarch64 suite image from the local arm64 base, as the tests' fixtures build
them (docker_fixtures.py, test_containers.py). From cold Docker images these are minutes of
debootstrap, pip and qemu-user, mostly downloads and one emulated core: run beside the main
session's first tests, they are cached by the time the container tests come, which wait for the
lock (docker_fixtures.client) and then find them built. A failure here costs nothing but time:
the fixtures build again and fail with the build's own error.

Usage: _prebuild_images.py (one line per image built, and what failed, on stdout)."""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import docker  # noqa: E402

from suite.hosts.baseimage import make_base_image  # noqa: E402
from suite.hosts.images import build_image  # noqa: E402


def quiet(_line):
    pass


STEPS = {
    "x86_64 image": lambda client: build_image(client, "x86_64", "local", "cpu", echo=quiet),
    "ppc64le base": lambda client: make_base_image(client, "ppc64le", echo=quiet),
    "aarch64 image": lambda client: build_image(client, "aarch64", "local", "cpu", echo=quiet),
}


def main() -> int:
    client = docker.from_env(timeout=900)
    failed = 0
    for name, step in STEPS.items():
        started = time.monotonic()
        try:
            step(client)
        except Exception as error:  # the tests build it again and say why it failed
            failed += 1
            print(f"{name}: failed: {type(error).__name__}: {error}", flush=True)
            continue
        print(f"{name}: built in {time.monotonic() - started:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
