"""Training: corpus, tokenizer, token cache, models, gradient sync and the one training loop."""
