"""The emulated device's piece copies (`HostPieces`, a `PieceCopies` of lms/split/pieces.py): a
split op's inputs and outputs kept as host arrays in the host store (lms/device/host_store.py
`HostStore`, whose `pieces()` makes one per graph), read and written by stateful
`tf.numpy_function`s, which Grappler never removes. A split op whose input is another split op's
output reads that output's host array in place: a chain of split ops never has the whole tensor
on the device between them.

A host array's life, and who counts its reads (`HostArray.readers`, a one-element list that the
py_func which creates the array reads when it runs, so that reads counted after it was built
still count):

- Two kinds. A kept input: `keep` puts a tensor on the host whole (`put_whole`) for the split ops
  that read it in slices; a second split op reading the same tensor shares the array. A split
  output: the first piece's `store_piece` creates it (`put_slice`, handle -1), every piece writes
  its rows into it.
- Who reads it: each piece of each split op that keeps it, one slice each (`read` ->
  `get_slice`; a fused batch norm reads it once per pass and piece; a halo piece with no rows
  still reads once, emptily); for a split output also the assemble (`assemble` -> `get_whole`),
  the one read that brings it back whole for readers that are not split.
- When each count is taken: at graph building. A kept input starts at the pieces of the op that
  keeps it; a split output at 1 (the assemble). Every later `keep` of the same tensor (or of a
  split output, read in place) adds that split op's pieces. `replaced` moves the count of a keep
  made moot (a split op split *before* the op whose output it kept: its pieces now read the
  output array in place) onto that output array.
- When it is given back: at run time each read takes one (`HostStore._read`), and at build time
  `replaced` takes back the assemble's read (`released`) once no reader of the assembled whole
  runs any more (all split, moot, or pruned in the traced step): TensorFlow prunes that
  assemble, so its read would never come.
- When the array is freed: by the read that takes the count to 0, within the step; whatever a
  step left (a step that failed between a put and its last read) by `HostStore.clear()` after
  it. The analysis counts each array in the host's memory from its first op to the last reader
  of any of its handles (`hold_host_array`, the graph's HOST_ARRAYS).
"""

import math
from dataclasses import dataclass

import tensorflow as tf

from lms import _tf_private
from lms.graph.names import HOST_ARRAYS, PIECE_IN, PIECE_OUT, RECOMPUTE_SCOPE
from lms.split.rewrite import running_ops


@dataclass
class HostArray:
    """A host array of the store, as the graph builds its reads (module docstring): a kept input
    or a split op's output (its pieces' array), and how many reads free it."""

    handle: object  # the op's output that names the array (an output's: its last piece's store)
    readers: list  # [count]: read when the py_func that creates the array runs
    released: bool = False  # the assemble's read taken back (no live reader of the whole)
    name: str = ""  # the op that creates it: the array's key in the graph's HOST_ARRAYS


class HostPieces:
    """The emulated device's piece copies through `store` (a HostStore: `put_whole`,
    `get_slice`, `put_slice`, `get_whole`), one per graph; the host arrays' read counts are
    kept here as the module docstring says."""

    keeps_ops = False  # numpy_functions are stateful: Grappler never removes them
    loops = True  # alike pieces run as one While loop (lms/split/looped.py)

    def __init__(self, store):
        self.store = store
        self._outputs = {}  # a split op's combined output (ref) -> its output's HostArray
        self._kept = {}  # a tensor kept on the host for split ops (ref) -> its kept HostArray
        self._keeps = {}  # those keeps' ops -> the same HostArrays (to find moot ones)
        self._gone = set()  # the ops no longer run: replaced by pieces, or keeps made moot
        self._traced = None  # (the step's ops before any split, those of them that run)

    def keep(self, tensor, readers: int):
        """`tensor` on the host for `readers` slice reads: a split op's output is there
        already; a tensor that another split op keeps is copied once for both."""
        host = self._outputs.get(tensor.ref()) or self._kept.get(tensor.ref())
        if host is not None:  # one more split op reads it: its pieces' reads counted
            host.readers[0] += readers
            return host.handle
        count = [readers]  # read at run time, once every split op that reads it is counted
        handle = _handle(
            tf.numpy_function(
                lambda a: self.store.put_whole(a, count[0]),
                [tensor],
                tf.int64,
                stateful=True,
                name=PIECE_OUT,
            )
        )
        kept = HostArray(handle, count, name=handle.op.name)
        self._kept[tensor.ref()] = self._keeps[handle.op] = kept
        hold_host_array(handle.op, kept.name, _bytes(tensor.shape.as_list(), tensor.dtype))
        return handle

    def read(self, kept, like, axis: int, start: int, stop: int):
        where = tf.constant([axis, start, stop], tf.int64)
        piece = tf.numpy_function(
            lambda h, w: self.store.get_slice(h, *w),
            [kept, where],
            like.dtype,
            stateful=True,
            name=PIECE_IN,
        )
        shape = like.shape.as_list()
        shape[axis] = stop - start
        return _on_device(piece, shape)  # (get_slice takes one read of `kept`)

    def store_piece(self, stored, piece, axis: int, start: int, shape: list):
        host = stored or HostArray(tf.constant([-1], tf.int64), [1])  # 1: the assemble's read
        readers = host.readers  # read at run time, once the graph's reads are all counted
        where = tf.constant([axis, start, *shape], tf.int64)
        host.handle = _handle(
            tf.numpy_function(
                lambda h, p, w: self.store.put_slice(h, p, w[0], w[1], w[2:], readers[0]),
                [host.handle, piece, where],
                tf.int64,
                stateful=True,
                name=PIECE_OUT,
            )
        )
        host.name = host.name or host.handle.op.name  # the first piece's store creates it
        hold_host_array(host.handle.op, host.name, _bytes(shape, piece.dtype))
        return host

    def read_rows(self, kept, like, axis: int, starts: tuple, length: int, position):
        """`read` in a loop's body: rows [starts[i], starts[i] + length) of the kept `like`,
        i the body's `position` (a tensor) in its pieces."""
        piece = tf.numpy_function(
            lambda h, i: self.store.get_slice(h, axis, starts[i], starts[i] + length),
            [kept, position],
            like.dtype,
            stateful=True,
            name=PIECE_IN,
        )
        shape = like.shape.as_list()
        shape[axis] = length
        return _on_device(piece, shape)

    def store_rows(self, stored, piece, axis: int, starts: tuple, shape: list, position):
        """`store_piece` in a loop's body: `piece` at starts[i] along `axis`, i the body's
        `position` in its pieces; `stored` made by a piece before the loop."""
        readers = stored.readers
        stored.handle = _handle(
            tf.numpy_function(
                lambda h, p, i: self.store.put_slice(h, p, axis, starts[i], shape, readers[0]),
                [stored.handle, piece, position],
                tf.int64,
                stateful=True,
                name=PIECE_OUT,
            )
        )
        return stored

    def resume(self, stored, token) -> None:
        """The next store of `stored` follows `token` (a loop's input or output for it). A
        loop's output in the step's graph names the array from then on: its readers (the next
        split ops' pieces, the assemble) are the array's readers too, so the loop counts among
        its ops (without it the analysis freed an array its loop filled when the loop ended: the
        host store held 1.24x the simulated host peak, the 3D U-Net 96³ in 400 MiB)."""
        stored.handle = token
        if stored.name in getattr(token.graph, HOST_ARRAYS, {}):  # not a loop body's input
            hold_host_array(token.op, stored.name, 0)

    def token(self, stored):
        """What the next piece waits for: this piece stored."""
        return stored.handle

    def assemble(self, stored, like, axis: int):
        whole = tf.numpy_function(
            self.store.get_whole, [stored.handle], like.dtype, stateful=True, name=PIECE_IN
        )
        whole = _on_device(whole, like.shape.as_list())  # (get_whole: the assemble's read)
        self._outputs[whole.ref()] = stored
        return whole

    def replaced(self, op, whole) -> None:
        """`op` is now its pieces and `whole` their combined output. Split ops that read `op`'s
        output (split before it) read its host array in place from now on, and a split output
        that only split ops read is never assembled (TensorFlow prunes the assemble), so its
        read is taken back."""
        self._gone.add(op)
        host = self._outputs.get(whole.ref())  # None: a sum, on the device
        for reader in list(whole.consumers()) if host else ():
            if reader not in self._keeps:
                continue
            for consumer in list(reader.outputs[0].consumers()):
                for position, tensor in enumerate(consumer.inputs):
                    if tensor is reader.outputs[0]:
                        _tf_private.update_input(consumer, position, host.handle)
            _tf_private.move_control_outputs(reader, host.handle.op)  # first pieces' waits
            host.readers[0] += self._keeps.pop(reader).readers[0]  # their reads move over
            self._gone.add(reader)
        for tensor in (*op.inputs, whole):
            host = self._outputs.get(tensor.ref())
            if host is None or host.released:
                continue
            if all(self._never_runs(reader) for reader in tensor.consumers()):
                host.readers[0] -= 1  # the assemble's read: TensorFlow prunes it
                host.released = True

    def finish(self, graph) -> None:
        """Nothing: the store's py_funcs are stateful, and Grappler keeps them."""

    def _never_runs(self, op) -> bool:
        """`op` is replaced by pieces, a keep made moot, an op of the traced step that
        TensorFlow prunes (e.g. the gradient of the images, which nothing reads), or a
        gradient's recomputed pool (lms/graph/pool_reads.py) whose gradient is split: its pieces
        pool their own rows, so nothing reads it and TensorFlow prunes it."""
        if op in self._gone:
            return True
        if op.name.startswith(f"{RECOMPUTE_SCOPE}/"):
            return all(self._never_runs(reader) for reader in op.outputs[0].consumers())
        if self._traced is None:  # the step as traced: which of its ops run does not change
            self._traced = (set(op.graph.get_operations()), running_ops(op.graph))
        traced, running = self._traced
        return op in traced and op not in running


def _on_device(array, shape: list):
    """A py_func's result copied into TensorFlow's allocator (as a swap-in is:
    lms/device/host_store.py), with the static shape the analysis sizes it by and Grappler
    needs. The shape is ensured on the host array and the copy comes last: the copy is then the
    device buffer its readers read directly, which the planner can swap out for a far reader (an
    alias after it would hide those readers from the planner: MobileNetV2 2048² b1's assembled
    outputs all stayed on the device, 899 MiB planned for a budget of 360)."""
    array.set_shape(shape)
    return tf.raw_ops.DeepCopy(x=tf.ensure_shape(array, shape))


def _bytes(shape: list, dtype) -> int:
    return math.prod(shape) * dtype.size if None not in shape else 0


def hold_host_array(op, array: str, size: int) -> None:
    """Note on `op`'s graph that `op` creates (or adds a piece to, or gives back the handle of)
    the host array `array` of `size` bytes (0: one noted already): the analysis counts the array
    in the host's memory from its first op to the last reader of any of its handles
    (`lms.graph.step.Analysis.host_arrays`)."""
    arrays = getattr(op.graph, HOST_ARRAYS, None)
    if arrays is None:
        arrays = {}
        setattr(op.graph, HOST_ARRAYS, arrays)
    arrays.setdefault(array, [size, []])[1].append(op.name)


def _handle(handle):
    """A host copy's handle: one int64 (so that the analysis sizes it, 8 bytes)."""
    handle.set_shape([1])
    return handle
