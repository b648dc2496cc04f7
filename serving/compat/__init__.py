"""Everything on the serving side that knows which Ray or vLLM is installed: Ray's private
imports, where vLLM keeps its server's arguments, whether Ray Serve LLM's vLLM imports
resolve, and each preset checked against vLLM's own parser and config classes."""
