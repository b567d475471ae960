"""The model and its parts: the tied-weight denoising autoencoder (and its composite), the
noise processes that corrupt its input, the noise schedules, and the optimiser."""

from scheda.model.autoencoder import (ACTIVATIONS, LOSSES, CompositeDA, DenoisingAutoencoder, build_model)

__all__ = ["ACTIVATIONS", "LOSSES", "CompositeDA", "DenoisingAutoencoder", "build_model"]
