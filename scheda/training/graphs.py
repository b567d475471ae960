"""Graph capture for the steps that replay their work (the graphed torch step, the Triton and
two-pass steps, the fused fine-tuning): capture a callable once, replay it per call.

:class:`CudaGraphs` captures CUDA graphs. :class:`StandIn` has the same interface on any device:
its capture does what a CUDA capture does to the run's state (the warm-up, undone; nothing of the
captured callable runs), and its replay runs the captured callable eagerly. The suite drives every
graphed path on the CPU through it (tests/test_graphs.py): capture, calls of new lengths in
mid-epoch, a short last minibatch, a resume, compared with the eager step bit for bit. A user never
gets it: a graph needs a CUDA device (scheda.planning.rules).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Protocol

from scheda.utils.lazy import lazy

torch = lazy("torch", globals())


class Graph(Protocol):
    def replay(self) -> None: ...


@contextlib.contextmanager
def undone(params: list[torch.Tensor], generators: list[torch.Generator], sums: torch.Tensor):
    """Whatever runs inside (a warm-up) leaves ``params``, ``generators`` and ``sums`` (the
    epoch's loss sums so far) as they were, also when it fails: a run that goes on without it goes
    on from the same state, wherever in an epoch it ran."""
    saved = [p.clone() for p in params]
    saved_sums = sums.clone()
    states = [g.get_state() for g in generators]
    try:
        yield
    finally:
        for p, v in zip(params, saved):
            p.copy_(v)
        for g, state in zip(generators, states):
            g.set_state(state)
        sums.copy_(saved_sums)


class CudaGraphs:
    """CUDA graphs: ``warm_up`` twice on a side stream first (allocations, lazy initialisation,
    triton's compilation, cuBLAS's workspace), its updates of ``params``, draws from
    ``generators`` and additions to ``sums`` undone; then ``run`` captured with the generators
    registered, so each replay advances them as an eager call would."""

    name = "cuda"

    def capture(self, warm_up: Callable[[], object], run: Callable[[], object], params: list[torch.Tensor],
                generators: list[torch.Generator], sums: torch.Tensor) -> torch.cuda.CUDAGraph:
        with undone(params, generators, sums):
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    warm_up()
            torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        for g in generators:
            graph.register_generator_state(g)
        with torch.cuda.graph(graph):
            run()
        return graph


class _Replay:
    def __init__(self, run: Callable[[], object]):
        self.run = run

    def replay(self) -> None:
        self.run()


class StandIn:
    """CUDA graphs' stand-in on any device: the same warm-up (twice, undone) at capture, nothing of
    ``run`` executed then (a CUDA capture only records), and a replay that calls ``run``: it reads
    the static buffers the step copied in, as a replay does."""

    name = "stand-in"

    def capture(self, warm_up: Callable[[], object], run: Callable[[], object], params: list[torch.Tensor],
                generators: list[torch.Generator], sums: torch.Tensor) -> Graph:
        with undone(params, generators, sums):
            for _ in range(2):
                warm_up()
        return _Replay(run)


def graphs_for(device: torch.device) -> CudaGraphs | StandIn:
    """CUDA graphs on a CUDA device; the stand-in elsewhere (the rules refuse a user's graph off CUDA)."""
    return CudaGraphs() if device.type == "cuda" else StandIn()
