"""The fused DA step's elementwise work as four Triton kernels, for M >= 1 models at once.

The hand-written step (scheda.training.step.BatchedStep) is five products and about forty small
elementwise kernels a minibatch; at the paper's minibatch of 20 on a GPU those launches, not
the arithmetic, set the time. Here every elementwise pass between two products is ONE
kernel for all M models, so a minibatch is M random draws (each model's own generator, as
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
    """x[k, i] = x_all[idx[k, i]]; x~ = x where the 15-bit lane of ``words`` (int16, [M, >= n d])
    is >= thr[k] (int32), else 0. ``x``, ``x_tilde``: [M, n, d] with contiguous rows."""
    M, n = idx.shape
    d = x_all.shape[1]
    _corrupt[(M * n, triton.cdiv(d, BLOCK_ROW))](x_all, idx, words, thr, x, x_tilde, n, d,
            idx.stride(0), words.stride(0), x.stride(0), x_tilde.stride(0), BLOCK=BLOCK_ROW)


def encode(h: torch.Tensor, b: torch.Tensor, sigmoid: bool) -> None:
    """h = s(h + b) in place; ``h`` [M, n, H] with contiguous rows, ``b`` [M, H]."""
    M, n, H = h.shape
    _encode[(M * n, triton.cdiv(H, BLOCK_ROW))](h, b, n, H, h.stride(0), SIGMOID=sigmoid, BLOCK=BLOCK_ROW)


def decode(logits: torch.Tensor, x: torch.Tensor, b_prime: torch.Tensor, neg_lr: torch.Tensor,
           dz: torch.Tensor, loss: torch.Tensor) -> None:
    """dz = sigmoid(logits + b') - x; b' += -lr/n * sum_i dz; loss[k, block] += the block's summed
    cross-entropy. ``loss``: [M, cdiv(d, BLOCK_COL)] (:func:`loss_slots`)."""
    M, n, d = x.shape
    _decode[(M, triton.cdiv(d, BLOCK_COL))](logits, x, b_prime, neg_lr, dz, loss, n, d,
            logits.stride(0), x.stride(0), dz.stride(0), loss.stride(0), BLOCK_N=BLOCK_N, BLOCK=BLOCK_COL)


def backprop(A: torch.Tensor, b: torch.Tensor, neg_lr: torch.Tensor, sigmoid: bool) -> None:
    """``A`` = [dz W^T; h] ([M, 2n, H], rows contiguous) becomes -lr/n [dh; h] with
    dh = dz W^T * s'(a); b += -lr/n * sum_i dh."""
    M, two_n, H = A.shape
    _backprop[(M, triton.cdiv(H, BLOCK_COL))](A, b, neg_lr, two_n // 2, H, A.stride(0),
            SIGMOID=sigmoid, BLOCK_N=BLOCK_N, BLOCK=BLOCK_COL)


def loss_slots(M: int, d: int, device: torch.device) -> torch.Tensor:
    """The decoder kernel's loss accumulators: one per model and column block."""
    return torch.zeros(M, triton.cdiv(d, BLOCK_COL), device=device)


# --- The two-pass step (scheda.training.step.TwoPassStep): W read twice and written once a minibatch ---
#
# Pass (i), :func:`decode_pass`: the decoder product over column tiles of W with all n rows of the
# minibatch in one program (no reduction across programs), then dz, the loss slot and b''s update.
# Pass (ii), :func:`rows_pass`: over tiles of W's rows: dh (which needs only row j of W), b's and
# row j's update, and the NEXT minibatch's encode from the updated row (UPDATE=False: the encode
# alone, for the first minibatch of a call). The encode is the same loop in both modes, so where
# a sequence of minibatches is cut (graph replays, a resumed epoch) does not change a bit.
# Where W has too few row tiles to fill a card (H 1000: 63 programs for 132 SMs), pass (ii) also
# splits W's columns into S chunks (:func:`rows_splits`): each program's dh and encode are partial
# sums over its chunk, written to a buffer and summed in chunk order by the next kernel (dh by the
# update, the encode by :func:`_encode_finish`), so the step stays deterministic, without atomics.
# Products are tl.dot in full fp32 ("ieee") or three-pass TF32 ("tf32x3": near-fp32 on tensor cores).
# tl.dot takes tiles of at least 16 in each dimension, so a minibatch's rows are padded to a power of
# two >= 16 (:func:`_rows_block`): at the paper's 20 rows every product does 32 rows' work (1.6x),
# none at 16, 32, 64 or 128; cutting 20 into 16 + 4 would pad the 4 to 16 as well.

MAX_ROWS = 128  # the two-pass step keeps a minibatch's rows in one program
BLOCK_H2 = 16  # W's rows per program in pass (ii) (H / 16 programs a model: 63 at H 1000), hidden units per tile of pass (i)
BLOCK_D2 = BLOCK_COL  # W's columns per tile in pass (ii)
# W's columns per program in pass (i), the decode: tl.dot's least, so that its grid covers a card at one
# model (d / 16 = 192 programs at 3072 inputs, where 64-column programs were 48 for 132 SMs); each
# program sums over all of H in a fixed order, so the step stays deterministic (no split reduction).
BLOCK_DD = 16
# Pass (ii) splits W's columns until its grid has at least this many programs: an H100's or H200's SMs
# (an A100 has 108). A constant, not the card's count, so the same run gives the same bits on any card.
ROWS_PROGRAMS = 132
BLOCK_FINISH = 128  # hidden units per program of the split encode's sum (a row each: 20 x 8 programs at H 1000)


@triton.jit
def _decode_pass(h, W, b_prime, x, neg_lr, dz, loss, n, H, d, h_k, W_k, x_k, dz_k, loss_k,
                 BLOCK_N: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, PRECISION: tl.constexpr):
    k = tl.program_id(0)
    blk = tl.program_id(1)
    c = blk * BLOCK_D + tl.arange(0, BLOCK_D)
    mc = c < d
    r = tl.arange(0, BLOCK_N)
    mr = r < n
    acc = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    for first in range(0, H, BLOCK_H):
        j = first + tl.arange(0, BLOCK_H)
        mj = j < H
        hv = tl.load(h + k * h_k + r[:, None] * H + j[None, :], mask=mr[:, None] & mj[None, :], other=0.0)
        wv = tl.load(W + k * W_k + j[:, None] * d + c[None, :], mask=mj[:, None] & mc[None, :], other=0.0)
        acc += tl.dot(hv, wv, input_precision=PRECISION)
    bp = tl.load(b_prime + k * d + c, mask=mc, other=0.0)
    mm = mr[:, None] & mc[None, :]
    at = r[:, None] * d + c[None, :]
    l = acc + bp[None, :]
    xv = tl.load(x + k * x_k + at, mask=mm, other=0.0)
    g = tl.where(mm, 1.0 / (1.0 + tl.exp(-l)) - xv, 0.0)
    tl.store(dz + k * dz_k + at, g, mask=mm)
    ce = tl.where(mm, tl.maximum(l, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(l))) - xv * l, 0.0)
    scale = tl.load(neg_lr + k) / n
    tl.store(b_prime + k * d + c, bp + tl.sum(g, axis=0) * scale, mask=mc)
    slot = loss + k * loss_k + blk
    tl.store(slot, tl.load(slot) + tl.sum(tl.sum(ce, axis=1), axis=0))


@triton.jit
def _dh_part(W, dz, part, n, H, d, chunk, W_k, dz_k, part_k, part_s,
             BLOCK_N: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, PRECISION: tl.constexpr):
    """dh's partial sum over chunk s of W's columns (split pass (ii) only): part[k, s] = dz_s W_{j,s}^T."""
    k = tl.program_id(0)
    j = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    s = tl.program_id(2)
    mj = j < H
    r = tl.arange(0, BLOCK_N)
    mr = r < n
    acc = tl.zeros([BLOCK_N, BLOCK_H], dtype=tl.float32)
    for first in range(s * chunk, tl.minimum(s * chunk + chunk, d), BLOCK_D):
        c = first + tl.arange(0, BLOCK_D)
        mc = c < d
        dzv = tl.load(dz + k * dz_k + r[:, None] * d + c[None, :], mask=mr[:, None] & mc[None, :], other=0.0)
        wv = tl.load(W + k * W_k + j[:, None] * d + c[None, :], mask=mj[:, None] & mc[None, :], other=0.0)
        acc += tl.dot(dzv, tl.trans(wv), input_precision=PRECISION)
    tl.store(part + k * part_k + s * part_s + r[:, None] * H + j[None, :], acc, mask=mr[:, None] & mj[None, :])


@triton.jit
def _rows_pass(W, b, h, dz, xt, xt_next, neg_lr, dh_part, enc_part, n, n_next, H, d, chunk, S, W_k, h_k, dz_k, xt_k,
               xn_k, part_k, part_s, SIGMOID: tl.constexpr, UPDATE: tl.constexpr, ENCODE: tl.constexpr,
               SPLIT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
               PRECISION: tl.constexpr):
    k = tl.program_id(0)
    j = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    s = tl.program_id(2)  # W's column chunk (0 unless SPLIT)
    mj = j < H
    r = tl.arange(0, BLOCK_N)
    bv = tl.load(b + k * H + j, mask=mj, other=0.0)
    if UPDATE:
        mr = r < n
        hv = tl.load(h + k * h_k + r[:, None] * H + j[None, :], mask=mr[:, None] & mj[None, :], other=0.0)
        acc = tl.zeros([BLOCK_N, BLOCK_H], dtype=tl.float32)
        if SPLIT:  # dh from the chunks' partial sums (_dh_part), in chunk order
            for t in range(0, S):
                acc += tl.load(dh_part + k * part_k + t * part_s + r[:, None] * H + j[None, :],
                               mask=mr[:, None] & mj[None, :], other=0.0)
        else:
            for first in range(0, d, BLOCK_D):  # dh = dz W_j^T: row j of W alone
                c = first + tl.arange(0, BLOCK_D)
                mc = c < d
                dzv = tl.load(dz + k * dz_k + r[:, None] * d + c[None, :], mask=mr[:, None] & mc[None, :], other=0.0)
                wv = tl.load(W + k * W_k + j[:, None] * d + c[None, :], mask=mj[:, None] & mc[None, :], other=0.0)
                acc += tl.dot(dzv, tl.trans(wv), input_precision=PRECISION)
        if SIGMOID:
            g = acc * (hv - hv * hv)
        else:
            g = tl.where(hv > 0.0, acc, 0.0)
        g = tl.where(mr[:, None] & mj[None, :], g, 0.0)
        scale = tl.load(neg_lr + k) / n
        bv = bv + tl.sum(g, axis=0) * scale
        tl.store(b + k * H + j, bv, mask=mj & (s == 0))  # every chunk computes b's update; the first writes it
        gs = tl.trans(g * scale)  # [BLOCK_H, BLOCK_N]: -lr/n dh^T
        hs = tl.trans(hv * scale)
    if ENCODE:
        mn = r < n_next
        enc = tl.zeros([BLOCK_N, BLOCK_H], dtype=tl.float32)
    # row j's update over this program's columns, then the next minibatch's encode from it
    for first in range(s * chunk, tl.minimum(s * chunk + chunk, d), BLOCK_D):
        c = first + tl.arange(0, BLOCK_D)
        mc = c < d
        wm = mj[:, None] & mc[None, :]
        wv = tl.load(W + k * W_k + j[:, None] * d + c[None, :], mask=wm, other=0.0)
        if UPDATE:
            at = r[:, None] * d + c[None, :]
            xtv = tl.load(xt + k * xt_k + at, mask=mr[:, None] & mc[None, :], other=0.0)
            dzv = tl.load(dz + k * dz_k + at, mask=mr[:, None] & mc[None, :], other=0.0)
            wv = wv + (tl.dot(gs, xtv, input_precision=PRECISION) + tl.dot(hs, dzv, input_precision=PRECISION))
            tl.store(W + k * W_k + j[:, None] * d + c[None, :], wv, mask=wm)
        if ENCODE:
            xnv = tl.load(xt_next + k * xn_k + r[:, None] * d + c[None, :], mask=mn[:, None] & mc[None, :], other=0.0)
            enc += tl.dot(xnv, tl.trans(wv), input_precision=PRECISION)
    if ENCODE:
        if SPLIT:  # the chunk's part of the encode; _encode_finish sums them
            tl.store(enc_part + k * part_k + s * part_s + r[:, None] * H + j[None, :], enc,
                     mask=mn[:, None] & mj[None, :])
        else:
            a = enc + bv[None, :]
            if SIGMOID:
                a = 1.0 / (1.0 + tl.exp(-a))
            else:
                a = tl.maximum(a, 0.0)
            tl.store(h + k * h_k + r[:, None] * H + j[None, :], a, mask=mn[:, None] & mj[None, :])


@triton.jit
def _encode_finish(enc_part, b, h, n_next, H, S, h_k, part_k, part_s, SIGMOID: tl.constexpr, BLOCK: tl.constexpr):
    """h = s(sum over chunks, in chunk order, of the encode's parts + b) (split pass (ii) only); a
    program a row and BLOCK hidden units, so that its grid too covers a card (20 x 8 at H 1000)."""
    r = tl.program_id(0)
    k = r // n_next
    i = r % n_next
    j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = j < H
    enc = tl.zeros([BLOCK], dtype=tl.float32)
    for t in range(0, S):
        enc += tl.load(enc_part + k * part_k + t * part_s + i * H + j, mask=m, other=0.0)
    a = enc + tl.load(b + k * H + j, mask=m, other=0.0)
    if SIGMOID:
        a = 1.0 / (1.0 + tl.exp(-a))
    else:
        a = tl.maximum(a, 0.0)
    tl.store(h + k * h_k + i * H + j, a, mask=m)


def _rows_block(n: int) -> int:
    """A minibatch's rows padded for tl.dot (a power of two, at least 16)."""
    return max(16, triton.next_power_of_2(n))


def _decode_grid(M: int, d: int) -> tuple[int, int]:
    return M, triton.cdiv(d, BLOCK_DD)


def two_pass_loss_slots(M: int, d: int, device: torch.device) -> torch.Tensor:
    """The two-pass step's loss accumulators: one per model and decode program (summed at the epoch's end)."""
    return torch.zeros(M, triton.cdiv(d, BLOCK_DD), device=device)


def rows_splits(M: int, H: int, d: int) -> int:
    """S, the column chunks pass (ii) splits W's rows into: the fewest that give its grid
    ROWS_PROGRAMS programs (3 at H 1000, one model), at most one chunk a column tile; 1 (no split)
    where M models' row tiles already fill a card."""
    rows, tiles = M * triton.cdiv(H, BLOCK_H2), triton.cdiv(d, BLOCK_D2)
    wanted = min(tiles, triton.cdiv(ROWS_PROGRAMS, rows))
    return triton.cdiv(tiles, triton.cdiv(tiles, wanted))  # no chunk left without columns


def _chunk(d: int, S: int) -> int:
    """Columns a chunk of pass (ii): whole tiles, so a chunk's tiles are the unsplit pass's."""
    tiles = triton.cdiv(d, BLOCK_D2)
    return triton.cdiv(tiles, S) * BLOCK_D2


def rows_parts(M: int, H: int, d: int, batch_size: int, device: torch.device) -> torch.Tensor | None:
    """The split pass (ii)'s partial sums, [2 (dh, the encode), M, S, batch_size, H]; None unsplit."""
    S = rows_splits(M, H, d)
    return torch.empty(2, M, S, batch_size, H, device=device) if S > 1 else None


def _rows_grid(M: int, H: int, S: int) -> tuple[int, int, int]:
    return M, triton.cdiv(H, BLOCK_H2), S


def two_pass_launches(M: int, H: int, d: int, batch_size: int) -> list[dict]:
    """What one minibatch of the two-pass step launches, from the grids and tiles the launches
    below use: each kernel's programs and its FLOPs as its tiles pad them (the minibatch's rows to
    a power of two, H to BLOCK_H2, d to BLOCK_D2). The decode is one product (h W); pass (ii) four
    (dh = dz W_j^T, the update's two, dh^T x~ and h^T dz, and the next minibatch's encode), of
    which dh runs in a kernel of its own where the pass is split. A benchmark's occupancy floor."""
    n = _rows_block(batch_size)
    Hp, dp = triton.cdiv(H, BLOCK_H2) * BLOCK_H2, triton.cdiv(d, BLOCK_DD) * BLOCK_DD
    product = 2 * M * n * Hp * dp
    decode, S = _decode_grid(M, d), rows_splits(M, H, d)
    rows = M * triton.cdiv(H, BLOCK_H2) * S
    launches = [{"kernel": "decode_pass", "programs": decode[0] * decode[1], "flops": product}]
    if S > 1:
        return launches + [{"kernel": "dh_part", "programs": rows, "flops": product},
                           {"kernel": "rows_pass", "programs": rows, "flops": 3 * product},
                           {"kernel": "encode_finish", "programs": M * batch_size * triton.cdiv(H, BLOCK_FINISH),
                            "flops": 0}]
    return launches + [{"kernel": "rows_pass", "programs": rows, "flops": 4 * product}]


def decode_pass(h: torch.Tensor, W: torch.Tensor, b_prime: torch.Tensor, x: torch.Tensor, neg_lr: torch.Tensor,
                dz: torch.Tensor, loss: torch.Tensor, batch_size: int, precision: str) -> None:
    """Pass (i): dz = sigmoid(h W + b') - x, b' += -lr/n sum_i dz, loss[k, block] += the block's
    cross-entropy. ``h`` [M, n, H], ``x``, ``dz`` [M, n, d] (rows contiguous), n <= batch_size <=
    MAX_ROWS (the tiles are sized by the step's minibatch, so a short one sums as a full one)."""
    M, n, H = h.shape
    d = W.shape[2]
    _decode_pass[_decode_grid(M, d)](h, W, b_prime, x, neg_lr, dz, loss, n, H, d, h.stride(0),
            W.stride(0), x.stride(0), dz.stride(0), loss.stride(0), BLOCK_N=_rows_block(batch_size),
            BLOCK_H=BLOCK_H2, BLOCK_D=BLOCK_DD, PRECISION=precision)


def rows_pass(W: torch.Tensor, b: torch.Tensor, h: torch.Tensor, dz: torch.Tensor | None, x_tilde: torch.Tensor | None,
              x_tilde_next: torch.Tensor | None, neg_lr: torch.Tensor, sigmoid: bool, batch_size: int,
              precision: str, parts: torch.Tensor | None = None) -> None:
    """Pass (ii) over W's rows. With ``dz`` and ``x_tilde`` (this minibatch's, [M, n, d]): dh from
    ``h`` [M, n, H], b and W updated by -lr/n. With ``x_tilde_next`` [M, n', d]: h = s(x~' W^T + b)
    for it, from the weights as this pass leaves them, written over ``h``'s first n' rows.
    ``parts``: :func:`rows_parts` for M, H, d and ``batch_size`` (None where S is 1)."""
    M, H, d = W.shape
    update, encode = dz is not None, x_tilde_next is not None
    S = rows_splits(M, H, d)
    if (parts is None) != (S == 1):
        raise ValueError(f"pass (ii) splits W's columns in {S} here: give parts=rows_parts(...)")
    n = dz.shape[1] if update else 0
    n_next = x_tilde_next.shape[1] if encode else 0
    some = dz if update else x_tilde_next
    dh_part, enc_part = (parts[0], parts[1]) if S > 1 else (some, some)
    chunk, block_n = _chunk(d, S), _rows_block(batch_size)
    tiles = dict(BLOCK_N=block_n, BLOCK_H=BLOCK_H2, BLOCK_D=BLOCK_D2, PRECISION=precision)
    if update and S > 1:
        _dh_part[_rows_grid(M, H, S)](W, dz, dh_part, n, H, d, chunk, W.stride(0), dz.stride(0), dh_part.stride(0),
                                      dh_part.stride(1), **tiles)
    _rows_pass[_rows_grid(M, H, S)](W, b, h, some, x_tilde if update else some,
            x_tilde_next if encode else some, neg_lr, dh_part, enc_part, n, n_next, H, d, chunk, S, W.stride(0),
            h.stride(0), some.stride(0), (x_tilde if update else some).stride(0),
            (x_tilde_next if encode else some).stride(0), dh_part.stride(0), dh_part.stride(1) if S > 1 else 0,
            SIGMOID=sigmoid, UPDATE=update, ENCODE=encode, SPLIT=S > 1, **tiles)
    if encode and S > 1:
        _encode_finish[(M * n_next, triton.cdiv(H, BLOCK_FINISH))](enc_part, b, h, n_next, H, S, h.stride(0),
                enc_part.stride(0), enc_part.stride(1), SIGMOID=sigmoid, BLOCK=BLOCK_FINISH)
