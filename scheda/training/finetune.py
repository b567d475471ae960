"""Supervised fine-tuning as a training recipe beside the DA's (the paper's supplementary material):
a one-hidden-layer network whose hidden layer starts as the trained encoder (W, b) is trained on the
labelled training split for each learning rate of a grid (``finetune.lrs``), in the lockstep loop DA
training uses (scheda.training.loop), every rate at once by one hand-written step or one after another
with autograd, as the run's plan chose (scheda.planning.rules.choose_finetune_step); each epoch is
followed by its validation and test error, and the state is checkpointed so a resume repeats the
uninterrupted run. What fine-tuning starts from and what it reports is evaluation's
(scheda.evaluation.finetune).

The softmax output layer starts from a linear classifier's weights when one is given (the
frozen-feature logistic regression at its chosen C: one-vs-rest scores are a good starting point for
softmax logits, the argmax, hence the starting error, is the same), else from zeros.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional

import numpy as np
from omegaconf import II

from scheda.config import Component, register
from scheda.data import Splits
from scheda.model.optim import SGD
from scheda.runs.rundir import FINETUNE_LAST, pack_correct
from scheda.training.checkpoint import load_checkpoint, save_checkpoint
from scheda.training.graphs import graphs_for
from scheda.training.loop import Loop, minibatch_slices
from scheda.training.step import FinetuneChoice, stack_views
from scheda.utils.errors import ConfigError, DivergenceError
from scheda.utils.interrupt import NEVER, Interrupted, StopRequest
from scheda.utils.lazy import lazy, no_grad
from scheda.utils.progress import bar

torch = lazy("torch", globals())
F = lazy("torch.nn.functional", globals(), "F")
network = lazy("scheda.model.network", globals())
log = logging.getLogger(__name__)
# The console's lines while no progress bar shows (a console that is a file or a pipe: Slurm, nohup):
# a logger outside scheda.training.finetune, whose per-epoch lines go to train.log only.
console = logging.getLogger("scheda.finetune")
CONSOLE_EVERY = 60.0  # seconds between those lines, besides each rate's first epoch and its end
LAST = FINETUNE_LAST


@register("finetune")
@dataclass
class FinetuneConfig(Component):
    """Supervised fine-tuning after unsupervised training (off by default): a one-hidden-layer
    network initialised from the encoder, trained for every learning rate in ``lrs``; the test
    error is reported at the (lr, epoch) of lowest validation error. The paper: lr in
    {0.00125 * 2^-k, k = 0..4}, up to 2000 epochs, no early stopping."""

    enabled: bool = False
    standalone: bool = False  # true: skip unsupervised training, fine-tune init_from's encoder
    lrs: List[float] = field(default_factory=lambda: [0.00125 * 2.0 ** -k for k in range(5)])
    max_epochs: int = 2000
    patience: Optional[int] = None  # stop an lr after this many epochs without a new best val error
    batch_size: int = II("trainer.batch_size")
    momentum: float = 0.0
    fused: bool = True  # every learning rate at once by one hand-written step (plain SGD); false: one after another
    init_output: str = "classifier"  # classifier: the frozen-feature LR's weights at its chosen C | zero
    # Write the resumable state (checkpoints/finetune_last.pt, every rate's weights) and the best
    # nets every this many epochs, when a rate finishes, and on an interrupt (from the state of the
    # last whole epoch, kept in memory): a GPU epoch of the fused rates is shorter than writing them.
    checkpoint_every: int = 1

    @property
    def skips_training(self) -> bool:
        """Fine-tuning ``init_from``'s encoder instead of training an autoencoder first."""
        return self.enabled and self.standalone

    def check(self) -> None:
        if not self.lrs or any(not (lr > 0 and math.isfinite(lr)) for lr in self.lrs):
            raise ConfigError(f"finetune.lrs={list(self.lrs)} must be a non-empty list of positive numbers")
        if self.max_epochs < 1:
            raise self.invalid("max_epochs", "must be >= 1")
        if self.patience is not None and self.patience < 1:
            raise self.invalid("patience", "must be >= 1 or null (no early stopping)")
        if self.batch_size < 1:
            raise self.invalid("batch_size", "must be >= 1")
        if self.init_output not in ("classifier", "zero"):
            raise self.invalid("init_output", "must be classifier or zero")
        if self.checkpoint_every < 1:
            raise self.invalid("checkpoint_every", "must be >= 1 (epochs between checkpoints)")


class FusedFinetune:
    """One SGD step of M fine-tuning nets at once (the learning-rate grid as one fused sweep),
    written out by hand: with ``h_l = s(h_{l-1} W_l^T + b_l)`` through a stack's layers (one for a
    one-layer DA; ``h_0 = x``), ``l = h_L V^T + c`` and ``g = (softmax(l) - onehot(y)) / n``, the
    gradients are ``dV = g^T h_L``, ``dc = sum g``, ``d_L = g V * s'(h_L)``, ``dW_l = d_l^T h_{l-1}``,
    ``db_l = sum d_l`` and ``d_{l-1} = d_l W_l * s'(h_{l-1})`` (taken before ``W_l`` moves), each a
    batched product over the M nets, whose parameters become views of stacked tensors. Every buffer
    is allocated once and the loss is summed on the device (``loss_sums``), so ``graphed`` (the
    plan's choice on CUDA) one minibatch is captured in a graph when the step is built, never
    inside an epoch, and replayed (a partial last minibatch runs eager; a capture that fails says
    so, runs eager and says why in ``fallback``). Plain SGD: each net's own learning rate, no
    momentum."""

    def __init__(self, nets: list[network.FinetuneNet], lrs: list[float], x_all: torch.Tensor, y_all: torch.Tensor,
                 batch_size: int, graphed: bool = False):
        M, C, n = len(nets), nets[0].V.shape[0], batch_size
        below = len(nets[0].below_W)
        self.Ws = [stack_views([net.below_W[i] for net in nets]) for i in range(below)]
        self.Ws.append(stack_views([net.W for net in nets]))
        self.bs = [stack_views([net.below_b[i] for net in nets]) for i in range(below)]
        self.bs.append(stack_views([net.b for net in nets]))
        self.V, self.c = stack_views([net.V for net in nets]), stack_views([net.c for net in nets])
        self.W, self.b = self.Ws[-1], self.bs[-1]  # the top layer's (the DA's own)
        self.sigmoid = [act is torch.sigmoid for act in (*nets[0]._below_act, nets[0]._act)]
        self.x_all, self.y_all, self.batch_size = x_all, y_all, batch_size
        f32 = dict(dtype=self.W.dtype, device=self.W.device)
        self.x = torch.empty(M, n, self.Ws[0].shape[2], **f32)
        self.h = [torch.empty(M, n, W.shape[1], **f32) for W in self.Ws]  # each layer's codes
        self.dh = [torch.empty(M, n, W.shape[1], **f32) for W in self.Ws]
        self.logits = torch.empty(M, n, C, **f32)
        self.g = torch.empty(M, n, C, **f32)
        self.y = torch.empty(M, n, dtype=torch.long, device=self.W.device)
        self.minus_one = torch.full((M, n, 1), -1.0, **f32)
        self.neg_lr = torch.tensor([-lr for lr in lrs], **f32)
        self.loss_sums = torch.zeros(M, **f32)
        self.idx = torch.zeros(M, n, dtype=torch.long, device=self.W.device)
        self.graph = None
        self.fallback: str | None = None  # why a graph the plan chose could not be captured
        if graphed:
            self._capture()

    @staticmethod
    def _rows(buffer: torch.Tensor, n: int) -> torch.Tensor:
        """``buffer`` [M, n_max, k] as [M, n, k] on its first elements (a partial minibatch)."""
        M, _, k = buffer.shape
        return buffer.view(-1)[: M * n * k].view(M, n, k)

    @no_grad
    def eager(self, idx: torch.Tensor) -> None:
        """One minibatch of every net from ``idx`` [M, n'] (n' <= n)."""
        M, n = idx.shape
        x, g, logits = self._rows(self.x, n), self._rows(self.g, n), self._rows(self.logits, n)
        h, dh = [self._rows(a, n) for a in self.h], [self._rows(d, n) for d in self.dh]
        y = self.y.view(-1)[: M * n].view(M, n)
        flat = idx.reshape(-1)
        torch.index_select(self.x_all, 0, flat, out=x.view(M * n, x.shape[2]))
        torch.index_select(self.y_all, 0, flat, out=y.view(-1))
        inputs = [x, *h[:-1]]  # what each layer reads
        for W, b, a_in, a, sigmoid in zip(self.Ws, self.bs, inputs, h, self.sigmoid):
            torch.baddbmm(b.unsqueeze(1), a_in, W.transpose(1, 2), out=a)
            a.sigmoid_() if sigmoid else a.relu_()
        torch.baddbmm(self.c.unsqueeze(1), h[-1], self.V.transpose(1, 2), out=logits)
        torch.log_softmax(logits, dim=2, out=g)
        self.loss_sums.sub_(g.gather(2, y.unsqueeze(2)).sum(dim=(1, 2)))  # summed cross-entropy
        g.exp_().scatter_add_(2, y.unsqueeze(2), self.minus_one[:, :n])  # softmax - onehot(y)
        scale = (self.neg_lr / n)[:, None, None]  # -lr_k/n: the mean loss's gradient, SGD's step
        g.mul_(scale)
        torch.bmm(g, self.V, out=dh[-1])
        self._times_slope(dh[-1], h[-1], self.sigmoid[-1])
        self.V.baddbmm_(g.transpose(1, 2), h[-1])
        self.c.add_(g.sum(1))
        for i in reversed(range(len(self.Ws))):
            if i > 0:  # the layer below's gradient, through W_i before it moves
                torch.bmm(dh[i], self.Ws[i], out=dh[i - 1])
                self._times_slope(dh[i - 1], h[i - 1], self.sigmoid[i - 1])
            self.Ws[i].baddbmm_(dh[i].transpose(1, 2), inputs[i])
            self.bs[i].add_(dh[i].sum(1))

    @staticmethod
    def _times_slope(d: torch.Tensor, a: torch.Tensor, sigmoid: bool) -> None:
        """``d *= s'`` at the layer's codes ``a``: ``a (1 - a)`` for a sigmoid, ``a > 0`` for a ReLU."""
        d.mul_(a - a * a) if sigmoid else d.mul_(a > 0)

    def _capture(self) -> None:
        """One full minibatch captured (scheda.training.graphs; no generator: no noise here)."""
        try:
            self.graph = graphs_for(self.W.device).capture(lambda: self.eager(self.idx), lambda: self.eager(self.idx),
                                                           [*self.Ws, *self.bs, self.V, self.c], [], self.loss_sums)
        except RuntimeError as exc:  # the same step eager: slower, never wrong; recorded in the results
            self.fallback = f"capturing its graph failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
            log.warning("fine-tuning runs without a CUDA graph: %s", self.fallback)

    def __call__(self, idx: torch.Tensor) -> None:
        if self.graph is None or idx.shape[1] != self.batch_size:
            return self.eager(idx)
        self.idx.copy_(idx)
        self.graph.replay()


class AutogradFinetune:
    """One net's SGD step with autograd (momentum, or ``finetune.fused=false``), called as
    :class:`FusedFinetune` is, with M = 1: ``idx`` [1, n'], the loss summed in ``loss_sums``."""

    def __init__(self, tuning: "Tuning", x_all: torch.Tensor, y_all: torch.Tensor):
        self.net, self.optimizer, self.x_all, self.y_all = tuning.net, tuning.optimizer, x_all, y_all
        self.loss_sums = torch.zeros(1, device=x_all.device)

    def __call__(self, idx: torch.Tensor) -> None:
        idx = idx[0]
        loss = F.cross_entropy(self.net(self.x_all.index_select(0, idx)), self.y_all.index_select(0, idx))
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        self.optimizer.step()
        self.loss_sums += loss.detach() * idx.shape[0]


class Tuning:
    """One learning rate of the grid being fine-tuned: its net, optimiser, generator (the
    minibatch order), per-epoch history and best evaluation so far."""

    def __init__(self, index: int, lr: float, net: network.FinetuneNet, optimizer: SGD, generator: torch.Generator,
                 max_epochs: int, patience: int | None):
        self.index, self.lr, self.net, self.optimizer, self.generator = index, lr, net, optimizer, generator
        self.max_epochs, self.patience = max_epochs, patience
        self.history: list[dict[str, Any]] = []
        self.best: dict[str, Any] = {}

    @property
    def epoch(self) -> int:
        return len(self.history)

    @property
    def finished(self) -> bool:
        """Its last epoch ran, or it ran out of patience (``finetune.patience`` epochs without a new best)."""
        waited = self.patience is not None and self.epoch - self.best["epoch"] >= self.patience
        return self.epoch >= self.max_epochs or waited

    def state_dict(self) -> dict[str, Any]:
        return {"index": self.index, "net": {k: v.detach().clone() for k, v in self.net.state_dict().items()},
                "optimizer": self.optimizer.state_dict(), "generator": self.generator.get_state(),
                "history": list(self.history), "best": dict(self.best)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"].cpu())
        self.history, self.best = list(state["history"]), dict(state["best"])

    def result(self) -> dict[str, Any]:
        secs = [h["seconds"] for h in self.history]
        best = self.best
        return {"index": self.index, "lr": self.lr, "best_epoch": best["epoch"], "val_error": best["val_error"],
                "test_error": best["test_error"], "test_n": best.get("test_n"), "test_correct": best.get("test_correct"),
                "epochs_run": len(self.history), "seconds_per_epoch": float(np.mean(secs)) if secs else None,
                "history": self.history}


@dataclass(frozen=True)
class FinetunePlan:
    """One model's fine-tuning as its run's plan decided it (scheda.planning.plan): its settings,
    the device, the step (fused, graphed) and the model's seed, which draws each rate's minibatches."""

    config: FinetuneConfig
    device: Any  # torch.device
    step: FinetuneChoice
    seed: int
    below: tuple = ()  # a stacked run's frozen layers (scheda.training.stack.Stack.layers), fine-tuned with it


class Finetuner:
    """Runs the learning-rate grid in one job on data already on the device, in the lockstep loop
    DA training uses (:class:`FinetuneLoop`): every rate at once by :class:`FusedFinetune`
    (``finetune.fused``, plain SGD; the plan's choice, ``step``), else one after another with autograd; resumable from
    ``checkpoints/finetune_last.pt`` (written atomically every
    ``checkpoint_every`` epochs, when a rate finishes, and from the last whole epoch's state on an
    interrupt)."""

    def __init__(self, plan: FinetunePlan, da: network.DenoisingAutoencoder, data: Splits,
                 inputs: dict[str, torch.Tensor], output_dir: Path, init: Any = None, loggers: Any = None,
                 stop: StopRequest = NEVER):
        """``init``: the classifier the output layer starts from (scheda.model.network.FinetuneNet); ``loggers``: where each
        epoch's errors go (``log_dict``, scheda.loggers), or None."""
        config, device = plan.config, plan.device
        self.config, self.da, self.device, self.seed, self.stop = config, da, device, plan.seed, stop
        self.step, self.below = plan.step, plan.below
        self.fallbacks: list[str] = []  # why a graph the plan chose did not run
        self.lrs = [float(lr) for lr in config.lrs]
        self.init = init if config.init_output == "classifier" else None
        self.loggers = loggers
        self.dir = output_dir / "checkpoints"
        self.x = inputs
        self.y = {s: torch.as_tensor(getattr(data, f"{s}_y"), device=device) for s in ("train", "val", "test")}
        self.n_classes = int(max(int(y.max()) for y in self.y.values())) + 1
        self.done: dict[int, dict[str, Any]] = {}  # learning rate index -> its result
        self._resume: dict[int, dict[str, Any]] = {}  # index -> the state of a rate in progress
        self._best: dict[int, dict[str, Any]] = {}  # index -> its best net since the last checkpoint, to write

    @property
    def fused(self) -> bool:
        return self.step.fused

    def load(self, path: Path) -> bool:
        """Pick up a fine-tuning that was cut short; False when ``path`` holds none."""
        if not (path / LAST).exists():
            return False
        state = load_checkpoint(path / LAST, map_location=self.device)
        self.done = {r.get("index", i): r for i, r in enumerate(state["per_lr"])}
        current = state.get("current") or {}
        models = current.get("models", [{**current, "index": len(self.done)}] if current else [])
        self._resume = {m["index"]: m for m in models}
        log.info("resuming fine-tuning from %s (%d learning rates done)", path / LAST, len(self.done))
        return True

    def run(self) -> dict[str, Any]:
        pending = [i for i in range(len(self.lrs)) if i not in self.done]
        for group in ([pending] if self.fused and pending else [[i] for i in pending]):
            FinetuneLoop(self, [self._start(i) for i in group]).fit()
        per_lr = [self.done[i] for i in range(len(self.lrs))]
        best = min(per_lr, key=lambda r: (r["val_error"], r["lr"]))
        step = {**self.step.describe(), **({"fallback": self.fallbacks[0]} if self.fallbacks else {})}
        return {"step": step, "per_lr": per_lr, "chosen": {k: best.get(k) for k in ("lr", "best_epoch", "val_error", "test_error",
                                                                      "test_n", "test_correct")}}

    def _start(self, index: int) -> Tuning:
        net = network.FinetuneNet(self.da, self.n_classes, self.init, below=self.below).to(self.device)
        lr = self.lrs[index]
        tuning = Tuning(index, lr, net, SGD(net.parameters(), lr=lr, momentum=self.config.momentum),
                        torch.Generator(device=self.device).manual_seed(self.seed + 1000 * (index + 1)),
                        self.config.max_epochs, self.config.patience)
        tuning.best = {"epoch": 0, "val_error": net.error(self.x["val"], self.y["val"]), **self._test(net)}
        if index in self._resume:
            tuning.load_state_dict(self._resume.pop(index))
        return tuning

    def build_step(self, active: list[Tuning]):
        """The step of the rates in ``active``: all at once by :class:`FusedFinetune`, or one alone with autograd."""
        if self.fused:
            step = FusedFinetune([t.net for t in active], [t.lr for t in active], self.x["train"], self.y["train"],
                                 self.config.batch_size, graphed=self.step.cuda_graph)
            if step.fallback:
                self.fallbacks.append(step.fallback)
            return step
        [tuning] = active
        return AutogradFinetune(tuning, self.x["train"], self.y["train"])

    def snapshot(self, tunings: list[Tuning]) -> tuple[dict[str, Any], bool]:
        """What a checkpoint would hold now (the rates in progress, copied, and the best nets not
        written yet), and whether a rate finished with this epoch (its result is written at once)."""
        newly = False
        for t in tunings:
            if t.finished and t.index not in self.done:
                self.done[t.index] = t.result()
                newly = True
        running = [t.state_dict() for t in tunings if not t.finished]
        return {"current": {"models": running} if running else None, "bests": dict(self._best)}, newly

    def epoch(self, active: list[Tuning], step) -> None:
        """One lockstep epoch of the ``active`` rates by ``step``, each then evaluated."""
        n, bs = self.x["train"].shape[0], self.config.batch_size
        start = time.perf_counter()
        perms = [torch.randperm(n, generator=t.generator, device=self.device) for t in active]
        step.loss_sums.zero_()
        for _, idx in minibatch_slices(perms, 0, bs):
            step(idx)
        losses = (step.loss_sums / n).tolist()
        seconds = time.perf_counter() - start  # the lockstep's epoch, as a fused DA sweep reports it
        for t, train_loss in zip(active, losses):
            self._end_epoch(t, train_loss, seconds)

    def _end_epoch(self, t: Tuning, train_loss: float, seconds: float) -> None:
        """Divergence check, validation and test error, history, the best checkpoint."""
        if not math.isfinite(train_loss):
            raise DivergenceError(f"fine-tuning loss became {train_loss} at lr={t.lr:g}, epoch {t.epoch + 1}: "
                                  f"use smaller finetune.lrs")
        val, tested = t.net.error(self.x["val"], self.y["val"]), self._test(t.net)
        t.history.append({"epoch": t.epoch + 1, "train_loss": train_loss, "val_error": val,
                          "test_error": tested["test_error"], "seconds": seconds})
        self._log(t.lr, t.history[-1])
        if val < t.best["val_error"]:  # written with the next checkpoint
            t.best = {"epoch": t.epoch, "val_error": val, **tested}
            self._best[t.index] = {"model": {k: v.detach().clone() for k, v in t.net.state_dict().items()},
                                   "epoch": t.epoch, "lr": t.lr, **t.best}

    def _test(self, net: network.FinetuneNet) -> dict[str, Any]:
        """Test error and which test images it got right (for McNemar's test between models)."""
        correct = net.correct(self.x["test"], self.y["test"])
        return {"test_error": int((~correct).sum()) / correct.numel(), "test_n": correct.numel(),
                "test_correct": pack_correct(correct)}

    def save(self, current: dict[str, Any] | None, bests: dict[int, dict[str, Any]]) -> None:
        """The best nets found since the last checkpoint (``bests``), then the rates done and the
        state of those in progress (``{"models": [...]}``): a resume finds the best nets its records name."""
        for index, best in sorted(bests.items()):
            save_checkpoint(self.dir / f"finetune_best_lr{index}.pt", best)
            if self._best.get(index) is best:
                del self._best[index]
        done = [self.done[i] for i in sorted(self.done)]
        save_checkpoint(self.dir / LAST, {"model": {}, "kind": "finetune", "per_lr": done,
                                          "current": current, "epoch": len(done)})

    def _log(self, lr: float, h: dict[str, Any]) -> None:
        log.info("finetune lr=%g epoch %d: loss %.4f val %.4f test %.4f (%.1fs)", lr, h["epoch"], h["train_loss"],
                 h["val_error"], h["test_error"], h["seconds"])
        if self.loggers is not None:
            self.loggers.log_dict({f"finetune/lr_{lr:g}/{key}": h[key] for key in ("train_loss", "val_error", "test_error")},
                                  h["epoch"])


class FinetuneLoop(Loop):
    """Rates of the grid fine-tuned in lockstep (scheda.training.loop.Loop: the active set, the
    step rebuilt when a rate finishes or runs out of patience), each epoch evaluated; the state
    written every ``checkpoint_every`` epochs and when a rate finishes, and on an interrupt or a
    failure from the last whole epoch's state (kept in memory)."""

    def __init__(self, tuner: Finetuner, tunings: list[Tuning]):
        super().__init__(tunings, tuner.build_step)
        self.tuner = tuner
        self.ticks = bar(tuner.config.max_epochs, "finetune lr=" + ",".join(f"{t.lr:g}" for t in tunings), "epoch",
                         initial=min(t.epoch for t in tunings))
        self.ran = 0
        self.saved: dict[str, Any] | None = None  # the state after the last whole epoch
        self.written = False  # whether it is on disk
        self.said = -math.inf  # when the console last had a line (without a bar)

    def run_epoch(self, active: list[Tuning]) -> None:
        self.tuner.epoch(active, self.step_for(active))
        self.ran += 1
        self.saved, newly = self.tuner.snapshot(self.members)
        self.written = self.ran % self.tuner.config.checkpoint_every == 0 or newly or self.saved["current"] is None
        if self.written:
            self.tuner.save(**self.saved)
        self.ticks.update(1)
        if self.ticks.disable:  # no bar on a console that is not a terminal: a line now and then instead
            self.say(active)
        stop = self.tuner.stop
        if stop.requested and any(not t.finished for t in self.members):  # after the epoch's state, as DA training
            epoch = max(t.epoch for t in active)
            raise Interrupted(stop.signum, f"{stop.name} in fine-tuning epoch {epoch}", forward=stop.forward())

    def say(self, active: list[Tuning]) -> None:
        """The console's line on the rates of this epoch: at a rate's first epoch and its end, and
        at most every CONSOLE_EVERY seconds between."""
        now = time.monotonic()
        ending = [t for t in active if t.finished]
        if not (ending or any(t.epoch == 1 for t in active) or now - self.said >= CONSOLE_EVERY):
            return
        self.said = now
        for t in active:
            h, state = t.history[-1], "done" if t.finished else f"of at most {t.max_epochs}"
            console.info("finetune lr=%g epoch %d %s: val %.4f test %.4f (best val %.4f at epoch %d)", t.lr,
                         t.epoch, state, h["val_error"], h["test_error"], t.best["val_error"], t.best["epoch"])

    def on_fit_end(self) -> None:
        for t in self.members:  # finished before this call (a resumed rate at its last epoch)
            self.tuner.done.setdefault(t.index, t.result())

    def on_fit_stopped(self, exc: BaseException) -> None:
        if self.saved is not None and not self.written:
            self.tuner.save(**self.saved)

    def close(self) -> None:
        self.ticks.close()

