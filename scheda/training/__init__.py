"""Training: the minibatch step (torch, fused, Triton), the loop, its callbacks, checkpoints, and the rules between config groups."""
