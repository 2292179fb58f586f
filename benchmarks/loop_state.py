"""What a recurrent step's loop state costs LMS, and what LMS does with it (issue 43, item 3),
each configuration in a fresh process on the emulated device.

Keras runs an LSTM (a GRU) as a While loop; for the gradient, TensorFlow accumulates each
iteration's intermediates in tensor lists that the backward loop pops. LMS swaps those lists
between the loops, stacked into one tensor (lms/device/lists.py), or, when that does not fit,
streams them element by element inside the loops' bodies (lms/device/list_streams.py). The
same model with `unroll=True` has no loop: every step's intermediates are ordinary tensors that
LMS can swap. For stacked layers of `--length` tokens this prints:

- plain, batch B: the measured peak P (the device memory of the rest) and s/step; the same with
  its loops run one iteration at a time, as LMS runs them (`plain-serial`; `--device serial`
  makes its peak the device memory); the same unrolled (what unrolling costs without LMS);
- LMS at device memory P, batch `--factor` x B, with the loop: measured peak, s/step, and the
  plain step's samples/s over it, or why it refuses;
- the same unrolled.

`--processes N` runs every configuration N times, interleaved (the device memory: each round's
own plain peak); the lines give each process's numbers.

    python benchmarks/loop_state.py [--cell lstm|gru] [--length 128] [--batch 16] [--layers 3]
        [--width 256] [--factor 2] [--steps 3] [--processes 1] [--no-unrolled]
        [--device plain|serial]
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lms_emulated import measure, run_json_child  # noqa: E402

MiB = 2**20


def lstm_step(length: int, batch: int, layers: int, width: int, unroll: bool, cell="lstm"):
    """A training step of `layers` stacked LSTMs (GRUs) over `length` tokens (vocabulary 1024),
    ten classes from the last output; its inputs."""
    import keras
    import tensorflow as tf

    from suite.workloads import training

    keras.utils.set_random_seed(0)
    tokens = keras.Input((length,), batch_size=batch, dtype="int32")
    x = keras.layers.Embedding(1024, width)(tokens)
    for layer in range(layers):
        last = layer == layers - 1
        layer_of = keras.layers.GRU if cell == "gru" else keras.layers.LSTM
        x = layer_of(width, return_sequences=not last, unroll=unroll)(x)
    model = keras.Model(tokens, keras.layers.Dense(10)(x))

    def loss_fn(y, p):
        return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, p, from_logits=True))

    step = training.make_train_step(model, loss_fn, training.make_optimizer(), "fp32")
    inputs = tf.random.uniform((batch, length), 0, 1024, tf.int32, seed=1)
    labels = tf.random.uniform((batch,), 0, 10, tf.int32, seed=2)
    return step, inputs, labels


def child(mode: str, length, batch, layers, width, device_bytes, steps, cell) -> dict:
    import lms

    unroll = mode.endswith("unrolled")
    step, inputs, labels = lstm_step(length, batch, layers, width, unroll, cell)
    result = {"mode": mode, "batch": batch}
    if mode.startswith("plain"):
        concrete = step.get_concrete_function(inputs, labels)
        analysis = lms.internal.analyze(concrete.graph)
        if mode == "plain-serial":  # its loops one iteration at a time, as LMS runs them
            from lms.device.rewriter import rewrite
            from lms.planning.planner import Plan

            nothing = Plan(lms.Parameters(), [], frozenset())
            step = rewrite(concrete, analysis, nothing, lms.internal.HostStore())
        peak, seconds = measure(step, inputs, labels, steps)
        result.update(
            peak=peak, seconds=seconds, loop_bytes=sum(size for _, size in analysis.loops)
        )
        return result
    planner = lms.LMS(device_memory=device_bytes)
    wrapped = planner.wrap(step)
    try:
        for _ in range(4):  # the closed loop's calibration steps
            float(wrapped(inputs, labels))
        peak, seconds = measure(wrapped, inputs, labels, steps)
    except lms.NothingFitsError as error:
        result["refused"] = str(error).split(" (the budget")[0][:400]
        return result
    report = planner.report
    result.update(
        peak=peak,
        seconds=seconds,
        simulated=report.peak_bytes_with_lms,
        swapped_bytes=report.swapped_bytes,
        loop_bytes=sum(loop.bytes for loop in report.analysis.loops or ()),
        vertices=report.analysis.vertices,
        swapped_lists=report.swapped_lists or 0,
        streamed_lists=report.streamed_lists or 0,
        calibration=(report.calibration or {}).get("corrections"),
        timings=report.timings_s,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", choices=("lstm", "gru"), default="lstm")
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--factor", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--no-unrolled", action="store_true", help="skip the unrolled steps")
    parser.add_argument(
        "--device",
        choices=("plain", "serial"),
        default="plain",
        help="device memory: the plain step's measured peak, or with its loops run one "
        "iteration at a time as LMS runs them (lower: TensorFlow runs up to 32 at once)",
    )
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)  # mode batch device_bytes
    args = parser.parse_args()
    shape = (args.length, args.layers, args.width)
    if args.child:
        mode, batch, device_bytes = args.child[0], int(args.child[1]), int(args.child[2])
        result = child(mode, *shape[:1], batch, *shape[1:], device_bytes, args.steps, args.cell)
        print(json.dumps(result))
        return
    common = [f"--length={shape[0]}", f"--layers={shape[1]}", f"--width={shape[2]}"]
    common += [f"--steps={args.steps}", f"--cell={args.cell}"]

    def run(mode, batch, device_bytes=0):
        print(f"{mode}, batch {batch} ...", file=sys.stderr, flush=True)
        arguments = [*common, "--child", mode, str(batch), str(device_bytes)]
        return run_json_child(__file__, arguments, mode)

    larger = args.batch * args.factor
    for round_ in range(args.processes):
        plain = run("plain", args.batch)
        serial = run("plain-serial", args.batch)
        if plain is None or serial is None:
            return
        device = (serial if args.device == "serial" else plain)["peak"]
        rows = [plain, serial]
        if not args.no_unrolled:
            rows.append(run("plain-unrolled", args.batch))
        rows.append(run("lms-loop", larger, device))
        if not args.no_unrolled:
            rows.append(run("lms-unrolled", larger, device))
        print(
            f"round {round_ + 1} of {args.processes}: {args.layers} stacked "
            f"{args.cell.upper()}s of {args.width}, {args.length} tokens; device memory = the "
            f"{args.device} step's measured peak at batch {args.batch}: {device / MiB:.0f} MiB "
            f"(loop state {plain['loop_bytes'] / MiB:.0f} MiB of it)"
        )
        for row in rows:
            _print_row(row, plain, device)


def _planning(timings) -> str:
    """ ", (analysis + tuning) / trace R" of the kept plan's timings, or "" without them."""
    if not timings or not timings.get("trace_s"):
        return ""
    ratio = (timings.get("analysis_s", 0) + timings.get("tune_s", 0)) / timings["trace_s"]
    return f", (analysis + tuning) / trace {ratio:.2f}"


def _print_row(row, plain, device) -> None:
    if row is None:
        return
    if "refused" in row:
        print(f"- {row['mode']}, batch {row['batch']}: refused: {row['refused']}")
        return
    per_sample = (plain["seconds"] / plain["batch"]) / (row["seconds"] / row["batch"])
    extra = ""
    if "simulated" in row:
        extra = (
            f", simulated {row['simulated'] / MiB:.0f} MiB, swapped "
            f"{row['swapped_bytes'] / MiB:.0f} MiB ({row['swapped_lists']} lists), "
            f"{row.get('streamed_lists', 0)} lists streamed by element, loop state "
            f"{row['loop_bytes'] / MiB:.0f} MiB, corrections {row.get('calibration')}"
            f"{_planning(row.get('timings'))}"
        )
    print(
        f"- {row['mode']}, batch {row['batch']}: measured {row['peak'] / MiB:.0f} MiB "
        f"({row['peak'] / device:.2f} of the device), {row['seconds']:.2f} s/step, plain "
        f"samples/s over this {per_sample:.2f}{extra}",
        flush=True,
    )


if __name__ == "__main__":
    main()
