"""The audit wing: pairs and self-check, attacks, statistics, corpus audit and its report."""
