"""Training steps the split tests cut into pieces: a model's gradients, a max pool's."""

import tensorflow as tf


def gradients_step(model):
    """The step (a tf.function) of sum(model(x)²)'s gradients for x and the weights."""

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            outs = tf.nest.flatten(model(x, training=True))
            loss = tf.add_n([tf.reduce_sum(out * out) for out in outs])
        return tape.gradient(loss, [x, *model.trainable_variables])

    return step


def max_pool_gradient():
    """A step (a tf.function of its own: the tests split its trace in place) of the gradient
    for x of sum(max_pool(relu(x), 3, 2, SAME)²): a stride-2 MaxPoolGrad that reads its pool
    (and the ReLU's zeros: ties)."""

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.nn.max_pool2d(tf.nn.relu(x), 3, 2, "SAME")
            loss = tf.reduce_sum(y * y)
        return tape.gradient(loss, x)

    return step
