"""The exposure ledger (issue 29, items 3-4): what every committed run released per author, and the cap.

No Beam here: ``keys`` (the operator's secret key, the keyed hash of an author id, the key's fingerprint),
``budget`` (epsilon-mass arithmetic, exact, and the admission rule), ``store`` (the SQLAlchemy ledger: schema,
reservation, commit, discard, status). The Beam side is ``transforms/ledger.py``; the launcher side and the
``textdp ledger`` command are ``pipelines/ledger.py``; the definitions and the guarantee are in docs/ledger.md.
"""

from textdp.ledger.budget import Mass, admit, mass_distribution
from textdp.ledger.keys import author_hash, key_fingerprint, load_key
from textdp.ledger.store import Ledger, LedgerError

__all__ = ["Ledger", "LedgerError", "Mass", "admit", "author_hash", "key_fingerprint", "load_key", "mass_distribution"]
