"""The optimiser: plain minibatch SGD, as in the paper (momentum and weight decay optional)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping


from scheda.config import Component, register, typed
from scheda.utils.lazy import lazy, no_grad

torch = lazy("torch", globals())


@register("optim")
@dataclass
class SGDConfig(Component):
    """Plain minibatch SGD, as in the paper."""

    name: str = "sgd"
    lr: float = 0.01  # paper grid: 0.002, 0.01, 0.05 (ScheDA continuations use 0.01)
    momentum: float = 0.0
    weight_decay: float = 0.0

    def check(self) -> None:
        if not self.lr > 0:
            raise self.invalid("lr", "must be > 0")
        if not 0 <= self.momentum < 1:
            raise self.invalid("momentum", "must be in [0, 1)")
        if self.weight_decay < 0:
            raise self.invalid("weight_decay", "must be >= 0")

    def build(self, params) -> SGD:
        return SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)


def build_optimizer(config: Mapping, params) -> SGD:
    return typed("optim", config).build(params)


class SGD:
    """Minibatch SGD with optional momentum and weight decay: torch.optim.SGD's update, op for
    op, and its state_dict format (checkpoints load either way). Not torch.optim.SGD itself:
    its first call imports torch._dynamo, about a second of every run's start, and a run only
    ever needs these few lines. One parameter group."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        self.param_groups: list[dict[str, Any]] = [
            {"params": list(params), "lr": lr, "momentum": momentum, "weight_decay": weight_decay}]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    @no_grad
    def step(self) -> None:
        """torch.optim.SGD's multi-tensor update: one kernel per operation for all parameters
        (what it does on a GPU, where a small model's step is bound by kernel launches)."""
        for group in self.param_groups:
            lr, momentum, weight_decay = group["lr"], group["momentum"], group["weight_decay"]
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            if weight_decay != 0:
                grads = torch._foreach_add(grads, params, alpha=weight_decay)
            if momentum != 0:
                bufs, old = [], []
                for p, g in zip(params, grads):
                    state = self.state.setdefault(p, {})
                    if "momentum_buffer" in state:
                        old.append((state["momentum_buffer"], g))
                    else:
                        state["momentum_buffer"] = torch.clone(g).detach()
                    bufs.append(state["momentum_buffer"])
                if old:
                    old_bufs, old_grads = (list(t) for t in zip(*old))
                    torch._foreach_mul_(old_bufs, momentum)
                    torch._foreach_add_(old_bufs, old_grads)
                grads = bufs
            torch._foreach_add_(params, grads, alpha=-lr)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_().zero_()

    def state_dict(self) -> dict[str, Any]:
        """torch.optim.SGD's layout: per-parameter state by index, the group's settings."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "dampening": 0, "nesterov": False,
                           "maximize": False, "params": [index[id(p)] for p in group["params"]]})
        state = {index[id(p)]: dict(s) for p, s in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Ours or torch.optim.SGD's (plain SGD, momentum, weight decay; not dampening,
        Nesterov or maximize, which no run here sets)."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
                len(g["params"]) != len(own["params"]) for g, own in zip(groups, self.param_groups)):
            raise ValueError("the optimizer state does not match this model's parameters")
        for g in groups:
            if g.get("dampening", 0) != 0 or g.get("nesterov") or g.get("maximize"):
                raise ValueError("the optimizer state uses dampening, Nesterov or maximize, which SGD here does not")
        by_index = {}
        for g, own in zip(groups, self.param_groups):
            own.update(lr=g["lr"], momentum=g["momentum"], weight_decay=g["weight_decay"])
            by_index.update(zip(g["params"], own["params"]))
        self.state = {}
        for i, s in state_dict["state"].items():
            p = by_index[int(i)]
            self.state[p] = {k: v.to(device=p.device, dtype=p.dtype) if torch.is_tensor(v) else v for k, v in s.items()}
