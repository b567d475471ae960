"""The four matrix products of the hand-written steps, in the precision a run names
(``trainer.precision``), with the weights always kept in fp32.

A tied DA's minibatch costs four products (scheda.training.step.BatchedStep): the encode
``x~ W^T + b``, the decode ``h W + b'``, the backward ``dh = dz W^T`` and the rank-2n update
``W += [dh; h]^T [x~; dz]``. :class:`Fp32Products` computes them on the operands as they are.
:class:`Bf16Products` is mixed precision as Lightning's ``bf16-mixed`` means it: the weights and
biases stay fp32 (the master copy the update is added to, so a step of lr/n times a gradient is
not lost to bf16's 8-bit mantissa), every product's operands are rounded to bf16 and multiplied
with fp32 accumulation (oneDNN on a CPU with AVX512-BF16 or AMX, tensor cores on CUDA), and the
elementwise work (the biases, the sigmoid and its derivative, the loss) stays fp32.

Where the time goes (H 500, minibatch 20, one thread of the 2-core EPYC, torch's profiler over the
step): the three n x d x H products 0.66-0.68 ms each in bf16 against 1.24-1.46 in fp32, the update
1.06 against 1.65; the price is two passes over W a minibatch, the bf16 copy of W the products read
and the update added into the fp32 weights (the bf16 product widened first, then added: the
mixed-dtype add in one op was no faster), 1.3 ms in all. Alone, with W in the cache, a bf16 product
takes 0.45 ms: inside the step those passes evict W's bf16 copy. The step's epoch against fp32's
and against its products' floor: docs/performance.md.
"""

from __future__ import annotations

import functools
import logging

from scheda.utils.lazy import lazy

torch = lazy("torch", globals())

PRODUCT_PRECISIONS = ("fp32", "bf16")  # what a hand-written step's products can be computed in


def bf16_refusal(device: torch.device) -> str | None:
    """Why bf16 products cannot run at their rate on ``device`` (None: they can): a CPU needs
    AVX512-BF16 or AMX (elsewhere oneDNN emulates bf16, slower than fp32), a CUDA device bf16
    arithmetic (compute capability 8.0 or newer)."""
    if device.type == "cpu":
        cpu = getattr(torch, "cpu", None)
        checks = [getattr(cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
        if not any(check is not None for check in checks):
            return f"torch {torch.__version__} cannot tell whether this CPU multiplies in bf16"
        if not any(check() for check in checks if check is not None):
            return "this CPU has neither AVX512-BF16 nor AMX, and bf16 products would run slower than fp32"
        return None
    if device.type == "cuda" and torch.cuda.is_available() and not torch.cuda.is_bf16_supported(including_emulation=False):
        return f"{torch.cuda.get_device_name(device)} has no bf16 arithmetic"
    return None


class Fp32Products:
    """The step's products on its fp32 operands, ``W`` [M, H, d] updated in place."""

    precision = "fp32"

    def __init__(self, W: torch.Tensor, rows: int):
        self.W = W

    def begin(self) -> None:
        """Called before a minibatch's first product (the bf16 copy of W is made here)."""

    def invalidate(self) -> None:
        """Called where W may have been written by another than :meth:`update` (an epoch's start)."""

    def encode(self, x_tilde: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
        """``out`` = x~ W^T + bias: [M, n, H] pre-activations (``bias`` broadcasts to them: b as [M, 1, H])."""
        torch.baddbmm(bias, x_tilde, self.W.transpose(1, 2), out=out)

    def decode(self, h: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
        """``out`` = h W + bias: [M, n, d] logits (``bias``: b' as [M, 1, d], or ``out`` itself to add
        a group's reconstruction to the others', as the composite DA's decode does)."""
        torch.baddbmm(bias, h, self.W, out=out)

    def backward(self, dz: torch.Tensor, out: torch.Tensor) -> None:
        """``out`` = dz W^T: [M, n, H], the code's gradient before the activation's derivative."""
        torch.bmm(dz, self.W.transpose(1, 2), out=out)

    def update(self, A: torch.Tensor, B: torch.Tensor) -> None:
        """W += A^T B (A = -lr/n [dh; h], B = [x~; dz]: the x~ and dz this minibatch's ``encode``
        and ``backward`` were given, which the bf16 products keep lowered and read instead)."""
        self.W.baddbmm_(A.transpose(1, 2), B)

    def gradient(self, A: torch.Tensor, B: torch.Tensor, out: torch.Tensor) -> None:
        """``out`` = A^T B, the summed weight gradient (for an optimiser with state)."""
        torch.bmm(A.transpose(1, 2), B, out=out)


class Bf16Products(Fp32Products):
    """The same products with bf16 operands and fp32 accumulation, the fp32 ``W`` updated in place.
    Its buffers (bf16 copies of W, of [dh; h] and [x~; dz], the products' bf16 outputs, and the
    update widened to fp32) are allocated once for minibatches of up to ``rows`` rows. ``begin``
    rounds the current W to bf16 once a minibatch: the products never read a stale copy, whoever
    last wrote W (a resume, an evaluation's load, another step)."""

    precision = "bf16"

    def __init__(self, W: torch.Tensor, rows: int):
        super().__init__(W, rows)
        M, H, d = W.shape
        bf16 = dict(dtype=torch.bfloat16, device=W.device)
        self.W16 = torch.empty(M, H, d, **bf16)
        self.A16 = torch.empty(M, 2 * rows, H, **bf16)  # [dh; h], h while decoding
        self.B16 = torch.empty(M, 2 * rows, d, **bf16)  # [x~; dz]
        self.out_h = torch.empty(M, rows, H, **bf16)
        self.out_d = torch.empty(M, rows, d, **bf16)
        self.update16 = torch.empty(M, H, d, **bf16)
        self.update32 = torch.empty_like(W)

    def begin(self) -> None:
        self.W16.copy_(self.W)

    def encode(self, x_tilde, bias, out):
        n = x_tilde.shape[1]
        x16, h16 = self.B16[:, :n], self.out_h[:, :n]
        x16.copy_(x_tilde)
        torch.bmm(x16, self.W16.transpose(1, 2), out=h16)
        torch.add(h16, bias, out=out)

    def decode(self, h, bias, out):
        n = h.shape[1]
        h16, l16 = self.A16[:, n:2 * n], self.out_d[:, :n]
        h16.copy_(h)
        torch.bmm(h16, self.W16, out=l16)
        torch.add(l16, bias, out=out)

    def backward(self, dz, out):
        n = dz.shape[1]
        dz16, dh16 = self.B16[:, n:2 * n], self.out_h[:, :n]
        dz16.copy_(dz)
        torch.bmm(dz16, self.W16.transpose(1, 2), out=dh16)
        out.copy_(dh16)

    def _product16(self, A: torch.Tensor) -> torch.Tensor:
        """A^T B in bf16 (B16 holds [x~; dz] from encode and backward), in ``update16``."""
        rows = A.shape[1]
        A16 = self.A16[:, :rows]
        A16.copy_(A)
        return torch.bmm(A16.transpose(1, 2), self.B16[:, :rows], out=self.update16)

    def _product(self, A: torch.Tensor) -> torch.Tensor:
        """A^T B in bf16, widened to fp32."""
        return self.update32.copy_(self._product16(A))

    def update(self, A, B):
        self.W.add_(self._product(A))

    def gradient(self, A, B, out):
        out.copy_(self._product(A))


def _add_and_round(W: torch.Tensor, update16: torch.Tensor, W16: torch.Tensor) -> None:
    """W += widen(update16); W16 = bf16(W): what :class:`OnePassBf16Products` compiles into one loop."""
    W.add_(update16.float())
    W16.copy_(W)


class CompileError(RuntimeError):
    """torch.compile could not build the one-pass update here (no C++ compiler, say)."""


@functools.cache
def _compiled():
    """The compiled :func:`_add_and_round`, one per process, on flat tensors of any length
    (``dynamic=True``): one compilation serves every shape of W a process meets (models of other
    sizes, a sweep that loses a model), where one per shape would reach torch's limit of
    recompilations (8) in a long process; the compiled code is cached on disk by inductor, so a
    later process only loads it. On a
    CPU torch's C++ builder warns that it found no CUDA runtime, which says nothing of this loop:
    that one warning is kept from the run's log unless the user set that logger's level."""
    quiet = logging.getLogger("torch.utils.cpp_extension")
    if quiet.level == logging.NOTSET:
        quiet.setLevel(logging.ERROR)
    return torch.compile(_add_and_round, dynamic=True, fullgraph=True)


class OnePassBf16Products(Bf16Products):
    """:class:`Bf16Products` whose update makes one pass over the fp32 weights a minibatch: the
    bf16 update product widened, added to the fp32 W and W rounded to the bf16 copy the next
    minibatch's products read, in one compiled loop (read W and the update, write W and its copy),
    where the eager update makes three (widen, add, and ``begin``'s copy); the same arithmetic, so
    the same weights bit for bit. The copy is only as fresh as the last update: whatever else
    writes W (a resume, a checkpoint's load, an optimiser with state) must call :meth:`invalidate`,
    and the loop does at every epoch's start (the step's ``begin_epoch``). Compiled when built,
    on scratch tensors of W's shape, so that a failure is the builder's (it falls back), never a
    minibatch's."""

    def __init__(self, W: torch.Tensor, rows: int):
        super().__init__(W, rows)
        self.fresh = False  # W16 == bf16(W), written by the last update
        if not W.is_contiguous():  # the loop reads W flat
            raise CompileError("the weights are not one contiguous block")
        try:
            self.fused = _compiled()
            flat = dict(device=W.device, dtype=torch.bfloat16)
            self.fused(torch.zeros(W.numel(), device=W.device), torch.zeros(W.numel(), **flat),
                       torch.empty(W.numel(), **flat))
        except Exception as exc:  # noqa: BLE001 - whatever inductor raises where it cannot build
            raise CompileError(f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}") from exc

    def invalidate(self) -> None:
        self.fresh = False

    def begin(self) -> None:
        if not self.fresh:
            self.W16.copy_(self.W)
        self.fresh = False

    def update(self, A, B):
        self.fused(self.W.view(-1), self._product16(A).view(-1), self.W16.view(-1))
        self.fresh = True


def products_for(precision: str, W: torch.Tensor, rows: int, compiled: bool = False) -> Fp32Products:
    """The products of ``precision`` (tf32 is fp32's products with CUDA's TF32 matmuls switched on,
    scheda.training.trainer.setup_process) over the weights ``W`` [M, H, d]; ``compiled``: bf16's
    update in one compiled pass (:class:`OnePassBf16Products`; raises CompileError where it cannot)."""
    if precision == "bf16":
        return OnePassBf16Products(W, rows) if compiled else Bf16Products(W, rows)
    if compiled:
        raise ValueError(f"the compiled update is bf16's, not {precision}'s (scheda.planning.rules refuses it)")
    return Fp32Products(W, rows)
