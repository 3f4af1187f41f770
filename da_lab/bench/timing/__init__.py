"""Speed: the hook's cost and decode speed against the stock engine in the same run."""
