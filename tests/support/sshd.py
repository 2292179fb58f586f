"""A real sshd on 127.0.0.1 for tests of `ssh://` Docker hosts: its own host key, one client key,
and a HOME whose ~/.ssh has the client's config and a known_hosts entry for it."""

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class SSHServer:
    port: int
    home: Path  # set HOME to this for the client side
    process: subprocess.Popen
    host_public_key: str

    @property
    def url(self) -> str:
        return f"ssh://root@127.0.0.1:{self.port}"

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sshd(directory: Path, known: bool = True) -> SSHServer:
    """Start sshd; with `known` False the client's known_hosts lacks its key."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    directory.mkdir(parents=True, exist_ok=True)
    host_key, client_key = directory / "host_ed25519", directory / "client_ed25519"
    for key in (host_key, client_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    authorized = directory / "authorized_keys"
    shutil.copy(f"{client_key}.pub", authorized)
    authorized.chmod(0o600)
    port = _free_port()
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
    config = directory / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {authorized}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nUsePAM no\nStrictModes no\n"
        f"PidFile {directory / 'sshd.pid'}\n"
        "SetEnv PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin\n"
    )
    process = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL)
    home = directory / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host 127.0.0.1\n  IdentityFile {client_key}\n  User root\n"
    )
    public = Path(f"{host_key}.pub").read_text().split()
    if known:
        (home / ".ssh" / "known_hosts").write_text(f"[127.0.0.1]:{port} {public[0]} {public[1]}\n")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return SSHServer(port, home, process, " ".join(public[:2]))
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("sshd did not start")


__all__ = ["SSHServer", "start_sshd"]
