"""What a run trains: the models (:mod:`~.model`: the LLM families, the word-level LSTM, DeepFM), the corpus and
its tokenizer (:mod:`~.corpus`, :mod:`~.tokenizer`), the CTR data (:mod:`~.ctr`) and the token cache and batches
(:mod:`~.data`). The lowest layer that imports torch models: capture, the syncs and the loop build on it."""
