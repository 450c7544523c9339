"""Models: the GPU backbones' tokenizers and templates, the tiny local model, the warm starts and the models
that ship with the project."""
