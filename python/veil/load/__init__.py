"""Loading plaintext sources into an encrypted server (``veil load``)."""
