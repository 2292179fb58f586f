"""The emulated device's mechanism (docs/lms.md): its host, a Python-side store outside
TensorFlow's allocator that keeps swapped tensors and split ops' pieces as host arrays
(`HostStore`, an `lms.device.mechanism.Mechanism`), reached through `tf.numpy_function`s.

The swap-out hands the tensor to the store and returns an int64 handle; the swap-in brings the
array back and copies it into a buffer of TensorFlow's allocator, as a GPU's swap-in fills device
memory. The allocator's measured peak really drops, so CPU tests and CI check LMS for real, and
it counts the swapped-in copies as a GPU would. A split op's pieces go through the same store
(`pieces()`: lms/device/host_pieces.py `HostPieces`, which counts the host arrays' reads). The
store counts what it moves (`Traffic`) and, with an `lms.Link`, moves it at that link's speed.
"""

import itertools
import logging
import threading
from dataclasses import dataclass, fields

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from lms.device.host_arrays import HostArrays
from lms.device.host_pieces import HostPieces
from lms.device.nodes import node, type_attr, type_list_attr
from lms.graph.names import SWAP_IN, SWAP_IN_COPY, SWAP_OUT
from lms.values.budget import format_size
from lms.values.link import EmulatedLink, Link

log = logging.getLogger("lms")

# What a transfer costs the host store without a link, for choosing among plans
# (lms/tuning/prune.py): a numpy_function call and its executor hand-off, about 0.03-0.05 ms,
# and copies that ran at 2.4-6.8 GB/s effective over whole steps (benchmarks/swap_overhead.py).
HOST_STORE_COST = Link(4e9, 50e-6)


@dataclass
class Traffic:
    """What swap ops moved: counts, bytes, and with an emulated link the seconds its transfers
    took (`EmulatedLink.send`, `receive`: each transfer's own duration, not the time in the swap
    op, which for a swap-out ends before its transfer does).
    Without a link nothing crosses one (the store keeps a host copy): no seconds to measure."""

    swap_outs: int = 0
    swap_ins: int = 0
    out_bytes: int = 0
    in_bytes: int = 0
    out_transfer_seconds: float = 0.0
    in_transfer_seconds: float = 0.0

    def add(self, other: "Traffic") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


class HostStore:
    """The emulated device's host as an `lms.device.mechanism.Mechanism`: arrays kept by handle,
    each freed by its last read (a swapped tensor's after its last swap-in; a split op's host
    arrays as lms/device/host_pieces.py counts them), whatever a step left by `clear()`.

    link: an `lms.Link` the store's copies are slowed to (see lms/values/link.py); None copies at
    the speed of host memory. host_device, compute_device: the target's (lms/device/target.py;
    the store's py_funcs run where the swapped tensor is). disk: a directory where the arrays
    beyond the RAM the plan may take are kept (`arrays`: lms/device/host_arrays.py)."""

    kind = "host-store"
    keeps_ops = False  # its py_funcs are stateful: Grappler never removes them
    copies_lists = False  # a py_func takes no tensor list: lms/device/lists.py stacks it

    def __init__(
        self,
        link: Link | None = None,
        host_device: str = "/device:CPU:0",
        compute_device: str | None = None,
        disk=None,
    ):
        self.host_device, self.compute_device = host_device, compute_device
        self._arrays, self._readers = {}, {}  # handle -> array, and the reads left before freed
        self._on_host = {}  # handle -> when its swap-out's transfer is done (with a link)
        self._held = self._peak = 0  # bytes held now, and the most since `take_peak`
        self._step_peak = 0  # the most bytes held since the last `clear`
        self._lock = threading.Lock()
        self._handles = itertools.count()
        self._tokens = None
        self.link = link
        self._engines = EmulatedLink(link) if link is not None else None
        # what a transfer costs (the Mechanism's `transfer_cost`): the link's, or the store's
        self.transfer_cost = link if link is not None else HOST_STORE_COST
        self._traffic = Traffic()
        self.arrays = HostArrays(disk)

    @property
    def store(self) -> "HostStore":
        """The store the wrapped step clears after each step: this mechanism itself."""
        return self

    @property
    def swaps(self) -> "HostStore":
        """What makes a swap's nodes (`rewrite`'s argument): this mechanism itself."""
        return self

    def pieces(self) -> HostPieces:
        """A fresh tracker of one graph's piece copies, through this store."""
        return HostPieces(self)

    def take_traffic(self) -> Traffic:
        """What the swap ops moved since the last call."""
        with self._lock:
            traffic, self._traffic = self._traffic, Traffic()
        return traffic

    @property
    def held_bytes(self) -> int:
        with self._lock:
            return self._held

    def take_peak(self) -> int:
        """The most bytes the store held at once since the last call (what the simulator's
        host curve predicts: swapped tensors and split ops' host arrays)."""
        with self._lock:
            peak, self._peak = self._peak, self._held
        return peak

    def _hold(self, nbytes: int) -> None:  # under the lock
        self._held += nbytes
        self._peak = max(self._peak, self._held)
        self._step_peak = max(self._step_peak, self._held)

    def drop_arena(self) -> int:
        """`HostArrays.drop_arena`, and its region freed now: TensorFlow lets go of the arrays
        its py_funcs returned from its own threads through a queue it empties when a py_func
        next runs, so the last step's few arrays kept the whole region (GoogLeNet 1024² in
        120 MiB with the closed loop: 3 MiB held a 669 MiB region through each new plan). One
        runs here. Returns the arena's bytes."""
        dropped = self.arrays.drop_arena()
        tf.numpy_function(_nothing, [], tf.float32)
        return dropped

    def clear(self) -> tuple[int, int]:
        """Drop whatever a step left behind; return how many arrays and bytes that was."""
        with self._lock:
            left = (len(self._arrays), self._held)
            self._arrays.clear()
            self._readers.clear()
            self._on_host.clear()
            held_peak, self._held, self._step_peak = self._step_peak, 0, 0
        self.arrays.clear()
        capacity = self.arrays.outgrown(held_peak)
        if capacity:  # the step's arrays outgrew the arena: one for what it held
            log.info(
                "LMS: the host store held %s at its peak, more than its arena of %s had room "
                "for: a new arena of %s",
                *(format_size(held_peak), format_size(self.arrays.arena_bytes)),
                format_size(capacity),
            )
            self.drop_arena()
            self.arrays.make_arena(capacity)
        return left

    def _put(self, array, readers):
        handle = next(self._handles)

        def copy_out():  # a copy: the array may alias TensorFlow's buffer, which must be freed
            return self.arrays.copy(array)

        if self._engines:  # the op goes on; the swapped tensor is kept until its transfer ends
            copy, done, seconds = self._engines.send(array.nbytes, copy_out, reads=array)
        else:
            copy, done, seconds = copy_out(), 0.0, 0.0
        with self._lock:
            self._arrays[handle] = copy
            self._readers[handle] = int(readers)
            self._on_host[handle] = done
            self._hold(copy.nbytes)
            self._traffic.swap_outs += 1
            self._traffic.out_bytes += array.nbytes
            self._traffic.out_transfer_seconds += seconds
        # A one-element vector, not a 0-d array or numpy scalar: TensorFlow's PyFunc kept one
        # small Python object per call for a 0-d result here (1.5 MB per 1,000 steps with 47
        # swaps; benchmarks/lms_host_memory.py), none for a vector.
        return np.array([handle], dtype=np.int64)

    def _read(self, handle):
        """The array kept under `handle`, one of its reads used up (the last frees it), and when
        the transfers that put it on the host are done."""
        key = int(handle[0])
        with self._lock:
            array, done = self._arrays[key], self._on_host.get(key, 0.0)
            self._readers[key] -= 1
            if self._readers[key] == 0:
                del self._arrays[key], self._readers[key]
                self._on_host.pop(key, None)
                self._held -= array.nbytes
                self.arrays.free(array)
        return array, done

    def _count_in(self, nbytes: int, after: float) -> None:
        """One swap-in of `nbytes`, through the link when there is one: it begins once the bytes
        are on the host (`after`) and the op waits for its end, as a GPU's readers of it do."""
        seconds = self._engines.receive(nbytes, after) if self._engines else 0.0
        with self._lock:
            self._traffic.swap_ins += 1
            self._traffic.in_bytes += nbytes
            self._traffic.in_transfer_seconds += seconds

    def _get(self, handle):
        array, after = self._read(handle)
        self._count_in(array.nbytes, after)
        # TensorFlow wraps the returned (aligned) array without copying it; the swap-in's
        # DeepCopy then copies it into the allocator, so no reader writes into the stored array
        return array

    # Pieces of a split op (lms/device/host_pieces.py): a whole tensor read in slices, an output
    # written in slices into one host array that its readers then take whole.

    def put_whole(self, array, readers):
        """Keep `array` for `readers` slice reads; its handle."""
        return self._put(array, readers)

    def get_slice(self, handle, axis, start, stop):
        """Rows start:stop along `axis` of a kept array (its last read frees it)."""
        array, after = self._read(handle)
        index = [slice(None)] * array.ndim
        index[int(axis)] = slice(int(start), int(stop))
        piece = self.arrays.read_view(array, array[tuple(index)])
        self._count_in(piece.nbytes, after)
        return piece

    def put_slice(self, handle, piece, axis, start, shape, readers):
        """Write `piece` at `start` along `axis` of the host array `handle` (-1: a new one of
        `shape` for `readers` reads); the array's handle."""
        key = int(handle[0])
        if self._engines:  # as `_put`: booked, not waited for
            done, seconds = self._engines.send(piece.nbytes, reads=piece)[1:]
        else:
            done, seconds = 0.0, 0.0
        with self._lock:
            if key < 0:
                key = next(self._handles)
                self._arrays[key] = self.arrays.empty(shape, piece.dtype)
                self._readers[key] = int(readers)
                self._hold(self._arrays[key].nbytes)
            array = self._arrays[key]
            index = [slice(None)] * array.ndim
            index[int(axis)] = slice(int(start), int(start) + piece.shape[int(axis)])
            array[tuple(index)] = piece
            self._on_host[key] = max(self._on_host.get(key, 0.0), done)
            self._traffic.swap_outs += 1
            self._traffic.out_bytes += piece.nbytes
            self._traffic.out_transfer_seconds += seconds
        return np.array([key], dtype=np.int64)

    def get_whole(self, handle):
        """A kept array whole (as a swap-in)."""
        return self._get(handle)

    def put_elements(self, *arrays):
        """Keep each of `arrays` for one read: their handles. A streamed loop's elements of one
        iteration in one py_func call (lms/device/list_streams.py)."""
        return [self._put(array, 1) for array in arrays]

    def get_elements(self, *handles):
        """The arrays kept under `handles`, as swap-ins, each freed by this read."""
        return [self._get(handle) for handle in handles]

    def _py_func_tokens(self) -> tuple[bytes, bytes, bytes, bytes]:
        """Register `_put`, `_get`, `put_elements` and `get_elements` with TensorFlow's py_func
        registry, once per store (a PyFunc node's Tin and Tout give its arity, not the token).

        Made through the public `tf.numpy_function` in a graph of the store's own, which holds the
        registered functions alive (the registry keeps weak references) as long as the store.
        """
        if self._tokens is None:
            self._graph = tf.Graph()
            with self._graph.as_default():
                value = tf.compat.v1.placeholder(tf.float32)
                readers = tf.compat.v1.placeholder(tf.int64)
                put = tf.numpy_function(self._put, [value, readers], tf.int64, stateful=True)
                get = tf.numpy_function(self._get, [put], tf.float32, stateful=True)
                puts = tf.numpy_function(self.put_elements, [value], [tf.int64], stateful=True)
                gets = tf.numpy_function(self.get_elements, [put], [tf.float32], stateful=True)
            ops = (put.op, get.op, puts[0].op, gets[0].op)
            self._tokens = tuple(op.get_attr("token") for op in ops)
        return self._tokens

    def _py_func_node(self, which: int, name, inputs, device, tin, tout):
        """A PyFunc node calling the store's function `which` (`_py_func_tokens`' index)."""
        return node(
            name,
            "PyFunc",
            inputs,
            device,
            token=attr_value_pb2.AttrValue(s=self._py_func_tokens()[which]),
            Tin=type_list_attr(tin),
            Tout=type_list_attr(tout),
        )

    def swap_out_nodes(self, prefix, source, tensor, readers):
        count = node(
            f"{prefix}lms_readers",
            "Const",
            [],
            tensor.device,
            dtype=type_attr(tf.int64),
            value=attr_value_pb2.AttrValue(tensor=tf.make_tensor_proto(readers, tf.int64)),
        )
        inputs, device = [source, count.name], tensor.device
        out = self._py_func_node(
            0, f"{prefix}{SWAP_OUT}", inputs, device, [tensor.dtype, tf.int64], [tf.int64]
        )
        return [count, out]

    def host_read_nodes(self, prefix, stored, tensor):
        """The swap-in's py_func alone: its output is the host array itself, outside the
        device's allocator, for an op that copies it onto the device anyway (a list's rebuild,
        lms/device/lists.py). The trigger's control dependency holds it back."""
        name, device = f"{prefix}{SWAP_IN}", tensor.device
        return [self._py_func_node(1, name, [stored], device, [tf.int64], [tensor.dtype])]

    def put_elements_node(self, name, sources, dtypes, device):
        """One py_func node that keeps its inputs `sources` (of `dtypes`) for one read each and
        gives their handles, an output each (`put_elements`)."""
        return self._py_func_node(2, name, sources, device, dtypes, [tf.int64] * len(dtypes))

    def get_elements_node(self, name, handles, dtypes, device):
        """One py_func node that gives back the arrays (of `dtypes`) kept under `handles`, an
        output each (`get_elements`)."""
        return self._py_func_node(3, name, handles, device, [tf.int64] * len(dtypes), dtypes)

    def swap_in_nodes(self, prefix, stored, tensor):
        (swap_in,) = self.host_read_nodes(prefix, stored, tensor)
        # TensorFlow wraps a numpy_function's result without copying it, outside its allocator:
        # without this copy the emulated device would not count the swapped-in tensor at all
        # (a GPU's swap-in is device memory).
        copy = node(
            f"{prefix}{SWAP_IN_COPY}",
            "DeepCopy",
            [swap_in.name],
            tensor.device,
            T=type_attr(tensor.dtype),
        )
        # An EnsureShape gives Grappler the static shape a py_func cannot declare: without it the
        # arithmetic optimizer rewrites the far consumers wrongly (gradients off by up to 20 %).
        shape = node(
            f"{prefix}lms_swapin_shape",
            "EnsureShape",
            [copy.name],
            tensor.device,
            T=type_attr(tensor.dtype),
            shape=attr_value_pb2.AttrValue(shape=tensor.shape.as_proto()),
        )
        return [swap_in, copy, shape]


def _nothing():
    return np.float32(0)
