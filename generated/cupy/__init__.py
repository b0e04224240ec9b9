"""Generated forward code for cupy: one module per architecture of the built-in Transformer, BERT and Llama."""
