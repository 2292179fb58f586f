"""`inv build`: the suite image for x86_64, aarch64 and ppc64le from images/Dockerfile (docker SDK).

The build context is made here: the Dockerfile, the suite's sources (src/), requirements files
generated from pyproject.toml's pins (build/), and this machine's CA bundle (build/), which only
the Dockerfile's first stage reads. Labels carry the versions; the image ID (the digest of its
configuration, the same on every host that has the image) is what records carry.
"""

import json
import os
import platform
import shutil
import tempfile
import time
import tomllib
from pathlib import Path

from suite.errors import SuiteError
from suite.hosts.baseimage import ARCHES, make_base_image
from suite.hosts.description import BUILD_INFO, suite_version

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "images" / "Dockerfile"
SOURCES = ("lms", "suite", "tasks.py", "invoke.yaml", "pyproject.toml", "README.md")
LABEL = "org.lms-suite"
# ppc64le: PyPI has no ppc64le wheels for these (or for their compiled dependencies); Debian has.
FROM_DEBIAN_ON_PPC64LE = {
    "matplotlib": "python3-matplotlib",
    "psutil": "python3-psutil",
    "jinja2": "python3-jinja2",
    "paramiko": "python3-paramiko",
}
# aarch64: PyPI's CPU build of TensorFlow is the `tensorflow` wheel itself (manylinux_2_27_aarch64;
# there is no tensorflow-cpu for aarch64), the same version as x86_64's tensorflow-cpu
CPU_WHEEL_ON_AARCH64 = {"tensorflow-cpu": "tensorflow"}
CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")


def image_tag(arch: str, extras: str) -> str:
    return f"lms-suite:{arch}-{extras}"


def _pins() -> tuple[list[str], dict]:
    """The root's pins, less the lms library's distribution (lms/pyproject.toml): not on PyPI,
    the image has it from its sources (src/lms, on the image's PYTHONPATH like the suite)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    library = tomllib.loads((ROOT / "lms" / "pyproject.toml").read_text())["project"]["name"]
    base = [r for r in project["dependencies"] if _name(r) != library]
    return base, project["optional-dependencies"]


def _name(requirement: str) -> str:
    return requirement.split("==")[0].split("[")[0].strip().lower()


def _version(requirements: list[str], name: str) -> str | None:
    for requirement in requirements:
        if _name(requirement) == name and "==" in requirement:
            return requirement.split("==")[1]
    return None


def suite_commit() -> str:
    info = suite_version()
    return (info["commit"] or "unknown") + ("-modified" if info["dirty"] else "")


def ca_bundle() -> Path:
    import os

    for candidate in (os.environ.get("SSL_CERT_FILE"), os.environ.get("PIP_CERT"), *CA_BUNDLES):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise SuiteError("no CA bundle found (set SSL_CERT_FILE): the build's pip needs one")


def prepare_context(directory: Path, arch: str) -> dict:
    """Write the build context into `directory`; return the build arguments it implies."""
    shutil.copy(DOCKERFILE, directory / "Dockerfile")
    build = directory / "build"
    build.mkdir()
    shutil.copy(ca_bundle(), build / "ca-bundle.crt")
    base, extras = _pins()
    debian = []
    if arch == "ppc64le":
        debian = [
            FROM_DEBIAN_ON_PPC64LE[_name(r)] for r in base if _name(r) in FROM_DEBIAN_ON_PPC64LE
        ]
        base = [r for r in base if _name(r) not in FROM_DEBIAN_ON_PPC64LE]
    (build / "requirements-base.txt").write_text("\n".join(base) + "\n")
    for extra in ("cpu", "gpu"):
        pins = extras[extra]
        if arch == "aarch64":
            pins = [CPU_WHEEL_ON_AARCH64.get(_name(r), _name(r)) + r[len(_name(r)) :] for r in pins]
        (build / f"requirements-{extra}.txt").write_text("\n".join(pins) + "\n")
    src = directory / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")  # no pip leftovers
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy(path, src / name)
    info = suite_version()
    (src / BUILD_INFO).write_text(json.dumps({"commit": info["commit"], "dirty": info["dirty"]}))
    return {"DEBIAN_PACKAGES": " ".join(debian)}


def labels(arch: str, extras: str, base_image: str) -> dict:
    _, optional = _pins()
    pins = optional.get(extras, [])  # "none": no TensorFlow pins
    tensorflow = _version(pins, "tensorflow-cpu") or _version(pins, "tensorflow")
    return {
        f"{LABEL}.arch": arch,
        f"{LABEL}.base": base_image,
        f"{LABEL}.extras": extras,
        f"{LABEL}.tensorflow": tensorflow or "none (needs the Open-CE channel on ppc64le)",
        f"{LABEL}.keras": _version(pins, "keras") or "none",
        f"{LABEL}.python": "3.11 (Debian bookworm python3)",
        f"{LABEL}.cuda": "CUDA/cuDNN wheels of tensorflow[and-cuda]" if extras == "gpu" else "none",
        f"{LABEL}.suite-commit": suite_commit(),
        "org.opencontainers.image.title": "lms-suite",
        "org.opencontainers.image.source": "images/Dockerfile",
    }


def local_docker(timeout: int):
    """A client of this machine's Docker engine, or one SuiteError saying how to get one."""
    import docker

    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except docker.errors.DockerException:
        where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        raise SuiteError(
            f"no Docker engine answers at {where}: install and start one with "
            "`bash scripts/docker.sh` (Debian's docker.io; see README "
            '"Prerequisites")'
        ) from None
    return client


def build_images(arch: str, base: str, extras: str, echo=print) -> list[dict]:
    """`inv build`: the image of `arch` ("all": x86_64, aarch64 and ppc64le; ppc64le without
    TensorFlow, which PyPI lacks) on the local daemon. Returns each image's facts."""
    if arch == "native":  # what this machine runs without emulation
        arch = platform.machine()
        if arch not in ARCHES:
            raise SuiteError(
                f"this machine is {arch}; the suite builds images for "
                f"{', '.join(ARCHES)} (give --arch)"
            )
    arches = list(ARCHES) if arch == "all" else [arch]
    client = local_docker(timeout=600)
    return [
        build_image(client, name, base, "none" if name == "ppc64le" else extras, echo)
        for name in arches
    ]


def facts_line(facts: dict) -> str:
    return (
        f"image {facts['tag']} {facts['id']} {facts['size_bytes'] / 2**30:.2f} GiB "
        f"in {facts['seconds']:.0f}s"
    )


def build_image(client, arch: str, base: str, extras: str, echo=print) -> dict:
    """Build the suite image for `arch`; `base` is "local" or an image name. Returns its facts."""
    if arch not in ARCHES:
        raise SuiteError(f"--arch {arch!r}: choose native, {', '.join(ARCHES)} or all")
    if extras not in ("cpu", "gpu", "none"):
        raise SuiteError(f"--extras {extras!r}: choose cpu, gpu or none")
    if arch == "ppc64le" and extras != "none":
        raise SuiteError(
            "ppc64le: PyPI has no TensorFlow for ppc64le; use --extras none (and a "
            "--base with Open-CE's TensorFlow for a runnable image)"
        )
    base_image = make_base_image(client, arch, echo) if base == "local" else base
    tag = image_tag(arch, extras)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lms-build-") as tmp:
        context = Path(tmp)
        buildargs = {"BASE": base_image, "EXTRAS": extras, **prepare_context(context, arch)}
        echo(f"build {tag} FROM {base_image} ({ARCHES[arch][1]})")
        stream = client.api.build(
            path=str(context),
            tag=tag,
            buildargs=buildargs,
            labels=labels(arch, extras, base_image),
            network_mode="host",
            platform=ARCHES[arch][1],
            rm=True,
            forcerm=True,
            decode=True,
        )
        said = []
        for chunk in stream:
            if "stream" in chunk and chunk["stream"].strip():
                echo(f"    {chunk['stream'].rstrip()}")
                said += chunk["stream"].strip().splitlines()
            if "error" in chunk:  # one line: the step's own errors (apt's E:, pip's ERROR:)
                why = [x for x in said[-60:] if x.startswith(("E:", "ERROR:", "error:"))][-2:]
                raise SuiteError(
                    f"build of {tag} failed: {chunk['error'].strip()}"
                    + "".join(f" | {x[:200]}" for x in why)
                )
    image = client.images.get(tag)
    seconds = time.monotonic() - started
    echo(f"built {tag}: {image.id} ({image.attrs['Size'] / 2**30:.2f} GiB) in {seconds:.0f}s")
    return {
        "tag": tag,
        "id": image.id,
        "size_bytes": image.attrs["Size"],
        "seconds": seconds,
        "labels": image.labels,
    }
