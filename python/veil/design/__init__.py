"""Physical designs: the model, its JSON file and the greedy designer."""

# How the server adds SUM/AVG arguments (``veil load --sums``); here, not in
# ``model``, so the command line lists them without importing numpy.
SUM_SCHEMES = ("ashe", "paillier", "none")
