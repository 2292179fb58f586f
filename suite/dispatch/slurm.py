"""A Slurm cluster as a host: each trial process becomes a job.

A host of invoke.yaml with `scheduler: slurm` (partition, account, time_limit, python: the
interpreter on the nodes with the suite installed, workdir: a directory the nodes share) runs a
spec through the same runner as this machine, with the trial's process replaced by a job:

- the job is submitted and its state read until it ends (never `sbatch --wait`: a job that
  asks for more than the partition has waits forever; it is cancelled and the trial recorded
  `skipped` with Slurm's reason);
- the job runs `srun python -m suite.running.trial_worker` with `nodes x gpus` tasks (ranks in
  blocks; a task that fails ends the others); a trial of several replicas finds its cluster from
  Slurm's step variables, each task's port by its global rank (suite/running/slurm_cluster.py),
  and each task writes its worker's result, with the node it ran on;
- the job's time limit is the trial's timeout; its output is the trial's log;
- the result comes back through `workdir` into `results/` like any host's records (with
  `metrics.slurm_job`); a job that fails, is cancelled or times out without a result is recorded
  with Slurm's state and reason (`scontrol show job`), never lost.

The host description is captured by a job too, so a record describes the node it ran on.

Stopping: when the run is interrupted (SIGINT, SIGTERM), every job it waits for is cancelled
(`scancel`, then its leaving the queue awaited for up to `CANCEL_WAIT_S`) and the trial raises
`TrialStopped` naming the job, without a record: a rerun redoes it. The main thread waits for
one job itself; jobs waited for by threads (`max_jobs` > 1) are cancelled by `stop()`, which the
runner calls from the main thread, the only one signals reach. A SIGKILL of the run cannot be
caught: while it waits, the run touches a heartbeat file in the job's directory, and the job
script ends the job when the file stops changing (suite/running/heartbeat.py), on whichever node
it runs. A job's directory (`workdir`/jobs/ID: parameters, result, heartbeat) is removed once the
trial's result is read; the job's log is the trial's log, kept under results/logs.
"""

import dataclasses
import json
import math
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from suite.dispatch.base import Host, SpecRun
from suite.environment import child_environment
from suite.errors import SuiteError
from suite.records import Metrics, TrialResult, read_result
from suite.running.heartbeat import Heartbeat, watch_script
from suite.running.interrupts import RunInterrupted
from suite.running.replicas import merge
from suite.running.runner import run_spec, summary_lines
from suite.running.slurm_cluster import PORT_BASE, PORT_BASE_VARIABLE, PORT_SPAN
from suite.running.trial import TrialStopped, interrupt_signal
from suite.running.trial_worker import params_text
from suite.specs.model import TrialParams

KNOWN_KEYS = {
    "scheduler", "partition", "account", "time_limit", "python", "workdir", "max_jobs",
    "port_base", "request_gpus",
}  # fmt: skip
STATE_OUTCOMES = {"TIMEOUT": "timed_out", "DEADLINE": "timed_out", "OUT_OF_MEMORY": "crashed"}
# states of a job that has not ended (squeue's long names)
ACTIVE_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED",
                 "RESIZING", "SIGNALING", "STAGE_OUT", "REQUEUE_HOLD", "REQUEUE_FED"}  # fmt: skip
# reasons a pending job gives when the partition, its limits or the account can never run it
# (seen here: a two-node trial on a one-node partition waits with PartitionConfig, then
# PartitionNodeLimit, four tasks on a two-CPU node with PartitionConfig, forever: sbatch
# accepts both)
NEVER_STARTS_REASONS = {"PartitionNodeLimit", "PartitionTimeLimit", "PartitionConfig",
                        "BadConstraints", "InvalidAccount", "InvalidQOS", "AccountNotAllowed",
                        "QOSNotAllowed", "QOSMaxNodePerJobLimit", "QOSMaxCpuPerJobLimit",
                        "QOSMaxGRESPerJob", "QOSMaxWallDurationPerJobLimit"}  # fmt: skip
# sbatch's words when it refuses outright what no node of the partition has
NEVER_FITS_TEXTS = (
    "Requested node configuration is not available",
    "Node count specification invalid",
)
POLL_FIRST_S, POLL_MAX_S = 0.5, 10.0  # how often a job's state is read: sooner at first
CANCEL_WAIT_S = 30.0  # the longest an interrupted run waits for its cancelled jobs to leave


class JobNeverStarts(Exception):
    """The cluster cannot run a job as asked (the trial wants more nodes or devices than it has)."""

    def __init__(self, job: str | None, reason: str):
        super().__init__(reason)
        self.job, self.reason = job, reason


@dataclass
class SlurmHost(Host):
    kind = "slurm"
    name: str
    partition: str | None = None
    account: str | None = None
    time_limit: str | None = None  # the longest a job may ask for; a trial asks its timeout
    python: str = sys.executable
    workdir: str | None = None  # shared by the nodes; default: the results directory
    max_jobs: int = 1  # a spec's trials (not its sweeps' or searches') submitted at once
    # the first port of the workers' TensorFlow servers (suite/running/slurm_cluster.py)
    port_base: int = PORT_BASE
    request_gpus: bool = False  # ask Slurm for the trial's GPUs (--gpus-per-node) as gres
    # the run's state, not configuration: the jobs waited for, and whether the run is stopping
    _jobs: set = field(default_factory=set, init=False, repr=False, compare=False)
    _stopping: threading.Event = field(
        default_factory=threading.Event, init=False, repr=False, compare=False
    )
    _stop_signal: str = field(default="SIGINT", init=False, repr=False, compare=False)

    def __post_init__(self):
        if (
            isinstance(self.max_jobs, bool)
            or not isinstance(self.max_jobs, int)
            or self.max_jobs < 1
        ):
            raise SuiteError(
                f"invoke.yaml suite.hosts.{self.name}.max_jobs: {self.max_jobs!r}; "
                "an integer >= 1 (trials submitted at once)"
            )
        top = 65535 - PORT_SPAN
        port = self.port_base
        if isinstance(port, bool) or not isinstance(port, int) or not 1024 <= port <= top:
            self._refuse("port_base", port, f"an integer from 1024 to {top}")
        if not isinstance(self.request_gpus, bool):
            self._refuse("request_gpus", self.request_gpus, "true or false")

    def _refuse(self, key: str, value, allowed: str):
        raise SuiteError(f"invoke.yaml suite.hosts.{self.name}.{key}: {value!r}; {allowed}")

    @classmethod
    def from_config(cls, name: str, settings: dict, default_image: str = "") -> "SlurmHost":
        """`default_image` is not used: the nodes run the suite's environment at `python`."""
        unknown = sorted(set(settings) - KNOWN_KEYS)
        if unknown:
            raise SuiteError(
                f"invoke.yaml suite.hosts.{name}: unknown key(s) {unknown}; a Slurm "
                f"host takes {', '.join(sorted(KNOWN_KEYS))}"
            )
        values = {k: settings[k] for k in KNOWN_KEYS - {"scheduler"} if settings.get(k) is not None}
        return cls(name, **values)

    def run(self, job: SpecRun, round_: int | None = None) -> None:
        """The spec through this process's runner, each trial process a job on the cluster.
        `--host-disk DIR` reaches the jobs as this machine's path, as it is: the nodes are
        expected to share this filesystem (as they do here, and as `workdir` must be), and each
        job's trial checks it again when its LMS starts (lms.Options: it exists, is writable)."""
        job.echo(f"running {job.spec.name} as Slurm jobs on {self.name}")
        where = {"run_id": job.run_id, "round_": round_, "place": self, "host_disk": job.host_disk}
        summary = run_spec(job.spec, job.results, self.name, job.force, job.echo, **where)
        job.echo("\n".join(summary_lines(summary)))

    def _sbatch_options(
        self, minutes: int, nodes: int = 1, tasks_per_node: int = 1, gpus: int = 0
    ) -> list:
        # --no-requeue: a job whose node failed ends NODE_FAIL and is recorded, rather than
        # being queued again by Slurm behind the run's back (JobRequeue defaults to yes)
        options = [
            f"--nodes={nodes}",
            f"--ntasks-per-node={tasks_per_node}",
            f"--time={minutes}",
            "--no-requeue",
        ]
        options += [f"--gpus-per-node={gpus}"] if gpus and self.request_gpus else []
        options += [f"--partition={self.partition}"] if self.partition else []
        options += [f"--account={self.account}"] if self.account else []
        return options

    def _submit(self, script: str, options: list, env: dict, output: Path) -> str:
        """The id of the submitted job (`sbatch --parsable`); an error if sbatch refused it."""
        output.parent.mkdir(parents=True, exist_ok=True)
        command = ["sbatch", "--parsable", f"--output={output}", *options]
        try:
            completed = subprocess.run(
                command, input=script, capture_output=True, text=True, env=env
            )
        except FileNotFoundError:
            hint = "install Slurm's client commands (on this machine: bash scripts/slurm.sh)"
            raise SuiteError(f"host {self.name}: sbatch not found: {hint}") from None
        job = completed.stdout.strip().split(";")[0]
        if completed.returncode != 0 or not job:
            refusal = completed.stderr.strip()[:500]
            if any(text in refusal for text in NEVER_FITS_TEXTS):
                raise JobNeverStarts(None, refusal)
            raise SuiteError(f"host {self.name}: sbatch refused the job: {refusal}")
        return job

    def job_state(self, job: str) -> tuple[str, str]:
        """(state, reason) of a job from `scontrol show job`, or ("UNKNOWN", why)."""
        return self._state_of(self._job_fields(job))

    @staticmethod
    def _state_of(fields: dict) -> tuple[str, str]:
        if "JobState" not in fields:
            return "UNKNOWN", fields.get("error") or "job no longer known to slurmctld"
        return fields["JobState"], fields.get("Reason", "None")

    @staticmethod
    def _job_fields(job: str) -> dict:
        completed = subprocess.run(
            ["scontrol", "show", "job", "-o", job], capture_output=True, text=True
        )
        fields = dict(re.findall(r"(\w+)=(\S*)", completed.stdout))
        if not fields:
            fields["error"] = completed.stderr.strip()
        return fields

    def _wait(self, job: str) -> int:
        """Wait for `job` to end; its exit code (scontrol's ExitCode), -1 when unknown. A job
        that waits for a reason time does not cure (the partition has fewer nodes or CPUs than
        it asks) is cancelled: JobNeverStarts. A job may wait in the queue for any other
        reason as long as the cluster keeps it waiting: that is what a queue is for.
        Interrupted (a signal here, or `stop()` from the main thread): the job is cancelled and
        `TrialStopped` names it."""
        self._jobs.add(job)
        try:
            return self._poll(job)
        except BaseException as error:  # interrupted or failed here: the job must not live on
            self._cancel(job)
            if isinstance(error, RunInterrupted | KeyboardInterrupt):
                raise TrialStopped(interrupt_signal(error), f"slurm job {job} cancelled") from None
            raise
        finally:
            self._jobs.discard(job)

    def _cancel(self, job: str) -> None:
        """scancel `job`, then wait (up to CANCEL_WAIT_S) until squeue no longer lists it: its
        processes are gone and nothing writes into its directory any more."""
        subprocess.run(["scancel", job], capture_output=True)
        deadline = time.monotonic() + CANCEL_WAIT_S
        while time.monotonic() < deadline:
            queued = subprocess.run(
                ["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True
            )
            if not queued.stdout.strip():
                return
            time.sleep(0.5)

    def stop(self, signal_name: str) -> None:
        """The run is interrupted: cancel every job it waits for now; the threads waiting for
        them raise `TrialStopped` and submit nothing more."""
        self._stop_signal = signal_name
        self._stopping.set()
        for job in list(self._jobs):
            subprocess.run(["scancel", job], capture_output=True)

    def _poll(self, job: str) -> int:
        pause, strikes = POLL_FIRST_S, 0
        while True:
            fields = self._job_fields(job)
            state = fields.get("JobState")
            if state is None:  # forgotten (MinJobAge passed): ended, exit code unknown
                return -1
            never = state == "PENDING" and fields.get("Reason") in NEVER_STARTS_REASONS
            strikes = strikes + 1 if never else 0
            if strikes == 2:  # twice in a row: not a passing state of the scheduler's
                raise JobNeverStarts(job, fields["Reason"])
            if state not in ACTIVE_STATES:
                code = fields.get("ExitCode", "").split(":")[0]
                return int(code) if code.isdigit() else -1
            if self._stopping.wait(pause):  # stop() from the main thread
                raise RunInterrupted(self._stop_signal)
            pause = min(pause * 1.5, POLL_MAX_S)

    def _scratch(self, results_dir: Path) -> Path:
        root = Path(self.workdir) if self.workdir else results_dir / "slurm"
        scratch = root / "jobs" / uuid.uuid4().hex[:12]
        scratch.mkdir(parents=True)
        return scratch

    def _script(self, command: str, scratch: Path) -> str:
        """The job script: `command` (an srun), ended early if the run that waits for it is
        gone (the heartbeat in `scratch` stops: suite/running/heartbeat.py)."""
        return "#!/bin/bash\n" + watch_script(command, scratch / "heartbeat", scratch)

    def run_trial(
        self,
        params: TrialParams,
        timeout_s: float,
        log_path: Path,
        extra_env: dict | None = None,
        host_disk: Path | None = None,
    ) -> TrialResult:
        """One trial process as a job; the same TrialResult a local process gives."""
        if self._stopping.is_set():  # a thread that had not submitted its job when stopped
            raise TrialStopped(self._stop_signal, "no job submitted")
        scratch = self._scratch(log_path.parents[2])
        try:
            (scratch / "params.json").write_text(params_text(params, host_disk))
            return self._run_job(params, timeout_s, log_path, extra_env, scratch)
        finally:  # read or abandoned: parameters, result and heartbeat are no longer needed
            shutil.rmtree(scratch, ignore_errors=True)

    def _run_job(
        self,
        params: TrialParams,
        timeout_s: float,
        log_path: Path,
        extra_env: dict | None,
        scratch: Path,
    ) -> TrialResult:
        started = time.perf_counter()
        # params.json: run_trial's (the parameters, and the disk lent to LMS)
        params_file, result_file = scratch / "params.json", scratch / "result.json"
        tasks = params.replicas
        target = shlex.quote(str(result_file))
        if tasks > 1:  # each task writes its worker's result (merged below)
            target += ".worker$SLURM_PROCID"
        worker = (
            f"{shlex.quote(self.python)} -m suite.running.trial_worker "
            f"{shlex.quote(str(params_file))} {target}"
        )
        # ranks in blocks, as suite/running/slurm_cluster.py reads them; a worker that fails
        # (its port taken, a crash) ends the others rather than leave them waiting for it
        srun = "srun --distribution=block --kill-on-bad-exit=1"
        script = self._script(f"{srun} bash -c {shlex.quote(worker)}", scratch)
        minutes = max(1, math.ceil(timeout_s / 60))
        options = self._sbatch_options(minutes, params.nodes, params.gpus, params.gpus)
        options.append(f"--job-name=lms-{params.hash}")
        try:
            with Heartbeat(scratch / "heartbeat"):
                environment = child_environment(extra_env)
                environment[PORT_BASE_VARIABLE] = str(self.port_base)
                job = self._submit(script, options, environment, log_path)
                code = self._wait(job)
        except JobNeverStarts as never:
            where = f"slurm job {never.job} was cancelled" if never.job else "sbatch refused it"
            error = (
                f"{where}: the cluster cannot run {params.nodes} node(s) x {params.gpus} "
                f"task(s) as asked ({never.reason})"
            )
            metrics = Metrics(slurm_job=never.job) if never.job else None
            return TrialResult("skipped", metrics, error, None, time.perf_counter() - started)
        wall = time.perf_counter() - started
        if tasks > 1:
            workers = [Path(f"{result_file}.worker{i}") for i in range(tasks)]
            found = [read_result(p) for p in workers]
            result = merge(found, [None] * tasks) if any(found) else None
        else:
            result = read_result(result_file)
        fields = self._job_fields(job)
        state, reason = self._state_of(fields)
        slurms = f"slurm job {job} ended {state} (reason: {reason}; exit code {code})"
        if state == "NODE_FAIL":  # a node died: Slurm's account first, the workers' after it
            slurms += f"; {self._failed_nodes(fields.get('NodeList', ''))}"
            error = slurms + (f"; {result.error}" if result and result.error else "")
            metrics = (result and result.metrics) or Metrics()
            metrics = dataclasses.replace(metrics, slurm_job=job)
            return TrialResult("crashed", metrics, error[:4000], result and result.device, wall)
        if result is not None:  # the trial's own account of how it ended
            metrics = dataclasses.replace(result.metrics or Metrics(), slurm_job=job)
            error = result.error if result.ok else f"slurm job {job}: {result.error}"
            return dataclasses.replace(result, metrics=metrics, error=error, wall_s=wall)
        outcome = STATE_OUTCOMES.get(state, "crashed")  # no result: Slurm's account
        return TrialResult(outcome, Metrics(slurm_job=job), slurms, None, wall)

    @staticmethod
    def _failed_nodes(nodes: str) -> str:
        """Which of a job's nodes are down and why (`sinfo -R`), e.g. "node2: Not responding"."""
        listed = subprocess.run(
            ["sinfo", "-h", "-R", "-n", nodes, "-o", "%N: %E"], capture_output=True, text=True
        )
        down = "; ".join(listed.stdout.split("\n")).strip("; ")
        return f"down: {down}" if down else f"no node of {nodes or 'the job'} is down now"

    def describe(self, results_dir: Path) -> dict:
        """The description of a node of the cluster, captured by a job there."""
        scratch = self._scratch(Path(results_dir))
        output = scratch / "description.json"
        code = (
            "import json, sys; from suite.hosts.description import describe_host; "
            f"open({str(output)!r}, 'w').write(json.dumps(describe_host()))"
        )
        script = self._script(f"srun {shlex.quote(self.python)} -c {shlex.quote(code)}", scratch)
        try:
            with Heartbeat(scratch / "heartbeat"):
                options, log = self._sbatch_options(5), scratch / "description.log"
                job = self._submit(script, options, child_environment(), log)
                self._wait(job)
        except (RunInterrupted, KeyboardInterrupt):
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        except JobNeverStarts as never:
            raise SuiteError(
                f"host {self.name}: the cluster cannot run the job that describes "
                f"a node (1 node, 1 task, 5 minutes): {never.reason}"
            ) from None
        if not output.exists():
            state, reason = self.job_state(job)
            raise SuiteError(
                f"host {self.name}: the description job {job} ended {state} "
                f"({reason}); log: {scratch / 'description.log'}"
            )
        description = json.loads(output.read_text())
        shutil.rmtree(scratch, ignore_errors=True)  # kept above only for its log
        return description
