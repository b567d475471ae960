"""scheda's SGD against torch.optim.SGD: the same update bit for bit, and each loads the
other's state (checkpoints written before scheda had its own SGD still resume)."""

import copy

import pytest
import torch

from scheda.model.optim import SGD


def _params(seed: int) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(7, 5, generator=g)), torch.nn.Parameter(torch.randn(5, generator=g))]


@pytest.mark.parametrize("momentum,weight_decay", [(0.0, 0.0), (0.9, 0.0), (0.0, 1e-3), (0.5, 1e-2)])
def test_the_update_and_the_state_are_torchs(momentum, weight_decay):
    ours, theirs = _params(0), _params(0)
    opt = SGD(ours, lr=0.1, momentum=momentum, weight_decay=weight_decay)
    ref = torch.optim.SGD(theirs, lr=0.1, momentum=momentum, weight_decay=weight_decay)
    g = torch.Generator().manual_seed(1)
    for step in range(6):
        grads = [torch.randn(p.shape, generator=g) for p in ours]
        for p, q, grad in zip(ours, theirs, grads):
            p.grad, q.grad = grad.clone(), grad.clone()
        opt.step()
        ref.step()
        if step == 2:  # swap states across the two implementations mid-run, through torch.save's copy
            mine, torchs = copy.deepcopy(opt.state_dict()), copy.deepcopy(ref.state_dict())
            assert mine["param_groups"][0]["params"] == torchs["param_groups"][0]["params"] == [0, 1]
            opt = SGD(ours, lr=1.0)
            opt.load_state_dict(torchs)
            ref = torch.optim.SGD(theirs, lr=1.0, momentum=momentum, weight_decay=weight_decay)
            ref.load_state_dict(mine)
    for p, q in zip(ours, theirs):
        assert torch.equal(p, q)
    opt.zero_grad(set_to_none=False)
    assert all(torch.count_nonzero(p.grad) == 0 for p in ours)
    opt.zero_grad()
    assert all(p.grad is None for p in ours)


def test_a_state_that_does_not_fit_is_refused():
    opt = SGD(_params(0), lr=0.1)
    with pytest.raises(ValueError, match="does not match"):
        opt.load_state_dict(SGD(_params(0)[:1], lr=0.1).state_dict())
    nesterov = torch.optim.SGD(_params(0), lr=0.1, momentum=0.9, nesterov=True).state_dict()
    with pytest.raises(ValueError, match="Nesterov"):
        opt.load_state_dict(nesterov)
