"""The model and its parts: the tied-weight denoising autoencoder (and its composite), the
noise processes that corrupt its input, the noise schedules, and the optimiser. The
autoencoder's names are here too, where the module ``scheda.model`` held them before the
package (configs pickled then name ``scheda.model.DAConfig``)."""

from scheda.model import autoencoder
from scheda.model.autoencoder import ACTIVATIONS, LOSSES, CompositeConfig, DAConfig, RawConfig, build_model


def __getattr__(name: str):
    """The networks (DenoisingAutoencoder, CompositeDA), imported with torch when first asked for."""
    return getattr(autoencoder, name)


__all__ = ["ACTIVATIONS", "LOSSES", "CompositeConfig", "CompositeDA", "DAConfig", "DenoisingAutoencoder", "RawConfig",
           "build_model"]
