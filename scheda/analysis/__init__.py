"""Analysis of learnt features beyond the protocol's tables (Geras & Sutton 2015, Sections
4.1.2-4.1.3): filter images (``scheda-plot-filters``), the feature-similarity count of Table 2
(``scheda-feature-similarity``), concatenated features (``scheda-concat-eval``), and what they
share (``core``: run labels, figures, cosine similarity)."""
