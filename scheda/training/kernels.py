"""The fused DA step's elementwise work as four Triton kernels, for K >= 1 models at once.

The hand-written step (scheda.training.step.BatchedStep) is five products and about forty small
elementwise kernels a minibatch; at the paper's minibatch of 20 on a GPU those launches, not
the arithmetic, set the time. Here every elementwise stage between two products is ONE
kernel for all K models, so a minibatch is K random draws (each model's own generator, as
scheda.model.noise.Masking draws them) + 4 products + these 4 kernels:

* :func:`corrupt`: gather the minibatch rows and apply the masking noise from the drawn words
  (Masking's rule: a 15-bit lane >= round(nu 2^15) keeps the input), writing x and x~;
* :func:`encode`: ``h = s(h + b)`` in place (the encoder product ran without its bias);
* :func:`decode`: ``l = logits + b'``, ``dz = sigmoid(l) - x``, the summed cross-entropy
  accumulated into a per-block slot (read at the epoch's end, not per minibatch), and the
  decoder bias's SGD update from dz's column sums;
* :func:`backprop`: ``dh = dz W^T * s'(a)``, the encoder bias's update, and ``[dh; h]``
  scaled by -lr/n in place for the weight update's one product.

Column sums run over the minibatch inside one program, in tiles of rows (no atomics), so the step is
deterministic and a resumed run repeats the uninterrupted one bit for bit. With
``TRITON_INTERPRET=1`` (set before triton is imported) the kernels run on CPU tensors in
Triton's interpreter: that is how the suite tests them without a GPU (slow; a CPU run trains
with scheda.training.step.BatchedStep, which is faster there). scheda.training.step imports this module only
when it builds the step: importing triton costs every other process its start.
"""

import torch
import triton
import triton.language as tl

BLOCK_ROW = 256  # columns per program in the row-parallel kernels (corrupt, encode)
BLOCK_COL = 64  # columns per program in the column-sum kernels (decode, backprop), which
BLOCK_N = 32  # sum over the minibatch in tiles of this many rows


@triton.jit
def _corrupt(x_all, idx, words, thr, x, xt, n, d, idx_k, words_k, x_k, xt_k, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    k = r // n
    i = r % n
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = c < d
    src = tl.load(idx + k * idx_k + i).to(tl.int64)
    v = tl.load(x_all + src * d + c, mask=m, other=0.0)
    w = tl.load(words + k * words_k + i * d + c, mask=m, other=0).to(tl.int32) & 0x7FFF
    keep = w >= tl.load(thr + k)
    tl.store(x + k * x_k + i * d + c, v, mask=m)
    tl.store(xt + k * xt_k + i * d + c, tl.where(keep, v, 0.0), mask=m)


@triton.jit
def _encode(h, b, n, H, h_k, SIGMOID: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    k = r // n
    i = r % n
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = c < H
    a = tl.load(h + k * h_k + i * H + c, mask=m, other=0.0) + tl.load(b + k * H + c, mask=m, other=0.0)
    if SIGMOID:
        a = 1.0 / (1.0 + tl.exp(-a))
    else:
        a = tl.maximum(a, 0.0)
    tl.store(h + k * h_k + i * H + c, a, mask=m)


@triton.jit
def _decode(logits, x, b_prime, neg_lr, dz, loss, n, d, l_k, x_k, dz_k, loss_k,
            BLOCK_N: tl.constexpr, BLOCK: tl.constexpr):
    k = tl.program_id(0)
    blk = tl.program_id(1)
    c = blk * BLOCK + tl.arange(0, BLOCK)
    m = c < d
    bp = tl.load(b_prime + k * d + c, mask=m, other=0.0)
    col = tl.zeros([BLOCK], dtype=tl.float32)
    part = tl.zeros([BLOCK], dtype=tl.float32)
    for first in range(0, n, BLOCK_N):
        r = first + tl.arange(0, BLOCK_N)
        mm = (r[:, None] < n) & m[None, :]
        at = r[:, None] * d + c[None, :]
        l = tl.load(logits + k * l_k + at, mask=mm, other=0.0) + bp[None, :]
        xv = tl.load(x + k * x_k + at, mask=mm, other=0.0)
        g = 1.0 / (1.0 + tl.exp(-l)) - xv
        tl.store(dz + k * dz_k + at, g, mask=mm)
        col += tl.sum(tl.where(mm, g, 0.0), axis=0)
        # softplus(l) - x l, the summed cross-entropy from the logits
        ce = tl.maximum(l, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(l))) - xv * l
        part += tl.sum(tl.where(mm, ce, 0.0), axis=0)
    scale = tl.load(neg_lr + k) / n
    tl.store(b_prime + k * d + c, bp + col * scale, mask=m)
    slot = loss + k * loss_k + blk
    tl.store(slot, tl.load(slot) + tl.sum(part, axis=0))


@triton.jit
def _backprop(A, b, neg_lr, n, H, A_k, SIGMOID: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK: tl.constexpr):
    k = tl.program_id(0)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = c < H
    scale = tl.load(neg_lr + k) / n
    col = tl.zeros([BLOCK], dtype=tl.float32)
    for first in range(0, n, BLOCK_N):
        r = first + tl.arange(0, BLOCK_N)
        mm = (r[:, None] < n) & m[None, :]
        at_dh = k * A_k + r[:, None] * H + c[None, :]
        at_h = at_dh + n * H
        hv = tl.load(A + at_h, mask=mm, other=0.0)
        g = tl.load(A + at_dh, mask=mm, other=0.0)
        if SIGMOID:
            g = g * (hv - hv * hv)
        else:
            g = tl.where(hv > 0.0, g, 0.0)
        col += tl.sum(tl.where(mm, g, 0.0), axis=0)
        tl.store(A + at_dh, g * scale, mask=mm)
        tl.store(A + at_h, hv * scale, mask=mm)
    tl.store(b + k * H + c, tl.load(b + k * H + c, mask=m, other=0.0) + col * scale, mask=m)


def corrupt(x_all: torch.Tensor, idx: torch.Tensor, words: torch.Tensor, thr: torch.Tensor,
            x: torch.Tensor, x_tilde: torch.Tensor) -> None:
    """x[k, i] = x_all[idx[k, i]]; x~ = x where the 15-bit lane of ``words`` (int16, [K, >= n d])
    is >= thr[k] (int32), else 0. ``x``, ``x_tilde``: [K, n, d] with contiguous rows."""
    K, n = idx.shape
    d = x_all.shape[1]
    _corrupt[(K * n, triton.cdiv(d, BLOCK_ROW))](x_all, idx, words, thr, x, x_tilde, n, d,
            idx.stride(0), words.stride(0), x.stride(0), x_tilde.stride(0), BLOCK=BLOCK_ROW)


def encode(h: torch.Tensor, b: torch.Tensor, sigmoid: bool) -> None:
    """h = s(h + b) in place; ``h`` [K, n, H] with contiguous rows, ``b`` [K, H]."""
    K, n, H = h.shape
    _encode[(K * n, triton.cdiv(H, BLOCK_ROW))](h, b, n, H, h.stride(0), SIGMOID=sigmoid, BLOCK=BLOCK_ROW)


def decode(logits: torch.Tensor, x: torch.Tensor, b_prime: torch.Tensor, neg_lr: torch.Tensor,
           dz: torch.Tensor, loss: torch.Tensor) -> None:
    """dz = sigmoid(logits + b') - x; b' += -lr/n * sum_i dz; loss[k, block] += the block's summed
    cross-entropy. ``loss``: [K, cdiv(d, BLOCK_COL)] (:func:`loss_slots`)."""
    K, n, d = x.shape
    _decode[(K, triton.cdiv(d, BLOCK_COL))](logits, x, b_prime, neg_lr, dz, loss, n, d,
            logits.stride(0), x.stride(0), dz.stride(0), loss.stride(0), BLOCK_N=BLOCK_N, BLOCK=BLOCK_COL)


def backprop(A: torch.Tensor, b: torch.Tensor, neg_lr: torch.Tensor, sigmoid: bool) -> None:
    """``A`` = [dz W^T; h] ([K, 2n, H], rows contiguous) becomes -lr/n [dh; h] with
    dh = dz W^T * s'(a); b += -lr/n * sum_i dh."""
    K, two_n, H = A.shape
    _backprop[(K, triton.cdiv(H, BLOCK_COL))](A, b, neg_lr, two_n // 2, H, A.stride(0),
            SIGMOID=sigmoid, BLOCK_N=BLOCK_N, BLOCK=BLOCK_COL)


def loss_slots(K: int, d: int, device: torch.device) -> torch.Tensor:
    """The decoder kernel's loss accumulators: one per model and column block."""
    return torch.zeros(K, triton.cdiv(d, BLOCK_COL), device=device)
