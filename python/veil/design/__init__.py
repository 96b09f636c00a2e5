"""Physical designs: the model, its JSON file and the greedy designer."""
