"""dsv4-serve: serving DeepSeek-V4 with MTP speculative decoding."""
