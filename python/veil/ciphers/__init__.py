"""A design's column ciphers: encrypting rows (load, DML) and the keys to decrypt them.

Shared by the loader, the session's writes and the executor; built on the
schemes of ``veil.crypto``.
"""
