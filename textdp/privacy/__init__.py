"""The privacy wing: accounting (epsilon_0, LAC amplification), the privacy statements and the summaries built from them."""
