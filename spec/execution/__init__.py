"""Running generated code: loading it (`loading`), `tspec run` and decoding (`run`), weight
files (`weights`) and the maps from PyTorch and Hugging Face checkpoints (`checkpoints`)."""
