"""Plan identity: lms's plan reports for a fixed set of cases, written to a directory, and two
such directories compared report by report.

Why (issue 42 item 7): lms is being restructured (modules moved into subpackages, the planning
pipeline rewritten) and its behaviour must not change: the plan reports before and after must be
byte-identical. This script plans every case with the `lms` it finds on its `--root` (a
checkout: `git worktree add /work/baseline <commit>` for the code before), through the public API
only (`lms.LMS(...).plan_only`, `PlanReport.to_dict()`), so that it runs unchanged on both.

Cases: the suite's four workloads (built by suite.workloads, planned as `inv plan` does: the
training step traced from TensorSpecs) and three models the suite does not have (MobileNetV2, a
dilated Conv1D audio stack, a GRU + LSTM), small sizes, each at three device memories: "roomy"
(no LMS needed), "tight" (swapping alone, split "off") and "split" (under the largest op's
footprint, split "auto": ops split into pieces); and GPU targets planned from the CPU:
mechanism "device-copy" (a GPU of that memory on another host: the GPU's kernels and swaps) and
"two-device" (the GPU path on two logical CPU devices). The suite's workloads come from the same
root as lms: a change to suite/workloads shows as a difference too.

Each case runs in a fresh process (Keras names layers by a per-process counter, and op names
follow), host memory not checked (`host_memory=None`: what the machine has free varies), and its
report is written as <case>.json, sorted keys, indent 1, without the timings: the keys holding
seconds (`timings_s`: trace_s, analysis_s, tune_s, rewrite_s; any key ending in "_s") vary run
to run. Nothing else needed normalising: two writes of all 25 cases with the same code (at
6784f8b) gave identical reports. A write takes 8-10 minutes on two cores (DeepLabV3+'s split
case alone 50-100 s), each case a fresh TensorFlow. The kernels (oneDNN or Eigen:
TF_ENABLE_ONEDNN_OPTS) change the convolutions' temporaries the plan counts, so compare
directories written with the same kernels.

    python benchmarks/plan_identity.py write /work/identity/before --root /work/baseline
    TF_ENABLE_ONEDNN_OPTS=0 python benchmarks/plan_identity.py write DIR ...  # Eigen's kernels
    python benchmarks/plan_identity.py write /work/identity/after            # this checkout
    python benchmarks/plan_identity.py compare /work/identity/before /work/identity/after
    python benchmarks/plan_identity.py write DIR --case resnet50-tight --case recurrent-split
    python benchmarks/plan_identity.py compare DIR_A DIR_B --case resnet50-tight  # those only
"""

import argparse
import difflib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MiB = 2**20
# model: (resolution or sequence length, batch); the suite's workloads by their suite names
MODELS = {
    "googlenet": (512, 2),
    "deeplabv3plus": (512, 1),
    "resnet50": (512, 2),
    "unet3d": (64, 1),
    "mobilenetv2": (512, 2),
    "dilated-audio": (65536, 2),
    "recurrent": (512, 64),
}
SUITE = ("googlenet", "deeplabv3plus", "resnet50", "unet3d")
# model: device memory (MiB) of its (roomy, tight, split) cases
MEMORY = {
    "googlenet": (400, 260, 140),
    "deeplabv3plus": (2400, 1200, 450),
    "resnet50": (1400, 800, 320),
    "unet3d": (1400, 900, 480),
    "mobilenetv2": (800, 400, 140),
    "dilated-audio": (160, 110, 50),
    "recurrent": (80, 65, 45),  # its loops' lists stay on the device: 45 MiB does not fit
}
KINDS = {"roomy": {"split": "off"}, "tight": {"split": "off"}, "split": {"split": "auto"}}
# name: (model, device memory in MiB, LMS options)
CASES = {
    f"{model}-{kind}": (model, memory, options)
    for model, memories in MEMORY.items()
    for (kind, options), memory in zip(KINDS.items(), memories, strict=True)
}
CASES["resnet50-gpu"] = ("resnet50", 800, {"mechanism": "device-copy"})
CASES["googlenet-gpu-split"] = ("googlenet", 140, {"mechanism": "device-copy"})
CASES["mobilenetv2-two-device"] = ("mobilenetv2", 140, {"mechanism": "two-device"})
CASES["googlenet-given"] = (  # TFLMSv2's parameters given, MaxPool split in two as asked
    "googlenet",
    260,
    {"swapout_threshold": 1, "swapin_ahead": 1, "swapin_groupby": 0, "split": {"MaxPool": 2}},
)


def classifier(body, shape, batch):
    """A Keras model of body(inputs) with ten classes (logits), its loss and its specs."""
    import keras
    import tensorflow as tf

    inputs = keras.Input(shape, batch_size=batch)
    model = keras.Model(inputs, keras.layers.Dense(10)(body(inputs)))

    def loss_fn(labels, logits):
        return tf.reduce_mean(
            keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        )

    specs = (tf.TensorSpec((batch, *shape), tf.float32), tf.TensorSpec((batch,), tf.int32))
    return model, loss_fn, specs


def mobilenetv2(x):
    """keras.applications' MobileNetV2 without weights, globally pooled."""
    import keras

    return keras.applications.MobileNetV2(
        weights=None, input_tensor=x, include_top=False, pooling="avg"
    ).output


def dilated_audio(x):
    """A WaveNet-like stack: causal Conv1D with dilations 1..16 and residual sums."""
    import keras

    x = keras.layers.Conv1D(16, 1)(x)
    for rate in (1, 2, 4, 8, 16):
        y = keras.layers.Conv1D(16, 2, dilation_rate=rate, padding="causal", activation="relu")(x)
        x = keras.layers.Add()([x, y])
    return keras.layers.GlobalAveragePooling1D()(x)


def recurrent(x):
    """A dense projection, a GRU and an LSTM over a sequence (While loops)."""
    import keras

    x = keras.layers.Dense(32, activation="relu")(x)
    x = keras.layers.GRU(32, return_sequences=True)(x)
    return keras.layers.LSTM(32)(x)


def build(model_name: str):
    """(training step, its TensorSpecs) of a model, the step as the suite's trials make it."""
    import keras

    from suite.workloads import build_workload, data, get_workload, training

    keras.utils.set_random_seed(0)
    size, batch = MODELS[model_name]
    if model_name in SUITE:
        info = get_workload(model_name)
        model, loss_fn = build_workload(model_name, size, batch, "fp32", info.default_classes)
        specs = data.batch_specs(info, size, batch, info.default_classes)
    elif model_name == "mobilenetv2":
        model, loss_fn, specs = classifier(mobilenetv2, (size, size, 3), batch)
    elif model_name == "dilated-audio":
        model, loss_fn, specs = classifier(dilated_audio, (size, 4), batch)
    else:
        model, loss_fn, specs = classifier(recurrent, (size, 8), batch)
    step = training.make_train_step(model, loss_fn, training.make_optimizer(), "fp32")
    return step, specs


def without_timings(value):
    """`value` without the keys holding seconds (`timings_s`, any "..._s")."""
    if isinstance(value, dict):
        return {
            k: without_timings(v)
            for k, v in value.items()
            if not (k in ("timings", "timings_s") or k.endswith("_s"))
        }
    if isinstance(value, list | tuple):
        return [without_timings(v) for v in value]
    return value


def plan_case(name: str, root: Path, out: Path) -> None:
    """Plan case `name` in this process with the lms under `root`; write <out>/<name>.json."""
    import lms

    where = Path(lms.__file__).resolve()
    if not where.is_relative_to(root.resolve()):
        raise SystemExit(f"lms comes from {where}, not from --root {root}")
    model_name, memory, options = CASES[name]
    if options.get("mechanism") == "two-device":
        lms.use_two_devices()
        import tensorflow as tf

        with tf.device("/CPU:1"):  # the variables on the compute device, as a GPU user's
            step, specs = build(model_name)
    else:
        step, specs = build(model_name)
    planner = lms.LMS(device_memory=memory * MiB, host_memory=None, **options)
    try:
        result = {"report": without_timings(planner.plan_only(step, *specs).to_dict())}
    except lms.LMSError as error:  # the error is the result to compare
        result = {"error": f"{type(error).__name__}: {error}"}
    result["case"] = {"model": model_name, "size": MODELS[model_name], "device_mib": memory}
    result["case"]["options"] = options
    text = json.dumps(result, sort_keys=True, indent=1)
    (out / f"{name}.json").write_text(text + "\n")


def write(out: Path, root: Path, names: list[str]) -> int:
    """Every case in its own process, with progress and an ETA on stdout."""
    out.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # the same plans on a GPU host: no GPU seen
    started, failed = time.perf_counter(), 0
    for k, name in enumerate(names, 1):
        child = [sys.executable, __file__, "--case", name, "--out", str(out), "--root", str(root)]
        done = subprocess.run(child, env=env, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        eta = elapsed / k * (len(names) - k)
        status = "ok" if done.returncode == 0 else "FAILED"
        print(f"case {k} of {len(names)}: {name} {status}, {elapsed:.0f} s, ETA {eta:.0f} s")
        if done.returncode:
            failed += 1
            print("\n".join(done.stderr.strip().splitlines()[-8:]), file=sys.stderr)
        sys.stdout.flush()
    print(f"{len(names) - failed} reports in {out} ({time.perf_counter() - started:.0f} s)")
    return 1 if failed else 0


def compare(a: Path, b: Path, only: list[str] | None = None, lines: int = 40) -> int:
    """identical/different/missing per case (of `only` if given: a partial write); a unified
    diff excerpt of each difference."""
    names = sorted({p.stem for p in a.glob("*.json")} | {p.stem for p in b.glob("*.json")})
    names = [name for name in names if only is None or name in only]
    if not names:
        print(f"no reports in {a} or {b}")
        return 1
    different = 0
    for name in names:
        files = [d / f"{name}.json" for d in (a, b)]
        missing = [str(f) for f in files if not f.exists()]
        if missing:
            print(f"{name}: missing ({', '.join(missing)})")
            different += 1
            continue
        texts = [f.read_text().splitlines() for f in files]
        if texts[0] == texts[1]:
            print(f"{name}: identical")
            continue
        different += 1
        print(f"{name}: different")
        diff = list(difflib.unified_diff(*texts, str(files[0]), str(files[1]), lineterm="", n=2))
        print("\n".join(diff[:lines]) + (f"\n... ({len(diff) - lines} more)" * (len(diff) > lines)))
    print(f"{len(names) - different} of {len(names)} identical")
    return 1 if different else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", choices=("write", "compare"))
    parser.add_argument("dirs", nargs="*", type=Path, help="write: DIR; compare: DIR_A DIR_B")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose lms plans")
    parser.add_argument("--case", action="append", choices=list(CASES), help="default: all")
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)  # a child: one case
    args = parser.parse_args()
    if args.out is not None:
        plan_case(args.case[0], args.root, args.out)
        return 0
    if args.command == "write" and len(args.dirs) == 1:
        return write(args.dirs[0], args.root.resolve(), args.case or list(CASES))
    if args.command == "compare" and len(args.dirs) == 2:
        return compare(*args.dirs, args.case)
    parser.error(
        "write DIR [--root PATH] [--case NAME ...] | compare DIR_A DIR_B [--case NAME ...]"
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
