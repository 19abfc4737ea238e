"""The artifact wing: the vocabulary artifact (vectors, manifest, checksums), its neighbour table, where it lives (local, cache, gs://)."""
