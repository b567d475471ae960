"""The minibatch updates of M >= 1 DAs (the loop that calls one, minibatch after minibatch, is
scheda.training.trainer). Which one trains a run, what each needs and how it is built is its step's
module in scheda.training.steps (a StepChoice, chosen once in the run's plan by scheda.planning.rules);
nothing here decides:

* :class:`AutogradStep` (called as M = 1 through :class:`OneModel`): ``model.training_loss``
  (corrupt, reconstruct), ``backward``, ``optimizer.step``. Serves every option (any noise,
  squared error, any optimizer settings; bf16 as autocast).
* :class:`GraphedStep`: the batched step below captured once in a CUDA graph and replayed per
  minibatch (launch-bound at minibatch 20).
* :class:`BatchedStep` (one model is M = 1; :class:`FusedStep` calls it as :class:`AutogradStep`
  is called, for tests and scripts): the tied-weight cross-entropy DA
  with SGD, written out by hand, for M models of a fused sweep at once (M = 1: one run). With
  ``a = x~ W^T + b``, ``h = s(a)``, ``l = h W + b'``, ``dz = sigmoid(l) - x`` (summed loss):

      dh = (dz W^T) * s'(a)        dW = dh^T x~ + h^T dz = [dh; h]^T [x~; dz]

  so the weight gradient is ONE matrix product over the stacked ``[dh; h]`` and ``[x~; dz]``,
  and with plain SGD it is fused into the update (-lr/n folded into ``[dh; h]``, then ``W.baddbmm_``). Every
  intermediate lives in buffers allocated once (fresh multi-megabyte tensors per step cost
  page faults that are a large share of a CPU step), the stacked operands are written in
  place, and the loss is accumulated on the device. Five products of n x d x H per step:
  the minimum for a tied DA, computed in fp32 or, ``trainer.precision=bf16``, in bf16 with the
  weights kept in fp32 (scheda.training.products).
* :class:`CompositeStep`: the composite DA's update written out the same way, one model, plain
  SGD, eager (each group's encoder product on its own corruption).
* :class:`TritonStep`: the same update with the masking noise, its elementwise work in four
  Triton kernels for all M models (scheda.training.kernels), graphed several minibatches a replay: the
  CUDA default where it applies (on a CPU the torch step above measures faster, and Triton has
  no CPU backend but its interpreter).
* :class:`TwoPassStep` (``trainer.step=two_pass``, opt-in): the Triton step as two passes over W a
  minibatch, the next minibatch's encode inside the update's pass (scheda.training.kernels).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

from scheda.model.noise import Corruption, mask_threshold
from scheda.model.optim import SGD
from scheda.training.graphs import graphs_for, undone
from scheda.training.products import products_for
from scheda.utils.lazy import lazy, no_grad

torch = lazy("torch", globals())
network = lazy("scheda.model.network", globals())

log = logging.getLogger(__name__)


def summed_cross_entropy(logits: torch.Tensor, x: torch.Tensor, tmp: torch.Tensor,
                         batched: bool = False) -> torch.Tensor:
    """sum(softplus(l) - x l) with vectorised kernels only (logaddexp/softplus are scalar loops
    on the CPU, several times slower): softplus(l) = relu(l) - log sigmoid(|l|), where
    sigmoid(|l|) lies in [0.5, 1] and never underflows, and sum relu(l) = (sum l + sum |l|) / 2.
    ``tmp`` is scratch of the logits' shape; ``batched``: one sum per model, [M, n, d] inputs."""
    if batched:
        def total(t):
            return t.sum(dim=(1, 2))

        xl = torch.bmm(x.reshape(x.shape[0], 1, -1), logits.reshape(x.shape[0], -1, 1)).reshape(-1)
    else:
        def total(t):
            return t.sum()

        xl = torch.dot(x.reshape(-1), logits.reshape(-1))
    torch.abs(logits, out=tmp)
    relu_sum = (total(logits) + total(tmp)) * 0.5
    return relu_sum - total(tmp.sigmoid_().log_()) - xl


class AutogradStep:
    """Corrupt, the model's own training loss, backward, the model's after-backward hook
    (the composite DA freezes inactive groups there), the optimiser's step."""

    def __init__(self, model: network.DenoisingAutoencoder, optimizer: SGD, noise: Corruption,
                 autocast_dtype: torch.dtype | None = None):
        self.model, self.optimizer, self.noise = model, optimizer, noise
        self.autocast_dtype = autocast_dtype

    def __call__(self, x_all: torch.Tensor, idx: torch.Tensor, nu, generator: torch.Generator) -> torch.Tensor:
        x = x_all.index_select(0, idx)
        with torch.autocast(x.device.type, dtype=self.autocast_dtype or torch.float32,
                            enabled=self.autocast_dtype is not None):
            loss = self.model.training_loss(x, self.noise, nu, generator)
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        self.model.after_backward()
        self.optimizer.step()
        return loss.detach()


def stack_views(params: list[torch.Tensor]) -> torch.Tensor:
    """``params`` (one per model, the same shape) stacked into one [M, ...] tensor, each parameter
    then a view of its slice: a batched product updates every model in place."""
    stacked = torch.stack([p.detach() for p in params])
    for k, p in enumerate(params):
        p.data = stacked[k]
    return stacked


def plain_sgd(optimizer: SGD) -> bool:
    group = optimizer.param_groups[0]
    return group["momentum"] == 0 and group["weight_decay"] == 0


class LossSums:
    """What every step the loop calls shares: each model's running sum of its training losses this
    epoch, kept on the device in ``loss_sums`` [M, ...] (a scalar per model, or the Triton step's
    per-block slots), which the loop seeds at an epoch's start (a resumed epoch's sums go back in,
    so its additions associate as the uninterrupted epoch's did) and takes at its end; and how many
    minibatches one call may take (``minibatches``: the loop hands a step that many at once, as
    ``idx`` of [M, minibatches * n] rows)."""

    minibatches = 1

    def begin_epoch(self) -> None:
        """Called by the loop before an epoch's first minibatch: a step that keeps a copy of the
        weights (the one-pass bf16 update's) reads them again, whoever wrote them since."""

    def _init_loss_sums(self, M: int, device: torch.device) -> None:
        self.loss_sums = torch.zeros(M, device=device)

    def take_loss_sums(self) -> torch.Tensor:
        """The sums (a copy), zeroed in place (a captured graph keeps adding into the same tensor)."""
        out = self.loss_sums.clone()
        self.loss_sums.zero_()
        return out


class BatchedStep(LossSums):
    """The hand-written step (see the module docstring) for M >= 1 tied DAs at once: a fused
    sweep stacks M models' weights into one [M, H, d] tensor, which each model's parameters
    then view, and every product is a batched one (``bmm``); one model is the case M = 1 (its
    parameters viewed as [1, H, d], no copy). Each model draws its own minibatch and corruption
    from its own generator and keeps its own learning rate, so model k follows exactly the
    trajectory it would follow alone (up to summation order). Bit for bit it differs from
    :class:`AutogradStep` only by floating-point summation order. With one model, the
    optimiser may also have momentum or weight decay (the gradient goes to ``.grad`` and the
    optimiser steps); a sweep needs plain SGD, fused into the product."""

    def __init__(self, models: list[network.DenoisingAutoencoder], optimizers: list[SGD],
                 noises: list[Corruption], batch_size: int, device: torch.device, precision: str = "fp32",
                 compiled: bool = False):
        # What the plan chose this step for (scheda.planning.rules refuses every run without it).
        if not all(map(self.supports, models, optimizers)) or (len(models) > 1 and not all(map(plain_sgd, optimizers))):
            raise ValueError("the batched step trains tied cross-entropy DAs with one SGD group (plain SGD for several)")
        if len({(m.n_input, m.n_hidden, m.activation) for m in models}) != 1:
            raise ValueError("models trained by one step share their input size, hidden units and activation")
        self.models, self.optimizers, self.noises = models, optimizers, noises
        self.plain_sgd = all(plain_sgd(opt) for opt in optimizers)
        M, d, H, n = len(models), models[0].n_input, models[0].n_hidden, batch_size
        self.activation = models[0].activation
        f32 = dict(dtype=models[0].W.dtype, device=device)
        if M == 1:
            m = models[0]
            self.W, self.b, self.b_prime = m.W.data.unsqueeze(0), m.b.data.unsqueeze(0), m.b_prime.data.unsqueeze(0)
            if not self.plain_sgd:
                for p in m.parameters():
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
        else:
            self.W, self.b, self.b_prime = (stack_views([getattr(m, name) for m in models]) for name in ("W", "b", "b_prime"))
        # Every intermediate in buffers allocated once: [dh; h] and [x~; dz] are stacked so the
        # weight gradient is one product.
        self.x = torch.empty(M, n, d, **f32)
        self.A = torch.empty(M, 2 * n, H, **f32)  # [dh; h]
        self.B = torch.empty(M, 2 * n, d, **f32)  # [x~; dz]
        self.logits = torch.empty(M, n, d, **f32)
        self.tmp_d = torch.empty(M, n, d, **f32)
        self.tmp_h = torch.empty(M, n, H, **f32)
        # the four products, fp32 or bf16 (fp32 weights; ``compiled``: bf16's update in one pass over W)
        self.products = products_for(precision, self.W, n, compiled)
        self._lrs: tuple[float, ...] | None = None
        self._neg_lr = torch.zeros(M, **f32)
        self.neg_lr()
        self._init_loss_sums(M, device)

    def begin_epoch(self) -> None:
        self.products.invalidate()

    @staticmethod
    def supports(model: network.DenoisingAutoencoder, optimizer: SGD) -> bool:
        return model.fusable and isinstance(optimizer, SGD) and len(optimizer.param_groups) == 1

    def neg_lr(self) -> torch.Tensor:
        """-lr_k per model on the device, copied in only when a learning rate changes: a step makes
        no host-to-device copy, and a captured graph reads the same tensor, updated in place."""
        lrs = tuple(opt.param_groups[0]["lr"] for opt in self.optimizers)
        if lrs != self._lrs:
            self._lrs = lrs
            self._neg_lr.copy_(torch.tensor([-lr for lr in lrs], dtype=self.W.dtype))
        return self._neg_lr

    @no_grad
    def __call__(self, x_all: torch.Tensor, idx: torch.Tensor, nus: list, generators: list) -> torch.Tensor:
        """``idx``: [M, n] rows of ``x_all`` per model; returns the M minibatch losses."""
        M, n = idx.shape
        b, b_prime = self.b, self.b_prime
        # The first M*n rows of the buffer, contiguous: ``self.x[:, :n]`` is not when n < batch_size
        # (a partial last minibatch), and index_select into its reshape would fill a copy.
        x = self.x.view(-1)[: M * n * self.x.shape[2]].view(M, n, -1)
        torch.index_select(x_all, 0, idx.reshape(-1), out=x.view(M * n, -1))
        A, B = self.A[:, : 2 * n], self.B[:, : 2 * n]
        dh, h = A[:, :n], A[:, n:]
        x_tilde, dz = B[:, :n], B[:, n:]
        logits, tmp_d, tmp_h = self.logits[:, :n], self.tmp_d[:, :n], self.tmp_h[:, :n]
        products = self.products
        for k in range(M):  # each model's corruption from its own generator
            self.noises[k](x[k], nus[k], generators[k], out=x_tilde[k])
        products.begin()
        products.encode(x_tilde, b.unsqueeze(1), h)
        if self.activation == "sigmoid":
            h.sigmoid_()
        else:
            h.relu_()
        products.decode(h, b_prime.unsqueeze(1), logits)
        loss = summed_cross_entropy(logits, x, tmp_d, batched=True) / n
        torch.sigmoid(logits, out=dz)
        dz.sub_(x)
        products.backward(dz, dh)
        if self.activation == "sigmoid":
            torch.mul(h, h, out=tmp_h)
            dh.mul_(torch.sub(h, tmp_h, out=tmp_h))  # s'(a) = h (1 - h)
        else:
            dh.mul_(h > 0)
        if self.plain_sgd:
            scale = self.neg_lr() / n
            b.add_(dh.sum(1) * scale[:, None])
            b_prime.add_(dz.sum(1) * scale[:, None])
            A.mul_(scale[:, None, None])  # -lr_k/n folded into [dh; h]: W += [dh; h]^T [x~; dz]
            products.update(A, B)
        else:  # one model, an optimiser with state: the mean gradient, then its step
            m = self.models[0]
            products.gradient(A, B, m.W.grad.unsqueeze(0))
            m.W.grad.div_(n)
            torch.sum(dh[0], 0, out=m.b.grad).div_(n)
            torch.sum(dz[0], 0, out=m.b_prime.grad).div_(n)
            self.optimizers[0].step()
        self.loss_sums.add_(loss, alpha=n)
        return loss


class CompositeStep(LossSums):
    """The hand-written step of one composite DA (scheda.model.network.CompositeDA) with plain
    SGD: group g's code from the input corrupted at its own level, ``h_g = s(x~_g W_g^T + b_g)``,
    the reconstruction ``l = b' + sum_g h_g W_g``, and per group ``dW_g = dh_g^T x~_g + h_g^T dz``
    (its encoder sees its own x~_g, so the one stacked product of :class:`BatchedStep` becomes two
    a group); alternating updates move only the active group's W_g, b_g (and b'), as the model's
    ``after_backward`` freezes the others under autograd. The groups draw their corruptions from
    the generator in the order ``CompositeDA.training_loss`` does, so the run follows the autograd
    step's trajectory up to summation order; its epoch against autograd's and a DA's:
    ``scripts/bench_train.py`` (``composite_s``, ``composite_autograd_s``)."""

    def __init__(self, model: network.CompositeDA, optimizer: SGD, noise: Corruption, batch_size: int,
                 device: torch.device, precision: str = "fp32", compiled: bool = False):
        if not (isinstance(model, network.CompositeDA) and model.loss_name == "cross_entropy"
                and isinstance(optimizer, SGD) and len(optimizer.param_groups) == 1 and plain_sgd(optimizer)):
            raise ValueError("the composite step trains a cross-entropy composite DA with plain SGD")
        self.model, self.optimizer, self.noise = model, optimizer, noise
        n, d = batch_size, model.n_input
        f32 = dict(dtype=model.W.dtype, device=device)
        # Per group, [dh_g; h_g] and [x~_g; dz]: its update is one product, as BatchedStep's is.
        self.A = [torch.empty(1, 2 * n, g.stop - g.start, **f32) for g in model.groups]
        self.B = [torch.empty(1, 2 * n, d, **f32) for g in model.groups]
        self.products = [products_for(precision, model.W.data[rows].unsqueeze(0), n, compiled) for rows in model.groups]
        self.x, self.logits, self.dz, self.tmp = (torch.empty(n, d, **f32) for _ in range(4))
        self._init_loss_sums(1, device)

    def begin_epoch(self) -> None:
        for products in self.products:
            products.invalidate()

    @no_grad
    def __call__(self, x_all: torch.Tensor, idx: torch.Tensor, nus: list, generators: list) -> torch.Tensor:
        m, n = self.model, idx.shape[1]
        b, b_prime = m.b.data, m.b_prime.data
        x, logits, dz, tmp = self.x[:n], self.logits[:n], self.dz[:n], self.tmp[:n]
        groups = [(rows, self.A[g][:, :2 * n], self.B[g][:, :2 * n], self.products[g]) for g, rows in enumerate(m.groups)]
        torch.index_select(x_all, 0, idx[0], out=x)
        logits.copy_(b_prime.expand_as(logits))
        for (rows, A, B, products), group_nu in zip(groups, m.group_nus):
            self.noise(x, nus[0] if group_nu is None else float(group_nu), generators[0], out=B[0, :n])
            products.begin()
            products.encode(B[:, :n], b[rows], A[:, n:])
            h = A[0, n:]
            h.sigmoid_() if m.activation == "sigmoid" else h.relu_()
            products.decode(A[:, n:], logits.unsqueeze(0), logits.unsqueeze(0))  # adds h_g W_g to the logits
        loss = (summed_cross_entropy(logits, x, tmp) / n).unsqueeze(0)
        torch.sigmoid(logits, out=dz)
        dz.sub_(x)
        scale = -self.optimizer.param_groups[0]["lr"] / n
        for rows, A, B, products in groups:  # every dh from the weights before the update
            products.backward(dz.unsqueeze(0), A[:, :n])
            dh, h = A[0, :n], A[0, n:]
            dh.mul_(h - h * h) if m.activation == "sigmoid" else dh.mul_(h > 0)
        b_prime.add_(dz.sum(0), alpha=scale)
        for g, (rows, A, B, products) in enumerate(groups):
            if m.active is not None and g != m.active:
                continue
            b[rows].add_(A[0, :n].sum(0), alpha=scale)
            B[0, n:].copy_(dz)
            A.mul_(scale)  # -lr/n folded into [dh_g; h_g]: W_g += [dh_g; h_g]^T [x~_g; dz]
            products.update(A, B)
        self.loss_sums.add_(loss, alpha=n)
        return loss


class FusedStep(BatchedStep):
    """The fused step of one model: the batched step with M = 1, called like :class:`AutogradStep`."""

    def __init__(self, model: network.DenoisingAutoencoder, optimizer: SGD, noise: Corruption,
                 batch_size: int, device: torch.device, precision: str = "fp32", compiled: bool = False):
        super().__init__([model], [optimizer], [noise], batch_size, device, precision, compiled)
        self.model, self.optimizer, self.noise = model, optimizer, noise

    def __call__(self, x_all: torch.Tensor, idx: torch.Tensor, nu, generator: torch.Generator) -> torch.Tensor:
        return super().__call__(x_all, idx.unsqueeze(0), [nu], [generator])[0]


class TritonStep(BatchedStep):
    """The plain fused step with masking noise in few kernels (scheda.training.kernels): per minibatch,
    each model's random words from its own generator (as :class:`~scheda.model.noise.Masking` draws
    them, so the masks are the torch step's), the four products, and four Triton kernels for
    all M models; the loss stays in per-block slots on the device (``loss_sums`` [M, blocks]).
    Graphed (CUDA; scheda.training.graphs), one replay runs :attr:`minibatches` minibatches, so
    neither the host's cost per replay nor a launch outside the graph is paid per minibatch; a
    remainder of whole minibatches replays a one-minibatch graph, and an epoch's partial last one
    runs eager. Both graphs are captured when the step is prepared, never inside an epoch.
    Masks are drawn at every noise level, 0 included (a graph cannot skip the draw)."""

    minibatches = 16
    warm_up_minibatches = 1  # what a warm-up (or an eager prepare) runs to compile every kernel

    def __init__(self, models: list[network.DenoisingAutoencoder], optimizers: list[SGD], noises: list[Corruption],
                 batch_size: int, x_all: torch.Tensor, generators: list[torch.Generator], graphed: bool):
        device = x_all.device
        super().__init__(models, optimizers, noises, batch_size, device)
        if not self.plain_sgd or not all(noise.name == "masking" for noise in noises):
            raise ValueError("the Triton step trains with plain SGD and the masking noise (scheda.planning.rules)")
        from scheda.training import kernels

        self.kernels = kernels
        M, n, d = self.x.shape
        self.x_all, self.generators, self.batch_size = x_all, generators, n
        self.words = torch.empty(M, (n * d + 3) // 4, dtype=torch.int64, device=device)
        self.thr = torch.zeros(M, dtype=torch.int32, device=device)
        self._thr: tuple[int, ...] | None = None
        self.loss_sums = kernels.loss_slots(M, d, device)
        self.prepared = False  # its graphs captured (and no more may be: not inside an epoch)
        self.graphed = graphed
        self.backend = graphs_for(device)
        self.graphs: dict[int, tuple[object, torch.Tensor]] = {}

    def set_levels(self, nus: list) -> None:
        """Each model's mask threshold on the device, copied in when a level changes (an epoch's start)."""
        if any(isinstance(nu, torch.Tensor) for nu in nus):
            raise ValueError("the Triton step takes one noise level per epoch (scheda.planning.rules refuses a run "
                             "that draws nu per minibatch)")
        thr = tuple(mask_threshold(nu) for nu in nus)
        if thr != self._thr:
            self._thr = thr
            self.thr.copy_(torch.tensor(thr, dtype=torch.int32))

    @no_grad
    def minibatch(self, x_all: torch.Tensor, idx: torch.Tensor, generators: list) -> None:
        """One update of every model from ``idx`` [M, n'] (n' <= n), at the levels set last."""
        M, n = idx.shape
        d = self.x.shape[2]
        W, b, b_prime = self.W, self.b, self.b_prime
        x = self.x.view(-1)[: M * n * d].view(M, n, d)
        A, B = self.A[:, : 2 * n], self.B[:, : 2 * n]
        dh, h, x_tilde, dz = A[:, :n], A[:, n:], B[:, :n], B[:, n:]
        n_words = (n * d + 3) // 4
        for k, g in enumerate(generators):
            self.words[k, :n_words].random_(generator=g)
        kernels, neg_lr = self.kernels, self.neg_lr()
        kernels.corrupt(x_all, idx, self.words.view(torch.int16), self.thr, x, x_tilde)
        torch.bmm(x_tilde, W.transpose(1, 2), out=h)
        sigmoid = self.activation == "sigmoid"
        kernels.encode(h, b, sigmoid)
        logits = self.logits[:, :n]
        torch.bmm(h, W, out=logits)
        kernels.decode(logits, x, b_prime, neg_lr, dz, self.loss_sums)
        torch.bmm(dz, W.transpose(1, 2), out=dh)
        kernels.backprop(A, b, neg_lr, sigmoid)
        W.baddbmm_(A.transpose(1, 2), B)

    def sequence(self, x_all: torch.Tensor, idx: torch.Tensor, generators: list) -> None:
        """Every minibatch of ``idx`` [M, rows] in order (what one replay of a graph runs)."""
        n = self.batch_size
        for first in range(0, idx.shape[1], n):
            self.minibatch(x_all, idx[:, first:first + n], generators)

    def _graph(self, m: int) -> tuple[object, torch.Tensor]:
        """The graph of a sequence of ``m`` minibatches and the index buffer it reads, captured by
        :meth:`prepare`."""
        if m in self.graphs:
            return self.graphs[m]
        if self.prepared:
            raise RuntimeError(f"no graph of {m} minibatches was captured when the step was prepared: a capture "
                               f"inside an epoch would cost the device a synchronisation")
        n, M = self.batch_size, self.x.shape[0]
        idx = torch.zeros(M, m * n, dtype=torch.long, device=self.x_all.device)
        warm_up = idx[:, :min(m, self.warm_up_minibatches) * n]
        graph = self.backend.capture(lambda: self.sequence(self.x_all, warm_up, self.generators),
                                     lambda: self.sequence(self.x_all, idx, self.generators),
                                     [self.W, self.b, self.b_prime], self.generators, self.loss_sums)
        self.graphs[m] = (graph, idx)
        return self.graphs[m]

    def prepare(self) -> None:
        """Compile the kernels (every code path: :attr:`warm_up_minibatches`) and, graphed, capture
        both graphs now (each synchronises the device once), not inside an epoch; the loss slots
        must then be empty (a run's first epoch, or one just taken). Raises what triton raises
        where it cannot compile (the builder falls back)."""
        if self.graphed:
            for m in (self.minibatches, 1):
                self._graph(m)
        else:
            with undone([self.W, self.b, self.b_prime], self.generators, self.loss_sums):
                self.sequence(self.x_all, torch.zeros(self.x.shape[0], self.warm_up_minibatches * self.batch_size,
                                                      dtype=torch.long, device=self.x_all.device), self.generators)
        self.prepared = True

    def __call__(self, x_all: torch.Tensor, idx: torch.Tensor, nus: list, generators: list) -> None:
        """``idx`` [M, rows]: consecutive minibatches of n rows (the last may be shorter); graphed, a
        whole call replays its graph, any other number of whole minibatches the one-minibatch graph
        each, and a short last one runs eager (:meth:`sequence`: where a call is cut changes no bit)."""
        self.set_levels(nus)
        n, rows = self.batch_size, idx.shape[1]
        whole = rows // n * n if self.graphed else 0
        if whole and whole == self.minibatches * n:
            self._replay(self.minibatches, idx[:, :whole])
        else:
            for first in range(0, whole, n):
                self._replay(1, idx[:, first:first + n])
        if whole < rows:
            self.sequence(x_all, idx[:, whole:], generators)

    def _replay(self, m: int, idx: torch.Tensor) -> None:
        graph, static = self._graph(m)
        static.copy_(idx)
        graph.replay()


class TwoPassStep(TritonStep):
    """The Triton step as two passes over W a minibatch (scheda.training.kernels, "the two-pass
    step"): the decode over W's column tiles, then one pass over its rows that computes dh, updates
    b and W, and encodes the NEXT minibatch from the updated rows; W is read twice and written
    once, where the four-kernel step reads or writes it five times. The first minibatch of a call
    is encoded alone, by the same loop, so where a call starts changes no bit. Its products are
    tl.dot in fp32 (``trainer.precision=fp32``) or three-pass TF32 (``tf32x3``); its masks are
    :class:`TritonStep`'s (each model's words from its own generator, drawn in the same order).
    ``trainer.step=two_pass`` (what else it needs: scheda.planning.rules.the_step_can_train_the_run)."""

    warm_up_minibatches = 2  # a sequence of two runs both modes of the rows pass (alone, and with a next minibatch)

    def __init__(self, models: list[network.DenoisingAutoencoder], optimizers: list[SGD], noises: list[Corruption],
                 batch_size: int, x_all: torch.Tensor, generators: list[torch.Generator], graphed: bool,
                 precision: str = "fp32"):
        if batch_size > TWO_PASS_ROWS or precision not in TWO_PASS_PRECISIONS:
            raise ValueError(f"the two-pass step takes at most {TWO_PASS_ROWS} rows a minibatch, in "
                             f"{' or '.join(TWO_PASS_PRECISIONS)} (scheda.planning.rules)")
        super().__init__(models, optimizers, noises, batch_size, x_all, generators, graphed)
        M, n, d = self.x.shape
        f32 = dict(dtype=self.W.dtype, device=x_all.device)
        self.h = torch.empty(M, n, self.W.shape[1], **f32)
        self.dz = torch.empty(M, n, d, **f32)
        self.xs = torch.empty(2, M, n, d, **f32)  # this minibatch's x and the next one's, in turn
        self.x_tildes = torch.empty(2, M, n, d, **f32)
        self.dot_precision = {"fp32": "ieee", "tf32x3": "tf32x3"}[precision]
        self.loss_sums = self.kernels.two_pass_loss_slots(M, d, x_all.device)  # one a decode program
        self.parts = self.kernels.rows_parts(M, self.W.shape[1], d, n, x_all.device)  # where pass (ii) is split

    def _corrupt(self, x_all: torch.Tensor, idx: torch.Tensor, generators: list, slot: int) -> None:
        n, d = idx.shape[1], self.x.shape[2]
        n_words = (n * d + 3) // 4
        for k, g in enumerate(generators):
            self.words[k, :n_words].random_(generator=g)
        self.kernels.corrupt(x_all, idx, self.words.view(torch.int16), self.thr, self.xs[slot, :, :n],
                             self.x_tildes[slot, :, :n])

    @no_grad
    def sequence(self, x_all: torch.Tensor, idx: torch.Tensor, generators: list) -> None:
        """Every minibatch of ``idx`` [M, rows] in order, each encoded by the pass before it."""
        kernels, n, sigmoid, precision = self.kernels, self.batch_size, self.activation == "sigmoid", self.dot_precision
        W, b, b_prime, h, neg_lr = self.W, self.b, self.b_prime, self.h, self.neg_lr()
        parts = list(idx.split(n, dim=1))
        slot = 0
        self._corrupt(x_all, parts[0], generators, slot)
        kernels.rows_pass(W, b, h, None, None, self.x_tildes[slot, :, :parts[0].shape[1]], neg_lr, sigmoid, n, precision,
                          self.parts)
        for t, part in enumerate(parts):
            m = part.shape[1]
            kernels.decode_pass(h[:, :m], W, b_prime, self.xs[slot, :, :m], neg_lr, self.dz[:, :m], self.loss_sums,
                                n, precision)
            following = None
            if t + 1 < len(parts):
                self._corrupt(x_all, parts[t + 1], generators, 1 - slot)
                following = self.x_tildes[1 - slot, :, :parts[t + 1].shape[1]]
            kernels.rows_pass(W, b, h[:, :m], self.dz[:, :m], self.x_tildes[slot, :, :m], following, neg_lr, sigmoid,
                              n, precision, self.parts)
            slot = 1 - slot


class OneModel(LossSums):
    """A one-model step (:class:`AutogradStep`) called like a M-model one, with M = 1."""

    def __init__(self, step: AutogradStep, device: torch.device):
        self.step = step
        self._init_loss_sums(1, device)

    def __call__(self, x_all: torch.Tensor, idx: torch.Tensor, nus: list, generators: list) -> torch.Tensor:
        loss = self.step(x_all, idx[0], nus[0], generators[0]).unsqueeze(0)
        self.loss_sums.add_(loss, alpha=idx.shape[1])
        return loss


TWO_PASS_ROWS = 128  # the two-pass step holds a minibatch's rows in one program (kernels.MAX_ROWS)
TWO_PASS_PRECISIONS = ("fp32", "tf32x3")


def step_record(step: dict) -> dict:
    """results.json's record of a step (StepChoice.describe, with ``fallback`` once built): the step
    and, as before it, whether it was graphed, a Triton step, the two-pass one."""
    return {"step": step, "cuda_graph": step["cuda_graph"], "triton": step["kind"] in ("triton", "two_pass"),
            "two_pass": step["kind"] == "two_pass"}


@dataclass(frozen=True)
class FinetuneChoice:
    """Which update fine-tunes the rates of ``finetune.lrs``, chosen once in the run's plan
    (scheda.planning.rules.choose_finetune_step): every rate at once by the hand-written step
    (``fused``, plain SGD), captured in a CUDA graph on CUDA (``cuda_graph``), or one rate after
    another with autograd (``finetune.fused=false``: momentum)."""

    fused: bool = True
    cuda_graph: bool = False

    def describe(self) -> dict:
        """What results.json records: fine-tuning computes in fp32 whatever trainer.precision says
        (its products are its own, scheda.training.finetune; bf16 products are the DA steps')."""
        return {"kind": "fused" if self.fused else "autograd", "cuda_graph": self.cuda_graph, "precision": "fp32"}


class GraphedStep(LossSums):
    """A :class:`BatchedStep` captured in one CUDA graph: at the paper's minibatch of 20 a step is
    a few small products, bound by kernel launches, and a replay launches all of them at once.
    The graph reads static buffers: the minibatch rows (``idx``) and the noise level of each
    model, copied in on the device before each replay. The run's generators are registered with
    the graph, so each replay advances them as an eager step would: masks stay seeded, and a
    checkpoint's generator state resumes the run. A minibatch of another size (an epoch's
    partial last one) runs the eager step. ``trainer.cuda_graph`` turns it on (CUDA only; what
    else it needs: scheda.planning.rules.graph_can_capture_the_step)."""

    def __init__(self, step: BatchedStep, x_all: torch.Tensor, generators: list[torch.Generator]):
        self.step, self.x_all, self.generators = step, x_all, generators
        self.backend = graphs_for(x_all.device)  # off CUDA the stand-in (the suite's; the rules refuse a user's)
        self.eager = functools.partial(BatchedStep.__call__, step)  # the M-model call, also for a FusedStep
        M, n = step.x.shape[0], step.x.shape[1]
        self.batch_size = n
        self.idx = torch.zeros(M, n, dtype=torch.long, device=x_all.device)
        self.nus = torch.zeros(M, dtype=step.W.dtype, device=x_all.device)
        self.graph = None
        self.out: dict[str, torch.Tensor] = {}  # the loss tensor the captured step returns
        self.loss_sums = step.loss_sums  # the graph adds into the step's own sums

    def _capture(self) -> None:
        """The step captured once (scheda.training.graphs), reading the static buffers."""
        step = self.step
        nus = list(self.nus.unbind())

        def run() -> None:
            self.out["loss"] = self.eager(self.x_all, self.idx, nus, self.generators)

        self.graph = self.backend.capture(lambda: self.eager(self.x_all, self.idx, nus, self.generators), run,
                                          [step.W, step.b, step.b_prime], self.generators, self.loss_sums)

    def prepare(self) -> None:
        """Capture now (it synchronises the device once), not inside the first epoch."""
        if self.graph is None:
            self._capture()

    def __call__(self, x_all: torch.Tensor, idx: torch.Tensor, nus: list, generators: list) -> torch.Tensor:
        """The batched step's signature: ``idx`` [M, n], one nu (a float) per model."""
        if any(isinstance(nu, torch.Tensor) for nu in nus):
            raise ValueError("a CUDA graph replays one noise level per epoch, not one drawn per minibatch "
                             "(scheda.planning.rules refuses such a run)")
        if idx.shape[1] != self.batch_size:
            return self.eager(x_all, idx, nus, generators)
        self.prepare()
        self.idx.copy_(idx)
        for k, nu in enumerate(nus):
            self.nus[k].fill_(nu)
        self.graph.replay()
        return self.out["loss"].clone()
