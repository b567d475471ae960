"""Metric loggers: one interface, any number of backends at once (``logger=[tensorboard,csv]``).
The interface and what a run logs are in :mod:`scheda.loggers.base`; each backend is one module
(tensorboard, csv, mlflow) that registers its schema in the ``logger`` group."""

from scheda.loggers.base import (LoggerConfig, Loggers, LoggingCallback, MetricLogger, build_loggers, filter_grid,
                                 hparams, normalised_filters, top_words)

__all__ = ["LoggerConfig", "Loggers", "LoggingCallback", "MetricLogger", "build_loggers", "filter_grid", "hparams",
           "normalised_filters", "top_words"]
