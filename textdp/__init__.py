"""textdp: word-level metric differential privacy for text corpora.

The core library (this package) holds the mechanisms, the vocabulary artifacts and the
accounting. It never imports Apache Beam: the Beam code lives in the sibling packages
``transforms`` and ``pipelines`` and calls into this one.
"""

__version__ = "0.1.0"
