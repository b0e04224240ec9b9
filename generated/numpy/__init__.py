"""Generated forward code for numpy: one module per architecture of the built-in Transformer, BERT and Llama."""
