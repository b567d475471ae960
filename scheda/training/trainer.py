"""The training loop: plain minibatch SGD over one tensor of training data on the device.

:class:`ModelState` holds one model's training state (optimiser, noise, schedule, generator,
callbacks, epoch, history); :class:`Trainer` is the one loop, for M >= 1 of them: a run is
M = 1, a fused sweep (``trainer.parallel``) M > 1 with one batched step for all, in the one
lockstep loop that fine-tuning uses too (scheda.training.loop). Each epoch
draws a permutation from each model's generator and slices minibatches from it, so there is
no per-sample Python in the hot loop, and a seed (plus a checkpoint's generator state on
resume) fixes every permutation and corruption.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence

from scheda.config import Component, register
from scheda.training.checkpoint import load_model_weights
from scheda.utils.errors import CheckpointError, ConfigError, DivergenceError
from scheda.utils.interrupt import NEVER, Interrupted
from scheda.model.noise import Corruption
from scheda.model.optim import SGD
from scheda.model.schedule import NoiseSchedule, Stage
from scheda.training.loop import Loop, minibatch_slices
from scheda.runs.rundir import CAP, PATIENCE, SCHEDULE, step_of_flags
from scheda.training.step import step_record
from scheda.training.steps import REGISTRY, StepChoice
from scheda.utils.lazy import lazy

torch = lazy("torch", globals())
network = lazy("scheda.model.network", globals())

log = logging.getLogger(__name__)
PRECISIONS = ("fp32", "tf32", "tf32x3", "bf16")


@dataclass
class ParallelConfig:
    """A fused sweep: train every combination of these in ONE process with batched matmuls, each
    model with its own schedule, checkpoints and evaluation under models/<k>/. ``nu`` sets the
    schedule's own noise-level key (``schedule.nu`` for constant, ``schedule.nu0`` for
    decreasing/increasing). Empty: the run's own value."""

    nu: List[float] = field(default_factory=list)
    lr: List[float] = field(default_factory=list)
    seed: List[int] = field(default_factory=list)


@register("trainer")
@dataclass
class TrainerConfig(Component):
    """How the run trains: device, minibatch, epochs, checkpoints, the fused step, a fused sweep."""

    device: str = "auto"  # auto (CUDA when present) | cpu | cuda | cuda:N
    batch_size: int = 20  # minibatch size; the loss is averaged over it (LISA-lab dA tutorial: 20)
    max_epochs: Optional[int] = None  # null: the schedule's length; else cut it, or extend its last stage
    # Training to convergence: stop a model once this many evaluations in its schedule's last stage
    # brought no new best validation error (scheda.training.callbacks.Patience); max_epochs is then
    # the cap. The stages before the last run their length: a ScheDA's K epochs a level are the
    # method's. null: train to the schedule's end.
    patience: Optional[int] = None
    min_epochs: int = 0  # patience stops no model before this many epochs (a replica read at a given epoch)
    checkpoint_every: int = 50  # also at every schedule stage end; 0: stage ends only
    # Disk: keep only the newest N checkpoints, and the one of the best validation evaluation (the
    # model the patience rule keeps, which scheda-export and init_from= read); null: every one.
    keep_checkpoints: Optional[int] = None
    num_threads: Optional[int] = None  # torch CPU threads; null: torch's default
    progress_bar: bool = True
    # Which update trains the models (scheda.planning.rules.choose_step, once, in the run's plan):
    # auto: the Triton step on a CUDA device wherever it applies (its kernels: scheda.training.kernels;
    # about 45 kernels a minibatch become M + 8; the CPU keeps the torch step, which measures faster
    # there), else the fused one wherever it applies, else autograd | autograd: torch's autograd and
    # the optimiser (any model, loss, precision) | fused: the hand-written tied-DA step (cross-entropy
    # + SGD) | triton | two_pass: the Triton step as two passes over W a minibatch (decode; then dh,
    # the update and the next minibatch's encode in one pass over W's rows: TwoPassStep), at most 128
    # rows a minibatch, off until a GPU measures it against the four-kernel Triton step (issue 45).
    # A step asked for by name that cannot train the run is refused in one line.
    step: str = "auto"
    # Capture the fused or Triton step in CUDA graphs (one launch per minibatch instead of ~45):
    # 2.75-4.2x faster than eager on an H100 (docs/results/table1_gpu.md's check). null: on wherever it
    # applies (a CUDA device, the fused or Triton step, plain SGD, fp32/tf32; rules.choose_step); true:
    # refuse a run it cannot take; false: eager.
    cuda_graph: Optional[bool] = None
    # 0.2's three flags for the step, read as trainer.step (with a warning) until 0.4: fused=false is
    # step=autograd, triton=true step=triton, triton=false step=fused, two_pass=true step=two_pass
    # (fused=true, 0.2's default, is auto: scheda.runs.rundir.step_of_flags).
    fused: Optional[bool] = None
    triton: Optional[bool] = None
    two_pass: Optional[bool] = None
    # fp32 | tf32 (CUDA matmuls in TF32) | tf32x3 (the two-pass step's products in three-pass TF32:
    # tensor cores at near-fp32 accuracy) | bf16 (the fused and composite steps' products in bf16 with
    # fp32 weights and elementwise work, scheda.training.products; autocast under trainer.step=autograd;
    # refused where the device has no bf16 arithmetic: a CPU without AVX512-BF16 or AMX)
    precision: str = "fp32"
    # The bf16 step's update in one pass over the fp32 weights a minibatch (the update added and W
    # rounded to its bf16 copy in one loop, scheda.training.products.OnePassBf16Products), compiled by
    # torch.compile once per machine (a cache on disk; TORCHINDUCTOR_CACHE_DIR moves it). null: where
    # the fused or composite step trains in bf16 on a CPU with plain SGD for at least
    # scheda.planning.rules.COMPILE_EPOCHS epochs (a shorter run would not win back the 2 to 8 s
    # of compilation); true: refuse a run it cannot take; false: never (the eager update, three passes).
    compile: Optional[bool] = None
    parallel: ParallelConfig = field(default_factory=ParallelConfig)

    def check(self) -> None:
        if self.batch_size < 1:
            raise self.invalid("batch_size", "must be >= 1")
        if self.patience is not None and self.patience < 1:
            raise self.invalid("patience", "must be >= 1 (evaluations without a new best) or null (no early stop)")
        if self.min_epochs < 0:
            raise self.invalid("min_epochs", "must be >= 0")
        if self.checkpoint_every < 0:
            raise self.invalid("checkpoint_every", "must be >= 0 (0: only at stage ends)")
        if self.keep_checkpoints is not None and self.keep_checkpoints < 1:
            raise self.invalid("keep_checkpoints", "must be >= 1 (the newest kept; a resume needs one) or null (all)")
        if self.num_threads is not None and self.num_threads < 1:
            raise self.invalid("num_threads", "must be >= 1 or null")
        if self.precision not in PRECISIONS:
            raise self.invalid("precision", f"must be {', '.join(PRECISIONS[:-1])} or {PRECISIONS[-1]}")
        self._read_old_step_flags()
        steps = ("auto", *REGISTRY)  # a step registered after this module's import too
        if self.step not in steps:
            raise self.invalid("step", f"must be {', '.join(steps[:-1])} or {steps[-1]}")

    def _read_old_step_flags(self) -> None:
        """0.2's trainer.fused / triton / two_pass, read as the one trainer.step they ask for."""
        old = {key: getattr(self, key) for key in ("fused", "triton", "two_pass") if getattr(self, key) is not None}
        if not old:
            return
        given = ", ".join(f"trainer.{k}={str(v).lower()}" for k, v in old.items())
        if self.step != "auto":
            raise ConfigError(f"trainer.step={self.step} and {given} both choose the step: set trainer.step only "
                              f"({given} is 0.2's way of saying it)")
        step = step_of_flags(self.fused, self.triton, self.two_pass)
        log.warning("%s: read as trainer.step=%s (the flags are one setting now; they go in 0.4)", given, step)
        self.step, self.fused, self.triton, self.two_pass = step, None, None, None

    def resolve_device(self) -> torch.device:
        """'auto' is CUDA when present, else CPU; an explicit CUDA device must exist. Other kinds
        torch knows (mps, xpu, meta) are refused here, before any data: scheda runs and is tested
        on CPU and CUDA only."""
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        try:
            device = torch.device(self.device)
        except RuntimeError:
            raise self.invalid("device", "is not a device: use auto, cpu, cuda or cuda:N") from None
        if device.type not in ("cpu", "cuda"):
            raise self.invalid("device", "is not a device scheda runs on: use auto, cpu, cuda or cuda:N")
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"trainer.device={self.device} but CUDA is not available here: "
                              f"use trainer.device=auto or cpu")
        if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"trainer.device={self.device} but this machine has {torch.cuda.device_count()} CUDA "
                              f"device(s): use cuda:0 .. cuda:{torch.cuda.device_count() - 1} (or CUDA_VISIBLE_DEVICES)")
        return device


def setup_process(trainer: TrainerConfig, device: torch.device) -> None:
    """What a run sets in its process, once, from its trainer's values (the config only holds
    them): torch's threads, and TF32 matmuls on CUDA only when asked for (off by default, for
    exactness). On a CPU whose cores other work keeps busy it warns (:func:`busy_cores`)."""
    if trainer.num_threads:
        torch.set_num_threads(trainer.num_threads)
    torch.backends.cuda.matmul.allow_tf32 = trainer.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = trainer.precision == "tf32"
    if device.type == "cpu":
        warning = busy_cores(torch.get_num_threads())
        if warning:
            log.warning(warning)


def busy_cores(threads: int, others: float | None = None, cores: int | None = None) -> str | None:
    """The warning for torch threads that outnumber the idle cores: OpenMP's threads spin while
    they wait for each other, and on cores other work holds an epoch takes several times longer
    (scripts/bench_train.py at 500 hidden units on 2 cores, one kept busy: 23 s against 5.5 s
    idle; 9.8 s with OMP_WAIT_POLICY=PASSIVE, which is slower on idle cores: 7.7 s). ``others``:
    the processes running beside this one now (None: :func:`running_elsewhere`; the load average
    would still count the user's last command). None when the threads fit, when that cannot be
    told, or when the user chose the wait policy."""
    import os

    if threads < 2 or os.environ.get("OMP_WAIT_POLICY"):
        return None
    others = running_elsewhere() if others is None else others
    if others is None:
        return None
    cores = cores or os.cpu_count() or 1
    idle = cores - others
    if idle >= threads - 0.5:
        return None
    return (f"other work keeps this machine's cores busy ({others:g} process{'' if others == 1 else 'es'} running "
            f"beside this run on {cores} cores) and torch runs {threads} threads, which then wait on each other (several times slower): set "
            f"trainer.num_threads={max(1, math.floor(idle + 0.5))}, or OMP_WAIT_POLICY=PASSIVE (docs/performance.md)")


def running_elsewhere(samples: int = 5, pause: float = 0.02) -> float | None:
    """How many threads run beside this process, the fewest of a few looks at Linux's
    ``procs_running`` (this process counts one); None elsewhere."""
    seen = []
    for _ in range(samples):
        try:
            with open("/proc/stat") as f:
                seen.append(next(int(line.split()[1]) for line in f if line.startswith("procs_running")))
        except (OSError, StopIteration, ValueError, IndexError):
            return None
        time.sleep(pause)
    return max(0, min(seen) - 1)


class Callback:
    """Hooks the loop calls with one model's state (scheda.training.trainer.ModelState); ``epoch``
    in ``metrics`` counts completed epochs (1 after the first)."""

    def on_fit_start(self, state: ModelState) -> None: ...

    def on_epoch_end(self, state: ModelState, metrics: dict[str, Any]) -> None: ...

    def on_stage_end(self, state: ModelState, metrics: dict[str, Any]) -> None: ...

    def on_fit_end(self, state: ModelState) -> None: ...

    def on_interrupt(self, state: ModelState) -> None:
        """A signal stopped training mid-epoch (``state.partial`` says where)."""

    def close(self) -> None:
        """Release resources; called even when training fails."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class EpochProgress:
    """Sums over one epoch's minibatches, kept on the device until the epoch ends (the loss's in
    the shape of the step's ``loss_sums`` row), and where
    the epoch stands (``next_first``: the first row of the next minibatch in ``perm``), so an
    interrupted epoch can be checkpointed and finished exactly."""

    def __init__(self, nu, random_nu: bool, perm: torch.Tensor, start: float, device: torch.device):
        self.nu, self.random_nu, self.perm, self.start = nu, random_nu, perm, start
        self.loss_sum = torch.zeros((), device=device)
        self.nu_sum = torch.zeros((), device=device)
        self.n_batches = self.n_examples = self.next_first = 0
        self.seconds_before = 0.0  # spent on this epoch before an interrupt

    def add(self, n: int, n_batches: int, nu) -> None:
        """``n_batches`` minibatches of ``n`` rows in all ran (their losses stay with the step)."""
        if self.random_nu:
            self.nu_sum += nu
        self.n_batches += n_batches
        self.n_examples += n
        self.next_first += n

    def state_dict(self) -> dict[str, Any]:
        return {"perm": self.perm.cpu(), "loss_sum": self.loss_sum.cpu(), "nu_sum": self.nu_sum.cpu(),
                "n_batches": self.n_batches, "n_examples": self.n_examples, "next_first": self.next_first,
                "seconds": self.seconds_before + time.perf_counter() - self.start}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        device = self.loss_sum.device
        self.perm = state["perm"].to(device)
        self.loss_sum, self.nu_sum = state["loss_sum"].to(device), state["nu_sum"].to(device)
        self.n_batches, self.n_examples = int(state["n_batches"]), int(state["n_examples"])
        self.next_first, self.seconds_before = int(state["next_first"]), float(state["seconds"])


class ModelState:
    """One model's training state: its optimiser, noise, schedule, generator, callbacks, epoch,
    updates and history; ``step`` (a StepChoice, the plan's) says which update trains it, built by
    the loop. ``fit`` runs it alone: a :class:`Trainer` of one. Callbacks receive it as ``state``."""

    def __init__(
        self,
        model: network.DenoisingAutoencoder,
        optimizer: SGD,
        noise: Corruption,
        schedule: NoiseSchedule,
        train_x: torch.Tensor,
        batch_size: int,
        generator: torch.Generator,
        callbacks: Sequence[Callback] = (),
        step: StepChoice = StepChoice(),
    ):
        self.model = model
        self.optimizer = optimizer
        self.noise = noise
        self.schedule = schedule
        self.train_x = train_x
        self.batch_size = batch_size
        self.generator = generator
        self.step = step
        self.callbacks: list[Callback] = list(callbacks)
        self.epoch = 0  # completed epochs
        self.updates = 0  # completed minibatch updates
        self.history: list[dict[str, Any]] = []
        self.converged = False  # the patience rule stopped it before its schedule's end
        self.ran: dict[str, Any] | None = None  # the step that trained it, once built (StepChoice.build)
        self.stop = NEVER  # a run sets its StopRequest (signals)
        self.on_batch = None  # called with each minibatch's size (a progress bar), if set
        self.partial: EpochProgress | None = None  # the epoch an interrupt stopped, or one to finish
        self._partial_state: dict[str, Any] | None = None
        self._alone: Trainer | None = None

    @property
    def device(self) -> torch.device:
        return self.train_x.device

    @property
    def finished(self) -> bool:
        """Its schedule has ended, or the patience rule stopped it (the loop trains it no more)."""
        return self.converged or self.epoch >= self.schedule.total_epochs

    @property
    def switches(self) -> list[dict[str, Any]]:
        """Where the noise level changed, from the history: ``{"epoch": e, "nu": nu}`` means that
        after ``e`` completed epochs nu became ``nu`` (None for a schedule that draws it per
        minibatch). Evaluation "after the last epoch at each level" and run labels read these."""
        out: list[dict[str, Any]] = []
        for metrics in self.history:
            nu = None if self.schedule.per_minibatch else metrics["nu"]
            if not out or out[-1]["nu"] != nu:
                out.append({"epoch": metrics["epoch"] - 1, "nu": nu})
        return out

    def outcome(self, patience: bool) -> dict[str, Any]:
        """results.json's record of its training: where it got to, its losses and switches, why it
        stopped (once finished: the patience rule, its cap under one (``patience``), or its schedule's
        end) and the step that trained it (which a fallback may have changed from the plan's)."""
        stopped = {}
        if self.finished:
            stopped["stopped_by"] = PATIENCE if self.converged else CAP if patience else SCHEDULE
        ran = step_record(self.ran) if self.ran is not None else {}
        return {"epochs": self.epoch, "final_train_loss": self.history[-1]["loss"] if self.history else None,
                "switches": self.switches, "history": self.history, **stopped, **ran}

    @property
    def alone(self) -> "Trainer":
        """The loop of this model alone (kept: its step is built once)."""
        if self._alone is None:
            self._alone = Trainer([self])
        return self._alone

    def fit(self) -> list[dict[str, Any]]:
        """Train until the schedule ends; returns the per-epoch metrics."""
        self.alone.fit()
        return self.history

    def train_epoch(self) -> dict[str, Any]:
        """One epoch, without callbacks (a benchmark's unit)."""
        return self.end_epoch(self.alone.run_minibatches([self])[0])

    def begin_epoch(self) -> "EpochProgress":
        """Set nu and draw the epoch's permutation (the generator's first draw of the epoch),
        or take up the epoch an interrupt stopped."""
        self.model.train()
        start = time.perf_counter()
        self.model.set_epoch(self.epoch)
        nu = self.schedule.nu_at(self.epoch)
        if self._partial_state is not None:
            epoch = EpochProgress(nu, self.schedule.per_minibatch, torch.empty(0), start, self.device)
            epoch.load_state_dict(self._partial_state)
            self._partial_state = None
            return epoch
        perm = torch.randperm(self.train_x.shape[0], generator=self.generator, device=self.device)
        return EpochProgress(nu, self.schedule.per_minibatch, perm, start, self.device)

    def keep_partial(self, epoch: "EpochProgress") -> None:
        """Keep the epoch an interrupt stopped, and let the callbacks checkpoint it."""
        self.partial = epoch
        for cb in self.callbacks:
            cb.on_interrupt(self)

    def end_epoch(self, epoch: "EpochProgress") -> dict[str, Any]:
        """Close an epoch: divergence check, metrics, history (callbacks are the caller's)."""
        # The epoch's one host-device sync; non-finite weights count as divergence too, so a
        # checkpoint never stores them even when the last update broke them.
        finite = torch.stack([torch.isfinite(p).all() for p in self.model.parameters()]).all()
        epoch_loss, finite = (epoch.loss_sum.sum() / epoch.n_examples).item(), bool(finite)
        mean_nu = (epoch.nu_sum / epoch.n_batches).item() if epoch.random_nu else epoch.nu
        seconds = epoch.seconds_before + time.perf_counter() - epoch.start
        if not (finite and math.isfinite(epoch_loss)):
            what = f"training loss became {epoch_loss}" if not math.isfinite(epoch_loss) else "weights became non-finite"
            raise DivergenceError(
                f"{what} in epoch {self.epoch + 1} (nu={mean_nu:g}): lower optim.lr; "
                f"the checkpoints written before it are kept"
            )
        self.epoch += 1
        self.updates += epoch.n_batches
        metrics = {
            "epoch": self.epoch,
            "nu": mean_nu,
            "loss": epoch_loss,
            "seconds": seconds,
            "stage": self.schedule.stage_index(self.epoch - 1),
            "stage_end": self.schedule.is_stage_end(self.epoch - 1),
        }
        self.history.append(metrics)
        log.info("epoch %d nu=%.4g loss=%.4f (%.2fs)", self.epoch, mean_nu, epoch_loss, seconds)
        return metrics

    def run_epoch_callbacks(self, metrics: dict[str, Any]) -> None:
        for cb in self.callbacks:
            cb.on_epoch_end(self, metrics)
        if metrics["stage_end"]:
            for cb in self.callbacks:
                cb.on_stage_end(self, metrics)

    def state_dict(self) -> dict[str, Any]:
        partial = {"partial_epoch": self.partial.state_dict()} if self.partial is not None else {}
        return {
            **partial,
            # Cloned: in a fused sweep the weights are views of a stacked tensor, and saving a
            # view would write the whole stack.
            "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "updates": self.updates,
            "history": list(self.history),
            "generator": self.generator.get_state(),
            "callbacks": {type(cb).__name__: cb.state_dict() for cb in self.callbacks},
            "schedule": [[s.nu, s.epochs] for s in self.schedule.stages],
        }

    def resume(self, saved: dict[str, Any]) -> None:
        """Continue from ``saved`` (a loaded checkpoint, scheda.training.checkpoint.load_checkpoint):
        its weights and state, or one line saying it is another run's."""
        load_model_weights(self.model, saved)
        try:
            self.load_state_dict(saved)
        except (KeyError, ValueError, RuntimeError) as exc:
            raise CheckpointError(f"{saved['path']} cannot resume this run ({exc}); "
                                  f"check the config matches the checkpoint's run") from None
        stages = [Stage(nu, epochs) for nu, epochs in saved["schedule"]]
        if not stages or not self.schedule.agrees_with(stages):
            log.warning("the schedule differs from the checkpoint's; continuing with the configured one")
        log.info("resumed from %s at epoch %d", saved["path"], self.epoch)
        if self.epoch > self.schedule.total_epochs:  # a shorter trainer.max_epochs cannot untrain it
            log.warning("the checkpoint has trained %d epochs, more than the %d configured now: nothing is trained, "
                        "and the run stands at epoch %d", self.epoch, self.schedule.total_epochs, self.epoch)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where a checkpoint left off (weights, optimizer, RNG, schedule)."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        # "step": 0.2's name of the updates' count, read for one release
        self.epoch, self.updates = int(state["epoch"]), int(state["updates"] if "updates" in state else state["step"])
        self.history = list(state["history"])
        self.generator.set_state(state["generator"].cpu())
        self._partial_state = state.get("partial_epoch")
        for cb in self.callbacks:
            cb.load_state_dict(state["callbacks"].get(type(cb).__name__, {}))


class Trainer(Loop):
    """The training loop for M >= 1 models' states (scheda.training.loop.Loop: the active set,
    one step for all their models, rebuilt when one drops out): each keeps its own schedule,
    generator, callbacks (checkpoints, evaluation, TensorBoard) and history, as if it ran alone;
    a model finishes when its schedule ends. ``seconds`` per epoch is the time of the whole
    lockstep epoch."""

    def __init__(self, states: Sequence[ModelState]):
        states = list(states)
        first = states[0]
        if any(t.train_x is not first.train_x or t.batch_size != first.batch_size for t in states):
            raise ValueError("models trained in lockstep must share the training tensor and the batch size")
        self.x_all, self.batch_size = first.train_x, first.batch_size
        super().__init__(states, self._build_step)

    @property
    def states(self) -> list[ModelState]:
        return self.members

    def _build_step(self, active: list[ModelState]):
        step = active[0].step.build([t.model for t in active], [t.optimizer for t in active],
                                    [t.noise for t in active], self.batch_size, self.x_all,
                                    [t.generator for t in active])
        for t in active:  # what trains them, as results.json records it: the step built, not only the planned
            t.ran = {**step.ran.describe(), "fallback": step.fallback}
        return step

    def on_fit_start(self) -> None:
        for t in self.states:
            for cb in t.callbacks:
                cb.on_fit_start(t)

    def on_fit_end(self) -> None:
        for t in self.states:
            for cb in t.callbacks:
                cb.on_fit_end(t)

    def close(self) -> None:
        for t in self.states:
            for cb in t.callbacks:
                cb.close()

    def run_epoch(self, active: list[ModelState]) -> None:
        """One epoch of every active model, each closed and its callbacks run in turn."""
        for t, e in zip(active, self.run_minibatches(active)):
            t.run_epoch_callbacks(t.end_epoch(e))

    def run_minibatches(self, active: list[ModelState]) -> list[EpochProgress]:
        """The epoch's updates: no host-device synchronisation here (the losses and the mean nu
        accumulate on the device; ``end_epoch`` reads them once). An interrupt checkpoints every
        model where it stands and stops."""
        step = self.step_for(active)
        step.begin_epoch()  # whatever wrote the weights since the last epoch (a resume, a load) is read again
        epochs = [t.begin_epoch() for t in active]
        generators = [t.generator for t in active]
        n, bs, device = self.x_all.shape[0], self.batch_size, self.x_all.device
        if len({e.next_first for e in epochs}) != 1:
            raise ValueError("the models of a fused sweep stopped at different minibatches: resume them alone")
        lead = active[0]
        self.seed_losses(step, epochs)
        rows = bs * step.minibatches
        for first, idx in minibatch_slices([e.perm for e in epochs], epochs[0].next_first, rows):
            nus = [t.schedule.draw(t.generator, device) if e.random_nu else e.nu for t, e in zip(active, epochs)]
            step(self.x_all, idx, nus, generators)
            for k, e in enumerate(epochs):
                e.add(idx.shape[1], math.ceil(idx.shape[1] / bs), nus[k])
            if lead.on_batch is not None:
                lead.on_batch(idx.shape[1])
            if lead.stop.requested and epochs[0].next_first < n:
                self.take_losses(step, epochs)
                for t, e in zip(active, epochs):
                    t.keep_partial(e)
                where = f"epoch {lead.epoch + 1}, minibatch {epochs[0].n_batches} of {math.ceil(n / bs)}"
                raise Interrupted(lead.stop.signum, f"{lead.stop.name} in {where}", forward=lead.stop.forward())
        self.take_losses(step, epochs)
        return epochs

    @staticmethod
    def seed_losses(step, epochs: list[EpochProgress]) -> None:
        """The step sums the epoch's losses; an epoch taken up after an interrupt hands its sums
        back to it (in the step's own shape: the same additions as if never stopped)."""
        step.loss_sums.zero_()
        for k, e in enumerate(epochs):
            if e.loss_sum.shape == step.loss_sums[k].shape:
                step.loss_sums[k].copy_(e.loss_sum)
                e.loss_sum = torch.zeros((), device=e.loss_sum.device)

    @staticmethod
    def take_losses(step, epochs: list[EpochProgress]) -> None:
        """The epochs' sums back from the step (no synchronisation); a sum of another step's
        shape (an epoch stopped under another step) is added to them."""
        for e, loss in zip(epochs, step.take_loss_sums().unbind()):
            e.loss_sum = e.loss_sum + loss
