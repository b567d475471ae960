"""One minibatch update of a DA, the trainer's inner loop.

Two implementations of the same step:

* :class:`AutogradStep`: corrupt, ``model.loss``, ``backward``, ``optimizer.step``. Serves every
  option (any noise, squared error, any optimizer settings, mixed precision).
* :class:`FusedStep`: the tied-weight cross-entropy DA with SGD, written out by hand. With
  ``a = x~ W^T + b``, ``h = s(a)``, ``l = h W + b'``, ``dz = sigmoid(l) - x`` (summed loss):

      dh = (dz W^T) * s'(a)        dW = dh^T x~ + h^T dz = [dh; h]^T [x~; dz]

  so the weight gradient is ONE matrix product over the stacked ``[dh; h]`` and ``[x~; dz]``,
  and with plain SGD it is fused into the update (``W.addmm_(..., alpha=-lr/n)``). Every
  intermediate lives in buffers allocated once (fresh multi-megabyte tensors per step cost
  page faults that are a large share of a CPU step), the stacked operands are written in
  place, and the loss is accumulated on the device. Five products of n x d x H per step:
  the minimum for a tied DA.
"""

from __future__ import annotations

import torch

from scheda.errors import ConfigError
from scheda.model import CompositeDA, DenoisingAutoencoder
from scheda.noise import NoiseFn, masking


def summed_cross_entropy(logits: torch.Tensor, x: torch.Tensor, tmp: torch.Tensor,
                         batched: bool = False) -> torch.Tensor:
    """sum(softplus(l) - x l) with vectorised kernels only (logaddexp/softplus are scalar loops
    on the CPU, several times slower): softplus(l) = relu(l) - log sigmoid(|l|), where
    sigmoid(|l|) lies in [0.5, 1] and never underflows, and sum relu(l) = (sum l + sum |l|) / 2.
    ``tmp`` is scratch of the logits' shape; ``batched``: one sum per model, [K, n, d] inputs."""
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
    def __init__(self, model: DenoisingAutoencoder, optimizer: torch.optim.Optimizer, noise: NoiseFn,
                 autocast_dtype: torch.dtype | None = None):
        self.model, self.optimizer, self.noise = model, optimizer, noise
        self.autocast_dtype = autocast_dtype

    def __call__(self, x_all: torch.Tensor, idx: torch.Tensor, nu, generator: torch.Generator) -> torch.Tensor:
        x = x_all.index_select(0, idx)
        with torch.autocast(x.device.type, dtype=self.autocast_dtype or torch.float32,
                            enabled=self.autocast_dtype is not None):
            if isinstance(self.model, CompositeDA):  # each group corrupts the input at its own level
                loss = self.model.composite_loss(x, self.noise, nu, generator)
            else:
                loss = self.model.loss(self.noise(x, nu, generator), x)
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        if isinstance(self.model, CompositeDA):
            self.model.mask_gradients()
        self.optimizer.step()
        return loss.detach()


class FusedStep:
    """The hand-written step; see the module docstring. Bit-for-bit it differs from
    :class:`AutogradStep` only by floating-point summation order."""

    def __init__(self, model: DenoisingAutoencoder, optimizer: torch.optim.Optimizer, noise: NoiseFn,
                 batch_size: int, device: torch.device):
        self.model, self.optimizer, self.noise = model, optimizer, noise
        group = optimizer.param_groups[0]
        self.plain_sgd = group["momentum"] == 0 and group["weight_decay"] == 0 and not group.get("nesterov")
        d, H, n = model.n_input, model.n_hidden, batch_size
        f32 = dict(dtype=model.W.dtype, device=device)
        self.x = torch.empty(n, d, **f32)
        self.A = torch.empty(2 * n, H, **f32)  # [dh; h]
        self.B = torch.empty(2 * n, d, **f32)  # [x~; dz]
        self.logits = torch.empty(n, d, **f32)
        self.tmp_d = torch.empty(n, d, **f32)
        self.tmp_h = torch.empty(n, H, **f32)
        self.grad_b = torch.empty(H, **f32)
        self.grad_b_prime = torch.empty(d, **f32)
        self.mask_words = torch.empty((n * d + 3) // 4, dtype=torch.int64, device=device)
        self.mask = torch.empty(n, d, dtype=torch.bool, device=device)
        if not self.plain_sgd:
            for p in model.parameters():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)

    @staticmethod
    def supports(model: DenoisingAutoencoder, optimizer: torch.optim.Optimizer) -> bool:
        return (type(model) is DenoisingAutoencoder and model.loss_name == "cross_entropy"
                and isinstance(optimizer, torch.optim.SGD)
                and len(optimizer.param_groups) == 1)

    def _corrupt(self, x: torch.Tensor, nu, generator, out: torch.Tensor) -> None:
        if self.noise is masking:  # the paper's noise, into preallocated buffers
            masking(x, nu, generator, out=out, words=self.mask_words, mask=self.mask)
        else:
            out.copy_(self.noise(x, nu, generator))

    @torch.no_grad()
    def __call__(self, x_all: torch.Tensor, idx: torch.Tensor, nu, generator: torch.Generator) -> torch.Tensor:
        m = self.model
        W, b, b_prime = m.W, m.b, m.b_prime
        n = idx.shape[0]
        x = torch.index_select(x_all, 0, idx, out=self.x[:n])
        A, B = self.A[: 2 * n], self.B[: 2 * n]
        dh, h = A[:n], A[n:]
        x_tilde, dz = B[:n], B[n:]
        logits, tmp_d, tmp_h = self.logits[:n], self.tmp_d[:n], self.tmp_h[:n]

        self._corrupt(x, nu, generator, x_tilde)
        torch.addmm(b, x_tilde, W.t(), out=h)
        if m.activation == "sigmoid":
            h.sigmoid_()
        else:
            h.relu_()
        torch.addmm(b_prime, h, W, out=logits)
        loss = summed_cross_entropy(logits, x, tmp_d) / n
        torch.sigmoid(logits, out=dz)
        dz.sub_(x)
        torch.mm(dz, W.t(), out=dh)
        if m.activation == "sigmoid":
            torch.mul(h, h, out=tmp_h)
            dh.mul_(torch.sub(h, tmp_h, out=tmp_h))  # s'(a) = h (1 - h)
        else:
            dh.mul_(h > 0)
        torch.sum(dh, 0, out=self.grad_b)
        torch.sum(dz, 0, out=self.grad_b_prime)
        lr = self.optimizer.param_groups[0]["lr"]
        if self.plain_sgd:
            W.addmm_(A.t(), B, alpha=-lr / n)
            b.add_(self.grad_b, alpha=-lr / n)
            b_prime.add_(self.grad_b_prime, alpha=-lr / n)
        else:
            torch.mm(A.t(), B, out=W.grad)
            W.grad.div_(n)
            torch.div(self.grad_b, n, out=b.grad)
            torch.div(self.grad_b_prime, n, out=b_prime.grad)
            self.optimizer.step()
        return loss


def make_step(model: DenoisingAutoencoder, optimizer: torch.optim.Optimizer, noise: NoiseFn, batch_size: int,
              device: torch.device, fused: bool = True, precision: str = "fp32"):
    """The fused step where it applies (and precision is fp32/tf32), else autograd."""
    if fused and precision != "bf16" and FusedStep.supports(model, optimizer):
        return FusedStep(model, optimizer, noise, batch_size, device)
    return AutogradStep(model, optimizer, noise, torch.bfloat16 if precision == "bf16" else None)


class BatchedStep:
    """The fused step for K independent DAs at once (a fused sweep): their weights are
    stacked into one [K, H, d] tensor, which each model's parameters then view, and every
    product is a batched one (``bmm``). Each model draws its own minibatch and corruption
    from its own generator and keeps its own learning rate, so model k follows exactly the
    trajectory it would follow alone (up to summation order)."""

    def __init__(self, models: list[DenoisingAutoencoder], optimizers: list[torch.optim.Optimizer],
                 noises: list[NoiseFn], batch_size: int, device: torch.device):
        for m, opt in zip(models, optimizers):
            group = opt.param_groups[0]
            if not FusedStep.supports(m, opt) or group["momentum"] or group["weight_decay"]:
                raise ConfigError("trainer.parallel needs the plain fused step: model.name=da, model.loss=cross_entropy, "
                                  "optim.momentum=0, optim.weight_decay=0")
        if len({(m.n_input, m.n_hidden, m.activation) for m in models}) != 1:
            raise ConfigError("trainer.parallel models must share model.hidden, model.activation and the data")
        self.models, self.optimizers, self.noises = models, optimizers, noises
        K, d, H, n = len(models), models[0].n_input, models[0].n_hidden, batch_size
        self.activation = models[0].activation
        f32 = dict(dtype=models[0].W.dtype, device=device)
        self.W = torch.stack([m.W.detach() for m in models])
        self.b = torch.stack([m.b.detach() for m in models])
        self.b_prime = torch.stack([m.b_prime.detach() for m in models])
        for k, m in enumerate(models):  # the models now view the stacks
            m.W.data, m.b.data, m.b_prime.data = self.W[k], self.b[k], self.b_prime[k]
        self.x = torch.empty(K, n, d, **f32)
        self.A = torch.empty(K, 2 * n, H, **f32)
        self.B = torch.empty(K, 2 * n, d, **f32)
        self.logits = torch.empty(K, n, d, **f32)
        self.tmp_d = torch.empty(K, n, d, **f32)
        self.tmp_h = torch.empty(K, n, H, **f32)
        self.mask_words = torch.empty((n * d + 3) // 4, dtype=torch.int64, device=device)
        self.mask = torch.empty(n, d, dtype=torch.bool, device=device)

    @torch.no_grad()
    def __call__(self, x_all: torch.Tensor, idx: torch.Tensor, nus: list, generators: list) -> torch.Tensor:
        """``idx``: [K, n] rows of ``x_all`` per model; returns the K minibatch losses."""
        K, n = idx.shape
        W, b, b_prime = self.W, self.b, self.b_prime
        # The first K*n rows of the buffer, contiguous: ``self.x[:, :n]`` is not when n < batch_size
        # (a partial last minibatch), and index_select into its reshape would fill a copy.
        x = self.x.view(-1)[: K * n * self.x.shape[2]].view(K, n, -1)
        torch.index_select(x_all, 0, idx.reshape(-1), out=x.view(K * n, -1))
        A, B = self.A[:, : 2 * n], self.B[:, : 2 * n]
        dh, h = A[:, :n], A[:, n:]
        x_tilde, dz = B[:, :n], B[:, n:]
        logits, tmp_d, tmp_h = self.logits[:, :n], self.tmp_d[:, :n], self.tmp_h[:, :n]
        for k in range(K):  # each model's corruption from its own generator
            if self.noises[k] is masking:
                masking(x[k], nus[k], generators[k], out=x_tilde[k], words=self.mask_words, mask=self.mask)
            else:
                x_tilde[k].copy_(self.noises[k](x[k], nus[k], generators[k]))
        torch.baddbmm(b.unsqueeze(1), x_tilde, W.transpose(1, 2), out=h)
        if self.activation == "sigmoid":
            h.sigmoid_()
        else:
            h.relu_()
        torch.baddbmm(b_prime.unsqueeze(1), h, W, out=logits)
        loss = summed_cross_entropy(logits, x, tmp_d, batched=True) / n
        torch.sigmoid(logits, out=dz)
        dz.sub_(x)
        torch.bmm(dz, W.transpose(1, 2), out=dh)
        if self.activation == "sigmoid":
            torch.mul(h, h, out=tmp_h)
            dh.mul_(torch.sub(h, tmp_h, out=tmp_h))
        else:
            dh.mul_(h > 0)
        scale = torch.tensor([-opt.param_groups[0]["lr"] / n for opt in self.optimizers],
                             dtype=W.dtype, device=W.device)
        b.add_(dh.sum(1) * scale[:, None])
        b_prime.add_(dz.sum(1) * scale[:, None])
        A.mul_(scale[:, None, None])  # -lr_k/n folded into [dh; h]: W += [dh; h]^T [x~; dz]
        W.baddbmm_(A.transpose(1, 2), B)
        return loss
