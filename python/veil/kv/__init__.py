"""MiniCrypt: encrypted, compressed key-value packs over unmodified stores."""
