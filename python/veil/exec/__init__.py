"""Running a split plan that is already made: fetch from the server, bind, decrypt, finish.

Nothing here plans, chooses or writes: ``veil.session`` makes the plan and
hands it over; ``veil.ciphers`` holds the column ciphers used to decrypt.
"""
