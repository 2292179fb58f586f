"""A heartbeat file: proof, readable from another machine, that the run waiting for a job lives.

A Slurm job outlives the `inv run` that submitted it unless told otherwise: SIGINT and SIGTERM
cancel it (suite/dispatch/slurm.py), but a SIGKILL of the run leaves it training until its time
limit. The run touches a file in the job's directory (on the filesystem the nodes share) every
`EVERY_S` seconds while it waits; the job script (`watch_script`) ends the job when the file has
not changed for `STALE_S` seconds. Why a file and not the submitter's pid: the job may run on
another node, where that pid means nothing. Why "unchanged for", measured by the node's own
clock, and not the file's age: the node's and the submitter's clocks may differ.
"""

import shlex
import threading
from pathlib import Path

EVERY_S = 5.0
STALE_S = 30  # six missed beats: a busy filesystem is not a dead run


class Heartbeat:
    """Inside `with`: `path` is touched every `every_s` seconds by a daemon thread (which dies
    with the process, whatever kills it); removed on the way out."""

    def __init__(self, path: Path, every_s: float = EVERY_S):
        self.path, self.every_s = Path(path), every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat {path}", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.every_s):
            self.path.touch()

    def __enter__(self) -> "Heartbeat":
        self.path.touch()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.path.unlink(missing_ok=True)


def watch_script(command: str, heartbeat: Path, scratch: Path, stale_s: int = STALE_S) -> str:
    """Bash that runs `command` in the background and waits for it; if `heartbeat` stays
    unchanged for `stale_s` seconds meanwhile, it stops `command` (SIGTERM: srun passes it to
    its tasks), removes `scratch` and exits 143. Otherwise it exits with `command`'s code."""
    beat, gone = shlex.quote(str(heartbeat)), shlex.quote(str(scratch))
    return f"""{command} &
step=$!
last=$(stat -c %Y {beat} 2>/dev/null)
since=$SECONDS
while kill -0 "$step" 2>/dev/null; do
  sleep 1
  now=$(stat -c %Y {beat} 2>/dev/null)
  if [ "$now" != "$last" ]; then
    last=$now
    since=$SECONDS
  elif [ $((SECONDS - since)) -ge {stale_s} ]; then
    echo "lms-suite: the run that submitted this job is gone ({beat} unchanged for" \
      "{stale_s}s): ending the job" >&2
    kill -TERM "$step"
    wait "$step"
    rm -rf {gone}
    exit 143
  fi
done
wait "$step"
"""
