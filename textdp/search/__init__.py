"""The search wing: exact, int8-prefiltered and Annoy nearest-word search, and distances/diameters over the vocabulary."""
