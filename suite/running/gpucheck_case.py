"""The step `inv gpucheck`'s check processes build (suite/running/gpucheck_worker.py): a small
convolutional classifier trained by the suite's own step (SGD with momentum,
suite.workloads.training), its variables on the compute device (a GPU, or the two-device mode's
/CPU:1), its batch, the state it starts from, and LMS on it with TFLMSv2's parameters that swap
every tensor that can be swapped.

One case for every part (gpucheck_parts.py, gpucheck_split.py), so that each check looks at the
same step; sized so that the two-device mode takes seconds on two CPU cores and a GPU's peak is
far above its allocator's rounding. TensorFlow is imported when a case is built.
"""

from dataclasses import dataclass

MECHANISMS = {"gpu": "device-copy", "two-device": "two-device"}
COMPUTE = {"gpu": "/GPU:0", "two-device": "/CPU:1"}
# (side, batch, filters) of the step: seconds on two CPU cores; on a GPU ~100 MiB activations,
# so that a peak is far above the allocator's rounding
SIZES = {"two-device": (64, 8, 16), "gpu": (224, 16, 32)}
CONVOLUTIONS, CHANNELS, CLASSES = 6, 8, 10
# every tensor that can be swapped is (TFLMSv2's parameters), for a device so small that the
# parameters apply as given; no closed loop: the step runs the plan checked
SWAP_ALL = {
    "device_memory": "1MiB",
    "swapout_threshold": 1,
    "swapin_ahead": 1,
    "swapin_groupby": 0,
    "split": "off",
    "calibration_steps": 0,
}


@dataclass
class Case:
    """The step of a check, its batch, and the state it starts from (restored between runs)."""

    mode: str
    model: object
    optimizer: object
    step: object  # the plain tf.function
    images: object
    labels: object
    initial: list

    def variables(self) -> list:
        return list(self.model.variables) + list(self.optimizer.variables)

    def reset(self) -> None:
        for variable, value in zip(self.variables(), self.initial, strict=True):
            variable.assign(value)

    def plain(self, images, labels):
        """The plain step, on the compute device (the two-device mode places by the call)."""
        import tensorflow as tf

        with tf.device(COMPUTE[self.mode]):
            return self.step(images, labels)

    @property
    def args(self) -> tuple:
        return self.images, self.labels


def build_case(mode: str, precision: str = "fp32") -> Case:
    """The case in `mode` ("gpu" or "two-device") and `precision`, seeded: every build the same."""
    import keras
    import tensorflow as tf

    from suite.workloads import precision_policy
    from suite.workloads.losses import classification
    from suite.workloads.training import make_optimizer, make_train_step

    side, batch, filters = SIZES[mode]
    keras.utils.set_random_seed(0)
    with tf.device(COMPUTE[mode]), precision_policy(precision):
        layers = [keras.Input((side, side, CHANNELS), batch_size=batch)]
        layers += [
            keras.layers.Conv2D(filters, 3, padding="same", activation="relu")
            for _ in range(CONVOLUTIONS)
        ]
        layers += [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(CLASSES)]
        model = keras.Sequential(layers)
        optimizer = make_optimizer()
        step = make_train_step(model, classification, optimizer, precision)
        images = tf.random.stateless_uniform((batch, side, side, CHANNELS), seed=(1, 2))
        labels = tf.random.stateless_uniform((batch,), (3, 4), maxval=CLASSES, dtype=tf.int32)
    case = Case(mode, model, optimizer, step, images, labels, [])
    case.initial = [v.numpy() for v in case.variables()]
    return case


def lms_step(case: Case, **options):
    """(planner, step) of LMS with `options` on the case's step, called once (plans, runs)."""
    import lms

    planner = lms.LMS(mechanism=MECHANISMS[case.mode], **options)
    step = planner.wrap(case.step)
    step(*case.args)
    return planner, step
