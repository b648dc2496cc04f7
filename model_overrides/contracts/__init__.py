"""What the installed vLLM must do for DSV4, read from its source and checked: the HC-state
contract between the decoder and the MTP layer, the SwiGLU clamp, how it reads a
checkpoint's config, and which weights a load wrote."""
