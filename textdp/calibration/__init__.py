"""The calibration wing: plausible-deniability statistics (N_w, S_w) and calibrate's report."""
