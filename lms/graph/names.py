"""The names LMS gives what it adds to a step's graph, in one place: the rewrite and the split
ops name their ops with them, and the layers above (the placement check, the copy match, the
profile and the step-time model) recognise LMS's ops by them."""

import re

SWAP_SCOPE = "lms"  # the rewriter's name scope: lms/s<k>/... per swapped tensor
SPLIT_SCOPE = "lms_split"  # where lms/split/rewrite.py adds a split op's pieces
# where a max pool gradient's recomputed pool is made (lms/graph/pool_reads.py)
RECOMPUTE_SCOPE = "lms_pool"
# where recomputed pools live: a whole gradient's, and a split gradient's pieces' own
RECOMPUTED_SCOPES = (f"{SPLIT_SCOPE}/", f"{RECOMPUTE_SCOPE}/")
# the op that moves a swap's bytes each way, and the swap-in's device-side copy (device copies)
SWAP_OUT, SWAP_IN, SWAP_IN_COPY = "lms_swapout", "lms_swapin", "lms_swapin_copy"
# set on a FuncGraph once lms edited it (swaps or split ops): its trace is no longer plain
REWRITTEN_MARK = "_lms_rewritten"
# a graph's host arrays of split ops: {array: [bytes, [names of the ops that create it or store
# a piece in it]]} (lms/device/host_pieces.py)
HOST_ARRAYS = "_lms_host_arrays"


# the ops that move a split op's bytes (lms/split/rewrite.py, lms/split/chain.py, through the
# mechanism's PieceCopies): a slice or a whole to the device, a kept input or a piece to the host;
# several per piece scope, so TensorFlow numbers them (lms_piece_in_1, ...)
PIECE_IN, PIECE_OUT = "lms_piece_in", "lms_piece_out"
_PIECE = re.compile(rf"({PIECE_IN}|{PIECE_OUT})(_\d+)?")


def transfer_kind(name: str) -> str | None:
    """ "out" or "in" for an op that moves bytes between host and device: a swap's (`swap_kind`)
    or a split op's piece's, else None."""
    found = _PIECE.fullmatch(name.rsplit("/", 1)[-1])
    if found:
        return "in" if found.group(1) == PIECE_IN else "out"
    return swap_kind(name)


def swap_kind(name: str) -> str | None:
    """ "out" or "in" for the op that moves a swap's bytes (by the rewriter's names), else None."""
    last = name.rsplit("/", 1)[-1]
    return {SWAP_OUT: "out", SWAP_IN: "in"}.get(last)


# set on a FuncGraph whose loops' tensor lists go through the host store element by element: how
# many lists (lms/device/list_streams.py)
STREAMED_LISTS = "_lms_streamed_lists"
# set on a FuncGraph: its split ops were made as they run, in chains (lms/split/fit.py
# `split_in_rounds`): no chaining on a fresh trace after
SPLITS_MADE = "_lms_splits_made"
# the name scope of the nodes that stream a list's elements, in the loops' bodies
STREAM_SCOPE = f"{SWAP_SCOPE}_stream"
# set on a FuncGraph: its loop and branch bodies' own held bytes, by function name and batch size,
# for when the step is analysed again (after its lists are streamed: lms/pipeline.py)
BODY_TEMPS = "_lms_body_temps"
