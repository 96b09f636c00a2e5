"""A differential fuzzer of ``veil.documents``: random documents and operations over a
schema mixing every attribute, run through Veil and through plain pymongo on the same
server, results compared (``python -m tests.docfuzz SEED N``)."""
